"""Archive writing: labeled images -> reproducible .tgz (or .tar) archives the loader reads.

    python -m imageloader pack photos/train train.tgz                  # train/<class>/<file>
    python -m imageloader pack photos/train train.tgz --shards 8 --shuffle-seed 0
    python -m imageloader pack photos.zip photos.tgz                   # a .zip, not unpacked
    python -m imageloader pack ILSVRC2012_img_train.tar train.tar --prefix train  # plain tar
    python -m imageloader pack ILSVRC2012_img_val.tar val.tgz --prefix val \
        --labels ILSVRC2012_devkit_t12.tar.gz                       # or a file,class list
    python -m imageloader pack tiny-imagenet-200.zip train.tgz \
        --folder tiny-imagenet-200/train --class-folder top          # <class>/images/<file>
    python -m imageloader pack train.zip train.tgz --class-pattern '^(cat|dog)[.]'  # cat.0.jpg

Accepted folders, or a .zip or tar holding one, read member by member (an archive's name
less its suffix stands for SRC's folder name; a zip's __MACOSX/ entries are left out as
hidden). A tar's members that are tars themselves stand for folders of their names less
".tar" (ImageNet's training archive holds one n01440764.tar ... per class):

    SRC/<class>/<file>           members: <prefix>/<class>/<file>  (prefix: SRC's folder name)
    SRC/<split>/<class>/<file>   members: <split>/<class>/<file>   (prefix: none; a loader
                                 reads one split of them: Options(split="train"))

so packing `photos/train` gives the ImageNet layout `train/<class>/<file>`. Images outside
class folders (SRC/<file>, SRC/images/<file>) take their classes from `--labels`, a list of
`file,class` rows (Kaggle's labels.csv of id,breed; its LOC_val_solution.csv for ImageNet),
or ImageNet's devkit for its validation images (needs scipy), and are written as
<class>/<file>;
with `--class-folder top`, the class is the folder right under SRC, the image anywhere below
it (torchvision's ImageFolder rule: SRC/<class>/images/<file>, as Tiny ImageNet has it); with
`--class-folder path`, all its folders joined (SUN397's and Places365's a/church/outdoor, whose
parent folder alone would make one class of every .../outdoor: a-church-outdoor). Only
regular image files are added (symlinks to files are followed; in a tar, a hard or symbolic
link to an image of the tar is packed as that image); hidden files and folders
(names starting with '.') and files that are not images are left out, the latter with a
warning. Archives are byte-reproducible: fixed mtime, owner and mode in every tar header,
mtime 0 and no file name in the gzip header. With `shards=N` the members are cut into N
contiguous, near-equal archives `<out>-00000-of-0000N.tgz` ...; a shuffle seed makes each
shard mix all classes. An OUT ending in .tar is written as a plain tar: JPEG bytes barely
compress, and the loader reads a plain tar with no inflating (of a .tgz it keeps a plain
copy where the disk has room: the bytes twice).
"""
from __future__ import annotations

import argparse
import bz2
import contextlib
import functools
import gzip
import io
import logging
import lzma
import os
import posixpath
import random
import tarfile
import zipfile
from concurrent.futures import ProcessPoolExecutor
from typing import BinaryIO, Iterable

from .errors import counted
from .labels import listed_paths, member_paths
from .read import (IMAGE_EXTENSIONS, available_inflaters, has_image_extension, is_gzip,
                   open_stream, unsparse)

log = logging.getLogger(__name__)
CLASS_FOLDERS = ("parent", "top", "path")  # labels.member_paths
FIXED_MTIME = 0  # so that the bytes do not depend on when, or from what checkout, they were made
TGZ_SUFFIXES = (".tar.gz", ".tgz")
LAYOUT = "SRC/<class>/<file> or SRC/<split>/<class>/<file>"
SOURCE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")  # an archive's name less one: SRC's name


def reproducible_tarinfo(name: str, size: int) -> tarfile.TarInfo:
    """A TarInfo whose metadata is the same on every machine and every run."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = FIXED_MTIME
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_reproducible_tgz(path: str | os.PathLike, members: Iterable[tuple[str, bytes]],
                           compresslevel: int = 9, gzipped: bool = True) -> int:
    """Write (name, bytes) members in the given order, gzipped or as a plain tar; returns the
    payload bytes."""
    payload = 0
    with open(path, "wb") as raw, contextlib.ExitStack() as stack:
        # gzip stores a timestamp (and optionally a file name) in its header; pin both.
        out = stack.enter_context(gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0,
                                                compresslevel=compresslevel)) if gzipped else raw
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for name, data in members:
                tar.addfile(reproducible_tarinfo(name, len(data)), io.BytesIO(data))
                payload += len(data)
    return payload


def is_zip(src: str | os.PathLike) -> bool:
    return os.path.isfile(src) and zipfile.is_zipfile(src)


def is_tar(src: str | os.PathLike) -> bool:
    return os.path.isfile(src) and not is_zip(src) and tarfile.is_tarfile(src)


# Compressed tars other than gzip (read.open_stream's), by their first three bytes
_OTHER_INFLATERS = {b"BZh": bz2.open, b"\xfd7z": lzma.open}


def _other_inflater(path: str | os.PathLike):
    with open(path, "rb") as f:
        return _OTHER_INFLATERS.get(f.read(3))


def _is_compressed(path: str | os.PathLike) -> bool:
    return is_gzip(os.fspath(path)) or _other_inflater(path) is not None


def _tar_bytes(path: str | os.PathLike) -> BinaryIO:
    """A tar's bytes, plain or inflated, seekable: rapidgzip (where installed) seeks back in a
    .tgz cheaply, the others by inflating again from the start."""
    inflater = _other_inflater(path)
    return inflater(path, "rb") if inflater else open_stream(path)


def list_files(src: str | os.PathLike) -> list[str]:
    """Relative POSIX paths of the non-hidden regular files under src (a folder, a zip or a
    tar), sorted."""
    if is_zip(src):
        return _zip_files(src)
    if is_tar(src):
        return sorted(_tar_files(src))
    found = []
    for dirpath, dirnames, filenames in os.walk(src):
        # Pruned in place: os.walk then skips hidden folders (.git, .ipynb_checkpoints, ...).
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for filename in filenames:
            full = os.path.join(dirpath, filename)
            if not filename.startswith(".") and os.path.isfile(full):
                found.append(os.path.relpath(full, src).replace(os.sep, "/"))
    return sorted(found)


def _zip_files(src: str | os.PathLike) -> list[str]:
    """A zip's file entries as list_files gives a folder's: hidden ones left out (names
    starting with '.', and __MACOSX/, where macOS's archiver keeps resource forks)."""
    with zipfile.ZipFile(src) as archive:
        names = [info.filename for info in archive.infolist() if not info.is_dir()]
    return sorted(name for name in names if not _is_hidden(name))


def _is_hidden(name: str) -> bool:
    return any(part.startswith(".") or part == "__MACOSX" for part in name.split("/"))


def _tar_files(src: str | os.PathLike) -> dict[str, tuple]:
    """A tar's regular members as list_files gives a folder's files, each with where its bytes
    lie in the tar (_where: offset, size, a sparse file's pieces); a member that is a tar
    itself (<class>.tar) stands for a folder holding its members. Keyed to the file's size
    and mtime: pack lists, then reads."""
    stat = os.stat(src)
    return _tar_catalog(os.path.abspath(src), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=1)
def _tar_catalog(path: str, size: int, mtime_ns: int) -> dict[str, tuple]:
    found: dict[str, tuple] = {}
    links: dict[str, str] = {}  # a link's name -> the member it names, resolved at the end
    others = []  # members neither files nor links: warned of, never silently lost
    with _tar_bytes(path) as raw, tarfile.open(fileobj=raw, mode="r:") as outer:
        for member in outer:
            name = _clean(member.name)
            if member.isdir() or _is_hidden(name):
                continue
            if member.issym() or member.islnk():
                links[name] = _link_target(name, member)
            elif not member.isfile():
                others.append(name)
            elif name.lower().endswith(".tar"):
                _catalog_inner_tar(found, links, others, path, outer, member,
                                   name[:-len(".tar")])
            else:
                _catalog(found, path, name, _where(member))
    _add_linked_files(found, links, others, path)
    if others:
        log.warning("pack %s: left out %s that %s not a regular file or a link to one in the "
                    "archive (e.g. %s)", path, counted(len(others), "member"),
                    "is" if len(others) == 1 else "are", others[0])
    return found


def _link_target(name: str, link: tarfile.TarInfo) -> str:
    """The member a link names, as _clean writes names: a hard link names it from the archive's
    root, a symbolic one from the link's folder ("" where it points out of the archive, as tar
    would extract it: an absolute path, or ../ past the root)."""
    if link.islnk():
        return _clean(link.linkname)
    if link.linkname.startswith("/"):
        return ""
    target = posixpath.normpath(posixpath.join(posixpath.dirname(name), link.linkname))
    return "" if target.startswith("../") or target == ".." else _clean(target)


def _add_linked_files(found: dict, links: dict[str, str], others: list, path: str) -> None:
    """Links to a file of the archive are packed as that file (as tar -x, then packing the
    folder, would): GNU tar stores a file's second hard link as a link to the first, and a
    folder of symlinked images (a subset made with ln -s) tars as links. A link to a .tar
    member, a folder or nothing in the archive is left out, among `others`."""
    for name, target in links.items():
        for _ in range(len(links)):  # a link to a link: followed until a file, or a cycle
            if target not in links:
                break
            target = links[target]
        if target in found and not name.lower().endswith(".tar"):
            _catalog(found, path, name, found[target])
        else:
            others.append(name)


def _catalog_inner_tar(found: dict, links: dict[str, str], others: list, path: str,
                       outer: tarfile.TarFile, member: tarfile.TarInfo, folder: str) -> None:
    """A class's tar: its images lie at their offsets within it, past its own offset; its
    links name its members (resolved with the outer tar's, their names under `folder`)."""
    try:
        with tarfile.open(fileobj=outer.extractfile(member), mode="r:") as inner:
            for image in inner:
                name = _clean(image.name)
                if image.isdir() or _is_hidden(name):
                    continue
                if "/" in name:
                    raise ValueError(f"pack {path}: member {member.name} holds {image.name}, "
                                     f"in a folder; a class's tar holds its images directly, "
                                     f"its name less .tar being their class")
                if image.issym() or image.islnk():
                    target = _link_target(name, image)
                    links[f"{folder}/{name}"] = f"{folder}/{target}" if target else ""
                elif not image.isfile():
                    others.append(f"{folder}/{name}")
                else:
                    _catalog(found, path, f"{folder}/{name}",
                             _where(image, past=member.offset_data))
    except tarfile.TarError as error:
        raise ValueError(f"pack {path}: member {member.name} is named as a tar but cannot be "
                         f"read as one ({error})") from None


def _where(member: tarfile.TarInfo, past: int = 0) -> tuple:
    """Where a file's bytes lie in the tar (`past` its tar's own offset): (offset, size), and
    for a sparse file (tar -S) its pieces, stored one after another there (_file_bytes)."""
    if member.issparse():
        return past + member.offset_data, member.size, tuple(member.sparse)
    return past + member.offset_data, member.size


def _catalog(found: dict, path: str, name: str, where: tuple) -> None:
    if name in found:
        raise ValueError(f"pack {path}: two members are both {name}; each image needs a path "
                         f"of its own")
    found[name] = where


def _clean(name: str) -> str:
    """A member's name as a relative POSIX path: tar's leading ./ and slashes dropped."""
    return "/".join(part for part in name.split("/") if part not in ("", "."))


def image_files(src: str | os.PathLike, loose: bool = False, folder: str = "") -> list[str]:
    """The image files under src (under its `folder`, paths relative to that); refuses a
    folder that is not one of the accepted layouts (images outside a class folder too, unless
    `loose`: their classes come from a list)."""
    if not (os.path.isdir(src) or is_zip(src) or is_tar(src)):
        raise NotADirectoryError(f"pack reads a folder laid out as {LAYOUT}, or a .zip or tar "
                                 f"holding one; {src} is none of these")
    files = list_files(src)
    if folder:
        files = [p[len(folder) + 1:] for p in files if p.startswith(folder + "/")]
        if not files:
            raise ValueError(f"pack {src}: no files under {folder}/")
        src = f"{src}:{folder}"  # for the messages below
    images = [p for p in files if has_image_extension(p)]
    others = [p for p in files if not has_image_extension(p)]
    if others:
        what = "1 file that is not an image" if len(others) == 1 else \
            f"{len(others)} files that are not images"
        log.warning("pack %s: left out %s (e.g. %s)", src, what, others[0])
    outside = [p for p in images if "/" not in p] if not loose else []
    if outside:
        raise ValueError(f"pack {src}: {len(outside)} of {len(images)} images "
                         f"{'lies' if len(outside) == 1 else 'lie'} directly in the folder "
                         f"(e.g. {outside[0]}), not in a class folder; the class of an image is "
                         f"its parent folder: lay the folder out as {LAYOUT}, or give each "
                         f"image's class in a list (--labels FILE)")
    tars = [p for p in others if p.lower().endswith(".tar")]
    if not images and tars and os.path.isdir(src):
        raise ValueError(f"pack {src}: no images found, but {counted(len(tars), 'tar')} (e.g. "
                         f"{tars[0]}): a folder's tars are not unpacked; pack the tar that "
                         f"holds them (ImageNet's ILSVRC2012_img_train.tar), or a tar of them: "
                         f"tar -cf classes.tar -C {src} .")
    if not images:
        raise ValueError(f"pack {src}: no images found (extensions "
                         f"{' '.join(sorted(IMAGE_EXTENSIONS))}); expected {LAYOUT}")
    return images


def default_prefix(src: str | os.PathLike, relative_paths: list[str], folder: str = "") -> str:
    """src's (or its folder's) name for a <class>/<file> folder; nothing when it already holds
    <split>/ folders."""
    if {path.count("/") for path in relative_paths} == {2}:
        return ""
    if folder:
        return folder.rsplit("/", 1)[-1]
    name = os.path.basename(os.path.normpath(os.path.abspath(src)))
    if os.path.isdir(src):
        return name
    suffix = next((s for s in SOURCE_SUFFIXES if name.lower().endswith(s)), "")
    return name[:len(name) - len(suffix)]


def member_name(prefix: str, relative_path: str) -> str:
    prefix = prefix.strip("/")
    return f"{prefix}/{relative_path}" if prefix else relative_path


def order_members(relative_paths: list[str], shuffle_seed: int | None) -> list[str]:
    ordered = sorted(relative_paths)
    if shuffle_seed is not None:
        # A private Random: the order depends on the seed alone, not on global state.
        random.Random(shuffle_seed).shuffle(ordered)
    return ordered


def split_into_shards(items: list, shards: int) -> list[list]:
    """Contiguous, near-equal parts (sizes differ by at most one) covering items exactly once."""
    return [items[len(items) * k // shards: len(items) * (k + 1) // shards]
            for k in range(shards)]


def shard_paths(out: str, shards: int) -> list[str]:
    """out itself for one archive (.tgz added unless it ends in .tgz, .tar.gz or .tar), else
    <stem>-00000-of-0000N.tgz ... (.tar for a plain out)."""
    suffix = next((s for s in TGZ_SUFFIXES + (".tar",) if out.endswith(s)), None)
    if shards == 1:
        return [out if suffix else out + ".tgz"]
    stem = out[:-len(suffix)] if suffix else out
    return [f"{stem}-{k:05d}-of-{shards:05d}{'.tar' if suffix == '.tar' else '.tgz'}"
            for k in range(shards)]


def pack(src: str | os.PathLike, out: str | os.PathLike, *, shards: int = 1,
         shuffle_seed: int | None = None, prefix: str | None = None,
         compresslevel: int = 6, labels: str | os.PathLike | None = None,
         class_folder: str = "parent", class_pattern: str | None = None, folder: str = "",
         only: str | os.PathLike | None = None, jobs: int | None = None) -> list[str]:
    """Write the images under `src` into `shards` .tgz archives; returns their paths.

    `prefix` is put before every member's path ('' for none; None: src's folder name for a
    <class>/<file> folder, none for <split>/<class>/<file>). `labels`: a file of `file,class`
    rows for images that lie outside class folders (ImageNet's validation set, Kaggle's
    labels.csv): each is written as <class>/<file>. `class_folder="top"`: an image's class is
    the folder right under src, the image anywhere below it (torchvision's ImageFolder; Tiny
    ImageNet's train/<class>/images/<file>), written as <class>/<file>; `"path"`: all of
    an image's folders below src, joined by "-" (SUN397's a/church/outdoor/<file> ->
    a-church-outdoor/<file>). `class_pattern`: a regular expression whose first group (or
    match) in an image's file name is its class (Kaggle's cat.0.jpg: "^(cat|dog)[.]").
    `only`: a file listing the images to take, one path a line (Food-101's meta/train.txt).
    `folder`: only what lies under this folder of src (a zip's or tar's too), as if it were src.
    `jobs`: shards written at once, in as many processes (default: one a core)."""
    _check_choices(shards, labels, class_folder, class_pattern)
    if shuffle_seed is not None:
        _warn_if_slow_to_shuffle(src)
    folder = _clean(folder)
    relative_paths = image_files(src, loose=labels is not None or class_pattern is not None,
                                 folder=folder)
    if only is not None:
        relative_paths = listed_paths(src, relative_paths, only)
    if len(relative_paths) < shards:
        raise ValueError(f"pack {src}: {len(relative_paths)} images, fewer than {shards} shards")
    targets = member_paths(src, relative_paths, labels, class_folder, class_pattern)
    prefix = default_prefix(src, list(targets.values()), folder) if prefix is None else prefix
    paths = shard_paths(os.fspath(out), shards)
    os.makedirs(os.path.dirname(paths[0]) or ".", exist_ok=True)
    sources = {target: f"{folder}/{path}" if folder else path
               for path, target in targets.items()}
    members = order_members(list(sources), shuffle_seed)
    work = [(path, [(sources[m], m) for m in part])
            for path, part in zip(paths, split_into_shards(members, shards))]
    _write_shards(src, prefix, compresslevel, work, jobs)
    return paths


def _check_choices(shards: int, labels, class_folder: str, class_pattern) -> None:
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    if class_folder not in CLASS_FOLDERS:
        raise ValueError(f"class_folder must be one of {', '.join(map(repr, CLASS_FOLDERS))}, "
                         f"got {class_folder!r}")
    if sum([labels is not None, class_folder != "parent", class_pattern is not None]) > 1:
        raise ValueError(f"an image's class comes from one of labels, class_folder="
                         f"{class_folder!r} and class_pattern, not several")


def _warn_if_slow_to_shuffle(src) -> None:
    if is_tar(src) and _is_compressed(src) and "rapidgzip" not in available_inflaters():
        log.warning("pack %s: its members in shuffled order mean seeking back in a compressed "
                    "tar, which Python's gzip does by inflating it again from the start: "
                    "install rapidgzip (imageloader[fast]), or unpack it (gunzip -k) first",
                    src)


def _write_shards(src, prefix: str, compresslevel: int, work: list, jobs: int | None) -> None:
    """Each (archive path, [(path under src, member path)]) of `work` written, in parallel
    processes: gzip deflates tens of MB/s a core, and ImageNet's 140 GB would take hours in
    one."""
    jobs = max(1, min(len(work), jobs or os.cpu_count() or 1))
    with contextlib.ExitStack() as stack:
        run = map if jobs == 1 else stack.enter_context(ProcessPoolExecutor(jobs)).map
        write = functools.partial(_write_shard, src, prefix, compresslevel)
        for path, images, payload in run(write, *zip(*work)):
            log.info("%s: %d images, %d payload bytes, %d bytes", path, images, payload,
                     os.path.getsize(path))


def _write_shard(src, prefix: str, compresslevel: int, path: str,
                 pairs: list[tuple[str, str]]) -> tuple[str, int, int]:
    """One archive, written beside its name and renamed when whole: a pack that fails or is
    stopped leaves no archive that looks complete."""
    partial = path + ".partial"
    try:
        payload = write_reproducible_tgz(partial, _read_files(src, prefix, pairs), compresslevel,
                                         gzipped=not path.endswith(".tar"))
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return path, len(pairs), payload


def _read_files(src, prefix: str, pairs: list[tuple[str, str]]):
    """(member name, bytes) for each (path under src, path in the archive) pair, in order."""
    if is_zip(src):  # one open zip for all its members, each inflated as it is written
        with zipfile.ZipFile(src) as archive:
            for relative_path, target in pairs:
                yield member_name(prefix, target), archive.read(relative_path)
        return
    if is_tar(src):  # each image read at its offset: a class's tar is never unpacked
        where = _tar_files(src)
        with _tar_bytes(src) as raw:
            for relative_path, target in pairs:
                yield member_name(prefix, target), _file_bytes(raw, *where[relative_path])
        return
    for relative_path, target in pairs:
        with open(os.path.join(src, relative_path), "rb") as f:
            yield member_name(prefix, target), f.read()


def _file_bytes(raw: BinaryIO, offset: int, size: int, sparse: tuple = ()) -> bytes:
    """A file's bytes from the tar, read at its offset; a sparse one's stored pieces put at
    their offsets with zeros between (as tar -x writes it), not its stored bytes alone."""
    raw.seek(offset)
    if not sparse:
        return raw.read(size)
    return unsparse(raw.read(sum(length for _, length in sparse)), size, sparse)


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m imageloader pack", description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("src", help="folder (or .zip or tar) holding <class>/<file> or "
                                    "<split>/<class>/<file>; a tar's members <class>.tar "
                                    "stand for <class>/ folders")
    parser.add_argument("out", help="output .tgz, or .tar for a plain tar (JPEGs barely "
                                    "compress: the loader reads it with no inflating); with "
                                    "--shards N, the stem of the shard names")
    parser.add_argument("--shards", type=int, default=1, help="archives to split the images into")
    parser.add_argument("--shuffle-seed", type=int, default=None,
                        help="shuffle the members with this seed (so that every shard mixes "
                             "classes); None keeps sorted order")
    parser.add_argument("--prefix", default=None,
                        help="path before every member, '' for none; None: SRC's folder name "
                             "for <class>/<file>, none for <split>/<class>/<file>")
    parser.add_argument("--compresslevel", type=int, default=6, help="gzip level, 0-9")
    parser.add_argument("--class-folder", choices=CLASS_FOLDERS, default="parent",
                        help="an image's class: its parent folder; top: the folder right under "
                             "SRC with the image anywhere below it (torchvision's ImageFolder;"
                             " Tiny ImageNet's <class>/images/<file>); path: all its folders "
                             "joined by '-' (SUN397's a/church/outdoor: a-church-outdoor); "
                             "top and path are written as <class>/<file>")
    parser.add_argument("--class-pattern", default=None,
                        help="regular expression whose first group (or match) in an image's "
                             "file name is its class: Kaggle's cat.0.jpg: '^(cat|dog)[.]'")
    parser.add_argument("--folder", default="",
                        help="pack only what lies under this folder of SRC (in a zip or tar "
                             "too), as if it were SRC: e.g. tiny-imagenet-200/train")
    parser.add_argument("--only", default=None,
                        help="file listing the images to take, one path a line, relative to "
                             "SRC (or --folder), with or without the extension: a split given "
                             "by a list (Food-101's meta/train.txt)")
    parser.add_argument("--jobs", type=int, default=None,
                        help="shards written at once, one process each; None: one a core")
    parser.add_argument("--labels", default=None,
                        help="file of `file,class` rows (or tab- or space-separated; a first "
                             "row naming no image is a header), or ImageNet's devkit .tar.gz, "
                             "for images outside class folders: each is written as "
                             "<class>/<file>")
    return parser


def main(args: argparse.Namespace) -> list[str]:
    """The command: each archive written is logged (INFO) as `PATH: N images, ... bytes`."""
    return pack(args.src, args.out, shards=args.shards, shuffle_seed=args.shuffle_seed,
                prefix=args.prefix, compresslevel=args.compresslevel, labels=args.labels,
                class_folder=args.class_folder, class_pattern=args.class_pattern,
                folder=args.folder, only=args.only, jobs=args.jobs)
