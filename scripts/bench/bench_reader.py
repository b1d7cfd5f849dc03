"""The reader's rate, alone and feeding packing workers as with decode="cuda" (no GPU needed).

    python scripts/bench/bench_reader.py --archive bench-data/imagenet-like.tgz --workers 2

With GPU decoding the workers only screen JPEG headers and copy bytes into the batch arena, so
the loader runs at the rate one reader process walks the archive AND hands members to the
workers (shared-memory rings, task queues). This measures both: `reader alone` iterates the
epoch's tasks in this process; `reader -> packers` runs the real reader and worker processes and
counts filled batches. Use an uncompressed .tar to see the Python cost without inflating.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader.batch import Task  # noqa: E402,F401  (workers unpickle it)
from imageloader.decode import Augment, Decoder, JpegPacker  # noqa: E402
from imageloader.loader import default_workers  # noqa: E402
from imageloader.pool import BufferPool  # noqa: E402
from imageloader.vocab import Vocabulary  # noqa: E402
from imageloader.workers import ReadPlan, WorkerPool  # noqa: E402


def walk_cost(archive: str, inflate: str, members: int = 6000) -> dict:
    """CPU (this process, inflater threads included) and minor page faults per member of the
    bare tar walk (read.iter_members)."""
    import resource
    from imageloader.read import iter_members
    before, cpu0, n = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), 0
    for _ in iter_members(archive, skipped=Counter(), inflate=inflate):
        n += 1
        if n == members:
            break
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_us_per_member": round(1e6 * (time.process_time() - cpu0) / n, 1),
            "page_faults_per_member": round((after.ru_minflt - before.ru_minflt) / n, 1)}


def reader_alone(plan: ReadPlan, seconds: float) -> float:
    t0, n = time.perf_counter(), 0
    for _ in plan.tasks(0, (0,), Counter(), {}):
        n += 1
        if n % 256 == 0 and time.perf_counter() - t0 > seconds:
            break
    return n / (time.perf_counter() - t0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process, all its threads (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:  # gone meanwhile
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _process_cpu() -> dict:
    """CPU seconds of this process's children (the pool's readers and packers), by role."""
    out: dict = {}
    for proc in multiprocessing.active_children():
        role = "reader" if "reader" in proc.name else "packers"
        out[role] = out.get(role, 0.0) + cpu_seconds(proc.pid)
    return out


def reader_to_packers(plan: ReadPlan, workers: int, seconds: float, ring_mb: int) -> dict:
    packer = JpegPacker(Decoder(Augment.make(16, True)))  # tiny pixels: only fallbacks use them
    pool = BufferPool(workers + 4, plan.batch_size, packer.out_shape, shared=True,
                      arena_bytes=plan.batch_size * (192 << 10))
    procs = WorkerPool(plan, packer, pool, workers=workers, readers=1, order_of=lambda e: (0,),
                       lookahead=True, ring_bytes=ring_mb << 20)
    try:
        n, t0, epoch = 0, None, 0
        while True:
            for buf in procs.batches(epoch):
                n += buf.count
                pool.release(buf)
                if t0 is None and n >= 4 * plan.batch_size:  # start-up excluded
                    t0, n, cpu0 = time.perf_counter(), 0, _process_cpu()
                if t0 is not None and time.perf_counter() - t0 > seconds:
                    wall, cpu1 = time.perf_counter() - t0, _process_cpu()
                    # CPU per member of the reader process (all its threads: inflater too)
                    return {"img_per_s": round(n / wall),
                            "reader_cpu_us_per_member": round(
                                1e6 * (cpu1["reader"] - cpu0["reader"]) / n, 1),
                            "packers_cpu_us_per_member": round(
                                1e6 * (cpu1["packers"] - cpu0["packers"]) / n, 1)}
            epoch += 1
    finally:
        procs.close()
        pool.close()


def main(args) -> dict:
    vocab = Vocabulary.from_archives([args.archive])
    plan = ReadPlan((args.archive,), dict(vocab.index), args.batch_size, 4096, 0,
                    inflate=args.inflate)
    result = {"archive": args.archive, "inflate": args.inflate,
              "walk": walk_cost(args.archive, args.inflate),
              "reader_alone": round(reader_alone(plan, args.seconds)),
              "reader_to_packers": reader_to_packers(
                  plan, args.workers or min(4, default_workers()), args.seconds, args.ring_mb),
              "workers": args.workers or min(4, default_workers())}
    print(json.dumps(result))
    return result


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archive", default="bench-data/imagenet-like.tgz")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--workers", type=int, default=0, help="packing processes (0: min(4, cores-1))")
    p.add_argument("--inflate", default="auto")
    p.add_argument("--ring-mb", type=int, default=40, help="per worker, member bytes in transit")
    p.add_argument("--seconds", type=float, default=10.0)
    return p


if __name__ == "__main__":
    main(get_args_parser().parse_args())
