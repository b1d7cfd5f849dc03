"""The runtime: one owner of a started loader's processes and shared memory, ended once, also
when the loader is dropped without close()."""
from __future__ import annotations

import gc
import os
import threading
import time
import warnings

import pytest
import torch

from conftest import ids, numbered_files, write_archive
from imageloader import ImageLoader, Options


def own_children() -> set[int]:
    """Live child processes of this process (the resource tracker included)."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] not in ("Z", "X"):
            found.add(int(entry))
    return found


def segments_of(loader) -> list[str]:
    """The loader's own /dev/shm segments: batch buffers and the workers' byte rings."""
    rings = getattr(loader._workers, "_rings", None) or []
    return list(loader._pool.shm_names) + [ring.name for ring in rings]


def still_there(names) -> list[str]:
    return [n for n in names if os.path.exists(f"/dev/shm/{n.lstrip('/')}")]


def settle(condition, seconds: float = 5.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("device", DEVICES)
def test_dropping_a_started_loader_frees_its_processes_and_memory(tmp_path, device):
    """Create, iterate and drop (no close) three times: once, processes went 5 -> 8 -> 11 and
    segments 8 -> 16 -> 24: the finalizer's callback reached the worker pool, which held a
    bound method of the loader, so the loader was never collected. On CUDA the buffers are
    page-locked and a prefetch thread copies them: those end with the loader too."""
    path = write_archive(tmp_path / "a.tgz", numbered_files(16))

    def start():
        loader = ImageLoader(path, batch_size=2, size=8, mode="L", device=device,
                             normalize=False, workers=2)
        images, _ = next(iter(loader))
        assert images.device.type == device
        return loader
    start().close()  # the first shared memory starts multiprocessing's resource tracker
    before, threads = own_children(), set(threading.enumerate())
    segments: list[str] = []
    for _ in range(3):
        loader = start()
        assert len(own_children() - before) == 3  # a reader and two decoders
        segments += segments_of(loader)
        del loader
        gc.collect()
        assert settle(lambda: own_children() == before), \
            f"children left: {sorted(own_children() - before)}"
        assert still_there(segments) == []
        assert settle(lambda: set(threading.enumerate()) <= threads), \
            f"threads left: {set(threading.enumerate()) - threads}"


@pytest.mark.timeout(60)
def test_a_loader_dropped_while_its_iterator_is_held(tmp_path):
    """The iterator holds the runtime, not the loader: dropping the loader ends the epoch
    (quietly: the iterator then stops) and frees everything; nothing is read from freed
    memory."""
    path = write_archive(tmp_path / "a.tgz", numbered_files(16))
    loader = ImageLoader(path, batch_size=2, size=8, mode="L", device="cpu", normalize=False,
                         workers=2, options=Options(lookahead=False))
    it = iter(loader)
    images, _ = next(it)
    assert ids(images) and len(images) == 2
    segments = segments_of(loader)
    del loader
    gc.collect()
    assert next(it, None) is None
    assert settle(lambda: not still_there(segments))


def test_close_is_once_and_a_closed_loader_starts_again(tmp_path):
    path = write_archive(tmp_path / "a.tgz", numbered_files(8))
    loader = ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu", normalize=False,
                         workers=1)
    it = iter(loader)
    next(it)
    runtime, segments = loader._runtime, segments_of(loader)
    loader.close()
    loader.close()
    assert runtime.closed and still_there(segments) == []
    assert next(it, None) is None  # ended by close(): it stops, it does not raise
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sorted(sum((ids(x) for x, _ in loader), [])) == list(range(8))  # a new runtime
    assert loader._runtime is not runtime
    loader.close()


def test_in_process_producer_resumes_from_its_mark(tmp_path):
    """workers=0 behind the same interface: each buffer carries its mark; a mark resumes."""
    from imageloader.runtime import LocalProducer
    path = write_archive(tmp_path / "a.tgz", numbered_files(10, bad={1}))
    with ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu", normalize=False,
                     workers=0, train=False) as loader:
        pool = loader._make_pool(loader._arena_bytes())
        plan = loader.plan
        producer = LocalProducer(plan.read_plan(), loader._fill, pool, plan.order,
                                 on_error="skip")
        marks, counts = [], []
        for buf in producer.batches(0):
            marks.append(buf.meta["mark"])
            counts.append(buf.meta["counts"])
            pool.release(buf)
        assert marks == [{"next": [1], "consumed": [5], "tail": 0},
                         {"next": [2], "consumed": [9], "tail": 0},
                         {"next": [3], "consumed": [10], "tail": 0}]
        assert counts == [{"undecodable": 1}, {}, {}]
        rest = []
        for buf in producer.batches(0, marks[0]):
            rest.append(ids(buf.views()[0]))
            pool.release(buf)
        assert rest == [[5, 6, 7, 8], [9]]
        pool.close()
