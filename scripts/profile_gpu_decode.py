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
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from imageloader import ImageLoader, Options, configure_cuda_queues  # noqa: E402


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


def spy_on(pids: dict, seconds: float, out_dir: str) -> dict:
    """Sample each process with py-spy (if installed) for `seconds`, all at once; return, per
    role, the share of samples by the innermost imageloader frame (where each role spends
    its time, waiting included: py-spy --idle)."""
    exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(exe):
        for entry in sys.path:  # pip install --target DIR puts the script in DIR/bin
            if os.path.exists(os.path.join(entry, "bin", "py-spy")):
                exe = os.path.join(entry, "bin", "py-spy")
    if not os.path.exists(exe):
        return {"error": "py-spy not found"}
    procs = {}
    for name, pid in pids.items():
        path = os.path.join(out_dir, f"spy-{name}.txt")
        procs[name] = (path, subprocess.Popen(
            [exe, "record", "-p", str(pid), "-d", str(max(1, int(seconds))), "-r", "200",
             "-f", "raw", "-o", path, "--idle", "--nonblocking", "--threads"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    summary = {}
    for name, (path, proc) in procs.items():
        proc.wait()
        summary[name] = summarize_raw(path) if os.path.exists(path) else {}
    return summary


def summarize_raw(path: str, top: int = 6) -> dict:
    """py-spy raw stacks -> {thread: {innermost imageloader frame (or leaf): share %}}."""
    by_thread: dict = {}
    for line in open(path):
        stack, _, count = line.rstrip().rpartition(" ")
        head, *frames = stack.split(";")  # "thread (TID): NAME", then outermost first
        if not frames:
            continue
        thread = head.partition(": ")[2] or head
        ours = [f for f in frames if "imageloader/" in f or "scripts/" in f]
        key = (ours[-1] if ours else frames[-1]).split(" (")[0]
        leaf = frames[-1].split(" (")[0]
        if leaf != key:
            key = f"{key} > {leaf}"
        counts = by_thread.setdefault(thread, {})
        counts[key] = counts.get(key, 0) + int(count)
    out = {}
    for thread, counts in by_thread.items():
        total = sum(counts.values())
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        out[thread] = {k: round(100 * v / total, 1) for k, v in ranked}
    return out


def main(args, workers: int = 0, readers: int = 0, threads: int = 0) -> dict:
    loader = ImageLoader(args.archive, batch_size=256, train=True, size=224, device="cuda",
                         decode=args.decode, drop_last=True, workers=workers or None,
                         options=Options(readers=readers or None,
                                         inflate_threads=threads or None,
                                         regions=not args.one_stream))
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
                    if args.spy:
                        spied = _spy_in_background(loader, args)
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
        parts = len(loader._parts())
        threads = loader._workers.plan.inflate_threads
    ms = {k: 1000 * sum(v) / max(len(v), 1) for k, v in times.items()}
    done = [(a, b) for a, b in events if b.query()]
    ms["gpu"] = sum(a.elapsed_time(b) for a, b in done) / max(len(done), 1)
    result = {"img_per_s": round(rate), "readers": readers, "workers": loader.workers,
              "inflate_threads": threads, "parts": parts,
              "ms_per_batch": {k: round(v, 2) for k, v in ms.items()},
              "batch_ms_at_this_rate": round(256_000 / rate, 2), "cores_used": cores,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    if args.spy:
        spied.join()
        result["py_spy"] = spied.result
    print(json.dumps(result))
    return result


def _spy_in_background(loader, args) -> threading.Thread:
    pids = {"parent": os.getpid()}
    for proc in loader._workers._procs:
        role = "reader" if "reader" in proc.name else "packer"
        if role == "reader" or not any(k.startswith("packer") for k in pids):
            pids[f"{role}-{proc.pid}"] = proc.pid  # every reader, one packer
    thread = threading.Thread(target=lambda: setattr(
        thread, "result", spy_on(pids, min(args.spy, args.seconds), args.spy_dir)), daemon=True)
    thread.result = {}
    thread.start()
    return thread


def nvjpeg_threads(archive: str, rounds: int = 10) -> dict:
    """decode_jpeg of 256 JPEGs from host memory: img/s from 1 thread, and from 2 at once
    (more only if the call leaves the GIL while nvJPEG works on the host)."""
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
    p.add_argument("--configs", default="0x0x0",
                   help="comma-separated WORKERSxREADERSxINFLATE_THREADS to time in turn "
                        "(0: the loader's default), e.g. 4x4x2,8x8x2")
    p.add_argument("--one-stream", action="store_true", help="Options(regions=False)")
    p.add_argument("--spy", type=float, default=0,
                   help="seconds of py-spy sampling of the parent, each reader and a packer")
    p.add_argument("--spy-dir", default=tempfile.gettempdir(), help="py-spy raw files here")
    p.add_argument("--decode", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: the same timings and CPU shares for the CPU-decode path")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--nvjpeg-threads", action="store_true", help="also: nvJPEG, 1 vs 2 threads")
    a = p.parse_args()
    configure_cuda_queues()  # before CUDA starts, as for training with GPU decoding
    for config in a.configs.split(","):
        main(a, *(int(v) for v in config.split("x")))
    if a.nvjpeg_threads:
        nvjpeg_threads(a.archive)
