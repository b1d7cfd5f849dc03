"""Inflate rate per core, and the plain copy (imageloader/cache.py) read instead; no GPU needed.

    python scripts/bench/bench_inflate.py --archive bench-data/photos.tgz [--sample-mb 500]

Rows (MB are of the tar stream, 1e6 bytes; "per core" is MB per CPU-second of this process,
inflater threads included, so it holds on a busy machine where wall-clock rates do not):
- `inflate`: one stream of the whole archive, one thread: rapidgzip (parallelization=1), isal,
  Python's gzip (zlib);
- `regions`: rapidgzip entering the archive's regions in a shuffled order through the scan's
  index, one thread, one stream seeking from region to region, as a region reader does;
- `copy_write`: the plain copy written in one pass with every core (cache.ensure_copy with a
  fresh sidecar); `copy_read`: the copy read back (page cache warm), whole and by regions;
- `walk`: the tar walk with member bytes (read.iter_members), from the .tgz and from the copy;
- `ceiling`: what the per-core region rate implies for a first epoch that inflates on `--cores`
  cores (images/s at this archive's bytes per image), and the copy's single-reader walk rate.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader.cache import PlainCopy, ensure_copy, on_copy  # noqa: E402
from imageloader.read import (available_inflaters, iter_members, open_region,  # noqa: E402
                              open_stream)
from imageloader.vocab import archive_regions, cached_image_count  # noqa: E402

_BLOCK = 4 << 20


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(work) -> dict:
    """Run work() -> bytes handled; MB/s of wall time and per CPU-second."""
    wall, cpu = time.perf_counter(), _cpu()
    n = work()
    wall, cpu = time.perf_counter() - wall, max(_cpu() - cpu, 1e-9)
    return {"mb": round(n / 1e6, 1), "mb_per_s": round(n / wall / 1e6, 1),
            "mb_per_cpu_s": round(n / cpu / 1e6, 1), "seconds": round(wall, 2)}


def _drain(stream, limit: int | None = None) -> int:
    """Read a stream to its end (or `limit` bytes) and close it; bytes read."""
    try:
        return _read(stream, limit)
    finally:
        stream.close()


def _read(stream, limit: int | None = None) -> int:
    block, n = bytearray(_BLOCK), 0
    while limit is None or n < limit:
        got = stream.readinto(memoryview(block)[:_BLOCK if limit is None else
                                               min(_BLOCK, limit - n)])
        if not got:
            break
        n += got
    return n


def inflate_rows(archive: str, limit: int | None = None) -> dict:
    rows = {}
    for name in available_inflaters():
        threads = 1 if name == "rapidgzip" else None
        rows[name] = _timed(lambda: _drain(open_stream(archive, name, threads=threads), limit))
    return rows


def sample_of(regions: list, sizes: list[int], limit: int | None) -> tuple[list, list]:
    """Regions spread over the archive (every k-th) holding about `limit` bytes."""
    if not limit or sum(sizes) <= limit:
        return regions, sizes
    step = max(1, round(sum(sizes) / limit))
    return regions[::step], sizes[::step]


def region_bytes(regions, total: int) -> list[int]:
    ends = [r.end if r.end is not None else total for r in regions]
    return [end - r.start for r, end in zip(regions, ends)]


def read_regions(regions, sizes) -> int:
    """Every region read through, in a shuffled order, from one stream that seeks from region
    to region (its index loaded once), one inflater thread: what a region reader does."""
    order = list(range(len(regions)))
    random.Random(0).shuffle(order)
    stream, n = open_region(regions[order[0]], threads=1), 0
    try:
        for i in order:
            stream.seek(regions[i].start)
            n += _read(stream, sizes[i])
    finally:
        stream.close()
    return n


def walk(source, limit: int | None = None) -> dict:
    images, t0, cpu = 0, time.perf_counter(), _cpu()
    for _ in iter_members(source, skipped=Counter()):
        images += 1
        if limit and images == limit:
            break
    wall, cpu = time.perf_counter() - t0, _cpu() - cpu
    return {"img_per_s": round(images / wall), "img_per_cpu_s": round(images / max(cpu, 1e-9))}


def main(args) -> dict:
    archive = args.archive
    regions = archive_regions(archive)  # the scan (sidecar, index) if not done yet
    images = cached_image_count(archive)
    folder = args.copy_folder or tempfile.mkdtemp(prefix="bench-plain-",
                                                  dir=os.path.dirname(os.path.abspath(archive)))
    setting = PlainCopy(folder=folder, keep_free=0.0)
    limit = int(args.sample_mb * 1e6) or None
    result: dict = {"archive": archive, "images": images, "cores": args.cores,
                    "sample_mb": args.sample_mb, "inflate": inflate_rows(archive, limit)}
    try:
        written: list = []
        copy_write = _timed(lambda: os.path.getsize(written.append(
            ensure_copy(archive, setting)) or written[0] or archive))
        copy = written[0]
        if copy is None:
            raise SystemExit(f"no plain copy of {archive} could be written in {folder}")
        total = os.path.getsize(copy)
        result["copy_write"] = copy_write
        result["bytes_per_image"] = round(total / images)
        result["copy_read"] = {"whole": _timed(lambda: _drain(open(copy, "rb", buffering=0)))}
        if regions:
            regions, sizes = sample_of(regions, region_bytes(regions, total), limit)
            moved = [on_copy(r, {archive: copy}) for r in regions]
            result["regions"] = {"count": len(regions),
                                 "rapidgzip_1_thread": _timed(lambda: read_regions(regions,
                                                                                   sizes))}
            result["copy_read"]["regions"] = _timed(lambda: read_regions(moved, sizes))
        count = limit and round(limit / result["bytes_per_image"])
        result["walk"] = {"tgz": walk(archive, count), "copy": walk(copy, count)}
        result["ceiling"] = ceilings(result, args.cores)
    finally:
        if not args.copy_folder and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


def ceilings(result: dict, cores: int) -> dict:
    per_image = result["bytes_per_image"] / 1e6
    per_core = result.get("regions", {}).get("rapidgzip_1_thread") or \
        result["inflate"].get("rapidgzip") or result["inflate"]["gzip"]
    return {"inflate_img_per_s_per_core": round(per_core["mb_per_cpu_s"] / per_image),
            f"first_epoch_img_per_s_on_{cores}_cores": round(
                cores * per_core["mb_per_cpu_s"] / per_image),
            "copy_walk_img_per_s_one_reader": result["walk"]["copy"]["img_per_s"]}


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archive", default="bench-data/photos.tgz")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                   help="cores a first epoch could inflate on (default: this machine's)")
    p.add_argument("--copy-folder", default=None,
                   help="where to write the copy (default: a temporary folder beside the "
                        "archive, removed afterwards); a copy already there is reused, and "
                        "copy_write then times only finding it")
    p.add_argument("--keep", action="store_true", help="keep the temporary copy")
    p.add_argument("--sample-mb", type=float, default=0,
                   help="inflate, read regions and walk only about this many MB of each "
                        "(0: everything); the copy is always written whole")
    p.add_argument("--out", help="also write the JSON here")
    return p


if __name__ == "__main__":
    main(get_args_parser().parse_args())
