"""Demo: overlap host<->device copies with compute by splitting the work into chunks on several streams.

PyTorch version of the CUDA samples "simpleStreams" / "overlap data transfers",
on pinned host memory, three ways:

1. sequential: H2D copy of the whole array, kernel, D2H copy, one stream;
2. per-chunk:  for each chunk i, on stream i % S: H2D copy, kernel, D2H copy;
3. batched:    all chunks' H2D copies, then all kernels, then all D2H copies,
               each chunk still on stream i % S.

With a copy engine per direction, chunk i's kernel can run while chunk i+1 is
copied in and chunk i-1 copied out, so (2) and (3) approach max(copy, kernel)
instead of their sum.  Every variant must produce exactly the same bytes.

    python scripts/bench/demo_overlap_chunks.py --size 67108864 --chunks 4 --out bench-out/overlap.json
"""

from __future__ import annotations

import argparse
import sys
import statistics
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when loaded by path in tests
from report import cuda_report, write_report  # noqa: E402



def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--size", type=int, default=64 * 2**20, help="float32 elements in the array")
    parser.add_argument("--chunks", type=int, default=4, help="chunks of variants 2 and 3")
    parser.add_argument("--streams", type=int, default=4, help="streams; chunk i runs on stream i %% streams")
    parser.add_argument("--work", type=int, default=8, help="rounds of x = sin(x) * 2 + 1 per element")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs of each variant first")
    parser.add_argument("--repeats", type=int, default=10, help="timed runs; the median is reported")
    parser.add_argument("--out", type=Path, default=None, help="write results as JSON here")
    return parser


def kernel(x: torch.Tensor, work: int) -> None:
    """Elementwise work in place (no allocation, so chunk views stay put)."""
    for _ in range(work):
        torch.sin(x, out=x)
        x.mul_(2.0).add_(1.0)


class Buffers:
    """Pinned host input/output and the device array they move through."""

    def __init__(self, size: int, chunks: int) -> None:
        if size % chunks:
            raise ValueError(f"--size {size} is not a multiple of --chunks {chunks}")
        generator = torch.Generator().manual_seed(0)
        self.host_in = torch.empty(size, pin_memory=True)
        self.host_in.uniform_(-3.0, 3.0, generator=generator)
        self.host_out = torch.empty(size, pin_memory=True)
        # Allocated once, on the current stream, and alive until the end of
        # main(), which synchronizes first: no record_stream needed even though
        # every side stream writes it.
        self.device = torch.empty(size, device="cuda")
        self.chunks = chunks

    def chunk(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = self.device.numel() // self.chunks
        part = slice(i * n, (i + 1) * n)
        return self.host_in[part], self.device[part], self.host_out[part]


def sequential(buf: Buffers, streams: list[torch.cuda.Stream], work: int) -> None:
    stream = streams[0]
    with torch.cuda.stream(stream):
        # non_blocking: the host only enqueues; pinned memory lets the copy
        # engine DMA straight from host_in without a staging copy.
        buf.device.copy_(buf.host_in, non_blocking=True)
        kernel(buf.device, work)
        buf.host_out.copy_(buf.device, non_blocking=True)


def per_chunk(buf: Buffers, streams: list[torch.cuda.Stream], work: int) -> None:
    for i in range(buf.chunks):
        host_in, dev, host_out = buf.chunk(i)
        with torch.cuda.stream(streams[i % len(streams)]):
            dev.copy_(host_in, non_blocking=True)
            kernel(dev, work)
            host_out.copy_(dev, non_blocking=True)


def batched(buf: Buffers, streams: list[torch.cuda.Stream], work: int) -> None:
    parts = [buf.chunk(i) for i in range(buf.chunks)]
    for i, (host_in, dev, _) in enumerate(parts):
        with torch.cuda.stream(streams[i % len(streams)]):
            dev.copy_(host_in, non_blocking=True)
    for i, (_, dev, _) in enumerate(parts):
        with torch.cuda.stream(streams[i % len(streams)]):
            kernel(dev, work)
    for i, (_, dev, host_out) in enumerate(parts):
        with torch.cuda.stream(streams[i % len(streams)]):
            host_out.copy_(dev, non_blocking=True)


VARIANTS: dict[str, Callable[[Buffers, list[torch.cuda.Stream], int], None]] = {
    "sequential": sequential,
    "per-chunk": per_chunk,
    "batched": batched,
}


def timed_run(variant, buf: Buffers, streams: list[torch.cuda.Stream], work: int) -> float:
    """One run of ``variant`` bracketed by events on the current stream, in ms."""
    main_stream = torch.cuda.current_stream()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record(main_stream)
    for s in streams:
        # SYNC (device-side): no stream may start before `start`, and the
        # previous run's D2H copies (host_out) are ordered before this run.
        s.wait_event(start)
    variant(buf, streams, work)
    for s in streams:
        main_stream.wait_stream(s)  # SYNC (device-side): `end` is after all work
    end.record(main_stream)
    # SYNC (host): wait for the run to read its time and, for the last run,
    # to make host_out safe to read on the CPU.
    end.synchronize()
    return start.elapsed_time(end)


def run_variant(name: str, buf: Buffers, streams, args: argparse.Namespace) -> tuple[float, torch.Tensor]:
    variant = VARIANTS[name]
    for _ in range(args.warmup):
        timed_run(variant, buf, streams, args.work)
    times = []
    for _ in range(args.repeats):
        buf.host_out.fill_(float("nan"))  # a stale result from another variant cannot pass
        times.append(timed_run(variant, buf, streams, args.work))
    return statistics.median(times), buf.host_out.clone()


def format_table(rows: list[dict]) -> str:
    header = f"{'variant':<12}{'ms':>10}{'speedup':>10}{'identical':>11}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['variant']:<12}{r['ms']:>10.3f}{r['speedup']:>9.2f}x{str(r['identical']):>11}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> dict | None:
    if not torch.cuda.is_available():
        print("demo_overlap_chunks: no CUDA device; nothing to show.")
        return None
    buf = Buffers(args.size, args.chunks)
    streams = [torch.cuda.Stream() for _ in range(args.streams)]
    rows, reference = [], None
    for name in VARIANTS:
        ms, result = run_variant(name, buf, streams, args)
        if reference is None:
            reference, base_ms = result, ms
        identical = bool(torch.equal(result, reference))
        rows.append({"variant": name, "ms": ms, "speedup": base_ms / ms, "identical": identical})
    mb = args.size * 4 / 2**20
    print(f"{torch.cuda.get_device_name()} | {mb:.0f} MiB float32 | {args.chunks} chunks on "
          f"{args.streams} streams | work {args.work} | median of {args.repeats}")
    print(format_table(rows))
    result = write_report(cuda_report(args, rows), args.out)
    bad = [r["variant"] for r in rows if not r["identical"]]
    if bad:
        raise RuntimeError(f"results differ from the sequential variant: {bad}")
    return result


if __name__ == "__main__":
    main(get_args_parser().parse_args())
