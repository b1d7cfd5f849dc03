"""GPU time of decode="cuda"'s training crops per batch: Triton's kernels vs roi_align.

    python scripts/bench/bench_gpu_crop.py [--batch 256] [--size 224]

Decodes nothing: random uint8 (3, H, W) images stand in for nvJPEG's output, with crop boxes
and flips drawn as the packers draw them (RandomResizedCrop's scale and ratio). Three batches:
every image 500x375 (the benchmark archive), sizes mixed uniformly (200-800 x 150-600), and
the sizes of make_imagenet_like.py --sizes photos (its tail of large photos included; each
image its own size, so roi_align needs one call per image); Triton's kernels on planar images
and on interleaved ones (a C x H x W view of H x W x C memory). Per (batch, method, layout) one
JSON line: call_ms, the median time between CUDA events around a call (the host's part
included), and gpu_ms, the GPU time of its kernels and of its copies (torch.profiler).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader import configure_cuda_queues  # noqa: E402
from imageloader.decode import Augment, Decoder, random_resized_crop_box  # noqa: E402
from imageloader.gpudecode import GpuDecode  # noqa: E402
from bench_decoders import gpu_ms_per_call  # noqa: E402
from make_imagenet_like import photo_spec  # noqa: E402


def make_batch(sizes, augment, device, layout="planar"):
    images, boxes = [], np.empty((len(sizes), 5), np.float32)
    for k, (width, height) in enumerate(sizes):
        if layout == "planar":
            image = torch.randint(0, 256, (3, height, width), dtype=torch.uint8, device=device)
        else:  # interleaved: a C x H x W view of H x W x C memory
            image = torch.randint(0, 256, (height, width, 3), dtype=torch.uint8,
                                  device=device).permute(2, 0, 1)
        images.append(image)
        rng = random.Random(k)
        box = random_resized_crop_box((width, height), augment.scale, augment.ratio, rng)
        boxes[k] = (*box, rng.random() < augment.flip)
    return images, boxes


def time_ms(work, repeats: int) -> float:
    for _ in range(5):
        work()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return float(np.median(times))


def main(args) -> None:
    device = torch.device("cuda")
    augment = Augment.make(args.size, True)
    cpu = Decoder(augment)
    rng = np.random.default_rng(0)
    batches = {
        "500x375": [(500, 375)] * args.batch,
        "mixed": [(int(w), int(h)) for w, h in zip(rng.integers(200, 800, args.batch),
                                                   rng.integers(150, 600, args.batch))],
        # the sizes of make_imagenet_like.py --sizes photos: its tail of large photos included
        "photos": [photo_spec(0, index)[:2] for index in range(args.batch)]}
    rows = [("triton", "planar"), ("triton", "interleaved"), ("roi_align", "planar")]
    for name, sizes in batches.items():
        out = torch.empty((args.batch, *cpu.out_shape), dtype=torch.uint8, device=device)
        for crop, layout in rows:
            images, boxes = make_batch(sizes, augment, device, layout)
            pairs = list(enumerate(images))
            stage = GpuDecode(cpu, None, device, ("none", None), crop=crop)
            work = lambda: stage.train_crops(pairs, boxes, out)  # noqa: E731
            ms = time_ms(work, args.repeats)
            print(json.dumps({"batch": name, "images": args.batch, "crop": crop,
                              "layout": layout, "call_ms": round(ms, 3),
                              "gpu_ms": gpu_ms_per_call(work, args.repeats),
                              "device": torch.cuda.get_device_name(),
                              "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--repeats", type=int, default=30)
    configure_cuda_queues()  # before CUDA starts, as for training with GPU decoding
    main(p.parse_args())
