"""What a started loader holds, with one owner: batch buffers, their producer, the live epoch.

A `Runtime` owns the shared, page-locked batch buffers (pool.py), the producer that fills them,
the prefetcher's staging memory, and the epoch being iterated (epoch.py). It alone ends them,
once: on `close()`, or, through a `weakref.finalize` that holds the runtime and nothing of the
loader, when the loader is garbage-collected or the interpreter exits. Nothing it holds refers
back to the loader (the plan's methods, the decoder, the prefetcher do not), so dropping a
loader without `close()` frees its processes and shared memory at once.

Producers, one interface. `batches(epoch, mark)` yields the filled buffers of an epoch in order,
each with `meta["mark"]` (where the epoch stands after it; `mark` resumes there) and
`meta["counts"]` (what it skipped); `epoch_stats` gives the reader's skips and the bytes read of
the epoch; `close()` stops it. `WorkerPool` (workers.py) runs reader and decode processes;
`LocalProducer` (workers=0) fills the buffers in this process when they are asked for.
"""
from __future__ import annotations

import weakref
from collections import Counter
from typing import Any, Callable, Iterator

from .batch import Counted, fill_batch


class Runtime:
    """The processes, the memory and the epoch being iterated of one started loader."""

    def __init__(self, prefetcher, lookahead: bool = True):
        self.prefetcher = prefetcher
        # Options.lookahead: whether an epoch read to its end goes on into the next (the
        # producer's reading, and the prefetcher's stream: epoch.EpochStream)
        self.lookahead = lookahead
        self.pool = None        # set by whoever starts us, right after allocating it
        self.producer = None
        self.warming = None     # a thread readying the GPU steps while the workers start
        self.closed = False
        self._epoch: weakref.ref | None = None  # the live EpochIterator (the user holds it)
        self._ahead = None  # an epoch stream gone on into the next epoch (epoch.EpochStream)

    def begin(self, make_epoch: Callable[["Runtime"], Any], epoch: int):
        """A new epoch iterator; the previous one, if still live, is ended first: two
        iterators would share the producer's buffers and state."""
        if self.closed:
            raise RuntimeError("the loader is closed")
        self.end_epoch(f"this iterator was ended because a newer iter(loader) started epoch "
                       f"{epoch}; iterate that one")
        current = make_epoch(self)
        self._epoch = weakref.ref(current)
        return current

    def stream(self, epoch: int, mark: dict | None, make: Callable[[], Any]):
        """The stream an epoch is iterated from: the one kept going into it, if it stands at
        that epoch's start and the epoch starts there (no `mark`); else a new one from `make`,
        the kept one ended first (its threads and the producer's epoch are the new one's)."""
        ahead = self._ahead
        if ahead is not None and mark is None and ahead.epoch == epoch and ahead.at_start:
            self._ahead = None
            return ahead
        self._end_ahead()
        return make()

    def _end_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.close()

    def keep(self, stream) -> None:
        """An epoch iterated to its end leaves its stream here, going on into the next."""
        self._ahead = stream

    @property
    def current(self):
        """The live epoch iterator, if its holder still keeps it."""
        return self._epoch() if self._epoch is not None else None

    def end_epoch(self, because: str | None = None) -> None:
        current = self.current
        self._epoch = None
        if current is not None and not current.finished:
            current.close(because)

    def close(self) -> None:
        """End the live epoch (its threads read the buffers), stop the producer, free the
        memory. Safe to call twice; the finalizer calls it too."""
        if self.closed:
            return
        self.closed = True
        try:
            self.end_epoch()
            self._end_ahead()
        finally:
            if self.warming is not None:
                self.warming.join()  # a kernel build: seconds at most, and it uses the GPU
            if self.producer is not None:
                self.producer.close()
            if self.pool is not None:
                self.pool.close()
            self.prefetcher.close()


class LocalProducer:
    """workers=0: the producer interface in this process, each buffer filled when asked for."""

    def __init__(self, plan, fill, pool, order_of, *, on_error: str, prepare=None):
        self.plan, self.fill, self.pool, self.order_of = plan, fill, pool, order_of
        self.on_error, self.prepare = on_error, prepare
        self._skipped: Counter = Counter()
        self._read: dict = {}

    def batches(self, epoch: int, resume: dict | None = None) -> Iterator[Any]:
        self._skipped, self._read = Counter(), {}
        made = int(resume["next"][0]) if resume else 0
        consumed = int(resume["consumed"][0]) if resume else 0
        tasks = self.plan.tasks(epoch, tuple(self.order_of(epoch)), self._skipped, self._read)
        try:
            for _ in range(consumed):  # resuming: these made batches before the checkpoint
                next(tasks, None)
            while True:
                buf, n = self._fill(tasks)
                if buf is None:
                    return
                made, consumed = made + 1, consumed + n
                buf.meta["mark"] = {"next": [made], "consumed": [consumed], "tail": 0}
                count = buf.count
                yield buf
                if count < self.plan.batch_size:
                    return
        finally:
            tasks.close()

    def _fill(self, tasks):
        """(a filled buffer, tasks it consumed), or (None, n) at the end of the stream."""
        buf = self.pool.lease()
        if self.prepare is not None:
            self.prepare(buf)
        counts: Counter = Counter()
        counted = Counted(tasks)
        try:
            buf.count = fill_batch(counted, buf.arrays, self.fill, on_error=self.on_error,
                                   skipped=counts)
        except BaseException:
            self.pool.release(buf)
            raise
        if buf.count == 0:
            self.pool.release(buf)
            self._skipped.update(counts)  # failures at the end: reported with the epoch
            return None, counted.n
        buf.meta["counts"] = dict(counts)
        return buf, counted.n

    @property
    def epoch_stats(self) -> tuple[Counter, int]:
        return self._skipped, self._read.get("bytes", 0)

    @property
    def epoch_fetched(self) -> Counter:
        """What was fetched from remote archives this epoch (remote.counters)."""
        return Counter(self._read.get("remote", {}))

    def close(self) -> None:
        pass  # nothing of its own: the buffers are the runtime's
