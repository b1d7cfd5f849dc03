"""Remote against local: one archive read from disk and from a local HTTP server, in one run.

    python scripts/bench/bench_remote.py --archive bench-data/imagenet-like.tgz --seconds 10

The archive's folder is served by the tests' Range-honouring HTTP server (tests/servers.py) in
a process of its own, and for the path and for its URL this measures:
- scan: the first pass, which writes the class sidecar and the seek index (MB/s of archive);
- reader alone, stream: one reader walking the archive in order, as evaluation does (img/s);
- reader alone, regions: one reader walking all regions in a shuffled order, as a training
  reader does (remote: ranged requests of each region's bytes, rapidgzip with one thread);
- loader alone: ImageLoader(train=True) batches per second without a model (img/s).
Each line also says the bytes fetched per archive byte, and the reader lines the CPU per image of
this process (all its threads) and of the server process: where both share a few cores, the
server's CPU is taken from the reader's. The goal: remote within 10% of local.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from imageloader import ImageLoader, Options, index, remote  # noqa: E402
from imageloader.loader import default_workers  # noqa: E402
from imageloader.remote import RemoteOptions  # noqa: E402
from imageloader.vocab import Vocabulary, archive_regions  # noqa: E402
from imageloader.plan import region_inflate_threads  # noqa: E402
from imageloader.workers import ReadPlan  # noqa: E402

from bench_reader import cpu_seconds  # noqa: E402  (beside this script)


def serve(folder: str) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen([sys.executable, str(REPO / "tests" / "servers.py"), folder],
                              stdout=subprocess.PIPE, text=True)
    return server, server.stdout.readline().strip()


def scan(source, size: int) -> dict:
    t0 = time.perf_counter()
    before = remote.counters()
    archive_regions(source)  # the sidecar (classes, regions) and the index
    seconds = time.perf_counter() - t0
    return {"MB_per_s": round(size / seconds / 1e6, 1), **_fetched(before, size)}


def reader_alone(plan: ReadPlan, order: tuple, seconds: float, size: int,
                 server_cpu=lambda: 0.0) -> dict:
    before, opened = remote.counters(), {}
    t0, cpu0, n, served0 = time.perf_counter(), time.process_time(), 0, server_cpu()
    try:
        for _ in plan.tasks(0, order, Counter(), {}, opened=opened):
            n += 1
            if n % 256 == 0 and time.perf_counter() - t0 > seconds:
                break
    finally:
        for stream in opened.values():
            stream.close()
    # CPU of this process, all threads (inflater, fetch, HTTP client): steadier than the rate
    # where other programs share the cores.
    cpu = 1e6 * (time.process_time() - cpu0) / max(n, 1)
    row = {"img_per_s": round(n / (time.perf_counter() - t0)), "cpu_us_per_img": round(cpu),
           **_fetched(before, size)}
    if row.get("requests"):  # the server's CPU: on a small machine it shares the reader's cores
        row["server_cpu_us_per_img"] = round(1e6 * (server_cpu() - served0) / max(n, 1))
    return row


def loader_alone(source, args, cache: str, size: int) -> dict:
    # No plain copy of the local archive (cache.py): both inflate every epoch, like for like.
    options = Options(readers=args.readers, remote=RemoteOptions(cache_dir=cache),
                      plain_copy=None)
    with ImageLoader(source, batch_size=args.batch_size, train=True, device=args.device,
                     workers=args.workers, decode=args.decode, options=options) as loader:
        n, t0, batches = 0, None, iter(loader)
        for images, _ in batches:
            if t0 is None:  # the first batches wait for processes to start: not timed
                n += len(images)
                if n >= 3 * args.batch_size:
                    t0, n = time.perf_counter(), 0
                continue
            n += len(images)
            if time.perf_counter() - t0 > args.seconds:
                break
        rate = n / (time.perf_counter() - t0) if t0 else float("nan")
        batches.close()
        parts = len(loader.plan.parts)
    return {"img_per_s": round(rate), "parts": parts, "readers": args.readers,
            "workers": args.workers}


def _fetched(before: dict, size: int) -> dict:
    got = remote.counted_since(before)
    return {"fetched_per_byte": round(got["fetched"] / size, 3), "requests": got["requests"]} \
        if got["requests"] else {}


def measure(name: str, source, args, cache: str, size: int, server_cpu) -> list[dict]:
    rows = [{"what": "scan", **scan(source, size)}]
    vocab = Vocabulary.from_archives([source])
    plan = ReadPlan((source,), dict(vocab.index), args.batch_size, 4096, 0)
    rows.append({"what": "reader alone, stream", **reader_alone(plan, (0,), args.seconds,
                                                                 size, server_cpu)})
    regions = archive_regions(source)
    if regions:
        plan = ReadPlan(tuple(regions), dict(vocab.index), args.batch_size, 4096, 0,
                        inflate_threads=region_inflate_threads(args.readers))
        order = tuple(random.Random(0).sample(range(len(regions)), len(regions)))
        rows.append({"what": "reader alone, regions", "regions": len(regions),
                     **reader_alone(plan, order, args.seconds, size, server_cpu)})
    rows.append({"what": "loader alone", **loader_alone(source, args, cache, size)})
    for row in rows:
        row["source"] = name
        print(json.dumps(row), flush=True)
    return rows


def main(args) -> list[dict]:
    archive = os.path.abspath(args.archive)
    size = os.path.getsize(archive)
    if args.region_mib:
        index.REGION_BYTES = remote.REGION_BYTES = args.region_mib << 20
    server, base = serve(os.path.dirname(archive))
    try:
        with tempfile.TemporaryDirectory() as cache:
            for stale in (archive + ".classes.json", archive + index.INDEX_SUFFIX):
                if os.path.exists(stale):
                    os.remove(stale)  # the local scan is measured too
            url = remote.Url(f"{base}/{os.path.basename(archive)}", RemoteOptions(cache_dir=cache))
            cpu = lambda: cpu_seconds(server.pid)  # noqa: E731
            rows = measure("local", archive, args, cache, size, cpu) \
                + measure("http", url, args, cache, size, cpu)
    finally:
        server.terminate()
        server.wait()
    _table(rows)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"archive": args.archive, "bytes": size,
                                              "cores": os.cpu_count(), "rows": rows}, indent=1))
    return rows


def _table(rows: list[dict]) -> None:
    local = {r["what"]: r for r in rows if r["source"] == "local"}
    print(f"\n{'':34s} {'local':>10s} {'http':>10s} {'http/local':>10s}  fetched/byte")
    for row in (r for r in rows if r["source"] == "http"):
        theirs = local.get(row["what"], {})
        for key, unit in (("MB_per_s", "MB/s"), ("img_per_s", "img/s"),
                          ("cpu_us_per_img", "CPU us/img"),
                          ("server_cpu_us_per_img", "server CPU")):
            if key not in row:
                continue
            mine, other = row[key], theirs.get(key)
            ratio = f"{mine / other:10.2f}" if other else f"{'':>10s}"
            print(f"{row['what'] + ' (' + unit + ')':34s} {other or 0:10.0f} {mine:10.0f} "
                  f"{ratio}  {row.get('fetched_per_byte', '') if unit.endswith('/s') else ''}")


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--archive", default="bench-data/imagenet-like.tgz")
    p.add_argument("--seconds", type=float, default=10.0, help="per timed measurement")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=default_workers(), help="decode processes")
    p.add_argument("--readers", type=int, default=2,
                   help="reader processes of the loader (regions need 2 or more on one rank)")
    p.add_argument("--decode", default="cpu", help="the loader's decode: cpu or cuda")
    p.add_argument("--device", default="cpu", help="where batches go (cuda on the GPU host)")
    p.add_argument("--region-mib", type=int, default=0,
                   help="region size for both (0: the defaults, 16 local and 64 remote)")
    p.add_argument("--out", default="", help="also write the rows to this JSON file")
    return p


if __name__ == "__main__":
    main(get_args_parser().parse_args())
