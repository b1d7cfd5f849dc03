"""Stage 1, read: stream `.tgz`/`.tar.gz`/`.tar` archives into labeled samples, never extracting.

Each archive is read once, front to back, in constant memory: the inflated stream is walked in
blocks of a few MiB; common headers are parsed here, every other one (pax, GNU long names,
links, damage) by tarfile's own parser. The label is the member's parent folder
(`train/n01440764/x.JPEG` -> `n01440764`). Members that are not images are skipped and counted by
reason, never decoded and never silently dropped. The stream is read to its very end so that the
gzip CRC and length are verified and a corrupt header cannot pass for the end of the archive.
"""
from __future__ import annotations

import contextlib
import glob
import gzip
import hashlib
import io
import itertools
import os
import re
import tarfile
import unicodedata
from collections import Counter
from typing import BinaryIO, Iterable, Iterator, NamedTuple, Union

from . import remote
from .errors import ArchiveError, Limits, UnknownLabelError, is_split_name

Source = Union[str, os.PathLike, BinaryIO]
IMAGE_EXTENSIONS = frozenset({
    ".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".pbm",
})
ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar")
# A member that is an archive itself is counted apart from other non-images ("archive"): a
# tar of class tars (ImageNet's ILSVRC2012_img_train.tar) is one for pack to flatten.
MEMBER_ARCHIVE_SUFFIXES = ARCHIVE_SUFFIXES + (".zip",)


def has_image_extension(name: str) -> bool:
    """Whether a file's name ends in one of IMAGE_EXTENSIONS (any case)."""
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


_GZIP_MAGIC = b"\x1f\x8b"
_DRAIN_CHUNK = 1 << 20
_READ_CHUNK = 4 << 20     # bytes asked of the inflater at once
_LOCATE_CHUNK = 16 << 10   # ... and while locating damage
RAPIDGZIP_CHUNK = 4 << 20  # rapidgzip's unit of parallel work: it notes a seek checkpoint
                           # per chunk, where the scan's regions (index.py) may start
BLOCKSIZE = tarfile.BLOCKSIZE
# Control characters (and surrogates, which _readable_name leaves none of).
_BAD_CHARACTERS = re.compile("[\x00-\x1f\x7f\udc80-\udcff]")
_UNDECODED = re.compile("[\udc80-\udcff]")  # surrogateescape's stand-ins for non-UTF-8 bytes
# Names are UTF-8 (the default of tar, pax and git); bytes that are not stay in the name as
# surrogates until _readable_name decodes their path component as cp1252 / Latin-1.
NAME_ENCODING = "utf-8"


class Member(NamedTuple):
    """An image member as found in the archive; `data` is None when only names were scanned."""

    archive: str
    index: int        # ordinal of the entry in the tar stream, counting every entry
    name: str         # normalized member path
    label: str        # class folder name
    data: bytes | None


class Region(NamedTuple):
    """A stretch of one archive that a reader can walk on its own: it starts at a tar header
    the scan found at an inflater checkpoint (see `index.py`), so reading it inflates only it."""

    path: str
    start: int          # stream offset of its first header
    end: int | None     # where the next region starts; None: it runs to the archive's end
    entry: int          # ordinal of its first entry in the whole stream
    images: int         # image members in it, as the scan counted them
    index: str | None   # the rapidgzip index file; None for an uncompressed tar


class Sample(NamedTuple):
    """A member with its label resolved through the vocabulary: what decoding receives."""

    archive: str
    index: int
    name: str
    target: int
    data: bytes


# --------------------------------------------------------------------------------------------
# Sources and opening


def expand_sources(source: Source | Iterable[Source],
                   options: remote.RemoteOptions | None = None) -> list[Source]:
    """One path, a glob, a file object, or a list of those -> a flat list; globs sorted.
    URLs (remote.py) become `remote.Url`s fetched with `options`."""
    items = [source] if isinstance(source, (str, os.PathLike)) or hasattr(source, "read") \
        else list(source)
    out: list[Source] = []
    for item in items:
        if hasattr(item, "read"):
            out.append(item)
            continue
        path = os.fspath(item)
        if remote.is_url(path):
            out.extend(remote.expand(path, options))
        elif glob.has_magic(path):
            matches = sorted(glob.glob(path))
            if not matches:
                raise FileNotFoundError(f"no archive matches the pattern {path!r}")
            out.extend(matches)
        elif not os.path.exists(path):
            raise FileNotFoundError(f"archive {path!r} does not exist")
        elif os.path.isdir(path):
            raise IsADirectoryError(
                f"{path!r} is a folder: pass an archive ({', '.join(ARCHIVE_SUFFIXES)}) or a "
                f"glob of archives such as '{os.path.join(path, '*.tgz')}'; "
                f"python -m imageloader pack {path} {path.rstrip('/') or 'images'}.tgz packs "
                f"a folder of <class>/<file> images into one")
        else:
            out.append(path)
    if not out:
        raise ValueError("no archives given")
    return out


def source_name(source: Source | Region) -> str:
    if isinstance(source, Region):
        return source.path
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


# rapidgzip reads the bytes after a gzip member as the next member's header: more than a few
# zero bytes there (the padding that tapes and some packers add, which gzip, tar and Python's
# gzip skip) make it refuse the whole file. So it is handed such a file ending where they begin.
_PADDING_TOLERATED = 4  # zero bytes rapidgzip 0.16 reads past; and the most a trailer ends in
                        # (its length's high bytes): cut after that many, it reads either
_TAIL_STEP = 64 << 10


def gzip_end(size: int, read_at) -> int:
    """Where a gzip file's data ends for rapidgzip: `size`, or, after more trailing zero bytes
    than it reads past, a few bytes into them (the trailer's own zeros and a little padding).
    `read_at(start, end)` gives the file's bytes in [start, end)."""
    zeros, end = 0, size
    while end > 0:
        start = max(0, end - _TAIL_STEP)
        block = read_at(start, end)
        kept = block.rstrip(b"\0")
        zeros += len(block) - len(kept)
        if kept:
            break
        end = start
    return size if zeros <= _PADDING_TOLERATED else size - zeros + _PADDING_TOLERATED


class _FileHead(io.RawIOBase):
    """A local file's first `end` bytes, read as a file of that size (see gzip_end)."""

    def __init__(self, path: str, end: int):
        self._file, self._end = open(path, "rb", buffering=0), end

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._file.tell()

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END:
            offset, whence = self._end + offset, io.SEEK_SET
        return self._file.seek(offset, whence)

    def readinto(self, buffer) -> int:
        n = max(0, min(len(buffer), self._end - self._file.tell()))
        return self._file.readinto(memoryview(buffer)[:n]) if n else 0

    def close(self) -> None:
        self._file.close()
        super().close()


def _for_rapidgzip(path: str) -> str | _FileHead:
    """The path, or the file less its padding where rapidgzip would refuse it (gzip_end)."""
    with open(path, "rb", buffering=0) as f:
        def read_at(start: int, end: int) -> bytes:
            f.seek(start)
            return f.read(end - start)

        size = f.seek(0, io.SEEK_END)
        end = gzip_end(size, read_at)
    return path if end == size else _FileHead(path, end)


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
    if remote.is_url(source):
        return remote.open_stream(source, inflate, threads)
    path = os.fspath(source)
    with open(path, "rb") as probe:
        head = probe.read(2)
    if head != _GZIP_MAGIC:
        return open(path, "rb", buffering=1 << 20)
    name = choose_inflater(inflate, seekable_path=True)
    if name == "rapidgzip":
        import rapidgzip
        return rapidgzip.RapidgzipFile(_for_rapidgzip(path),
                                       parallelization=threads or min(8, os.cpu_count() or 1),
                                       chunk_size=RAPIDGZIP_CHUNK)
    if name == "isal":
        from isal import igzip
        # Not isal's threaded reader: it inflates 1 MiB ahead and raises a corruption on the
        # first read, which would name the wrong member.
        return igzip.open(path, "rb")
    return gzip.open(path, "rb")


def open_region(region: Region, threads: int | None = None) -> BinaryIO:
    """The archive's inflated stream positioned at the region's first header."""
    if remote.is_url(region.path):
        return remote.open_region(region, threads)
    if region.index is None:
        stream = open(region.path, "rb", buffering=0)
    else:
        stream = open_stream(region.path, "rapidgzip", threads)
        # With the checkpoints of the scan, seeking inflates from the checkpoint at the
        # region's start, not from the start of the archive.
        stream.import_index(region.index)
    stream.seek(region.start)
    return stream


# --------------------------------------------------------------------------------------------
# Walking the tar stream


class _StructureError(Exception):
    """A header problem past the first header: never to be mistaken for a clean end."""

    def __init__(self, problem: str, offset: int):
        super().__init__(problem)
        self.problem, self.offset = problem, offset


class _Header(NamedTuple):
    name: str
    size: int
    kind: str           # "file", "dir", "link" or "special"
    offset: int         # of the (first) header block in the tar stream
    offset_data: int
    next_offset: int    # where the next header starts
    sparse: tuple = ()  # a sparse file's (offset, size) pieces (tar -S): stored one after
                        # another from offset_data, zeros between them; `size` is the file's


class _Blocks:
    """The inflated tar stream read in large blocks, with the position tarfile would report.

    tarfile's stream mode asks the inflater for 10 KiB at a time and joins the pieces: several
    calls into the inflater per member, which made the tar walk the reader's wall. Here one
    call fills a reused ~4 MiB block and members are copied out of it.

    Reading ahead must not move the blame for damaged compressed data: an inflater raises on
    the call that meets the damage, up to a block ahead of the member being walked. So when a
    block fails, the stream is opened again (`reopen`), brought back to where the good bytes
    end and read on in small steps: the error then surfaces at the member that holds it.
    """

    def __init__(self, stream: BinaryIO, reopen=None, chunk: int = _READ_CHUNK, origin: int = 0,
                 stop: int | None = None):
        self.stream, self.reopen, self.chunk = stream, reopen, chunk
        self.stop = stop  # a region's end: blocks never reach past it
        # One reused block: a fresh 4 MiB bytes object per read is fresh memory from the
        # kernel, page-faulted in every time. `buf` is a view of it (or, briefly, bytes).
        self._store = bytearray()
        self.origin = origin  # where `stream` (and a reopened one) starts: a region's start
        self.buf, self.pos, self.base = memoryview(b""), 0, origin  # base: offset of buf[0]
        self.tee = None  # told (offset, block) of every block read (iter_members)

    def tell(self) -> int:
        return self.base + self.pos

    def _refill(self, need: int) -> bool:
        """Replace the block (everything handed out was copied): False at the end."""
        self.base += len(self.buf)
        size = self._block_size(need)
        if len(self._store) < size:
            self.buf, self._store = memoryview(b""), bytearray(size)
        try:
            got = self._read_into(memoryview(self._store)[:size])
        except Exception as error:
            # A remote archive that cannot be fetched is not damaged: nothing to locate.
            if self.reopen is None or self.chunk <= _LOCATE_CHUNK \
                    or isinstance(error, remote.RemoteError):
                raise
            self._read_on_in_small_steps()
            got = self._read_into(memoryview(self._store)[:self._block_size(need)])
        self.buf, self.pos = memoryview(self._store)[:got], 0
        if self.tee is not None and got:
            self.tee(self.base, self.buf)
        return got > 0

    def _block_size(self, need: int) -> int:
        # Reading past a region's end would inflate (and, for a remote archive, fetch) what
        # the next region's reader reads anyway.
        room = self.chunk if self.stop is None else self.stop - self.base
        return max(need, min(self.chunk, room)) if room > 0 else max(self.chunk, need)

    def _read_into(self, view: memoryview) -> int:
        if hasattr(self.stream, "readinto"):
            return self.stream.readinto(view) or 0
        data = self.stream.read(len(view))
        view[:len(data)] = data
        return len(data)

    def _read_on_in_small_steps(self) -> None:
        stream = self.reopen()
        done = self.origin
        while done < self.base:  # these bytes inflated fine the first time
            data = stream.read(min(self.chunk, self.base - done))
            if not data:
                break  # the file changed under us: the next read reports what is there
            done += len(data)
        with contextlib.suppress(Exception):
            self.stream.close()
        self.stream, self.chunk = stream, _LOCATE_CHUNK

    def read(self, n: int) -> bytes:
        end = self.pos + n
        if end <= len(self.buf):
            self.pos = end
            return bytes(self.buf[end - n:end])
        parts = [bytes(self.buf[self.pos:])]  # copied: the next refill overwrites the block
        got = len(parts[0])
        self.pos = len(self.buf)
        while got < n and self._refill(n - got):
            take = min(n - got, len(self.buf))
            parts.append(bytes(self.buf[:take]))
            self.pos, got = take, got + take
        return b"".join(parts)

    def unread(self, data: bytes) -> None:
        """Put back what the last read returned (a header the fast parser declined)."""
        if self.pos >= len(data) and self.buf[self.pos - len(data):self.pos] == data:
            self.pos -= len(data)
            return
        at = self.tell() - len(data)   # it straddled two blocks: rebuild the buffer
        self.buf, self.pos, self.base = memoryview(data + self.buf[self.pos:]), 0, at

    def skip(self, n: int) -> int:
        """Discard up to n bytes without holding them; returns how many there were."""
        done = 0
        while done < n:
            if self.pos == len(self.buf) and not self._refill(0):
                break
            step = min(n - done, len(self.buf) - self.pos)
            self.pos += step
            done += step
        return done


class _TarState:
    """What `tarfile.TarInfo.fromtarfile` reads from a TarFile: we use tarfile's own parser for
    every header the fast path declines (pax and GNU extensions, links, damaged headers)."""

    def __init__(self, blocks: _Blocks):
        self.fileobj, self.offset = blocks, 0
        self.encoding, self.errors = NAME_ENCODING, "surrogateescape"
        self.pax_headers: dict = {}


_FAST_KINDS = {b"0": "file", b"\0": "file", b"5": "dir"}
# Global pax keys that change nothing we read: after any other, tarfile parses every header.
_HARMLESS_GLOBAL_PAX = frozenset({"comment", "mtime", "atime", "ctime", "uid", "gid", "uname",
                                  "gname", "hdrcharset"})


def _nts(field: bytes) -> bytes:
    end = field.find(b"\0")
    return field if end < 0 else field[:end]


def _parse_plain(block: bytes, offset: int) -> _Header | None:
    """The common header (ustar/GNU magic, file or directory, octal fields, valid checksum),
    parsed as tarfile.TarInfo.frombuf would; None for anything else."""
    if block[257:262] != b"ustar" or len(block) != BLOCKSIZE:
        return None
    kind = _FAST_KINDS.get(block[156:157])
    if kind is None or block[124] & 0x80:  # base-256 size: leave it to tarfile
        return None
    try:
        size = int(_nts(block[124:136]).strip() or b"0", 8)
        checksum = int(_nts(block[148:156]).strip() or b"0", 8)
    except ValueError:
        return None
    if checksum != 256 + sum(block) - sum(block[148:156]):
        return None  # maybe the signed variant, or damage: tarfile decides
    name = _nts(block[:100]).decode(NAME_ENCODING, "surrogateescape")
    if kind == "file" and block[156] == 0 and name.endswith("/"):
        kind = "dir"  # old V7 style: a regular file with a trailing slash
    if kind == "dir":
        name = name.rstrip("/")
    prefix = _nts(block[345:500])
    if prefix:
        name = prefix.decode(NAME_ENCODING, "surrogateescape") + "/" + name
    data = offset + BLOCKSIZE
    end = data + ((size + BLOCKSIZE - 1) // BLOCKSIZE) * BLOCKSIZE if kind == "file" else data
    return _Header(name, size, kind, offset, data, end)


def _parse_with_tarfile(tar: _TarState, offset: int) -> _Header | None:
    """tarfile's full header parser; None at the end-of-archive block."""
    try:
        info = tarfile.TarInfo.fromtarfile(tar)
    except tarfile.EOFHeaderError:
        return None
    except tarfile.HeaderError as error:
        if offset == 0 and not isinstance(error, tarfile.SubsequentHeaderError):
            raise tarfile.ReadError("empty file" if isinstance(error, tarfile.EmptyHeaderError)
                                    else str(error)) from None
        raise _StructureError(_header_problem(error), offset) from None
    if info.isdir():
        kind = "dir"
    elif info.issym() or info.islnk():
        kind = "link"
    elif info.isfile():
        kind = "file"
    else:
        kind = "special"
    return _Header(info.name, info.size, kind, info.offset, info.offset_data, tar.offset,
                   tuple(info.sparse) if info.issparse() else ())


def _header_problem(error: tarfile.HeaderError) -> str:
    if isinstance(error, tarfile.EmptyHeaderError):
        return "archive ends without the end-of-archive marker (truncated)"
    if isinstance(error, tarfile.TruncatedHeaderError):
        return "archive is truncated inside a tar header"
    return f"corrupt tar header ({error})"


def _headers(blocks: _Blocks, tar: _TarState, stop: int | None) -> Iterator[_Header]:
    """Every header of the stream in order, up to offset `stop` (a region's end); the caller
    moves `blocks` to `next_offset`."""
    while True:
        offset = blocks.tell()
        if stop is not None and offset >= stop:
            if offset > stop:  # the sidecar's regions do not fit this archive
                raise _StructureError(f"no tar header at offset {stop}, where the archive's "
                                      f"index says a region starts (stale index?)", offset)
            return
        block = blocks.read(BLOCKSIZE)
        header = None if _global_pax_matters(tar) else _parse_plain(block, offset)
        if header is None:
            blocks.unread(block)
            header = _parse_with_tarfile(tar, offset)
            if header is None:
                return
        yield header


def _global_pax_matters(tar: _TarState) -> bool:
    """A global pax header that changes how later headers read: tarfile parses them all, and
    no region may start after it (a reader starting there would not know it)."""
    return bool(tar.pax_headers.keys() - _HARMLESS_GLOBAL_PAX)


def classify(header: _Header, limits: Limits) -> tuple[str | None, str | None, str]:
    """Return (label, skip_reason, normalized_name): exactly one of the first two is None."""
    if header.kind != "file":
        return None, ("directory" if header.kind == "dir" else header.kind), header.name
    name, reason = _validated_name(_readable_name(header.name), limits)
    if reason:
        return None, reason, name
    parts = name.split("/")
    base = parts[-1]
    if base.startswith("._") or base == ".DS_Store" or "__MACOSX" in parts:
        return None, "macos_metadata", name
    if base.startswith(".") or (len(parts) > 1 and parts[-2].startswith(".")):
        # A hidden image or class folder is no class's data: Jupyter's .ipynb_checkpoints/
        # copies, thumbnails, .git/ (pack leaves them out). Folders above the class folder
        # may be hidden (an archive made of .cache/datasets/...).
        return None, "hidden", name
    if not has_image_extension(base):
        return None, ("archive" if base.lower().endswith(MEMBER_ARCHIVE_SUFFIXES)
                      else "not_image"), name
    if len(parts) < 2:
        return None, "no_class_folder", name
    return class_name(parts[-2]), None, name


def class_name(folder: str) -> str:
    """A class folder's name in Unicode's composed form (NFC): macOS writes names decomposed
    (NFD), so "crème" from a Mac and from Linux look alike and differ as strings; one class,
    not two, and the same target in a train and a val archive made on different systems."""
    return unicodedata.normalize("NFC", folder)


def split_folder(name: str) -> str | None:
    """The nearest folder above an image's class folder whose name says "split" (train, val,
    ..., train2017: errors.is_split_name), in lower case: `imagenette2/train/n01440764/x.jpg`
    and `Train/animals/cat/x.jpg` -> "train", `coco/val2017/cat/x.jpg` -> "val2017"; None for
    `cat/x.jpg` or `data/cat/x.jpg`. Lower case because a split is named by its role, not its
    spelling: `Val/` in one archive and `val/` in another are one split, and
    `Options(split="Val")` reads either."""
    above = name.split("/")[:-2]
    return next((part.lower() for part in reversed(above) if is_split_name(part)), None)


def class_place(name: str) -> str:
    """Where an image's class folder lies: the folders above it, less split folders:
    `data_256/c/church/outdoor/1.jpg` -> "data_256/c/church", `imagenette2/train/n01/x.jpg`
    and `imagenette2/val/n01/y.jpg` -> "imagenette2". One class name in two places is two
    folders read as one class (vocab.ClassPlaces)."""
    return "/".join(part for part in name.split("/")[:-2] if not is_split_name(part))


def split_names(split: str | tuple[str, ...] | None) -> tuple[str, ...]:
    """The split folders that Options.split (as errors.check_split returns it) reads; none
    for None (every image)."""
    return () if split is None else (split,) if isinstance(split, str) else split


def in_split(folder: str | None, split: str | tuple[str, ...] | None) -> bool:
    """Whether an image below split folder `folder` (split_folder) is one that `split`
    reads."""
    return split is None or folder in split_names(split)


def _readable_name(name: str) -> str:
    """The member name with each path component that is not valid UTF-8 decoded as Windows-1252
    (Latin-1 where cp1252 leaves a byte undefined).

    Archives written on Windows or by old tools (tarfile's encoding="latin-1") store names in
    a legacy 8-bit encoding. Every byte then maps to a character, so such an image keeps its
    class folder and name instead of being skipped; cp1252 agrees with Latin-1 on its letters
    and has printable characters (quotes, dashes, the euro) where Latin-1 has control codes.
    Decoding per component keeps a UTF-8 class folder the same class whatever encoding its
    file names have. The scan, the sidecar and the readers all see names through here.
    """
    if not _UNDECODED.search(name):
        return name
    parts = name.encode(NAME_ENCODING, "surrogateescape").split(b"/")
    return "/".join(_decode_component(part) for part in parts)


def _decode_component(part: bytes) -> str:
    try:
        return part.decode(NAME_ENCODING)
    except UnicodeDecodeError:
        pass
    try:
        return part.decode("cp1252")
    except UnicodeDecodeError:
        return part.decode("latin-1")


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


def iter_members(source: Source | Region, *, skipped: Counter, limits: Limits = Limits(),
                 read_data: bool = True, inflate: str = "auto", threads: int | None = None,
                 recorder=None, opened: dict | None = None, tee=None,
                 on_skip=None) -> Iterator[Member]:
    """Yield the image members of one archive (or one region of it) in stream order; count
    everything else (and tell `on_skip(name, reason)` of it, where given).

    `recorder` (the scan's, see index.py) is told every header where a region could start and
    gets the stream at the end. `opened` keeps region streams open between regions of the
    same archive (their index is loaded once); the caller closes them. `tee(offset, block)`
    is given every block of the (inflated) tar stream as it is read: the plain copy
    (cache.py) is written from the scan this way, without inflating a second time.
    """
    archive = source_name(source)
    region = source if isinstance(source, Region) else None
    try:
        stream = _open_source(source, inflate, threads, opened)
    except OSError as error:
        raise ArchiveError(archive, f"cannot open: {error}") from error
    state = {"index": region.entry - 1 if region else -1, "name": None, "data_at": None,
             "size": 0}
    keep = region is not None and opened is not None
    try:
        reopen = None if hasattr(source, "read") else (
            (lambda: open_region(region, threads)) if region
            else (lambda: open_stream(source, inflate, threads)))
        yield from _walk(stream, archive, skipped, limits, read_data, state, reopen, region,
                         recorder, tee, on_skip)
        if recorder is not None:
            recorder.finish(stream)
    except ArchiveError:
        keep = False
        raise
    except _StructureError as error:
        keep = False
        raise ArchiveError(archive, error.problem, member=state["name"], index=state["index"] + 1,
                           offset=error.offset) from None
    except Exception as error:  # zlib, isal and rapidgzip each raise their own types
        keep = False
        raise _archive_error(archive, error, state, source) from error
    finally:
        if not hasattr(source, "read") and not keep:
            if opened is not None and region is not None:
                opened.pop((region.path, region.index), None)
            stream.close()


def _open_source(source, inflate: str, threads: int | None, opened: dict | None) -> BinaryIO:
    if not isinstance(source, Region):
        return open_stream(source, inflate, threads)
    if opened is None:
        return open_region(source, threads)
    key = (source.path, source.index)
    stream = opened.get(key)
    if stream is None or stream.closed:
        stream = opened[key] = open_region(source, threads)
    elif hasattr(stream, "enter_region"):
        stream.enter_region(source)  # a remote archive: fetch this region's bytes only
    else:
        stream.seek(source.start)
    return stream


def _archive_error(archive, error, state, source) -> ArchiveError:
    return ArchiveError(archive, _describe(error, is_gzip(source)), member=state["name"],
                        index=max(state["index"], 0))


def is_gzip(source) -> bool:
    """Whether an archive (a path, a URL or a region) is gzip-compressed, by its first bytes;
    False for a stream or a file that cannot be read (its reader says why)."""
    if isinstance(source, Region):
        return source.index is not None
    return _first_bytes(source, 2) == _GZIP_MAGIC


def _first_bytes(source, n: int) -> bytes:
    """A file's or URL's first n bytes; none for a stream (read once) or what cannot be read."""
    if hasattr(source, "read"):
        return b""
    try:
        if remote.is_url(source):
            return remote.head(source, n)
        with open(source, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


# Archives the loader does not read, told by their first bytes, and how to make a tar of one
# (every member kept as it is). A compressed tar becomes a plain one: JPEG bytes barely
# compress, and a plain tar is read with no inflating (of a .tgz the loader keeps a plain copy).
_OTHER_FORMATS = (
    (b"PK\x03\x04", "a zip file", "python -m imageloader pack {name} OUT.tgz"),
    (b"BZh", "bzip2-compressed", "bzip2 -dc {name} > OUT.tar"),
    (b"\xfd7zXZ\x00", "xz-compressed", "xz -dc {name} > OUT.tar"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "zstd -dc {name} > OUT.tar"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive", "7z x {name} -oFOLDER, then python -m "
     "imageloader pack FOLDER OUT.tgz"),
    (b"Rar!\x1a\x07", "a RAR archive", "unrar x {name} FOLDER/, then python -m imageloader "
     "pack FOLDER OUT.tgz"),
)


def _not_a_tar(archive: str, error: BaseException) -> str:
    """Why an archive's first header is not a tar header: what the file is instead, when its
    first bytes say, with the command that makes a .tgz of it."""
    head = _first_bytes(archive, 8)
    for magic, kind, remedy in _OTHER_FORMATS:
        if head.startswith(magic):
            return (f"{kind}: the loader reads tar archives, gzip-compressed or plain (.tgz, "
                    f".tar.gz, .tar); {remedy.format(name=archive)} makes one")
    return f"not a tar or gzip-compressed tar archive ({error})"


def _walk(stream, archive, skipped, limits, read_data, state, reopen, region,
          recorder, tee=None, on_skip=None) -> Iterator[Member]:
    # A stream given by the caller cannot be opened again to locate damage: read it in small
    # steps from the start, as tarfile does.
    blocks = _Blocks(stream, reopen, _READ_CHUNK if reopen else _LOCATE_CHUNK,
                     region.start if region else 0, region.end if region else None)
    blocks.tee = tee
    try:
        yield from _walk_blocks(blocks, archive, skipped, limits, read_data, state,
                                region.end if region else None, recorder, on_skip)
    finally:
        if blocks.stream is not stream:
            blocks.stream.close()


def _walk_blocks(blocks, archive, skipped, limits, read_data, state, stop=None,
                 recorder=None, on_skip=None) -> Iterator[Member]:
    seen: set[bytes] = set()
    tar = _TarState(blocks)
    headers = _headers(blocks, tar, stop)
    try:
        first = next(headers, None)
    except tarfile.ReadError as error:
        if _looks_inflated_empty(error, archive):
            raise ArchiveError(archive, "the gzip stream is truncated or corrupt: nothing "
                               "could be inflated from it") from None
        raise ArchiveError(archive, _not_a_tar(archive, error)) from None
    if first is None:
        if stop is None:
            _check_trailer(blocks, archive, state)
        return
    images = 0
    for header in itertools.chain([first], headers):
        state["index"] += 1
        if recorder is not None and not _global_pax_matters(tar):
            recorder.header(header.offset, state["index"], images)
        state["name"] = _readable_name(header.name)  # for messages: no lone surrogates
        state["data_at"], state["size"] = header.offset_data, header.size
        label, reason, name = classify(header, limits)
        if reason is None:
            reason = _size_or_duplicate_problem(header, name, seen, limits)
        data = None
        if reason is None and read_data:
            data = _read_data(blocks, header, archive, state["index"])
        _move_to_next(blocks, header, archive, state)
        if reason:
            skipped[reason] += 1
            if on_skip is not None:
                on_skip(state["name"], reason)
            continue
        images += 1
        yield Member(archive, state["index"], name, label, data)
    if stop is None:  # a region ends at the next one's header; the archive at its trailer
        _check_trailer(blocks, archive, state)


def _size_or_duplicate_problem(header, name, seen, limits) -> str | None:
    if header.size == 0:
        return "empty"
    if header.size > limits.max_member_bytes:
        return "too_large"  # decided from the header: the data is skipped, never buffered
    key = hashlib.blake2b(name.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    if key in seen:
        return "duplicate"  # the first occurrence wins, deterministically
    seen.add(key)
    return None


def _read_data(blocks, header, archive, index) -> bytes:
    stored = sum(size for _, size in header.sparse) if header.sparse else header.size
    data = blocks.read(stored)
    if len(data) != stored:
        raise ArchiveError(archive, f"unexpected end of data: member needs {stored} bytes, "
                           f"archive has {len(data)}", member=header.name, index=index,
                           offset=header.offset_data)
    return unsparse(data, header.size, header.sparse) if header.sparse else data


def unsparse(stored: bytes, size: int, pieces: tuple) -> bytes:
    """A sparse member's file (tar -S), as tar -x and tarfile write it: each stored piece
    ((offset, size) in `pieces`, their bytes one after another in `stored`) at its offset,
    zeros in the holes."""
    whole, at = bytearray(size), 0
    for offset, length in pieces:
        whole[offset:offset + length] = stored[at:at + length]
        at += length
    return bytes(whole)


def _move_to_next(blocks, header, archive, state) -> None:
    """Skip the rest of a member (all of it if not read) and its padding, as tarfile would:
    an archive that ends before the next header is truncated."""
    gap = header.next_offset - blocks.tell()
    if gap > 0 and blocks.skip(gap) < gap:
        raise ArchiveError(archive, f"unexpected end of data: the archive ends inside this "
                           f"member's {header.size} bytes (truncated)", member=header.name,
                           index=state["index"], offset=header.offset_data)


def _check_trailer(blocks, archive, state) -> None:
    # Read to the very end: this is what makes gzip verify its CRC and length, and anything
    # that is not zero padding after the end marker means members we could not see.
    offset = blocks.tell() - BLOCKSIZE  # the end marker's block, just read
    while True:
        chunk = blocks.read(_DRAIN_CHUNK)
        if not chunk:
            return
        if chunk.count(0) != len(chunk):
            raise ArchiveError(archive, "non-zero data after the end-of-archive marker "
                               "(a corrupt header or concatenated archives)",
                               member=state["name"], index=state["index"], offset=offset)


def _looks_inflated_empty(error, archive: str) -> bool:
    # rapidgzip hands back no bytes at all for some truncated gzip files: tarfile then says
    # "empty file", which must not read as "this is not an archive".
    return "empty file" in str(error) and is_gzip(archive)


def _describe(error: BaseException, gzip_file: bool = False) -> str:
    text = str(error) or type(error).__name__
    if "crc" in text.lower():
        return f"gzip checksum mismatch, the archive is corrupt ({text})"
    if isinstance(error, EOFError) or "ended before" in text:
        return f"archive is truncated ({text})"
    # Where a next gzip member should begin, rapidgzip and Python's and isal's gzip find
    # neither a header nor zero padding (gzip_end): bytes that may have held more members.
    if gzip_file and ("gzip/zlib header" in text or "Not a gzipped file" in text):
        return (f"the gzip data is followed by bytes that are not gzip (a damaged next member, "
                f"or trailing garbage; gzip -t tells which) ({text})")
    # rapidgzip on a cut file (an interrupted download) or damaged data: ISA-L's error, with
    # its thread and bit positions; its first clause says enough beside gzip -t.
    failed = re.search(r"Decoding failed with error code -?\d+: ([^!.]*)", text)
    if gzip_file and failed:
        return (f"the gzip data stops inflating here: the archive is truncated (an interrupted "
                f"download or copy?) or corrupt; gzip -t tells which (rapidgzip: "
                f"{failed.group(1)})")
    # rapidgzip says only "std::exception" (0.14) or "End of file reached!" (0.16).
    if gzip_file and ("std::exception" in text or "end of file" in text.lower()):
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
