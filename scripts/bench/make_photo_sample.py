"""A small archive of real images of every kind found in a folder: photos nobody made for us.

    python scripts/bench/make_photo_sample.py --src FOLDER --out sample.tgz --max-mb 11

Walks FOLDER for images (the loader's extensions), groups them by kind (extension, Pillow
mode, progressive JPEG or not) and takes, smallest first, up to --per-kind of each kind, then
fills the budget with JPEGs of at least --large-kb, smallest first (large photos). The images
taken hold at most --max-mb, so that the archive can travel with the tree to a GPU host
(scripts/check_decode.py reads it there). Members are `sample/<class>/<hash><ext>`, the class
being the image's first folder below FOLDER, the name a hash of its path (distinct files may
share a name). Which files are taken depends on the folder's content only.

Real wallpapers from Debian's packages (baseline, progressive and gray JPEGs up to 5640x3172,
PNG RGB/RGBA/LA, WebP), as the 2026-12-01 session made its sample:

    mkdir debs && cd debs && apt-get download gnome-backgrounds mate-backgrounds \\
        plasma-workspace-wallpapers && for d in *.deb; do dpkg-deb -x "$d" x; done
    python scripts/bench/make_photo_sample.py --src debs/x/usr/share --out walls.tgz
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tarfile
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader.read import has_image_extension  # noqa: E402


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", required=True, help="folder to take images from")
    p.add_argument("--out", required=True, help="the .tgz to write")
    p.add_argument("--max-mb", type=float, default=11.0, help="image bytes in all, at most")
    p.add_argument("--per-kind", type=int, default=3)
    p.add_argument("--large-kb", type=int, default=300, help="the tail: JPEGs at least this big")
    return p


def found_images(src: str) -> list[tuple[int, tuple, str]]:
    """(bytes, kind, path) of each distinct image file under src, sorted; a file reached by
    several links once, by the first of its paths in sorted order."""
    paths = {}
    for folder, _, names in sorted(os.walk(src, followlinks=True)):
        for name in sorted(names):
            path = os.path.join(folder, name)
            if has_image_extension(name) and os.path.isfile(path):
                paths.setdefault(os.path.realpath(path), path)
    images = []
    for path in paths.values():
        try:
            with Image.open(path) as image:
                kind = (os.path.splitext(path)[1].lower(), image.mode,
                        bool(image.info.get("progressive")))
        except OSError:  # not an image after all: not what this sample is for
            continue
        images.append((os.path.getsize(path), kind, path))
    return sorted(images)


def chosen(images: list[tuple[int, tuple, str]], budget: int, per_kind: int,
           large: int) -> list[str]:
    """Up to per_kind of each kind, smallest first; then JPEGs of at least `large` bytes,
    smallest first, while they fit the budget."""
    taken, total, kinds = [], 0, {}
    for size, kind, path in images:
        if kinds.get(kind, 0) < per_kind and total + size <= budget:
            taken.append(path)
            kinds[kind] = kinds.get(kind, 0) + 1
            total += size
    for size, kind, path in images:
        if kind[0] in (".jpg", ".jpeg") and size >= large and path not in taken \
                and total + size <= budget:
            taken.append(path)
            total += size
    return taken


def member_name(src: str, path: str) -> str:
    relative = os.path.relpath(path, src).replace(os.sep, "/")
    label = relative.split("/")[0] if "/" in relative else "unlabeled"
    digest = hashlib.sha1(relative.encode()).hexdigest()[:12]
    return f"sample/{label}/{digest}{os.path.splitext(path)[1].lower()}"


def main(args) -> list[str]:
    images = found_images(args.src)
    taken = chosen(images, int(args.max_mb * 1e6), args.per_kind, args.large_kb * 1000)
    with tarfile.open(args.out, "w:gz", dereference=True) as tar:  # a link: its file
        for path in sorted(taken):
            tar.add(path, arcname=member_name(args.src, path))
    kinds = sorted({kind for _, kind, path in images if path in set(taken)})
    named = [f"{ext} {mode}" + (" progressive" if progressive else "")
             for ext, mode, progressive in kinds]
    print(f"{args.out}: {len(taken)} of {len(images)} images, {len(kinds)} kinds "
          f"({', '.join(named)}), {os.path.getsize(args.out) / 1e6:.1f} MB")
    return taken


if __name__ == "__main__":
    main(get_args_parser().parse_args())
