"""Stage 3, batch: put samples in a seeded order and fill fixed-size batch slots with pixels.

The order is gotorch's: a shuffle buffer of `buffer_size` samples, reseeded with `seed + epoch`.
Each sample then gets a position in the epoch and an augmentation seed derived from it, so its
pixels are the same whichever process decodes it. A sample that fails to decode does not shorten
its batch: the next sample takes its slot. Imports no torch (runs in worker processes).
"""
from __future__ import annotations

import random
from collections import Counter
from typing import Iterable, Iterator, NamedTuple, TypeVar

import numpy as np

from .errors import SampleError
from .read import Sample

T = TypeVar("T")
FALLBACK = "fallback:"  # prefix of reported counts that are not skips: images decoded otherwise
_MIX = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: spreads nearby integers apart
_MASK = (1 << 64) - 1


class Layout(NamedTuple):
    """Where each field of one batch buffer lives: {name: (byte offset, dtype, shape)}."""

    fields: dict
    nbytes: int


class BatchViews(NamedTuple):
    """Numpy views of one batch buffer. `arena` holds packed JPEG bytes for GPU decoding;
    for image i, lengths[i] > 0 means its bytes are at arena[offsets[i]:][:lengths[i]] and
    lengths[i] == 0 means its pixels are already in images[i]."""

    images: np.ndarray    # (B, H, W, C) uint8
    labels: np.ndarray    # (B,) int64
    seeds: np.ndarray     # (B,) uint64: augmentation seed of each image
    offsets: np.ndarray   # (B,) int64
    lengths: np.ndarray   # (B,) int64
    boxes: np.ndarray     # (B, 5) float32: packed images' train crop (l, t, r, b) and flip,
                          # in the upright image
    orientations: np.ndarray  # (B,) uint8: packed images' EXIF orientation (1: as stored)
    arena: np.ndarray     # (A,) uint8
    cpu_share: np.ndarray  # (1,) float64: share of the images a packer decodes on the CPU
                           # all the same (decode="cuda"), set by the parent (share.py)
    cpu_probe: np.ndarray  # (3,) float64: images the parent asks the packer to time through
                           # the CPU path besides packing them (share.py), then the seconds
                           # and the images the packer timed, read back by the parent
    cpu_pixels: np.ndarray  # (1,) int64: JPEGs of at least this many pixels the packer decodes
                            # on the CPU (decode="auto" on a GPU-bound model; 0: none), set
                            # by the parent (share.py)


_ALIGN = 4096


def batch_layout(batch_size: int, image_shape: tuple[int, int, int], arena_bytes: int = 0
                 ) -> Layout:
    """Fields of one buffer, each page-aligned; shared by the pool and the worker processes."""
    specs = [("labels", "int64", (batch_size,)), ("seeds", "uint64", (batch_size,)),
             ("offsets", "int64", (batch_size,)), ("lengths", "int64", (batch_size,)),
             ("boxes", "float32", (batch_size, 5)), ("orientations", "uint8", (batch_size,)),
             ("cpu_share", "float64", (1,)),
             ("cpu_probe", "float64", (3,)), ("cpu_pixels", "int64", (1,)),
             ("images", "uint8", (batch_size, *image_shape)), ("arena", "uint8", (arena_bytes,))]
    fields, offset = {}, 0
    for name, dtype, shape in specs:
        fields[name] = (offset, dtype, shape)
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        offset += -(-size // _ALIGN) * _ALIGN
    return Layout(fields, max(offset, _ALIGN))


def views_of(buffer, layout: Layout) -> BatchViews:
    """Numpy views of every field of a buffer (a memoryview or anything with the buffer API)."""
    return BatchViews(**{name: np.ndarray(shape, dtype=dtype, buffer=buffer, offset=offset)
                         for name, (offset, dtype, shape) in layout.fields.items()})


class Task(NamedTuple):
    """One sample scheduled for decoding, with the seed of its random augmentation."""

    seed: int
    sample: Sample


def epoch_rng(seed: int, epoch: int, stream: int = 0) -> random.Random:
    """The shuffle RNG of an epoch: `seed + epoch` (plus a stream id for parallel readers)."""
    return random.Random((seed + epoch) * 1_000_003 + stream)


def shuffled(items: Iterable[T], buffer_size: int, rng: random.Random) -> Iterator[T]:
    """Shuffle a stream through a buffer of `buffer_size` items (1 = stream order)."""
    if buffer_size <= 1:
        yield from items
        return
    buffer: list[T] = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        slot = rng.randrange(buffer_size)
        yield buffer[slot]
        buffer[slot] = item
    rng.shuffle(buffer)
    yield from buffer


def augment_seed(seed: int, epoch: int, position: int) -> int:
    return (((seed * _MIX + epoch) & _MASK) * _MIX + position) & _MASK


def schedule(samples: Iterable[Sample], *, seed: int, epoch: int, shuffle_buffer: int,
             stream: int = 0) -> Iterator[Task]:
    """Shuffle (if `shuffle_buffer` > 1) and attach each sample's augmentation seed."""
    ordered = shuffled(samples, shuffle_buffer, epoch_rng(seed, epoch, stream))
    for position, sample in enumerate(ordered):
        yield Task(augment_seed(seed, epoch, position * 64 + stream), sample)


class Counted:
    """An iterator that counts what it hands out: the tasks a batch consumed, failures too."""

    def __init__(self, it):
        self.it, self.n = it, 0

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self.it)
        self.n += 1
        return item


def take_share(samples: Iterable[T], rank: int, world_size: int) -> Iterator[T]:
    """Every `world_size`-th sample starting at `rank`: disjoint shares that cover the stream."""
    for ordinal, sample in enumerate(samples):
        if ordinal % world_size == rank:
            yield sample


def fill_batch(tasks: Iterator[Task], batch: BatchViews, decoder, *, on_error: str,
               skipped: Counter) -> int:
    """Fill slots 0, 1, ... of `batch` from tasks until it is full or tasks run out.

    `decoder.fill(batch, slot, data, seed)` writes one image (pixels, or packed bytes for the
    GPU). Returns the number of filled slots; failed samples are counted in `skipped` by reason
    (or raised, naming archive and member, with on_error="raise"), and images a packing decoder
    sent the CPU way under FALLBACK + reason.
    """
    capacity = len(batch.labels)
    filled = 0
    if capacity == 0:
        return 0
    decoder.start(batch)
    for task in tasks:
        sample = task.sample
        try:
            decoder.fill(batch, filled, sample.data, task.seed)
        except SampleError as error:
            if on_error == "raise":
                raise error.located(sample.archive, sample.name) from None
            skipped[error.reason] += 1
            continue
        except Exception as error:  # a bug, or a user transform failing: say where
            error.add_note(f"while decoding member {sample.name!r} of {sample.archive!r}")
            raise
        batch.labels[filled] = sample.target
        batch.seeds[filled] = task.seed
        filled += 1
        if filled == capacity:
            break
    for reason, n in getattr(decoder, "take_fallbacks", dict)().items():
        skipped[FALLBACK + reason] += n  # decode="cuda": decoded on the CPU instead
    return filled
