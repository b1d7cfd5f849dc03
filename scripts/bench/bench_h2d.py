"""Host->device copy bandwidth of one batch-sized buffer, by kind of host memory.

    python scripts/bench/bench_h2d.py --out bench-out/h2d.json

One uint8 batch (default 256 x 224 x 224 x 3 = 38.5 MB) is copied with
`dst.copy_(src, non_blocking=True)` into a preallocated device tensor on a side stream, from:

* pinned:   `torch.empty(..., pin_memory=True)` (CUDA's caching host allocator);
* shm-registered: a POSIX shared-memory buffer page-locked with cudaHostRegister, i.e. exactly
            `imageloader.pool.BufferPool(..., pin_device=cuda, shared=True)`: the memory the
            decode workers write and the prefetcher copies from;
* pageable: a plain `torch.empty(...)`.

Per kind, after warm-up, the median of --repeats copies of:
* gpu_ms / GB/s: CUDA events recorded on the side stream around the copy;
* host_ms: time.perf_counter around the copy_ call only (a pinned copy returns at once;
           a pageable one blocks while the driver stages it);
* wall_ms: from before the call until the end event has completed.
`is_pinned` is what `Tensor.is_pinned()` says of the source: the prefetcher copies a CPU tensor
directly only when it is True, and stages it through a pinned buffer otherwise.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when loaded by path in tests
from report import cuda_report, write_report  # noqa: E402


REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from imageloader.pool import BufferPool  # noqa: E402

KINDS = ("pinned", "shm-registered", "pageable")


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--batch-size", type=int, default=256, help="images per batch")
    p.add_argument("--size", type=int, default=224, help="image side; images are size x size x 3")
    p.add_argument("--repeats", type=int, default=20, help="timed copies per kind (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed copies per kind first")
    p.add_argument("--out", type=Path, default=None, help="write results as JSON here")
    return p


def fill(t: torch.Tensor) -> torch.Tensor:
    """Write every page (random bytes, the same for every source) so no first-touch page fault
    lands inside a timed copy and the checksum after the copies means something."""
    gen = torch.Generator().manual_seed(0)
    t.view(-1).copy_(torch.randint(0, 256, (t.numel(),), dtype=torch.uint8, generator=gen))
    return t


def time_copy(dst: torch.Tensor, src: torch.Tensor, side: torch.cuda.Stream,
              warmup: int, repeats: int) -> dict:
    """Median GPU ms (events on `side`), host ms in the call, and wall ms of `repeats` copies."""
    gpu, host, wall = [], [], []
    for i in range(warmup + repeats):
        torch.cuda.synchronize()  # SYNC (host): each copy starts on an idle GPU
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(side):
            start.record(side)
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            t1 = time.perf_counter()
            end.record(side)
        end.synchronize()  # SYNC (host): read the time
        t2 = time.perf_counter()
        if i >= warmup:
            gpu.append(start.elapsed_time(end))
            host.append((t1 - t0) * 1e3)
            wall.append((t2 - t0) * 1e3)
    return {"gpu_ms": statistics.median(gpu), "host_ms": statistics.median(host),
            "wall_ms": statistics.median(wall), "gpu_ms_min": min(gpu), "gpu_ms_max": max(gpu)}


def check_equal(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """The last copy really delivered the bytes (a cheap checksum on both sides)."""
    torch.cuda.synchronize()
    return int(dst.sum(dtype=torch.int64).item()) == int(src.sum(dtype=torch.int64).item())


def measure(kind: str, src: torch.Tensor, dst: torch.Tensor, side, args) -> dict:
    row = {"kind": kind, "is_pinned": bool(src.is_pinned())}
    row.update(time_copy(dst, src, side, args.warmup, args.repeats))
    nbytes = src.numel() * src.element_size()
    row["gb_per_s"] = nbytes / (row["gpu_ms"] * 1e-3) / 1e9
    row["wall_gb_per_s"] = nbytes / (row["wall_ms"] * 1e-3) / 1e9
    row["bytes_ok"] = check_equal(dst, src)
    dst.zero_()  # the next kind must deliver its own bytes
    return row


def format_table(rows: list[dict]) -> str:
    header = (f"{'host memory':<16}{'is_pinned':>10}{'GB/s':>8}{'gpu ms':>9}{'host ms':>9}"
              f"{'wall ms':>9}{'wall GB/s':>10}{'bytes':>7}")
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['kind']:<16}{str(r['is_pinned']):>10}{r['gb_per_s']:>8.1f}"
                     f"{r['gpu_ms']:>9.3f}{r['host_ms']:>9.3f}{r['wall_ms']:>9.3f}"
                     f"{r['wall_gb_per_s']:>10.1f}{'ok' if r['bytes_ok'] else 'BAD':>7}")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> dict | None:
    if not torch.cuda.is_available():
        print("bench_h2d: CUDA is not available; nothing to measure.")
        return None
    if args.repeats < 1 or args.warmup < 0:
        raise SystemExit("bench_h2d: --repeats must be >= 1 and --warmup >= 0")
    device = torch.device("cuda", torch.cuda.current_device())
    shape = (args.batch_size, args.size, args.size, 3)
    nbytes = args.batch_size * args.size * args.size * 3
    dst = torch.empty(shape, dtype=torch.uint8, device=device)
    side = torch.cuda.Stream(device=device)
    pool = BufferPool(1, args.batch_size, (args.size, args.size, 3), pin_device=device,
                      shared=True)
    try:
        sources = {
            "pinned": fill(torch.empty(shape, dtype=torch.uint8, pin_memory=True)),
            "shm-registered": fill(pool.buffers[0].images),  # what the loader copies
            "pageable": fill(torch.empty(shape, dtype=torch.uint8)),
        }
        rows = [measure(kind, sources[kind], dst, side, args) for kind in KINDS]
        del sources
    finally:
        torch.cuda.synchronize()  # no copy may still read the shared memory we unregister
        pool.close()
    print(f"{torch.cuda.get_device_name(device)} | {shape} uint8 = {nbytes / 1e6:.1f} MB | "
          f"copy_(non_blocking=True) on a side stream | median of {args.repeats}")
    print(format_table(rows))
    if not rows[1]["is_pinned"]:
        print("note: Tensor.is_pinned() is False for the cudaHostRegister'ed shared buffer; "
              "the prefetcher would stage it through a pinned buffer (an extra host copy).")
    return write_report(cuda_report(args, rows, cuda=torch.version.cuda, bytes=nbytes),
                        args.out)


if __name__ == "__main__":
    main(get_args_parser().parse_args())
