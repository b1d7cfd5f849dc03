"""What can go wrong with input: error types, skip reasons and the limits that guard decoding.

Two kinds of problem, two policies:
- archive-level problems (not a tar, truncated, corrupt header, gzip CRC mismatch) are always
  fatal and raise `ArchiveError`, naming the archive, the member and the byte offset;
- image-level problems (undecodable, too many pixels, empty) raise `SampleError`; the loader
  skips and counts them by reason unless `on_error="raise"`.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

# What the loader reads, and how to make it: quoted by the errors about wrong input.
LAYOUT = "<split>/<class>/<file> or <class>/<file> (the class is the image's parent folder)"
PACK_HINT = ("python -m imageloader pack FOLDER OUT.tgz makes one from a folder of "
             "<class>/<file> images")
# What `pack` makes of members the loader skips, by skip reason: the loader's "no images"
# error and `summary` say it, with the archive's name.
REPACK_HINTS = {
    "archive": "a tar of <class>.tar archives (as ImageNet's ILSVRC2012_img_train.tar) is "
               "flattened into one the loader reads by python -m imageloader pack {archive} "
               "OUT.tgz --prefix train",
    "no_class_folder": "python -m imageloader pack {archive} OUT.tgz --labels FILE puts them "
                       "in class folders from a list of file,class rows (--class-pattern "
                       "REGEX: from their names)",
    "link": "python -m imageloader pack {archive} OUT.tgz packs each link to an image of the "
            "archive as that image; links out of it (a folder of symlinks, tarred) need the "
            "tar made again with tar -h (--dereference), which stores the files linked to",
}
# Folder names that say "split", not "class": the only class being one of them means the
# images lie directly in the split folder (train/x.jpg). A year or version may follow
# (COCO's train2017/ and val2017/, train_1/), and one of SPLIT_COMPANIONS may stand before or
# after it (Kaggle's training_set/ and test_set/, valset/, val_images/, images_train/): without them
# training_set/<class>/ beside test_set/<class>/ read as one set, the test images trained on.
SPLIT_NAMES = frozenset({"train", "training", "val", "valid", "validation", "test", "testing",
                         "eval", "evaluation", "dev"})
SPLIT_COMPANIONS = frozenset({"set", "data", "images", "imgs", "img", "files", "samples",
                              "split"})
_COMPANION = rf"(?:{'|'.join(sorted(SPLIT_COMPANIONS))})"
_SPLIT_NAME = re.compile(rf"(?:{_COMPANION}[-_.]?)?(?:{'|'.join(sorted(SPLIT_NAMES))})"
                         rf"(?:[-_.]?\d+)?(?:[-_.]?{_COMPANION})?", re.IGNORECASE)


def is_split_name(name: str) -> bool:
    """Whether a folder's name says "split": one of SPLIT_NAMES, in any case, alone or with a
    number after it (train2017, val-2, TEST_1), and with one of SPLIT_COMPANIONS before or
    after it or neither (training_set, val_images, images_train)."""
    return _SPLIT_NAME.fullmatch(name) is not None


def counted(n: int, noun: str) -> str:
    """`1 member`, `2 members`: counts in messages, with the noun's number right."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class ArchiveError(RuntimeError):
    """The archive itself is unreadable; reading cannot go on."""

    def __init__(self, archive: str, problem: str, *, member: str | None = None,
                 index: int | None = None, offset: int | None = None):
        where = [f"archive {archive!r}"]
        if index is not None:
            where.append(f"member #{index}")
        if member is not None:
            where.append(f"{member!r}")
        if offset is not None:
            where.append(f"at byte offset {offset} of the tar stream")
        super().__init__(f"{problem} ({', '.join(where)})")
        self.archive, self.problem, self.member, self.index, self.offset = (
            archive, problem, member, index, offset)

    def __reduce__(self):  # keep keyword fields across process boundaries
        return _rebuild_archive_error, (self.archive, self.problem, self.member, self.index,
                                        self.offset)


def _rebuild_archive_error(archive, problem, member, index, offset):
    return ArchiveError(archive, problem, member=member, index=index, offset=offset)


class SampleError(ValueError):
    """One image cannot be used; `reason` is the key it is counted under when skipped."""

    def __init__(self, reason: str, detail: str, *, archive: str | None = None,
                 member: str | None = None):
        self.reason, self.detail, self.archive, self.member = reason, detail, archive, member
        where = f" ({archive!r}, member {member!r})" if member is not None else ""
        super().__init__(f"{reason}: {detail}{where}")

    def located(self, archive: str, member: str) -> "SampleError":
        return SampleError(self.reason, self.detail, archive=archive, member=member)

    def __reduce__(self):
        return _rebuild_sample_error, (self.reason, self.detail, self.archive, self.member)


def _rebuild_sample_error(reason, detail, archive, member):
    return SampleError(reason, detail, archive=archive, member=member)


class UnknownLabelError(KeyError):
    """A member's class folder is not in the vocabulary (e.g. a val archive with an extra class)."""

    def __init__(self, label: str, archive: str, member: str):
        self.label, self.archive, self.member = label, archive, member
        super().__init__(label)

    def __str__(self) -> str:
        split = (f" ({self.label!r} looks like a split folder holding images directly; members "
                 f"are read as {LAYOUT})" if is_split_name(self.label) else "")
        return (f"class {self.label!r} of member {self.member!r} in archive {self.archive!r} "
                f"is not in the label vocabulary{split}; pass a vocabulary that contains it, "
                f"or unknown_labels='skip' to count and skip such members")

    def __reduce__(self):
        return UnknownLabelError, (self.label, self.archive, self.member)


# Members that are skipped without being decoded, by the reader (counted, never silent).
READER_SKIPS = (
    "directory", "link", "special", "macos_metadata", "hidden", "archive", "not_image",
    "no_class_folder", "bad_name", "duplicate", "too_large", "empty", "unknown_label",
)
# Skips counted but not warned of: a folder's entry holds no data, and `tar czf` writes one
# for every class folder (a warning each epoch about them would teach users to ignore it).
UNWARNED_SKIPS = frozenset({"directory"})
# Images that were read but could not be decoded (counted under on_error="skip").
DECODE_SKIPS = ("undecodable", "truncated", "format_not_allowed", "too_many_pixels")


@dataclass(frozen=True)
class Limits:
    """Safety limits for untrusted archives. Defaults admit every real photo dataset we know."""

    max_member_bytes: int = 64 << 20   # checked against the tar header before reading data
    max_pixels: int = 64_000_000       # checked from the image header before decoding
    max_path_length: int = 4096        # characters in a member name

    def __post_init__(self):
        for name in ("max_member_bytes", "max_pixels", "max_path_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)}")


def check_policy(name: str, value: str) -> str:
    if value not in ("skip", "raise"):
        raise ValueError(f"{name} must be 'skip' or 'raise', got {value!r}")
    return value


def check_split(split) -> str | tuple[str, ...] | None:
    """Options.split as the loader keeps it: None; the name of a split folder (is_split_name)
    in lower case (read.split_folder's spelling); or several names as a sorted tuple of them
    in lower case (one name given in a list is that name)."""
    if split is None:
        return None
    names = [split] if isinstance(split, str) else (
        list(split) if isinstance(split, (list, tuple, set, frozenset)) else [None])
    if not names or any(not isinstance(n, str) or not is_split_name(n) for n in names):
        raise ValueError(f"split must be None, the name of a split folder, or several names "
                         f"(read as one set); names are {', '.join(sorted(SPLIT_NAMES))} (any "
                         f"case), alone or with a number after them (train2017), and "
                         f"with {', '.join(sorted(SPLIT_COMPANIONS))} before or after "
                         f"them or neither (training_set, val_images), got {split!r}")
    lowered = sorted({name.lower() for name in names})
    return lowered[0] if len(lowered) == 1 else tuple(lowered)


def two_splits_message(splits: int, found: str, first: str) -> str:
    """Every refusal of images of several splits read as one set: `found` says where they
    are, `first` is the split a loader would read alone."""
    return (f"images of {splits} splits found ({found}): one loader would read them all as one "
            f"set, its classes being the folders below each split. Give each split its own "
            f"loader: Options(split={first!r}) reads only the images below that folder; to "
            f"read several as one set on purpose (a last run on train and val), name them: "
            f"Options(split=('train', 'val'))")


def merge_counts(total: Counter, part: dict) -> Counter:
    total.update({k: v for k, v in part.items() if v})
    return total
