"""Stage 1, read: stream `.tgz`/`.tar.gz`/`.tar` archives into labeled samples, never extracting.

Each archive is read once, front to back, in constant memory: `tarfile` in stream mode with its
member list cleared as we go (as webdataset does). The label is the member's parent folder
(`train/n01440764/x.JPEG` -> `n01440764`). Members that are not images are skipped and counted by
reason, never decoded and never silently dropped. The stream is read to its very end so that the
gzip CRC and length are verified and a corrupt header cannot pass for the end of the archive.
"""
from __future__ import annotations

import glob
import gzip
import hashlib
import io
import os
import re
import tarfile
from collections import Counter
from typing import BinaryIO, Iterable, Iterator, NamedTuple, Union

from .errors import ArchiveError, Limits, UnknownLabelError

Source = Union[str, os.PathLike, BinaryIO]
IMAGE_EXTENSIONS = frozenset({
    ".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm",
})
ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar")
_GZIP_MAGIC = b"\x1f\x8b"
_DRAIN_CHUNK = 1 << 20
# Control characters, and the surrogates that stand for bytes that are not UTF-8.
_BAD_CHARACTERS = re.compile("[\x00-\x1f\x7f\udc80-\udcff]")


class Member(NamedTuple):
    """An image member as found in the archive; `data` is None when only names were scanned."""

    archive: str
    index: int        # ordinal of the entry in the tar stream, counting every entry
    name: str         # normalized member path
    label: str        # class folder name
    data: bytes | None


class Sample(NamedTuple):
    """A member with its label resolved through the vocabulary: what decoding receives."""

    archive: str
    index: int
    name: str
    target: int
    data: bytes


# --------------------------------------------------------------------------------------------
# Sources and opening


def expand_sources(source: Source | Iterable[Source]) -> list[Source]:
    """One path, a glob, a file object, or a list of those -> a flat list; globs sorted."""
    items = [source] if isinstance(source, (str, os.PathLike)) or hasattr(source, "read") \
        else list(source)
    out: list[Source] = []
    for item in items:
        if hasattr(item, "read"):
            out.append(item)
            continue
        path = os.fspath(item)
        if glob.has_magic(path):
            matches = sorted(glob.glob(path))
            if not matches:
                raise FileNotFoundError(f"no archive matches the pattern {path!r}")
            out.extend(matches)
        elif not os.path.exists(path):
            raise FileNotFoundError(f"archive {path!r} does not exist")
        else:
            out.append(path)
    if not out:
        raise ValueError("no archives given")
    return out


def source_name(source: Source) -> str:
    if hasattr(source, "read"):
        return getattr(source, "name", None) or f"<{type(source).__name__} stream>"
    return os.fspath(source)


def available_inflaters() -> list[str]:
    found = []
    for name, module in (("rapidgzip", "rapidgzip"), ("isal", "isal.igzip")):
        try:
            __import__(module)
            found.append(name)
        except ImportError:
            pass
    return found + ["gzip"]


def choose_inflater(inflate: str, seekable_path: bool) -> str:
    """`auto` prefers rapidgzip (parallel, needs a path), then isal, then Python's gzip."""
    have = available_inflaters()
    if inflate == "auto":
        candidates = [n for n in have if n != "rapidgzip" or seekable_path]
        return candidates[0]
    if inflate not in ("rapidgzip", "isal", "gzip"):
        raise ValueError(f"inflate must be 'auto', 'rapidgzip', 'isal' or 'gzip', got {inflate!r}")
    if inflate not in have:
        raise ImportError(f"inflate={inflate!r} needs the {inflate} package "
                          f"(pip install 'imageloader[fast]')")
    if inflate == "rapidgzip" and not seekable_path:
        raise ValueError("rapidgzip needs a seekable file path, not a stream")
    return inflate


class _Prepended(io.RawIOBase):
    """A non-seekable stream with a few already-read bytes put back in front."""

    def __init__(self, head: bytes, rest: BinaryIO):
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer)
        if self._head:
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(view))
        view[:len(data)] = data
        return len(data)


def open_stream(source: Source, inflate: str = "auto", threads: int | None = None) -> BinaryIO:
    """Return a binary stream of the tar bytes: gzip is detected by its magic, not its suffix."""
    if hasattr(source, "read"):
        head = source.read(2)
        raw = io.BufferedReader(_Prepended(head, source), 1 << 16)
        if head != _GZIP_MAGIC:
            return raw
        if choose_inflater(inflate, seekable_path=False) == "isal":
            from isal import igzip
            return igzip.IGzipFile(fileobj=raw, mode="rb")
        return gzip.GzipFile(fileobj=raw, mode="rb")
    path = os.fspath(source)
    with open(path, "rb") as probe:
        head = probe.read(2)
    if head != _GZIP_MAGIC:
        return open(path, "rb", buffering=1 << 20)
    name = choose_inflater(inflate, seekable_path=True)
    if name == "rapidgzip":
        import rapidgzip
        return rapidgzip.open(path, parallelization=threads or min(8, os.cpu_count() or 1))
    if name == "isal":
        from isal import igzip
        # Not isal's threaded reader: it inflates 1 MiB ahead and raises a corruption on the
        # first read, which would name the wrong member.
        return igzip.open(path, "rb")
    return gzip.open(path, "rb")


# --------------------------------------------------------------------------------------------
# Walking the tar stream


class _StructureError(Exception):
    """Raised inside tarfile so it is not mistaken for a clean end of archive."""

    def __init__(self, problem: str, offset: int):
        super().__init__(problem)
        self.problem, self.offset = problem, offset


class _StrictTarInfo(tarfile.TarInfo):
    # tarfile treats a corrupt or truncated header after the first one as the end of the
    # archive, silently dropping everything after it. We turn those cases into errors.
    @classmethod
    def fromtarfile(cls, tar):
        try:
            return super().fromtarfile(tar)
        except tarfile.EOFHeaderError:
            raise
        except tarfile.EmptyHeaderError:
            if tar.offset == 0:
                raise
            raise _StructureError("archive ends without the end-of-archive marker "
                                  "(truncated)", tar.offset) from None
        except tarfile.TruncatedHeaderError:
            if tar.offset == 0:
                raise
            raise _StructureError("archive is truncated inside a tar header", tar.offset) from None
        except tarfile.InvalidHeaderError as error:
            if tar.offset == 0:
                raise
            raise _StructureError(f"corrupt tar header ({error})", tar.offset) from None


def classify(info: tarfile.TarInfo, limits: Limits) -> tuple[str | None, str | None, str]:
    """Return (label, skip_reason, normalized_name): exactly one of the first two is None."""
    if info.isdir():
        return None, "directory", info.name
    if info.issym() or info.islnk():
        return None, "link", info.name
    if not info.isfile() or info.issparse():
        return None, "special", info.name
    name, reason = _validated_name(info.name, limits)
    if reason:
        return None, reason, name
    parts = name.split("/")
    base = parts[-1]
    if base.startswith("._") or base == ".DS_Store" or "__MACOSX" in parts:
        return None, "macos_metadata", name
    if os.path.splitext(base)[1].lower() not in IMAGE_EXTENSIONS:
        return None, "not_image", name
    if len(parts) < 2:
        return None, "no_class_folder", name
    return parts[-2], None, name


def _validated_name(name: str, limits: Limits) -> tuple[str, str | None]:
    # A label may only come from a path we fully trust: these checks run before any use.
    if len(name) > limits.max_path_length:
        return name[:80] + "...", "bad_name"
    if _BAD_CHARACTERS.search(name):
        return name.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace"), \
            "bad_name"
    if "\\" in name or name.startswith("/"):
        return name, "bad_name"
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return name, "bad_name"
    return "/".join(parts), None


def iter_members(source: Source, *, skipped: Counter, limits: Limits = Limits(),
                 read_data: bool = True, inflate: str = "auto",
                 threads: int | None = None) -> Iterator[Member]:
    """Yield the image members of one archive in stream order; count everything else."""
    archive = source_name(source)
    try:
        stream = open_stream(source, inflate, threads)
    except OSError as error:
        raise ArchiveError(archive, f"cannot open: {error}") from error
    state = {"index": -1, "name": None, "data_at": None, "size": 0}
    try:
        yield from _walk(stream, archive, skipped, limits, read_data, state)
    except ArchiveError:
        raise
    except _StructureError as error:
        raise ArchiveError(archive, error.problem, member=state["name"], index=state["index"] + 1,
                           offset=error.offset) from None
    except tarfile.ReadError as error:
        if "unexpected end of data" not in str(error) or state["data_at"] is None:
            raise _archive_error(archive, error, state, source) from error
        # tarfile skipping the data of the last member (not read: a scan, or a skipped member)
        raise ArchiveError(archive, f"unexpected end of data: the archive ends inside this "
                           f"member's {state['size']} bytes (truncated)", member=state["name"],
                           index=state["index"], offset=state["data_at"]) from None
    except Exception as error:  # zlib, isal and rapidgzip each raise their own types
        raise _archive_error(archive, error, state, source) from error
    finally:
        if not hasattr(source, "read"):
            stream.close()


def _archive_error(archive, error, state, source) -> ArchiveError:
    return ArchiveError(archive, _describe(error, _is_gzip(source)), member=state["name"],
                        index=max(state["index"], 0))


def _is_gzip(source) -> bool:
    if hasattr(source, "read"):
        return False
    try:
        with open(source, "rb") as f:
            return f.read(2) == _GZIP_MAGIC
    except OSError:
        return False


def _walk(stream, archive, skipped, limits, read_data, state) -> Iterator[Member]:
    try:
        tar = tarfile.open(fileobj=stream, mode="r|", tarinfo=_StrictTarInfo)
    except tarfile.ReadError as error:
        if _looks_inflated_empty(error, archive):
            raise ArchiveError(archive, "the gzip stream is truncated or corrupt: nothing "
                               "could be inflated from it") from None
        raise ArchiveError(archive, f"not a tar or gzip-compressed tar archive ({error})") \
            from None
    seen: set[bytes] = set()
    for info in tar:
        tar.members.clear()  # stream mode would otherwise keep every TarInfo: memory grows
        state["index"] += 1
        state["name"] = info.name
        state["data_at"], state["size"] = info.offset_data, info.size
        label, reason, name = classify(info, limits)
        if reason is None:
            reason = _size_or_duplicate_problem(info, name, seen, limits)
        if reason:
            skipped[reason] += 1
            continue
        data = _read_data(tar, info, archive, state["index"]) if read_data else None
        yield Member(archive, state["index"], name, label, data)
    _check_trailer(tar, archive, state)


def _size_or_duplicate_problem(info, name, seen, limits) -> str | None:
    if info.size == 0:
        return "empty"
    if info.size > limits.max_member_bytes:
        return "too_large"  # decided from the header: the data is skipped, never buffered
    key = hashlib.blake2b(name.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    if key in seen:
        return "duplicate"  # the first occurrence wins, deterministically
    seen.add(key)
    return None


def _read_data(tar, info, archive, index) -> bytes:
    # Reading the stream directly skips extractfile's per-member file object; tarfile.next()
    # then skips the block padding itself.
    data = tar.fileobj.read(info.size)
    if len(data) != info.size:
        raise ArchiveError(archive, f"unexpected end of data: member needs {info.size} bytes, "
                           f"archive has {len(data)}", member=info.name, index=index,
                           offset=info.offset_data)
    return data


def _check_trailer(tar, archive, state) -> None:
    # Read to the very end: this is what makes gzip verify its CRC and length, and anything
    # that is not zero padding after the end marker means members we could not see.
    offset = tar.offset
    while True:
        chunk = tar.fileobj.read(_DRAIN_CHUNK)
        if not chunk:
            return
        if chunk.count(0) != len(chunk):
            raise ArchiveError(archive, "non-zero data after the end-of-archive marker "
                               "(a corrupt header or concatenated archives)",
                               member=state["name"], index=state["index"], offset=offset)


def _looks_inflated_empty(error, archive: str) -> bool:
    # rapidgzip hands back no bytes at all for some truncated gzip files: tarfile then says
    # "empty file", which must not read as "this is not an archive".
    return "empty file" in str(error) and _is_gzip(archive)


def _describe(error: BaseException, gzip_file: bool = False) -> str:
    text = str(error) or type(error).__name__
    if "crc" in text.lower():
        return f"gzip checksum mismatch, the archive is corrupt ({text})"
    if isinstance(error, EOFError) or "ended before" in text:
        return f"archive is truncated ({text})"
    if gzip_file and "std::exception" in text:
        return f"the gzip stream is truncated or corrupt (rapidgzip: {text})"
    return f"{type(error).__name__}: {text}"


# --------------------------------------------------------------------------------------------
# Labels


def iter_samples(members: Iterable[Member], vocab, *, skipped: Counter,
                 unknown_labels: str = "raise") -> Iterator[Sample]:
    """Resolve each member's class folder through the vocabulary."""
    index = vocab.index
    for m in members:
        target = index.get(m.label)
        if target is None:
            if unknown_labels == "raise":
                raise UnknownLabelError(m.label, m.archive, m.name)
            skipped["unknown_label"] += 1
            continue
        yield Sample(m.archive, m.index, m.name, target, m.data)
