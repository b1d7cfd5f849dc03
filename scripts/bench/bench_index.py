"""The seek index of a .tgz (index.py) in its two formats: bytes on disk, a reader's memory, speed.

    python scripts/bench/bench_index.py bench-data/photos.tgz bench-data/imagenet-like.tgz

For each archive (scanned first if it has no index yet), rows of:
- `bytes`: the index file in gztool's format (what the scan writes: rapidgzip's sparse,
  compressed windows) and in indexed_gzip's (every 32 KiB window whole; what it wrote before);
- `rss_mb`: what importing it adds to a fresh process's resident memory, as a region reader
  does (median of 3 processes);
- `mb_s`: one thread reading every region in a shuffled order through it (MB of tar stream
  per second), as a region reader does.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader.index import index_path  # noqa: E402
from imageloader.vocab import archive_regions  # noqa: E402

# Run in a fresh interpreter: the memory one import of the index adds.
_IMPORT_RSS = """
import sys, psutil, rapidgzip
process = psutil.Process()
with rapidgzip.RapidgzipFile(sys.argv[1], parallelization=1) as stream:
    before = process.memory_info().rss
    stream.import_index(sys.argv[2])
    print((process.memory_info().rss - before) / 1e6)
"""


def import_rss_mb(archive: str, index: str) -> float:
    runs = [float(subprocess.run([sys.executable, "-c", _IMPORT_RSS, archive, index],
                                 check=True, capture_output=True, text=True).stdout)
            for _ in range(3)]
    return statistics.median(runs)


def regions_mb_s(archive: str, index: str, regions: list) -> float:
    import rapidgzip
    order = random.Random(0).sample(regions, len(regions))
    started, total = time.perf_counter(), 0
    with rapidgzip.RapidgzipFile(archive, parallelization=1, chunk_size=64 << 10) as stream:
        stream.import_index(index)
        for region in order:
            stream.seek(region.start)
            end = region.end if region.end is not None else float("inf")
            while stream.tell() < end:
                data = stream.read(int(min(4 << 20, end - stream.tell())))
                if not data:
                    break
                total += len(data)
    return total / (time.perf_counter() - started) / 1e6


def rows_for(archive: str) -> list[dict]:
    import rapidgzip
    regions = archive_regions(archive)
    if not regions or regions[0].index is None:
        return [{"archive": archive, "note": "no gzip regions (plain tar, or too small)"}]
    formats = {"gztool": rapidgzip.IndexFormat.GZTOOL,
               "indexed_gzip": rapidgzip.IndexFormat.INDEXED_GZIP}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, code in formats.items():
            index = os.path.join(tmp, f"index.{name}")
            with rapidgzip.RapidgzipFile(archive, parallelization=1) as stream:
                stream.import_index(index_path(archive))
                stream.export_index(index, index_format=code)
            rows.append({"archive": archive, "archive_mb": round(os.path.getsize(archive) / 1e6),
                         "regions": len(regions), "format": name,
                         "bytes": os.path.getsize(index),
                         "rss_mb": round(import_rss_mb(archive, index), 2),
                         "mb_s": round(regions_mb_s(archive, index, regions))})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("archives", nargs="+", help=".tgz archives")
    for archive in parser.parse_args().archives:
        for row in rows_for(archive):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
