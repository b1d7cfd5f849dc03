"""The epoch iterator: rows carried over into full batches, archive order, and how it ends."""
from __future__ import annotations

import os
import time
import warnings
from collections import Counter

import pytest
import torch

from conftest import ids, numbered_files, write_archive
from imageloader import ImageLoader, Options


def piece(first: int, n: int, mark, counts=None):
    """n rows numbered first, first + 1, ... (the number is the label and the pixel)."""
    from imageloader.epoch import Piece
    labels = torch.arange(first, first + n)
    images = labels.view(-1, 1, 1, 1).expand(-1, 1, 2, 2).clone()
    return Piece(images, labels, {"mark": mark, "counts": counts or {}})


def test_rebatch_passes_full_pieces_through_and_carries_rows_over_in_order():
    from imageloader.epoch import rebatch
    full = piece(0, 4, "a")
    pieces = [full, piece(4, 3, "b"), piece(7, 0, "c", {"undecodable": 2}), piece(7, 4, "d"),
              piece(11, 2, "e")]
    out = list(rebatch(pieces, 4, drop_last=False))
    assert out[0].images is full.images  # the fast path copies nothing
    assert [b.labels.tolist() for b in out] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11],
                                                [12]]
    # Where the stream stands after each batch: the mark after the last piece used up, and
    # the rows of the next one handed out already.
    assert [(b.mark, b.rows) for b in out] == [("a", 0), ("c", 1), ("d", 1), ("e", 0)]
    assert [dict(b.counts) for b in out] == [{}, {"undecodable": 2}, {}, {}]
    assert all(torch.equal(b.images[:, 0, 0, 0], b.labels) for b in out)


def test_rebatch_drop_last_and_resume_inside_a_piece():
    from imageloader.epoch import rebatch
    pieces = [piece(0, 3, "a", {"x": 1}), piece(3, 3, "b", {"y": 1}), piece(6, 3, "c")]
    leftover = Counter()
    out = list(rebatch(pieces, 4, drop_last=True, leftover=leftover))
    assert [b.labels.tolist() for b in out] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert leftover == {}  # every piece's counts went out with a batch
    # Resume after the first batch: from mark "a", one row of "b" handed out; its counts too.
    again = list(rebatch(pieces[1:], 4, drop_last=True, mark=out[0].mark,
                         skip_rows=out[0].rows))
    assert [b.labels.tolist() for b in again] == [[4, 5, 6, 7]]
    assert [dict(b.counts) for b in again] == [{}]
    dropped = Counter()
    list(rebatch([piece(0, 4, "a"), piece(4, 1, "b", {"z": 3})], 4, drop_last=True,
                 leftover=dropped))
    assert dropped == {"z": 3}  # no batch holds the dropped row: counted with the epoch


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_evaluation_keeps_the_archive_order_after_skipped_images(tmp_path, workers):
    """With workers, a failed image used to be replaced by the next image of the same worker's
    stream: from the batch after next, out of archive order."""
    bad = {3, 9, 10, 20}
    path = write_archive(tmp_path / "a.tgz", numbered_files(30, bad))
    with ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu", normalize=False,
                     workers=workers, train=False) as loader:
        with pytest.warns(UserWarning, match="skipped 4 members"):
            batches = [ids(x) for x, _ in loader]
        assert loader.stats.skipped == {"undecodable": 4}
    assert sum(batches, []) == [i for i in range(30) if i not in bad]
    assert [len(b) for b in batches] == [4] * 6 + [2]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_newer_iterator_ends_the_older_at_once(tmp_path, workers):
    path = write_archive(tmp_path / "a.tgz", numbered_files(24))
    with ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu", normalize=False,
                     workers=workers, options=Options(timeout=20)) as loader:
        first = iter(loader)
        next(first)
        second = iter(loader)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match=r"newer iter\(loader\) started epoch 1"):
            next(first)
        assert time.monotonic() - start < 5  # not the timeout
        with pytest.raises(RuntimeError, match="newer"):
            next(first)  # and again: it stays ended
        assert sorted(sum((ids(x) for x, _ in second), [])) == list(range(24))
        assert loader.stats.epoch == 1 and loader.stats.samples == 24


def drop_some_rows(loader, every: int = 3):
    """Make the loader's device step lose the first row of every `every`-th batch, as GPU
    decoding does with an image neither nvJPEG nor Pillow can decode."""
    step = loader.prefetcher.item_transform
    calls = [0]

    def lossy(item):
        out = step(item)
        calls[0] += 1
        if calls[0] % every:
            return out
        trimmed = (out[0][1:], out[1][1:], *out[2:])
        return type(out)(*trimmed) if hasattr(out, "_fields") else trimmed
    loader.prefetcher.item_transform = lossy


@pytest.mark.parametrize("workers", [0, 2])
def test_rows_lost_in_the_device_step_are_carried_over_into_full_batches(tmp_path, workers):
    """decode="cuda" with drop_last=True once gave a short batch mid-epoch when an image failed
    both decoders (static shapes for CUDA graphs and torch.compile broke): every batch has
    batch_size rows, the images keep their order, and only the rows lost are missing."""
    path = write_archive(tmp_path / "a.tgz", numbered_files(40))
    with ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu", normalize=False,
                     workers=workers, train=False, drop_last=True) as loader:
        plain = sum((ids(x) for x, _ in loader), [])
        drop_some_rows(loader)
        batches = [ids(x) for x, _ in loader]
    assert all(len(b) == 4 for b in batches)
    got = sum(batches, [])
    assert got == [i for i in plain if i in got] and len(got) == 4 * ((40 - 3) // 4)


def fail_first_device_steps(loader, failures: int):
    step = loader.prefetcher.item_transform
    calls = [0]

    def failing(item):
        calls[0] += 1
        if calls[0] <= failures:
            raise RuntimeError("CUDA out of memory (a test double)")
        return step(item)
    loader.prefetcher.item_transform = failing


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [0, 2])
def test_an_exception_in_the_device_step_costs_no_buffer(tmp_path, workers):
    """The user catches an out-of-memory error and goes on: the host buffer of the failed
    step comes back. Once, buffers leaked until the loader stalled."""
    path = write_archive(tmp_path / "a.tgz", numbered_files(24))
    with ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu", normalize=False,
                     workers=workers, options=Options(timeout=10, lookahead=False)) as loader:
        failures = 12  # twice the buffers of its pool
        fail_first_device_steps(loader, failures)
        for _ in range(failures):
            with pytest.raises(RuntimeError, match="out of memory"):
                for _batch in loader:
                    pass
        assert sorted(sum((ids(x) for x, _ in loader), [])) == list(range(24))
        deadline = time.monotonic() + 2
        while loader._pool.in_use() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert loader._pool.in_use() == 0


def test_break_ends_the_epoch_when_the_iterator_is_dropped(tmp_path):
    """Nothing of the iterator refers back to it: a `break` (the for loop drops it) ends the
    epoch at once, without waiting for the garbage collector."""
    import gc
    path = write_archive(tmp_path / "a.tgz", numbered_files(24))
    gc.disable()
    try:
        with ImageLoader(path, batch_size=2, size=8, mode="L", device="cpu",
                         normalize=False, workers=2, options=Options(lookahead=False)) as loader:
            for _batch in loader:
                break
            deadline = time.monotonic() + 2
            while loader._pool.in_use() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert loader._pool.in_use() == 0
    finally:
        gc.enable()


def test_stats_and_warning_of_an_epoch_ended_by_a_newer_one(tmp_path):
    path = write_archive(tmp_path / "a.tgz", numbered_files(12, bad={0}))
    with ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu", normalize=False,
                     workers=0, train=False) as loader:
        first = iter(loader)
        next(first)
        stats = loader.stats
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            iter(loader)
        assert stats.samples == 4 and stats.skipped == {"undecodable": 1}
        assert any("skipped 1 member of" in str(w.message) for w in caught)


def count_streams(monkeypatch) -> list:
    """Every EpochStream made from now on (the prefetcher's run over the producer's epochs)."""
    from imageloader import epoch
    made = []
    make = epoch.EpochStream.__init__

    def counted_init(self, *args, **kwargs):
        made.append(self)
        make(self, *args, **kwargs)
    monkeypatch.setattr(epoch.EpochStream, "__init__", counted_init)
    return made


@pytest.mark.parametrize("workers", [0, 2])
def test_epochs_read_to_their_end_go_on_in_one_stream_with_each_epochs_own_batches(
        tmp_path, workers, monkeypatch):
    """An epoch iterated to its end leaves its stream going on into the next one, so that the
    next epoch's first batches are on their way before iter(loader) asks for them: epochs in a
    row come from one stream, and each has exactly the batches, stats and skip warning a
    loader started at that epoch gives. set_epoch() elsewhere, a break or a resume start anew."""
    path = write_archive(tmp_path / "a.tgz", numbered_files(26, bad={5}))

    def make(lookahead=True):
        return ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu",
                           normalize=False, workers=workers, seed=3,
                           options=Options(lookahead=lookahead))

    expected = {}
    for epoch in (0, 1, 2, 7):
        with make() as fresh, pytest.warns(UserWarning, match="skipped 1 member"):
            fresh.set_epoch(epoch)
            expected[epoch] = [ids(x) for x, _ in fresh]
            expected_bytes = fresh.stats.bytes
    assert expected[0] != expected[1]  # shuffled anew each epoch
    streams = count_streams(monkeypatch)
    with make() as loader:
        for epoch in (0, 1, 2):
            if epoch == 2:
                loader.set_epoch(2)  # as scripts with a DistributedSampler do: the same stream
            with pytest.warns(UserWarning, match=f"epoch {epoch}: skipped 1 member"):
                assert [ids(x) for x, _ in loader] == expected[epoch]
            assert loader.stats.skipped == {"undecodable": 1} and loader.stats.samples == 25
            assert loader.stats.bytes == expected_bytes > 0
        assert len(streams) == 1
        loader.set_epoch(7)  # not the epoch the stream went on into
        with pytest.warns(UserWarning, match="epoch 7: skipped"):
            assert [ids(x) for x, _ in loader] == expected[7]
        assert len(streams) == 2
        for _batch in loader:  # epoch 8, ended early: its stream ends with it
            break
        state = loader.state_dict()  # epoch 9 from its start
        with pytest.warns(UserWarning, match="epoch 9: skipped"):
            list(loader)
        assert len(streams) == 3
        loader.load_state_dict(state)
        with pytest.warns(UserWarning, match="epoch 9: skipped"):
            list(loader)
        assert len(streams) == 4  # a resume starts anew, at its mark
    with make(lookahead=False) as loader:  # no stream goes on
        for epoch in (0, 1):
            with pytest.warns(UserWarning, match=f"epoch {epoch}: skipped 1 member"):
                assert [ids(x) for x, _ in loader] == expected[epoch]
        assert len(streams) == 6 and loader._runtime._ahead is None
    assert all(stream._pieces.gi_frame is None for stream in streams)  # all ended


_SEEN: Counter = Counter()  # images this process's transform saw (each worker its own)


def wait_for_the_next_epoch(chw):
    """A transform (in the workers) for the test below: worker 0, decoding image 0 a second
    time (the next epoch's first batch), says so by a file; worker 1 waits for that file at
    image 4 (this epoch's batch 1, its last), so this epoch cannot end before the next began."""
    level = round(chw.float().mean().item())
    i = (level - 10) // 3
    _SEEN[i] += 1
    marker = os.environ["IMAGELOADER_TEST_NEXT_EPOCH"]
    if i == 0 and _SEEN[i] == 2:
        open(marker, "w").close()
    if i == 4 and _SEEN[i] == 1:
        deadline = time.monotonic() + 20
        while not os.path.exists(marker):
            if time.monotonic() > deadline:
                raise RuntimeError("the next epoch's first batch was not begun while worker 1 "
                                   "was still decoding this epoch's last")
            time.sleep(0.01)
    return torch.full((chw.shape[0], 8, 8), level, dtype=torch.uint8)


def test_a_worker_done_with_its_epoch_begins_the_next_while_the_others_finish(
        tmp_path, monkeypatch):
    """In an epoch's tail the workers end one by one: a worker whose stream has ended fills the
    next epoch's batches (in batch order) while the others still decode this one's last. It
    used to sit idle until the last ended, and the next epoch's first batch was only begun then
    (with decode="cpu" a whole batch's decode at every epoch start). Batches stay exact."""
    # 3 batches of 4 in archive order: worker 0 fills batches 0 and 2, worker 1 batch 1
    path = write_archive(tmp_path / "a.tgz", numbered_files(12))
    monkeypatch.setenv("IMAGELOADER_TEST_NEXT_EPOCH", str(tmp_path / "next-epoch-began"))
    with ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu", normalize=False,
                     train=False, workers=2, transform=wait_for_the_next_epoch) as loader:
        for _epoch in range(2):
            assert [ids(x) for x, _ in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert os.path.exists(tmp_path / "next-epoch-began")


def test_a_stream_gone_on_into_the_next_epoch_ends_with_the_loader(tmp_path):
    """The stream an epoch leaves running holds buffers of the next epoch; closing the loader
    ends it and every buffer comes back, with no next epoch ever asked for."""
    path = write_archive(tmp_path / "a.tgz", numbered_files(24))
    with ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu", normalize=False,
                     workers=2) as loader:
        assert sorted(sum((ids(x) for x, _ in loader), [])) == list(range(24))
        runtime, pool = loader._runtime, loader._pool
        assert runtime._ahead is not None
    assert runtime._ahead is None and runtime.closed and pool.in_use() == 0


class CountingProducer:
    """A producer of numbered pieces: `per_epoch` a epoch, each epoch's skip count its
    number (what epoch_stats reports is the epoch it last began)."""

    def __init__(self, per_epoch: int):
        self.per_epoch, self.began = per_epoch, []

    def batches(self, epoch, mark):
        self.began.append(epoch)
        for k in range(self.per_epoch):
            yield piece(100 * epoch + 4 * k, 4, {"k": k})

    @property
    def epoch_stats(self):
        return Counter(skipped_in=self.began[-1]), 1000 * self.began[-1]

    @property
    def epoch_fetched(self):
        return Counter()


class StreamRuntime:
    def __init__(self, producer, lookahead=True):
        from imageloader.prefetch import Prefetcher
        self.producer, self.pool, self.lookahead = producer, None, lookahead
        self.prefetcher = Prefetcher((), "cpu")


def test_an_epoch_stream_ends_each_epoch_with_that_epochs_counts(monkeypatch):
    """EpochStream: the pieces of one epoch, then the next from its start; each epoch's end
    carries the producer's counts of that epoch, also once the producer counts the next."""
    from imageloader import epoch as epoch_module
    monkeypatch.setattr(epoch_module, "release_batch", lambda pool, buf: None)
    producer = CountingProducer(per_epoch=2)
    stream = epoch_module.EpochStream(StreamRuntime(producer), 3, None, wrap=lambda buf: buf)
    first = [p.labels[0].item() for p in stream.pieces()]
    assert first == [300, 304] and stream.ended.epoch == 3
    assert (stream.epoch, stream.at_start) == (4, True)
    second = stream.pieces()
    assert next(second).labels[0].item() == 400 and producer.began == [3, 4]
    assert producer.epoch_stats[1] == 4000  # the producer counts epoch 4 by now
    end = stream.end_of(3)
    assert (end.skipped, end.bytes) == (Counter(skipped_in=3), 3000)
    assert stream.end_of(4) is None  # not reached yet
    stream.close()
    no_more = epoch_module.EpochStream(StreamRuntime(CountingProducer(1), lookahead=False), 0,
                                       None, wrap=lambda buf: buf)
    assert len(list(no_more.pieces())) == 1 and not no_more.at_start
    assert list(no_more.pieces()) == []  # it ended with its epoch
