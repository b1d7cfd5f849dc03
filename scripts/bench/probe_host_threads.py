"""What slows a training step's host side: the GIL, busy cores, and the loader's own threads.

    python scripts/bench/probe_host_threads.py --archive bench-data/photos-16000.tgz \
        --out bench-out/threads.json

ResNet-18 on photos runs at ~85% of the rate its loader reaches alone, and a hybrid decoding
lane (CPU threads in the training process) slowed its steps even where it waited less for data.
Two questions, timed on data already on the GPU (bench.ceiling_batches, so only the host
side differs between rows):
- how much does the training thread lose to another Python thread holding the GIL for a
  given share of the time, to N busy threads that do not hold it (at nice 0 and +10), and
  to threads streaming memory through the shared cache (a second rank's loader beside it
  slowed ResNet-18 by ~12% where a second training did not: results/2026-11-26-h200x2-host)?
- how much CPU does each thread of the training process spend per batch when the loader
  feeds it (decode="cuda"): /proc/self/task/*/stat, by thread name?
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (also puts the repository on sys.path)
from imageloader import configure_cuda_queues  # noqa: E402


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of each live thread of this process, summed by name: the
    Python thread's name where it is one (the kernel calls them all "python3"), else the
    kernel's (nvImageCodec's pool, autograd's thread)."""
    ticks = os.sysconf("SC_CLK_TCK")
    python_names = {thread.native_id: thread.name for thread in threading.enumerate()}
    out: dict[str, float] = collections.defaultdict(float)
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:  # ended meanwhile
            continue
        name = python_names.get(int(tid)) or stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] += (int(fields[11]) + int(fields[12])) / ticks
    return out


class Interference:
    """Background threads: `gil` ms of pure Python every 20 ms (the GIL held), `busy` threads
    hashing (hashlib drops the GIL for large buffers; the work stays in each core's own cache),
    or `stream` threads copying 64 MB buffers (numpy drops the GIL: memory traffic through the
    shared last-level cache, as readers and packers copying JPEG bytes make), at niceness
    `nice`. `copied` counts the bytes the stream threads moved."""

    STREAM_BYTES = 64 << 20

    def __init__(self, gil_ms: float = 0.0, busy: int = 0, nice: int = 0, stream: int = 0):
        self.gil_ms, self.busy, self.nice, self.stream = gil_ms, busy, nice, stream
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.copied = 0

    def __enter__(self):
        if self.gil_ms:
            self.threads.append(threading.Thread(target=self._hold_gil, daemon=True))
        self.threads += [threading.Thread(target=self._hash, daemon=True)
                         for _ in range(self.busy)]
        self.threads += [threading.Thread(target=self._copy, daemon=True)
                         for _ in range(self.stream)]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def _hold_gil(self):
        while not self.stop.is_set():
            end = time.perf_counter() + self.gil_ms / 1e3
            while time.perf_counter() < end:
                pass
            time.sleep(max(0.0, 0.02 - self.gil_ms / 1e3))

    def _hash(self):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
        data = bytes(1 << 20)
        while not self.stop.is_set():
            hashlib.sha256(data).digest()

    def _copy(self):
        import numpy as np
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
        source = np.ones(self.STREAM_BYTES, np.uint8)
        target = np.empty_like(source)
        while not self.stop.is_set():
            np.copyto(target, source)
            self.copied += self.STREAM_BYTES  # a race between threads only loses a count


def ceiling_row(trainer, args, label: str, **interference) -> dict:
    batches = bench.ceiling_batches(args, 100)
    with Interference(**interference) as busy:
        main0, t0 = time.thread_time(), time.perf_counter()
        result = bench.timed_training(trainer, batches, args, label)
        steps = result["images"] / args.batch_size
        result["main_thread_cpu_ms_per_step"] = (time.thread_time() - main0) * 1e3 / (
            steps + args.warmup)
        result["streamed_gb_per_s"] = busy.copied / 1e9 / (time.perf_counter() - t0)
    streamed = f", others copied {result['streamed_gb_per_s']:.1f} GB/s" if busy.stream else ""
    print(f"{'':32s} main thread CPU {result['main_thread_cpu_ms_per_step']:.1f} ms/step"
          + streamed, flush=True)
    return result


def loader_row(trainer, args, label: str, switch: float | None = None) -> dict:
    default = sys.getswitchinterval()
    if switch:
        sys.setswitchinterval(switch)
    try:
        with bench.our_loader(args.archive, args, prefetch=2, decode="cuda") as loader:
            it = bench.forever(loader)
            for _ in range(args.loader_warmup):  # past the first epoch (the plain copy)
                trainer.step(*next(it))
            before, t0 = thread_cpu(), time.perf_counter()
            args_timed = argparse.Namespace(**{**vars(args), "warmup": 1})
            result = bench.timed_training(trainer, it, args_timed, label)
            after = thread_cpu()
    finally:
        sys.setswitchinterval(default)
    batches = result["images"] / args.batch_size
    per_batch = {name: round((after[name] - before.get(name, 0.0)) * 1e3 / batches, 2)
                 for name in after if after[name] - before.get(name, 0.0) > 0}
    result["thread_cpu_ms_per_batch"] = dict(sorted(per_batch.items(), key=lambda kv: -kv[1]))
    result["seconds_wall"] = time.perf_counter() - t0
    print(f"{'':32s} CPU ms per batch by thread: {result['thread_cpu_ms_per_batch']}",
          flush=True)
    return result


def main() -> None:
    args = bench.probe_args(__doc__.splitlines()[0], steps=400, out="bench-out/threads.json")
    configure_cuda_queues()
    trainer = bench.Trainer(args.model, 100)
    cores = os.cpu_count() or 1
    rows = [ceiling_row(trainer, args, "data on GPU"),
            ceiling_row(trainer, args, "+ GIL held 1 ms of 20", gil_ms=1),
            ceiling_row(trainer, args, "+ GIL held 3 ms of 20", gil_ms=3),
            ceiling_row(trainer, args, f"+ {cores - 4} busy threads", busy=cores - 4),
            ceiling_row(trainer, args, f"+ {cores - 4} busy threads, nice 10", busy=cores - 4,
                        nice=10),
            ceiling_row(trainer, args, f"+ {cores} busy threads, nice 10", busy=cores,
                        nice=10),
            ceiling_row(trainer, args, "+ 2 threads copying memory, nice 10", stream=2,
                        nice=10),
            ceiling_row(trainer, args, f"+ {cores // 2} threads copying memory, nice 10",
                        stream=cores // 2, nice=10),
            loader_row(trainer, args, "loader, decode=cuda"),
            loader_row(trainer, args, "loader, switch interval 0.5 ms", switch=5e-4),
            ceiling_row(trainer, args, "data on GPU, again")]
    out = {"environment": bench.environment(), "args": vars(args), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
