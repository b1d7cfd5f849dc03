"""Demo: why pinned host memory matters for ``non_blocking=True`` copies.

For a pinned and a pageable host tensor, in both directions, a copy is issued
before or after a long GPU kernel (``torch.cuda._sleep``, ~50 ms), on the
kernel's own stream ("same") or on a separate copy stream ("side").  Measured:

* host_ms:    how long the calling thread is blocked inside the copy call
              (``time.perf_counter`` around that call only);
* total_ms:   GPU time for kernel + copy together (CUDA events);
* overlap:    the share of the shorter of kernel and copy hidden under the
              other, from ``kernel_ms + copy_ms - total_ms`` with both timed
              alone too.

Expect: pinned copies return to the host at once and, on a side stream,
overlap the kernel.  Pageable H2D copies block the host while the driver
stages the data through its own pinned buffer, and pageable D2H copies are
fully synchronous: issued behind the kernel on the same stream, they block the
host for the kernel *and* the copy, whatever ``non_blocking`` says.

    python scripts/bench/demo_pinned_pageable.py --mb 256 --out bench-out/pinned.json
"""

from __future__ import annotations

import argparse
import sys
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when loaded by path in tests
from report import cuda_report, write_report  # noqa: E402



@dataclass
class Row:
    direction: str  # "H2D" or "D2H"
    memory: str  # "pinned" or "pageable"
    order: str  # "alone", "before" or "after" the kernel
    stream: str  # "same" as the kernel or "side"; "-" when alone
    host_ms: float
    total_ms: float
    kernel_ms: float
    copy_ms: float
    overlap: float  # 0..1, or NaN when alone


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--mb", type=float, default=256, help="MiB per copy")
    parser.add_argument("--kernel-ms", type=float, default=50, help="length of the GPU kernel")
    parser.add_argument("--warmup", type=int, default=1, help="untimed trials per configuration")
    parser.add_argument("--repeats", type=int, default=5, help="timed trials; medians are reported")
    parser.add_argument("--out", type=Path, default=None, help="write results as JSON here")
    return parser


class Setup:
    """Host and device tensors, the two streams, and the calibrated kernel."""

    def __init__(self, mb: float, kernel_ms: float) -> None:
        n = int(mb * 2**20) // 4
        self.compute = torch.cuda.current_stream()
        self.side = torch.cuda.Stream()
        # Both host tensors are written once so every page is resident: a
        # first-touch page fault inside the timed copy would blur the picture.
        self.host = {
            "pinned": torch.ones(n).pin_memory(),
            "pageable": torch.ones(n),
        }
        self.host_dst = {"pinned": torch.zeros(n).pin_memory(), "pageable": torch.zeros(n)}
        self.device_src = torch.ones(n, device="cuda")
        self.sleep_cycles = calibrate_sleep(kernel_ms)

    def kernel(self) -> None:
        with torch.cuda.stream(self.compute):
            torch.cuda._sleep(self.sleep_cycles)

    def copy(self, direction: str, memory: str, stream: torch.cuda.Stream) -> tuple[float, object]:
        """Issue one copy on ``stream``; return (host ms blocked, what keeps it alive)."""
        with torch.cuda.stream(stream):
            if direction == "H2D":
                src = self.host[memory]
                t0 = time.perf_counter()
                out = src.to("cuda", non_blocking=True)
                t1 = time.perf_counter()
            else:
                out = self.host_dst[memory]
                t0 = time.perf_counter()
                out.copy_(self.device_src, non_blocking=True)
                t1 = time.perf_counter()
        return (t1 - t0) * 1e3, out


def calibrate_sleep(target_ms: float) -> int:
    """Clock cycles for which ``torch.cuda._sleep`` spins about ``target_ms``."""
    probe = 10_000_000
    torch.cuda._sleep(probe)  # warm-up: module load, clocks ramping up
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(probe)
        end.record()
        end.synchronize()  # SYNC (host): read the probe's time
        times.append(start.elapsed_time(end))
    return max(1, int(probe * target_ms / statistics.median(times)))


def trial(setup: Setup, direction: str | None, memory: str | None, order: str, stream_name: str):
    """One timed trial; returns (host ms in the copy call, GPU ms of everything)."""
    # SYNC (host): start from an idle GPU so trials do not overlap each other.
    torch.cuda.synchronize()
    copy_stream = setup.compute if stream_name in ("same", "-") else setup.side
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(setup.compute)
    copy_stream.wait_event(start)  # SYNC (device): the copy cannot start before `start`
    host_ms, keep = 0.0, None
    if order in ("before", "alone") and direction is not None:
        host_ms, keep = setup.copy(direction, memory, copy_stream)
    if order != "alone" or direction is None:
        setup.kernel()
    if order == "after":
        host_ms, keep = setup.copy(direction, memory, copy_stream)
    setup.compute.wait_stream(copy_stream)  # SYNC (device): `end` is after the copy
    end.record(setup.compute)
    end.synchronize()  # SYNC (host): read the time; `keep` may be freed after this
    del keep
    return host_ms, start.elapsed_time(end)


def measure(setup: Setup, args, direction, memory, order, stream_name) -> tuple[float, float]:
    for _ in range(args.warmup):
        trial(setup, direction, memory, order, stream_name)
    host, total = zip(*(trial(setup, direction, memory, order, stream_name) for _ in range(args.repeats)))
    return statistics.median(host), statistics.median(total)


def overlap_share(kernel_ms: float, copy_ms: float, total_ms: float) -> float:
    hidden = kernel_ms + copy_ms - total_ms
    return min(1.0, max(0.0, hidden / min(kernel_ms, copy_ms)))


def run_all(setup: Setup, args: argparse.Namespace) -> list[Row]:
    _, kernel_ms = measure(setup, args, None, None, "alone", "-")
    rows = []
    for direction in ("H2D", "D2H"):
        for memory in ("pinned", "pageable"):
            host_ms, copy_ms = measure(setup, args, direction, memory, "alone", "-")
            rows.append(Row(direction, memory, "alone", "-", host_ms, copy_ms, 0.0, copy_ms, float("nan")))
            for order in ("before", "after"):
                for stream_name in ("same", "side"):
                    host_ms, total = measure(setup, args, direction, memory, order, stream_name)
                    share = overlap_share(kernel_ms, copy_ms, total)
                    rows.append(Row(direction, memory, order, stream_name, host_ms, total, kernel_ms, copy_ms, share))
    return rows


def format_table(rows: list[Row]) -> str:
    header = (f"{'dir':<5}{'memory':<10}{'copy':<8}{'stream':<8}{'host ms':>9}"
              f"{'total ms':>10}{'kernel ms':>11}{'copy ms':>9}{'overlap':>9}")
    lines = [header, "-" * len(header)]
    for r in rows:
        overlap = "-" if r.order == "alone" else f"{r.overlap:.0%}"
        kernel = "-" if r.order == "alone" else f"{r.kernel_ms:.2f}"
        lines.append(
            f"{r.direction:<5}{r.memory:<10}{r.order:<8}{r.stream:<8}{r.host_ms:>9.2f}"
            f"{r.total_ms:>10.2f}{kernel:>11}{r.copy_ms:>9.2f}{overlap:>9}"
        )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> dict | None:
    if not torch.cuda.is_available():
        print("demo_pinned_pageable: no CUDA device; nothing to show.")
        return None
    setup = Setup(args.mb, args.kernel_ms)
    rows = run_all(setup, args)
    print(f"{torch.cuda.get_device_name()} | {args.mb:g} MiB per copy | kernel ~{args.kernel_ms:g} ms "
          f"| median of {args.repeats} | host ms = time inside the copy call")
    print(format_table(rows))
    return write_report(cuda_report(args, [asdict(r) for r in rows]), args.out)


if __name__ == "__main__":
    main(get_args_parser().parse_args())
