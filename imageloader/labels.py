"""Where pack puts each image: <class>/<file>, the class from a list of file,class rows,
from ImageNet's devkit, from the file's name, from the folder right under SRC (torchvision's
ImageFolder rule) or from all its folders (SUN397's a/apartment_building/outdoor); and which
images a list of paths keeps (Food-101's meta/train.txt).

Images that lie outside class folders (ImageNet's validation tar, Kaggle's train/ beside a
labels.csv, Kaggle's cat.0.jpg ... dog.0.jpg) or deeper than their class's folder (Tiny
ImageNet's <class>/images/<file>) are written by pack.py under the class these give them;
every image needs one, and two images that would get one path are refused.
"""
from __future__ import annotations

import csv
import io
import logging
import os
import re
import tarfile

from .errors import counted

log = logging.getLogger(__name__)


def member_paths(src, relative_paths: list[str], labels, class_folder: str,
                 class_pattern: str | None = None) -> dict[str, str]:
    """{path under src: path in the archive, below the prefix}: as it is, or <class>/<file>
    with the class from a labels file, from the file's name, from the folder right under
    src or from all its folders."""
    if labels is not None:
        return labelled_paths(src, relative_paths, labels)
    if class_pattern is not None:
        return named_paths(src, relative_paths, class_pattern)
    if class_folder == "top":
        return _in_class_folders(src, relative_paths, lambda path, name: path.split("/")[0])
    if class_folder == "path":
        return path_named(src, relative_paths)
    return {path: path for path in relative_paths}


FOLDER_JOIN = "-"  # as Places365's own flat names: a/apartment_building/outdoor ->
# apartment_building-outdoor


def path_named(src, relative_paths: list[str]) -> dict[str, str]:
    """<class>/<file>, the class being all of an image's folders below src joined by
    FOLDER_JOIN: SUN397's a/apartment_building/outdoor/x.jpg -> a-apartment_building-outdoor/
    x.jpg, where the parent-folder rule reads it and c/church/outdoor/y.jpg as one class
    "outdoor". Below src, not below what the images share: a split packed from a list
    (--only) gets the same class names as the other split. Two folders may not join to one
    name."""
    joined: dict[str, str] = {}

    def class_of(path: str, name: str) -> str:
        folder = path.rpartition("/")[0]
        label = folder.replace("/", FOLDER_JOIN)
        if joined.setdefault(label, folder) != folder:
            raise ValueError(f"pack {src}: folders {joined[label]} and {folder} would both be "
                             f"class {label!r}; rename one")
        return label

    return _in_class_folders(src, relative_paths, class_of)  # image_files: all in folders


def listed_paths(src, relative_paths: list[str], only: str | os.PathLike) -> list[str]:
    """The images that `only` lists, one path a line (with or without the extension): a
    split given by a list. Every line must name an image: a line that names none means the
    wrong folder or a broken download."""
    with open(only, encoding="utf-8-sig") as f:  # SUN397's lists: /a/abbey/sun_a.jpg
        wanted = [line.strip().lstrip("/") for line in f if line.strip().lstrip("/")]
    keys: dict[str, set[str]] = {}
    for path in relative_paths:
        for key in (path, os.path.splitext(path)[0]):
            keys.setdefault(key, set()).add(path)
    missing = [line for line in wanted if line not in keys]
    if missing:
        raise ValueError(f"pack {src}: {len(missing)} of the {len(wanted)} lines of {only} "
                         f"name no image (e.g. {missing[0]}); paths are relative to SRC "
                         f"(or --folder), with or without their extension")
    both = next((line for line in wanted if len(keys[line]) > 1), None)
    if both is not None:
        raise ValueError(f"pack {src}: line {both!r} of {only} names "
                         f"{' and '.join(sorted(keys[both]))}; give the extension")
    return sorted({path for line in wanted for path in keys[line]})


def named_paths(src, relative_paths: list[str], pattern: str) -> dict[str, str]:
    """<class>/<file>, the class found in the file's name by `pattern` (its first group, or
    all it matches): Kaggle's cat.0.jpg with ^(cat|dog)[.], Oxford pets' Abyssinian_1.jpg
    with ^(.+)_[0-9]+[.]. Every image's name must hold one."""
    found = re.compile(pattern)

    def class_of(path: str, name: str) -> str | None:
        match = found.search(name)
        label = match and (match.group(1) if found.groups else match.group(0))
        return None if not label or "/" in label or label in (".", "..") else label

    return _in_class_folders(src, relative_paths, class_of, lambda unmatched: (
        f"pack {src}: {len(unmatched)} of {len(relative_paths)} images' names give no class "
        f"by {pattern!r} (e.g. {unmatched[0]}); each image needs its class"))


def labelled_paths(src: str | os.PathLike, relative_paths: list[str],
                   labels: str | os.PathLike) -> dict[str, str]:
    """Each image's path in the archive, <class>/<its file name>, its class from `labels`'
    row for its path, its file name or its name less the extension. Every image needs a row;
    rows that name no image are warned of (a first one is taken for a header)."""
    rows = read_labels(labels)
    used = set()

    def class_of(path: str, name: str) -> str | None:
        key = next((k for k in (path, name, os.path.splitext(name)[0]) if k in rows), None)
        if key is None:
            return None
        used.add(key)
        return rows[key]

    targets = _in_class_folders(src, relative_paths, class_of, lambda missing: (
        f"pack {src}: {len(missing)} of {len(relative_paths)} images "
        f"{'has' if len(missing) == 1 else 'have'} no row in {labels} (e.g. {missing[0]}); "
        f"each image needs its class"))
    unused = [key for key in rows if key not in used]
    if unused and unused[0] == next(iter(rows)):
        unused = unused[1:]  # a first row that names no image is a header (id,breed)
    if unused:
        log.warning("pack %s: %s of %s %s no image (e.g. %s)", src, counted(len(unused), "row"),
                    labels, "names" if len(unused) == 1 else "name", unused[0])
    return targets


def _in_class_folders(src, relative_paths: list[str], class_of,
                      unplaced=None) -> dict[str, str]:
    """{path: <class>/<its file name>}, the class from class_of(path, file name), for every
    rule. Paths it gives no class are refused, unplaced(those paths) saying why (a rule that
    always gives one passes none); then two images that would get one path."""
    targets, missing = {}, []
    for path in relative_paths:
        name = path.rsplit("/", 1)[-1]
        label = class_of(path, name)
        if label is None:
            missing.append(path)
        else:
            targets[path] = f"{label}/{name}"
    if missing:
        raise ValueError(unplaced(missing) if unplaced else
                         f"pack {src}: {len(missing)} images get no class (e.g. {missing[0]})")
    _refuse_one_name_twice(src, targets)
    return targets


def _refuse_one_name_twice(src, targets: dict[str, str]) -> None:
    seen: dict[str, str] = {}
    for path, target in targets.items():
        if target in seen:
            raise ValueError(f"pack {src}: {seen[target]} and {path} would both be {target}; "
                             f"each image of a class needs a file name of its own")
        seen[target] = path


def read_labels(path: str | os.PathLike) -> dict[str, str]:
    """{file: class} from a text file of rows `file,class` (or tab- or space-separated; a
    class column holding more, as Kaggle's LOC_val_solution.csv does, gives its first word),
    or from ImageNet's devkit (ILSVRC2012_devkit_t12.tar.gz): devkit_labels."""
    if tarfile.is_tarfile(path):
        return devkit_labels(path)
    rows: dict[str, str] = {}
    with open(path, encoding="utf-8-sig", newline="") as f:
        lines = f.read().splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        fields = [field.strip() for field in (next(csv.reader([line])) if "," in line
                                              else line.split("\t") if "\t" in line
                                              else line.split())]
        if len(fields) < 2 or not fields[0] or not fields[1].split():
            raise ValueError(f"{path}, line {number}: {line!r} is not a file and its class")
        key, label = fields[0], fields[1].split()[0]
        if "/" in label or label in (".", ".."):
            raise ValueError(f"{path}, line {number}: class {label!r} cannot name a folder")
        if rows.setdefault(key, label) != label:
            raise ValueError(f"{path}, line {number}: {key} has two classes, {rows[key]} and "
                             f"{label}")
    return rows


DEVKIT_TRUTH = "data/ILSVRC2012_validation_ground_truth.txt"
DEVKIT_META = "data/meta.mat"


def devkit_labels(path: str | os.PathLike) -> dict[str, str]:
    """{ILSVRC2012_val_00000001: n01751748, ...} from ImageNet's devkit: its ground truth
    gives the nth validation image's ILSVRC2012_ID, its meta.mat each ID's WNID (the training
    archive's class tars are named by WNID). meta.mat is MATLAB's format: read with scipy."""
    try:
        from scipy.io import loadmat
    except ImportError:
        raise ImportError(f"{path} is read as ImageNet's devkit, whose meta.mat needs scipy: "
                          f"pip install scipy (or imageloader[imagenet])") from None
    found = _devkit_members(path)
    synsets = loadmat(io.BytesIO(found[DEVKIT_META]), squeeze_me=True)["synsets"]
    wnids = {int(synset["ILSVRC2012_ID"]): str(synset["WNID"]) for synset in synsets}
    truth = found[DEVKIT_TRUTH].decode().split()
    return {f"ILSVRC2012_val_{n:08d}": wnids[int(class_id)]
            for n, class_id in enumerate(truth, 1)}


def _devkit_members(path) -> dict[str, bytes]:
    wanted = (DEVKIT_TRUTH, DEVKIT_META)
    found = {}
    with tarfile.open(path) as devkit:
        for member in devkit:
            name = next((w for w in wanted if member.name.endswith("/" + w)), None)
            if name and member.isfile():
                found[name] = devkit.extractfile(member).read()
    missing = [name for name in wanted if name not in found]
    if missing:
        raise ValueError(f"--labels {path} is a tar but not ImageNet's devkit: it holds no "
                         f"{' and no '.join(missing)}; labels come from a text file of "
                         f"file,class rows, or from ILSVRC2012_devkit_t12.tar.gz")
    return found
