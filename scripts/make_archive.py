"""Pack a folder of labeled images into one or more reproducible .tgz archives.

Accepted layouts:

    src/<class>/<image>           members: <prefix>/<class>/<image>   (prefix defaults to src's name)
    src/<split>/<class>/<image>   members: <split>/<class>/<image>    (prefix defaults to none)

so ``make_archive.py photos/train train.tgz`` gives the ImageNet layout
``train/<class>/<file>``. Only regular files are added (symlinks to files are
followed, and their content is stored); hidden files and folders (names starting
with '.') are skipped. Archives are byte-reproducible: fixed mtime/owner/mode
in every tar header and mtime=0 in the gzip header.

With ``--shards N`` the member list is cut into N contiguous, near-equal parts
written as ``<out>-00000-of-0000N.tgz`` ...; pass ``--shuffle-seed`` so that
each shard mixes all classes instead of holding a run of neighbouring ones.

    python scripts/make_archive.py photos/train out/train.tgz --shards 8 --shuffle-seed 0
"""

import argparse
import os
import random

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when loaded by path in tests
from tarwrite import write_reproducible_tgz  # noqa: E402

# A constant timestamp so the archive bytes do not depend on when (or from what
# checkout) they were built.
TGZ_SUFFIXES = (".tar.gz", ".tgz")


def get_args_parser():
    parser = argparse.ArgumentParser(
        description="Turn a folder of <class>/<image> (or <split>/<class>/<image>) files into .tgz archive(s).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("src", help="folder holding <class>/<image> or <split>/<class>/<image> files")
    parser.add_argument("out", help="output .tgz path; with --shards N, the prefix of the shard names")
    parser.add_argument("--shards", type=int, default=1, help="number of archives to split the members into")
    parser.add_argument(
        "--prefix",
        default=None,
        help="path prefix of every member inside the archive, '' for none; "
        "None: src's folder name for <class>/<image>, none for <split>/<class>/<image>",
    )
    parser.add_argument(
        "--shuffle-seed",
        type=int,
        default=None,
        help="shuffle the members with this seed (so every shard mixes classes); None keeps sorted order",
    )
    parser.add_argument("--compresslevel", type=int, default=6, help="gzip compression level, 0-9")
    return parser


def is_hidden(name):
    return name.startswith(".")


def list_image_files(src):
    """Relative POSIX paths of the non-hidden regular files under src, sorted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(src):
        # Prune in place so os.walk does not descend into hidden folders (.git, .ipynb_checkpoints, ...).
        dirnames[:] = [d for d in dirnames if not is_hidden(d)]
        for filename in filenames:
            full = os.path.join(dirpath, filename)
            if is_hidden(filename) or not os.path.isfile(full):
                continue
            found.append(os.path.relpath(full, src).replace(os.sep, "/"))
    return sorted(found)


def default_prefix(src, relative_paths):
    """src's name for a <class>/<image> folder; nothing when src already holds <split>/ folders."""
    depths = {path.count("/") for path in relative_paths}
    if depths == {2}:
        return ""
    return os.path.basename(os.path.normpath(os.path.abspath(src)))


def member_name(prefix, relative_path):
    prefix = prefix.strip("/")
    return f"{prefix}/{relative_path}" if prefix else relative_path


def order_members(relative_paths, shuffle_seed):
    ordered = sorted(relative_paths)
    if shuffle_seed is not None:
        # A private Random so the order depends on the seed alone, not on global state.
        random.Random(shuffle_seed).shuffle(ordered)
    return ordered


def split_into_shards(items, num_shards):
    """Contiguous, near-equal parts (sizes differ by at most one) covering items exactly once."""
    return [items[len(items) * k // num_shards : len(items) * (k + 1) // num_shards] for k in range(num_shards)]


def strip_tgz_suffix(path):
    for suffix in TGZ_SUFFIXES:
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


def shard_paths(out, num_shards):
    if num_shards == 1:
        return [out if out.endswith(TGZ_SUFFIXES) else out + ".tgz"]
    stem = strip_tgz_suffix(out)
    return [f"{stem}-{k:05d}-of-{num_shards:05d}.tgz" for k in range(num_shards)]


def write_shard(path, src, prefix, relative_paths, compresslevel):
    """Stream the files into one .tgz; returns the uncompressed payload bytes."""
    def members():
        for relative_path in relative_paths:
            with open(os.path.join(src, relative_path), "rb") as f:
                yield member_name(prefix, relative_path), f.read()
    return write_reproducible_tgz(path, members(), compresslevel)


def main(args):
    if args.shards < 1:
        raise ValueError(f"--shards must be >= 1, got {args.shards}")
    relative_paths = list_image_files(args.src)
    if len(relative_paths) < args.shards:
        raise ValueError(f"{args.src} holds {len(relative_paths)} files, fewer than --shards {args.shards}")
    prefix = default_prefix(args.src, relative_paths) if args.prefix is None else args.prefix

    members = order_members(relative_paths, args.shuffle_seed)
    paths = shard_paths(args.out, args.shards)
    out_dir = os.path.dirname(paths[0])
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)

    for path, shard_members in zip(paths, split_into_shards(members, args.shards)):
        payload_bytes = write_shard(path, args.src, prefix, shard_members, args.compresslevel)
        print(f"{path}: {len(shard_members)} members, {payload_bytes} payload bytes, {os.path.getsize(path)} bytes")
    return paths


if __name__ == "__main__":
    main(get_args_parser().parse_args())
