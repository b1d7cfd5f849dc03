"""Archives where they live: fsspec URLs read with ranged requests, retried, and counted.

A URL source (`https://...`, `s3://...`, `gs://...`: whatever fsspec opens) is read through a
`RemoteFile`: a seekable file whose bytes come from ranged requests made one at a time by one
thread, so each reader process holds one connection. It reads ahead within a window and never
past it: the whole object when an archive is streamed (the scan, evaluation), and a region's
compressed bytes when training reads regions (index.py). Readers on many nodes, each given its
own regions, so fetch every byte of the archive about once per epoch.

Faults: a request that fails for a transient reason (5xx, 408/429, a connection reset or cut
mid-body, a timeout) is asked again with growing pauses, from the first byte not yet received;
the stream above never sees it. A permanent one (403, 404, anything else) raises `RemoteError`
at once, naming the URL.

The class sidecar and seek index of a remote archive live in a local cache directory
(`RemoteOptions.cache_dir`), keyed to the URL; the sidecar records the object's size and
version (ETag, or modification time) and a changed object is scanned again, as a changed local
file is. Credentials stay in `Url.target` and the storage options: names, messages and cache
keys use the `Url` itself, the URL without user info and query.
"""
from __future__ import annotations

import bisect
import datetime
import glob
import hashlib
import io
import json
import logging
import os
import random
import re
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)
REGION_BYTES = 64 << 20   # regions of a remote archive: each re-reads about one checkpoint
                          # interval (read.RAPIDGZIP_CHUNK) that its neighbour reads too,
                          # so this keeps the whole epoch within ~1.07 x the archive
_REGION_READ_CHUNK = 64 << 10  # at most the scan's checkpoint spacing: rapidgzip then inflates
                               # from exactly the index's checkpoints, which windows assume
_OUTSIDE_BYTES = 16 << 10  # a read outside the window (the gzip header) fetches at most this
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_LOCAL_SCHEMES = ("file", "local")
_VERSION_KEYS = ("ETag", "etag", "generation", "md5Hash", "LastModified", "Last-Modified",
                 "last_modified", "updated", "mtime")


@dataclass(frozen=True)
class RemoteOptions:
    """How URL sources are fetched; `Options.remote` of the loader."""

    cache_dir: str | None = None        # sidecars and seek indexes of remote archives;
                                        # None: $XDG_CACHE_HOME/imageloader (~/.cache/...)
    storage_options: dict | None = None  # given to fsspec: credentials, endpoint_url, ...
    block_size: int = 4 << 20           # bytes per ranged request
    ahead: int = 2                      # requests fetched ahead of the reader, in its window
    retries: int = 8                    # transient failures tolerated per request
    backoff: float = 0.25               # seconds before the first retry; doubles, up to 8 s
    timeout: float = 60.0               # seconds one request may take
    share_scans: bool = True            # under torch.distributed, rank 0 scans and sends the
                                        # sidecars and indexes to the other ranks (all ranks
                                        # must then construct the loader)

    def __post_init__(self):
        if self.block_size < 1 or self.ahead < 0 or self.retries < 0 or self.timeout <= 0:
            raise ValueError(f"invalid RemoteOptions: {self}")


class RemoteError(OSError):
    """A remote archive cannot be read. `url` has no credentials; `status` is the HTTP status
    when there was one."""

    def __init__(self, url: str, problem: str, status: int | None = None):
        super().__init__(f"{problem}: {url}")
        self.url, self.problem, self.status = url, problem, status

    def __reduce__(self):
        return RemoteError, (self.url, self.problem, self.status)


# --------------------------------------------------------------------------------------------
# Names


class Url(str):
    """A remote archive: its value is the URL without user info or query (what messages,
    cache keys and checkpoints show); `target` is the URL as given, used only to fetch."""

    def __new__(cls, target: str, options: RemoteOptions | None = None):
        self = super().__new__(cls, redact(target))
        self.target, self.options = target, options or RemoteOptions()
        self.known: dict | None = None  # the object's size and version, once asked
        return self

    def __reduce__(self):
        return _rebuild_url, (self.target, self.options, self.known)


def _rebuild_url(target: str, options: RemoteOptions, known: dict | None) -> Url:
    url = Url(target, options)
    url.known = known
    return url


def is_url(source) -> bool:
    """A URL that fsspec opens remotely (`file://` and plain paths are local)."""
    if isinstance(source, Url):
        return True
    match = _SCHEME.match(source) if isinstance(source, str) else None
    return bool(match) and match.group(1).lower() not in _LOCAL_SCHEMES


def as_url(source: str, options: RemoteOptions | None = None) -> Url:
    return source if isinstance(source, Url) else Url(source, options)


def redact(url: str) -> str:
    """The URL without user info (passwords, tokens) and query (signatures)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "", "")) + ("?..." if parts.query else "")


def expand(source: str, options: RemoteOptions | None = None) -> list[Url]:
    """One URL, or the sorted matches of a glob in its path."""
    url = as_url(source, options)
    if not glob.has_magic(urlsplit(url.target).path):
        return [url]
    fs, path = _filesystem(url)
    matches = sorted(fs.glob(path))
    if not matches:
        raise FileNotFoundError(f"no archive matches the pattern {url}")
    return [Url(fs.unstrip_protocol(m), url.options) for m in matches]


def cache_folder(options: RemoteOptions) -> str:
    folder = options.cache_dir or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "imageloader")
    os.makedirs(folder, exist_ok=True)
    return folder


def cache_path(url: str, suffix: str) -> str:
    """Where a remote archive's sidecar or index lives: a hash of the URL (no credentials) and
    its file name, in the cache folder."""
    url = as_url(url)
    key = hashlib.sha256(str(url).encode()).hexdigest()[:16]
    base = os.path.basename(urlsplit(str(url)).path) or "archive"
    base = re.sub(r"[^A-Za-z0-9._-]", "_", base)[-80:]
    return os.path.join(cache_folder(url.options), f"{key}-{base}{suffix}")


# --------------------------------------------------------------------------------------------
# Requests


_COUNTS: Counter = Counter()   # this process's requests, retries and bytes fetched
_COUNTS_LOCK = threading.Lock()


def counters() -> dict:
    """Bytes fetched (`fetched`), requests made and retries of this process so far."""
    with _COUNTS_LOCK:
        return {"fetched": _COUNTS["fetched"], "requests": _COUNTS["requests"],
                "retries": _COUNTS["retries"]}


def counted_since(before: dict) -> dict:
    now = counters()
    return {key: now[key] - before.get(key, 0) for key in now}


def _count(**amounts: int) -> None:
    with _COUNTS_LOCK:
        _COUNTS.update(amounts)


def _filesystem(url: Url):
    fs = getattr(url, "_fs", None)  # made once per process (never pickled)
    if fs is None:
        try:
            from fsspec.core import url_to_fs
        except ImportError:
            raise ImportError(f"reading {url} needs fsspec and the protocol's package: pip "
                              f"install 'imageloader[remote]' (for s3:// 'imageloader[s3]', "
                              f"for gs:// gcsfs)") from None
        try:
            fs = url_to_fs(url.target, **(url.options.storage_options or {}))
        except ImportError as error:
            raise ImportError(f"reading {url} needs the package for its protocol: "
                              f"{error}") from None
        url._fs = fs
    return fs


def stamp(url: str) -> dict:
    """What tells a remote object changed: its size and version (ETag, or modification time)."""
    url = as_url(url)
    if url.known is None:
        fs, path = _filesystem(url)
        info = _with_retries(url, "ask about", lambda: _call(fs, "info", url.options, path))
        if info.get("size") is None:
            raise RemoteError(url, "the server does not say the object's size")
        version = next((info[k] for k in _VERSION_KEYS if info.get(k)), None)
        if version is None:
            log.info("%s: no ETag or modification time; a change of size alone means a rescan",
                     url)
        url.known = {"bytes": int(info["size"]), "version": None if version is None
                     else str(version)}
    return url.known


def fetch(url: Url, start: int, end: int) -> bytes:
    """Bytes [start, end) of the object, whatever transient faults come in between."""
    fs, path = _filesystem(url)
    parts, at = [], start
    while at < end:
        data = _with_retries(url, "read", lambda: _call(fs, "cat_file", url.options, path,
                                                        start=at, end=end))
        _count(fetched=len(data))
        if len(data) > end - at:
            raise RemoteError(url, f"the server ignores Range requests (asked for {end - at} "
                              f"bytes at {at}, got {len(data)})")
        if not data:
            raise RemoteError(url, f"the object ends before byte {at} (it changed while read?)")
        parts.append(data)  # a short body: ask again from its end, not from `start`
        at += len(data)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _call(fs, method: str, options: RemoteOptions, *args, **kwargs):
    """One request, bounded by the timeout where the filesystem is asynchronous."""
    if not getattr(fs, "async_impl", False):
        return getattr(fs, method)(*args, **kwargs)
    from fsspec.asyn import sync
    return sync(fs.loop, _within, options.timeout, getattr(fs, "_" + method), *args, **kwargs)


async def _within(timeout: float, call, *args, **kwargs):
    import asyncio  # here: processes that read local archives never pay for importing it
    # wait_for cancels the request when it times out: its connection is closed, not reused.
    return await asyncio.wait_for(call(*args, **kwargs), timeout)


def _with_retries(url: Url, doing: str, call):
    options = url.options
    for attempt in range(options.retries + 1):
        _count(requests=1)
        try:
            return call()
        except Exception as error:  # every library raises its own types: classified below
            if not transient(error) or attempt == options.retries:
                raise _remote_error(url, doing, error, attempt) from None
            pause = min(8.0, options.backoff * 2 ** attempt) * (0.5 + random.random() / 2)
            log.info("%s: %s (attempt %d), again in %.2f s", url, _describe(url, error),
                     attempt + 1, pause)
            _count(retries=1)
            time.sleep(pause)
    raise AssertionError("unreachable")


def transient(error: BaseException) -> bool:
    """Worth asking again: 5xx, 408, 429, resets, cut bodies, timeouts."""
    status = _status(error)
    if status is not None:
        return status >= 500 or status in (408, 429)
    for cause in _chain(error):
        if isinstance(cause, (FileNotFoundError, PermissionError, IsADirectoryError)):
            continue  # fsspec's HTTP info wraps whatever failed in FileNotFoundError
        if isinstance(cause, _transient_types()):
            return True
    return False


def _transient_types() -> tuple:
    found: list = [OSError, TimeoutError, EOFError, ConnectionError]
    try:
        import aiohttp  # responses with a status are classified by it, before this
        found.append(aiohttp.ClientError)
    except ImportError:
        pass
    try:
        from botocore import exceptions
        found += [exceptions.HTTPClientError, exceptions.ResponseStreamingError]
    except (ImportError, AttributeError):
        pass
    return tuple(found)


def _status(error: BaseException) -> int | None:
    for cause in _chain(error):
        status = getattr(cause, "status", None)  # aiohttp
        if isinstance(status, int):
            return status
        response = getattr(cause, "response", None)  # botocore
        if isinstance(response, dict):
            code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code:
                return int(code)
    return None


def _chain(error: BaseException) -> Iterable[BaseException]:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _remote_error(url: Url, doing: str, error: BaseException, attempt: int) -> RemoteError:
    status = _status(error)
    if status == 404 or (status is None and isinstance(error, FileNotFoundError)):
        problem = "not found" + (" (HTTP 404)" if status else "")
    elif status == 403 or (status is None and isinstance(error, PermissionError)):
        problem = "access denied" + (" (HTTP 403)" if status else "")
    else:
        problem = f"cannot {doing} it: {_describe(url, error)}"
        if attempt:
            problem += f", after {attempt + 1} attempts"
    log.debug("%s: %s", url, _describe(url, error))
    return RemoteError(url, problem, status)


def _describe(url: Url, error: BaseException) -> str:
    """The error in words without credentials: libraries quote the URL they were given."""
    status = _status(error)
    text = f"HTTP {status}" if status else f"{type(error).__name__}: {error}"
    text = text.replace(url.target, str(url))
    secret = urlsplit(url.target)
    for part in (secret.query, secret.netloc.rpartition("@")[0]):
        if part:
            text = text.replace(part, "...")
    return text


# --------------------------------------------------------------------------------------------
# Files


class RemoteFile(io.RawIOBase):
    """A seekable file over ranged requests to one object.

    One thread makes the requests, one at a time: the reader's one connection. Within the
    window it fetches `block_size` pieces in order, up to `ahead` pieces past the furthest read,
    and never past the window's end; a read outside the window fetches just what it asks
    (a short read, which every reader here handles). Recently used pieces are kept for the
    inflater's threads and re-reads (`behind`: bytes they may read behind the furthest read).
    """

    def __init__(self, url: str, behind: int = 0, window: tuple[int, int] | None = None,
                 end: int | None = None):
        self.url = as_url(url)
        # `end`: read the object as if it ended there (a gzip's padding, left to rapidgzip)
        self.size = stamp(self.url)["bytes"] if end is None else end
        options = self.url.options
        self.block, self.ahead = options.block_size, options.ahead
        self._pos = 0
        self._cond = threading.Condition()
        self._pieces: OrderedDict[int, bytes] = OrderedDict()  # start -> bytes, by last use
        # Kept: the pieces ahead, and `behind` bytes that an inflater's threads, each through
        # its own stretch, may still read: evicted, they would be fetched again.
        self._keep = self.ahead + 2 + -(-behind // self.block)
        self._demand: list[tuple[int, int]] = []   # outside the window, asked by a read
        self._asked: tuple[int, int] = (0, 0)      # the request under way
        self._failure: BaseException | None = None
        self._stop = False
        self.set_window(*(window or (0, self.size)))
        self._thread = threading.Thread(target=self._fetch_loop, name="imageloader-fetch",
                                        daemon=True)
        self._thread.start()

    # ---- the reader's side -------------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def set_window(self, start: int, end: int) -> None:
        """Read ahead from `start`, never past `end`."""
        with self._cond:
            self._window = (max(0, start), min(self.size, end))
            self._next = self._window[0]      # the next piece to fetch ahead
            self._wanted = self._window[0]    # the furthest byte read in the window
            self._cond.notify_all()

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        if self._pos >= self.size or not len(view):
            return 0
        with self._cond:
            while True:
                n = self._copy_cached(view)
                if n:
                    self._pos += n
                    return n
                if self._failure is not None:  # raised where its bytes are needed
                    raise self._failure
                if self.closed:
                    raise ValueError("read from a closed RemoteFile")
                self._ask(self._pos, len(view))
                self._cond.wait()

    def _copy_cached(self, view: memoryview) -> int:
        for start, data in self._pieces.items():
            if start <= self._pos < start + len(data):
                self._pieces.move_to_end(start)
                at = self._pos - start
                n = min(len(view), len(data) - at)
                view[:n] = memoryview(data)[at:at + n]  # one copy, into the reader's buffer
                return n
        return 0

    def _ask(self, pos: int, length: int) -> None:
        low, high = self._window
        if low <= pos < high and pos >= self._next:
            # In the window and not fetched yet: the fetch thread gets there in order.
            self._wanted = max(self._wanted, pos + length)
        elif not any(a <= pos < b for a, b in (*self._demand, self._asked)):
            if low <= pos < high:  # fetched before and let go: a piece again
                self._demand.append((pos, min(high, pos + self.block)))
            else:  # outside the window: just what is asked, or a little of it
                self._demand.append((pos, min(self.size, pos + min(length, _OUTSIDE_BYTES))))
        self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._stop = True
            self._pieces.clear()
            self._cond.notify_all()
        super().close()

    # ---- the fetch thread --------------------------------------------------------------------

    def _fetch_loop(self) -> None:
        while True:
            with self._cond:
                job = self._next_job()
                while job is None and not self._stop:
                    self._cond.wait()
                    job = self._next_job()
                if self._stop:
                    return
                start, end, ahead = job
                self._asked = (start, end)
            try:
                data = fetch(self.url, start, end)
            except BaseException as error:  # raised in the reader that waits for these bytes
                with self._cond:
                    self._failure = error
                    self._cond.notify_all()
                return
            with self._cond:
                self._store(start, data, ahead)

    def _next_job(self) -> tuple[int, int, bool] | None:
        if self._demand:
            return (*self._demand.pop(0), False)
        high = self._window[1]
        self._skip_cached()
        if self._next < high and self._next < self._wanted + self.ahead * self.block:
            return self._next, min(high, self._next + self.block), True
        return None

    def _skip_cached(self) -> None:
        # The window's first bytes may still be here (the neighbouring region's last ones, or
        # this region in the last epoch): kept as the newest, so that the pieces fetched next
        # do not push them out before they are read.
        moved = True
        while moved:
            moved = False
            for start, data in self._pieces.items():
                if start <= self._next < start + len(data):
                    self._pieces.move_to_end(start)
                    self._next, moved = start + len(data), True
                    break

    def _store(self, start: int, data: bytes, ahead: bool) -> None:
        if ahead and start == self._next:  # else the window moved meanwhile
            self._next = start + len(data)
        self._pieces[start] = data
        self._asked = (0, 0)
        while len(self._pieces) > self._keep:
            self._pieces.popitem(last=False)
        self._cond.notify_all()


class _Owned:
    """An inflated stream that also closes the remote file under it; otherwise the stream."""

    def __init__(self, stream, raw: RemoteFile):
        self._stream, self._raw = stream, raw

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._raw.close()

    @property
    def closed(self) -> bool:
        return self._stream.closed


class RegionStream(_Owned):
    """A region reader's stream of one remote archive: entering a region sets the remote
    file's window to the compressed bytes that region inflates from."""

    def __init__(self, stream, raw: RemoteFile, checkpoints: list[tuple[int, int]] | None):
        super().__init__(stream, raw)
        self._checkpoints = checkpoints  # (tar offset, compressed offset); None: a plain tar
        self._offsets = [u for u, _ in checkpoints] if checkpoints else []

    def enter_region(self, region) -> None:
        low, high = self._window_of(region.start, region.end)
        self._raw.set_window(low, high)
        self._stream.seek(region.start)

    def _window_of(self, start: int, end: int | None) -> tuple[int, int]:
        if self._checkpoints is None:
            return start, self._raw.size if end is None else end
        first = max(0, bisect.bisect_right(self._offsets, start) - 1)
        low = self._checkpoints[first][1] // 8
        if end is None:
            return low, self._raw.size
        # rapidgzip inflates whole intervals between checkpoints: the region's last one ends
        # at the first checkpoint at or after the region's end.
        last = bisect.bisect_left(self._offsets, end)
        if last >= len(self._checkpoints):
            return low, self._raw.size
        return low, self._checkpoints[last][1] // 8 + 1


def head(url: str, n: int) -> bytes:
    """The object's first n bytes (one small request)."""
    url = as_url(url)
    return fetch(url, 0, min(n, stamp(url)["bytes"]))


_GZIP_ENDS: dict[tuple[str, int, str | None], int] = {}


def gzip_end(url: str) -> int:
    """read.gzip_end of a remote gzip: one small request for its last bytes, once per object
    and process."""
    url = as_url(url)
    known = stamp(url)
    key = (str(url), known["bytes"], known["version"])
    if key not in _GZIP_ENDS:
        from .read import gzip_end as end_of
        _GZIP_ENDS[key] = end_of(known["bytes"], lambda start, end: fetch(url, start, end))
    return _GZIP_ENDS[key]


def open_stream(url: str, inflate: str, threads: int | None):
    """The archive's tar bytes in order (the scan, evaluation); gzip is told by its magic."""
    from .read import _GZIP_MAGIC, RAPIDGZIP_CHUNK, choose_inflater
    parallel = threads or min(8, os.cpu_count() or 1)
    # rapidgzip's threads each inflate a chunk of their own, up to two per thread at once.
    raw = RemoteFile(url, behind=2 * parallel * RAPIDGZIP_CHUNK)
    try:
        gzipped = raw.read(2) == _GZIP_MAGIC
        raw.seek(0)
        if not gzipped:
            return _Owned(io.BufferedReader(raw, 1 << 20), raw)
        name = choose_inflater(inflate, seekable_path=True)
        if name == "rapidgzip":
            import rapidgzip
            if gzip_end(url) != raw.size:  # its padding would fail rapidgzip (read.gzip_end)
                raw.close()
                raw = RemoteFile(url, behind=2 * parallel * RAPIDGZIP_CHUNK, end=gzip_end(url))
            return _Owned(rapidgzip.RapidgzipFile(raw, parallelization=parallel,
                                                  chunk_size=RAPIDGZIP_CHUNK), raw)
        buffered = io.BufferedReader(raw, 1 << 20)
        if name == "isal":
            from isal import igzip
            return _Owned(igzip.IGzipFile(fileobj=buffered, mode="rb"), raw)
        import gzip
        return _Owned(gzip.GzipFile(fileobj=buffered, mode="rb"), raw)
    except BaseException:
        raw.close()
        raise


def open_region(region, threads: int | None = None) -> RegionStream:
    """A stream of the remote archive positioned at the region's first header, fetching only
    what the region needs.

    rapidgzip inflates ahead in parallel threads, past the region's end and so past its
    window: one thread here; the read-ahead that matters is the fetch thread's, and more
    readers, each with its own connection, give more inflating cores."""
    # Nothing ahead until a region is entered; a gzip without its padding (read.gzip_end).
    raw = RemoteFile(region.path, window=(0, 0),
                     end=None if region.index is None else gzip_end(region.path))
    try:
        if region.index is None:
            stream = RegionStream(raw, raw, None)
        else:
            import rapidgzip
            inner = rapidgzip.RapidgzipFile(raw, parallelization=1,
                                            chunk_size=_REGION_READ_CHUNK)
            inner.import_index(region.index)
            checkpoints = sorted((u, c) for c, u in inner.block_offsets().items())
            stream = RegionStream(inner, raw, checkpoints)
        stream.enter_region(region)
        return stream
    except BaseException:
        raw.close()
        raise


# --------------------------------------------------------------------------------------------
# Scans shared between ranks


def share_scans(sources: Iterable, *, limits, inflate: str) -> None:
    """Under torch.distributed, rank 0 scans the remote archives that some rank's cache lacks
    and sends the sidecars and indexes to the ranks, which keep them in their own caches: the
    scan fetches an archive once, not once per node. A collective: every rank must call it.
    An error on any rank (a 404, say) is raised on all of them, so that none waits for it."""
    urls = [s for s in sources if isinstance(s, Url) and s.options.share_scans]
    import torch.distributed as dist
    if not urls or not (dist.is_available() and dist.is_initialized()) \
            or dist.get_world_size() < 2:
        return
    # A group of its own on gloo: NCCL's object collectives need each rank's CUDA device set,
    # which a training script may do only after building its loaders. Rank 0 may scan for a
    # long time (an archive of 140 GB) while the others wait.
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(hours=6))
    try:
        lacking = _on_every_rank(group, lambda: [not _cached(u) for u in urls])
        wanted = [i for i in range(len(urls)) if any(flags[i] for flags in lacking)]
        if not wanted:
            return
        files = _from_rank_0(group, lambda: [_scan_files(urls[i], limits, inflate)
                                             for i in wanted])
        rank = dist.get_rank()
        for i, found in zip(wanted, files):
            if rank != 0 and lacking[rank][i]:
                _install(urls[i], *found)
    finally:
        dist.destroy_process_group(group)


def _on_every_rank(group, work) -> list:
    """work() on every rank: all the results, or the first rank's error raised on all."""
    import torch.distributed as dist
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, _outcome(work), group=group)
    for failed, value in everyone:
        if failed:
            raise value
    return [value for _, value in everyone]


def _from_rank_0(group, work):
    """work() on rank 0, its result (or error) on every rank."""
    import torch.distributed as dist
    box = [_outcome(work) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0, group=group)
    failed, value = box[0]
    if failed:
        raise value
    return value


def _outcome(work) -> tuple[bool, object]:
    try:
        return False, work()
    except Exception as error:  # raised on every rank by the caller
        return True, error


def _cached(url: Url) -> bool:
    from .vocab import fresh_scan
    return fresh_scan(url) is not None


def _scan_files(url: Url, limits, inflate: str) -> tuple[str, bytes | None, int | None]:
    """The sidecar's text and the index's bytes and mtime, scanning if need be."""
    from .index import index_path
    from .vocab import archive_regions, sidecar_path
    archive_regions(url, limits=limits, inflate=inflate)
    with open(sidecar_path(url), encoding="utf-8") as f:
        sidecar = f.read()
    regions = json.loads(sidecar).get("regions") or {}
    if not regions.get("index"):
        return sidecar, None, None
    with open(index_path(url), "rb") as f:
        return sidecar, f.read(), regions["index_stamp"]["mtime_ns"]


def _install(url: Url, sidecar: str, index: bytes | None, mtime_ns: int | None) -> None:
    """Keep rank 0's scan: the index with rank 0's mtime, so that the sidecar's stamp of it
    holds here too, then the sidecar."""
    from .index import index_path
    from .vocab import sidecar_path
    if index is not None:
        target = index_path(url)
        tmp = f"{target}.tmp{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(index)
        os.utime(tmp, ns=(mtime_ns, mtime_ns))
        os.replace(tmp, target)
    target = sidecar_path(url)
    tmp = f"{target}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(sidecar)
    os.replace(tmp, target)
