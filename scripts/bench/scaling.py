"""1 -> 2 GPUs from `gpu_host.sh OUT ranks KIND`'s metrics: per GPU as a % of the data-on-GPU
rate, the points a second GPU costs, the speed-up; epoch by epoch.

train_resnet.py appends one metrics line per epoch; the ranks part runs, for each step kind
(eager, --cuda-graph) and model, the data-on-GPU ceiling (one epoch) and the loader (three),
each on 1 GPU and then on 2. A file without ceilings (FEEDS=loader) takes them from a file
before it on the command line:

    python scripts/bench/scaling.py OUT/call3/train-fixed.jsonl OUT/call5/train-fixed.jsonl

`--defaults`: runs with train_resnet.py's own step flags (`STEPS_AS=default`: eager on one GPU,
--cuda-graph on two) pair by model, each against the ceiling of its own steps.

`--trial`: instead, each fed run's epochs with what decode="auto"'s trial had done by their
end (rank 0's loader stats): the share its batches got, the batches a second each share fed,
the CPU's bound. An epoch in which the share went to 1 (or came back) paid the CPU's turn.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def runs(lines: list[dict]) -> list[list[dict]]:
    """The metrics lines of each run, in order: a run starts again at its epoch 0."""
    out: list[list[dict]] = []
    for line in lines:
        if not out or line["epoch"] == 0:
            out.append([])
        out[-1].append(line)
    return out


def file_runs(path: Path) -> list[list[dict]]:
    """The runs of one metrics file (JSON lines)."""
    return runs([json.loads(s) for s in path.read_text().splitlines() if s.strip()])


def key(line: dict) -> tuple[str, str]:
    """(model, steps): eager, graph, or graph with --graph-ahead N ("graph ahead N")."""
    if not line.get("cuda_graph"):
        return line["arch"], "eager"
    ahead = line.get("graph_ahead")
    return line["arch"], "graph" if ahead is None else f"graph ahead {ahead}"


def ceiling(ceilings: dict, arch: str, steps: str, ranks: int) -> float:
    """The data-on-GPU rate per GPU of these steps, else of the same steps unbounded (a graph
    replayed with --graph-ahead against the plain graph's ceiling)."""
    found = ceilings.get((arch, steps, ranks))
    return found if found is not None else ceilings[(arch, steps.split(" ahead")[0], ranks)]


def table(files: list[Path], by_model: bool = False) -> list[str]:
    """One row per fed epoch on 1 GPU and on 2: runs of the same model and steps pair (by_model:
    of the same model, whatever their steps)."""
    ceilings: dict[tuple, float] = {}  # (arch, steps, ranks) -> data-on-GPU img/s per GPU
    rows = ["| file | model | steps | epoch | 1 GPU img/s (%) | 2 GPUs per GPU (%) | points "
            "| speed-up |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for path in files:
        fed: dict[tuple, dict[int, list[dict]]] = {}
        for run in file_runs(path):
            first = run[0]
            if first["data_on_gpu"]:
                ceilings[(*key(first), first["ranks"])] = \
                    first["steady_img_per_s"] / first["ranks"]
            else:
                pair = first["arch"] if by_model else key(first)
                fed.setdefault(pair, {})[first["ranks"]] = run
        for by_ranks in fed.values():
            if 1 not in by_ranks or 2 not in by_ranks:
                continue
            (arch, steps1), (_, steps2) = key(by_ranks[1][0]), key(by_ranks[2][0])
            steps = steps1 if steps1 == steps2 else f"{steps1} / {steps2}"
            for one, two in zip(by_ranks[1], by_ranks[2]):
                rate1, rate2 = one["steady_img_per_s"], two["steady_img_per_s"] / 2
                pct1 = 100 * rate1 / ceiling(ceilings, arch, steps1, 1)
                pct2 = 100 * rate2 / ceiling(ceilings, arch, steps2, 2)
                rows.append(f"| {path.parent.name}/{path.name} | {arch} | {steps} | "
                            f"{one['epoch']} | {rate1:,.0f} ({pct1:.1f}%) | {rate2:,.0f} "
                            f"({pct2:.1f}%) | {pct2 - pct1:+.1f} | {2 * rate2 / rate1:.2f}x |")
    return rows


def trial_table(files: list[Path]) -> list[str]:
    rows = ["| file | model | steps | GPUs | epoch | img/s per GPU | share | batches/s by share "
            "| CPU bound |", "|---|---|---|---:|---:|---:|---:|---|---:|"]
    for path in files:
        for run in file_runs(path):
            if run[0]["data_on_gpu"]:
                continue
            for line in run:
                stats = line.get("loader") or {}
                rates = ", ".join(f"{float(share):g}: {rate:.2f}"
                                  for share, rate in (stats.get("share_rates") or {}).items())
                bound = stats.get("cpu_bound")
                rows.append(
                    f"| {path.parent.name}/{path.name} | {line['arch']} | {key(line)[1]} | "
                    f"{line['ranks']} | {line['epoch']} | "
                    f"{line['steady_img_per_s'] / line['ranks']:,.0f} | "
                    f"{stats.get('cpu_share', 0.0):g} | {rates or '-'} | "
                    f"{'-' if bound is None else f'{bound:.2f}'} |")
    return rows


def main(argv: list[str] | None = None) -> list[str]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path, help="train-KIND.jsonl of the ranks part")
    p.add_argument("--trial", action="store_true",
                   help="decode=\"auto\"'s trial by epoch instead of the scaling")
    p.add_argument("--defaults", action="store_true",
                   help="pair each model's 1-GPU and 2-GPU runs whatever their steps")
    args = p.parse_args(argv)
    rows = trial_table(args.files) if args.trial else table(args.files, args.defaults)
    print("\n".join(rows))
    return rows


if __name__ == "__main__":
    main()
