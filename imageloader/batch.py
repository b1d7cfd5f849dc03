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
_MIX = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: spreads nearby integers apart
_MASK = (1 << 64) - 1


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


def take_share(samples: Iterable[T], rank: int, world_size: int) -> Iterator[T]:
    """Every `world_size`-th sample starting at `rank`: disjoint shares that cover the stream."""
    for ordinal, sample in enumerate(samples):
        if ordinal % world_size == rank:
            yield sample


def fill_batch(tasks: Iterator[Task], images: np.ndarray, labels: np.ndarray, decoder, *,
               on_error: str, skipped: Counter) -> int:
    """Decode tasks into `images[i]`, `labels[i]` until the batch is full or tasks run out.

    Returns the number of filled slots; failed samples are counted in `skipped` by reason
    (or raised, naming archive and member, with on_error="raise").
    """
    capacity = len(labels)
    filled = 0
    if capacity == 0:
        return 0
    for task in tasks:
        sample = task.sample
        try:
            decoder(sample.data, images[filled], task.seed)
        except SampleError as error:
            if on_error == "raise":
                raise error.located(sample.archive, sample.name) from None
            skipped[error.reason] += 1
            continue
        labels[filled] = sample.target
        filled += 1
        if filled == capacity:
            break
    return filled
