"""Plain copies: a .tgz inflated once, read by every epoch with no inflate, and never used when
it does not match the archive, is incomplete, or is turned off."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import labeled_files, write_archive
from imageloader import ImageLoader, Options, cache, index, read
from imageloader.errors import ArchiveError
from imageloader.cache import PlainCopy, ensure_copy, find_copy, on_copy, plain_copies
from imageloader.read import available_inflaters, iter_members
from imageloader.vocab import Vocabulary, archive_regions, sidecar_path
from test_index import epoch_ids, padded_archive

REPO = Path(__file__).resolve().parents[1]
GZIP_REGIONS = "rapidgzip" in available_inflaters()


@pytest.fixture(autouse=True)
def small_regions(monkeypatch, tmp_path):
    # Test archives are a few MB: regions of 256 KiB give several of them.
    monkeypatch.setattr(index, "REGION_BYTES", 256 << 10)
    monkeypatch.setattr(read, "RAPIDGZIP_CHUNK", 256 << 10)
    # Copies that do not fit beside the archive go here, not into the user's cache folder.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def walk(source, **kw):
    skipped = Counter()
    found = [(m.index, m.name, m.label, m.data) for m in iter_members(source, skipped=skipped,
                                                                        **kw)]
    return found, skipped


def tar_bytes(path) -> bytes:
    return gzip.decompress(Path(path).read_bytes())


def plain_files(folder) -> list[str]:
    return sorted(p.name for p in Path(folder).rglob("*") if ".plain" in p.name)


# Copies that need only room for themselves: the default keeps 10% of the disk free, and the
# disk is shared with other programs, whose use must not decide what these tests see.
ROOM = PlainCopy(keep_free=0.0)


def numbered_loader(path, plain_copy=ROOM, **kw):
    options = Options(plain_copy=plain_copy, **kw.pop("options", {}))
    return ImageLoader(path, batch_size=8, size=8, mode="L", device="cpu", normalize=False,
                       seed=3, options=options, **kw)


def spoil(path) -> None:
    """The archive's bytes become zeros (same size): anything that inflates it now fails."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.write(bytes(size))


# ============================================================================================
# Written once, read with no inflate


def test_the_scan_writes_the_copy_with_its_own_inflate(tmp_path, monkeypatch):
    """No sidecar: the vocabulary scan inflates the archive, and that one pass writes the copy;
    no epoch opens the .tgz after that."""
    path = padded_archive(tmp_path / "a.tgz")
    opened = []
    real = read.open_stream
    monkeypatch.setattr(read, "open_stream",
                        lambda source, *a, **k: opened.append(source) or real(source, *a, **k))
    monkeypatch.setattr(cache, "open_stream", read.open_stream)
    with numbered_loader(path, workers=0) as loader:
        assert opened == [path]  # the scan, teed into the copy
        assert os.path.exists(sidecar_path(path))
        copy = find_copy(path)
        assert copy == path + cache.COPY_SUFFIX
        assert Path(copy).read_bytes() == tar_bytes(path)
        for _ in range(2):
            seen, _ = epoch_ids(loader)
            assert sorted(seen) == list(range(60))
        assert loader.stats.inflate == "none (plain copy)"
    assert opened.count(path) == 1


def test_a_fresh_sidecar_means_one_inflate_pass_and_no_new_scan(tmp_path):
    path = padded_archive(tmp_path / "a.tgz")
    Vocabulary.from_archives(path)  # the sidecar exists, from a run without copies
    before = os.stat(sidecar_path(path)).st_mtime_ns
    copy = ensure_copy(path, ROOM)
    assert Path(copy).read_bytes() == tar_bytes(path)
    assert os.stat(sidecar_path(path)).st_mtime_ns == before
    assert not os.path.exists(copy + ".partial")


@pytest.mark.skipif(not GZIP_REGIONS, reason="gzip regions need rapidgzip")
def test_a_copy_walks_exactly_like_the_archive_whole_and_by_regions(tmp_path):
    path = padded_archive(tmp_path / "a.tgz")
    copy = ensure_copy(path, ROOM)
    whole = walk(path)
    assert walk(copy) == whole
    regions = archive_regions(path)
    assert regions is not None and len(regions) >= 4
    pieces, skips, opened = [], Counter(), {}
    try:
        for region in regions:
            moved = on_copy(region, {path: copy})
            assert (moved.path, moved.index, moved.start) == (copy, None, region.start)
            found, skipped = walk(moved, opened=opened)
            pieces += found
            skips.update(skipped)
    finally:
        for stream in opened.values():
            stream.close()
    assert (pieces, skips) == whole


@pytest.mark.skipif(not GZIP_REGIONS, reason="gzip regions need rapidgzip")
def test_train_regions_from_the_copy_give_the_batches_of_the_archive(tmp_path):
    """Same seed, readers and workers: the same batches (images, labels, order) whether the
    regions are inflated from the .tgz or read from the copy, epoch after epoch; and once the
    copy exists the .tgz is not read at all (it is spoiled before the first epoch)."""
    path = padded_archive(tmp_path / "a.tgz")
    runs = []
    for setting in (None, ROOM):
        with numbered_loader(path, setting, workers=3, options={"readers": 2}) as loader:
            assert len(loader.plan.parts) == len(archive_regions(path)) > 2
            assert plain_files(tmp_path) == ([] if setting is None else
                                             ["a.tgz.plain.tar", "a.tgz.plain.tar.json",
                                              "a.tgz.plain.tar.lock"])
            if setting is not None:
                spoil(path)
            runs.append([epoch_ids(loader)[0] for _ in range(2)])
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1] and sorted(runs[0][0]) == list(range(60))


def test_evaluation_order_from_the_copy_is_the_archive_order(tmp_path):
    path = padded_archive(tmp_path / "a.tgz")
    orders = []
    for setting in (None, ROOM):
        with numbered_loader(path, setting, workers=2, train=False) as loader:
            if setting is not None:
                spoil(path)
            orders.append(epoch_ids(loader)[0])
    assert orders[0] == orders[1] == list(range(60))


def test_uncompressed_tars_and_streams_get_no_copy(tmp_path):
    path = padded_archive(tmp_path / "a.tar", compress=False)
    with open(path, "rb") as stream:
        assert plain_copies([path, stream], ROOM) == {}
    assert plain_files(tmp_path) == []


# ============================================================================================
# Never used when it does not fit the archive


def test_a_changed_archive_gets_a_new_copy(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(3, 2))
    first = ensure_copy(path, ROOM)
    assert walk(first)[0] == walk(path)[0]
    write_archive(tmp_path / "a.tgz", labeled_files(2, 4))  # other content, other size
    assert find_copy(path) is None
    again = ensure_copy(path, ROOM)
    assert again == first and walk(again)[0] == walk(path)[0]
    assert len(walk(again)[0]) == 8
    # Same bytes, only a new mtime: the key no longer matches either.
    os.utime(path, ns=(1, 1))
    assert find_copy(path) is None
    assert ensure_copy(path, ROOM) == first
    assert json.loads(Path(first + ".json").read_text())["archive_stamp"]["mtime_ns"] == 1


def test_a_truncated_copy_is_never_used(tmp_path):
    path = padded_archive(tmp_path / "a.tgz")
    copy = ensure_copy(path, ROOM)
    with open(copy, "r+b") as f:
        f.truncate(os.path.getsize(copy) - 512)
    assert find_copy(path) is None
    with numbered_loader(path, workers=0, train=False) as loader:  # writes a whole one
        assert epoch_ids(loader)[0] == list(range(60))
    assert find_copy(path) == copy and Path(copy).read_bytes() == tar_bytes(path)


def test_a_partial_copy_left_by_a_killed_writer_is_never_used(tmp_path):
    """A writer killed mid-copy leaves `<copy>.partial` and its lock file; the kernel freed the
    lock, the partial file is not read, and the next process writes a whole copy."""
    path = padded_archive(tmp_path / "a.tgz")
    slow = textwrap.dedent(f"""
        import time
        from imageloader import cache
        write = cache._CopyWriter.__call__
        def slowly(self, offset, block):
            write(self, offset, block)
            time.sleep(60)  # killed here, with one block written
        cache._CopyWriter.__call__ = slowly
        cache.ensure_copy({path!r}, cache.PlainCopy(keep_free=0.0))
    """)
    child = subprocess.Popen([sys.executable, "-c", slow], cwd=REPO, env=_child_env())
    partial = Path(path + cache.COPY_SUFFIX + ".partial")
    try:
        deadline = time.monotonic() + 120
        while not (partial.exists() and partial.stat().st_size > 0):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert find_copy(path) is None
    copy = ensure_copy(path, ROOM)
    assert Path(copy).read_bytes() == tar_bytes(path)
    assert not partial.exists()


def test_two_processes_starting_at_once_write_one_copy_and_both_read_it(tmp_path):
    path = padded_archive(tmp_path / "a.tgz")
    go = tmp_path / "go"
    child = textwrap.dedent(f"""
        import hashlib, logging, os, sys, time
        from collections import Counter
        from imageloader import cache
        from imageloader.read import iter_members
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        write = cache._CopyWriter.__call__
        def slowly(self, offset, block):  # widen the window in which both are at work
            time.sleep(0.2)
            write(self, offset, block)
        cache._CopyWriter.__call__ = slowly
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)
        copy = cache.ensure_copy({path!r}, cache.PlainCopy(keep_free=0.0))
        digest = hashlib.sha256()
        for m in iter_members(copy, skipped=Counter()):
            digest.update(f"{{m.index}} {{m.name}} {{m.label}}".encode() + m.data)
        print(copy, digest.hexdigest())
    """)
    procs = [subprocess.Popen([sys.executable, "-c", child], cwd=REPO, env=_child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    go.touch()
    results = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    expected = hashlib.sha256()
    for index_, name, label, data in walk(path)[0]:
        expected.update(f"{index_} {name} {label}".encode() + data)
    copy = path + cache.COPY_SUFFIX
    assert [out.split() for out, _ in results] == [[copy, expected.hexdigest()]] * 2
    assert sum(err.count("writing a plain copy") for _, err in results) == 1
    assert find_copy(path) == copy and not os.path.exists(copy + ".partial")


def _child_env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get(
        "PYTHONPATH", "")])}


# ============================================================================================
# Bounded, placed, and off when disabled


def test_size_limit_is_respected_before_and_while_writing(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(3, 30))  # solid JPEGs: compress
    packed, plain = os.path.getsize(path), len(tar_bytes(path))
    assert plain > 2 * packed
    # Smaller than the .tgz: not even tried.
    assert ensure_copy(path, PlainCopy(keep_free=0.0, max_bytes=packed - 1)) is None
    assert not os.path.exists(sidecar_path(path))  # no scan was made for it
    # Room for the .tgz but not for the tar: abandoned while writing, nothing left behind.
    assert ensure_copy(path, PlainCopy(keep_free=0.0, max_bytes=(packed + plain) // 2)) is None
    assert plain_files(tmp_path) == ["a.tgz.plain.tar.lock"]
    # A disk that must stay 99.99% free.
    assert ensure_copy(path, PlainCopy(keep_free=0.9999)) is None
    assert ensure_copy(path, PlainCopy(keep_free=0.0, max_bytes=plain)) == path + cache.COPY_SUFFIX
    with pytest.raises(ValueError, match="keep_free"):
        PlainCopy(keep_free=1.0)


def test_disabled_writes_nothing(tmp_path):
    path = padded_archive(tmp_path / "a.tgz")
    with numbered_loader(path, None, workers=0) as loader:
        assert sorted(epoch_ids(loader)[0]) == list(range(60))
        assert loader.stats.inflate != "none (plain copy)"
    assert plain_files(tmp_path) == []


def test_an_unwritable_folder_puts_the_copy_in_the_cache_folder(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    path = padded_archive(tmp_path / "data" / "a.tgz")
    monkeypatch.setattr(cache, "_writable", lambda folder: "data" not in folder)
    copy = ensure_copy(path, ROOM)
    assert copy is not None and copy.startswith(str(tmp_path / "cache" / "imageloader"))
    assert Path(copy).read_bytes() == tar_bytes(path)
    assert find_copy(path) == copy
    chosen = tmp_path / "scratch"
    copy = ensure_copy(path, PlainCopy(folder=str(chosen), keep_free=0.0))
    assert copy is not None and Path(copy).parent == chosen
    assert find_copy(path, PlainCopy(folder=str(chosen), keep_free=0.0)) == copy


@pytest.mark.parametrize("inflater", available_inflaters())
@pytest.mark.parametrize("sidecar", [False, True], ids=["by-scan", "by-pass"])
def test_a_gzip_checksum_mismatch_means_no_copy(tmp_path, inflater, sidecar):
    """The copy is trusted by its key because its bytes passed gzip's CRC as they were written:
    by the scan or, with a fresh sidecar, by the inflate pass, whatever the inflater."""
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 3))
    if sidecar:
        Vocabulary.from_archives(path, inflate=inflater)
    stamp = os.stat(path)
    blob = bytearray(Path(path).read_bytes())
    blob[-8] ^= 1  # the trailer's CRC-32: every byte inflates, the check fails at the end
    Path(path).write_bytes(bytes(blob))
    os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # the sidecar stays fresh
    assert ensure_copy(path, ROOM, inflate=inflater) is None
    assert plain_files(tmp_path) == ["a.tgz.plain.tar.lock"]


@pytest.mark.filterwarnings("ignore:epoch 0. skipped")
def test_a_damaged_archive_gets_no_copy_and_still_fails_where_it_is_read(tmp_path):
    path = padded_archive(tmp_path / "a.tgz")
    blob = Path(path).read_bytes()
    Path(path).write_bytes(blob[: len(blob) // 2])
    assert plain_copies([path], ROOM) == {}
    assert plain_files(tmp_path) == ["a.tgz.plain.tar.lock"]
    with numbered_loader(path, workers=0, vocab=["c0", "c1", "c2"]) as loader:
        with pytest.raises(ArchiveError, match="(?i)truncated|unexpected end"):
            for _ in loader:
                pass


# ============================================================================================
# What errors name


@pytest.mark.parametrize("workers", [0, 2])
def test_errors_name_the_archive_given_not_its_plain_copy(tmp_path, workers):
    """Read from the plain copy, a member that cannot be decoded and one of a class the
    vocabulary lacks are reported as members of the archive the user gave, by both the
    in-process reader and the reader processes."""
    files = labeled_files(2, 3) + [("train/c01/broken.jpg", b"\xff\xd8\xff not a JPEG")]
    path = write_archive(tmp_path / "a.tgz", files)
    assert find_copy(path) is None
    with numbered_loader(path, workers=workers, train=False,
                         options={"on_error": "raise"}) as loader:
        assert find_copy(path) is not None  # what the epoch reads
        with pytest.raises(ValueError) as raised:
            for _ in loader:
                pass
    assert (raised.value.archive, raised.value.member) == (path, "train/c01/broken.jpg")
    assert repr(path) in str(raised.value) and ".plain" not in str(raised.value)
    with numbered_loader(path, workers=workers, train=False, vocab=["c00"]) as loader:
        with pytest.raises(KeyError) as raised:
            for _ in loader:
                pass
    assert (raised.value.archive, raised.value.member) == (path, "train/c01/img000.jpg")


def test_a_damaged_plain_copy_is_named_with_the_archive_it_copies(tmp_path):
    """A copy spoiled after it was written (same size and time, so it still looks whole):
    the error names the file read, says whose copy it is and how to get a good one."""
    path = padded_archive(tmp_path / "a.tgz")
    copy = ensure_copy(path, ROOM)
    import tarfile
    with tarfile.open(copy) as tar:
        header = tar.getmembers()[20].offset  # a member's header, past the first few
    stat = os.stat(copy)
    with open(copy, "r+b") as f:
        f.seek(header)
        f.write(b"\x17" * 512)
    os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as a failing disk leaves it
    assert find_copy(path) == copy
    with numbered_loader(path, workers=0, train=False, vocab=["c0", "c1", "c2"]) as loader:
        with pytest.raises(ArchiveError) as raised, \
                pytest.warns(UserWarning, match="skipped 10 members"):  # the .txt ones before
            for _ in loader:
                pass
    message = str(raised.value)
    assert repr(copy) in message and f"plain copy of {path!r}" in message
    assert "deleting it" in message
