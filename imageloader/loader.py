"""The public loader: read -> decode -> batch -> prefetch, assembled for one training loop.

    loader = ImageLoader("data/train.tgz", batch_size=256, train=True, device="cuda")
    for epoch in range(epochs):
        for images, labels in loader:   # images normalized on `device`, labels int64
            ...

Iterating again starts the next epoch (shuffle reseeded with `seed + epoch`). With `workers=0`
everything runs in the calling process; otherwise reader processes (one per archive, or per
share of an archive's regions: index.py) and `workers` decode processes fill shared, page-locked
batch buffers (workers.py).

The loader is an assembly of three objects with their own lifetimes:
- its `Plan` (plan.py): parts, order, counts, steps, and the fingerprint a checkpoint must match;
  decided on first use, plain data;
- its `Runtime` (runtime.py): processes, shared and page-locked memory, the live epoch; started
  by the first `iter()`, alive across epochs, ended once by `close()`, by leaving a `with`
  block, when the loader is garbage-collected, or at exit;
- an `EpochIterator` (epoch.py) per `iter()`: a newer one ends the older.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch

from . import MAX_CONNECTIONS
from .batch import batch_layout
from .cache import PlainCopy, plain_copies
from .decode import ALLOWED_FORMATS, Augment, Decoder, JpegPacker
from .epoch import EpochIterator, GpuStep, OnDevice, host_piece
from .errors import Limits, check_policy, check_split
from .gpudecode import GpuDecode, Packed
from .gpujpeg import available as gpu_jpeg_decoders, check_lanes, lanes as gpu_lanes
from .index import file_stamp
from .plan import Plan, Position, Settings, check_resume, cores, make_plan
from .pool import (SHARED_MEMORY_FOLDER, BufferPool, check_shared_memory, memory_for_buffers,
                   shared_memory_now)
from .prefetch import Backlog, Normalize, Prefetcher, resolve_device
from .read import Region, Source, expand_sources
from .remote import RemoteOptions, share_scans
from .runtime import LocalProducer, Runtime
from .share import FixedShare, check_share, share_control
from .vocab import Vocabulary, as_vocabulary, cached_image_count, refuse_two_splits
from .workers import WorkerPool

log = logging.getLogger(__name__)

# Sizes and priorities that were options once: tuning them measured no end-to-end gain
# (scripts/bench/README.md, "Settings that became constants"). Tests set them here.
ARENA_PER_IMAGE = 192 << 10     # decode="cuda": the least JPEG bytes per batch slot; a JPEG
                                # that does not fit is decoded on the CPU
                                # (stats.fallbacks["arena_full"]), so ...
ARENA_HEADROOM = 1.5            # ... a slot holds this many times the archives' mean member
ARENA_MAX_PER_IMAGE = 1 << 20   # where that is more, up to this on any host (page-locked: ~0.25
                                # GB a batch of 256, ~4-6 GB over the pool), and up to ...
ARENA_MEMORY_SHARE = 0.25       # ... the pool's arenas in this share of the memory the buffers
                                # come from (arena_room_per_slot); arena_per_image says why
RING_BYTES: int | None = None   # per worker, shared memory for member bytes in transit; None:
                                # ~2 batches of them (_ring_bytes); 0: through pipes
GPU_DECODE_NICE = 10            # added to readers' and packers' niceness with GPU decoding: the
                                # parent's decode thread is on the critical path, they have slack
CPU_DECODE_NICE = 0             # with CPU decoding the workers are the critical path
LANES_ON_DEMAND = True          # decode="cuda": the GPU lanes after the first take a batch only
                                # while the consumer has none waiting (Prefetcher); False: all
                                # at work all the time (bench.py --lanes-always; two lanes of
                                # the engines fed ResNet-18 the same either way,
                                # results/2026-11-29-h200-wall)


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
    split: str | tuple[str, ...] | None = None  # read only the images below folders of
                                        # this name above the class folders ("train" for an
                                        # archive of train/<class>/... and val/<class>/...),
                                        # or of these names, as one set (("train", "val"));
                                        # None: every image, refused if they come from two
                                        # splits (vocab= given or not)
    plain_copy: PlainCopy | None = PlainCopy()  # gzip archives are inflated once, into an
                                        # uncompressed copy that every epoch reads (cache.py;
                                        # by default beside the archive, if 10% of the disk
                                        # stays free); None: inflate every epoch
    timeout: float = 300.0              # seconds without any batch before erroring out;
                                        # decode="cuda": also one batch's GPU work
    lookahead: bool = True              # start reading epoch e+1 as soon as e is fully read,
                                        # and decoding and copying it once e is handed over
    cpu_share: float | None = None      # decode="cuda": share of the images the packers
                                        # decode on the CPU instead (they reach the GPU as
                                        # pixels), for models that keep the GPU busy. None: 0,
                                        # or with decode="auto" a trial of 0 against 1
    gpu_decoder: str = "auto"           # decode="cuda": "nvimgcodec", "torchcodec",
                                        # "torchvision", or "auto": the first of those
                                        # installed (the fastest measured, gpujpeg.py)
    gpu_lanes: int | str | None = None  # decode="cuda": GPU decoders at work on different
                                        # batches at once, a number or engines spelled out
                                        # ("hw:2+hw:2"), or one batch split between two
                                        # ("hw|cuda:8"); None: two lanes of the
                                        # hardware JPEG engines where the GPU has them
                                        # ("hw+hw"), else one (gpujpeg.lanes).
                                        # Lanes after the first decode only while
                                        # training waits for a batch. "hw+hw+hw" decodes
                                        # ~8% more photos a second, but its third thread
                                        # slows a host-bound model (ResNet-18: -5%)
    cpu_large: int | None = None        # decode="cuda": images of at least this many
                                        # pixels are decoded by the packers on the CPU
                                        # (DCT-scaled), not by the GPU's JPEG engines.
                                        # None: none, or with decode="auto" those of 2 MP
                                        # once the model is found GPU-bound (share.py);
                                        # a number: that, whatever the model
    gpu_crop: str = "auto"              # decode="cuda", training crops: "triton" (one
                                        # kernel per batch, gpucrop.py), "roi_align"
                                        # (torchvision ops), "auto": triton where it runs
    formats: tuple[str, ...] = ALLOWED_FORMATS
    rank: int | None = None             # None: from torch.distributed if initialized
    world_size: int | None = None
    uneven: str = "pad"                 # ranks with fewer batches repeat ("pad") or all
                                        # ranks stop at the fewest full batches ("drop")
    remote: RemoteOptions = RemoteOptions()  # URL sources: cache folder, credentials,
                                        # retries (remote.py)


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
    # decode="cuda": images CPU-decoded, by why; "gpu_decoded" the rest, and of those
    # "engines_refused" the ones the hardware JPEG engines left to nvImageCodec's other backends
    # and "progressive_sent" the progressive JPEGs the packers sent on (decode.ProgressiveRoute),
    # "gray_sampling_1x1" the grey ones sent with 1x1 sampling factors (decode.gray_sampling_at)
    fallbacks: Counter = field(default_factory=Counter)
    padded: int = 0                     # batches repeated so that ranks take equal steps
    cpu_share: float = 0.0              # decode="cuda": the share batches are given now
    share_rates: dict = field(default_factory=dict)  # decode="auto": batches/s the consumer
                                        # took with each share in the trial (share.py)
    cpu_bound: float | None = None      # decode="auto": the most batches/s CPU decoding
                                        # could feed, from the packers' timed decodes; not
                                        # 10% over the GPU's rate: the CPU is not tried
    cpu_large: int = 0                  # decode="auto": pixels from which the packers decode a
                                        # JPEG on the CPU, since the consumer was found
                                        # GPU-bound (share.LargeOnCpu); 0: none
    fetched: int = 0                    # bytes fetched from URL sources by this rank's readers
    requests: int = 0                   # ... in this many requests,
    retries: int = 0                    # of which this many repeated one that failed

    def as_dict(self) -> dict:
        out = dict(self.__dict__)
        out["skipped"], out["fallbacks"] = dict(self.skipped), dict(self.fallbacks)
        return out


def default_workers() -> int:
    """This process's share of the cores it may use, minus one for the training loop itself.

    Under torchrun the ranks of one host share its cores (LOCAL_WORLD_SIZE of them): without
    dividing, 8 ranks would each start cores - 1 workers."""
    return max(1, cores() // ranks_here() - 1)


def ranks_here() -> int:
    """The ranks of a torchrun job on this host (LOCAL_WORLD_SIZE), which share its cores and
    its memory; 1 without torchrun."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))


def buffer_count(prefetch: int, workers: int, gpu_lanes: int | None) -> int:
    """Batch buffers: the most batches on their way at once (decode="auto"'s trial skips
    as many after each change of share). `gpu_lanes`: None without GPU decoding."""
    # GPU decode: the prefetcher's collecting thread holds up to 3 more filled buffers
    # (2 queued, 1 being submitted) that the workers must not go without.
    # Threaded (GPU decoding): 2 more wait to be submitted and one is in each lane.
    return prefetch + 2 + workers + (2 + gpu_lanes if gpu_lanes is not None else 0)


def gpu_packers(workers: int, decodes_too: bool) -> int:
    """The packers a loader decoding on the GPU starts where the caller names no count, from
    the CPU path's `workers`. `decodes_too`: they may decode too (decode="auto"'s trial, or
    Options.cpu_large)."""
    # Packing bytes is cheap, but each packer is fed by its own region reader, and on the GPU
    # host 8 readers were needed to inflate ~15k images/s. Fewer cost the rate even where
    # the JPEGs are large (phone photos, 3.3 MB: 8 packers 814-858 img/s, 4 597-625, 2 302;
    # scripts/bench/results/2026-11-30-h200-packers). A trial of CPU decoding needs as many
    # packers as the CPU path has workers: a multiple of 8, so that 8 readers feed them evenly.
    return -(-workers // 8) * 8 if decodes_too else min(8, workers)


def arena_room_per_slot(slots: int, shared_free: int | None) -> int:
    """JPEG bytes each of `slots` batch slots may hold with the arenas in ARENA_MEMORY_SHARE of
    the memory their buffers come from (pool.memory_for_buffers: the host's or its
    container's, and `shared_free`, /dev/shm's free space, for shared buffers), split among
    the ranks here."""
    memory = memory_for_buffers(shared_free)
    return int(ARENA_MEMORY_SHARE * memory / ranks_here()) // max(1, slots)


def arena_per_image(mean_member_bytes: float | None, room: int = 0) -> int:
    """JPEG bytes a batch slot holds for GPU decoding, from the archives' mean member size.
    Room for a batch of average members and then some (a batch of 256 drawn from photos
    varies by a few % in bytes; a large photo takes many slots' room): the JPEGs that do not
    fit are decoded by the packers on the CPU, many times slower than the engines. A fixed
    192 KiB sent 14% of an archive of 1024x768 photos at quality 90 (229 KB) that way, 47% at
    quality 95 (372 KB): the loader alone ran at 5.1-5.4k and 1.5k img/s instead of 12.3-12.5k
    and 7.8k (H200, scripts/bench/results/2026-11-30-h200-arena). Capped, as it is
    page-locked in every buffer of the pool: at 1 MiB on any host, above it up to `room` (what
    the host's memory allows a slot, arena_room_per_slot). Phone photos (12 MP, 3.3 MB) need
    ~5 MiB: with 1 MiB 69% went to the packers, which decode them at a reduced scale, and the
    loader alone ran at 204-221 img/s, with room for all at 809-829 (20.5 GB page-locked over
    the pool's 16 buffers; H200, 128 GiB host, scripts/bench/results/2026-11-30-h200-phone)."""
    want = ARENA_HEADROOM * (mean_member_bytes or 0)
    cap = max(ARENA_MAX_PER_IMAGE, room, ARENA_PER_IMAGE)
    return int(min(max(want, ARENA_PER_IMAGE), cap))


class ImageLoader:
    """Batches of (images, labels) from `.tgz`/`.tar` archives of `<class>/<image>` members.

    Args:
        source: a path, a glob, a file object, or a list of them.
        batch_size: images per batch; the last partial batch is kept unless `drop_last`.
        train: random-resized-crop + flip (True) or resize + center crop (False).
        size: output size, int or (height, width).
        device: where batches arrive; default CUDA if available, else CPU. On another GPU
            than cuda:0 the loader touches no other device (its decoders are made and its
            nvImageCodec imported under `device`); a script that imports nvImageCodec itself
            first, with no device set, puts a context on cuda:0 (nvImageCodec's import does):
            call torch.cuda.set_device(device) before it.
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
            decoder is installed, GPU and CPU decoding are each timed early in training (past
            its first 64 batches) and GPU decoding is kept unless the CPU fed this model more
            than 10% faster (share.py); then, where the model's GPU runs behind its host and
            batches are ready, the workers also decode the JPEGs of >= 2 MP; else cpu).
            `loader.stats.decode`, `.cpu_share` and `.cpu_large` say what was chosen.
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
        if options.cpu_large is not None and (not isinstance(options.cpu_large, int) or
                                              isinstance(options.cpu_large, bool) or
                                              options.cpu_large < 1):
            raise ValueError(f"cpu_large must be None or a number of pixels >= 1, got "
                             f"{options.cpu_large!r}")
        check_lanes(options.gpu_lanes)  # errors whatever the decode, as cpu_share's
        # Split folders are known in lower case (split_folder), several as a sorted tuple
        self.options = options = dataclasses.replace(options, split=check_split(options.split))
        self.sources = tuple(expand_sources(source, options.remote))
        share_scans(self.sources, limits=options.limits, inflate=options.inflate)
        self.batch_size, self.train, self.seed, self.drop_last = batch_size, train, seed, drop_last
        self.device = resolve_device(device)
        self.workers = default_workers() if workers is None else int(workers)
        self.shuffle_buffer = (4096 if train else 1) if shuffle_buffer is None else shuffle_buffer
        # Before the vocabulary: where it must be scanned, the scan writes the copy as well.
        self._copies = plain_copies(self.sources, options.plain_copy, limits=options.limits,
                                    inflate=options.inflate)
        self.vocab = as_vocabulary(vocab) or Vocabulary.from_archives(
            self.sources, limits=options.limits, inflate=options.inflate, split=options.split)
        self._vocab_given = vocab is not None  # then no scan has refused two splits yet
        self.decoder = Decoder(Augment.make(size, train), mode=mode, limits=options.limits,
                               formats=options.formats, transform=transform)
        self.normalize = Normalize() if normalize is True else (normalize or None)
        self.rank, self.world_size = _distributed(options)
        self.decode, jpeg = _choose_decode(decode, self.device, transform, mode,
                                           options.gpu_decoder)
        trial = decode == "auto" and self.decode == "cuda" and options.cpu_share is None
        if self.decode == "cuda" and workers is None:
            self.workers = gpu_packers(self.workers, decodes_too=trial or options.cpu_large)
        # The device step must not refer back to the loader: a reference cycle would leave
        # CUDA objects for the garbage collector, which may then run in a forked child.
        if self.decode == "cuda":
            # One GpuDecode per lane: each has its decoder, its kept images and its side
            # stream, and works on a batch of its own (prefetch.py keeps them in order).
            # A split lane's helper, and every lane after the first, work only while the
            # consumer waits for batches (the backlog is empty).
            backlog = Backlog()
            self._gpu = [GpuDecode(self.decoder, self.normalize, self.device, [lane],
                                   crop=options.gpu_crop)
                         for lane in gpu_lanes(jpeg[0], options.gpu_lanes, backlog)]
            self.prefetcher = Prefetcher((), self.device, prefetch=max(prefetch, 1),
                                         lanes=[GpuStep(gpu) for gpu in self._gpu],
                                         threaded=True, stall_timeout=options.timeout,
                                         lanes_on_demand=LANES_ON_DEMAND, backlog=backlog)
            self._fill = JpegPacker(self.decoder, cpu_pixels=options.cpu_large)
            self.cpu_share = share_control(options.cpu_share, trial=trial,
                                           in_flight=self._buffer_count(),
                                           decoders=self.workers, batch_size=batch_size,
                                           large=options.cpu_large is None)
        else:
            self._gpu = None
            self.prefetcher = Prefetcher((), self.device, prefetch=prefetch,
                                         item_transform=OnDevice(self.normalize))
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
        self._resume: Position | None = None   # loaded, for the next iteration
        self._plan: Plan | None = None
        self._runtime: Runtime | None = None
        self._finalizer: weakref.finalize | None = None

    # ---- the plan: sizes and order ---------------------------------------------------------

    @property
    def plan(self) -> Plan:
        """Parts, order, counts and steps of every epoch; decided on first use."""
        if self._plan is None:
            o = self.options
            plan = make_plan(Settings(
                self.sources, dict(self.vocab.index), self.batch_size, self.seed,
                self.shuffle_buffer, self.drop_last, self.rank, self.world_size, self.workers,
                gpu=self._gpu is not None, options=o, copies=dict(self._copies),
                extra={"train": self.train, "size": list(self.decoder.augment.size),
                       "mode": self.decoder.mode, "decode": self.decode,
                       "on_error": o.on_error, "formats": list(o.formats)}))
            # Given classes say nothing of splits; the scans the plan made (regions), or
            # earlier ones, may. After the plan, so a failed check leaves none decided.
            if self._vocab_given and o.split is None:
                refuse_two_splits(list(self.sources), o.limits)
            self._plan = plan
        return self._plan

    @property
    def prefetch(self) -> int:
        return self.prefetcher.prefetch

    @property
    def split_by_archive(self) -> bool:
        """With at least as many parts (archives or regions) as ranks, each rank reads only
        its own; otherwise every rank reads everything and decodes every world_size-th image."""
        return self.plan.split_by_part

    def images_per_epoch(self, epoch: int | None = None) -> int:
        """Images this rank will see in an epoch (default: the next) before decode failures."""
        return self.plan.images(self._next_epoch if epoch is None else epoch)

    def steps_per_epoch(self, epoch: int | None = None) -> int:
        """Batches every rank yields in an epoch, equal across ranks (Options.uneven)."""
        return self.plan.steps(self._next_epoch if epoch is None else epoch)

    def __len__(self) -> int:
        return self.plan.batches(self._next_epoch)

    # ---- epochs ----------------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration epoch `epoch` (as DistributedSampler.set_epoch)."""
        self._next_epoch = int(epoch)

    def __iter__(self) -> EpochIterator:
        """The next epoch's batches. An iterator still live from before is ended first: its
        next `next()` raises (two iterators would share the workers and the buffers)."""
        epoch = self._next_epoch
        self._next_epoch += 1
        resume, self._resume = self._resume, None
        if resume is not None and resume.epoch != epoch:
            resume = None  # set_epoch() moved away from the checkpoint's epoch
        runtime = self._started()
        plan = self.plan
        self.stats = stats = LoaderStats(epoch=epoch, decode=self.decode_name,
                                         workers=self.workers,
                                         inflate=_inflater_name(self.sources, self.options,
                                                                self._copies),
                                         readers=plan.readers if self.workers else 0,
                                         regions=sum(isinstance(p, Region) for p in plan.parts))
        steps = plan.steps(epoch) if self.world_size > 1 else None
        wrap = Packed if self._gpu is not None else host_piece
        return runtime.begin(lambda rt: EpochIterator(
            rt, epoch, resume, stats, batch_size=self.batch_size, drop_last=self.drop_last,
            steps=steps, wrap=wrap, share=self.cpu_share, sources=self.sources), epoch)

    # ---- checkpoints -----------------------------------------------------------------------

    def state_dict(self) -> dict:
        """Where the loader is: resuming from it continues with exactly the batches that
        were left (same order, pixels, augmentation and skip counts). Between epochs it points
        at the start of the next one. The state carries the plan's fingerprint."""
        fingerprint = self.plan.fingerprint()
        if self._resume is not None:  # loaded and not iterated yet: that is where we are
            return self._resume.as_state(fingerprint)
        live = self._live_epoch()
        if live is not None:
            return live.position.as_state(fingerprint)
        return Position(self._next_epoch).as_state(fingerprint)

    def load_state_dict(self, state: dict) -> None:
        """Continue from `state_dict()`. A checkpoint of another stream (other archives,
        seed, batch size, workers, readers, ranks...) is refused, naming what differs."""
        if state.get("version") == 1 and not state.get("batches"):
            self._next_epoch = int(state["epoch"])  # an older checkpoint between epochs
            return
        check_resume(self.plan.fingerprint(), state)
        position = Position.from_state(state)
        self._next_epoch = position.epoch
        self._resume = None if position.at_start else position

    def _live_epoch(self) -> EpochIterator | None:
        """The iterator of the epoch being iterated, if it is the latest and not finished."""
        current = self._runtime.current if self._runtime is not None else None
        if current is None or current.finished or current.epoch != self._next_epoch - 1:
            return None
        return current

    # ---- processes and memory -------------------------------------------------------------

    def _started(self) -> Runtime:
        if self._runtime is not None and not self._runtime.closed:
            return self._runtime
        plan = self.plan  # before allocating anything: deciding it may scan an archive
        runtime = Runtime(self.prefetcher, lookahead=self.options.lookahead)
        # Registered before anything is allocated, holding the runtime and nothing of the
        # loader: whatever happens next, close(), dropping the loader and the interpreter's
        # exit free the shared memory and stop the processes.
        self._finalizer = weakref.finalize(self, runtime.close)
        try:
            # The arenas are sized once, from the memory free now: the check below and the
            # pool must agree on them.
            arena_bytes = self._arena_bytes()
            check_shared_memory(self._shared_bytes(arena_bytes))
            runtime.pool = self._make_pool(arena_bytes)
            runtime.producer = self._make_producer(plan, runtime.pool)
            # The worker processes start (~0.7 s to their first batch on an H200 host), and
            # meanwhile this process does what would otherwise stand after them on the way
            # to the first batch: the crop kernel's first launch (~0.5 s, in a thread: a
            # lane's first crops wait for it on the kernel's launch lock) and the page-locking
            # of the buffers (~0.6 s; CUDA's call lets go of the GIL) (probe_start.py,
            # scripts/bench/results/2026-11-27-h200-start).
            runtime.warming = self._warm_gpu_steps()
            runtime.pool.pin()
        except BaseException:
            self._finalizer()
            raise
        self._runtime = runtime
        return runtime

    def _buffer_count(self) -> int:
        return buffer_count(self.prefetch, self.workers,
                            len(self._gpu) if self._gpu is not None else None)

    def _make_pool(self, arena_bytes: int) -> BufferPool:
        pin = self.device if self.device.type == "cuda" else None
        return BufferPool(self._buffer_count(), self.batch_size, self.decoder.out_shape,
                          pin_device=pin, shared=self.workers > 0,
                          arena_bytes=arena_bytes, pin_later=True)

    def _arena_bytes(self) -> int:
        """JPEG bytes each batch buffer holds for GPU decoding (none without it), sized from
        the archives and from the memory free now."""
        if self._gpu is None:
            return 0
        slots = self._buffer_count() * self.batch_size
        # /dev/shm read once: the room above the cap and what fits come from one reading
        free = shared_memory_now() if self.workers > 0 else None
        room = arena_room_per_slot(slots, free)
        per_image = wanted = arena_per_image(self._mean_member_bytes, room)
        fits = self._shared_room_per_image(slots, free)
        if fits is not None and fits < wanted:
            # A tight /dev/shm (Docker's --shm-size): a smaller arena, down to the least,
            # rather than a refusal to start; the JPEGs it turns away decode on the CPU.
            per_image = max(ARENA_PER_IMAGE, fits)
            if fits >= ARENA_PER_IMAGE:  # else the start's check refuses, saying why
                log.warning("imageloader: %s has room for %.0f KiB of JPEG bytes per image "
                            "where the archives want %.0f KiB: larger JPEGs decode on the CPU "
                            "(stats.fallbacks['arena_full']); give it more room (Docker: "
                            "--shm-size) to decode them on the GPU", SHARED_MEMORY_FOLDER,
                            fits / 1024, wanted / 1024)
        if per_image > ARENA_MAX_PER_IMAGE:  # large JPEGs: say where the memory goes
            log.info("imageloader: %.1f MiB of JPEG room per image, %.1f GB page-locked over "
                     "%d buffers", per_image / 2**20, per_image * slots / 1e9,
                     slots // self.batch_size)
        return self.batch_size * per_image

    def _shared_room_per_image(self, slots: int, free: int | None) -> int | None:
        """JPEG bytes each of `slots` slots can have beside everything else the workers share,
        in 90% of `free`, what /dev/shm has free; None where nothing is shared (or no such
        folder)."""
        if free is None:
            return None
        return int(0.9 * free - self._shared_bytes(0)) // slots

    def _shared_bytes(self, arena_bytes: int) -> int:
        """The shared memory worker processes need: every batch buffer, a byte ring each."""
        if self.workers == 0:
            return 0
        layout = batch_layout(self.batch_size, self.decoder.out_shape, arena_bytes)
        return self._buffer_count() * layout.nbytes + self.workers * self._ring_bytes()

    def _warm_gpu_steps(self) -> threading.Thread | None:
        """A thread that runs each lane's crops once (GpuDecode.warm); None if none need it."""
        if self._gpu is None or not self.train:
            return None
        thread = threading.Thread(target=_warm_all, args=(self._gpu,), daemon=True,
                                  name="imageloader-warm")
        thread.start()
        return thread

    def _make_producer(self, plan: Plan, pool: BufferPool):
        o = self.options
        if self.workers == 0:
            return LocalProducer(plan.read_plan(), self._fill, pool, plan.order,
                                 on_error=o.on_error, prepare=self.cpu_share.stamp)
        streams = any(hasattr(s, "read") for s in self.sources)
        return WorkerPool(plan.read_plan(), self._fill, pool, workers=self.workers,
                          readers=plan.readers, order_of=plan.order, on_error=o.on_error,
                          timeout=o.timeout, stream_sources=streams, lookahead=o.lookahead,
                          ring_bytes=self._ring_bytes(), nice=self._worker_nice(),
                          prepare=self.cpu_share.stamp, ordered=plan.ordered)

    def _worker_nice(self) -> int:
        return GPU_DECODE_NICE if self._gpu is not None else CPU_DECODE_NICE

    def _ring_bytes(self) -> int:
        """Each worker's byte ring holds ~2 batches of compressed members (128 KiB each where
        their mean size is unknown)."""
        if RING_BYTES is not None:
            return RING_BYTES
        mean = self._mean_member_bytes or 128 << 10
        return int(min(max(2 * self.batch_size * mean, 8 << 20), 512 << 20))

    @functools.cached_property
    def _mean_member_bytes(self) -> float | None:
        """The archives' bytes per image, from fresh sidecars (never a new scan); None where a
        path has no sidecar yet or every source is a stream. Compressed bytes: JPEGs barely
        compress. Read once (a sidecar each), when a start first sizes its shared memory: the
        plan, decided before, is kept for the loader's life too."""
        paths = [os.fspath(s) for s in self.sources if not hasattr(s, "read")]
        counts = [cached_image_count(p) for p in paths]
        if not paths or not all(counts):
            return None
        return sum(file_stamp(p)["bytes"] for p in paths) / sum(counts)

    # For tests and scripts that look inside a started loader.
    @property
    def _pool(self) -> BufferPool | None:
        return self._runtime.pool if self._runtime is not None and not self._runtime.closed \
            else None

    @property
    def _workers(self) -> WorkerPool | None:
        producer = self._runtime.producer if self._pool is not None else None
        return producer if isinstance(producer, WorkerPool) else None

    def close(self) -> None:
        """End any epoch still being iterated, stop worker processes, and free shared and
        page-locked memory."""
        if self._finalizer is not None:
            self._finalizer()  # Runtime.close: the live epoch first, its threads read buffers
        self._runtime = None

    @property
    def decode_name(self) -> str:
        """Where and with what images are decoded, e.g.
        "cuda (nvimgcodec, lanes: hw+cuda+hw, crops: triton)"; "lanes: hw|hybrid 18%" for a
        lane that splits its batches, with the helper's mean share of the last batches."""
        if self._gpu is None:
            return "cpu (Pillow)"
        first = self._gpu[0]
        lanes = "+".join(_lane_name(gpu.jpeg) for gpu in self._gpu)
        lanes = f", lanes: {lanes}" if len(self._gpu) > 1 or "|" in lanes else ""
        crops = f", crops: {first.crop}" if self.train else ""
        return f"cuda ({first.jpeg.name}{lanes}{crops})"

    def __enter__(self) -> "ImageLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"ImageLoader({len(self.sources)} archive(s), batch_size={self.batch_size}, "
                f"train={self.train}, device={self.device}, workers={self.workers}, "
                f"prefetch={self.prefetch}, {self.vocab!r})")


def _warm_all(gpus) -> None:
    for gpu in gpus:
        gpu.warm()


def _choose_decode(decode: str, device: torch.device, transform, mode: str,
                   gpu_decoder: str) -> tuple[str, list]:
    if decode not in ("cpu", "cuda", "auto"):
        raise ValueError(f"decode must be 'cpu', 'cuda' or 'auto', got {decode!r}")
    if decode == "cpu":
        return "cpu", []
    jpeg = gpu_jpeg_decoders(device, mode, gpu_decoder, first=True) \
        if device.type == "cuda" else []
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


def _lane_name(jpeg) -> str:
    """A lane's engine ("hw"), or its two and the helper's mean share of the last batches
    ("hw|cuda 8%"; its share now would say little: it decays once nobody takes batches)."""
    name = getattr(jpeg, "engine", jpeg.name)
    return f"{name} {jpeg.mean_share:.0%}" if "|" in name else name
