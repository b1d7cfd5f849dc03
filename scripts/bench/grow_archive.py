"""Write a larger .tgz from a small one: every member COPIES times, renamed, so that what grows
with an archive's size (its seek index, a reader's memory) is measured, not extrapolated.

    python scripts/bench/grow_archive.py bench-data/photos-4096.tgz bench-data/photos-x24.tgz \
        --copies 24

Copy k of `train/<class>/<file>` is `train/<class>/<k>-<file>`: same classes, COPIES times the
images and bytes. Compressed by ISA-L's gzip (the `fast` extra; 59 s for 10.6 GB on the
2-core machine, results/2026-12-08-cpu-index-grown), not timed against zlib's.
"""
from __future__ import annotations

import argparse
import io
import posixpath
import tarfile
import time

from isal import igzip


def members(source: str) -> list[tuple[tarfile.TarInfo, bytes]]:
    """The source's regular files with their bytes, in archive order (it is held in memory)."""
    found = []
    with tarfile.open(source, "r|*") as tar:
        for info in tar:
            if info.isfile():
                found.append((info, tar.extractfile(info).read()))
    return found


def renamed(info: tarfile.TarInfo, copy: int) -> tarfile.TarInfo:
    folder, name = posixpath.split(info.name)
    twin = tarfile.TarInfo(posixpath.join(folder, f"{copy}-{name}"))
    twin.size, twin.mtime, twin.mode = info.size, info.mtime, info.mode
    return twin


def grow(source: str, out: str, copies: int) -> dict:
    files = members(source)
    with igzip.open(out, "wb") as gz, tarfile.open(fileobj=gz, mode="w|",
                                                    format=tarfile.GNU_FORMAT) as tar:
        for copy in range(copies):
            for info, data in files:
                tar.addfile(renamed(info, copy), io.BytesIO(data))
    return {"members": len(files) * copies, "bytes": sum(len(d) for _, d in files) * copies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="a .tgz or .tar")
    parser.add_argument("out", help="the .tgz to write")
    parser.add_argument("--copies", type=int, default=10, help="times each member is written")
    args = parser.parse_args()
    started = time.perf_counter()
    made = grow(args.source, args.out, args.copies)
    print(f"{args.out}: {made['members']} members, {made['bytes'] / 1e9:.2f} GB of files, "
          f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
