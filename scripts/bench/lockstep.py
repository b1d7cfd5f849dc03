"""What lockstep alone would cost two ranks: each one-GPU run's steady step times, drawn in
pairs, against the step times two DDP ranks had.

Under DDP every step ends when the slower rank's gradients are in, so two ranks whose steps
were as long as one GPU's but varied independently would take, per step, the longer of two
draws from the one-GPU distribution. If the 2-GPU steps are about that long, the spread of a
rank's steps (its late batches, its host's hiccups) is what a second rank costs; if they are
longer, something else is (the all-reduce's own time, the ranks slowing each other's host).
The same figures without each step's wait for data say how much of it the host's own spread
makes, apart from late batches; each phase's mean and spread (the wait, forward, backward, the
rest) say where the steps vary.

Reads the metrics lines `gpu_host.sh OUT ddp` gathers (train_resnet.py's
`steady_step_ms_per_rank`, each labelled with its "row"):

    python scripts/bench/lockstep.py OUT/ddp-photos.jsonl
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def mean_of_pairwise_max(steps: list[float]) -> float:
    """The mean of max(a, b) over every ordered pair of draws (with replacement): what a step
    lasts when two independent ranks, each like this one, must both finish it."""
    ordered = sorted(steps)
    n = len(ordered)
    # In sorted order the i-th value is the larger of a pair in 2i + 1 of the n² pairs.
    return sum(value * (2 * i + 1) for i, value in enumerate(ordered)) / (n * n)


PHASES = ("wait", "forward", "backward")  # train_resnet.StepTimes.PHASES; "other": the rest


def phase_spread(row: dict) -> list[dict]:
    """Per rank, each phase's (mean, standard deviation) in ms over the steady steps, "other"
    being the step's time beyond its phases; empty for metrics without the phases."""
    ranks = row.get("steady_step_ms_per_rank") or []
    lists = [row.get(f"steady_{phase}_ms_per_rank") or [] for phase in PHASES]
    spreads = []
    for rank, steps in enumerate(ranks):
        per_phase = [phase[rank] if rank < len(phase) else [] for phase in lists]
        if len(steps) < 2 or any(len(values) != len(steps) for values in per_phase):
            continue
        other = [step - sum(parts) for step, *parts in zip(steps, *per_phase)]
        spreads.append({name: (statistics.fmean(values), statistics.pstdev(values))
                        for name, values in zip((*PHASES, "other"), (*per_phase, other))})
    return spreads


def describe(row: dict) -> dict:
    """A metrics line's step times: each rank's mean, and for one rank its lockstep mean."""
    ranks = row.get("steady_step_ms_per_rank") or []
    means = [statistics.fmean(steps) for steps in ranks if steps]
    waits = [statistics.fmean(w) for w in row.get("steady_wait_ms_per_rank") or [] if w]
    out = {"row": row.get("row", "?"), "ranks": len(ranks), "step_ms": means, "wait_ms": waits,
           "phases": phase_spread(row)}
    if len(ranks) == 1 and len(ranks[0]) > 1:
        out["two_in_lockstep_ms"] = mean_of_pairwise_max(ranks[0])
        # The same without the waits for data: what the host's own spread would cost alone.
        step_waits = (row.get("steady_wait_ms_per_rank") or [[]])[0]
        if len(step_waits) == len(ranks[0]):
            work = [step - wait for step, wait in zip(ranks[0], step_waits)]
            out["work_ms"] = statistics.fmean(work)
            out["work_in_lockstep_ms"] = mean_of_pairwise_max(work)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", type=Path, help="a .jsonl of train_resnet.py metrics lines")
    args = parser.parse_args()
    for line in args.metrics.read_text().splitlines():
        row = describe(json.loads(line))
        if not row["step_ms"]:
            continue
        text = (f"{row['row']}: mean step "
                + " ".join(f"{m:.2f}" for m in row["step_ms"]) + " ms (waits "
                + " ".join(f"{w:.2f}" for w in row["wait_ms"]) + " ms)")
        if "two_in_lockstep_ms" in row:
            text += f"; two such ranks in lockstep: {row['two_in_lockstep_ms']:.2f} ms"
        if "work_in_lockstep_ms" in row:
            text += (f"; without the waits {row['work_ms']:.2f} ms, in lockstep "
                     f"{row['work_in_lockstep_ms']:.2f} ms")
        print(text)
        for rank, spread in enumerate(row["phases"]):
            print(f"  rank {rank}, mean ± sd ms: " + ", ".join(
                f"{name} {mean:.2f} ± {sd:.2f}" for name, (mean, sd) in spread.items()))


if __name__ == "__main__":
    main()
