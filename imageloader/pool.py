"""A fixed pool of batch buffers in host memory, page-locked once, with explicit owner counts.

Each buffer holds one batch: uint8 images (B, H, W, C) and int64 labels (B,). Pinning happens once
per buffer (never per batch: `pin_memory()` of a 38 MB batch costs ~5 ms of a core). With
`shared=True` the buffers live in POSIX shared memory so decode workers write pixels in place;
CUDA then page-locks that memory with cudaHostRegister, so the copy to the GPU reads it directly.
That page-locking may wait (`pin_later`) until `pin()`: the loader starts its worker processes
first, which need only the segments' names, and page-locks while they start (~0.6 s for the 16
buffers of GPU decoding on an H200 host, on the way to the first batch).

Reuse is decided by counts, not by the garbage collector: a buffer returns to the free list only
when its owner count is zero AND the CUDA event recorded after its host->device copy has
completed. `lease()` polls those events without blocking; only when every buffer is taken does it
wait on the oldest copy, which is the back-pressure that bounds host memory.
"""
from __future__ import annotations

import collections
import logging
import os
import shutil
import threading
from dataclasses import dataclass, field
from multiprocessing import shared_memory

import numpy as np
import torch

from .batch import BatchViews, Layout, batch_layout, views_of

log = logging.getLogger(__name__)

SHARED_MEMORY_FOLDER = "/dev/shm"  # where Linux keeps POSIX shared memory (a tmpfs)
# A container's memory limit: cgroup v2's ("max" or bytes), v1's (bytes, huge when unlimited).
CGROUP_MEMORY_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def host_memory() -> int:
    """Bytes of memory this process may use: the host's, or its container's limit if lower."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in CGROUP_MEMORY_LIMITS:
        try:
            with open(path) as f:
                memory = min(memory, int(f.read()))
        except (OSError, ValueError):  # no such cgroup here, or no limit ("max")
            pass
    return memory


def memory_for_buffers(shared_free: int | None) -> int:
    """Bytes a pool's buffers may come from: the host's memory and, for buffers in shared
    memory, no more than `shared_free`, what its folder has free (None: not shared)."""
    memory = host_memory()
    return min(memory, shared_free) if shared_free is not None else memory


def shared_memory_now() -> int | None:
    """Bytes free in SHARED_MEMORY_FOLDER now; None where there is no such folder."""
    return shared_memory_free(SHARED_MEMORY_FOLDER)


def shared_memory_free(folder: str) -> int | None:
    """Bytes free in the shared memory folder; None where there is no such folder."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def check_shared_memory(need: int, folder: str | None = None) -> None:
    """Refuse, saying what to change, to start with less shared memory free than `need` bytes.
    A tmpfs hands out its pages when they are first written, not when a segment is made: an
    over-full /dev/shm (Docker's default is 64 MB) would show only later, as a SIGBUS in the
    worker or the page-locking parent that touches the page, with no traceback. Checked at a
    loader's start against what is free then; where there is no such folder, nothing is."""
    folder = folder or SHARED_MEMORY_FOLDER
    free = shared_memory_free(folder)
    if free is not None and need > free:
        raise MemoryError(
            f"imageloader needs {need / 1e9:.2f} GB of shared memory (batch buffers and the "
            f"workers' byte rings) and {folder} has {free / 1e9:.2f} GB free: use fewer "
            f"workers or a smaller batch_size or prefetch, or give {folder} more room "
            f"(Docker: --shm-size)")


@dataclass(eq=False)
class HostBatch:
    """One slot of the pool. `count` rows are valid; the tensors are views of pool memory."""

    slot: int
    images: torch.Tensor            # (B, H, W, C) uint8
    labels: torch.Tensor            # (B,) int64
    arrays: BatchViews              # numpy views of every field (images, labels, arena, ...)
    count: int = 0
    refs: int = 0
    copied: object = None           # torch.cuda.Event recorded after the copy that reads us
    meta: dict = field(default_factory=dict)

    def views(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Valid rows as NCHW (channels_last memory) uint8 images and int64 labels."""
        return self.images[: self.count].permute(0, 3, 1, 2), self.labels[: self.count]


class BufferPool:
    """`slots` batch buffers. `lease()` -> HostBatch with refs=1; `release(b, after=event)`."""

    def __init__(self, slots: int, batch_size: int, image_shape: tuple[int, int, int], *,
                 pin_device: torch.device | None = None, shared: bool = False,
                 arena_bytes: int = 0, pin_later: bool = False):
        if slots < 1:
            raise ValueError("a buffer pool needs at least one slot")
        self.batch_size, self.image_shape = batch_size, tuple(image_shape)
        self.pin_device = pin_device
        self.layout: Layout = batch_layout(batch_size, self.image_shape, arena_bytes)
        self._nbytes = self.layout.nbytes
        self._segments: list[shared_memory.SharedMemory] = []
        self._registered: list[int] = []
        self._unpinned: list[torch.Tensor] = []  # shared buffers waiting for pin()
        self._lock = threading.Lock()
        self.buffers = [self._make(slot, shared) for slot in range(slots)]
        if not pin_later:
            self.pin()
        self._free = collections.deque(self.buffers)
        self._pending: collections.deque[HostBatch] = collections.deque()
        self.closed = False

    # ---- allocation (once) -----------------------------------------------------------------

    def _make(self, slot: int, shared: bool) -> HostBatch:
        if shared:
            segment = shared_memory.SharedMemory(create=True, size=self._nbytes)
            self._segments.append(segment)
            # Through numpy, not torch.frombuffer: a numpy view holds a buffer export on the
            # mapping, so closing the segment is refused while any view of it lives (a caller's
            # batch, a test's). torch.frombuffer holds none: close() then unmapped memory
            # that tensors still pointed to (garbage reads, or a segfault).
            raw = torch.from_numpy(np.frombuffer(segment.buf, dtype=np.uint8,
                                                 count=self._nbytes))
            if self.pin_device is not None:
                self._unpinned.append(raw)
        else:
            # Zeroed, as shared memory comes from the OS: a buffer's fields (the CPU share the
            # packers read, lengths, counts) must not start as a previous allocation's bytes.
            raw = torch.zeros(self._nbytes, dtype=torch.uint8,
                              pin_memory=self.pin_device is not None)
        arrays = views_of(raw.numpy(), self.layout)
        labels = torch.from_numpy(arrays.labels)
        images = torch.from_numpy(arrays.images)
        return HostBatch(slot, images, labels, arrays)

    def pin(self) -> None:
        """Page-lock the shared buffers not yet locked (all of them, with pin_later, until
        this is called; a lease calls it too, so no batch is ever copied from unlocked
        memory)."""
        while self._unpinned:
            self._register(self._unpinned.pop())

    def _register(self, raw: torch.Tensor) -> None:
        # Page-lock memory we did not allocate through CUDA (shared with workers), once.
        with torch.cuda.device(self.pin_device):
            code = torch.cuda.cudart().cudaHostRegister(raw.data_ptr(), raw.numel(), 0)
        if int(getattr(code, "value", code)) != 0:
            raise RuntimeError(f"cudaHostRegister of a {raw.numel()} byte batch buffer failed "
                               f"(CUDA error {int(getattr(code, 'value', code))})")
        self._registered.append(raw.data_ptr())

    @property
    def shm_names(self) -> list[str]:
        return [s.name for s in self._segments]

    @property
    def nbytes(self) -> int:
        return self._nbytes * len(self.buffers)

    # ---- owner counts ----------------------------------------------------------------------

    def lease(self, block: bool = True) -> HostBatch | None:
        """A free buffer with refs=1, or None if `block` is False and none is free."""
        with self._lock:
            self.pin()  # a no-op once the loader has pinned (it does before any lease)
            self._reap(wait=False)
            if not self._free and block:
                self._reap(wait=True)
            if not self._free:
                return None
            buf = self._free.popleft()
            buf.refs, buf.count, buf.copied = 1, 0, None
            buf.meta = {}
            return buf

    def retain(self, buf: HostBatch) -> HostBatch:
        with self._lock:
            if buf.refs <= 0:
                raise RuntimeError(f"buffer {buf.slot} retained after it was released")
            buf.refs += 1
            return buf

    def release(self, buf: HostBatch, after=None) -> None:
        """Drop one owner. `after`: a CUDA event that must complete before the memory is reused."""
        with self._lock:
            if buf.refs <= 0:
                raise RuntimeError(f"buffer {buf.slot} released more times than leased")
            if after is not None:
                buf.copied = after  # the latest copy that reads this buffer
            buf.refs -= 1
            if buf.refs == 0:
                self._pending.append(buf)
                self._reap(wait=False)

    def _reap(self, wait: bool) -> None:
        # Return released buffers whose copies have finished. event.query() never blocks; with
        # wait=True we block on the OLDEST copy only: the one host sync point of the pool.
        while self._pending:
            buf = self._pending[0]
            if buf.copied is not None and not buf.copied.query():
                if not wait:
                    return
                buf.copied.synchronize()
            self._pending.popleft()
            buf.copied = None
            self._free.append(buf)
            wait = False

    @property
    def free(self) -> int:
        with self._lock:
            self._reap(wait=False)
            return len(self._free)

    def in_use(self) -> int:
        return sum(1 for b in self.buffers if b.refs > 0)

    def reset(self) -> None:
        """Forget owners (an abandoned epoch); buffers whose copies are in flight still wait."""
        with self._lock:
            for buf in self.buffers:
                if buf.refs > 0:
                    buf.refs = 0
                    self._pending.append(buf)
            self._reap(wait=False)

    # ---- teardown --------------------------------------------------------------------------

    def close(self) -> None:
        """Unregister and free the memory. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        for buf in self.buffers:
            if buf.copied is not None:
                buf.copied.synchronize()  # never free memory a copy may still read
        if self._registered:
            with torch.cuda.device(self.pin_device):
                for ptr in self._registered:
                    torch.cuda.cudart().cudaHostUnregister(ptr)
            self._registered.clear()
        self._unpinned.clear()  # views of the segments: they would keep them mapped
        self.buffers.clear()
        self._free.clear()
        self._pending.clear()
        for segment in self._segments:
            _close_segment(segment)
        self._segments.clear()


# Segments closed while a view of them still lived: unlinked (gone from /dev/shm) but still
# mapped. Each later close tries them again; the mapping goes once their last view has.
_lingering: list[shared_memory.SharedMemory] = []


def _close_segment(segment: shared_memory.SharedMemory) -> None:
    try:
        segment.unlink()
    except FileNotFoundError:
        pass
    # A caller may still hold a view of this batch: then close() is refused and the mapping
    # (with this object, whose own finalizer would try again and complain) waits for a later
    # close, where every waiting one is tried again.
    _lingering.append(segment)
    for waiting in list(_lingering):
        try:
            waiting.close()
        except BufferError:
            continue
        _lingering.remove(waiting)
    if segment in _lingering:
        log.debug("shared batch buffer %s still referenced at close", segment.name)
