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
- is it the decoders or the rest of the loader? --decoders-beside: the steps beside the
  default decoding lanes alone, one lane of the engines, one CUDA lane (DecodingLanes: no
  packers, readers, crops or loader Python), then fed by the loader as is, with two cores
  kept for the training threads (KeepCoresFree) and with 4 packers instead of 8. Every row
  gives the host's busy cores over its window (/proc/stat). --lanes-beside SPEC...: the steps
  beside those lanes alone (a spec "nvjpeg" or "nvjpeg+nvjpeg": lanes calling nvJPEG's engines
  directly, as a lane of our own would), then fed; --trace-beside SPEC: then 5 steps traced
  beside one;
  --schedule: how the process's CUDA calls wait (cudaSetDeviceFlags), for every row.
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


def thread_cpu() -> dict[int, tuple[str, float]]:
    """(name, CPU seconds (user + system)) of each live thread of this process by its id: the
    Python thread's name where it is one (the kernel calls them all "python3"), else the
    kernel's (nvImageCodec's pool, autograd's thread)."""
    ticks = os.sysconf("SC_CLK_TCK")
    python_names = {thread.native_id: thread.name for thread in threading.enumerate()}
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:  # ended meanwhile
            continue
        name = python_names.get(int(tid)) or stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return out


def cpu_by_name(before: dict, after: dict, process_seconds: float) -> dict[str, float]:
    """CPU seconds each thread name spent between two thread_cpu() snapshots; a thread that
    started meanwhile counts whole. Threads that ended meanwhile (lanes are made anew each
    epoch) are gone from /proc by then: only the process's total (`process_seconds`, over
    the same window) still holds their time, "(threads ended meanwhile)"."""
    out: dict[str, float] = collections.defaultdict(float)
    for tid, (name, seconds) in after.items():
        out[name] += seconds - before.get(tid, (name, 0.0))[1]
    out["(threads ended meanwhile)"] = max(0.0, process_seconds - sum(out.values()))
    return out


class BackgroundThreads:
    """Threads beside the timed steps (`threads`, made by a subclass): started with the block,
    told to `stop` and joined at its end, where a thread's failure (`error`) is raised as
    `failure` -- a row without its neighbour would pass for one with it (an exception already
    on its way is kept as the raised one's context)."""

    failure = "a background thread failed"

    def __init__(self):
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.error: BaseException | None = None

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join()
        if self.error is not None:
            raise RuntimeError(self.failure) from self.error


class Interference(BackgroundThreads):
    """Background threads: `gil` ms of pure Python every 20 ms (the GIL held), `busy` threads
    hashing (hashlib drops the GIL for large buffers; the work stays in each core's own cache),
    or `stream` threads copying 64 MB buffers (numpy drops the GIL: memory traffic through the
    shared last-level cache, as readers and packers copying JPEG bytes make), at niceness
    `nice`; `cuda_calls`: a thread making a GPU decoder's CUDA calls for that many images a
    second (CudaCalls). `copied` counts the bytes the stream threads moved, `images` the
    images' worth of CUDA calls made."""

    STREAM_BYTES = 64 << 20
    failure = "an interference thread failed"

    def __init__(self, gil_ms: float = 0.0, busy: int = 0, nice: int = 0, stream: int = 0,
                 cuda_calls: int = 0):
        super().__init__()
        self.gil_ms, self.busy, self.nice, self.stream = gil_ms, busy, nice, stream
        self.cuda_calls = cuda_calls  # images per second of CudaCalls' pattern, 0: none
        self.copied = 0
        self.images = 0  # what the CUDA-calls thread made

    def __enter__(self):
        if self.gil_ms:
            self.threads.append(threading.Thread(target=self._hold_gil, daemon=True))
        self.threads += [threading.Thread(target=self._hash, daemon=True)
                         for _ in range(self.busy)]
        self.threads += [threading.Thread(target=self._copy, daemon=True)
                         for _ in range(self.stream)]
        if self.cuda_calls:
            self.threads.append(threading.Thread(target=self._call_cuda, daemon=True))
        return super().__enter__()

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


class DecodingLanes(BackgroundThreads):
    """The loader's GPU decoding lanes without the loader (gpujpeg.lanes of `spec`: None the
    default): each lane in a thread of its own, on a stream of its own, decoding the same
    screened JPEGs batch after batch as fast as it can. Their CPU threads, engines and CUDA
    calls share the training process; no packers, readers, crops or loader Python do.
    `images` counts what they decoded."""

    failure = "a decoding lane failed"

    def __init__(self, jpegs: list, spec: str | None, device: torch.device,
                 batch: int = 256):
        super().__init__()
        from imageloader.gpujpeg import available, lanes
        jpegs = page_locked(jpegs)  # as the loader's packed batches are: no staging copies
        self.groups = [jpegs[i:i + batch] for i in range(0, len(jpegs) - batch + 1, batch)]
        if not self.groups:
            raise ValueError(f"DecodingLanes needs at least {batch} JPEGs, got {len(jpegs)}")
        if spec and spec.split("+")[0] == "nvjpeg":  # nvJPEG called directly, no nvImageCodec
            from probe_nvjpeg import DirectLane
            self.lanes = [DirectLane(self.groups, device) for _ in spec.split("+")]
        else:
            self.lanes = lanes(available(device, "RGB", first=True)[0], spec)
        self.device = device
        self.decoded = [0] * len(self.lanes)  # by lane: each thread counts its own
        self.threads = [threading.Thread(target=self._decode, args=(k, lane), daemon=True)
                        for k, lane in enumerate(self.lanes)]

    @property
    def images(self) -> int:
        return sum(self.decoded)

    def _decode(self, k: int, lane) -> None:
        try:
            with torch.cuda.stream(torch.cuda.Stream(self.device)):
                while not self.stop.is_set():
                    for group in self.groups:
                        decoded = lane.decode(group)
                        self.decoded[k] += sum(image is not None for image in decoded)
                        if self.stop.is_set():
                            return
        except BaseException as error:  # noqa: BLE001 (handed to __exit__)
            self.error = error


def page_locked(arrays: list) -> list:
    """The arrays copied into one page-locked buffer, as views of it (unchanged without CUDA):
    the decoders' copies from pageable memory go through the driver's staging buffers, which
    the loader's never do (its packers write into page-locked batch buffers)."""
    if not arrays or not torch.cuda.is_available():
        return arrays
    import numpy as np
    buffer = torch.empty(sum(len(a) for a in arrays), dtype=torch.uint8,
                         pin_memory=True).numpy()
    out, at = [], 0
    for array in arrays:
        view = buffer[at:at + len(array)]
        view[:] = np.asarray(array, np.uint8)
        out.append(view)
        at += len(array)
    return out


def host_busy() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole host so far, from /proc/stat: over a window the
    busy cores, whoever keeps them busy (the loader's processes, the decoders' threads)."""
    ticks = os.sysconf("SC_CLK_TCK")
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / ticks, sum(fields[:8]) / ticks


def busy_cores(before: tuple[float, float], seconds: float) -> float:
    return round((host_busy()[0] - before[0]) / seconds, 1)


class KeepCoresFree:
    """Every thread of this process but the training's (the main thread, autograd's) and
    every thread of its descendants (the loader's readers and packers) kept off the first
    `cores` cores, set again every 0.2 s (lanes are made anew each epoch): does the training
    thread lose time waiting for a core?"""

    TRAINING = ("pt_autograd",)

    def __init__(self, cores: int):
        allowed = sorted(os.sched_getaffinity(0)) if cores else []
        if cores and not 0 < cores < len(allowed):
            raise ValueError(f"KeepCoresFree: {cores} of {len(allowed)} cores leaves none")
        self.cores, self.everyone = cores, set(allowed)
        self.others = set(allowed[cores:])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._keep, daemon=True)
        self.main = threading.main_thread().native_id

    def __enter__(self):
        if self.cores:
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.cores:
            self.thread.join()
            for tid in self._tasks():
                with _gone_meanwhile():
                    os.sched_setaffinity(tid, self.everyone)

    def _keep(self) -> None:
        while not self.stop.wait(0.2):
            for tid in self._tasks():
                with _gone_meanwhile():
                    os.sched_setaffinity(tid, self.others)

    def _tasks(self) -> list[int]:
        """This process's threads but the training's, and every thread of its descendants."""
        mine = [int(t) for t in os.listdir("/proc/self/task")
                if int(t) not in (self.main, threading.get_native_id())
                and not _comm(f"/proc/self/task/{t}").startswith(self.TRAINING)]
        return mine + [int(t) for pid in descendants(os.getpid())
                       for t in _listdir(f"/proc/{pid}/task")]


class _gone_meanwhile:
    """A thread or process that ended between listing it and setting it: nothing to do."""

    def __enter__(self):
        return self

    def __exit__(self, kind, *rest):
        return kind is not None and issubclass(kind, ProcessLookupError)


def _comm(task: str) -> str:
    try:
        return Path(task, "comm").read_text().strip()
    except OSError:
        return ""


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc/*/stat's parent ids."""
    children = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            children[int(stat[stat.rindex(")") + 2:].split()[1])].append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


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


def ceiling_row(trainer, args, label: str, beside: str | None = None,
                lanes: tuple | None = None, **interference) -> dict:
    """ResNet steps on data already on the GPU beside the `interference` threads, beside
    our loader (`beside`: "thread" or "process", LoaderBeside), or beside its decoding lanes
    alone (`lanes`: (spec, JPEGs), DecodingLanes)."""
    batches = bench.ceiling_batches(args, 100)
    if beside:
        neighbour = LoaderBeside(args.archive, bench.our_loader_kwargs(
            args, 2, "cuda", lanes=args.loader_lanes), beside)
    elif lanes:
        neighbour = DecodingLanes(lanes[1], lanes[0], torch.device("cuda"), args.batch_size)
    else:
        neighbour = nullcontext()
    with Interference(**interference) as busy, neighbour:
        if lanes:  # their buffers grown and kernels loaded before the window
            while neighbour.images < 4 * args.batch_size * len(neighbour.lanes) \
                    and not neighbour.error:
                time.sleep(0.05)
            decoded0 = neighbour.images
        main0, t0, host0 = time.thread_time(), time.perf_counter(), host_busy()
        before = neighbour.batches.value if beside else 0
        images0 = busy.images
        result = bench.timed_training(trainer, batches, args, label)
        seconds = time.perf_counter() - t0
        steps = result["images"] / args.batch_size
        result["main_thread_cpu_ms_per_step"] = (time.thread_time() - main0) * 1e3 / (
            steps + args.warmup)
        result["streamed_gb_per_s"] = busy.copied / 1e9 / seconds
        result["cuda_calls_images_per_s"] = (busy.images - images0) / seconds
        result["host_busy_cores"] = busy_cores(host0, seconds)
        if beside:
            result["beside_img_per_s"] = (neighbour.batches.value - before) \
                * args.batch_size / seconds
        if lanes:
            result["lanes_img_per_s"] = (neighbour.images - decoded0) / seconds
    streamed = f", others copied {result['streamed_gb_per_s']:.1f} GB/s" if busy.stream else ""
    streamed += f", host cores busy {result['host_busy_cores']}"
    if beside:
        streamed += f", the loader beside dropped {result['beside_img_per_s']:.0f} img/s"
    if lanes:
        streamed += f", the lanes beside decoded {result['lanes_img_per_s']:.0f} img/s"
    if busy.cuda_calls:
        streamed += f", CUDA calls for {result['cuda_calls_images_per_s']:.0f} images/s"
    print(f"{'':32s} main thread CPU {result['main_thread_cpu_ms_per_step']:.1f} ms/step"
          + streamed, flush=True)
    return result


def loader_row(trainer, args, label: str, switch: float | None = None, keep_free: int = 0,
               workers: int | None = None) -> dict:
    """ResNet steps fed by our loader (decode="cuda"); `switch`: the GIL's switch interval,
    `keep_free`: cores kept for the training threads (KeepCoresFree), `workers`: packers."""
    default = sys.getswitchinterval()
    if switch:
        sys.setswitchinterval(switch)
    loader_args = argparse.Namespace(**{**vars(args), "gpu_workers": workers})
    try:
        with bench.our_loader(args.archive, loader_args, prefetch=2, decode="cuda",
                              lanes=args.loader_lanes) as loader, \
                KeepCoresFree(keep_free):
            it = bench.forever(loader)
            for _ in range(args.loader_warmup):  # past the first epoch (the plain copy)
                trainer.step(*next(it))
            before, t0, host0 = thread_cpu(), time.perf_counter(), host_busy()
            process0 = time.process_time()
            args_timed = argparse.Namespace(**{**vars(args), "warmup": 1})
            result = bench.timed_training(trainer, it, args_timed, label)
            after, process = thread_cpu(), time.process_time() - process0
            result["host_busy_cores"] = busy_cores(host0, time.perf_counter() - t0)
    finally:
        sys.setswitchinterval(default)
    batches = result["images"] / args.batch_size
    per_batch = {name: round(seconds * 1e3 / batches, 2)
                 for name, seconds in cpu_by_name(before, after, process).items() if seconds > 0}
    result["thread_cpu_ms_per_batch"] = dict(sorted(per_batch.items(), key=lambda kv: -kv[1]))
    result["seconds_wall"] = time.perf_counter() - t0
    print(f"{'':32s} host cores busy {result['host_busy_cores']}; CPU ms per batch by thread: "
          f"{result['thread_cpu_ms_per_batch']}", flush=True)
    return result


def main() -> None:
    args = bench.probe_args(__doc__.splitlines()[0], steps=400, out="bench-out/threads.json",
                            extra=add_row_sets)
    configure_cuda_queues()
    trainer = bench.Trainer(args.model, 100)
    if args.schedule:
        print(f"CUDA schedule: {set_schedule(args.schedule)}", flush=True)
    cores = os.cpu_count() or 1
    first = ceiling_row(trainer, args, "data on GPU")
    if args.decoders_beside:
        return write(args, decoders_rows(trainer, args, first))
    if args.lanes_beside:
        return write(args, lanes_rows(trainer, args, first))
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


SCHEDULES = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}  # cudaDeviceSchedule*


def set_schedule(name: str, runtime=None) -> str:
    """How every thread of this process waits in CUDA's synchronizing calls (its own and the
    decoders'): the device's flags set again on the running context, read back."""
    rt = runtime or cuda_runtime()
    flags = ctypes.c_uint()
    CudaCalls._check(rt.cudaGetDeviceFlags(ctypes.byref(flags)))
    CudaCalls._check(rt.cudaSetDeviceFlags(ctypes.c_uint((flags.value & ~0x7)
                                                          | SCHEDULES[name])))
    CudaCalls._check(rt.cudaGetDeviceFlags(ctypes.byref(flags)))
    found = {v: k for k, v in SCHEDULES.items()}.get(flags.value & 0x7, hex(flags.value))
    if found != name:
        raise RuntimeError(f"CUDA kept schedule {found} where {name} was asked")
    return found


def add_row_sets(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beside-only", action="store_true",
                        help="only the rows with our loader beside the steps")
    parser.add_argument("--decoders-beside", action="store_true",
                        help="only the rows with the decoding lanes alone beside the steps, "
                             "and the loader feeding them with cores kept or fewer packers")
    parser.add_argument("--lanes-beside", nargs="+", default=None, metavar="SPEC",
                        help="only rows of the steps beside these decoding lanes alone "
                             "(gpu_lanes specs; 'default': the loader's own; 'nvjpeg', "
                             "'nvjpeg+nvjpeg': nvJPEG's engines called directly, "
                             "probe_nvjpeg.DirectLane)")
    parser.add_argument("--loader-lanes", default="auto", metavar="SPEC",
                        help="gpu_lanes of every loader the rows make ('auto': its default)")
    parser.add_argument("--schedule", default=None, choices=sorted(SCHEDULES),
                        help="how this process's CUDA calls wait for the GPU (cudaSetDeviceFlags, "
                             "after CUDA started: the driver's default, auto, spins while the "
                             "process has fewer contexts than cores)")
    parser.add_argument("--trace-beside", default=None, metavar="SPEC",
                        help="then a profiler trace of 5 steps beside these lanes, "
                             "written as --out with .trace.json")


def decoders_rows(trainer, args, first: dict) -> list[dict]:
    """Is it the decoders (their engines, CPU threads, CUDA calls) that slow the training
    thread, or the rest of the loader (packers' cores, its Python, its crops)?"""
    from bench_decoders import screened_jpegs
    jpegs = screened_jpegs(args.archive, 2048)
    return [first,
            ceiling_row(trainer, args, "+ the default lanes decoding, no loader",
                        lanes=(None, jpegs)),
            ceiling_row(trainer, args, "+ one lane of the engines (hw), no loader",
                        lanes=("hw", jpegs)),
            ceiling_row(trainer, args, "+ one CUDA lane (cuda:8), no loader",
                        lanes=("cuda:8", jpegs)),
            loader_row(trainer, args, "loader, decode=cuda"),
            loader_row(trainer, args, "loader, 2 cores kept for training", keep_free=2),
            loader_row(trainer, args, "loader, 4 packers", workers=4),
            ceiling_row(trainer, args, "data on GPU, again")]


def lanes_rows(trainer, args, first: dict) -> list[dict]:
    """The steps beside each of --lanes-beside alone and fed by the loader, then traced
    beside --trace-beside."""
    from bench_decoders import screened_jpegs
    jpegs = screened_jpegs(args.archive, 2048)
    rows = [first]
    for spec in args.lanes_beside:
        lanes = (None if spec == "default" else spec, jpegs)
        rows.append(ceiling_row(trainer, args, f"+ lanes {spec}, no loader", lanes=lanes))
    rows.append(loader_row(trainer, args, "loader, decode=cuda"))
    rows.append(ceiling_row(trainer, args, "data on GPU, again"))
    if args.trace_beside:
        spec = None if args.trace_beside == "default" else args.trace_beside
        path = str(Path(args.out).with_suffix(".trace.json"))
        with DecodingLanes(jpegs, spec, torch.device("cuda"), args.batch_size):
            bench.trace_steps(trainer, bench.ceiling_batches(args, 100), path, steps=5)
    return rows


def write(args, rows: list[dict]) -> None:
    out = {"environment": bench.environment(), "args": vars(args), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
