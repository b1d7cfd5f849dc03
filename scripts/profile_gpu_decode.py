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
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from imageloader import ImageLoader, Options  # noqa: E402


def main(args) -> dict:
    loader = ImageLoader(args.archive, batch_size=256, train=True, size=224, device="cuda",
                         decode="cuda", drop_last=True, workers=args.workers or None,
                         options=Options(readers=args.readers or None))
    times = {"collect": [], "transform": [], "nvjpeg": []}
    events: list = []  # (start, end) on the side stream: the GPU time of each batch's work
    gpu, last = loader._gpu, [None]
    transform, decode = loader.prefetcher.item_transform, gpu._decode

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

    loader.prefetcher.item_transform, gpu._decode = timed_transform, timed_decode
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
                if batches > args.warmup and time.perf_counter() - t0 > args.seconds:
                    break
            else:
                continue
            break
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        rate = (batches - args.warmup) * 256 / seconds
        readers = loader._workers.readers
    ms = {k: 1000 * sum(v) / max(len(v), 1) for k, v in times.items()}
    done = [(a, b) for a, b in events if b.query()]
    ms["gpu"] = sum(a.elapsed_time(b) for a, b in done) / max(len(done), 1)
    result = {"img_per_s": round(rate), "readers": readers, "workers": loader.workers,
              "ms_per_batch": {k: round(v, 2) for k, v in ms.items()},
              "batch_ms_at_this_rate": round(256_000 / rate, 2),
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
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--nvjpeg-threads", action="store_true", help="also: nvJPEG, 1 vs 2 threads")
    a = p.parse_args()
    main(a)
    if a.nvjpeg_threads:
        nvjpeg_threads(a.archive)
