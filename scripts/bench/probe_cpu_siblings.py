"""Which of this machine's CPUs share a physical core: the rate of a busy loop on one CPU while
another CPU runs the same loop, for every other CPU.

A guest may show every vCPU as a core of its own ("Thread(s) per core: 1") while the host backs
two vCPUs with the two hyperthreads of one core. Then two processes pinned to disjoint CPU sets
(two ranks, each on its 16 of 32) still take compute from each other, and a one-GPU run on 16
CPUs had more of the machine than each rank has beside a second. This measures it: the loop's
rate on CPU `a` alone, then beside a loop on each other CPU (a sibling costs it ~30-50%, any
other CPU ~0), then with every CPU busy.

    python scripts/bench/probe_cpu_siblings.py --out siblings.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time


def spin(cpu: int, seconds: float, start, results) -> None:
    """Pin to `cpu`, wait for the common start, count loop turns for `seconds`."""
    os.sched_setaffinity(0, {cpu})
    start.wait()
    turns, x, end = 0, 1, time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(2000):  # integer work, no memory traffic: it measures the core's units
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        turns += 1
    results.put((cpu, turns / seconds))


def rates(cpus: list[int], seconds: float) -> dict[int, float]:
    """Loop turns per second on each of `cpus`, all started together."""
    ctx = mp.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=spin, args=(cpu, seconds, start, results)) for cpu in cpus]
    for w in workers:
        w.start()
    time.sleep(0.05)  # every process pinned and waiting
    start.set()
    out = dict(results.get() for _ in workers)
    for w in workers:
        w.join()
    return out


def main(args: argparse.Namespace) -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    a = cpus[0]
    alone = statistics.median(rates([a], args.seconds)[a] for _ in range(3))
    beside = {}
    for other in cpus[1:]:
        beside[other] = rates([a, other], args.seconds)[a] / alone
    everything = rates(cpus, args.seconds)
    half = rates(cpus[:len(cpus) // 2], args.seconds)
    siblings = [c for c, r in beside.items() if r < args.sibling_below]
    result = {
        "cpus": len(cpus), "probe_cpu": a, "alone_turns_per_s": alone,
        "beside": {str(c): round(r, 3) for c, r in beside.items()},
        "siblings_of_probe_cpu": siblings,
        "first_half_busy_per_cpu": round(statistics.mean(half.values()) / alone, 3),
        "all_busy_per_cpu": round(statistics.mean(everything.values()) / alone, 3),
    }
    slow = ", ".join(f"cpu {c}: {r:.2f}" for c, r in beside.items() if r < args.sibling_below)
    print(f"cpu {a}'s loop beside one other cpu, rate / alone: median "
          f"{statistics.median(beside.values()):.2f}, lowest {min(beside.values()):.2f}; "
          f"under {args.sibling_below}: {slow or 'none'}")
    print(f"every cpu busy: {result['all_busy_per_cpu']:.2f} of one alone each; the first half "
          f"({cpus[0]}-{cpus[len(cpus) // 2 - 1]}) busy: {result['first_half_busy_per_cpu']:.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=0.3, help="each measurement's length")
    p.add_argument("--sibling-below", type=float, default=0.8,
                   help="a CPU whose loop leaves the probe CPU's below this rate is a sibling")
    p.add_argument("--out", default=None, help="JSON to write")
    return p


if __name__ == "__main__":
    main(get_args_parser().parse_args())
