"""The public loader: read -> decode -> batch -> prefetch, assembled for one training loop.

    loader = ImageLoader("data/train.tgz", batch_size=256, train=True, device="cuda")
    for epoch in range(epochs):
        for images, labels in loader:   # images normalized on `device`, labels int64
            ...

Iterating again starts the next epoch (shuffle reseeded with `seed + epoch`). With `workers=0`
everything runs in the calling process; otherwise reader processes (one per archive, or per
share of an archive's regions: index.py) and `workers` decode processes fill shared, page-locked
batch buffers (workers.py). Processes start on first
iteration, live across epochs, and stop on `close()`, on leaving a `with` block, or at exit.
"""
from __future__ import annotations

import collections
import logging
import os
import random
import time
import warnings
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import torch

from . import MAX_CONNECTIONS
from .batch import FALLBACK, Counted, fill_batch
from .cache import PlainCopy, on_copy, plain_copies
from .decode import ALLOWED_FORMATS, Augment, Decoder, JpegPacker
from .gpudecode import GpuDecode, Packed
from .gpujpeg import available as gpu_jpeg_decoders
from .errors import Limits, check_policy, counted
from .pool import BufferPool, HostBatch
from .prefetch import Normalize, Prefetcher, release_batch, resolve_device
from .read import Region, Source, expand_sources, source_name
from .share import FixedShare, check_share, share_control
from .vocab import (Vocabulary, archive_classes, archive_regions, as_vocabulary,
                    cached_image_count)
from .workers import ReadPlan, WorkerPool

log = logging.getLogger(__name__)

# Sizes and priorities that were options once: tuning them measured no end-to-end gain
# (scripts/bench/README.md, "Settings that became constants"). Tests set them here.
ARENA_PER_IMAGE = 192 << 10     # decode="cuda": JPEG bytes per batch slot; a JPEG that does not
                                # fit is decoded on the CPU (stats.fallbacks["arena_full"])
RING_BYTES: int | None = None   # per worker, shared memory for member bytes in transit; None:
                                # ~2 batches of them (_ring_bytes); 0: through pipes
GPU_DECODE_NICE = 10            # added to readers' and packers' niceness with GPU decoding: the
                                # parent's decode thread is on the critical path, they have slack
CPU_DECODE_NICE = 0             # with CPU decoding the workers are the critical path


@dataclass(frozen=True)
class Options:
    """Less common settings, grouped so that the loader's signature stays short."""

    limits: Limits = Limits()
    on_error: str = "skip"              # image-level problems: "skip" (counted) or "raise"
    unknown_labels: str = "raise"       # class folder not in vocab: "raise" or "skip"
    inflate: str = "auto"               # "auto" | "rapidgzip" | "isal" | "gzip"
    inflate_threads: int | None = None  # rapidgzip threads (None: min(8, cores))
    readers: int | None = None          # reader processes: archives, or regions of one
                                        # (index.py), are dealt out; else one archive is split
                                        # by image (order then depends on the reader count).
                                        # None: see _default_readers
    regions: bool = True                # training from fewer archives than readers: split
                                        # them into regions that readers inflate separately
    plain_copy: PlainCopy | None = PlainCopy()  # gzip archives are inflated once, into an
                                        # uncompressed copy that every epoch reads (cache.py;
                                        # by default beside the archive, if 10% of the disk
                                        # stays free); None: inflate every epoch
    timeout: float = 300.0              # seconds without any batch before erroring out
    lookahead: bool = True              # start reading epoch e+1 as soon as e is fully read
    cpu_share: float | None = None      # decode="cuda": share of the images the packers
                                        # decode on the CPU instead (they reach the GPU as
                                        # pixels), for models that keep the GPU busy. None: 0,
                                        # or with decode="auto" a trial of 0 against 1
    gpu_decoder: str = "auto"           # decode="cuda": "nvimgcodec", "torchcodec",
                                        # "torchvision", or "auto": the first of those
                                        # installed (the fastest measured, gpujpeg.py)
    gpu_crop: str = "auto"              # decode="cuda", training crops: "triton" (one
                                        # kernel per batch, gpucrop.py), "roi_align"
                                        # (torchvision ops), "auto": triton where it runs
    formats: tuple[str, ...] = ALLOWED_FORMATS
    rank: int | None = None             # None: from torch.distributed if initialized
    world_size: int | None = None
    uneven: str = "pad"                 # ranks with fewer batches repeat ("pad") or all
                                        # ranks stop at the fewest full batches ("drop")


@dataclass
class LoaderStats:
    """What the last (or current) epoch did. `skipped` maps reasons to member counts."""

    epoch: int = -1
    batches: int = 0
    samples: int = 0
    bytes: int = 0
    skipped: Counter = field(default_factory=Counter)
    wait_s: float = 0.0                 # host time spent inside next(loader)
    seconds: float = 0.0
    decode: str = "cpu"
    inflate: str = ""
    workers: int = 0
    readers: int = 0                    # reader processes (0: read in the calling process)
    regions: int = 0                    # regions the archives were cut into (0: read whole)
    fallbacks: Counter = field(default_factory=Counter)  # decode="cuda": CPU-decoded, by why
    padded: int = 0                     # batches repeated so that ranks take equal steps
    cpu_share: float = 0.0              # decode="cuda": the share batches are given now
    share_rates: dict = field(default_factory=dict)  # decode="auto": batches/s the consumer
                                        # took with each share in the trial (share.py)

    def as_dict(self) -> dict:
        out = dict(self.__dict__)
        out["skipped"], out["fallbacks"] = dict(self.skipped), dict(self.fallbacks)
        return out


def default_workers() -> int:
    """This process's share of the cores it may use, minus one for the training loop itself.

    Under torchrun the ranks of one host share its cores (LOCAL_WORLD_SIZE of them): without
    dividing, 8 ranks would each start cores - 1 workers."""
    ranks_here = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    return max(1, _cores() // ranks_here - 1)


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class ImageLoader:
    """Batches of (images, labels) from `.tgz`/`.tar` archives of `<class>/<image>` members.

    Args:
        source: a path, a glob, a file object, or a list of them.
        batch_size: images per batch; the last partial batch is kept unless `drop_last`.
        train: random-resized-crop + flip (True) or resize + center crop (False).
        size: output size, int or (height, width).
        device: where batches arrive; default CUDA if available, else CPU.
        vocab: a Vocabulary, class list, {name: target} dict or file; default: scanned from
            the archives (and cached in a sidecar beside each).
        workers: decode processes; default all cores but one; 0 decodes in this process.
        prefetch: batches copied ahead on a side CUDA stream; 0 = synchronous baseline.
        seed: shuffle and augmentation seed; the order of epoch e uses `seed + e`.
        shuffle_buffer: samples in the shuffle buffer (gotorch's bufSize); default 4096 when
            training, 1 (archive order) otherwise.
        mode: "RGB" or "L" (gotorch's colorSpace).
        transform: optional torchvision (v2) transform taking and returning a uint8 CHW tensor;
            replaces the crop/flip preset.
        normalize: True (ImageNet mean/std, float32, channels_last), a `Normalize`, or False
            for uint8 batches.
        decode: "cpu" (Pillow in worker processes), "cuda" (a GPU JPEG decoder; workers only
            pack bytes) or "auto" (the default: where the device is CUDA and a GPU JPEG
            decoder is installed, GPU and CPU decoding are each timed on the first batches of
            training and the one that feeds this model faster is kept (share.py); else cpu).
            `loader.stats.decode` and `loader.stats.cpu_share` say what was chosen.
        options: an `Options` with limits, error policies, inflater and distribution settings.
    """

    def __init__(self, source: Source | Iterable[Source], batch_size: int = 256, *,
                 train: bool = True, size: int | tuple[int, int] = 224,
                 device: str | torch.device | None = None, vocab=None,
                 workers: int | None = None, prefetch: int = 2, seed: int = 0,
                 shuffle_buffer: int | None = None, drop_last: bool = False,
                 mode: str = "RGB", transform: Callable | None = None,
                 normalize: bool | Normalize = True, decode: str = "auto",
                 options: Options | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if workers is not None and workers < 0:
            raise ValueError(f"workers must be >= 0 (decode processes; 0 decodes in this "
                             f"process, None: the cores but one), got {workers}")
        self.options = options = options or Options()
        check_policy("on_error", options.on_error)
        check_policy("unknown_labels", options.unknown_labels)
        self.sources = tuple(expand_sources(source))
        self.batch_size, self.train, self.seed, self.drop_last = batch_size, train, seed, drop_last
        self.device = resolve_device(device)
        self.workers = default_workers() if workers is None else int(workers)
        self.shuffle_buffer = (4096 if train else 1) if shuffle_buffer is None else shuffle_buffer
        # Before the vocabulary: where it must be scanned, the scan writes the copy as well.
        self._copies = plain_copies(self.sources, options.plain_copy, limits=options.limits,
                                    inflate=options.inflate)
        self.vocab = as_vocabulary(vocab) or Vocabulary.from_archives(
            self.sources, limits=options.limits, inflate=options.inflate)
        self.decoder = Decoder(Augment.make(size, train), mode=mode, limits=options.limits,
                               formats=options.formats, transform=transform)
        self.normalize = Normalize() if normalize is True else (normalize or None)
        self.rank, self.world_size = _distributed(options)
        self.decode, jpeg = _choose_decode(decode, self.device, transform, mode,
                                           options.gpu_decoder)
        trial = decode == "auto" and self.decode == "cuda" and options.cpu_share is None
        if self.decode == "cuda" and workers is None:
            # Packing bytes is cheap, but each packer is fed by its own region reader (below),
            # and on the GPU host 8 readers were needed to inflate ~15k images/s. A trial of
            # CPU decoding (decode="auto") needs as many packers as the CPU path has workers:
            # a multiple of 8, so that 8 readers feed them evenly.
            self.workers = -(-self.workers // 8) * 8 if trial else min(8, self.workers)
        # The device step must not refer back to the loader: a reference cycle would leave
        # CUDA objects for the garbage collector, which may then run in a forked child.
        if self.decode == "cuda":
            self._gpu = GpuDecode(self.decoder, self.normalize, self.device, jpeg,
                                  crop=options.gpu_crop)
            self.prefetcher = Prefetcher((), self.device, prefetch=max(prefetch, 1),
                                         item_transform=self._gpu, threaded=True)
            self._fill = JpegPacker(self.decoder)
            self.cpu_share = share_control(options.cpu_share, trial=trial)
        else:
            self._gpu = None
            self.prefetcher = Prefetcher((), self.device, prefetch=prefetch,
                                         item_transform=_OnDevice(self.normalize))
            self._fill = self.decoder
            check_share(options.cpu_share)  # a bad value is an error whatever the decode
            self.cpu_share = FixedShare(0.0)
        log.info("imageloader: decoding on %s", self.decode_name)
        if self.decode == "cuda" and MAX_CONNECTIONS not in os.environ:
            log.warning("imageloader: decode='cuda' with CUDA's default 8 hardware queues: "
                        "GPU decoding then waits behind training kernels (ResNet-18: ~78%% "
                        "instead of ~92%% of its rate). Call imageloader.configure_cuda_queues() "
                        "before CUDA starts, or set %s=32.", MAX_CONNECTIONS)
        self.stats = LoaderStats(decode=self.decode_name, workers=self.workers)
        self._next_epoch = 0
        self._resume: dict | None = None
        self._progress: _Progress | None = None
        self._reader_skipped: Counter = Counter()
        self._archive_counts: list[int] | None = None
        self._part_list: tuple | None = None
        self._pool: BufferPool | None = None
        self._workers: WorkerPool | None = None
        self._finalizer = None
        # Epochs being iterated: close() ends them before freeing what their threads use.
        self._iterations: weakref.WeakSet = weakref.WeakSet()

    # ---- sizes -----------------------------------------------------------------------------

    @property
    def prefetch(self) -> int:
        return self.prefetcher.prefetch

    def _parts(self) -> tuple:
        """What readers are dealt and ranks split: the archives, or, when there are fewer
        archives than readers on all ranks, the regions of each (index.py). Decided once."""
        if self._part_list is None:
            split = self._regions_wanted()
            self._part_list = tuple(part for src in self.sources
                                    for part in (self._regions_of(src) if split else [src]))
        return self._part_list

    def _regions_wanted(self) -> bool:
        # Evaluation keeps the archive order, which regions read side by side would not.
        if not self.options.regions or self.shuffle_buffer <= 1 or self.workers == 0:
            return False
        readers = self.options.readers or self._region_readers()
        return len(self.sources) < readers * self.world_size

    def _region_readers(self) -> int:
        # A region reader inflates ~2k images/s (~110 MB/s: rapidgzip with its index keeps about
        # one core busy). GPU decode wants ~15k/s: one reader per packer, up to 8 (H200 host:
        # 4 -> 10k, 6 -> 14k, 8 -> 15-17k img/s), and a count that divides the packers: with
        # 10 packers and 8 readers (13.5k) the readers with two packers feed twice the batches.
        # CPU decode wants ~4-5k/s and every core a reader takes is one fewer for decoding:
        # 2 readers beat 1, 3 and 4 there (H200 host; scripts/bench/README.md).
        if self._gpu is not None:
            return max(r for r in range(1, min(self.workers, 8) + 1) if self.workers % r == 0)
        return max(1, self.workers // 6)

    def _regions_of(self, source) -> list:
        if hasattr(source, "read"):
            return [source]
        path = os.fspath(source)
        o = self.options
        regions = archive_regions(path, limits=o.limits, inflate=o.inflate)
        if not regions:
            return [source]
        if o.unknown_labels != "raise" and set(archive_classes(
                path, limits=o.limits, inflate=o.inflate)) - set(self.vocab):
            return [source]  # the regions' counts include images that will be skipped
        return regions

    def _archive_images(self) -> list[int]:
        """Images in each part before decode failures (from the vocabulary scan); read
        once: len() and every epoch's step count need them."""
        if self._archive_counts is None:
            self._archive_counts = self._count_archive_images()
        return self._archive_counts

    def _count_archive_images(self) -> list[int]:
        counts = []
        for part in self._parts():
            if isinstance(part, Region):
                counts.append(part.images)
                continue
            if hasattr(part, "read"):
                raise TypeError("the length of a stream is unknown until it has been read")
            per_class = archive_classes(os.fspath(part), limits=self.options.limits,
                                        inflate=self.options.inflate)
            counts.append(sum(n for label, n in per_class.items()
                              if label in self.vocab or self.options.unknown_labels == "raise"))
        return counts

    def _total_images(self) -> int:
        return sum(self._archive_images())

    @property
    def split_by_archive(self) -> bool:
        """With at least as many parts (archives or regions) as ranks, each rank reads only
        its own; otherwise every rank reads everything and decodes every world_size-th image."""
        return 1 < self.world_size <= len(self._parts())

    def _rank_images(self, epoch: int) -> list[int]:
        """Images each rank sees in `epoch` (shard order is reshuffled every epoch)."""
        if not self.split_by_archive:
            share, extra = divmod(self._total_images(), self.world_size)
            return [share + (1 if r < extra else 0) for r in range(self.world_size)]
        counts, order = self._archive_images(), self._shuffled_archives(epoch)
        return [sum(counts[i] for i in order[r::self.world_size])
                for r in range(self.world_size)]

    def images_per_epoch(self, epoch: int | None = None) -> int:
        """Images this rank will see in an epoch (default: the next) before decode failures."""
        return self._rank_images(self._next_epoch if epoch is None else epoch)[self.rank]

    def __len__(self) -> int:
        if self.world_size > 1:
            return self.steps_per_epoch()  # may change per epoch with archive splits
        n = self.images_per_epoch()
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    # ---- epochs ----------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch `epoch` (as DistributedSampler.set_epoch)."""
        self._next_epoch = int(epoch)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch = self._next_epoch
        self._next_epoch += 1
        resume, self._resume = self._resume, None
        if resume is not None and resume["epoch"] != epoch:
            resume = None  # set_epoch() moved away from the checkpoint's epoch
        iteration = self._iterate(epoch, resume)
        self._iterations.add(iteration)
        return iteration

    def _iterate(self, epoch: int, resume: dict | None = None):
        self._ensure_started()
        parts = self._parts()
        self.stats = LoaderStats(epoch=epoch, decode=self.decode_name, workers=self.workers,
                                 inflate=_inflater_name(self.sources, self.options,
                                                        self._copies),
                                 readers=self._workers.readers if self._workers else 0,
                                 regions=sum(isinstance(p, Region) for p in parts))
        progress = self._progress = _Progress.start(epoch, self.workers, resume)
        self.stats.skipped.update(progress.skipped)
        started = time.perf_counter()
        metas: collections.deque = collections.deque()
        produced = self._produce(epoch, resume, metas)
        wrap = Packed if self._gpu is not None else HostBatch.views
        batches = self.prefetcher.run(
            ((wrap(buf), release_batch(self._pool, buf)) for buf in produced))
        steps = self.steps_per_epoch(epoch) if self.world_size > 1 else None
        try:
            last = None
            while steps is None or progress.batches < steps:
                t0 = time.perf_counter()
                item = next(batches, None)
                waited = time.perf_counter() - t0
                self.stats.wait_s += waited
                if item is None:
                    if steps is None or last is None:
                        break
                    item = last  # this rank ran short: repeat, so collectives never hang
                    self.stats.padded += 1
                else:
                    meta = metas.popleft()
                    progress.delivered(meta, self.stats)
                    self.cpu_share.observe(waited, meta["cpu_share"])
                self.stats.cpu_share = self.cpu_share.share
                self.stats.share_rates = self.cpu_share.rates
                last = item
                progress.batches += 1
                self.stats.batches += 1
                self.stats.samples += len(item[1])
                yield item
        finally:
            progress.closed = True  # ended or abandoned: iterating again starts the next epoch
            batches.close()
            produced.close()
            self.stats.seconds = time.perf_counter() - started
            self._collect_epoch_stats()

    def _produce(self, epoch: int, resume: dict | None, metas) -> Iterator[HostBatch]:
        """Filled host buffers in order, from worker processes or from this process."""
        source = self._workers.batches(epoch, resume) if self._workers is not None \
            else self._produce_here(epoch, self._archive_order(epoch), resume)
        try:
            for buf in source:
                if buf.count < self.batch_size and self.drop_last:
                    self._pool.release(buf)
                    continue
                # Matched to the batch when the user gets it, with the share it was decoded
                # with (share.py: a trial compares the shares by their own batches).
                metas.append({**buf.meta, "cpu_share": float(buf.arrays.cpu_share[0])})
                yield buf
        finally:
            source.close()

    def _produce_here(self, epoch: int, order: tuple[int, ...],
                      resume: dict | None) -> Iterator[HostBatch]:
        read_stats: dict = {}
        tasks = self._plan().tasks(epoch, order, self._reader_skipped, read_stats)
        for _ in range(resume["consumed"][0] if resume else 0):
            next(tasks, None)  # resuming mid-epoch: these made batches before the checkpoint
        try:
            while True:
                buf = self._pool.lease()
                self.cpu_share.stamp(buf)
                skipped: Counter = Counter()
                counted = Counted(tasks)
                buf.count = fill_batch(counted, buf.arrays, self._fill,
                                       on_error=self.options.on_error, skipped=skipped)
                buf.meta = {"worker": 0, "consumed": counted.n, "skipped": dict(skipped),
                            "merged": False}
                self.stats.bytes = read_stats.get("bytes", 0)
                if buf.count == 0:
                    self._pool.release(buf)
                    self._progress.add_skips(skipped, self.stats)
                    return
                yield buf
                if buf.count < self.batch_size:
                    return
        finally:
            tasks.close()

    # ---- checkpoints and ranks -----------------------------------------------------------

    def state_dict(self) -> dict:
        """Where the loader is: resuming from it continues with exactly the batches that
        were left (same order, augmentation and skip counts) for the same worker count and
        world size. Between epochs it points at the start of the next one."""
        if self._resume is not None:  # loaded and not iterated yet: that is where we are
            return dict(self._resume)
        progress = self._progress
        if progress is None or progress.closed or progress.epoch != self._next_epoch - 1:
            return {"version": 1, "config": self._config(), "epoch": self._next_epoch,
                    "batches": 0, "next_k": 0, "consumed": [0] * max(self.workers, 1),
                    "merged_done": 0, "skipped": {}}
        return {"version": 1, "config": self._config(), **progress.as_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state_dict()`; a different configuration is a clear error."""
        mine, theirs = self._config(), state.get("config", {})
        differ = {k: (theirs.get(k), v) for k, v in mine.items() if theirs.get(k) != v}
        if differ:
            raise ValueError("cannot resume: the checkpoint's loader differs in " + ", ".join(
                f"{k} (checkpoint {a!r}, now {b!r})" for k, (a, b) in differ.items()))
        self._next_epoch = int(state["epoch"])
        self._resume = state if state.get("batches", 0) else None

    def _config(self) -> dict:
        return {"workers": self.workers, "world_size": self.world_size, "rank": self.rank,
                "batch_size": self.batch_size, "seed": self.seed, "drop_last": self.drop_last,
                "shuffle_buffer": self.shuffle_buffer, "train": self.train,
                "archives": [source_name(s) for s in self.sources],
                "parts": len(self._parts())}

    def steps_per_epoch(self, epoch: int | None = None) -> int:
        """Batches every rank yields in an epoch, equal across ranks (Options.uneven)."""
        counts = self._rank_images(self._next_epoch if epoch is None else epoch)
        if self.options.uneven == "drop" or self.drop_last:
            return min(counts) // self.batch_size
        return -(-max(counts) // self.batch_size)

    def _shuffled_archives(self, epoch: int) -> list[int]:
        order = list(range(len(self._parts())))
        if self.shuffle_buffer > 1 and len(order) > 1:
            random.Random(self.seed + epoch).shuffle(order)  # shard order changes every epoch
        return order

    def _archive_order(self, epoch: int) -> tuple[int, ...]:
        """The archives this rank reads in `epoch`, in order: its share of the shuffled list
        (the same shuffle on every rank), or all of them when ranks split by image."""
        order = self._shuffled_archives(epoch)
        if self.split_by_archive:
            order = order[self.rank::self.world_size]
        return tuple(order)

    # ---- processes and memory -------------------------------------------------------------

    def _plan(self, readers: int = 1) -> ReadPlan:
        o = self.options
        # Ranks that read different archives need no per-image share of them.
        world = 1 if self.split_by_archive else self.world_size
        parts = tuple(on_copy(part, self._copies) for part in self._parts())
        shuffle, threads = self.shuffle_buffer, o.inflate_threads
        if len(parts) > len(self.sources):
            # Regions come in a new random order every epoch: the readers' buffers together
            # hold `shuffle_buffer` images (memory, and the wait before the first batch, stay
            # as with one reader), and each reader inflates only its regions, with a share of
            # the inflater threads one reader would have.
            shuffle = max(2, -(-shuffle // readers))
            threads = threads or max(2, min(8, _cores()) // readers)
        return ReadPlan(parts, dict(self.vocab.index), self.batch_size, shuffle, self.seed,
                        o.limits, o.unknown_labels, o.inflate, threads,
                        self.rank if world > 1 else 0, world)

    def _worker_nice(self) -> int:
        return GPU_DECODE_NICE if self._gpu is not None else CPU_DECODE_NICE

    def _ensure_started(self) -> None:
        if self._pool is not None:
            return
        pin = self.device if self.device.type == "cuda" else None
        # GPU decode: the prefetcher's collecting thread holds up to 3 more filled buffers
        # (2 queued, 1 being submitted) that the workers must not go without.
        slots = self.prefetch + 2 + self.workers + (3 if self._gpu is not None else 0)
        arena = self.batch_size * ARENA_PER_IMAGE if self._gpu is not None else 0
        ring = self._ring_bytes() if self.workers > 0 else 0
        resources = _Resources(self.prefetcher)
        # Registered before anything is allocated: whatever happens next, close() and the
        # interpreter's exit free the shared memory and stop the processes.
        self._finalizer = weakref.finalize(self, resources.close)
        try:
            resources.pool = BufferPool(slots, self.batch_size, self.decoder.out_shape,
                                        pin_device=pin, shared=self.workers > 0,
                                        arena_bytes=arena)
            if self.workers > 0:
                resources.workers = self._start_workers(resources.pool, ring)
        except BaseException:
            self._finalizer()
            raise
        self._pool, self._workers = resources.pool, resources.workers

    def _start_workers(self, pool: BufferPool, ring: int) -> WorkerPool:
        streams = any(hasattr(s, "read") for s in self.sources)
        readers = max(1, min(self.options.readers or self._default_readers(), self.workers))
        return WorkerPool(self._plan(readers), self._fill, pool, workers=self.workers,
                          readers=readers, order_of=self._archive_order,
                          on_error=self.options.on_error, timeout=self.options.timeout,
                          stream_sources=streams, lookahead=self.options.lookahead,
                          ring_bytes=ring, nice=self._worker_nice(),
                          prepare=self.cpu_share.stamp)

    def _default_readers(self) -> int:
        if len(self._parts()) > len(self.sources):  # split into regions
            return min(len(self._parts()), self._region_readers())
        if len(self.sources) > 1:
            return min(len(self.sources), max(1, self.workers // 4))
        # One archive: one reader. It walks ~10k members/s on the GPU host, twice what 15
        # decoding processes consume. With GPU decode a second one (Options(readers=2): each
        # inflates the whole stream, ~0.3 ms of CPU per image, and keeps every other image)
        # gained < 4% while using ~3 more cores (H200 host): it is not the
        # wall there either.
        return 1

    def _ring_bytes(self) -> int:
        """Each worker's byte ring holds ~2 batches of compressed members. The mean member
        size comes from fresh sidecars (never a new scan), else 128 KiB is assumed."""
        if RING_BYTES is not None:
            return RING_BYTES
        mean = 128 << 10
        paths = [os.fspath(s) for s in self.sources if not hasattr(s, "read")]
        counts = [cached_image_count(p) for p in paths]
        if paths and all(c for c in counts):
            mean = sum(os.path.getsize(p) for p in paths) / sum(counts)
        return int(min(max(2 * self.batch_size * mean, 8 << 20), 512 << 20))

    def _collect_epoch_stats(self) -> None:
        if self._workers is not None:
            reader_skipped, nbytes = self._workers.epoch_stats
            _tally(reader_skipped, self.stats)
            self.stats.bytes = nbytes or self.stats.bytes
        self.stats.skipped.update(self._reader_skipped)
        self._reader_skipped = Counter()
        if self._gpu is not None:
            _tally(self._gpu.take_counts(), self.stats)
        if self.stats.skipped:
            warnings.warn(f"epoch {self.stats.epoch}: skipped "
                          f"{counted(sum(self.stats.skipped.values()), 'member')} of "
                          f"{', '.join(source_name(s) for s in self.sources[:3])}"
                          f"{'...' if len(self.sources) > 3 else ''}: "
                          f"{dict(sorted(self.stats.skipped.items()))}", stacklevel=3)

    def close(self) -> None:
        """End any epoch still being iterated, stop worker processes, and free shared and
        page-locked memory."""
        for iteration in list(self._iterations):
            # A suspended iteration (`it = iter(loader)`, a wrapping generator) still has
            # prefetch threads reading the batch buffers: stop them first, or they would read
            # memory unmapped below (seen: a segfault when such a generator was dropped after
            # the `with` block had closed the loader).
            iteration.close()
        if self._finalizer is not None:
            self._finalizer()
        self._pool, self._workers = None, None

    @property
    def decode_name(self) -> str:
        """Where and with what images are decoded, e.g. "cuda (nvimgcodec, crops: triton)"."""
        if self._gpu is None:
            return "cpu (Pillow)"
        crops = f", crops: {self._gpu.crop}" if self.train else ""
        return f"cuda ({self._gpu.jpeg.name}{crops})"

    def __enter__(self) -> "ImageLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ImageLoader({len(self.sources)} archive(s), batch_size={self.batch_size}, "
                f"train={self.train}, device={self.device}, workers={self.workers}, "
                f"prefetch={self.prefetch}, {self.vocab!r})")


@dataclass
class _Progress:
    """What the user has received of an epoch: enough to resume exactly there."""

    epoch: int
    batches: int = 0
    next_k: int = 0                     # batch number after the last regular one delivered
    consumed: list = field(default_factory=list)  # tasks of each worker's stream delivered
    merged_done: int = 0
    skipped: Counter = field(default_factory=Counter)   # decode skips of delivered batches
    closed: bool = False

    @classmethod
    def start(cls, epoch: int, workers: int, resume: dict | None) -> "_Progress":
        if resume is None:
            return cls(epoch, consumed=[0] * max(workers, 1))
        return cls(epoch, resume["batches"], resume["next_k"], list(resume["consumed"]),
                   resume["merged_done"], Counter(resume["skipped"]))

    def delivered(self, meta: dict, stats: LoaderStats) -> None:
        if meta.get("merged"):
            self.merged_done += 1
        else:
            self.consumed[meta["worker"]] += meta["consumed"]
            if "k" in meta:  # workers number their batches; the in-process path does not
                self.next_k = meta["k"] + 1
        self.add_skips(meta.get("skipped", {}), stats)

    def add_skips(self, counts: dict, stats: LoaderStats) -> None:
        self.skipped.update(_tally(counts, stats))

    def as_dict(self) -> dict:
        return {"epoch": self.epoch, "batches": self.batches, "next_k": self.next_k,
                "consumed": list(self.consumed), "merged_done": self.merged_done,
                "skipped": dict(self.skipped)}


def _tally(counts: dict, stats: LoaderStats) -> Counter:
    """Add reported counts to the stats: skips by reason, FALLBACK-prefixed ones to fallbacks.
    Returns the skips."""
    skips: Counter = Counter()
    for key, n in counts.items():
        if key.startswith(FALLBACK):
            stats.fallbacks[key.removeprefix(FALLBACK)] += n
        else:
            skips[key] += n
    stats.skipped.update(skips)
    return skips


class _OnDevice:
    """The last step, on the batch's device (the side stream on CUDA): normalize, or copy."""

    def __init__(self, normalize: Normalize | None):
        self.normalize = normalize

    def __call__(self, item):
        images, labels = item
        if self.normalize is not None:
            images = self.normalize(images)
        elif images.device.type == "cpu":
            images = images.clone()  # the host buffer is reused: hand out our own copy
        if labels.device.type == "cpu":
            labels = labels.clone()
        return images, labels


class _Resources:
    """What a started loader holds; closing it stops the processes and frees the memory."""

    def __init__(self, prefetcher):
        self.prefetcher, self.pool, self.workers = prefetcher, None, None

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()
        if self.pool is not None:
            self.pool.close()
        self.prefetcher.close()


def _choose_decode(decode: str, device: torch.device, transform, mode: str,
                   gpu_decoder: str) -> tuple[str, list]:
    if decode not in ("cpu", "cuda", "auto"):
        raise ValueError(f"decode must be 'cpu', 'cuda' or 'auto', got {decode!r}")
    if decode == "cpu":
        return "cpu", []
    jpeg = gpu_jpeg_decoders(device, mode, gpu_decoder) if device.type == "cuda" else []
    if decode == "auto":
        return ("cuda", jpeg) if jpeg and transform is None else ("cpu", [])
    if device.type != "cuda":
        raise ValueError(f"decode='cuda' needs a CUDA device, not {device}")
    if not jpeg:
        raise ImportError("decode='cuda' needs a GPU JPEG decoder: pip install "
                          "nvidia-nvimgcodec-cu13 nvidia-nvjpeg (or torchcodec)")
    if transform is not None:
        raise ValueError("decode='cuda' applies the built-in presets on the GPU; a custom "
                         "transform needs decode='cpu'")
    return "cuda", jpeg


def _distributed(options: Options) -> tuple[int, int]:
    rank, world = options.rank, options.world_size
    if rank is None or world is None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            rank = dist.get_rank() if rank is None else rank
            world = dist.get_world_size() if world is None else world
    rank, world = rank or 0, world or 1
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside world_size {world}")
    return rank, world


def _inflater_name(sources, options: Options, copies: dict) -> str:
    from .read import choose_inflater
    paths = [s for s in sources if not hasattr(s, "read")]
    if paths and all(os.fspath(p) in copies for p in paths):
        return "none (plain copy)"
    try:
        return choose_inflater(options.inflate, seekable_path=bool(paths))
    except (ImportError, ValueError):
        return options.inflate
