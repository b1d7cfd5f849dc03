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
- does the loader slow the step by sharing its process, or wherever it runs? Fed ResNet-18 on
  photos spent 25-42 ms of host time a step against 19-20 with its data on the GPU, the GPU
  idle 38% of the window with 1% data-wait, and single kernel launches of the training and
  autograd threads blocked for 1-5 ms (results/2026-11-27-h200-twolanes). So beside the
  data-on-GPU steps run: the decoder's per-image CUDA calls alone, from a thread that lets go
  of the GIL (CudaCalls); the loader with its batches dropped, in a thread of the training
  process and in a process of its own (LoaderBeside). --beside-only: just those rows.
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import hashlib
import json
import os
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.multiprocessing

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
    `nice`; `cuda_calls`: a thread making a GPU decoder's CUDA calls for that many images a
    second (CudaCalls). `copied` counts the bytes the stream threads moved, `images` the
    images' worth of CUDA calls made."""

    STREAM_BYTES = 64 << 20

    def __init__(self, gil_ms: float = 0.0, busy: int = 0, nice: int = 0, stream: int = 0,
                 cuda_calls: int = 0):
        self.gil_ms, self.busy, self.nice, self.stream = gil_ms, busy, nice, stream
        self.cuda_calls = cuda_calls  # images per second of CudaCalls' pattern, 0: none
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.copied = 0
        self.images = 0  # what the CUDA-calls thread made
        self.error: BaseException | None = None

    def __enter__(self):
        if self.gil_ms:
            self.threads.append(threading.Thread(target=self._hold_gil, daemon=True))
        self.threads += [threading.Thread(target=self._hash, daemon=True)
                         for _ in range(self.busy)]
        self.threads += [threading.Thread(target=self._copy, daemon=True)
                         for _ in range(self.stream)]
        if self.cuda_calls:
            self.threads.append(threading.Thread(target=self._call_cuda, daemon=True))
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join()
        if self.error is not None:  # a row without its interference would pass for one
            raise RuntimeError("an interference thread failed") from self.error

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

    def _call_cuda(self):
        try:
            calls = CudaCalls(torch.device("cuda"))
            try:
                while not self.stop.is_set():
                    self.images += calls.batch(self.cuda_calls)
            finally:
                calls.close()
        except BaseException as error:  # noqa: BLE001 (handed to __exit__)
            self.error = error


class CudaCalls:
    """The CUDA calls nvImageCodec's hardware path makes per image (traced on an H200, one
    native thread: a host-to-device copy, a kernel, an event recorded and waited for), made
    through ctypes into the CUDA runtime torch loaded: the GIL is let go for each call, as
    the decoder lets it go, so what they cost the training thread is the driver's (one
    process, one CUDA context), not Python's. A memset stands in for the kernel."""

    IMAGE_BYTES = 110_000     # a photo's JPEG (make_imagenet_like --sizes photos: 109.5 KB)
    PIXEL_BYTES = 1_350_000   # its pixels, which the colour conversion writes (0.45 MP x 3)

    def __init__(self, device: torch.device, runtime=None):
        self.rt = runtime or cuda_runtime()
        self.host = torch.empty(self.IMAGE_BYTES, dtype=torch.uint8).pin_memory()
        self.source = torch.empty(self.IMAGE_BYTES, dtype=torch.uint8, device=device)
        self.target = torch.empty(self.PIXEL_BYTES, dtype=torch.uint8, device=device)
        self.stream = torch.cuda.Stream(device)
        self.event = ctypes.c_void_p()
        self._check(self.rt.cudaEventCreateWithFlags(ctypes.byref(self.event), 2))  # no timing

    def batch(self, images_per_s: int, images: int = 256) -> int:
        """`images` rounds of the pattern, then a sleep that keeps them at `images_per_s`."""
        start = time.perf_counter()
        rt, stream = self.rt, ctypes.c_void_p(self.stream.cuda_stream)
        for _ in range(images):
            self._check(rt.cudaMemcpyAsync(ctypes.c_void_p(self.source.data_ptr()),
                                           ctypes.c_void_p(self.host.data_ptr()),
                                           ctypes.c_size_t(self.IMAGE_BYTES), 1, stream))
            self._check(rt.cudaMemsetAsync(ctypes.c_void_p(self.target.data_ptr()), 0,
                                           ctypes.c_size_t(self.PIXEL_BYTES), stream))
            self._check(rt.cudaEventRecord(self.event, stream))
            self._check(rt.cudaEventSynchronize(self.event))
        time.sleep(max(0.0, images / images_per_s - (time.perf_counter() - start)))
        return images

    def close(self) -> None:
        if self.event:
            self.rt.cudaEventDestroy(self.event)
            self.event = ctypes.c_void_p()

    @staticmethod
    def _check(status: int) -> None:
        if status != 0:
            raise RuntimeError(f"CUDA runtime call failed with status {status}")


def cuda_runtime():
    """The CUDA runtime library this process already loaded (torch's), by its path in
    /proc/self/maps: another copy would be another runtime, with a context of its own."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1] if len(line.split()) >= 6 else ""
        if "libcudart.so" in Path(path).name:
            return ctypes.CDLL(path)
    raise RuntimeError("no CUDA runtime library loaded in this process")


def drain(archive, loader_kwargs: dict, ready, stop, batches, warm: int) -> None:
    """Our loader with its batches dropped until `stop` is set; `ready` once `warm` batches
    came (past the first epoch, so what follows reads the plain copy as training would);
    `batches` counts them. Its batches' waits go to a stream of its own, not the training's
    (a thread's current stream is its own setting)."""
    from imageloader import ImageLoader
    device = torch.device(loader_kwargs["device"])
    side = torch.cuda.Stream(device) if device.type == "cuda" else None
    with ImageLoader(archive, **loader_kwargs) as loader, \
            (torch.cuda.stream(side) if side is not None else nullcontext()):
        for n, _ in enumerate(bench.forever(loader), 1):
            with batches.get_lock():
                batches.value += 1
            if n == warm:
                ready.set()
            if stop.is_set():
                return


class LoaderBeside:
    """`drain` beside the training, `where`: "thread" (in the training process: its lanes,
    helpers and their CUDA calls share the process with the training thread) or "process"
    (spawned: its own process and CUDA context on the same GPU). Not a daemon process: the
    loader starts processes of its own."""

    def __init__(self, archive, loader_kwargs: dict, where: str = "thread", warm: int = 80,
                 timeout: float = 600.0):
        if where not in ("thread", "process"):
            raise ValueError(f"where must be 'thread' or 'process', got {where!r}")
        self.where, self.timeout = where, timeout
        context = torch.multiprocessing.get_context("spawn")
        self.batches = context.Value("q", 0)
        self.error: BaseException | None = None  # the thread's (a process prints its own)
        if where == "thread":
            self.ready, self.stop = threading.Event(), threading.Event()
            make, target = threading.Thread, self._drain_here
        else:
            self.ready, self.stop = context.Event(), context.Event()
            make, target = context.Process, drain
        self.worker = make(target=target, args=(archive, loader_kwargs, self.ready, self.stop,
                                                self.batches, warm), daemon=False)

    def _drain_here(self, *args) -> None:
        try:
            drain(*args)
        except BaseException as error:  # noqa: BLE001 (raised from __enter__ or __exit__)
            self.error = error

    def __enter__(self):
        self.worker.start()
        deadline = time.monotonic() + self.timeout
        while not self.ready.wait(0.5):
            if not self.worker.is_alive() or time.monotonic() > deadline:
                error = RuntimeError(f"the loader beside ({self.where}) never warmed up")
                self.__exit__(RuntimeError, error, None)
                raise error from self.error
        return self

    def __exit__(self, *exc):
        ended_early = not self.worker.is_alive()  # drain returns only once told to stop
        self.stop.set()
        self.worker.join(60)
        if self.where == "process" and self.worker.is_alive():
            self.worker.terminate()
            self.worker.join(10)
        if ended_early and not exc:  # a row without its neighbour would pass for one
            raise RuntimeError(f"the loader beside ({self.where}) ended before the row did") \
                from self.error


def ceiling_row(trainer, args, label: str, beside: str | None = None, **interference) -> dict:
    """ResNet steps on data already on the GPU beside the `interference` threads, or beside
    our loader (`beside`: "thread" or "process", LoaderBeside)."""
    batches = bench.ceiling_batches(args, 100)
    neighbour = LoaderBeside(args.archive, bench.our_loader_kwargs(args, 2, "cuda"), beside) \
        if beside else nullcontext()
    with Interference(**interference) as busy, neighbour:
        main0, t0 = time.thread_time(), time.perf_counter()
        before = neighbour.batches.value if beside else 0
        images0 = busy.images
        result = bench.timed_training(trainer, batches, args, label)
        seconds = time.perf_counter() - t0
        steps = result["images"] / args.batch_size
        result["main_thread_cpu_ms_per_step"] = (time.thread_time() - main0) * 1e3 / (
            steps + args.warmup)
        result["streamed_gb_per_s"] = busy.copied / 1e9 / seconds
        result["cuda_calls_images_per_s"] = (busy.images - images0) / seconds
        if beside:
            result["beside_img_per_s"] = (neighbour.batches.value - before) \
                * args.batch_size / seconds
    streamed = f", others copied {result['streamed_gb_per_s']:.1f} GB/s" if busy.stream else ""
    if beside:
        streamed += f", the loader beside dropped {result['beside_img_per_s']:.0f} img/s"
    if busy.cuda_calls:
        streamed += f", CUDA calls for {result['cuda_calls_images_per_s']:.0f} images/s"
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
    args = bench.probe_args(__doc__.splitlines()[0], steps=400, out="bench-out/threads.json",
                            extra=lambda p: p.add_argument(
                                "--beside-only", action="store_true",
                                help="only the rows with our loader beside the steps"))
    configure_cuda_queues()
    trainer = bench.Trainer(args.model, 100)
    cores = os.cpu_count() or 1
    first = ceiling_row(trainer, args, "data on GPU")
    beside = [ceiling_row(trainer, args, "+ the decoder's CUDA calls in a thread, 12,000 "
                          "images/s", cuda_calls=12_000),
              ceiling_row(trainer, args, "+ loader in a thread, batches dropped",
                          beside="thread"),
              ceiling_row(trainer, args, "+ loader in its own process, batches dropped",
                          beside="process")]
    if args.beside_only:
        return write(args, [first, *beside, loader_row(trainer, args, "loader, decode=cuda"),
                            ceiling_row(trainer, args, "data on GPU, again")])
    rows = [first, *beside,
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
    write(args, rows)


def write(args, rows: list[dict]) -> None:
    out = {"environment": bench.environment(), "args": vars(args), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
