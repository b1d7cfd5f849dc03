"""The buffer pool: owner counts, copy events, shared memory lifetime."""
from __future__ import annotations

import os

import pytest
import torch

from imageloader import pool as pool_module
from imageloader.pool import BufferPool, check_shared_memory


class FakeEvent:
    """Stands in for a CUDA event: completes when the test says so."""

    def __init__(self):
        self.done = False
        self.waited = 0

    def query(self):
        return self.done

    def synchronize(self):
        self.waited += 1
        self.done = True


def test_lease_release_and_owner_counts():
    pool = BufferPool(2, 4, (8, 8, 3))
    a = pool.lease()
    assert a.refs == 1 and pool.free == 1
    pool.retain(a)
    pool.release(a)
    assert pool.free == 1  # still one owner
    pool.release(a)
    assert pool.free == 2
    with pytest.raises(RuntimeError, match="released more times"):
        pool.release(a)


def test_buffer_waits_for_its_copy_event_before_reuse():
    pool = BufferPool(2, 4, (8, 8, 3))
    a, b = pool.lease(), pool.lease()
    copy_a, copy_b = FakeEvent(), FakeEvent()
    pool.release(a, after=copy_a)
    pool.release(b, after=copy_b)
    assert pool.lease(block=False) is None  # both copies still in flight
    copy_b.done = True
    # FIFO: the oldest release comes back first, so b waits behind a.
    assert pool.lease(block=False) is None
    got = pool.lease()  # blocks on the oldest copy only
    assert got is a and copy_a.waited == 1 and copy_b.waited == 0


def test_views_are_nchw_with_channels_last_memory():
    pool = BufferPool(1, 4, (5, 6, 3))
    buf = pool.lease()
    buf.count = 3
    images, labels = buf.views()
    assert images.shape == (3, 3, 5, 6) and labels.shape == (3,)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert images.dtype == torch.uint8 and labels.dtype == torch.int64


def test_shared_segments_are_unlinked_on_close():
    pool = BufferPool(3, 2, (4, 4, 3), shared=True)
    names = pool.shm_names
    assert len(names) == 3 and all(os.path.exists(f"/dev/shm/{n}") for n in names)
    buf = pool.lease()
    buf.images.fill_(9)
    del buf
    pool.close()
    assert not any(os.path.exists(f"/dev/shm/{n}") for n in names)
    pool.close()  # twice is fine


def test_reset_forgets_owners_of_an_abandoned_epoch():
    pool = BufferPool(3, 2, (4, 4, 3))
    held = [pool.lease() for _ in range(3)]
    assert pool.in_use() == 3 and held
    pool.reset()
    assert pool.in_use() == 0 and pool.free == 3


def test_new_buffers_start_zeroed_whatever_the_memory_held_before():
    """The packers read a buffer's CPU share before anything writes it (only the loader stamps
    it): a pool made where a freed one was must not inherit its bytes (a test of the GPU stage
    failed now and then on a share of 0.75 that nobody had set)."""
    import gc
    for _ in range(10):
        pool = BufferPool(2, 2, (4, 4, 3))
        for buf in pool.buffers:
            assert buf.arrays.cpu_share[0] == 0 and not buf.arrays.lengths.any()
            assert not buf.images.any()
            buf.arrays.cpu_share[0], buf.arrays.lengths[:], buf.images[...] = 0.75, 7, 255
        pool.close()
        del pool, buf
        gc.collect()


def test_a_view_kept_past_close_stays_readable():
    """A caller holding a view of a shared buffer when the pool closes keeps valid memory: the
    segment is unlinked, its mapping goes with the last view (it was unmapped under the view:
    a segfault). In a child process, so that a regression fails this test, not the run."""
    import subprocess
    import sys
    code = ("from imageloader.pool import BufferPool\n"
            "pool = BufferPool(1, 2, (4, 4, 3), shared=True)\n"
            "buf = pool.lease(); buf.images[...] = 7; name = pool.shm_names[0]\n"
            "pool.close(); del pool\n"
            "import gc, os; gc.collect()\n"
            "print(int(buf.images.sum()), os.path.exists('/dev/shm/' + name))\n")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": repo})
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.split() == [str(7 * 2 * 4 * 4 * 3), "False"]  # read; unlinked


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_shared_buffers_are_page_locked_by_pin_or_else_by_the_first_lease():
    """pin_later: the loader starts its workers before page-locking (they need only the
    segments' names); no buffer is leased unlocked, even if pin() was forgotten."""
    device = torch.device("cuda", torch.cuda.current_device())
    now = BufferPool(2, 4, (8, 8, 3), pin_device=device, shared=True)
    assert all(buf.images.is_pinned() for buf in now.buffers)
    for call in ("pin", "lease"):
        pool = BufferPool(3, 4, (8, 8, 3), pin_device=device, shared=True, pin_later=True)
        assert not any(buf.images.is_pinned() for buf in pool.buffers)
        pool.pin() if call == "pin" else pool.release(pool.lease())
        assert all(buf.images.is_pinned() and buf.labels.is_pinned() for buf in pool.buffers)
        pool.close()
    now.close()


def test_too_little_shared_memory_is_refused_naming_the_need_and_the_remedy(monkeypatch,
                                                                           tmp_path):
    monkeypatch.setattr(pool_module, "shared_memory_free", lambda folder: 10**9)
    check_shared_memory(10**9)  # exactly what is free: fine
    with pytest.raises(MemoryError, match=r"needs 1\.50 GB .* /dev/shm has 1\.00 GB free"
                                          r".*--shm-size"):
        check_shared_memory(1_500_000_000)
    monkeypatch.undo()
    check_shared_memory(10**18, str(tmp_path / "none"))  # no such folder: nothing to check


def test_host_memory_is_the_containers_limit_where_lower(monkeypatch, tmp_path):
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit, older = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    monkeypatch.setattr(pool_module, "CGROUP_MEMORY_LIMITS", (str(limit), str(older)))
    assert pool_module.host_memory() == physical  # no such files: the host's
    limit.write_text("max\n")  # a cgroup (v2) without a limit
    older.write_text("9223372036854771712\n")  # v1's "unlimited"
    assert pool_module.host_memory() == physical
    older.write_text(f"{2 << 30}\n")
    assert pool_module.host_memory() == min(physical, 2 << 30)
    limit.write_text(f"{1 << 30}\n")
    assert pool_module.host_memory() == min(physical, 1 << 30)
    assert pool_module.memory_for_buffers(1 << 20) == min(physical, 1 << 20)  # /dev/shm's free
    assert pool_module.memory_for_buffers(None) == min(physical, 1 << 30)  # not shared
