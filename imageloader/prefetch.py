"""Stage 4, prefetch: copy batches to the GPU ahead of use on one side stream, with event waits.

Up to `prefetch` batches are in flight. For each, on the loader's side stream: a non_blocking copy
from page-locked memory, then the device transform (uint8 -> float/bf16, mean/std, channels_last),
then an event. Before a batch is handed out, the CONSUMER's current stream waits on that event:
a wait on the GPU, the host does not block. The same event, once complete, releases the host
buffer back to its pool (explicit owner counts, see pool.py).

Device memory of a handed-out batch: we call `record_stream(consumer)` on every output tensor.
We chose this over a fixed device pool guarded by consumer events because the caching allocator
then knows the truth: the memory is not reused until the user drops the tensor AND the consumer's
work queued before that point has finished, even if the user keeps the batch for several steps.
A fixed pool would silently overwrite a batch the user still holds.

Streams are per thread in PyTorch, so we never set the consumer's current stream: side-stream
work is issued inside `with torch.cuda.stream(side)` blocks, which restore it on exit. Only
`step_stream`, which the user enters around the steps, makes a stream current: one of higher
priority than nvJPEG's, so that the GPU starts the model's waiting kernels before its
conversions (ours, small, go before both). The side
stream is created once per Prefetcher (not per epoch: timm's per-epoch stream grew reserved
memory, their issue #2781).

Works for any iterable of tensors or nested tuples/lists/dicts of tensors (a DataLoader, a list
of offloaded weights). CPU tensors that are not pinned are first copied into reusable pinned
staging buffers, never sent pageable (pageable copies block the host and run at ~1/3 speed).
Without CUDA the same API runs synchronously on the CPU.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import faulthandler
import queue
import sys
import threading
import time
import warnings
from typing import Any, Callable, Iterable, Iterator

import torch

from .pool import BufferPool, HostBatch

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
Release = Callable[[Any], None]  # called with the event after which host memory may be reused
# The side streams' CUDA priority when a Prefetcher is not given one, and of a split lane's
# helper (gpujpeg.SplitJpeg). None: the most urgent torch allows on the device (-3 on an H200).
# Why: a lane decodes its next batch only after its crops and copies, which are small; most
# urgent, the block scheduler starts them between the model's blocks, even when the steps run
# at -1 (step_stream): ResNet-18 on photos +1.6% in six interleaved pairs, all up; ResNet-50 on
# photos and ResNet-18 on 500x375 within 0.6% (results/2026-11-29-h200-lanespriority; with
# the steps at 0, -1 against 0 gained under a point, 2026-11-23-h200-probe-queues, and nothing
# on photos, 2026-11-26-gpu1-mends-lanes). nvJPEG's work does not follow: nvImageCodec runs
# its decoders' copies and kernels (nvJPEG's colour conversion) on streams it makes itself at
# the default priority, 0, and makes our stream wait for them (preSync / completePostSync in
# its src/image_generic_codec.h); no option sets their priority. That is not what ResNet-18
# waits for: with the lanes most urgent, its steps at 0 (a side stream) against -1 fed it the
# same (11,374 against 11,376 img/s, two pairs each; waiting less, stepping slower,
# results/2026-11-29-h200-wall). A module setting, not an option, for the probes (bench.py
# --stream-priority).
SIDE_STREAM_PRIORITY: int | None = None
_END = object()


class Marker:
    """Base of items that go through a Prefetcher as they are, in their place among the others:
    no copy, no transform, no event (epoch.py ends each epoch of its stream with one, so the
    prefetcher can go on into the next epoch). They come with no host memory to release."""


def small_to_device(values, device: torch.device, dtype: torch.dtype | None = None
                    ) -> torch.Tensor:
    """A small host list or array (indices, crop tables) on `device` without a hidden sync:
    torch.tensor(..., device="cuda") copies from pageable memory, which waits for the stream;
    from page-locked memory the copy is just queued on it. On the CPU: the tensor itself."""
    tensor = torch.as_tensor(values)
    if dtype is not None:
        tensor = tensor.to(dtype)
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def resolve_device(device: str | torch.device | None) -> torch.device:
    """None -> the current CUDA device if there is one, else the CPU."""
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {device} requested but CUDA is not available")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def side_stream_priority(device: torch.device) -> int:
    """The CUDA priority of the loader's own streams on `device`: SIDE_STREAM_PRIORITY, or
    where that is None the most urgent one torch allows there (lower is more urgent)."""
    if SIDE_STREAM_PRIORITY is not None:
        return SIDE_STREAM_PRIORITY
    # Asked of the current device: outside the guard a loader on cuda:1 would make a context
    # on cuda:0 (~500 MB of its memory, and a process on a GPU another job may own).
    with torch.cuda.device(device):
        return torch.cuda.Stream.priority_range()[1]


@contextlib.contextmanager
def step_stream(priority: int = -1, device: str | torch.device | None = None):
    """Run the block (the training steps) on a new CUDA stream of `priority` (lower is more
    urgent). nvJPEG's streams run at the default priority, CUDA's least urgent, so with the
    steps at -1 the GPU starts a waiting kernel of the model's before one of nvJPEG's (the
    loader's own crops and copies, small, are more urgent still: side_stream_priority): +0.3 to
    +4.9% img/s for ResNet-18/-50 fed by GPU decoding on one H200, and as much for DALI
    (scripts/bench/results/2026-11-29-h200-priority). Batches handed out inside
    follow it: the hand-over waits on the consumer's current stream. Yields the stream; without
    CUDA, or for a CPU device, changes nothing and yields None.

    Host and device order: the new stream first waits for all the caller's stream has queued
    (the model's weights copied in, the optimizer's state), and on leaving the caller's stream
    waits for the block's work, so what it left is safe to use there. Neither blocks the host."""
    device = resolve_device(device)
    if device.type != "cuda":
        yield None
        return
    caller = torch.cuda.current_stream(device)
    stream = torch.cuda.Stream(device, priority=priority)
    stream.wait_stream(caller)
    try:
        with torch.cuda.stream(stream):
            yield stream
    finally:
        caller.wait_stream(stream)


class Normalize:
    """uint8 (N, C, H, W) -> `dtype`, (x/255 - mean)/std, in channels_last or contiguous memory.

    Runs wherever the tensor is: on the side stream for GPU batches, so PCIe carries uint8
    (4x fewer bytes than float32) and the arithmetic is nearly free.
    """

    def __init__(self, mean=IMAGENET_MEAN, std=IMAGENET_STD, *, dtype=torch.float32,
                 channels_last: bool = True):
        if len(mean) != len(std):
            raise ValueError("mean and std need one value per channel")
        self.mean, self.std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
        self.dtype, self.channels_last = dtype, channels_last
        self._constants: dict = {}

    def _scale_shift(self, channels: int, device: torch.device):
        key = (channels, device)
        if key not in self._constants:
            mean, std = self.mean, self.std
            if channels != len(mean):
                if len(mean) != 3 or channels != 1:
                    raise ValueError(f"{channels}-channel images but {len(mean)} means")
                mean, std = (sum(mean) / 3,), (sum(std) / 3,)  # grayscale: average the stats
            scale = torch.tensor([1 / (255 * s) for s in std], dtype=self.dtype)
            shift = torch.tensor([-m / s for m, s in zip(mean, std)], dtype=self.dtype)
            self._constants[key] = (scale.view(1, -1, 1, 1).to(device),
                                    shift.view(1, -1, 1, 1).to(device))
        return self._constants[key]

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        fmt = torch.channels_last if self.channels_last else torch.contiguous_format
        scale, shift = self._scale_shift(images.shape[1], images.device)
        # Convert first, then two in-place passes of one dtype: mixed-dtype broadcasting into
        # a channels_last output takes a slow path on the CPU (~10x).
        out = images.to(dtype=self.dtype, memory_format=fmt)
        return out.mul_(scale).add_(shift)

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std}, dtype={self.dtype})"


# --------------------------------------------------------------------------------------------
# Nested structures


def map_tensors(fn: Callable[[torch.Tensor], Any], tree: Any) -> Any:
    """Apply `fn` to every tensor in nested tuples/lists/dicts/namedtuples/dataclasses."""
    if isinstance(tree, torch.Tensor):
        return fn(tree)
    if isinstance(tree, dict):
        return type(tree)((k, map_tensors(fn, v)) for k, v in tree.items())
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):
        return type(tree)(*(map_tensors(fn, v) for v in tree))
    if isinstance(tree, (list, tuple)):
        return type(tree)(map_tensors(fn, v) for v in tree)
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return dataclasses.replace(tree, **{f.name: map_tensors(fn, getattr(tree, f.name))
                                            for f in dataclasses.fields(tree) if f.init})
    return tree


def tensors_in(tree: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_tensors(found.append, tree)
    return found


# --------------------------------------------------------------------------------------------
# Pinned staging for tensors that arrive pageable


class _Staging:
    """Reusable pinned buffers for copying pageable tensors: a small pool per size class.

    Sizes are rounded up to classes (at most 1/8 apart), and at most `max_classes` pools are
    kept: the least recently used idle one is freed for a new class. Batches of varying sizes
    (a DataLoader without drop_last, variable resolutions) would otherwise grow page-locked
    memory by a pool per distinct byte count, for the life of the prefetcher.
    """

    def __init__(self, device: torch.device, slots: int, max_classes: int = 4):
        self.device, self.slots, self.max_classes = device, slots, max_classes
        self._pools: collections.OrderedDict[int, BufferPool] = collections.OrderedDict()
        self._lock = threading.Lock()  # several lanes may stage at once

    def stage(self, tensor: torch.Tensor) -> tuple[torch.Tensor, Release]:
        nbytes = tensor.numel() * tensor.element_size()
        with self._lock:
            pool = self._pool_for(size_class(nbytes))
            buf = pool.lease()
        pinned = buf.images.view(-1)[:nbytes].view(tensor.dtype).view(tensor.shape)
        pinned.copy_(tensor)  # host memcpy into page-locked memory (pageable cannot overlap)
        return pinned, lambda event: pool.release(buf, after=event)

    def _pool_for(self, size: int) -> BufferPool:
        pool = self._pools.get(size)
        if pool is not None:
            self._pools.move_to_end(size)  # most recently used last
            return pool
        self._evict()
        pin = self.device if self.device.type == "cuda" else None
        pool = self._pools[size] = BufferPool(self.slots, 1, (size, 1, 1), pin_device=pin)
        return pool

    def _evict(self) -> None:
        """Free the least recently used pools that no copy still holds, down to the limit."""
        for size in list(self._pools):
            if len(self._pools) < self.max_classes:
                return
            pool = self._pools[size]
            if pool.in_use() == 0:
                pool.close()  # waits for the copies that last read it (their events)
                del self._pools[size]

    @property
    def nbytes(self) -> int:
        return sum(pool.nbytes for pool in self._pools.values())

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


def size_class(nbytes: int) -> int:
    """nbytes rounded up to a multiple of an eighth of its power of two, or of 4 KiB: few
    classes, each at most an eighth (or a page) larger than what it holds."""
    step = max(4096, 1 << max(0, nbytes.bit_length() - 4))
    return max(step, -(-nbytes // step) * step)


# --------------------------------------------------------------------------------------------
# The copy engine


def _dump_stacks() -> None:
    """Every thread's Python stack on the process's stderr, written from C (no GIL needed)."""
    with contextlib.suppress(Exception):  # no usable stderr: the error still says what hung
        faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)


class _Busy:
    """Since when the prefetch thread has been in one batch's device work (0 s when not)."""

    def __init__(self):
        self.since: float | None = None

    def __enter__(self):
        self.since = time.monotonic()

    def __exit__(self, *exc):
        self.since = None

    def seconds(self) -> float:
        since = self.since
        return 0.0 if since is None else time.monotonic() - since


@dataclasses.dataclass
class _InFlight:
    tree: Any
    ready: Any                       # torch.cuda.Event recorded on the side stream; None: a Marker


class Backlog:
    """How many batches the prefetch lanes have finished that the consumer has not taken yet:
    0 when the training loop waits for the loader, up to prefetch + lanes when it is ahead.
    Read by decoders that add work only while they are what the consumer waits for
    (gpujpeg.SplitJpeg). Its own object, so a decoder reading it holds no Prefetcher."""

    def __init__(self):
        self._lock = threading.Condition()
        self._count = 0

    def add(self, n: int) -> None:
        with self._lock:
            self._count += n
            if self._count <= 0:
                self._lock.notify_all()

    def reset(self) -> None:
        """At each run's start: batches an earlier run finished and never handed out (a
        `break`, a newer iterator) are not waiting for this one's consumer."""
        with self._lock:
            self._count = 0
            self._lock.notify_all()

    def wait_until_empty(self, timeout: float) -> bool:
        """Whether, within `timeout` seconds, no finished batch is left waiting."""
        with self._lock:
            return self._lock.wait_for(lambda: self._count <= 0, timeout)

    def __call__(self) -> int:
        return max(0, self._count)  # a stopped run's lane may finish after the next reset


class StepLag:
    """How far a stream's GPU work runs behind its host, without waiting for it: each call
    records an event where the host stands on the stream and, at the same moment, a marker on
    an idle stream of its own (done at once: the GPU's "now"); the time between the two, once
    the stream's event is reached, is how far the GPU was behind when the call was made.
    (A stream event alone says only whether the GPU lags by more than the time between two
    calls: ResNet-50's host, held back by CUDA's launch queue, runs less than one step ahead
    of its GPU, so its steps looked as if they had kept up.) With CUDA's 8 default hardware
    queues the marker may queue behind other streams' work: the lag then reads short. The
    first call makes the idle stream, and once waited for the GPU's queued work there (~100 ms
    in a test on an H200, results/2026-11-29-h200-large); later calls never wait."""

    def __init__(self, device: torch.device, keep: int = 8):
        self.device, self.keep = device, keep
        self._marks: collections.deque = collections.deque()  # (marker, event), oldest first
        self._spare: list = []  # pairs both reached and read: recorded again, not made anew
        self._idle = None

    def lag(self, stream) -> float | None:
        """The most seconds the GPU was behind at the calls whose points it reached since the
        last call (None: none reached since). While `keep` points wait to be reached, a call
        records none: a host many steps ahead is measured by its first points, not lost."""
        lag = None
        # query(): cudaEventQuery, no host wait; the streams keep running.
        while self._marks and self._marks[0][1].query() and self._marks[0][0].query():
            first, reached = pair = self._marks.popleft()
            behind = max(first.elapsed_time(reached), 0.0) / 1e3  # both done: no wait either
            lag = behind if lag is None else max(lag, behind)
            self._spare.append(pair)
        if len(self._marks) < self.keep:
            if self._idle is None:
                self._idle = torch.cuda.Stream(self.device)  # nothing else runs on it
            marker, event = self._spare.pop() if self._spare else (
                torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            marker.record(self._idle)
            event.record(stream)
            self._marks.append((marker, event))
        return lag


class Prefetcher:
    """Iterate `source` with batches copied to `device` up to `prefetch` batches ahead.

    `transform` (e.g. `Normalize()`) runs on the device on the side stream for each tensor
    that is a batch of images: pass a callable taking and returning the whole item instead via
    `item_transform` for anything else. `prefetch=0` copies synchronously on the consumer's
    stream (the original design, kept as a baseline).
    """

    def __init__(self, source: Iterable, device: str | torch.device | None = None, *,
                 prefetch: int = 2, item_transform: Callable[[Any], Any] | None = None,
                 staging_slots: int | None = None, threaded: bool = False,
                 priority: int | None = None, stall_timeout: float | None = None,
                 lanes: list[Callable[[Any], Any]] | None = None,
                 lanes_on_demand: bool = False, backlog: Backlog | None = None):
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        if lanes is not None and (item_transform is not None or not threaded or not lanes):
            raise ValueError("lanes are item transforms of the threaded prefetch stage: "
                             "give at least one, with threaded=True and no item_transform")
        self.source, self.device, self.prefetch = source, resolve_device(device), prefetch
        # lanes: item transforms that run side by side, each in a submit thread of its own
        # with a side stream of its own (GPU decoders: no single blocking call is the
        # ceiling); batches still come out in the order the source gave them.
        self.lanes = list(lanes) if lanes is not None else [item_transform]
        # lanes_on_demand: the lanes after the first take an item only while no finished one
        # waits for the consumer (the backlog is 0): they add their rate where the consumer
        # waits, and their device work stays off the GPU of a model that is slower than the
        # first lane. (Two GPU decoding lanes always on cost ResNet-50 ~2 points; on demand,
        # still 1-2 on one host: results/2026-11-26-gpu1-mends-lanes.)
        self.lanes_on_demand = lanes_on_demand
        self._lane = threading.local()  # which lane the calling submit thread is
        # threaded: submit (copy + transform) from a background thread, so heavy device-side
        # transforms (GPU decoding: thousands of small kernel launches per batch) overlap the
        # training loop's own launches instead of adding to them.
        self.threaded = threaded
        # threaded: the longest one batch's device work (copy, transform, GPU decode) may take
        # before the consumer stops waiting and raises, with every thread's stack on stderr.
        # None: wait as long as it takes. A stuck native call must not hang the training loop.
        self.stall_timeout = stall_timeout
        # CUDA stream priority of the side stream (lower is more urgent; torch clamps to the
        # device's range; None: side_stream_priority(), asked when the stream is made). A high
        # priority lets the block scheduler start our few small kernels between a training
        # kernel's blocks instead of after the whole kernel.
        self.priority = priority
        # threaded: batches finished by the lanes and not yet handed out (see Backlog).
        self.backlog = backlog if backlog is not None else Backlog()
        self._sides: dict[int, torch.cuda.Stream] = {}
        # Benchmarks set record_waits: then each hand-over records (before, after) events on
        # the consumer stream around its wait, i.e. the copy time the consumer was exposed to.
        self.record_waits = False
        self.wait_events: list[tuple[Any, Any]] = []
        self._lag = StepLag(self.device) if self.device.type == "cuda" else None
        self._staging = _Staging(self.device, staging_slots or prefetch + 2) \
            if self.device.type == "cuda" else None

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]

    @property
    def item_transform(self) -> Callable[[Any], Any] | None:
        """The first lane's transform (the only one unless lanes were given)."""
        return self.lanes[0]

    @item_transform.setter
    def item_transform(self, transform: Callable[[Any], Any] | None) -> None:
        self.lanes = [transform]  # one lane from now on

    def __iter__(self) -> Iterator[Any]:
        return self.run((item, None) for item in self.source)

    @property
    def side_stream(self) -> torch.cuda.Stream:
        """The side stream of the calling thread's lane (lane 0 outside submit threads)."""
        lane = getattr(self._lane, "index", 0)
        if lane not in self._sides:  # once per lane, not per epoch (timm's #2781)
            priority = side_stream_priority(self.device) if self.priority is None \
                else self.priority
            self._sides[lane] = torch.cuda.Stream(device=self.device, priority=priority)
        return self._sides[lane]

    def run(self, pairs: Iterable[tuple[Any, Release | None]]) -> Iterator[Any]:
        """Core loop over (host_item, release) pairs; `release(event)` frees host memory."""
        if self.device.type != "cuda":
            return self._run_cpu(pairs)
        if self.prefetch == 0:
            return self._run_sync(pairs)
        if self.threaded:
            return self._run_threaded(pairs)
        return self._run_ahead(pairs)

    def _run_cpu(self, pairs) -> Iterator[Any]:
        for item, release in pairs:
            try:
                out = item if isinstance(item, Marker) else self._transform(item)
            finally:  # also when the transform fails: the host buffer is not lost
                if release is not None:
                    release(None)
            yield out

    def _run_sync(self, pairs) -> Iterator[Any]:
        # The baseline: blocking copies on the consumer's stream, nothing overlaps.
        for item, release in pairs:
            if isinstance(item, Marker):
                yield item
                continue
            try:
                with torch.cuda.device(self.device):
                    before = self._mark(torch.cuda.current_stream(self.device))
                    moved = map_tensors(lambda t: t.to(self.device, non_blocking=False), item)
                    out = self._transform(moved)
                    if before is not None:
                        self.wait_events.append((before,
                                                 self._mark(torch.cuda.current_stream())))
            finally:  # the blocking copy has completed (or failed): the host buffer is free
                if release is not None:
                    release(None)
            yield out

    def _run_ahead(self, pairs) -> Iterator[Any]:
        pairs = iter(pairs)
        in_flight: collections.deque[_InFlight] = collections.deque()
        try:
            while True:
                while len(in_flight) < self.prefetch:
                    pair = next(pairs, None)
                    if pair is None:
                        break
                    in_flight.append(self._submit(*pair))
                if not in_flight:
                    return
                yield self._hand_over(in_flight.popleft())
        finally:
            in_flight.clear()  # abandoned early: the pools already wait on these copies' events

    def _run_threaded(self, pairs) -> Iterator[Any]:
        # One thread takes host items from `pairs` (for the loader: waiting on workers,
        # assigning buffers), one per lane submits copies and device transforms. nvJPEG holds
        # its caller until the decode is done, so with one thread collecting waited for
        # decoding and decoding for collecting; with one lane, each decode waited for the last.
        # Items are numbered as collected; a lane takes the next one when it is free (a slow
        # lane beside a fast one adds its rate) and the consumer hands them out in order.
        # `room` bounds what is taken and not yet handed out: prefetch batches ready and one
        # in each lane, however far the fast lanes run ahead of a slow one.
        collected: queue.Queue = queue.Queue(maxsize=2)
        jobs: queue.Queue = queue.Queue()
        self.backlog.reset()
        room = threading.Semaphore(self.prefetch + len(self.lanes))
        stop = threading.Event()
        busy = [_Busy() for _ in self.lanes]
        lanes = [threading.Thread(target=self._submit_all,
                                  args=(k, collected, jobs, room, stop, busy[k]),
                                  name="imageloader-prefetch" + (f"-{k}" if k else ""),
                                  daemon=True) for k in range(len(self.lanes))]
        collect = threading.Thread(target=self._collect_all,
                                   args=(iter(pairs), collected, stop),
                                   name="imageloader-collect", daemon=True)
        for thread in [collect, *lanes]:
            thread.start()
        stalled, waiting, number = False, {}, 0
        try:
            while True:
                while number not in waiting:
                    try:
                        done, job = self._next_job(jobs, busy)
                    except TimeoutError:
                        stalled = True
                        raise
                    if done is None:  # a lane failed outside any item's device work
                        raise job
                    waiting[done] = job
                job = waiting.pop(number)
                number += 1
                if job is _END:
                    return
                if isinstance(job, BaseException):
                    raise job
                handed = self._hand_over(job)
                # Only now may a lane take the next item: a lane woken earlier starts its batch
                # (Python under the GIL: gathering the JPEGs, the crop table; then CUDA calls)
                # while the hand-over makes its own. ResNet-50's hand-over took 0.9 ms at the
                # median so, even with the GPU idle (bench.py --sync-steps), and takes 0.18 ms
                # now (H200, results/2026-11-28-h200-handover).
                self.backlog.add(-1)
                room.release()
                yield handed
        finally:
            stop.set()
            patience = 0.0 if stalled else self.stall_timeout
            ended = [self._drain_until_ended(thread, jobs, patience) for thread in lanes]
            if all(ended) and self._drain_until_ended(collect, collected, patience, True) \
                    and hasattr(pairs, "close"):
                pairs.close()  # only now: a generator cannot be closed while another runs it

    def _next_job(self, jobs: queue.Queue, busy: list["_Busy"]) -> Any:
        """The next (number, job) a lane finished. Waiting on the source is not bounded here
        (the loader bounds it: Options.timeout); one batch's device work is, by stall_timeout."""
        while True:
            try:
                return jobs.get(timeout=1.0)
            except queue.Empty:
                stuck = max(lane.seconds() for lane in busy)
                if self.stall_timeout is not None and stuck > self.stall_timeout:
                    _dump_stacks()  # where it is stuck: the error alone would not say
                    raise TimeoutError(
                        f"the prefetch thread has spent {stuck:.0f} s in one batch's device "
                        f"work (copy, transform, GPU decode) on {self.device}; stacks of all "
                        f"threads are on stderr") from None

    @staticmethod
    def _drain_until_ended(thread, q: queue.Queue, patience: float | None,
                           unsubmitted: bool = False) -> bool:
        """Take what the thread still hands over until it ends (collected items, never
        submitted: their host buffers go back); False if it is still running after
        `patience` seconds (None: no limit) of being stopped: stuck in device work. It is a
        daemon thread: left behind, with a warning."""
        started = time.monotonic()
        while thread.is_alive() or not q.empty():  # unblock its put(), then join
            with contextlib.suppress(queue.Empty):
                _, item = q.get(timeout=0.05)
                if unsubmitted:
                    _release_unsubmitted(item)
            if patience is not None and thread.is_alive() \
                    and time.monotonic() - started > patience:
                warnings.warn(f"imageloader: {thread.name} did not end within "
                              f"{patience:.0f} s of being stopped; left behind",
                              RuntimeWarning, stacklevel=3)
                return False
        return True

    @staticmethod
    def _collect_all(pairs, collected: queue.Queue, stop: threading.Event) -> None:
        number = 0
        try:
            for pair in pairs:
                if not _put_unless(collected, (number, pair), stop):
                    _release_unsubmitted(pair)
                    return
                number += 1
        except BaseException as error:  # handed on to the consumer, raised in its loop
            _put_unless(collected, (number, error), stop)
            return
        _put_unless(collected, (number, _END), stop)

    def _submit_all(self, lane: int, collected: queue.Queue, jobs: queue.Queue,
                    room: threading.Semaphore, stop: threading.Event, busy: "_Busy") -> None:
        self._lane.index = lane
        number = None
        try:
            while not stop.is_set():
                if lane and self.lanes_on_demand and not self.backlog.wait_until_empty(0.1):
                    continue  # the consumer has a batch to take: the first lane suffices
                if not room.acquire(timeout=0.1):
                    continue
                try:
                    number, pair = collected.get(timeout=0.1)
                except queue.Empty:
                    room.release()
                    continue
                if pair is _END or isinstance(pair, BaseException):
                    jobs.put((number, pair))
                    _put_unless(collected, (number, pair), stop)  # the other lanes end too
                    return
                with busy:
                    job = self._submit(*pair)
                self.backlog.add(1)  # before the consumer can take it: never below 0
                jobs.put((number, job))
                number = None
        except BaseException as error:  # raised in the consumer's loop, at this item's turn
            jobs.put((number, error))

    def _submit(self, item: Any, release: Release | None) -> _InFlight:
        if isinstance(item, Marker):
            return _InFlight(item, None)  # nothing on the device: it waits for nothing
        releases = [release] if release is not None else []
        side = self.side_stream
        ready = None
        try:
            with torch.cuda.device(self.device), torch.cuda.stream(side):
                # The side stream must not start copying into memory the consumer may still
                # be reading from a previous allocation of the caching allocator;
                # record_stream on the outputs (in _hand_over) makes the allocator respect it.
                moved = map_tensors(lambda t: self._copy(t, releases), item)
                out = self._transform(moved)
                ready = torch.cuda.Event()
                ready.record(side)
        finally:
            # Also when the device step failed (an out-of-memory error the user catches): the
            # host buffers go back to their pools once what was queued on the side stream
            # before the failure has run, or every failure would cost the loader a buffer.
            after = ready if ready is not None else _event_on(side)
            for done in releases:
                done(after)  # owner count drops now; the pool reuses the memory after `after`
        return _InFlight(out, ready)

    def _copy(self, tensor: torch.Tensor, releases: list[Release]) -> torch.Tensor:
        if tensor.device == self.device:
            return tensor
        if tensor.device.type == "cpu" and not tensor.is_pinned():
            tensor, release = self._staging.stage(tensor)
            releases.append(release)
        return tensor.to(self.device, non_blocking=True)

    def _hand_over(self, job: _InFlight) -> Any:
        if job.ready is None:
            return job.tree  # a Marker
        consumer = torch.cuda.current_stream(self.device)
        before = self._mark(consumer)
        consumer.wait_event(job.ready)  # GPU-side wait: the host does not block here
        if before is not None:
            self.wait_events.append((before, self._mark(consumer)))
        for tensor in tensors_in(job.tree):
            if tensor.device == self.device:
                tensor.record_stream(consumer)  # see the module docstring
        return job.tree

    def hand_over_again(self, tree: Any, handed_on) -> Any:
        """A batch handed out before, handed out once more (a rank repeating its last batch
        for equal steps): the consumer's current stream waits for the stream it was handed to
        then, and its device memory is recorded on the current stream too."""
        if self.device.type != "cuda":
            return tree
        consumer = torch.cuda.current_stream(self.device)
        if handed_on is not None and handed_on != consumer:
            consumer.wait_stream(handed_on)
        for tensor in tensors_in(tree):
            if tensor.device == self.device:
                tensor.record_stream(consumer)
        return tree

    def consumer_stream(self):
        """The stream batches are handed to now (None on the CPU)."""
        return torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None

    def consumer_lag(self) -> float | None:
        """Called as the consumer comes for its next batch: seconds its GPU ran behind its
        host at a recent such call (StepLag; None on the CPU, or not known yet)."""
        return self._lag.lag(self.consumer_stream()) if self._lag is not None else None

    def _mark(self, stream) -> Any:
        if not self.record_waits:
            return None
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def _transform(self, item: Any) -> Any:
        transform = self.lanes[getattr(self._lane, "index", 0)]
        return transform(item) if transform is not None else item

    def close(self) -> None:
        self.wait_events.clear()
        if self._staging is not None:
            self._staging.close()


def _event_on(stream) -> Any:
    event = torch.cuda.Event()
    event.record(stream)
    return event


def _put_unless(q: queue.Queue, item, stop: threading.Event) -> bool:
    """Put with back-pressure; False if `stop` was set first."""
    while not stop.is_set():
        with contextlib.suppress(queue.Full):
            q.put(item, timeout=0.1)
            return True
    return False


def _release_unsubmitted(item) -> None:
    # A collected (host_item, release) pair that never reached the GPU: its buffer is free now.
    if isinstance(item, tuple) and len(item) == 2 and callable(item[1]):
        item[1](None)


def release_batch(pool: BufferPool, buf: HostBatch) -> Release:
    return lambda event: pool.release(buf, after=event)
