"""pack's rates on a tar of class tars made here (ImageNet's training archive in miniature).

    python scripts/bench/bench_pack.py --classes 100 --per-class 200 --kb 110 --jobs 1,2

Writes a tar holding one <class>.tar per class, each image --kb of random bytes (JPEG bytes
barely compress either; pack never decodes), then times listing it (every inner header read,
as pack does before writing) and packing it: to one .tar and to --shards .tgz archives with
each --jobs count. Prints one JSON line per run: seconds, images/s, MB/s of payload, and the
peak resident memory of this process and of the pack processes it started.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import resource
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader import pack as packing  # noqa: E402


def make_class_tars(path: Path, classes: int, per_class: int, kb: int, seed: int = 0) -> int:
    """The tar of class tars; returns its payload bytes."""
    rng = random.Random(seed)
    payload = 0
    with tarfile.open(path, "w") as outer:
        for k in range(classes):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as tar:
                for i in range(per_class):
                    data = rng.randbytes(kb * 1024)
                    info = tarfile.TarInfo(f"n{k:08d}_{i}.JPEG")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                    payload += len(data)
            info = tarfile.TarInfo(f"n{k:08d}.tar")
            info.size = inner.tell()
            inner.seek(0)
            outer.addfile(info, inner)
    return payload


def peak_rss_mb() -> dict:
    return {"self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            "children_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024}


def timed(label: str, images: int, payload: int, run) -> dict:
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    row = {"run": label, "seconds": round(seconds, 2), "img_per_s": round(images / seconds),
           "payload_mb_per_s": round(payload / seconds / 1e6, 1), **peak_rss_mb()}
    print(json.dumps(row), flush=True)
    return row


def main(args: argparse.Namespace) -> list[dict]:
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-pack-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return run_all(args, work)
    finally:
        if not args.work:
            shutil.rmtree(work)


def run_all(args: argparse.Namespace, work: Path) -> list[dict]:
    src = work / "train.tar"
    images = args.classes * args.per_class
    start = time.perf_counter()
    payload = make_class_tars(src, args.classes, args.per_class, args.kb)
    print(json.dumps({"made": str(src), "images": images, "payload_mb": round(payload / 1e6),
                      "seconds": round(time.perf_counter() - start, 1),
                      "cores": os.cpu_count()}), flush=True)
    rows = [timed("list", images, payload, lambda: (packing._tar_catalog.cache_clear(),
                                                    packing.list_files(src)))]
    runs = [("tar, 1 shard", "out.tar", 1, 1)] + [
        (f"tgz, {args.shards} shards, {jobs} jobs", "out.tgz", args.shards, jobs)
        for jobs in args.jobs]
    for label, name, shards, jobs in runs:
        packing._tar_catalog.cache_clear()  # each run lists the tar again, as a new pack does
        out = work / label.replace(", ", "-").replace(" ", "") / name
        rows.append(timed(label, images, payload, lambda: packing.pack(
            src, out, shards=shards, shuffle_seed=0, prefix="train", jobs=jobs,
            compresslevel=args.compresslevel)))
    return rows


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--per-class", type=int, default=200)
    p.add_argument("--kb", type=int, default=110, help="bytes of each image, in KiB")
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--jobs", type=lambda text: [int(n) for n in text.split(",")],
                   default=[1, os.cpu_count() or 1], help="comma-separated job counts")
    p.add_argument("--compresslevel", type=int, default=6)
    p.add_argument("--work", default=None, help="folder for the tars, kept (default: a "
                                                 "temporary one, removed)")
    return p


if __name__ == "__main__":
    main(get_args_parser().parse_args())
