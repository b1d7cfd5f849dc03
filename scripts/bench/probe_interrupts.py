"""Interrupts while a command runs: which ones, how many per second, on which CPUs.

    python scripts/bench/probe_interrupts.py --match nvidia -- python3 scripts/train_resnet.py ...

GPU decoding waits on CUDA events for every batch (nvJPEG's hardware path: ~290 waits a step of
ResNet-18), and a wait that blocks is woken by an interrupt. Where the interrupts of both GPUs land
on the same few CPUs, a second process's loader could slow the first one's threads there. This
reads /proc/interrupts before and after the command and prints the lines that matched, by rate,
with the CPUs that took most of them.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def parse(text: str) -> dict[str, list[int]]:
    """/proc/interrupts -> {"IRQ: description": [count on each CPU]}."""
    lines = text.splitlines()
    cpus = len(lines[0].split())
    out = {}
    for line in lines[1:]:
        irq, _, rest = line.partition(":")
        fields = rest.split()
        counts = [int(f) for f in fields[:cpus] if f.isdigit()]
        if len(counts) < cpus:  # ERR:, MIS: carry one number
            counts += [0] * (cpus - len(counts))
        out[f"{irq.strip()}: {' '.join(fields[cpus:])}".strip()] = counts
    return out


def rates(before: dict, after: dict, seconds: float, match: str) -> list[dict]:
    """Matching interrupts' rates over `seconds`, highest first, with their busiest CPUs."""
    rows = []
    for name, counts in after.items():
        if match.lower() not in name.lower():
            continue
        delta = [a - b for a, b in zip(counts, before.get(name, [0] * len(counts)))]
        total = sum(delta)
        if total <= 0:
            continue
        top = sorted(range(len(delta)), key=lambda c: -delta[c])[:3]
        rows.append({"irq": name, "per_s": total / seconds,
                     "cpus": {f"CPU{c}": round(delta[c] / seconds) for c in top if delta[c]}})
    return sorted(rows, key=lambda r: -r["per_s"])


def main(args: argparse.Namespace) -> dict:
    before, t0 = parse(Path("/proc/interrupts").read_text()), time.perf_counter()
    code = subprocess.call(args.command) if args.command else 0
    seconds = time.perf_counter() - t0
    rows = rates(before, parse(Path("/proc/interrupts").read_text()), seconds, args.match)
    for row in rows[:args.top]:
        print(f"interrupts {row['per_s']:9.0f}/s  {row['irq'][:60]}  most on {row['cpus']}",
              flush=True)
    if not rows:
        print(f"interrupts: none matching '{args.match}' in {seconds:.1f} s", flush=True)
    result = {"seconds": seconds, "match": args.match, "rows": rows, "exit": code}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--match", default="", help="only interrupts whose line holds this (any case)")
    p.add_argument("--top", type=int, default=6, help="lines to print")
    p.add_argument("--out", default=None, help="JSON to write")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- and the command to run")
    return p


if __name__ == "__main__":
    arguments = get_args_parser().parse_args()
    if arguments.command[:1] == ["--"]:
        arguments.command = arguments.command[1:]
    sys.exit(main(arguments)["exit"])
