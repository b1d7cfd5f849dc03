"""One epoch being iterated: its stream of batches, where it stands, its stats, and its end.

`iter(loader)` returns an `EpochIterator`. It alone runs its stream: the producer's filled
buffers (runtime.py), copied ahead by the prefetcher (prefetch.py), carried over into batches of
exactly `batch_size` rows (`rebatch`). It keeps its `Position` (plan.py) for `state_dict()` and
its `LoaderStats`, and it ends in one of four ways, each written down here:
- exhausted: the stats are final, the skip warning is given;
- `close()` (also what a `break` out of a `for` loop leads to, once the iterator is dropped);
- a newer `iter(loader)`: the runtime ends this one first; its next `next()` raises at once,
  saying so, instead of waiting for batches that now go to the new one;
- the loader's `close()` (or its garbage collection): it ends quietly, its next `next()` stops.
Ending stops the prefetcher's threads before the producer, which takes its buffers back: those
threads read the buffers. One thread iterates an epoch; ending it from another is not supported.

Going on into the next epoch. The prefetcher runs over an `EpochStream`: the producer's epochs
one after another, each closed by an `EpochEnd`. An epoch that is iterated to its end leaves the
stream running (the runtime keeps it), so the next epoch's first batches are decoded and copied
while this one's last batches train, instead of only once `iter(loader)` asks for them (each new
epoch's first batch cost ResNet-50 ~100 ms of waiting, 2.7 of its 5 points of data-wait on a
16,000-image archive: scripts/bench/results/2026-11-27-h200-hwhw). The next `iter(loader)` takes
it over if it starts that epoch from its beginning; anything else (set_epoch() elsewhere, a
resume, an epoch ended early) ends it first and starts anew, as before. With
`Options(lookahead=False)` each epoch's stream ends with it.

Carrying rows over. The producer's buffers are full except where rows were lost: a worker's
short last batch (each worker's stream ends on its own), a batch in archive order whose images
failed to decode (evaluation keeps the order, so its gap is not filled from later images), or
images that neither nvJPEG nor Pillow could decode on the GPU path. `rebatch` fills such a batch
with the next rows, so every batch but the last has `batch_size` rows (static shapes for CUDA
graphs and torch.compile) and the order of images is kept. Full buffers pass through untouched.
"""
from __future__ import annotations

import time
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Iterator, NamedTuple

import torch

from .batch import FALLBACK
from .errors import REPACK_HINTS, UNWARNED_SKIPS, counted
from .plan import Position
from .prefetch import Marker, release_batch
from .read import source_name


class Piece(NamedTuple):
    """A filled buffer's rows on their way to the user: on the device after the prefetcher."""

    images: torch.Tensor
    labels: torch.Tensor
    info: dict      # "mark": where the producer stands after it; "counts": skips by reason


@dataclass(frozen=True)
class EpochEnd(Marker):
    """The end of an epoch in an EpochStream, with the producer's counts of it, taken before
    the stream went on into the next epoch (the producer then counts that one)."""

    epoch: int
    skipped: Counter    # the reader's skips by reason
    bytes: int          # bytes read
    fetched: Counter    # from URL sources (remote.counters)


class Rebatched(NamedTuple):
    images: torch.Tensor
    labels: torch.Tensor
    counts: Counter     # of the pieces this batch is the first to draw from
    mark: dict | None   # where the producer stands after the last piece handed out whole
    rows: int           # rows of the piece after that one already handed out
    share: float | None = None  # the CPU share its last piece was decoded with (share.py)


def rebatch(pieces: Iterable[Piece], size: int, *, drop_last: bool, mark: dict | None = None,
            skip_rows: int = 0, leftover: Counter | None = None) -> Iterator[Rebatched]:
    """Pieces of any length -> batches of `size` rows in the same order; the last one may be
    short (dropped with `drop_last`). Each batch says where the stream stands after it, for
    resume: `mark`, `rows`. Resuming there, pass them back: the first piece then drops
    `skip_rows` rows, and its counts, which went out with the batch that first drew from it.

    A piece's counts go out with the first batch made after it arrives, which always holds
    some of its rows unless it has none; counts of pieces that no batch holds (a dropped last
    batch, empty pieces at the end) are added to `leftover`.
    """
    held: list[list] = []   # [piece, first row not handed out yet]
    counts: Counter = Counter()
    n_held = 0
    for piece in pieces:
        first = skip_rows
        if skip_rows:
            skip_rows = 0
        else:
            counts.update(piece.info["counts"])
        rows = len(piece.labels) - first
        share = piece.info.get("cpu_share")
        if not held and first == 0 and rows == size:  # the fast path: a full buffer as is
            yield Rebatched(piece.images, piece.labels, counts, piece.info["mark"], 0, share)
            mark, counts = piece.info["mark"], Counter()
            continue
        held.append([piece, first])
        n_held += rows
        while n_held >= size:
            images, labels, mark = _take(held, size, mark)
            n_held -= size
            yield Rebatched(images, labels, counts, mark, held[0][1] if held else 0, share)
            counts = Counter()
    if n_held and not drop_last:
        images, labels, mark = _take(held, n_held, mark)
        yield Rebatched(images, labels, counts, mark, 0, share)
        counts = Counter()
    if leftover is not None:
        leftover.update(counts)


def _take(held: list[list], n: int, mark):
    """The next n rows of the held pieces, and the mark after the pieces now used up."""
    images, labels = [], []
    while n or (held and held[0][1] == len(held[0][0].labels)):
        piece, first = held[0]
        take = min(n, len(piece.labels) - first)
        if take:
            images.append(piece.images[first:first + take])
            labels.append(piece.labels[first:first + take])
            held[0][1] += take
            n -= take
        if held[0][1] == len(piece.labels):
            held.pop(0)
            mark = piece.info["mark"]
    if len(images) == 1:
        return images[0], labels[0], mark
    return torch.cat(images), torch.cat(labels), mark


# ---- the device step: the last stage, on the batch's device (the side stream on CUDA) -------


class OnDevice:
    """CPU-decoded pieces: normalize, or copy what still points into a host buffer."""

    def __init__(self, normalize):
        self.normalize = normalize

    def __call__(self, piece: Piece) -> Piece:
        images, labels, info = piece
        if self.normalize is not None:
            images = self.normalize(images)
        elif images.device.type == "cpu":
            images = images.clone()  # the host buffer is reused: hand out our own copy
        if labels.device.type == "cpu":
            labels = labels.clone()
        return Piece(images, labels, info)


class GpuStep:
    """decode="cuda": packed buffers through GpuDecode; what it counted goes with the piece."""

    def __init__(self, gpu):
        self.gpu = gpu

    def __call__(self, packed) -> Piece:
        buf = packed.buf
        info = {**buf.meta, "cpu_share": float(buf.arrays.cpu_share[0])}
        images, labels = self.gpu(packed)   # may be short: images neither decoder could take
        counts = Counter(info.get("counts", {}))
        counts.update(self.gpu.take_counts())   # only this thread calls the decoder
        return Piece(images, labels, {**info, "counts": dict(counts)})


def host_piece(buf) -> Piece:
    """A CPU-decoded buffer as the prefetcher's input: views of its valid rows, its mark and
    counts, and the CPU share it was stamped with (a trial compares shares by their batches)."""
    return Piece(*buf.views(), {**buf.meta, "cpu_share": float(buf.arrays.cpu_share[0])})


# ---- the stream of epochs ----------------------------------------------------------------


class EpochStream:
    """The prefetcher's run over the producer's epochs one after another, from `epoch` at
    `mark` (None: its start), each closed by an EpochEnd; see the module docstring."""

    def __init__(self, runtime, epoch: int, mark: dict | None, wrap):
        self.epoch = epoch            # the epoch its next piece belongs to
        self.at_start = mark is None  # whether that epoch's first piece is next
        self.ended: EpochEnd | None = None  # the last epoch's end, once reached
        self.goes_on = runtime.lookahead  # into the next epoch; else it ends with this one
        # Each epoch's end as the producer reached it (written by the thread that collects):
        # an epoch ended early may have passed it already, and the producer counts the next.
        self.ends: dict[int, EpochEnd] = {}
        self._source = _epochs(runtime.producer, runtime.pool, wrap, epoch, mark, self.goes_on,
                               self.ends)
        self._pieces = runtime.prefetcher.run(self._source)

    def pieces(self) -> Iterator[Piece]:
        """The pieces of the epoch at hand. At its EpochEnd the stream stands at the start of
        the next one, already being decoded and copied ahead."""
        self.ended, self.at_start = None, False
        for piece in self._pieces:
            if isinstance(piece, EpochEnd):
                self.ended = piece
                self.epoch, self.at_start = piece.epoch + 1, self.goes_on
                return
            yield piece

    def end_of(self, epoch: int) -> EpochEnd | None:
        """That epoch's end if the producer reached it (forgotten here with those before)."""
        for old in [e for e in list(self.ends) if e < epoch]:
            self.ends.pop(old, None)
        return self.ends.pop(epoch, None)

    def close(self) -> None:
        self._pieces.close()  # first: its threads read the buffers the producer takes back
        self._source.close()


def _epochs(producer, pool, wrap, epoch: int, mark: dict | None, goes_on: bool, ends: dict):
    """(piece source, release) pairs of the producer's epochs, each followed by its EpochEnd
    (also put in `ends`); only the first epoch unless it `goes_on`."""
    while True:
        host = producer.batches(epoch, mark)
        try:
            for buf in host:
                yield wrap(buf), release_batch(pool, buf)
        finally:
            host.close()
        skipped, nbytes = producer.epoch_stats
        ends[epoch] = end = EpochEnd(epoch, Counter(skipped), nbytes,
                                     Counter(producer.epoch_fetched))
        yield end, None
        if not goes_on:
            return
        epoch, mark = epoch + 1, None


# ---- the iterator ------------------------------------------------------------------------


class EpochIterator:
    """Batches of one epoch; see the module docstring for how it ends."""

    def __init__(self, runtime, epoch: int, start: Position | None, stats, *, batch_size: int,
                 drop_last: bool, steps: int | None, wrap, share, sources: tuple):
        self.epoch = epoch
        self._run = _EpochRun(runtime, epoch, start or Position(epoch), stats,
                              batch_size=batch_size, drop_last=drop_last, steps=steps,
                              wrap=wrap, share=share, sources=sources)
        # The generator refers to the run, never to this iterator: dropping the iterator
        # (a `break` out of a for loop) frees the generator at once, and its `finally` ends
        # the epoch then, not whenever the garbage collector finds a cycle.
        self._batches = self._run.batches()
        self._ended_because: str | None = None

    @property
    def position(self) -> Position:
        return self._run.position

    @property
    def finished(self) -> bool:
        return self._run.finished

    def __iter__(self) -> "EpochIterator":
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._ended_because is not None:
            raise RuntimeError(self._ended_because)
        return next(self._batches)

    def close(self, because: str | None = None) -> None:
        """End the epoch: threads stopped, buffers back, stats final. With `because`, a later
        next() raises it (a newer iterator took over) instead of stopping quietly."""
        if because is not None and not self.finished:
            self._ended_because = because
        self._batches.close()
        self._run.finished = True


class _EpochRun:
    """What an epoch iterator's generator runs on (kept apart from the iterator, see there)."""

    def __init__(self, runtime, epoch: int, start: Position, stats, *, batch_size: int,
                 drop_last: bool, steps: int | None, wrap, share, sources: tuple):
        self.runtime, self.epoch, self.stats, self.position = runtime, epoch, stats, start
        self.batch_size, self.drop_last, self.steps = batch_size, drop_last, steps
        self.wrap, self.share, self.sources = wrap, share, sources
        self.stats.skipped.update(start.skipped)
        self.stats.padded = start.padded
        self.finished = False

    def batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        runtime, position = self.runtime, self.position
        # Ranks that run short repeat their last batch: a resumed epoch makes it again from
        # the position before it (handed out already: not counted, not handed out again).
        again = position.repeat is not None and self.steps is not None
        mark, rows = position.repeat if again else (position.mark, position.rows)
        leftover: Counter = Counter()
        stream = runtime.stream(self.epoch, mark,
                                lambda: EpochStream(runtime, self.epoch, mark, self.wrap))
        made = rebatch(stream.pieces(), self.batch_size, drop_last=self.drop_last, mark=mark,
                       skip_rows=rows, leftover=leftover)
        started, last = time.perf_counter(), None
        self.share.start_epoch()
        try:
            if again:
                last = self._again(next(made, None))
            while self.steps is None or position.batches < self.steps:
                item, last = self._next_batch(made, last)
                if item is None:
                    break
                position.batches += 1
                self.stats.batches += 1
                self.stats.samples += len(item[1])
                yield item
            else:
                # Equal steps for every rank, all taken. If the epoch's end is next, reach it,
                # so the stream goes on; rows past the last step ("drop") are dropped, and so is
                # an error of theirs: it ends the stream, and the next epoch starts anew.
                try:
                    next(made, None)
                except Exception:  # noqa: BLE001 -- of rows no rank hands out
                    pass
        finally:
            self.finished = True
            if stream.ended is not None and stream.goes_on:
                runtime.keep(stream)  # the next epoch's first batches are on their way
            else:
                stream.close()  # ended early, failed, or no lookahead
            self._finish(started, leftover, stream.end_of(self.epoch))

    def _next_batch(self, made, last):
        """(the next batch or None at the end, the last real batch and where it was handed)."""
        prefetcher, position = self.runtime.prefetcher, self.position
        # Asked before waiting for the batch (the GPU catches up while the host waits): how
        # far behind its host does the consumer's GPU run? Only while the share wants to know.
        lag = prefetcher.consumer_lag() if self.share.watches_steps else None
        t0 = time.perf_counter()
        out = next(made, None)
        waited = time.perf_counter() - t0
        self.stats.wait_s += waited
        if out is not None:
            self.share.observe(waited, out.share, lag)
        self.stats.cpu_share = self.share.share
        self.stats.cpu_large = self.share.cpu_large
        self.stats.share_rates = self.share.rates
        self.stats.cpu_bound = self.share.cpu_bound
        if out is None:
            if self.steps is None or last is None:
                return None, last
            # This rank ran short: repeat, so that collectives never hang.
            position.padded += 1
            self.stats.padded += 1
            return prefetcher.hand_over_again(last[0], last[1]), last
        position.repeat = (position.mark, position.rows)  # used only once padding starts
        position.mark, position.rows = out.mark, out.rows
        position.skipped.update(_tally(out.counts, self.stats))
        item = (out.images, out.labels)
        return item, (item, prefetcher.consumer_stream())

    def _again(self, out: Rebatched | None):
        """Resumed: the last batch handed out, made again (not counted) for repeats."""
        if out is None:
            return None
        item = (out.images, out.labels)
        return item, self.runtime.prefetcher.consumer_stream()

    def _finish(self, started: float, leftover: Counter, ended: EpochEnd | None) -> None:
        stats = self.stats
        producer = self.runtime.producer
        # The producer's counts of this epoch: those of its end once the producer reached it
        # (it may count the next one by now), else the producer's as they stand.
        reader_counts, nbytes = (ended.skipped, ended.bytes) if ended else producer.epoch_stats
        _tally(reader_counts, stats)
        _tally(leftover, stats)
        stats.bytes = nbytes or stats.bytes
        fetched = ended.fetched if ended else producer.epoch_fetched  # from URL sources
        stats.fetched, stats.requests, stats.retries = (
            fetched.get("fetched", 0), fetched.get("requests", 0), fetched.get("retries", 0))
        stats.seconds = time.perf_counter() - started
        warned = {k: n for k, n in sorted(stats.skipped.items()) if k not in UNWARNED_SKIPS}
        if warned:
            names = ", ".join(source_name(s) for s in self.sources[:3])
            more = "..." if len(self.sources) > 3 else ""
            warnings.warn(f"epoch {stats.epoch}: skipped {counted(sum(warned.values()), 'member')}"
                          f" of {names}{more}: {warned}"
                          f"{_repack_hints(warned, source_name(self.sources[0]))}",
                          stacklevel=4)


def _repack_hints(skipped: dict, archive: str) -> str:
    """What pack makes of the skipped members it can turn into images, said once per reason."""
    hints = [REPACK_HINTS[reason].format(archive=archive)
             for reason in sorted(skipped) if reason in REPACK_HINTS]
    return "".join(f"; {hint}" for hint in hints)


def _tally(counts: dict, stats) -> Counter:
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
