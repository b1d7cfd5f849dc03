"""Plain copies: a gzip archive inflated once into an uncompressed `.tar` that readers seek in.

JPEG bytes barely compress, so a `.tgz` of photos saves almost no disk but costs a full inflate
every epoch: ~100-250 MB/s per core (scripts/bench/bench_inflate.py), where 20,000 photos/s of
~115 KB are ~2.3 GB/s. The copy is the archive's tar stream byte for byte, so the member offsets the
scan found (index.py's regions) hold in it unchanged: a region is a seek with no inflate, and
one walk of it (evaluation order) meets exactly the members, skips and errors the `.tgz` gives.
A plain `.tar` rather than packed bytes plus an index, because then nothing downstream changes:
the reader walks it with the same code, and `tar tf` can read it.

When it is written: before the first epoch, so that every epoch reads it. If the archive has no
fresh sidecar, the vocabulary scan inflates it anyway and hands us the stream
(`vocab.scan_archive`): the copy costs a write, not an inflate. If the sidecar is fresh (the copy
was off before, or removed), one inflate pass with all cores writes it.

Safe to share:
- Keyed like the sidecar: `<copy>.json` records the archive's size and mtime and the copy's own;
  a copy is used only while all four match, so a changed archive (or a truncated copy) means a
  new copy. It is trusted by that key and not hashed on read: its bytes passed gzip's CRC-32 and
  length check as they were written (it is published only after the stream was read to its
  end), and hashing it every epoch would cost about what inflating does. Reading still checks
  every tar header's checksum.
- Written to `<copy>.partial`, renamed into place only when complete, under an exclusive lock
  (`<copy>.lock`; flock, so the kernel releases it if the writer dies): when two processes
  start at once one writes and the other waits, then uses it. Nothing reads a `.partial`.
- Bounded: abandoned (and removed) as soon as it grows past `PlainCopy.max_bytes` or would
  leave less than `PlainCopy.keep_free` of its disk free.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable

from .errors import Limits
from .index import file_stamp
from .read import Region, Source, open_stream
from .vocab import cached_image_count, scan_archive

log = logging.getLogger(__name__)
COPY_SUFFIX = ".plain.tar"
_FORMAT = "imageloader.plain/1"
_BLOCK = 4 << 20
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class PlainCopy:
    """Where uncompressed copies of gzip archives go and how large they may be
    (`Options.plain_copy`; None there: no copy is written or read)."""

    folder: str | None = None     # None: beside the archive if its folder is writable, else
                                  # the user's cache folder (default_cache_folder())
    max_bytes: int | None = None  # no copy larger than this
    keep_free: float = 0.10       # share of the copy's disk that must stay free after it

    def __post_init__(self):
        if not 0.0 <= self.keep_free < 1.0:
            raise ValueError(f"PlainCopy.keep_free is a share of the disk in [0, 1), "
                             f"got {self.keep_free!r}")


def default_cache_folder() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "imageloader")


def plain_copies(sources: Iterable[Source], setting: PlainCopy | None, *,
                 limits: Limits = Limits(), inflate: str = "auto") -> dict[str, str]:
    """{archive path: its plain copy} for the gzip archives among `sources` that have one or
    get one now (see `ensure_copy`)."""
    if not setting:
        return {}
    paths = [os.fspath(s) for s in sources if not hasattr(s, "read") and _is_gzip(os.fspath(s))]
    if not paths:
        return {}
    with ThreadPoolExecutor(max_workers=min(4, len(paths))) as pool:
        copies = list(pool.map(
            lambda path: ensure_copy(path, setting, limits=limits, inflate=inflate), paths))
    return {path: copy for path, copy in zip(paths, copies) if copy is not None}


def on_copy(part, copies: dict[str, str]):
    """The same part (an archive path or a Region of one) read from its plain copy, if any."""
    if isinstance(part, Region):
        copy = copies.get(part.path)
        return part if copy is None else part._replace(path=copy, index=None)
    if hasattr(part, "read"):
        return part
    return copies.get(os.fspath(part), part)


def find_copy(archive: str, setting: PlainCopy = PlainCopy()) -> str | None:
    """The path of a complete copy of the archive as it is now; None if there is none."""
    for copy in _candidates(archive, setting):
        if _is_valid(archive, copy):
            return copy
    return None


def ensure_copy(archive: str, setting: PlainCopy = PlainCopy(), *, limits: Limits = Limits(),
                inflate: str = "auto") -> str | None:
    """The path of a valid plain copy of a gzip archive, written first if there is none and it
    fits; None if it does not (the archive is then read as it is)."""
    found = find_copy(archive, setting)
    if found is not None:
        return found
    try:
        target = _target(archive, setting)
        if target is None:
            return None
        with _locked(target) as waited:
            found = find_copy(archive, setting)
            if found is not None or waited:
                # Waited and still none: the process we waited for could not write it. Trying
                # again would most likely fail the same way, after another full inflate.
                return found
            return _write(archive, target, setting, limits, inflate)
    except OSError as error:  # a copy is optional: the archive is read as it is
        log.warning("imageloader: no plain copy of %s: %s", archive, error)
        return None


# --------------------------------------------------------------------------------------------
# Where, and whether it fits


def _candidates(archive: str, setting: PlainCopy) -> list[str]:
    cached_name = (f"{os.path.basename(archive)}."
                   f"{hashlib.sha1(os.path.abspath(archive).encode()).hexdigest()[:12]}"
                   f"{COPY_SUFFIX}")
    if setting.folder is not None:
        return [os.path.join(setting.folder, cached_name)]
    return [archive + COPY_SUFFIX, os.path.join(default_cache_folder(), cached_name)]


def _target(archive: str, setting: PlainCopy) -> str | None:
    """The first candidate place that is writable and has room for the copy."""
    need = os.path.getsize(archive)  # a tar of JPEGs is about its .tgz's size, not smaller
    for copy in _candidates(archive, setting):
        folder = os.path.dirname(copy) or "."
        if folder != (os.path.dirname(archive) or "."):
            with contextlib.suppress(OSError):
                os.makedirs(folder, exist_ok=True)
        if not _writable(folder):
            continue
        room = _room(folder, setting)
        if room >= need:
            return copy
        log.info("imageloader: no plain copy of %s in %s: it needs ~%.1f GB, the limit "
                 "leaves %.1f GB",
                 archive, folder, need / 1e9, max(room, 0) / 1e9)
    return None


def _writable(folder: str) -> bool:
    return os.access(folder, os.W_OK)


def _room(folder: str, setting: PlainCopy) -> float:
    """Bytes a copy may take in `folder`: free space above the reserve, and the cap."""
    disk = os.statvfs(folder)
    room = disk.f_frsize * (disk.f_bavail - setting.keep_free * disk.f_blocks)
    return min(room, math.inf if setting.max_bytes is None else setting.max_bytes)


# --------------------------------------------------------------------------------------------
# Writing


class _CopyWriter:
    """Appends the tar stream to `<copy>.partial`; gives up (removing it) past its room or on a
    write error, never failing the pass that feeds it: a copy is optional, the scan is not."""

    def __init__(self, path: str, room: float):
        self.path, self.room = path, room
        self.file = open(path, "wb", buffering=0)
        self.written, self.problem = 0, None

    def __call__(self, offset: int, block: memoryview) -> None:
        if self.problem is not None:
            return
        if offset != self.written:
            self.give_up(f"the stream skipped from {self.written} to {offset}")
            return
        if self.written + len(block) > self.room:
            self.give_up(f"it grew past the {self.room / 1e9:.2f} GB the limit leaves")
            return
        size = len(block)
        try:
            while block:
                block = block[self.file.write(block):]
        except OSError as error:  # a full disk, say
            self.give_up(str(error))
            return
        self.written += size

    def give_up(self, problem: str) -> None:
        self.problem = problem
        self.file.close()
        with contextlib.suppress(OSError):
            os.remove(self.path)

    def finish(self) -> bool:
        """Close; True if the whole stream is in the file."""
        if self.problem is None:
            self.file.close()
        return self.problem is None


def _write(archive: str, target: str, setting: PlainCopy, limits: Limits,
           inflate: str) -> str | None:
    stamp, started = file_stamp(archive), time.perf_counter()
    partial = target + ".partial"  # one writer at a time (the lock): a crashed one's is reused
    writer = _CopyWriter(partial, _room(os.path.dirname(target) or ".", setting))
    log.info("imageloader: writing a plain copy of %s to %s", archive, target)
    try:
        if cached_image_count(archive) is None:  # the scan is due anyway: one inflate for both
            scan_archive(archive, tee=writer, limits=limits, inflate=inflate)
        else:
            _inflate_into(writer, archive, inflate)
    except Exception as error:  # a damaged archive: reading it will say so where it is read
        writer.give_up(f"{type(error).__name__}: {error}")
    complete = writer.finish()
    if complete and file_stamp(archive) != stamp:
        writer.give_up("the archive changed while it was copied")
        complete = False
    if not complete:
        log.info("imageloader: no plain copy of %s: %s", archive, writer.problem)
        return None
    os.replace(partial, target)  # atomic: the copy is whole or absent, never half there
    _write_manifest(archive, target, stamp)
    seconds = time.perf_counter() - started
    log.info("imageloader: plain copy of %s written (%.2f GB in %.1f s)", archive,
             writer.written / 1e9, seconds)
    return target


def _inflate_into(writer: _CopyWriter, archive: str, inflate: str) -> None:
    """Inflate the whole archive into the writer, with every core the inflater can use; the
    stream read to its end is what verifies gzip's CRC and length."""
    # Bounded: rapidgzip holds a few chunks in memory per thread.
    stream = open_stream(archive, inflate, threads=min(16, _cores()))
    try:
        block, offset = bytearray(_BLOCK), 0
        while writer.problem is None:
            n = stream.readinto(block)
            if not n:
                return
            writer(offset, memoryview(block)[:n])
            offset += n
    finally:
        stream.close()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# --------------------------------------------------------------------------------------------
# The key, and the lock


def _write_manifest(archive: str, copy: str, stamp: dict) -> None:
    payload = {"format": _FORMAT, "archive": os.path.abspath(archive), "archive_stamp": stamp,
               "copy_stamp": file_stamp(copy)}
    tmp = f"{copy}.json.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1)
    os.replace(tmp, copy + ".json")


def _is_valid(archive: str, copy: str) -> bool:
    """The manifest beside the copy matches the archive as it is and the copy as it is."""
    try:
        with open(copy + ".json", encoding="utf-8") as f:
            key = json.load(f)
        return (key.get("format") == _FORMAT and key.get("archive_stamp") == file_stamp(archive)
                and key.get("copy_stamp") == file_stamp(copy))
    except (OSError, ValueError, AttributeError):
        return False


@contextlib.contextmanager
def _locked(copy: str):
    """Hold the copy's lock; yields True if another process held it first (we waited)."""
    fd = os.open(copy + ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            waited = False
        except BlockingIOError:
            log.info("imageloader: waiting for another process writing %s", copy)
            fcntl.flock(fd, fcntl.LOCK_EX)
            waited = True
        yield waited
    finally:
        os.close(fd)  # releases the lock


def _is_gzip(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == _GZIP_MAGIC
    except OSError:
        return False
