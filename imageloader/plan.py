"""The plan of a loader's epochs, and where an epoch stands: what resume needs and checks.

A `Plan` is decided once, before any process starts, from the loader's settings: the parts that
readers are dealt (archives, or regions of one: index.py), each epoch's part order, image counts,
steps per rank, and a fingerprint of everything that shapes the stream of batches. It is plain
data: it holds no reference to the loader, so the processes and the finalizer that are given its
methods keep nothing else alive.

A `Position` says what an epoch has handed out: the producer's mark after the last batch buffer
handed out whole (workers.py, runtime.py), the rows of the next buffer already handed out, and
the skip counts so far. `state_dict()` is a position with the plan's fingerprint; resuming checks
that fingerprint first and names what differs, because a position only means something in the
stream it was taken from.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import random
from collections import Counter
from dataclasses import dataclass, field

from .cache import on_copy
from .errors import Limits
from .read import Region, source_name
from .vocab import archive_classes, archive_regions
from .workers import ReadPlan

STATE_VERSION = 2


@dataclass(frozen=True)
class Plan:
    """What every epoch reads, in which order, and how many batches it makes on each rank."""

    parts: tuple                # archives, Regions of them, or file objects (read in a thread)
    sources: tuple              # the archives the parts come from
    vocab_index: dict
    batch_size: int
    seed: int
    shuffle_buffer: int         # of the whole loader (each region reader gets its share)
    drop_last: bool
    rank: int
    world_size: int
    uneven: str
    workers: int
    readers: int                # reader processes (workers > 0), else 1
    limits: Limits = Limits()
    unknown_labels: str = "raise"
    inflate: str = "auto"
    inflate_threads: int | None = None
    extra: dict = field(default_factory=dict)   # more of what shapes the batches (decode, crops)
    copies: dict = field(default_factory=dict)  # archive -> its plain copy (cache.py): read
                                                # instead, the same bytes, so not in the
                                                # fingerprint
    split: str | tuple[str, ...] | None = None  # only the images below split folders of
                                                # this name (or these: errors.check_split)

    @property
    def ordered(self) -> bool:
        """Evaluation (no shuffle): batches follow the archives' order, whatever is skipped."""
        return self.shuffle_buffer <= 1

    @property
    def split_by_part(self) -> bool:
        """With at least as many parts as ranks, each rank reads only its own; otherwise every
        rank reads everything and decodes every world_size-th image."""
        return 1 < self.world_size <= len(self.parts)

    # ---- order -----------------------------------------------------------------------------

    def shuffled_parts(self, epoch: int) -> list[int]:
        order = list(range(len(self.parts)))
        if not self.ordered and len(order) > 1:
            random.Random(self.seed + epoch).shuffle(order)  # part order changes every epoch
        return order

    def order(self, epoch: int) -> tuple[int, ...]:
        """The parts this rank reads in `epoch`, in order: its share of the shuffled list (the
        same shuffle on every rank), or all of them when ranks split by image."""
        order = self.shuffled_parts(epoch)
        if self.split_by_part:
            order = order[self.rank::self.world_size]
        return tuple(order)

    def read_plan(self) -> ReadPlan:
        """What each reader needs (picklable: it crosses into the reader processes)."""
        world = 1 if self.split_by_part else self.world_size
        shuffle, threads = self.shuffle_buffer, self.inflate_threads
        if len(self.parts) > len(self.sources):
            # Regions come in a new random order every epoch: the readers' buffers together
            # hold `shuffle_buffer` images (memory, and the wait before the first batch, stay
            # as with one reader), and each reader inflates only its regions, with a share of
            # the inflater threads one reader would have.
            shuffle = max(2, -(-shuffle // self.readers))
            threads = threads or region_inflate_threads(self.readers)
        parts = tuple(on_copy(part, self.copies) for part in self.parts)
        return ReadPlan(parts, dict(self.vocab_index), self.batch_size, shuffle,
                        self.seed, self.limits, self.unknown_labels, self.inflate, threads,
                        self.rank if world > 1 else 0, world,
                        copy_of={copy: archive for archive, copy in self.copies.items()},
                        split=self.split)

    # ---- counts ----------------------------------------------------------------------------

    @functools.cached_property
    def part_images(self) -> tuple[int, ...]:
        """Images in each part before decode failures, from the vocabulary scan (its sidecar);
        counted on first use only: a loader given its vocabulary may never need them."""
        counts = []
        for part in self.parts:
            if isinstance(part, Region):
                counts.append(part.images)
                continue
            if hasattr(part, "read"):
                raise TypeError("the length of a stream is unknown until it has been read")
            per_class = archive_classes(os.fspath(part), limits=self.limits,
                                        inflate=self.inflate, split=self.split)
            counts.append(sum(n for label, n in per_class.items()
                              if label in self.vocab_index or self.unknown_labels == "raise"))
        return tuple(counts)

    def rank_images(self, epoch: int) -> list[int]:
        """Images each rank sees in `epoch` (the part order is reshuffled every epoch)."""
        counts = self.part_images
        if not self.split_by_part:
            share, extra = divmod(sum(counts), self.world_size)
            return [share + (1 if r < extra else 0) for r in range(self.world_size)]
        order = self.shuffled_parts(epoch)
        return [sum(counts[i] for i in order[r::self.world_size])
                for r in range(self.world_size)]

    def images(self, epoch: int) -> int:
        return self.rank_images(epoch)[self.rank]

    def steps(self, epoch: int) -> int:
        """Batches every rank yields in `epoch`, equal across ranks (Options.uneven)."""
        counts = self.rank_images(epoch)
        if self.uneven == "drop" or self.drop_last:
            return min(counts) // self.batch_size
        return -(-max(counts) // self.batch_size)

    def batches(self, epoch: int) -> int:
        """len(loader): this rank's batches in `epoch`."""
        if self.world_size > 1:
            return self.steps(epoch)  # may change per epoch with part splits
        n = self.images(epoch)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    # ---- resume ----------------------------------------------------------------------------

    def fingerprint(self) -> dict:
        """Everything that decides which image lands in which batch, and its pixels: a
        checkpoint is only valid in a loader with the same fingerprint."""
        return {"archives": [source_name(s) for s in self.sources],
                "parts": len(self.parts), "part_starts": _digest(_starts(self.parts)),
                "vocab": _digest(sorted(self.vocab_index.items())),
                "workers": self.workers, "readers": self.readers,
                "world_size": self.world_size, "rank": self.rank,
                "batch_size": self.batch_size, "seed": self.seed,
                "shuffle_buffer": self.shuffle_buffer, "drop_last": self.drop_last,
                "uneven": self.uneven, "unknown_labels": self.unknown_labels,
                "limits": _digest(dataclasses.astuple(self.limits)),
                # several splits as a list: a checkpoint kept as JSON compares equal
                "split": list(self.split) if isinstance(self.split, tuple) else self.split,
                **self.extra}


def check_resume(fingerprint: dict, state: dict) -> None:
    """Refuse a checkpoint taken in another stream, naming every setting that differs."""
    version = state.get("version")
    if version != STATE_VERSION:
        raise ValueError(f"cannot resume: the checkpoint has state version {version!r}, this "
                         f"imageloader reads version {STATE_VERSION} (a mid-epoch position "
                         f"means nothing in another version's batch order)")
    theirs = state.get("fingerprint", {})
    differ = [key for key in sorted(set(fingerprint) | set(theirs))
              if theirs.get(key) != fingerprint.get(key)]
    if differ:
        raise ValueError("cannot resume: the checkpoint's loader differs in " + ", ".join(
            f"{key} (checkpoint {theirs.get(key)!r}, now {fingerprint.get(key)!r})"
            for key in differ))


@dataclass
class Position:
    """What an epoch has handed out, in enough detail to hand out exactly the rest."""

    epoch: int
    batches: int = 0            # batches handed out, repeats for equal steps included
    mark: dict | None = None    # the producer's mark after the last buffer handed out whole
    rows: int = 0               # rows of the next buffer already handed out
    skipped: Counter = field(default_factory=Counter)   # skips of what was handed out
    padded: int = 0             # batches repeated so that ranks take equal steps
    repeat: tuple | None = None  # (mark, rows) before the last batch: ranks that run short
                                 # repeat it, so a resumed epoch makes it again

    def as_state(self, fingerprint: dict) -> dict:
        return {"version": STATE_VERSION, "fingerprint": dict(fingerprint),
                "epoch": self.epoch, "batches": self.batches, "mark": _copy(self.mark),
                "rows": self.rows, "skipped": dict(self.skipped), "padded": self.padded,
                "repeat": _copy(list(self.repeat)) if self.repeat else None}

    @classmethod
    def from_state(cls, state: dict) -> "Position":
        repeat = state.get("repeat")
        return cls(int(state["epoch"]), int(state["batches"]), _copy(state.get("mark")),
                   int(state.get("rows", 0)), Counter(state.get("skipped", {})),
                   int(state.get("padded", 0)), tuple(repeat) if repeat else None)

    @property
    def at_start(self) -> bool:
        return self.batches == 0


def _copy(value):
    return json.loads(json.dumps(value)) if value is not None else None


def _starts(parts) -> list:
    return [[source_name(p), p.start] if isinstance(p, Region) else [source_name(p), 0]
            for p in parts]


def _digest(value) -> str:
    text = json.dumps(value, default=repr, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


# ---- deciding the parts and readers --------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The loader's settings that the plan is made from (no loader in here)."""

    sources: tuple
    vocab_index: dict
    batch_size: int
    seed: int
    shuffle_buffer: int
    drop_last: bool
    rank: int
    world_size: int
    workers: int
    gpu: bool                   # decode="cuda": its readers feed packers (see region_readers)
    options: object             # loader.Options
    copies: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


def make_plan(s: Settings) -> Plan:
    """Split archives into regions where that pays, and choose the reader count."""
    o = s.options
    split = _regions_wanted(s)
    parts = tuple(part for src in s.sources
                  for part in (_regions_of(src, s) if split else [src]))
    return Plan(parts, tuple(s.sources), dict(s.vocab_index), s.batch_size, s.seed,
                s.shuffle_buffer, s.drop_last, s.rank, s.world_size, o.uneven, s.workers,
                _readers(s, parts), o.limits, o.unknown_labels, o.inflate, o.inflate_threads,
                dict(s.extra), dict(s.copies), o.split)


def _regions_wanted(s: Settings) -> bool:
    # Evaluation keeps the archive order, which regions read side by side would not.
    o = s.options
    if not o.regions or s.shuffle_buffer <= 1 or s.workers == 0:
        return False
    readers = o.readers or region_readers(s.workers, s.gpu)
    return len(s.sources) < readers * s.world_size


def region_readers(workers: int, gpu: bool) -> int:
    # A region reader inflates ~2k images/s (~110 MB/s: rapidgzip with its index keeps about
    # one core busy). GPU decode wants ~15k/s: one reader per packer, up to 8 (H200 host:
    # 4 -> 10k, 6 -> 14k, 8 -> 15-17k img/s), and a count that divides the packers: with
    # 10 packers and 8 readers (13.5k) the readers with two packers feed twice the batches.
    # CPU decode wants ~4-5k/s and every core a reader takes is one fewer for decoding:
    # 2 readers beat 1, 3 and 4 there (H200 host; scripts/bench/README.md).
    if gpu:
        return max(r for r in range(1, min(workers, 8) + 1) if workers % r == 0)
    return max(1, workers // 6)


def _regions_of(source, s: Settings) -> list:
    if hasattr(source, "read"):
        return [source]
    path = os.fspath(source)
    o = s.options
    regions = archive_regions(path, limits=o.limits, inflate=o.inflate, split=o.split)
    if not regions:
        return [source]
    if o.unknown_labels != "raise" and set(archive_classes(
            path, limits=o.limits, inflate=o.inflate, split=o.split)) - set(s.vocab_index):
        return [source]  # the regions' counts include images that will be skipped
    return regions


def _readers(s: Settings, parts: tuple) -> int:
    if s.workers == 0:
        return 1
    if s.shuffle_buffer <= 1:
        # Archive order: one reader walks the archives one after the other. Several would
        # each deal their own archives, and batches would alternate between them.
        return 1
    return max(1, min(s.options.readers or _default_readers(s, parts), s.workers))


def _default_readers(s: Settings, parts: tuple) -> int:
    if len(parts) > len(s.sources):  # split into regions
        return min(len(parts), region_readers(s.workers, s.gpu))
    if len(s.sources) > 1:
        return min(len(s.sources), max(1, s.workers // 4))
    # One archive: one reader. It walks ~10k members/s on the GPU host, twice what 15
    # decoding processes consume. With GPU decode a second one (Options(readers=2): each
    # inflates the whole stream, ~0.3 ms of CPU per image, and keeps every other image)
    # gained < 4% while using ~3 more cores (H200 host): it is not the
    # wall there either.
    return 1


def region_inflate_threads(readers: int) -> int:
    """Inflater threads of each of `readers` region readers: their share of what one reader
    of the whole archive would use (at most 8), and at least 2."""
    return max(2, min(8, cores()) // readers)


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
