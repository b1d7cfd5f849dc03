"""Where the host time of GPU decoding goes, per batch: collecting, nvJPEG, crops.

    python scripts/profile_gpu_decode.py --archive bench-data/imagenet-like.tgz

With decode="cuda" the prefetcher's submitting thread takes each filled batch (collected by a
second thread) and submits its copy, nvJPEG decode and crops to the GPU. This times, per batch,
its wait for the next collected batch ("collect"), the submission on the host ("transform", of
which "nvjpeg" is the decode call) and the side stream's GPU time ("gpu").
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from imageloader import ImageLoader, Options  # noqa: E402


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process, all its threads (Linux /proc)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _busy_jiffies() -> tuple[int, int]:
    values = [int(v) for v in open("/proc/stat").readline().split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def cpu_snapshot(loader) -> dict:
    """CPU seconds so far of this process and of each child, by role; and of the machine."""
    roles = {"parent (collect + submit + main)": _cpu_seconds(os.getpid())}
    for proc in loader._workers._procs:
        role = "readers" if "reader" in proc.name else "packers"
        roles[role] = roles.get(role, 0.0) + _cpu_seconds(proc.pid)
    busy, total = _busy_jiffies()
    return {"roles": roles, "busy": busy, "total": total}


def cores_used(before: dict, after: dict, seconds: float) -> dict:
    out = {role: round((after["roles"][role] - before["roles"].get(role, 0.0)) / seconds, 2)
           for role in after["roles"]}
    out["machine busy %"] = round(100 * (after["busy"] - before["busy"])
                                  / max(after["total"] - before["total"], 1), 1)
    return out


def main(args) -> dict:
    loader = ImageLoader(args.archive, batch_size=256, train=True, size=224, device="cuda",
                         decode=args.decode, drop_last=True, workers=args.workers or None,
                         options=Options(readers=args.readers or None))
    times = {"collect": [], "transform": [], "nvjpeg": []}
    events: list = []  # (start, end) on the side stream: the GPU time of each batch's work
    gpu, last = loader._gpu, [None]
    transform = loader.prefetcher.item_transform
    decode = gpu._decode if gpu is not None else None

    def timed_transform(item):
        t0 = time.perf_counter()
        if last[0] is not None:
            times["collect"].append(t0 - last[0])  # waiting for the next collected batch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = transform(item)
        end.record()
        events.append((start, end))
        last[0] = time.perf_counter()
        times["transform"].append(last[0] - t0)
        return out

    def timed_decode(*a):
        t0 = time.perf_counter()
        out = decode(*a)
        times["nvjpeg"].append(time.perf_counter() - t0)
        return out

    loader.prefetcher.item_transform = timed_transform
    if gpu is not None:
        gpu._decode = timed_decode
    batches = 0
    with loader:
        while True:
            for images, labels in loader:
                batches += 1
                if batches == args.warmup:
                    torch.cuda.synchronize()
                    for v in times.values():
                        v.clear()
                    events.clear()
                    t0 = time.perf_counter()
                    cpu0 = cpu_snapshot(loader)
                if batches > args.warmup and time.perf_counter() - t0 > args.seconds:
                    break
            else:
                continue
            break
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        cores = cores_used(cpu0, cpu_snapshot(loader), seconds)
        rate = (batches - args.warmup) * 256 / seconds
        readers = loader._workers.readers
    ms = {k: 1000 * sum(v) / max(len(v), 1) for k, v in times.items()}
    done = [(a, b) for a, b in events if b.query()]
    ms["gpu"] = sum(a.elapsed_time(b) for a, b in done) / max(len(done), 1)
    result = {"img_per_s": round(rate), "readers": readers, "workers": loader.workers,
              "ms_per_batch": {k: round(v, 2) for k, v in ms.items()},
              "batch_ms_at_this_rate": round(256_000 / rate, 2), "cores_used": cores,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    print(json.dumps(result))
    return result


def nvjpeg_threads(archive: str, rounds: int = 10) -> dict:
    """decode_jpeg of 256 JPEGs from host memory: img/s from 1 thread, and from 2 at once
    (more only if the call leaves the GIL while nvJPEG works on the host)."""
    import threading
    from collections import Counter
    from torchvision.io import decode_jpeg
    from imageloader.read import iter_members
    datas = []
    for m in iter_members(archive, skipped=Counter()):
        datas.append(torch.frombuffer(bytearray(m.data), dtype=torch.uint8))
        if len(datas) == 256:
            break
    decode_jpeg(datas, device="cuda")
    torch.cuda.synchronize()

    def run():
        for _ in range(rounds):
            decode_jpeg(datas, device="cuda")
        torch.cuda.synchronize()
    out = {}
    for n in (1, 2):
        threads = [threading.Thread(target=run) for _ in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out[f"{n}_thread"] = round(n * rounds * 256 / (time.perf_counter() - t0))
    print(json.dumps({"nvjpeg_img_per_s": out}))
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archive", default="bench-data/imagenet-like.tgz")
    p.add_argument("--readers", type=int, default=0, help="0: the loader's default")
    p.add_argument("--workers", type=int, default=0, help="packing processes (0: default)")
    p.add_argument("--decode", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: the same timings and CPU shares for the CPU-decode path")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--nvjpeg-threads", action="store_true", help="also: nvJPEG, 1 vs 2 threads")
    a = p.parse_args()
    main(a)
    if a.nvjpeg_threads:
        nvjpeg_threads(a.archive)
