"""Parallel read and decode: a reader process streams the archive, worker processes decode.

    reader process                       decode workers (W)                  training process
    inflate (rapidgzip) + walk tar  -->  fill batch k in shared memory  -->  batch k ready
    shuffle, seed, deal batch groups     buffer given by the parent          (slot, count)

Why this shape (see FACTS.md): PIL decode is ~2 ms of CPU per image and threads plateau at the
GIL, so decode needs processes; pickling decoded pixels back was the wall of simpler designs, so
workers write pixels straight into shared-memory batch buffers that CUDA page-locked once; and the
training process must stay out of per-image work, so the tar walk runs in its own process.

Determinism: the reader deals the shuffled stream in groups of `batch_size`, group g to worker
g % W, so batch k is exactly samples [kB, (k+1)B) of the epoch, as with workers=0. A sample that
fails to decode is replaced by the next sample of the SAME worker's stream, so only that worker's
later batches shift, deterministically. Each worker's last batch may be short; the short ones are
handed out at the end of the epoch, in batch order, and the consumer combines them (epoch.py).
In archive order (evaluation) a batch is exactly its group, however many of it fail, and every
batch comes in its place: the consumer carries rows over, so the images stay in archive order.

Resume: batch k is always the (k // W)-th batch of worker k % W, so "where an epoch stands" is,
per worker, its next batch number and the tasks its batches handed out so far consumed (a mark,
attached to each buffer handed out). A resumed epoch orders each worker's next batch, which
skips that many tasks without decoding them.

Every message carries a generation number (one per epoch). Generations below the shared
`generation` value are dead: abandoning an epoch (`break`, a new iterator) raises that value, and
old messages are recognized and dropped, their buffers going back to the pool. As soon as the
reader has dealt an epoch, the next epoch's reading starts (lookahead), and each worker whose
stream of the epoch has ended fills the next epoch's batches (in batch order) while the others
finish; those batches wait in the pool until the next iteration adopts them.

This module imports neither torch nor PIL at the top: child processes start in a fraction of a
second because they import only numpy, Pillow and the read/decode/batch stages.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import multiprocessing as mp
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
import types
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from typing import Any, Container, Iterator, NamedTuple

from . import remote
from .batch import Counted, Task, fill_batch, schedule, take_share, views_of
from .errors import ArchiveError, Limits, two_splits_message
from .read import in_split, iter_members, iter_samples, split_folder

log = logging.getLogger(__name__)
CHUNK = 32                 # tasks per message: amortizes pickling and queue overhead
_POLL = 0.2                # seconds between liveness checks while waiting
_MEMBER_FIELD = 512        # bytes of shared memory where a worker notes its current member
_CLOSED = 1 << 62          # the generation value that tells every child to exit


class WorkerError(RuntimeError):
    """A reader or decode process failed; the message carries its traceback."""


# ============================================================================================
# What the reader needs to produce one epoch (picklable, no torch)


@dataclass(frozen=True)
class ReadPlan:
    archives: tuple             # paths, Regions of one (read.py), or file objects (then read
                                # in a thread, not a process)
    vocab_index: dict
    batch_size: int
    shuffle_buffer: int
    seed: int
    limits: Limits = Limits()
    unknown_labels: str = "raise"
    inflate: str = "auto"
    inflate_threads: int | None = None
    rank: int = 0
    world_size: int = 1
    copy_of: dict = field(default_factory=dict)  # {plain copy (cache.py): the archive it
                                                 # copies}: members name the archive given
    split: str | tuple[str, ...] | None = None  # read only the images below split
                                                # folders of this name (or these)

    def tasks(self, epoch: int, order: tuple[int, ...], skipped: Counter, stats: dict,
              stream: int = 0, share: tuple[int, int] = (0, 1),
              opened: dict | None = None) -> Iterator[Task]:
        """read -> label -> (rank share) -> (reader share) -> shuffle + augmentation seeds.

        `order` lists indices into `archives` (the epoch's shard order for this reader);
        `share` = (r, R): this reader keeps every R-th image from the r-th, when R readers
        split the same archives by image. `opened` keeps region streams open between regions.
        """
        members = _chain_members([self.archives[i] for i in order], skipped, stats, self,
                                 opened)
        samples = iter_samples(members, _Vocab(self.vocab_index), skipped=skipped,
                               unknown_labels=self.unknown_labels)
        if self.world_size > 1:
            samples = take_share(samples, self.rank, self.world_size)
        if share[1] > 1:
            samples = take_share(samples, *share)
        return schedule(samples, seed=self.seed, epoch=epoch,
                        shuffle_buffer=self.shuffle_buffer, stream=stream)


class _Vocab:
    def __init__(self, index: dict):
        self.index = index


def _chain_members(archives, skipped, stats, plan: ReadPlan, opened: dict | None):
    before = remote.counters()
    first = None  # (split, archive, member) of the first image below a split folder
    for archive in archives:
        rewind(archive)
        path = getattr(archive, "path", archive)  # a Region's, or the archive
        far = remote.is_url(path)
        given = plan.copy_of.get(path) if isinstance(path, str) else None
        members = iter_members(archive, skipped=skipped, limits=plan.limits,
                               inflate=plan.inflate, threads=plan.inflate_threads, opened=opened)
        for member in (members if given is None else _as_given(members, given)):
            folder = split_folder(member.name)
            if not in_split(folder, plan.split):
                continue  # another split's: not this loader's set, so not a skip either
            if plan.split is None and folder is not None:
                if first is None:
                    first = (folder, member.archive, member.name)
                elif folder != first[0]:
                    raise ValueError(_second_split(first, folder, member))
            stats["bytes"] = stats.get("bytes", 0) + len(member.data)
            if far:  # bytes fetched, requests and retries of this reader in this epoch
                stats["remote"] = remote.counted_since(before)
            yield member
        if far:
            stats["remote"] = remote.counted_since(before)


def _second_split(first: tuple, folder: str, member) -> str:
    """Images of two splits met by a reader of a loader that names none (given its classes,
    so no scan refused them before)."""
    split, archive, name = first
    found = (f"{split}: member {name!r} of {archive}; {folder}: member {member.name!r} of "
             f"{member.archive}")
    return two_splits_message(2, found, min(split, folder))


def _as_given(members, archive: str):
    """Members read from a plain copy, named as members of the archive the user gave: a
    sample's error or an unknown label then points at a file they know."""
    try:
        for member in members:
            yield member._replace(archive=archive)
    except ArchiveError as error:  # the copy itself is damaged: say which file was read
        # (in the problem's text, which crosses process boundaries; a note would not)
        raise ArchiveError(error.archive, f"{error.problem}; this file is the plain copy of "
                           f"{archive!r}: deleting it makes the next start write it again",
                           member=error.member, index=error.index,
                           offset=error.offset) from error


def rewind(source) -> None:
    """Streams are read again from where they started; a non-seekable one only once."""
    if not hasattr(source, "read"):
        return
    start = getattr(source, "_imageloader_start", None)
    if start is None:
        start = source.tell() if source.seekable() else -1
        try:
            source._imageloader_start = start
        except AttributeError:
            pass
        return
    if start < 0:
        raise ValueError(f"{getattr(source, 'name', 'the stream')} is not seekable: it can be "
                         f"read for one epoch only; pass a path to read it again")
    source.seek(start)


# ============================================================================================
# Child side


@dataclass
class _Channels:
    """Everything shared between the parent and its children."""

    tasks: list           # per worker: reader -> worker, chunks of tasks
    orders: list          # per worker: parent -> worker, (gen, k, slot, skip) fill orders
    results: Any          # children -> parent
    control: list        # per reader: parent -> reader, epochs to read
    generation: Any       # shared int: generations below it are abandoned
    members: list         # per worker: bytes naming the member being decoded
    tails: Any = None     # per worker: how far it has read its byte ring
    rings: list = field(default_factory=list)  # per worker: shared-memory name of its ring
    ring_size: int = 0
    nice: int = 0         # added to the children's niceness (loader.GPU_DECODE_NICE)


class RingRef(NamedTuple):
    """Where a member's bytes wait in its worker's ring: logical position and length."""

    pos: int
    length: int

    @property
    def end(self) -> int:
        return self.pos + self.length


class RingWriter:
    """The reader's side of the per-worker byte rings (one producer, one consumer each).

    Member bytes go into shared memory instead of through a pipe: pickling them, writing them
    into a pipe and reading them back cost four copies and a GIL-bound feeder thread per
    worker in the reader; this is one copy, and the queues carry only small descriptors.
    A worker publishes how far it has read (`tails`); the reader never overwrites unread bytes.
    """

    def __init__(self, names: list[str], size: int, tails):
        self.size, self.tails = size, tails
        self.rings = {w: _open_segment(name) for w, name in enumerate(names)}
        self.heads = {w: int(tails[w]) for w in self.rings}

    def put(self, worker: int, data: bytes, abandoned) -> RingRef | bytes | None:
        """A ref to the copied bytes; the bytes themselves if too large for the ring; None if
        the epoch was abandoned while waiting for space."""
        n = len(data)
        if n > self.size // 4:
            return data  # a huge member travels inline, pickled
        pos = self.heads[worker]
        if pos % self.size + n > self.size:
            pos += self.size - pos % self.size  # never straddle the end: wrap to the start
        while pos + n - self.tails[worker] > self.size:
            if abandoned():
                return None
            time.sleep(0.0005)  # the worker is a batch behind: wait for it to read
        start = pos % self.size
        self.rings[worker].buf[start:start + n] = data
        self.heads[worker] = pos + n
        return RingRef(pos, n)

    def close(self) -> None:
        for ring in self.rings.values():
            with contextlib.suppress(Exception):
                ring.close()


class RingReader:
    """A worker's side of its ring: copies member bytes out and publishes its read position."""

    def __init__(self, name: str | None, size: int, tails, worker: int):
        self.ring = _open_segment(name) if name else None
        self.size, self.tails, self.worker = size, tails, worker

    def take(self, task: Task) -> Task:
        ref = task.sample.data
        if not isinstance(ref, RingRef):
            return task
        start = ref.pos % self.size
        data = bytes(self.ring.buf[start:start + ref.length])
        self.tails[self.worker] = ref.end  # copied: the reader may reuse that space now
        return Task(task.seed, task.sample._replace(data=data))

    def drop(self, tasks) -> None:
        """Tasks that will never be decoded (an abandoned epoch): free their bytes."""
        ends = [t.sample.data.end for t in tasks if isinstance(t.sample.data, RingRef)]
        if ends:
            self.tails[self.worker] = max(max(ends), self.tails[self.worker])

    def close(self) -> None:
        if self.ring is not None:
            with contextlib.suppress(Exception):
                self.ring.close()


def _child_setup(channels: _Channels) -> None:
    # Ctrl-C goes to the whole process group; only the training process should react, and it
    # shuts us down in order. A child dying of SIGINT mid-write would look like a crash.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if channels.nice > 0:
        # When the children want more cores than there are, the training process's threads
        # (the training loop, and with decode="cuda" the thread that feeds nvJPEG) should not
        # queue behind them: they are the critical path, the children have buffers in hand.
        os.nice(channels.nice)


def _parent_alive(parent_pid: int) -> bool:
    return os.getppid() == parent_pid


def reader_main(reader_id: int, plan: ReadPlan, channels: _Channels, worker_ids: list[int],
                parent_pid: int, in_thread: bool = False) -> None:
    """Read epochs on request and deal batch-size groups of tasks to this reader's workers."""
    if not in_thread:
        _child_setup(channels)
    control = channels.control[reader_id]
    rings = RingWriter(channels.rings, channels.ring_size, channels.tails) \
        if channels.rings else None
    opened: dict = {}  # region streams, open from one epoch to the next (their index loaded)
    try:
        while True:
            try:
                message = control.get(timeout=1.0)
            except queue.Empty:
                if channels.generation.value >= _CLOSED or (
                        not in_thread and not _parent_alive(parent_pid)):
                    return
                continue
            if message is None:
                return
            gen, epoch, order, share = message
            try:
                _read_epoch(reader_id, plan, channels, worker_ids, gen, epoch, order, share,
                            rings, opened)
            except BaseException as error:  # reported to the parent, raised in the loop
                _report_error(channels.results, gen, f"reader {reader_id}", error)
    finally:
        if rings is not None:
            rings.close()
        for stream in opened.values():  # rapidgzip aborts the process if its threads
            with contextlib.suppress(Exception):  # outlive the interpreter
                stream.close()


def _read_epoch(reader_id, plan, channels, worker_ids, gen, epoch, order, share,
                rings, opened) -> None:
    skipped: Counter = Counter()
    stats: dict = {}
    chunks: dict[int, list] = {w: [] for w in worker_ids}
    n_workers = len(worker_ids)
    current = channels.generation

    parent = os.getppid()

    def abandoned() -> bool:  # also when the training process died (the OOM killer, say)
        return gen < current.value or os.getppid() != parent

    tasks = plan.tasks(epoch, order, skipped, stats, reader_id, share, opened)
    for position, task in enumerate(tasks):
        worker = worker_ids[(position // plan.batch_size) % n_workers]
        data = rings.put(worker, task.sample.data, abandoned) if rings else task.sample.data
        if data is None:
            return  # the epoch was abandoned
        chunk = chunks[worker]
        chunk.append(Task(task.seed, task.sample._replace(data=data)))
        if len(chunk) == CHUNK or (position + 1) % plan.batch_size == 0:
            if not _put(channels.tasks[worker], (gen, chunk), abandoned):
                return  # the epoch was abandoned
            chunks[worker] = []
    for worker in worker_ids:
        if chunks[worker]:
            _put(channels.tasks[worker], (gen, chunks[worker]), abandoned)
        _put(channels.tasks[worker], (gen, None), abandoned)  # end of this stream
    fetched = stats.get("remote", {})  # each reader's own
    if share[0] > 0:  # readers that split archives by image all walk the same members:
        skipped, stats = Counter(), {}  # the first one reports their skips and bytes
    channels.results.put(("read", gen, reader_id, dict(skipped), stats.get("bytes", 0),
                          fetched))


def _put(q, item, abandoned) -> bool:
    """Put with back-pressure, giving up if the parent abandoned this generation (or died)."""
    while True:
        if abandoned():
            return False
        try:
            q.put(item, timeout=0.5)
            return True
        except queue.Full:
            continue


def worker_main(worker_id: int, decoder, on_error: str, layout, shm_names: list[str],
                channels: _Channels, parent_pid: int) -> None:
    """Fill batch buffers on order, from this worker's stream of tasks."""
    _child_setup(channels)
    buffers = _attach(shm_names, layout)
    ring = RingReader(channels.rings[worker_id] if channels.rings else None,
                      channels.ring_size, channels.tails, worker_id)
    stream = _TaskStream(worker_id, channels, ring, parent_pid)
    note = channels.members[worker_id]
    try:
        while True:
            try:
                order = channels.orders[worker_id].get(timeout=1.0)
            except queue.Empty:
                if not _parent_alive(parent_pid) or channels.generation.value >= _CLOSED:
                    return  # the parent is gone, or closed us (its stop message may be lost)
                continue
            if order is None:
                return
            gen, k, slot, skip, group = order
            try:
                _fill_order(worker_id, decoder, on_error, buffers[slot], stream, channels, note,
                            gen, k, slot, skip, group)
            except BaseException as error:
                _report_error(channels.results, gen, f"worker {worker_id}", error,
                              member=bytes(note.value).decode("utf-8", "replace"))
                stream.discard(gen)
    finally:
        del buffers
        ring.close()
        _detach_all()


def _fill_order(worker_id, decoder, on_error, buffer, stream, channels, note, gen, k, slot,
                skip, group):
    skipped: Counter = Counter()
    if gen < channels.generation.value or stream.finished(gen):
        channels.results.put(("done", gen, worker_id, k, slot, 0, True, {}, 0))
        return
    tasks = stream.tasks(gen, note)
    for _ in range(skip):  # resuming mid-epoch: these tasks made batches before the checkpoint
        next(tasks, None)
    # group: archive order (evaluation). The batch takes exactly its group of tasks, whatever
    # fails to decode; the parent carries rows over. Otherwise a failed sample is replaced by
    # the next one of this worker's stream, which comes from its next group.
    counted = Counted(itertools.islice(tasks, group) if group else tasks)
    count = fill_batch(counted, buffer, decoder, on_error=on_error, skipped=skipped)
    # A full batch is not final even if the stream ends right after it: the worker's next
    # order will come back empty and final. Peeking here would hold this batch back until the
    # reader dealt this worker's next group.
    final = stream.finished(gen) or (not group and count < len(buffer.labels))
    channels.results.put(("done", gen, worker_id, k, slot, count, final, dict(skipped),
                          counted.n))


class _TaskStream:
    """This worker's tasks for the current generation, pulled chunk by chunk from its queue."""

    def __init__(self, worker_id: int, channels: _Channels, ring: RingReader, parent_pid: int):
        self.q, self.generation, self.ring = channels.tasks[worker_id], channels.generation, ring
        self.parent = parent_pid
        self.gen, self.pending, self.ended = -1, [], True
        self.early: tuple[int, list] | None = None  # a chunk of a later generation, kept

    def _switch(self, gen: int) -> None:
        if gen != self.gen:
            self.ring.drop(self.pending)
            self.gen, self.pending, self.ended = gen, [], False
            if self.early is not None and self.early[0] == gen:
                chunk = self.early[1]
                self.ended = chunk is None
                self.pending = [] if chunk is None else list(reversed(chunk))
            if self.early is not None and self.early[0] <= gen:
                self.early = None

    def finished(self, gen: int) -> bool:
        self._switch(gen)
        return self.ended

    def discard(self, gen: int) -> None:
        self._switch(gen)
        self.ring.drop(self.pending)
        self.pending, self.ended = [], True

    def _next_chunk(self, gen: int) -> bool:
        """Load the next chunk of `gen` into pending; False at its end (or if abandoned)."""
        while True:
            if gen < self.generation.value:
                self.ended = True
                return False
            try:
                chunk_gen, chunk = self.q.get(timeout=_POLL)
            except queue.Empty:
                if not _parent_alive(self.parent):  # killed while we waited for the reader
                    self.ended = True
                    return False
                continue
            if chunk_gen < gen:
                self.ring.drop(chunk or [])  # left over from an abandoned epoch
                continue
            if chunk_gen > gen:  # ours was abandoned before its end marker reached us
                self.early = (chunk_gen, chunk)
                self.ended = True
                return False
            if chunk is None:
                self.ended = True
                return False
            self.pending = list(reversed(chunk))
            return True

    def tasks(self, gen: int, note) -> Iterator[Task]:
        self._switch(gen)
        while True:
            if not self.pending and (self.ended or not self._next_chunk(gen)):
                return
            task = self.ring.take(self.pending.pop())
            note.value = task.sample.name.encode("utf-8", "replace")[: _MEMBER_FIELD - 1]
            yield task


_ATTACHED: list[shared_memory.SharedMemory] = []


def _attach(names: list[str], layout):
    views = []
    for name in names:
        segment = _open_segment(name)
        _ATTACHED.append(segment)
        views.append(views_of(segment.buf, layout))
    return views


def _open_segment(name: str) -> shared_memory.SharedMemory:
    # The parent owns (and unlinks) the segments. Python < 3.13 would also register them with
    # the resource tracker on attach, which then warns about "leaked" memory at exit.
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    from multiprocessing import resource_tracker
    original = resource_tracker.register
    resource_tracker.register = lambda *args, **kwargs: None
    try:
        return shared_memory.SharedMemory(name=name)
    finally:
        resource_tracker.register = original


def _detach_all() -> None:
    for segment in _ATTACHED:
        with contextlib.suppress(Exception):
            segment.close()
    _ATTACHED.clear()


def _report_error(results, gen, who: str, error: BaseException, member: str | None = None):
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    try:
        results.put(("error", gen, who, error, text, member))
    except Exception:  # the exception itself cannot be pickled: send its text
        results.put(("error", gen, who, None, text, member))


# ============================================================================================
# Parent side


@dataclass
class _Epoch:
    """The parent's view of one epoch. Batch k is the (k // W)-th batch of worker k % W's stream:
    a number that depends on the stream alone, so a resumed epoch numbers its batches (and
    orders its short last ones) exactly as the uninterrupted one did."""

    gen: int
    epoch: int
    order: tuple
    start: list                         # worker -> the first batch number to order (resume)
    next_k: int = 0                     # next batch number to hand out
    assigned: int = 0                   # next batch number to give a buffer to
    ready: dict = field(default_factory=dict)       # k -> buffer, filled
    final: dict = field(default_factory=dict)       # worker -> its last batch number
    partial: list = field(default_factory=list)     # (k, buffer) short final batches
    outstanding: int = 0                # orders sent and not yet answered
    readers_done: int = 0
    skipped: Counter = field(default_factory=Counter)   # reader skips, and those of buffers
                                                        # that were never handed out
    bytes: int = 0
    fetched: Counter = field(default_factory=Counter)   # remote.counters() of the readers
    error: BaseException | None = None  # raised when this epoch is iterated
    skip_tasks: dict = field(default_factory=dict)      # worker -> tasks to skip (resume)
    consumed: list = field(default_factory=list)    # worker -> tasks of batches handed out
    tail_done: int = 0                  # short last batches handed out before (resume)
    pending: Counter = field(default_factory=Counter)  # counts of empty batches passed over


class WorkerPool:
    """Owns the reader and decode processes and hands out filled batch buffers in order.

    `order_of(epoch)` gives an epoch's archive order (indices into the plan's archives); reader
    r reads order[r::readers], or every archive and every R-th image of them when there are
    fewer archives than readers. With `lookahead`, epoch e+1 starts as soon as e is fully read.
    """

    def __init__(self, plan: ReadPlan, decoder, pool, *, workers: int, readers: int,
                 order_of, on_error: str = "skip", timeout: float = 300.0,
                 stream_sources: bool = False, lookahead: bool = True, ring_bytes: int = 0,
                 nice: int = 0, prepare=None, ordered: bool = False):
        self.plan, self.decoder, self.pool, self.order_of = plan, decoder, pool, order_of
        # ordered: archive order (evaluation): each batch is exactly its group of the stream,
        # handed out in its place however short (the consumer carries rows over).
        self.ordered = ordered
        self.prepare = prepare  # called with each buffer before a worker is told to fill it
        self.workers, self.readers = workers, max(1, min(readers, workers))
        self.on_error, self.timeout, self.lookahead = on_error, timeout, lookahead
        self.stream_sources, self.ring_bytes, self.nice = stream_sources, ring_bytes, nice
        self._rings: list[shared_memory.SharedMemory] = []
        self._ctx = mp.get_context("spawn")
        self._gen = 0
        self._last_message = time.monotonic()   # hang detection: time of the last progress
        self._epoch: _Epoch | None = None       # the epoch being iterated
        self._next: _Epoch | None = None        # the epoch started ahead
        self._finished: _Epoch | None = None
        self._procs: list = []
        self._threads: list[threading.Thread] = []
        self.closed = False
        self._start()

    # ---- processes -------------------------------------------------------------------------

    def _start(self) -> None:
        ctx, n = self._ctx, self.workers
        per_worker_chunks = 2 * (-(-self.plan.batch_size // CHUNK)) + 2
        self.channels = _Channels(
            tasks=[ctx.Queue(maxsize=per_worker_chunks) for _ in range(n)],
            orders=[ctx.Queue() for _ in range(n)],
            results=ctx.Queue(),
            control=[ctx.Queue() for _ in range(self.readers)],
            generation=ctx.Value("q", 1, lock=False),
            members=[ctx.Array("c", _MEMBER_FIELD, lock=False) for _ in range(n)],
            tails=ctx.Array("q", n, lock=False),
            nice=self.nice,
        )
        if self.ring_bytes:  # owned (and unlinked) here, like the batch buffers
            self._rings = [shared_memory.SharedMemory(create=True, size=self.ring_bytes)
                           for _ in range(n)]
            self.channels.rings = [r.name for r in self._rings]
            self.channels.ring_size = self.ring_bytes
        parent = os.getpid()
        # A transform defined in the user's script can only be unpickled where __main__ is.
        hide_main = b"__main__" not in pickle.dumps(self.decoder)
        with _without_main_module() if hide_main else contextlib.nullcontext():
            for w in range(n):
                self._spawn(worker_main, (w, self.decoder, self.on_error, self.pool.layout,
                                          self.pool.shm_names, self.channels, parent),
                            f"imageloader-worker-{w}")
            for r in range(self.readers):
                args = (r, self.plan, self.channels, self.worker_ids(r), parent)
                if self.stream_sources:  # file objects cannot cross processes: read in a thread
                    thread = threading.Thread(target=reader_main, args=(*args, True),
                                              name=f"imageloader-reader-{r}", daemon=True)
                    thread.start()
                    self._threads.append(thread)
                else:
                    self._spawn(reader_main, args, f"imageloader-reader-{r}")

    def _spawn(self, target, args, name) -> None:
        proc = self._ctx.Process(target=target, args=args, name=name, daemon=True)
        proc.start()
        self._procs.append(proc)

    def worker_ids(self, reader: int) -> list[int]:
        return list(range(reader, self.workers, self.readers))

    def close(self, timeout: float = 5.0) -> None:
        """Stop every process within `timeout` seconds, politely first. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        self.channels.generation.value = _CLOSED  # abandons whatever is being read or decoded
        for q in self.channels.orders + self.channels.control:
            with contextlib.suppress(Exception):
                q.put(None)
        deadline = time.monotonic() + timeout
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for q in self._all_queues():
            q.cancel_join_thread()  # never block interpreter exit on unflushed messages
            q.close()
        for ring in self._rings:
            with contextlib.suppress(Exception):
                ring.unlink()
            with contextlib.suppress(Exception):
                ring.close()

    def _all_queues(self):
        c = self.channels
        return [*c.tasks, *c.orders, c.results, *c.control]

    # ---- epochs ----------------------------------------------------------------------------

    def batches(self, epoch: int, resume: dict | None = None) -> Iterator[Any]:
        """Yield filled pool buffers (refs=1, `count` set) of one epoch, in batch order.

        Each buffer's `meta` has "mark": where the epoch stands once it has been handed out
        (pass a mark as `resume` to continue from there), and "counts": what its batch
        skipped (and decoded otherwise) by reason. Full batches come in batch order; the short
        last batches of the workers' streams come at the end, in batch order too, for the
        consumer to combine (epoch.py). In archive order (`ordered`) every batch comes in its
        place, however short.
        """
        if self.closed:
            raise RuntimeError("the loader's workers are closed")
        order = tuple(self.order_of(epoch))
        ahead, self._next = self._next, None
        if self._epoch is not None or resume is not None or (
                ahead and (ahead.epoch, ahead.order) != (epoch, order)):
            self._next = ahead
            self._abandon()  # a second iterator, or set_epoch() moved away from the lookahead
            ahead = None
        state = self._epoch = ahead or self._begin(epoch, order)
        self._last_message = time.monotonic()
        if resume is not None:
            self._resume(state, resume)
        if state.error is not None:
            raise state.error
        try:
            yield from self._collect(state)
        finally:
            if self._epoch is state:
                self._abandon()

    def _resume(self, state: _Epoch, mark: dict) -> None:
        if len(mark["next"]) != self.workers:
            raise ValueError(f"the checkpoint was taken with {len(mark['next'])} workers, "
                             f"this loader has {self.workers}")
        state.start = [int(k) for k in mark["next"]]
        state.consumed = [int(n) for n in mark["consumed"]]
        state.skip_tasks = {w: n for w, n in enumerate(state.consumed) if n}
        state.next_k = state.assigned = min(state.start)
        state.tail_done = int(mark.get("tail", 0))

    def _begin(self, epoch: int, order: tuple) -> _Epoch:
        self._gen += 1
        state = _Epoch(self._gen, epoch, order, start=list(range(self.workers)),
                       consumed=[0] * self.workers)
        for r in range(self.readers):
            self.channels.control[r].put((state.gen, epoch, *self.reader_part(order, r)))
        return state

    def reader_part(self, order: tuple, r: int) -> tuple[tuple, tuple[int, int]]:
        """Reader r's archives and image share: archives are dealt out while there are enough
        of them; with fewer archives than readers every reader walks them all (inflating
        each in full) and keeps every R-th image: one stream's per-member work, split."""
        if len(order) >= self.readers:
            return tuple(order[r::self.readers]), (0, 1)
        return tuple(order), (r, self.readers)

    def _collect(self, state: _Epoch) -> Iterator[Any]:
        while True:
            self._assign_all(state)
            k = state.next_k
            if self._done_before(k, state):
                state.next_k += 1  # resumed: handed out before the checkpoint
                continue
            buf = state.ready.pop(k, None)
            if buf is not None:
                state.next_k += 1
                if self._hand_out(state, k, buf):
                    yield buf
                    self._consumer_is_back()
                continue
            if self._missing(k, state) and not self._all_ended(state):
                state.next_k += 1  # that worker's stream ended earlier (or short: at the end)
                continue
            if self._complete(state):
                break
            self._receive(state)
        yield from self._tail(state)
        state.skipped.update(state.pending)
        self._finished, self._epoch = state, None

    def _consumer_is_back(self) -> None:
        """The hang timeout counts our waits on the workers, not the consumer's time away (a
        validation pass, a checkpoint): it holds buffers meanwhile, and the first wait after
        it comes back, for one of them to be free, would otherwise time out at once."""
        self._last_message = time.monotonic()

    def _done_before(self, k: int, state: _Epoch) -> bool:
        return k < state.start[self._worker_of(k)]

    def _hand_out(self, state: _Epoch, k: int, buf) -> bool:
        """Batch k is next: mark where the epoch stands after it. False if it is empty (its
        counts then travel with the next batch handed out)."""
        w = self._worker_of(k)
        state.start[w] = k + self.workers
        state.consumed[w] += buf.meta.pop("consumed")
        state.pending.update(buf.meta.pop("counts"))
        if buf.count == 0:
            self.pool.release(buf)
            return False
        buf.meta.update(mark=self._mark(state), counts=dict(state.pending))
        state.pending = Counter()
        return True

    def _mark(self, state: _Epoch, tail: int = 0) -> dict:
        return {"next": list(state.start), "consumed": list(state.consumed), "tail": tail}

    def _tail(self, state: _Epoch) -> Iterator[Any]:
        """The workers' short last batches, in batch order. Their workers stay marked before
        them: a resumed epoch makes them again and passes over those handed out."""
        parts = sorted(state.partial, key=lambda item: item[0])
        state.partial.clear()
        for i, (_, buf) in enumerate(parts):
            if i < state.tail_done:
                self.pool.release(buf)
                continue
            buf.meta.pop("consumed")
            state.pending.update(buf.meta.pop("counts"))
            buf.meta.update(mark=self._mark(state, tail=i + 1), counts=dict(state.pending))
            state.pending = Counter()
            try:
                yield buf
            except GeneratorExit:
                for _, rest in parts[i + 1:]:
                    self.pool.release(rest)
                raise
            self._consumer_is_back()

    def _worker_of(self, k: int) -> int:
        return k % self.workers

    def _assign_all(self, state: _Epoch) -> None:
        if self.lookahead and self._next is None and state.readers_done == self.readers:
            self._next = self._begin(state.epoch + 1, tuple(self.order_of(state.epoch + 1)))
        done = self._assign(state)
        if self._next is not None:
            # Free buffers feed the next epoch: every worker once ours needs no more, and before
            # that the workers whose streams of ours have ended. In an epoch's tail the workers
            # end one by one; each sat idle until the last ended, and the next epoch's first
            # batches were only begun then (with decode="cpu" a whole batch's decode: ResNet-50
            # waited 0.74-0.82 s at each epoch start on an H200 host, 0.50-0.56 s with this).
            self._assign(self._next, None if done else state.final)

    def _assign(self, state: _Epoch, only: Container[int] | None = None) -> bool:
        """Give free buffers to batches in order, only to the workers in `only` if given
        (stopping at the first batch of another); True once this epoch needs no more."""
        # Buffers go to batches strictly in batch order, so the batch the consumer waits for
        # always has one: no deadlock however the workers' speeds differ. The next epoch
        # takes buffers only for workers done with ours, in order, so for fewer batches than
        # there are workers, and the pool holds more buffers than that: ours always has some.
        while True:
            w = self._worker_of(state.assigned)
            if only is not None and w not in only:
                return False
            if self._done_before(state.assigned, state):
                state.assigned += 1
                continue
            if w in state.final and state.final[w] < state.assigned:
                if len(state.final) == self.workers:
                    return True  # every worker's stream ended: nothing more to assign
                state.assigned += 1
                continue
            if state.assigned - state.next_k >= len(self.pool.buffers):
                return False  # far enough ahead; the pool bounds memory anyway
            buf = self.pool.lease(block=False)
            if buf is None:
                return False
            buf.meta.update(gen=state.gen, k=state.assigned, sent=True)
            if self.prepare is not None:
                self.prepare(buf)
            skip = state.skip_tasks.pop(w, 0)
            group = self.plan.batch_size if self.ordered else 0
            self.channels.orders[w].put((state.gen, state.assigned, buf.slot, skip, group))
            state.outstanding += 1
            state.assigned += 1

    def _missing(self, k: int, state: _Epoch) -> bool:
        # Not ready and never will be in order: its worker's last batch came at or before k.
        w = self._worker_of(k)
        return w in state.final and state.final[w] <= k

    def _all_ended(self, state: _Epoch) -> bool:
        return len(state.final) == self.workers and state.next_k > max(state.final.values())

    def _complete(self, state: _Epoch) -> bool:
        return (self._all_ended(state) and state.outstanding == 0
                and state.readers_done == self.readers and not state.ready)

    def _receive(self, state: _Epoch) -> None:
        """Wait for a worker message, or for a buffer to come back from its copy."""
        while True:
            # When every order has been answered, no message can come: what we wait for is a
            # buffer whose host->device copy (its CUDA event) is still running. Poll for it
            # often, so the collector goes back to assigning as soon as one is free.
            idle = self._outstanding() == 0
            try:
                message = self.channels.results.get(timeout=0.002 if idle else _POLL)
            except queue.Empty:
                self._check_alive()
                if time.monotonic() - self._last_message > self.timeout:
                    raise WorkerError(self._hang_message())
                if idle and self.pool.free:
                    return
                continue
            self._last_message = time.monotonic()
            target = self._state_of(message[1])
            self._handle(target, message)
            if state.error is not None:
                raise state.error
            return

    def _outstanding(self) -> int:
        return sum(s.outstanding for s in (self._epoch, self._next) if s is not None)

    def _state_of(self, gen: int) -> _Epoch | None:
        for state in (self._epoch, self._next):
            if state is not None and state.gen == gen:
                return state
        return None  # an abandoned epoch

    def _handle(self, state: _Epoch | None, message) -> None:
        kind = message[0]
        if kind == "error":
            _, _, who, error, text, member = message
            if state is not None and state.error is None:
                state.error = _remote(who, error, text, member)
            return
        if kind == "read":
            if state is not None:
                state.readers_done += 1
                state.skipped.update(message[3])
                state.bytes += message[4]
                state.fetched.update(message[5])
            return
        _, _, worker, k, slot, count, final, counts, consumed = message
        buf = self.pool.buffers[slot]
        buf.meta["sent"] = False  # answered
        if state is None:
            self.pool.release(buf)  # an order of an abandoned epoch: the buffer comes back
            return
        state.outstanding -= 1
        if final and worker not in state.final:
            state.final[worker] = k
        buf.count = count
        if count == 0 and final:
            state.skipped.update(counts)  # nothing to hand out: reported with the epoch's end
            self.pool.release(buf)
            return
        buf.meta.update(counts=counts, consumed=consumed)
        if final and count < self.plan.batch_size and not self.ordered:
            state.partial.append((k, buf))  # handed out at the end (see _tail)
        else:
            state.ready[k] = buf

    def _abandon(self) -> None:
        """Forget the current and the lookahead epoch; their late messages free buffers."""
        if self._epoch is not None:
            self._finished = self._epoch  # its counts so far are what the loader reports
            self._epoch.skipped.update(self._epoch.pending)
            self._epoch.pending = Counter()
        for state in (self._epoch, self._next):
            if state is None:
                continue
            for buf in list(state.ready.values()) + [b for _, b in state.partial]:
                self.pool.release(buf)
            state.ready.clear()
            state.partial.clear()
        self._epoch = self._next = None
        self.channels.generation.value = self._gen + 1  # every generation so far is dead
        self._drain(wait=1.0)

    def _drain(self, wait: float) -> None:
        """Take back the buffers of orders sent for abandoned epochs: their workers answer
        within one image, so a break returns every buffer at once, not at the next epoch."""
        deadline = time.monotonic() + wait
        while any(b.refs and b.meta.get("sent") for b in self.pool.buffers) \
                and time.monotonic() < deadline:
            try:
                message = self.channels.results.get(timeout=0.05)
            except (queue.Empty, OSError, ValueError):
                continue
            self._handle(None, message)

    # ---- faults ----------------------------------------------------------------------------

    def _check_alive(self) -> None:
        for proc in self._procs:
            if proc.exitcode is not None:
                # A child killed mid-write may hold the results queue's lock: the others can
                # then hang at exit, so do not wait for them long.
                self.close(timeout=0.5)
                raise WorkerError(f"{proc.name} (pid {proc.pid}) died with "
                                  f"{_exit_text(proc.exitcode)}{self._doing(proc.name)}")
        for thread in self._threads:
            if not thread.is_alive():
                self.close(timeout=0.5)
                raise WorkerError(f"{thread.name} stopped unexpectedly")

    def _doing(self, name: str) -> str:
        if not name.startswith("imageloader-worker-"):
            return ""
        w = int(name.rsplit("-", 1)[1])
        member = bytes(self.channels.members[w].value).decode("utf-8", "replace")
        return f" while decoding member {member!r}" if member else ""

    def _hang_message(self) -> str:
        doing = [f"worker {w}: {bytes(m.value).decode('utf-8', 'replace')!r}"
                 for w, m in enumerate(self.channels.members) if m.value]
        return (f"no batch arrived for {self.timeout:.0f} s (timeout); last members being "
                f"decoded: {'; '.join(doing) or 'none'}")

    @property
    def epoch_stats(self) -> tuple[Counter, int]:
        """Skip counts and bytes read of the running epoch, or of the last one finished."""
        state = self._epoch or self._finished
        return (state.skipped, state.bytes) if state else (Counter(), 0)

    @property
    def epoch_fetched(self) -> Counter:
        """What the readers fetched from remote archives in that epoch (remote.counters)."""
        state = self._epoch or self._finished
        return state.fetched if state else Counter()


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _remote(who: str, error: BaseException | None, text: str, member: str | None):
    where = f" while decoding member {member!r}" if member else ""
    if isinstance(error, (ArchiveError, KeyError, ValueError)) and error is not None:
        error.__cause__ = WorkerError(f"in {who}{where}:\n{text}")
        return error
    return WorkerError(f"{who} failed{where}:\n{text}")


@contextlib.contextmanager
def _without_main_module():
    # multiprocessing's spawn re-imports the parent's __main__ script in every child, which for
    # a training script means importing torch 16 times (seconds and ~300 MB each). Our children
    # need nothing from __main__: everything they run lives in this module. Hiding __main__
    # while the children start makes them import only what their arguments need.
    main = sys.modules.get("__main__")
    stub = types.ModuleType("__main__")
    sys.modules["__main__"] = stub
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main
