"""Label vocabulary: sorted class names mapped to 0..K-1, cached in a sidecar beside each archive.

Sorting makes the mapping independent of archive order, so a train and a val archive agree.
Building it takes one streaming pass over member headers (no decoding, no extraction); the result
is written to `<archive>.classes.json` when the folder is writable and reused while the archive's
size and modification time are unchanged (a remote archive's sidecar lives in a local cache
folder and is reused while the object's size and version are: remote.py). The sidecar also
stores images per class, which gives the loader its length without another pass, and per split
folder above the classes (train, val, ...): one loader refuses images of two splits unless
it names them (Options(split=...)).
"""
from __future__ import annotations

import io
import json
import logging
import os
import tarfile
import warnings
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Mapping

from . import remote
from .errors import (LAYOUT, PACK_HINT, REPACK_HINTS, ArchiveError, Limits, check_split,
                     counted, is_split_name, two_splits_message)
from .index import file_stamp, index_is_stale, recorder_for, regions_from
from .read import (IMAGE_EXTENSIONS, Region, Source, class_name, class_place, expand_sources,
                   has_image_extension, iter_members, source_name, split_folder, split_names)

log = logging.getLogger(__name__)
SIDECAR_SUFFIX = ".classes.json"
_FORMAT = "imageloader.classes/11"  # 2: with regions (index.py); 3: with splits; 4: their
# classes, and each region's images of each split; 5: splits named in lower case; 6: split
# names with a number after them (train2017); 7: and with a companion word (training_set);
# 8: members that are archives counted as "archive", not "not_image"; 9: class names found
# in several places and inside others (ClassPlaces); 10: class names composed
# (read.class_name). Since 2026-12-07 "shared" and "nested" name the folders above class
# folders as the archive has them (with split folders), older sidecars of 10 their places:
# only the warnings' text reads them, so both serve. 11: hidden images and class folders
# skipped as "hidden", not classes (.ipynb_checkpoints)


class Vocabulary:
    """Class names <-> integer targets. `Vocabulary(["dog", "cat"])[ "cat"] == 0`."""

    def __init__(self, classes: Iterable[str], counts: Mapping[str, int] | None = None):
        self.classes: tuple[str, ...] = tuple(sorted({class_name(c) for c in classes}))
        if not self.classes:
            raise ValueError("a vocabulary needs at least one class")
        self.index: dict[str, int] = {name: i for i, name in enumerate(self.classes)}
        self.counts: dict[str, int] = dict(counts or {})

    def __len__(self) -> int:
        return len(self.classes)

    def __getitem__(self, name: str) -> int:
        return self.index[name]

    def __contains__(self, name: object) -> bool:
        return name in self.index

    def __iter__(self):
        return iter(self.classes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self.classes == other.classes

    def __repr__(self) -> str:
        shown = ", ".join(self.classes[:5]) + (", ..." if len(self) > 5 else "")
        return f"Vocabulary({len(self)} classes: {shown})"

    @property
    def images(self) -> int | None:
        """Images counted when the vocabulary was scanned, or None if unknown."""
        return sum(self.counts.values()) if self.counts else None

    def save(self, path: str | os.PathLike) -> None:
        _write_json(path, {"format": _FORMAT, "classes": {c: self.counts.get(c, 0)
                                                          for c in self.classes}})

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Vocabulary":
        """Read a sidecar/saved JSON file, or a text file with one class name per line."""
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if text.lstrip().startswith("{"):
            classes = json.loads(text)["classes"]
            return cls(classes, classes if isinstance(classes, dict) else None)
        return cls(line.strip() for line in text.splitlines() if line.strip())

    @classmethod
    def from_archives(cls, source: Source | Iterable[Source], *, limits: Limits = Limits(),
                      inflate: str = "auto", write_sidecar: bool = True,
                      remote_options: remote.RemoteOptions | None = None,
                      split: str | tuple[str, ...] | None = None) -> "Vocabulary":
        """Scan archives (or reuse their sidecars) and return the union of their classes;
        with `split`, of the images below split folders of that name, or those names, only
        (any case, as Options.split)."""
        split = check_split(split)
        sources = expand_sources(source, remote_options)
        streams = [s for s in sources if hasattr(s, "read")]
        if streams:
            raise ValueError(f"cannot scan {source_name(streams[0])} for its classes without "
                             f"consuming it; pass vocab= explicitly for streams")
        with ThreadPoolExecutor(max_workers=min(4, len(sources))) as pool:
            scans = list(pool.map(
                lambda path: _scan(path, limits, inflate, write_sidecar), sources))
        counts: Counter = Counter()
        for scan in scans:
            counts.update(scan_classes(scan, split))
        missing = [name for name in split_names(split)
                   if not any(scan["splits"].get(name) for scan in scans)]
        if missing:  # a split named and not there is a typo or the wrong archive
            raise ValueError(_no_split_message(sources, scans, missing))
        if not counts:
            skipped = [scan.get("skipped", {}) for scan in scans]
            raise ValueError(_no_images_message(sources, skipped))
        _check_classes(sources, counts)
        for source, scan in zip(sources, scans):
            _warn_of_class_places(source_name(source), scan, len(counts))
        if split is None:
            _check_splits(sources, scans)
        return cls(counts.keys(), counts)


def _warn_of_class_places(archive: str, scan: dict, classes: int) -> None:
    if scan.get("shared") and classes > 1:  # one class: _check_classes warned
        warnings.warn(shared_names_message(archive, scan["shared"]),
                      stacklevel=4)  # the caller of ImageLoader(...), as _check_classes
    if scan.get("nested"):
        warnings.warn(nested_classes_message(archive, scan["nested"]), stacklevel=4)


def scan_classes(scan: dict, split: str | tuple[str, ...] | None) -> dict[str, int]:
    """Images per class in a scan: all of them, or those below `split` folders."""
    if split is None:
        return scan["classes"]
    counts: Counter = Counter()
    for name in split_names(split):
        counts.update(scan["splits"].get(name, {}))
    return dict(sorted(counts.items()))


class ClassPlaces:
    """Where each class's folders lie in an archive (read.class_place), for two layouts that
    the parent-folder rule reads without an error and the user should hear of:
    - one class name for folders in several places (shared): right for one class in several
      domains (PACS's art_painting/dog and photo/dog), wrong for a hierarchy (SUN397's and
      Places365's a/apartment_building/outdoor and c/church/outdoor, one class "outdoor");
    - a class folder inside another's (nested): cat/extra/x.jpg is class "extra", not cat.
    Only the user knows which is meant, so scans keep them to say so. Places leave split
    folders out (train/dog and val/dog are one class in two splits), but what is reported
    is the folder that holds the class folder as the archive has it (data/train/a, not
    data/a): the first one met in each place, so the user finds it."""

    KEPT = 100  # places kept per name: enough to show, bounded for an archive of odd folders
    FOLDERS_KNOWN = 1 << 16

    def __init__(self):
        # each class's first place and the folder above its class folder there: no dict of
        # places for most classes
        self._first: dict[str, tuple[str, str]] = {}
        self._places: dict[str, dict[str, str]] = {}  # label -> {place: its folder}
        self._known: dict[str, str] = {}  # folder -> place: a scan meets each folder often

    def add(self, label: str, name: str) -> None:
        folder = name.rpartition("/")[0]
        place = self._known.get(folder)
        if place is None:
            place = class_place(name)
            if len(self._known) < self.FOLDERS_KNOWN:
                self._known[folder] = place
        first = self._first.get(label)
        if first is None:  # (a scan calls this for every member: nothing made past here)
            self._first[label] = (place, folder.rpartition("/")[0])
        elif place != first[0]:
            places = self._places.setdefault(label, self._places_of(label))
            if len(places) < self.KEPT:
                places.setdefault(place, folder.rpartition("/")[0])

    def _places_of(self, label: str) -> dict[str, str]:
        """{place: the folder that holds the class folder there} for a class (none for a
        name that is no class)."""
        if label in self._places:
            return self._places[label]
        first = self._first.get(label)
        return {} if first is None else {first[0]: first[1]}

    def shared(self) -> dict[str, list[str]]:
        """{class name: the folders that hold its class folders, one per place, in the order
        of their places} for the names found in more than one place."""
        return {label: [places[place] for place in sorted(places)]
                for label, places in sorted(self._places.items())}

    def nested(self) -> dict[str, str]:
        """{class name: the folder of another class that holds its folder}: cat/extra/x.jpg
        beside cat/y.jpg -> {"extra": "cat"}; train/cat/extra/x.jpg beside train/cat/y.jpg
        -> {"extra": "train/cat"}."""
        found = {}
        for label in sorted(self._first):
            places = self._places_of(label)
            for place in sorted(places):
                parent, _, folder = place.rpartition("/")
                if folder != label and parent in self._places_of(folder):
                    found[label] = places[place]
                    break
        return found


def shared_names_message(archive: str, shared: Mapping[str, list[str]]) -> str:
    """What ClassPlaces.shared found in an archive, and how to pack it as separate classes."""
    def folders(label: str, places: list[str]) -> str:
        plus = "+" if len(places) >= ClassPlaces.KEPT else ""
        shown = ", ".join(f"{place}/{label}" if place else label for place in places[:3])
        return f"{label!r}: {len(places)}{plus} folders ({shown}{', ...' * (len(places) > 3)})"

    listed = "; ".join(folders(label, places) for label, places in list(shared.items())[:3])
    more = f"; {len(shared) - 3} more" if len(shared) > 3 else ""
    return (f"{archive}: {counted(len(shared), 'class name')} "
            f"{'stands' if len(shared) == 1 else 'stand'} for folders in several places, read "
            f"as one class each (an image's class is its parent folder): {listed}{more}. "
            f"Right for one class in several domains (art/dog, photo/dog); if they are "
            f"different classes (SUN397's a/apartment_building/outdoor and c/church/outdoor), "
            f"python -m imageloader pack {archive} OUT.tgz --folder F --class-folder path "
            f"names each class by all its folders below F, the folder that holds the classes "
            f"(e.g. SUN397)")


def nested_classes_message(archive: str, nested: Mapping[str, str]) -> str:
    """What ClassPlaces.nested found in an archive, and how to pack it as the outer classes."""
    listed = "; ".join(f"{place}/{label} is class {label!r}, not {place.rpartition('/')[2]!r}"
                       for label, place in list(nested.items())[:3])
    more = f"; {len(nested) - 3} more" if len(nested) > 3 else ""
    one = len(nested) == 1
    return (f"{archive}: {counted(len(nested), 'class folder')} {'lies' if one else 'lie'} "
            f"inside another class's folder, {'its' if one else 'their'} images read as "
            f"{'its' if one else 'their'} own class (an image's class is its parent folder): "
            f"{listed}{more}. If they belong to the outer class, python -m imageloader pack "
            f"{archive} OUT.tgz --folder F --class-folder top names each image's class by its "
            f"first folder below F, the folder that holds the classes (e.g. train)")


# A URL shard's first image is looked for in its first bytes only: one small request per
# shard, beside the one that asks its size. Headers come first, and an image's header is
# in the first block of a shard that starts with it; a shard that starts with another file
# (a README, a license) gets one more request, of PEEK_MORE_BYTES. Past that, a plain tar's
# headers are walked by seeking, one request of a header each, up to PEEK_HEADERS of them;
# a compressed shard that starts with a larger file of another kind is left to its reader.
PEEK_BYTES = 64 << 10
PEEK_MORE_BYTES = 1 << 20
PEEK_HEADERS = 16


def refuse_two_splits(sources: list[Source], limits: Limits) -> None:
    """For a loader given its classes (vocab=) and no split: refuse images of two splits, as
    from_archives does, where archives have fresh sidecars (an earlier scan's, or the one
    this loader's plan made for its regions; a URL's in the cache folder). It never scans: a
    loader given its classes may be meant to start without a pass over a large archive.
    Shards without a sidecar are told by their first image (shards are usually one split
    each, and each may go to a reader of its own); a URL's, from its first PEEK_BYTES, one
    small request (or a few more: _first_image_named). The readers refuse a second split when they
    meet one (workers._chain_members): within a stream, or a shard."""
    paths = [os.fspath(source) for source in sources if not hasattr(source, "read")]
    scans = {path: _fresh_sidecar(path) for path in paths}
    known = [path for path, scan in scans.items() if scan is not None]
    found = _splits_found(known, [scans[path] for path in known])
    unscanned = [path for path, scan in scans.items() if scan is None]
    if unscanned and len(paths) > 1:  # one archive alone: its reader meets both
        for path, name in zip(unscanned, _first_images(unscanned, limits)):
            split = None if name is None else split_folder(name)
            if split is not None and split not in found:
                found[split] = [f"member {name!r} of {path}"]
    _refuse_splits(found)


def _first_images(paths: list[str], limits: Limits) -> list[str | None]:
    # Side by side, as the scans are: many shards may lie on a network file system
    with ThreadPoolExecutor(max_workers=min(8, len(paths))) as pool:
        return list(pool.map(lambda path: _first_image(path, limits), paths))


def _first_image(path: str, limits: Limits) -> str | None:
    """The name of an archive's first image member, read without its data (python's own
    inflate: no threads for a few KiB); None if it has none, none within the first bytes of a
    URL that _first_image_named reads, or cannot be read (its readers then say why)."""
    if remote.is_url(path):
        return _first_image_named(path)
    try:
        members = iter_members(path, skipped=Counter(), limits=limits, read_data=False,
                               inflate="gzip")
        try:
            return next(members).name
        finally:
            members.close()
    except (StopIteration, ArchiveError):
        return None


def _first_image_named(url: str) -> str | None:
    """The name of the first member with an image's extension among the headers in a URL's
    first PEEK_BYTES, or if none is there (and the URL holds more), its first PEEK_MORE_BYTES,
    and past them, in a plain tar, its next PEEK_HEADERS headers (_first_image_past).
    tarfile's stream mode gives a header without its data; read.iter_members gives a member
    only once its data is all there, and these bytes usually cut the first image."""
    for size in (PEEK_BYTES, PEEK_MORE_BYTES):
        try:
            head = remote.head(url, size)
        except OSError:  # RemoteError is one: its readers say why
            return None
        name = _first_image_in(head)
        if name is not None or len(head) < size:
            return name
    return _first_image_past(url, head) if head[257:262] == b"ustar" else None


def _first_image_past(url: str, head: bytes) -> str | None:
    """The first image member of a plain tar at a URL whose first bytes (`head`) hold none:
    tarfile walks its headers over _RangedHead, stepping over each member's data, for at
    most PEEK_HEADERS headers past `head` (a compressed shard cannot be stepped over)."""
    walked = 0
    try:
        with tarfile.open(fileobj=_RangedHead(url, head), mode="r:") as tar:
            while walked < PEEK_HEADERS and (info := tar.next()) is not None:
                if info.isfile() and has_image_extension(info.name):
                    return info.name
                walked += info.offset >= len(head)
    except (tarfile.TarError, EOFError, OSError):  # its reader says what is wrong
        pass
    return None


class _RangedHead:
    """A URL's bytes as a file for tarfile to walk headers in: the first bytes, already read,
    from memory, and a read past them one ranged request of a piece from where it starts
    (PIECE, or more if asked). tarfile reads the byte before a header, then the header: one
    request serves both. The data it seeks over is never fetched."""

    PIECE = 2048

    def __init__(self, url: str, head: bytes):
        self.url, self.head, self.at = remote.as_url(url), head, 0
        self.size = remote.stamp(self.url)["bytes"]
        self.piece = (0, head)  # the last piece fetched: where it starts, its bytes

    def read(self, n: int) -> bytes:
        end = min(self.size, self.at + n)
        for start, data in ((0, self.head), self.piece):
            if start <= self.at and end <= start + len(data):
                break
        else:
            start = self.at
            data = remote.fetch(self.url, start, min(self.size, start + max(n, self.PIECE)))
            self.piece = (start, data)
        data = data[self.at - start:end - start]
        self.at += len(data)
        return data

    def seek(self, at: int, whence: int = io.SEEK_SET) -> int:
        self.at = at if whence == io.SEEK_SET else self.at + at if whence == io.SEEK_CUR \
            else self.size + at
        return self.at

    def tell(self) -> int:
        return self.at


def _first_image_in(head: bytes) -> str | None:
    try:
        with tarfile.open(fileobj=io.BytesIO(head), mode="r|*") as tar:
            for info in tar:
                if info.isfile() and has_image_extension(info.name):
                    return info.name
    except (tarfile.TarError, EOFError, OSError, zlib.error):  # cut where the bytes end
        pass
    return None


def _no_split_message(sources: list, scans: list[dict], missing: list[str]) -> str:
    found = sorted({name for scan in scans for name in scan["splits"]})
    archives = ", ".join(source_name(s) for s in sources)
    named = " or ".join(repr(name) for name in missing)
    return (f"no images below a folder named {named} in {archives} (split folders found: "
            f"{', '.join(found) if found else 'none'}); split= names the folder above the "
            f"class folders, e.g. 'train' for train/<class>/<file>")


# Skipped members that pack turns into images, as the "no images" error names them (one of
# them, several), its REPACK_HINTS after.
_PACKED_MEMBERS = (
    ("archive", "is an archive itself", "are archives themselves"),
    ("link", "is a link, which a stream cannot follow",
     "are links, which a stream cannot follow"),
)


def _no_images_message(sources: list, skipped: list[Mapping[str, int]]) -> str:
    """What each archive held instead of images, and the layout that would have been read."""
    found = []
    for source, counts in zip(sources, skipped):
        reasons = ", ".join(f"{reason}: {n}" for reason, n in
                            sorted(counts.items(), key=lambda item: (-item[1], item[0])))
        found.append(f"{source} ({'skipped ' + reasons if reasons else 'no members'})")
    loose = sum(counts.get("no_class_folder", 0) for counts in skipped)
    where = (f" {counted(loose, 'image')} {'lies' if loose == 1 else 'lie'} at the top level, "
             f"outside any class folder (no_class_folder): "
             f"{REPACK_HINTS['no_class_folder'].format(archive='SRC')}." if loose else "")
    for reason, one, several in _PACKED_MEMBERS:  # the first archive holding such members
        held = next(((source, counts[reason]) for source, counts in zip(sources, skipped)
                     if counts.get(reason)), None)
        if held:
            source, n = held
            where += (f" {counted(n, 'member')} of {source} {one if n == 1 else several}: "
                      f"{REPACK_HINTS[reason].format(archive=source)}.")
    return (f"no images found in {'; '.join(found)}.{where} Images are read from members "
            f"named <split>/<class>/<file> or <class>/<file>, the class being the parent "
            f"folder, with one of the extensions {' '.join(sorted(IMAGE_EXTENSIONS))}; "
            f"{PACK_HINT}")


def _check_classes(sources: list, counts: Mapping[str, int]) -> None:
    """One class is a mistake: an error when it is a split folder holding the images directly
    (train/x.jpg: the model would learn one class named "train"), else a warning."""
    if len(counts) != 1:
        return
    (name, images), = counts.items()
    archives = ", ".join(source_name(s) for s in sources)
    if is_split_name(name):
        raise ValueError(
            f"{archives}: the only class found is {name!r}, a split folder holding "
            f"{counted(images, 'image')} directly; a model would learn one class named "
            f"{name!r}. Put each image in its class's folder ({name}/<class>/<file>): "
            f"members are read as {LAYOUT}; {PACK_HINT}")
    warnings.warn(
        f"{archives}: one class found ({name!r}, {counted(images, 'image')}); a classifier "
        f"trained on it learns nothing. Members are read as {LAYOUT}: if the archive holds "
        f"several classes, each image must lie in its class's folder (where the classes are "
        f"folders higher up, as in Tiny ImageNet's train/<class>/images/<file>, python -m "
        f"imageloader pack train OUT.tgz --class-folder top packs them so)",
        stacklevel=4)  # the caller of ImageLoader(...), the usual way here


def _check_splits(sources: list, scans: list[dict]) -> None:
    """Images of two splits are a mistake: one loader would train on both, the split folders
    being above the class folders (imagenette2/train/<class>/... and imagenette2/val/<class>/...
    in one archive, or train and val archives in one glob), and a validation set mixed into
    training raises no other error. Several splits named in Options(split=...) are read on
    purpose and never get here."""
    _refuse_splits(_splits_found(sources, scans))


def _splits_found(sources: list, scans: list[dict]) -> dict[str, list[str]]:
    """Each split the scans found, and where: "4 images in a.tgz"."""
    found: dict[str, list[str]] = {}
    for source, scan in zip(sources, scans):
        for split, classes in scan["splits"].items():
            found.setdefault(split, []).append(f"{counted(sum(classes.values()), 'image')} "
                                               f"in {source_name(source)}")
    return found


def _refuse_splits(found: dict[str, list[str]]) -> None:
    if len(found) > 1:
        listed = "; ".join(f"{split}: {', '.join(where)}" for split, where in sorted(found.items()))
        raise ValueError(two_splits_message(len(found), listed, sorted(found)[0]))


def as_vocabulary(vocab) -> Vocabulary | None:
    """Accept a Vocabulary, a list of class names, a {name: target} dict, or a file path."""
    if vocab is None or isinstance(vocab, Vocabulary):
        return vocab
    if isinstance(vocab, (str, os.PathLike)):
        return Vocabulary.load(vocab)
    if isinstance(vocab, Mapping):
        expected = [class_name(name) for name in sorted(vocab, key=vocab.__getitem__)]
        made = Vocabulary(vocab)
        if list(made.classes) != expected or sorted(vocab.values()) != list(range(len(vocab))):
            raise ValueError("a vocab dict must map the sorted class names to 0..K-1")
        return made
    return Vocabulary(vocab)


def sidecar_path(archive: str) -> str:
    if remote.is_url(archive):
        return remote.cache_path(archive, SIDECAR_SUFFIX)
    return archive + SIDECAR_SUFFIX


def archive_classes(path: str, *, limits: Limits = Limits(), inflate: str = "auto",
                    write_sidecar: bool = True, split: str | tuple | None = None) -> dict[str, int]:
    """Images per class folder in one archive (with `split`, below split folders of that
    name), from its sidecar if it is still fresh."""
    return scan_classes(_scan(path, limits, inflate, write_sidecar), split)


def archive_regions(path: str, *, limits: Limits = Limits(), inflate: str = "auto",
                    split: str | tuple | None = None) -> list[Region] | None:
    """Where readers can enter the archive (index.py), from the same sidecar and scan; None
    when it cannot be split. With `split`, each region counts that split's images only."""
    payload = _scan(path, limits, inflate, True).get("regions")
    if payload and index_is_stale(path, payload):  # the index beside it changed: scan again
        payload = _scan(path, limits, inflate, True, again=True)["regions"]
    return regions_from(path, payload, split)


def scan_archive(path: str, *, tee, limits: Limits = Limits(), inflate: str = "auto") -> dict:
    """Scan now, even with a fresh sidecar, and write the sidecar; `tee` is given the tar
    stream as it is inflated (the plain copy, cache.py: one inflate for both)."""
    return _scan(path, limits, inflate, True, again=True, tee=tee)


def _scan(path: str, limits: Limits, inflate: str, write_sidecar: bool,
          again: bool = False, tee=None) -> dict:
    """The fresh sidecar's content, or a scan's (written as the sidecar)."""
    stamp = file_stamp(path)
    cached = None if again else _read_sidecar(sidecar_path(path), stamp)
    if cached is not None:
        return cached
    skipped: Counter = Counter()
    recorder = recorder_for(path, inflate) if write_sidecar else None
    counts: Counter = Counter()
    splits: dict[str, Counter] = {}
    places = ClassPlaces()
    for member in iter_members(path, skipped=skipped, limits=limits, read_data=False,
                               inflate=inflate, recorder=recorder, tee=tee):
        counts[member.label] += 1
        places.add(member.label, member.name)
        split = split_folder(member.name)
        if split is not None:
            splits.setdefault(split, Counter())[member.label] += 1
            if recorder is not None:
                recorder.count_split(split)
    regions = recorder.payload(sum(counts.values()), skipped) if recorder else None
    payload = {"format": _FORMAT, "archive": stamp, "classes": dict(sorted(counts.items())),
               "splits": {split: dict(sorted(classes.items()))
                          for split, classes in sorted(splits.items())},
               "skipped": dict(sorted(skipped.items())), "shared": places.shared(),
               "nested": places.nested(), "regions": regions}
    if write_sidecar:
        _try_write_sidecar(path, payload)
    return payload


def cached_image_count(path: str) -> int | None:
    """Images in an archive according to its sidecar, if that is fresh; never scans."""
    data = _fresh_sidecar(path)
    return sum(data["classes"].values()) if data and data["classes"] else None


def _fresh_sidecar(path: str) -> dict | None:
    """The archive's sidecar if it is fresh, else None; never scans."""
    try:
        return _read_sidecar(sidecar_path(path), file_stamp(path))
    except OSError:
        return None


def fresh_scan(path: str) -> dict | None:
    """The sidecar's content if it is fresh and names an index that is too; never scans."""
    data = _fresh_sidecar(path)
    if data is None or (data.get("regions") and index_is_stale(path, data["regions"])):
        return None
    return data


def _read_sidecar(path: str, stamp: dict) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if data.get("format") != _FORMAT or data.get("archive") != stamp:
        return None  # stale (or from an older version): the archive changed since the scan
    data["classes"] = {str(k): int(v) for k, v in data["classes"].items()}
    return data


def _try_write_sidecar(path: str, payload: dict) -> None:
    try:
        _write_json(sidecar_path(path), payload)
    except OSError as error:  # a read-only dataset folder is normal; we just rescan next time
        log.info("could not write the class sidecar beside %s: %s", path, error)


def _write_json(path, payload) -> None:
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)  # atomic: concurrent ranks never read half a file
