"""Bad input, faults and shutdown (the policy of the issue "Bad input, faults and shutdown").

- every member of an archive is either yielded as a sample or counted under a named reason in
  `loader.stats.skipped`;
- every archive-level problem is an `ArchiveError` naming the archive and, where it has one,
  the member and the offset;
- exceptions raised in a worker reach the training loop with the worker's traceback and the
  member being decoded;
- a SIGKILLed or hung process gives a clear `WorkerError` within `Options(timeout=...)` plus a
  few seconds, never a hang;
- `break`, `del` of the iterator, an exception in the loop body and Ctrl-C end every process and
  thread within 5 s; shared memory is released by `close()`; nothing "leaked" is reported.

This module deliberately does not import torch at the top: the decoder class and the transform
below are pickled by reference into spawned worker processes, which then import this module
(tests/ is on their sys.path because spawn copies the parent's). Importing torch there would cost
seconds of start-up inside the `timeout` being tested.

Several tests use the loader's internals: `loader._workers._procs` (pids),
`loader._pool.shm_names` and `loader._workers._rings` (/dev/shm segments) and
`loader._pool.in_use()`.
"""
from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gzip
import io
import json
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import traceback
import warnings

import pytest
from PIL import Image

import imageloader
from conftest import (add_entry, assert_labels_match_pixels, class_level, encode, labeled_files,
                      photo, solid, write_archive)
from imageloader.decode import Decoder
from imageloader.errors import DECODE_SKIPS, READER_SKIPS, ArchiveError, Limits
from imageloader.read import available_inflaters
from imageloader.workers import WorkerError

HANG_MARK = b"<hang in the decoder>"   # appended after a JPEG's end: Pillow ignores it


def make_loader(path, **kw):
    options = kw.pop("options", None)
    if isinstance(options, dict):
        options = imageloader.Options(**options)
    kw.setdefault("size", 8)
    kw.setdefault("workers", 0)
    kw.setdefault("batch_size", 4)
    kw.setdefault("train", False)
    return imageloader.ImageLoader(path, normalize=False, device="cpu", options=options, **kw)


def run_epoch(loader):
    """Labels of one epoch, in order; the warning about skipped members is ignored."""
    labels = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for _images, y in loader:
            labels.extend(y.tolist())
    return labels


def tar_entries(path) -> int:
    with tarfile.open(path) as tar:
        return len(tar.getmembers())


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (an exited child nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pids, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while True:
        left = [pid for pid in pids if alive(pid)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def shm_names_of(loader) -> list[str]:
    """The loader's /dev/shm segments: batch buffers, and the workers' byte rings if any."""
    rings = getattr(loader._workers, "_rings", None) or []
    return list(loader._pool.shm_names) + [ring.name for ring in rings]


def shm_left(names) -> list[str]:
    return [n for n in names if os.path.exists(f"/dev/shm/{n.lstrip('/')}")]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class LoaderHang(Exception):
    """Raised in the test's own thread by `watchdog`: the loader neither yielded nor raised."""


@contextlib.contextmanager
def watchdog(seconds: float):
    """Turn a hang of the block into a quick LoaderHang instead of pytest-timeout's 60 s.

    The loader's wait loops run Python code every few hundred ms, so an exception set
    asynchronously in this thread is raised there and unwinds the loader's generators.
    """
    thread, lock, armed = threading.get_ident(), threading.Lock(), [True]

    def fire():
        with lock:
            if armed[0]:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread),
                                                           ctypes.py_object(LoaderHang))
    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            armed[0] = False
        timer.cancel()


# ============================================================================================
# Archive-level problems: table-driven


def _photos(n_per_class=8):
    # Textured PNGs compress poorly: gzip damage lands in the middle of the member stream.
    return [(f"t/c{k:02d}/p{i:02d}.png", photo(100 * k + i, size=(64, 48), fmt="PNG"))
            for k in range(2) for i in range(n_per_class)]


def _gz_blob(tmp_path, files=None) -> bytes:
    path = write_archive(tmp_path / "good.tgz", files or _photos())
    with open(path, "rb") as f:
        return f.read()


def _raw_tar(files) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def _member_offsets(raw: bytes) -> list[int]:
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        return [m.offset for m in tar.getmembers()]


def _flip(blob: bytes, position: int) -> bytes:
    data = bytearray(blob)
    data[position] ^= 0x01
    return bytes(data)


def build_empty_file(tmp_path):
    return b"", {}


def build_not_an_archive(tmp_path):
    return b"These are notes, not a tar archive.\n" * 200, {}


def build_gzip_of_text(tmp_path):
    return gzip.compress(b"plain text inside gzip\n" * 500, mtime=0), {}


def build_truncated_gzip(tmp_path):
    blob = _gz_blob(tmp_path)
    return blob[: len(blob) * 6 // 10], {"min_index": 1}


def build_truncated_tar(tmp_path):
    # An uncompressed .tar cut inside the data of member #3.
    raw = _raw_tar(labeled_files(2, 3, prefix="t"))
    offsets = _member_offsets(raw)
    return raw[: offsets[3] + 512 + 100], {"index": 3, "member": "t/c01/img000.jpg",
                                            "offset": offsets[3] + 512}


def build_corrupt_header_mid(tmp_path):
    # The header checksum of member #2 is garbage: tarfile alone would stop there silently.
    raw = bytearray(_raw_tar(labeled_files(2, 3, prefix="t")))
    offset = _member_offsets(bytes(raw))[2]
    raw[offset + 148: offset + 156] = b"garbage!"
    return gzip.compress(bytes(raw), mtime=0), {"index": 2, "offset": offset}


def build_zeroed_header_mid(tmp_path):
    # A zeroed header looks like the end-of-archive marker, with members after it.
    raw = bytearray(_raw_tar(labeled_files(2, 3, prefix="t")))
    offset = _member_offsets(bytes(raw))[2]
    raw[offset: offset + 512] = bytes(512)
    return gzip.compress(bytes(raw), mtime=0), {"offset": offset}


def build_concatenated(tmp_path):
    # Two archives glued together: the second one's members would be invisible.
    raw = _raw_tar(labeled_files(2, 2, prefix="a")) + _raw_tar(labeled_files(2, 2, prefix="b"))
    return gzip.compress(raw, mtime=0), {}


def build_crc_flip(tmp_path):
    blob = _gz_blob(tmp_path)
    return _flip(blob, len(blob) - 8), {}   # first byte of the CRC32 in the gzip trailer


ARCHIVE_CASES = {
    # name: (builder, regex the message must match)
    "empty_file": (build_empty_file, r"not a tar"),
    "not_an_archive": (build_not_an_archive, r"not a tar"),
    "gzip_of_text": (build_gzip_of_text, r"not a tar"),
    "truncated_gzip": (build_truncated_gzip, r"(?i)truncated|unexpected end"),
    "truncated_tar": (build_truncated_tar, r"unexpected end of data"),
    "corrupt_header_mid": (build_corrupt_header_mid, r"corrupt tar header"),
    "zeroed_header_mid": (build_zeroed_header_mid, r"after the end-of-archive marker"),
    "concatenated": (build_concatenated, r"after the end-of-archive marker"),
    "crc_flip": (build_crc_flip, r"checksum"),
}
# Starting processes is the expensive part: with workers=2 (the error crosses from the reader
# process) the brief's cases run; all of them run with workers=0.
WORKER_CASES = ("not_an_archive", "truncated_gzip", "truncated_tar", "corrupt_header_mid",
                "crc_flip")


def check_archive_error(error: ArchiveError, path: str, where: dict) -> None:
    assert error.archive == path and repr(path) in str(error)
    if "index" in where:
        assert error.index == where["index"], str(error)
    if "min_index" in where:
        assert error.index is not None and error.index >= where["min_index"], str(error)
    if "member" in where:
        assert error.member == where["member"] and repr(where["member"]) in str(error)
    if "offset" in where:
        assert error.offset == where["offset"], str(error)
        assert f"byte offset {where['offset']}" in str(error)


def _archive_params():
    for case in ARCHIVE_CASES:
        for workers in (0, 2):
            if workers == 0 or case in WORKER_CASES:
                yield pytest.param(case, workers, id=f"{case}-{workers}")


@pytest.mark.parametrize("case,workers", list(_archive_params()))
def test_bad_archive_raises_archive_error(tmp_path, case, workers):
    builder, pattern = ARCHIVE_CASES[case]
    data, where = builder(tmp_path)
    path = str(tmp_path / f"{case}.tgz")
    with open(path, "wb") as f:
        f.write(data)
    with make_loader(path, vocab=["c00", "c01"], workers=workers) as loader:
        with pytest.raises(ArchiveError, match=pattern) as info:
            run_epoch(loader)
    check_archive_error(info.value, path, where)


def test_header_scan_locates_a_truncated_member(tmp_path):
    """The header-only scan (vocabulary, sizes) must locate a cut as precisely as reading.

    Regression (fixed in 4b97dad): with read_data=False tarfile skipped the member data itself
    and its ReadError('unexpected end of data') surfaced without the byte offset."""
    data, where = build_truncated_tar(tmp_path)
    path = str(tmp_path / "truncated.tar")
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(ArchiveError, match="unexpected end of data") as info:
        make_loader(path)   # no vocabulary given: the archive's headers are scanned for it
    check_archive_error(info.value, path, where)


def test_failed_start_leaves_nothing_behind(tmp_path):
    """Regression (fixed in 4b97dad): ImageLoader._ensure_started created the shared-memory
    pool, then raised from the start-up header scan before registering its finalizer: the
    segments leaked and later epochs silently ran in-process as if workers=0."""
    data, _ = build_truncated_tar(tmp_path)
    path = str(tmp_path / "truncated.tar")
    with open(path, "wb") as f:
        f.write(data)
    loader = make_loader(path, vocab=["c00", "c01"], workers=2)
    with pytest.raises(ArchiveError):
        run_epoch(loader)
    names = shm_names_of(loader) if loader._pool is not None else []
    half_started = loader._pool is not None and loader._workers is None
    loader.close()
    left = shm_left(names)
    if loader._pool is not None:
        loader._pool.close()   # clean up after the bug, not a part of the check
    assert left == []
    assert not half_started, "a pool without its workers: the next epoch runs in-process"


# Gzip-level damage through each installed inflater (workers=0: nothing process-related here).
def _cut_small(tmp_path):
    blob = _gz_blob(tmp_path, labeled_files(2, 3, prefix="t"))   # ~600 bytes, one deflate block
    return blob[: len(blob) // 2], r"(?i)truncated|unexpected end", {}


def _cut_mid(tmp_path):
    blob = _gz_blob(tmp_path)
    return blob[: len(blob) * 6 // 10], r"(?i)truncated|unexpected end", {"min_index": 1}


def _cut_trailer(tmp_path):
    blob = _gz_blob(tmp_path)
    return blob[:-4], r"(?i)truncated|unexpected end", {}   # ISIZE of the trailer missing


def _crc(tmp_path):
    blob = _gz_blob(tmp_path)
    return _flip(blob, len(blob) - 8), r"checksum", {}


def _isize(tmp_path):
    blob = _gz_blob(tmp_path)
    return _flip(blob, len(blob) - 3), r"(?i)length|size", {}   # ISIZE: uncompressed length


GZIP_DAMAGE = {"cut_small": _cut_small, "cut_mid": _cut_mid, "cut_trailer": _cut_trailer,
               "crc_flip": _crc, "isize_flip": _isize}
# Fixed in 4b97dad: rapidgzip-cut_small ("not a tar ... (empty file)"), rapidgzip-cut_trailer
# (a bare "RuntimeError: std::exception") and isal-cut_mid (igzip_threaded raised on the first
# read: "member #0" for a cut in the middle).
# rapidgzip verifies the trailer's ISIZE (length mod 2**32) from 0.16.2: 0.16.1 reads an archive
# with a corrupt trailer length as valid and 0.16.0 aborts the process on a truncated one, hence
# the requirement rapidgzip>=0.16.2 (CI's lowest-versions lane runs these at that version).
INFLATER_BUGS: dict = {}


def _inflater_params():
    for inflater in ("rapidgzip", "isal", "gzip"):
        for case in GZIP_DAMAGE:
            marks = []
            if inflater not in available_inflaters():
                marks.append(pytest.mark.skip(reason=f"{inflater} is not installed"))
            elif (inflater, case) in INFLATER_BUGS:
                marks.append(pytest.mark.xfail(strict=True,
                                               reason=INFLATER_BUGS[inflater, case]))
            yield pytest.param(inflater, case, marks=marks, id=f"{inflater}-{case}")


@pytest.mark.parametrize("inflater,case", list(_inflater_params()))
def test_gzip_damage_per_inflater(tmp_path, inflater, case):
    data, pattern, where = GZIP_DAMAGE[case](tmp_path)
    path = str(tmp_path / f"{case}.tgz")
    with open(path, "wb") as f:
        f.write(data)
    with make_loader(path, vocab=["c00", "c01"], options={"inflate": inflater}) as loader:
        with pytest.raises(ArchiveError, match=pattern) as info:
            run_epoch(loader)
    check_archive_error(info.value, path, where)


# ============================================================================================
# Member-level problems: every member is a sample or a counted skip


def _bad_members(tar):
    add_entry(tar, "t/c00", tarfile.DIRTYPE)
    add_entry(tar, "t/c01/link.jpg", tarfile.SYMTYPE, linkname="../c00/img000.jpg")
    add_entry(tar, "t/c01/hard.jpg", tarfile.LNKTYPE, linkname="t/c00/img000.jpg")
    add_entry(tar, "t/c01/fifo.jpg", tarfile.FIFOTYPE)


def mixed_archive(tmp_path):
    good = labeled_files(2, 3, prefix="t")                  # 6 good JPEGs, classes c00 and c01
    bomb = encode(Image.new("L", (1200, 1000), class_level(0)))   # 1.2 Mpixel, ~15 kB
    bad = [
        ("t/c00/zero.jpg", b""),                                    # empty
        ("t/c00/truncated.jpg", solid(class_level(0))[:200]),       # truncated
        ("t/c01/garbage.jpg", b"\x00garbage" * 40),                 # undecodable
        ("t/c01/bomb.jpg", bomb),                                   # too_many_pixels
        ("t/c00/huge.jpg", solid(class_level(0)) + bytes(30_000)),  # too_large
        ("t/c01/image.png", solid(class_level(1), fmt="PNG")),      # format_not_allowed
        ("t/c00/image.bmp", solid(class_level(0), fmt="BMP")),      # format_not_allowed
        ("t/c00/notes.txt", b"hello"),                              # not_image
        ("t/c00/._img000.jpg", b"\x00\x05\x16\x07"),                # macos_metadata
        ("t/__MACOSX/c00/img.jpg", solid(class_level(0))),          # macos_metadata
        ("top.jpg", solid(class_level(0))),                         # no_class_folder
        ("t/c00/bad\x01name.jpg", solid(class_level(0))),           # bad_name
        ("t/../c00/up.jpg", solid(class_level(0))),                 # bad_name
        ("t/c00/img000.jpg", solid(class_level(1))),                # duplicate (first wins)
    ]
    path = write_archive(tmp_path / "mixed.tgz", good + bad, extra=_bad_members)
    expected = {"empty": 1, "truncated": 1, "undecodable": 1, "too_many_pixels": 1,
                "too_large": 1, "format_not_allowed": 2, "not_image": 1, "macos_metadata": 2,
                "no_class_folder": 1, "bad_name": 2, "duplicate": 1, "directory": 1, "link": 2,
                "special": 1}
    return path, expected


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_images_are_counted_by_reason(tmp_path, workers):
    import torch
    path, expected = mixed_archive(tmp_path)
    options = {"limits": imageloader.Limits(max_pixels=1_000_000, max_member_bytes=20_000),
               "formats": ("JPEG",)}
    with make_loader(path, batch_size=4, workers=workers, options=options) as loader:
        assert list(loader.vocab) == ["c00", "c01"]
        for _epoch in range(2):
            warned = sum(expected.values()) - expected["directory"]  # folders: counted only
            with pytest.warns(UserWarning, match=f"skipped {warned} members"):
                images, labels = [], []
                for x, y in loader:
                    images.append(x)
                    labels.extend(y.tolist())
            assert sorted(labels) == [0, 0, 0, 1, 1, 1]
            # pixels match labels: the duplicate (class 1 pixels in c00) never replaced the first
            assert_labels_match_pixels(torch.cat(images), torch.tensor(labels))
            assert dict(loader.stats.skipped) == expected
            assert set(expected) <= set(READER_SKIPS) | set(DECODE_SKIPS)
            assert len(labels) + sum(loader.stats.skipped.values()) == tar_entries(path)


def test_archive_without_images(tmp_path):
    """No image at all: scanning for a vocabulary says so; with a vocabulary the epoch is empty."""
    def entries(tar):
        add_entry(tar, "t/c00", tarfile.DIRTYPE)
    path = write_archive(tmp_path / "none.tgz", [("t/c00/readme.txt", b"hi"),
                                                 ("t/c00/._a.jpg", b"x"), ("t/c00/e.jpg", b"")],
                         extra=entries)
    with pytest.raises(ValueError, match=r"no images found in .*none\.tgz"):
        make_loader(path)
    expected = {"not_image": 1, "macos_metadata": 1, "empty": 1, "directory": 1}
    for workers in (0, 2):
        with make_loader(path, vocab=["c00"], workers=workers) as loader:
            for _epoch in range(2):
                assert run_epoch(loader) == []
                assert loader.stats.batches == 0 and loader.stats.samples == 0
                assert dict(loader.stats.skipped) == expected
    empty_tar = write_archive(tmp_path / "empty.tgz", [])
    with pytest.raises(ValueError, match="no images"):
        make_loader(empty_tar)
    with make_loader(empty_tar, vocab=["c00"]) as loader:
        assert run_epoch(loader) == [] and not loader.stats.skipped


# ============================================================================================
# Exceptions, deaths and hangs in worker processes


class HangOnMark(Decoder):
    """Decodes like the stock decoder; but once the file `trigger` exists, it never returns
    for an image that ends in HANG_MARK. A first epoch without the trigger warms everything
    up (process start, imports), so that a short `timeout` measures only the hang."""

    trigger: str = ""

    def __call__(self, data, out, seed):
        if data.endswith(HANG_MARK) and os.path.exists(self.trigger):
            time.sleep(3600)
        return super().__call__(data, out, seed)


def install_hanging_decoder(loader, trigger) -> None:
    decoder = HangOnMark(loader.decoder.augment, limits=loader.decoder.limits)
    decoder.trigger = str(trigger)
    # The loader has no public hook for a decoder; it hands `_fill` (the CPU decoder itself when
    # decoding on the CPU) to the workers at the first iteration.
    old = loader.decoder
    loader.decoder = decoder
    if getattr(loader, "_fill", None) is old:
        loader._fill = decoder


def raise_on_class_1(chw):
    """A transform (as torchvision v2 would be) that fails on images of class 1 only."""
    import torch
    level = int(chw.float().mean().round())
    if abs(level - class_level(1)) <= 6:
        raise ValueError(f"transform refuses gray level {level}")
    return torch.full((chw.shape[0], 8, 8), level, dtype=torch.uint8)


def _formatted(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


@pytest.mark.parametrize("workers", [0, 1])
def test_exception_in_transform_names_member_with_worker_traceback(tmp_path, workers):
    """Regression for workers=0 (fixed in 4b97dad): the member was not named at all."""
    files = labeled_files(1, 3, prefix="t") + [("t/c01/culprit.jpg", solid(class_level(1)))]
    path = write_archive(tmp_path / "a.tgz", files)
    with make_loader(path, workers=workers, transform=raise_on_class_1) as loader:
        with pytest.raises(ValueError, match="transform refuses gray level") as info:
            run_epoch(loader)
        text = _formatted(info.value)
        assert "t/c01/culprit.jpg" in text, text
        assert "raise_on_class_1" in text and "Traceback" in text, text
        if workers:
            assert isinstance(info.value.__cause__, WorkerError)
            assert "worker 0" in str(info.value.__cause__)


def worker_error_within(seconds: float, it) -> str:
    """Iterate until the loader raises WorkerError, within `seconds`; return its message."""
    with pytest.raises(WorkerError) as info, watchdog(seconds):
        for _ in it:
            pass
    return str(info.value)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("victim", ["imageloader-worker-0", "imageloader-reader-0"])
def test_killed_process_gives_worker_error_in_bounded_time(tmp_path, victim):
    # 200 images in batches of 2 and 6 pool buffers: the reader is held back by its full
    # queues and most batches are still to come when the victim dies.
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 100, prefix="t", size=(16, 16)))
    loader = make_loader(path, batch_size=2, workers=2,
                         options={"timeout": 30, "lookahead": False})
    it = iter(loader)
    next(it)
    procs = {p.name: p for p in loader._workers._procs}
    shm = shm_names_of(loader)
    target = procs[victim]
    os.kill(target.pid, signal.SIGKILL)
    try:
        # Well within the timeout: a death is seen at the next 0.2 s poll, and close() gives
        # the survivors only 0.5 s before killing them.
        message = worker_error_within(5, it)
    finally:
        del it
        loader.close()
    assert victim in message and "SIGKILL" in message and str(target.pid) in message, message
    assert wait_gone([p.pid for p in procs.values()], 1) == []
    assert shm_left(shm) == []


@pytest.mark.timeout(60)
def test_death_is_reported_promptly_even_if_the_victim_held_the_results_lock(tmp_path):
    """Regression (fixed in 4b97dad): a child SIGKILLed while writing to the shared results
    queue keeps its lock forever; the survivors' feeder threads block on it and they hang at
    exit, and _check_alive raised only after close() had waited 5 s for them."""
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 100, prefix="t", size=(16, 16)))
    loader = make_loader(path, batch_size=2, workers=2,
                         options={"timeout": 30, "lookahead": False})
    it = iter(loader)
    next(it)
    procs = list(loader._workers._procs)
    lock = loader._workers.channels.results._wlock   # what a child holds while it reports
    assert lock.acquire(timeout=5)
    try:
        # Deterministically what a SIGKILL during `results.put` does: the lock stays taken.
        os.kill(procs[0].pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerError, match="imageloader-worker-0"):
            for _ in it:
                pass
        elapsed = time.monotonic() - start
    finally:
        lock.release()
        loader.close()
    assert elapsed < 3, f"the death was reported {elapsed:.1f} s after it happened"


def stuck_loader(tmp_path, timeout: float):
    """13 images; the 9th (batch 4 of size 2: worker 0's) hangs once `trigger` exists.

    Returns the loader after one full warm-up epoch, and the trigger's path."""
    files = labeled_files(2, 6, prefix="t", size=(16, 16))
    files.insert(8, ("t/c01/stuck.jpg", solid(class_level(1)) + HANG_MARK))
    path = write_archive(tmp_path / "a.tgz", files)
    loader = make_loader(path, batch_size=2, workers=2,
                         options={"timeout": timeout, "lookahead": False})
    trigger = tmp_path / "hang-now"
    install_hanging_decoder(loader, trigger)
    assert sorted(run_epoch(loader)) == [0] * 6 + [1] * 7
    return loader, trigger


@pytest.mark.timeout(60)
def test_worker_dying_while_decoding_is_reported(tmp_path):
    """A worker that dies inside the decoder (a segfault in a codec, the OOM killer).

    Regression (5d4de9b, fixed in 4b97dad): WorkerPool._receive returned on queue.Empty
    whenever a pool buffer was free, before the liveness and deadline checks; with free but
    unassignable buffers the loop spun forever and neither a death nor a hang was reported."""
    loader, trigger = stuck_loader(tmp_path, timeout=60)
    trigger.touch()
    it = iter(loader)
    try:
        labels = [int(y) for _ in range(4) for y in next(it)[1]]
        assert labels == [0] * 6 + [1] * 2
        time.sleep(0.3)   # worker 0 is decoding batch 4: the stuck member
        victim = loader._workers._procs[0]
        os.kill(victim.pid, signal.SIGKILL)
        message = worker_error_within(5, it)   # seen at the next 0.2 s poll
    finally:
        del it
        loader.close()
    assert "imageloader-worker-0" in message and "SIGKILL" in message, message
    assert "'t/c01/stuck.jpg'" in message, message


@pytest.mark.timeout(60)
def test_hung_worker_times_out_naming_the_member(tmp_path):
    """Regression as test_worker_dying_while_decoding_is_reported (fixed in 4b97dad)."""
    loader, trigger = stuck_loader(tmp_path, timeout=2)
    trigger.touch()
    got = []
    start = time.monotonic()
    try:
        with pytest.raises(WorkerError) as info, watchdog(2 + 4):
            for _, y in loader:   # eval order = archive order: batches 0-3 come before the hang
                got.extend(y.tolist())
                start = time.monotonic()
        waited = time.monotonic() - start
        procs = list(loader._workers._procs)
        shm = shm_names_of(loader)
    finally:
        # The hung worker ignores the polite stop and is killed when close() stops waiting
        # (after 5 s in loader.close(); 1 s here to keep the test short).
        if loader._workers is not None:
            loader._workers.close(timeout=1)
        loader.close()
    assert got == [0] * 6 + [1] * 2, got   # batches 0-3; batch 4 holds the stuck member
    assert 1.5 < waited < 2 + 4, waited
    message = str(info.value)
    assert "timeout" in message and "'t/c01/stuck.jpg'" in message, message
    assert procs[0].name == "imageloader-worker-0" and procs[0].exitcode == -signal.SIGKILL
    assert wait_gone([p.pid for p in procs], 1) == []
    assert shm_left(shm) == []


@pytest.mark.timeout(60)
def test_a_consumer_away_longer_than_the_timeout_is_not_a_hang(tmp_path):
    """The timeout counts how long the loader waits on its workers, not how long the training
    loop is away (a validation pass, a checkpoint): once it had held every buffer for longer
    than the timeout, the loader's first wait after it came back raised "timeout" at once,
    before any buffer could come back from its copy."""
    from conftest import numbered_files
    path = write_archive(tmp_path / "a.tgz", numbered_files(64))
    with imageloader.ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu",
                                 normalize=False, workers=2, train=False,
                                 options=imageloader.Options(timeout=3.0, lookahead=False)
                                 ) as loader:
        # 3 s: the worker's refill of one tiny batch must fit in it on a machine busy with
        # other programs too (1 s did not, beside another test run on 2 cores).
        runtime = loader._started()
        pool, batches = runtime.pool, runtime.producer.batches(0)
        held = [next(batches) for _ in range(len(pool.buffers))]  # the consumer holds them all
        time.sleep(3.5)  # away longer than the timeout
        threading.Timer(0.3, pool.release, [held.pop(0)]).start()  # one comes back soon
        more = next(batches)  # waits for that one, then for its worker: not a hang
        assert more.count == 4
        for buf in held + [more]:
            pool.release(buf)
        batches.close()


# ============================================================================================
# Shutdown: Ctrl-C, break, del, exceptions in the loop body, close


CTRL_C_CHILD = textwrap.dedent("""
    import faulthandler, json, signal, sys, warnings
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for stacks if stuck
    # As in a terminal. A runner started as a background job passes SIGINT on ignored (POSIX),
    # and Python then never installs its KeyboardInterrupt handler: Ctrl-C would do nothing.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    from imageloader import ImageLoader
    warnings.simplefilter("ignore")
    loader = ImageLoader(sys.argv[1], batch_size=2, size=8, workers=2, normalize=False,
                         device="cpu", train=False)
    it = iter(loader)
    next(it)
    rings = getattr(loader._workers, "_rings", None) or []
    print(json.dumps({"pids": [p.pid for p in loader._workers._procs],
                      "shm": loader._pool.shm_names + [r.name for r in rings]}), flush=True)
    print("READY", flush=True)
    while True:
        for batch in it:
            pass
        it = iter(loader)
""")


def _read_line(stream, deadline: float) -> str:
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            raise TimeoutError(f"no full line from the child in time (got {line!r})")
        byte = os.read(stream.fileno(), 1)
        if not byte:
            raise EOFError(f"the child closed its stdout (got {line!r})")
        line += byte
    return line.decode()


def _start_child(tmp_path, script: str, path: str, **popen):
    (tmp_path / "child.py").write_text(script)
    return subprocess.Popen([sys.executable, str(tmp_path / "child.py"), path],
                            stdout=subprocess.PIPE, cwd=tmp_path, **popen)


@pytest.mark.timeout(90)
def test_ctrl_c_stops_everything_cleanly(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(3, 10, prefix="t", size=(16, 16)))
    # Its own process group, as a terminal's foreground job: Ctrl-C signals the whole group.
    child = _start_child(tmp_path, CTRL_C_CHILD, path, stderr=subprocess.PIPE,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        info = json.loads(_read_line(child.stdout, deadline))
        assert _read_line(child.stdout, deadline).strip() == "READY"
        assert len(info["pids"]) == 3 and all(alive(pid) for pid in info["pids"])
        time.sleep(0.3)   # let it run a few epochs: Ctrl-C lands somewhere mid-iteration
        os.killpg(child.pid, signal.SIGINT)   # Ctrl-C reaches the whole process group
        start = time.monotonic()
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGUSR1)  # every thread's stack, for the failure message
            time.sleep(1.0)
            os.killpg(child.pid, signal.SIGKILL)
            _, err = child.communicate(timeout=10)
            pytest.fail("no exit 15 s after SIGINT; stacks:\n" + err.decode(errors="replace"))
        exited = time.monotonic() - start
        _, err = child.communicate(timeout=10)   # also waits for the resource tracker
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    err = err.decode(errors="replace")
    assert exited < 5, f"took {exited:.1f} s to exit after SIGINT\n{err}"
    assert child.returncode != 0 and "KeyboardInterrupt" in err, err
    for bad in ("leaked semaphore", "leaked shared_memory", "Fatal Python error"):
        assert bad not in err, err
    assert wait_gone(info["pids"], max(0.0, 5 - (time.monotonic() - start))) == []
    assert shm_left(info["shm"]) == []


def test_close_is_prompt_when_a_stop_message_is_lost(tmp_path):
    """Ctrl-C made the training loop exit ~1 s later, but now and then after ~5.7 s.

    Regression (fixed in 4b97dad): WorkerPool.close() stopped children only through a None
    put on their queues, and a KeyboardInterrupt inside multiprocessing.Queue.put
    (Condition.notify) leaves a stale waiter that swallows the next notify: the None was never
    sent and the worker, waiting for orders, was killed after close()'s 5 s.

    Reproduced deterministically: the orders queue of worker 0 is put in the state that a
    KeyboardInterrupt inside `Condition.notify()` leaves (the waiter released but not removed
    from `_waiters`; CPython's gh-92530 fix covers only part of this), observed in the wild
    with faulthandler stacks of the stuck worker.
    """
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 4, prefix="t", size=(16, 16)))
    loader = make_loader(path, batch_size=2, workers=2, options={"lookahead": False})
    try:
        run_epoch(loader)   # every worker got orders: their queues' feeder threads wait
        pool = loader._workers
        condition = pool.channels.orders[0]._notempty
        deadline = time.monotonic() + 5
        while not condition._waiters and time.monotonic() < deadline:
            time.sleep(0.01)
        with condition:
            condition._waiters[0].release()   # notify() interrupted before its bookkeeping
        while len(condition._waiters) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(condition._waiters) == 2
        procs = list(pool._procs)
        pool.close(timeout=3)   # the loader's close() waits 5 s; 3 s is plenty to stop politely
    finally:
        loader.close()
    assert {p.name: p.exitcode for p in procs} == {p.name: 0 for p in procs}


_LIMIT_READS = [0]


@dataclasses.dataclass(frozen=True)
class SlowReaderLimits(Limits):
    """Stock limits, except that in a reader process every member from the third on takes
    `pause` seconds (the reader checks max_member_bytes once per member): a slow disk."""

    pause: float = 0.0

    def __getattribute__(self, name):
        if name == "max_member_bytes" and \
                multiprocessing.current_process().name.startswith("imageloader-reader"):
            _LIMIT_READS[0] += 1
            if _LIMIT_READS[0] > 2:
                time.sleep(object.__getattribute__(self, "pause"))
        return object.__getattribute__(self, name)


ORPHANS_CHILD = textwrap.dedent("""
    import json, sys, time, warnings
    sys.path.insert(0, sys.argv[3])
    from imageloader import ImageLoader, Options
    from test_faults import SlowReaderLimits
    warnings.simplefilter("ignore")

    def start(path, **options):
        loader = ImageLoader(path, batch_size=2, size=8, workers=2, normalize=False,
                             device="cpu", train=False, vocab=["c00", "c01"],
                             options=Options(lookahead=False, **options))
        it = iter(loader)
        next(it)
        rings = getattr(loader._workers, "_rings", None) or []
        return loader, it, {"pids": [p.pid for p in loader._workers._procs],
                            "shm": loader._pool.shm_names + [r.name for r in rings]}

    held = start(sys.argv[1])   # 300 images: the reader waits on full queues
    # A reader slower than the decoders: after batch 0, a worker waits for the rest of its batch.
    slow = start(sys.argv[2], limits=SlowReaderLimits(pause=1.0))
    print(json.dumps({"held": held[2], "slow": slow[2]}), flush=True)
    print("READY", flush=True)
    time.sleep(3600)
""")


@pytest.fixture(scope="module")
def orphans(tmp_path_factory):
    """SIGKILL a training process (as the OOM killer would: no close(), no atexit) that runs
    two loaders; return what each had started and the children still running 4 s later
    (children poll for their parent about once a second; the slow reader sleeps 1 s)."""
    tmp = tmp_path_factory.mktemp("orphans")
    held = write_archive(tmp / "held.tgz", labeled_files(2, 150, prefix="t", size=(16, 16)))
    slow = write_archive(tmp / "slow.tgz", labeled_files(2, 10, prefix="t", size=(16, 16)))
    tests = os.path.dirname(os.path.abspath(__file__))
    (tmp / "child.py").write_text(ORPHANS_CHILD)
    child = subprocess.Popen([sys.executable, str(tmp / "child.py"), held, slow, tests],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=tmp)
    pids = []
    try:
        deadline = time.monotonic() + 60
        info = json.loads(_read_line(child.stdout, deadline))
        pids = info["held"]["pids"] + info["slow"]["pids"]
        assert _read_line(child.stdout, deadline).strip() == "READY"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        survivors = set(wait_gone(pids, 4))
    finally:
        for pid in pids:   # never leave orphans behind, whatever the outcome
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    return info, survivors


@pytest.mark.timeout(90)
def test_children_exit_when_the_training_process_is_killed(orphans):
    """Regression (fixed in 4b97dad): the reader's back-pressure loop (workers._put) never
    checked its parent: after a SIGKILL of the training process it spun forever, keeping the
    dead process's resource tracker and so its /dev/shm buffers alive."""
    info, survivors = orphans
    left = [pid for pid in info["held"]["pids"] if pid in survivors]
    assert left == [], f"still running 4 s after the parent died: {left} of {info['held']}"


@pytest.mark.timeout(90)
def test_worker_waiting_for_a_slow_reader_exits_when_the_training_process_is_killed(orphans):
    """The reader is slower than the decoders (big members, slow storage, or decode="cuda"
    where workers only pack bytes) when the training process is OOM-killed."""
    info, survivors = orphans
    left = [pid for pid in info["slow"]["pids"] if pid in survivors]
    assert left == [], f"still running 4 s after the parent died: {left} of {info['slow']}"
    # With every child gone, the dead process's resource tracker unlinks its segments.
    segments = info["held"]["shm"] + info["slow"]["shm"]
    deadline = time.monotonic() + 5
    while shm_left(segments) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert shm_left(segments) == []


@pytest.mark.timeout(60)
def test_hundred_abandoned_iterators_on_one_loader(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(3, 10, prefix="t", size=(16, 16)))
    loader = make_loader(path, batch_size=2, workers=2, options={"lookahead": False})
    with loader:
        counts = {}
        for round_ in range(1, 101):
            if round_ % 2:
                for _batch in loader:
                    break
            else:
                it = iter(loader)
                next(it)
                del it
            if round_ in (10, 100):
                counts[round_] = (threading.active_count(), open_fds())
        assert counts[100][0] <= counts[10][0] + 1, counts
        assert counts[100][1] <= counts[10][1] + 3, counts
        # an exception in the loop body, then a full epoch: works, and every buffer came back
        with pytest.raises(RuntimeError, match="boom"):
            for _batch in loader:
                raise RuntimeError("boom")
        labels = run_epoch(loader)
        assert sorted(labels) == sorted(k for k in range(3) for _ in range(10))
        deadline = time.monotonic() + 1
        while loader._pool.in_use() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert loader._pool.in_use() == 0
        pids = [p.pid for p in loader._workers._procs]
        assert all(alive(pid) for pid in pids)   # the same processes served all 102 epochs
    assert wait_gone(pids, 5) == []


def test_buffers_come_back_soon_after_break(tmp_path):
    """Regression (fixed in 4b97dad): buffers of orders already sent to workers came back only
    when a later iteration drained the results queue; after break they stayed leased."""
    path = write_archive(tmp_path / "a.tgz", labeled_files(3, 10, prefix="t", size=(16, 16)))
    with make_loader(path, batch_size=2, workers=2, options={"lookahead": False}) as loader:
        for _batch in loader:
            break
        deadline = time.monotonic() + 1.0
        while loader._pool.in_use() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert loader._pool.in_use() == 0


@pytest.mark.timeout(60)
def test_create_iterate_close_rounds_leak_nothing(tmp_path):
    # workers=1 (a reader and a decoder): each round starts and stops two processes, ~0.5 s
    # on two slow cores (~1.5 s when they are busy): 15 rounds keep the test under ~10 s.
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 4, prefix="t", size=(16, 16)))
    seen, ours = {}, []
    for round_ in range(1, 16):
        loader = make_loader(path, batch_size=2, workers=1)
        next(iter(loader))
        pids, shm = [p.pid for p in loader._workers._procs], shm_names_of(loader)
        assert len(pids) == 2 and len(shm_left(shm)) == len(shm) > 0
        ours += shm
        loader.close()
        assert shm_left(shm) == []
        assert wait_gone(pids, 2) == []
        if round_ in (5, 15):
            seen[round_] = settled_counts(seen.get(5), ours)
    # Any per-round leak of a descriptor, a segment or a thread shows as growth over 10 rounds.
    # Only this test's own segments are counted: other programs may use /dev/shm too.
    assert seen[15][0] <= seen[5][0] + 1, seen
    assert seen[15][1] == seen[5][1] == 0, seen
    assert seen[15][2] <= seen[5][2], seen


def settled_counts(baseline, segments, wait: float = 3.0):
    """(fds, segments of `segments` still in /dev/shm, threads) once queue feeder threads have
    finished closing their pipes: close() does not wait for them, so right after it the
    counts can be one or two high."""
    deadline = time.monotonic() + wait
    while True:
        counts = (open_fds(), len(shm_left(segments)), threading.active_count())
        if baseline is None or time.monotonic() > deadline or (
                counts[0] <= baseline[0] + 1 and counts[2] <= baseline[2]):
            if baseline is None:
                time.sleep(0.5)  # let this round's feeder threads finish too
                counts = (open_fds(), len(shm_left(segments)), threading.active_count())
            return counts
        time.sleep(0.1)
