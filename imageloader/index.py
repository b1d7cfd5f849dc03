"""Entry points into one archive: regions that readers can walk in parallel, found by the scan.

A `.tgz` is one gzip stream, which inflates from its start only, so one reader walks it and
every extra reader would inflate it all again. The scan that builds the vocabulary walks every
header anyway: it notes where each header starts, and rapidgzip notes checkpoints (a 32 KiB
window every few MiB of the stream) from which it can inflate without what came before. A
region starts at the first tar header after a checkpoint, so a reader given a region inflates
just that region, and several readers split one archive by position, each inflating its own.
An uncompressed `.tar` seeks anywhere and needs no checkpoints.

The regions go into the class sidecar and the checkpoints beside the archive
(`<archive>.gzindex`, ~0.01% of an archive of JPEGs: its windows are kept sparse), reused
while the archive's size and mtime are unchanged (a remote archive's live in a local cache
folder, and its regions are larger: remote.py). Archives where a reader could not start
mid-way get none: a global pax header that changes how later headers read, or duplicate
member names (which region would win?).
"""
from __future__ import annotations

import bisect
import logging
import os
from array import array

from . import remote
from .read import Region, choose_inflater, split_names

log = logging.getLogger(__name__)
INDEX_SUFFIX = ".gzindex"
REGION_BYTES = 16 << 20   # a region is at least this much tar stream: a few hundred images


def index_path(archive: str) -> str:
    if remote.is_url(archive):
        return remote.cache_path(archive, INDEX_SUFFIX)
    return archive + INDEX_SUFFIX


def _folder_of_index(archive: str) -> str:
    return os.path.dirname(index_path(archive))


def recorder_for(path: str, inflate: str) -> "Recorder | None":
    """A recorder when this archive's regions can be found: an uncompressed tar, or gzip
    inflated by rapidgzip (the only inflater here with checkpoints)."""
    if remote.is_url(path):
        gzipped, spacing = remote.head(path, 2) == b"\x1f\x8b", remote.REGION_BYTES
    else:
        with open(path, "rb") as f:
            gzipped, spacing = f.read(2) == b"\x1f\x8b", REGION_BYTES
    if not gzipped:
        return Recorder(path, gzipped=False, region_bytes=spacing)
    try:
        if choose_inflater(inflate, seekable_path=True) != "rapidgzip":
            return None
    except (ImportError, ValueError):
        return None
    return Recorder(path, gzipped=True, region_bytes=spacing)


def _sparse_index_format():
    """gztool's index format: rapidgzip keeps each checkpoint's window sparse (only the bytes
    the data after it refers back to) and compressed, and writes it so; indexed_gzip's format
    writes every window whole. Over JPEGs, which refer back little, that is ~80x smaller (42 KB
    against 3.3 MB for 441 MB of photos) and so is each region reader's copy in memory (about
    1 GB each for a 140 GB archive before). Either imports: older files still read."""
    import rapidgzip
    return rapidgzip.IndexFormat.GZTOOL


class Recorder:
    """Told every header where a region could start (`header`), then the stream (`finish`)."""

    def __init__(self, path: str, gzipped: bool, region_bytes: int | None = None):
        self.path, self.gzipped = path, gzipped
        self.region_bytes = region_bytes or REGION_BYTES
        # Three ints per member: ~24 MB while scanning a million members, freed after it.
        self.offsets, self.entries, self.images = array("q"), array("q"), array("q")
        # Images of each split folder (read.split_folder) before each header, so that a
        # loader reading one split knows each region's share of it.
        self.split_images: dict[str, array] = {}
        self._split_counts: dict[str, int] = {}
        self.checkpoints: list[int] | None = None
        self.index_file: str | None = None

    def header(self, offset: int, entry: int, images_before: int) -> None:
        self.offsets.append(offset)
        self.entries.append(entry)
        self.images.append(images_before)
        for split, images in self.split_images.items():
            images.append(self._split_counts[split])

    def count_split(self, split: str) -> None:
        """One more image of this split, after the last header told."""
        if split not in self.split_images:  # none before any header so far
            self.split_images[split] = array("q", bytes(8 * len(self.offsets)))
            self._split_counts[split] = 0
        self._split_counts[split] += 1

    def finish(self, stream) -> None:
        """The walk reached the archive's end: keep the inflater's checkpoints."""
        if not self.gzipped:
            self.checkpoints = list(range(0, stream.tell(), self.region_bytes))
            return
        self.checkpoints = sorted(stream.block_offsets().values())
        if len(self._starts()) < 2:
            return  # too small to split: no index file
        target = index_path(self.path)
        tmp = f"{target}.tmp{os.getpid()}"
        try:
            stream.export_index(tmp, index_format=_sparse_index_format())
            os.replace(tmp, target)  # atomic: concurrent ranks never read half an index
        except Exception as error:  # a read-only dataset folder: no regions, one reader
            log.info("could not write the inflater index beside %s: %s", self.path, error)
            _remove(tmp)
            return
        self.index_file = target

    def payload(self, total_images: int, skipped: dict) -> dict | None:
        """What the sidecar stores: region starts, and the index file it needs; None when
        this archive cannot be split."""
        if self.checkpoints is None or (self.gzipped and self.index_file is None):
            return None
        if skipped.get("duplicate") or not self.offsets or self.offsets[0] != 0:
            return None
        starts = self._starts()
        if len(starts) < 2:
            return None
        rows = []
        for i, h in enumerate(starts):
            nxt = starts[i + 1] if i + 1 < len(starts) else None
            following = self.images[nxt] if nxt is not None else total_images
            splits = {split: (images[nxt] if nxt is not None else self._split_counts[split])
                      - images[h] for split, images in sorted(self.split_images.items())}
            rows.append([self.offsets[h], self.entries[h], following - self.images[h], splits])
        stamp = file_stamp(self.index_file) if self.index_file else None
        return {"index": os.path.basename(self.index_file) if self.index_file else None,
                "index_stamp": stamp, "starts": rows}

    def _starts(self) -> list[int]:
        """Positions (into the recorded headers) where regions start: the first header at or
        after a checkpoint, at least REGION_BYTES after the previous start."""
        starts, next_at = [0], self.region_bytes
        for checkpoint in self.checkpoints:
            if checkpoint < next_at:
                continue
            h = bisect.bisect_left(self.offsets, checkpoint)
            if h == len(self.offsets):
                break
            starts.append(h)
            next_at = self.offsets[h] + self.region_bytes
        return starts


def regions_from(path: str, payload: dict | None, split: str | tuple[str, ...] | None = None
                 ) -> list[Region] | None:
    """The regions a fresh sidecar describes; None if it has none, or their index file is
    stale (`index_is_stale`) or cannot be used here (no rapidgzip). With `split`, each
    region's images are those of that split folder, or those split folders (some may have
    none: still read, so that the members skipped there are counted as in one pass)."""
    if not payload or index_is_stale(path, payload):
        return None
    index = os.path.join(_folder_of_index(path), payload["index"]) if payload["index"] else None
    if index is not None:
        try:
            import rapidgzip  # noqa: F401  (needed to enter the stream at a checkpoint)
        except ImportError:
            return None
    rows = payload["starts"]
    ends = [row[0] for row in rows[1:]] + [None]
    return [Region(path, int(start), None if end is None else int(end), int(entry),
                   int(images if split is None else
                       sum(splits.get(name, 0) for name in split_names(split))), index)
            for (start, entry, images, splits), end in zip(rows, ends)]


def index_is_stale(path: str, payload: dict) -> bool:
    """The index file beside the archive is gone or is not the one the scan wrote."""
    if not payload.get("index"):
        return False
    try:
        return file_stamp(os.path.join(_folder_of_index(path), payload["index"])) \
            != payload.get("index_stamp")
    except OSError:
        return True


def file_stamp(path: str) -> dict:
    """What tells a file changed: its size and modification time (for a remote archive, its
    size and version: remote.stamp)."""
    if remote.is_url(path):
        return remote.stamp(path)
    st = os.stat(path)
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass

