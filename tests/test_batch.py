"""Stage 3: ordering, augmentation seeds and batch filling."""
from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from conftest import solid
from imageloader.batch import (Task, batch_layout, fill_batch, schedule, shuffled, take_share,
                               views_of)
from imageloader.decode import Augment, Decoder
from imageloader.read import Sample


def test_shuffle_buffer_is_a_seeded_permutation():
    items = list(range(1000))
    a = list(shuffled(items, 64, random.Random(1)))
    assert sorted(a) == items and a != items
    assert a == list(shuffled(items, 64, random.Random(1)))
    assert a != list(shuffled(items, 64, random.Random(2)))
    assert list(shuffled(items, 1, random.Random(1))) == items


def test_small_buffer_only_shuffles_locally():
    out = list(shuffled(range(10_000), 16, random.Random(0)))
    # An item can move early by at most the buffer size; late arbitrarily (geometric tail).
    assert all(pos >= item - 16 for pos, item in enumerate(out))


def samples(n, target=lambda i: i % 3):
    return [Sample("a.tgz", i, f"t/c/{i}.png", target(i), b"") for i in range(n)]


def test_schedule_reseeds_per_epoch_and_seeds_each_sample():
    e0 = list(schedule(samples(300), seed=5, epoch=0, shuffle_buffer=50))
    e0_again = list(schedule(samples(300), seed=5, epoch=0, shuffle_buffer=50))
    e1 = list(schedule(samples(300), seed=5, epoch=1, shuffle_buffer=50))
    assert e0 == e0_again
    assert [t.sample.index for t in e0] != [t.sample.index for t in e1]
    assert len({t.seed for t in e0}) == 300  # every sample gets its own augmentation seed


def test_take_share_partitions_the_stream():
    shares = [list(take_share(range(103), r, 4)) for r in range(4)]
    assert sorted(sum(shares, [])) == list(range(103))
    assert [len(s) for s in shares] == [26, 26, 26, 25]


def test_fill_batch_replaces_failed_samples_with_the_next_ones():
    good, bad = solid(100, fmt="PNG"), b"garbage bytes"
    data = [good, bad, good, bad, bad, good, good, good]
    tasks = iter([Task(i, Sample("a.tgz", i, f"t/c/{i}.png", i, d)) for i, d in enumerate(data)])
    decoder = Decoder(Augment.make(8, False))
    batch = new_batch(3, (8, 8, 3))
    skipped = Counter()
    assert fill_batch(tasks, batch, decoder, on_error="skip", skipped=skipped) == 3
    assert batch.labels.tolist() == [0, 2, 5] and (batch.images == 100).all()
    assert batch.seeds.tolist() == [0, 2, 5]
    assert skipped == Counter(undecodable=3)
    # The stream continues where the batch stopped; the rest is a short batch.
    assert fill_batch(tasks, batch, decoder, on_error="skip", skipped=skipped) == 2
    assert batch.labels[:2].tolist() == [6, 7]


def new_batch(size, shape, arena=0):
    layout = batch_layout(size, shape, arena)
    return views_of(bytearray(layout.nbytes), layout)


def test_layout_fields_are_page_aligned_and_disjoint():
    layout = batch_layout(5, (7, 9, 3), 1000)
    spans = sorted((off, off + np.dtype(dt).itemsize * int(np.prod(shape)))
                   for off, dt, shape in layout.fields.values())
    assert all(start % 4096 == 0 for start, _ in spans)
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))
    assert spans[-1][1] <= layout.nbytes


def test_fill_batch_raise_policy_names_archive_and_member():
    tasks = iter([Task(0, Sample("x.tgz", 4, "t/c/bad.png", 0, b"nope"))])
    with pytest.raises(ValueError, match=r"x\.tgz.*t/c/bad\.png"):
        fill_batch(tasks, new_batch(2, (8, 8, 3)), Decoder(Augment.make(8, False)),
                   on_error="raise", skipped=Counter())
