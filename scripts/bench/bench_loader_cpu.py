"""The loader alone on the CPU: images/s of ImageLoader(device="cpu") over whole epochs.

    python scripts/bench/bench_loader_cpu.py --archive bench-data/imagenet-like.tgz --workers 2

No training and no GPU: what the read -> decode -> batch stages deliver to a consumer that
does nothing, uint8 batches (normalize=False) in training mode. The first epoch starts the
processes and is reported apart; the rate is over the epochs after it. `cpu_ms_per_image` is
the CPU time of this process (all its threads) per image: with workers=0 the whole pipeline,
otherwise what the training process pays. On a shared machine it varies less than the rate.

`--bound N` first times N of the archive's JPEGs as decode="auto"'s trial does (the packers'
probe, decode.JpegPacker: CPU time per image through the CPU path) and reports the bound that
the trial takes for what CPU decoding could feed, `workers` processes at that pace, beside the
rate the workers then reach: the bound must not be below it.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader import ImageLoader  # noqa: E402
from imageloader.batch import batch_layout, views_of  # noqa: E402
from imageloader.decode import Augment, Decoder, JpegPacker  # noqa: E402
from bench_decoders import load_jpegs  # noqa: E402  (beside this script)


def probe_bound(archive: str, images: int, size: int, workers: int) -> dict:
    """The trial's bound on CPU decoding: `images` JPEGs of the archive (its first ones)
    packed with a probe on every one, as a packer asked by share.TrialShare would time them."""
    jpegs = load_jpegs(archive, images + 1)  # only as far as the JPEGs it needs
    packer = JpegPacker(Decoder(Augment.make(size, True)))
    layout = batch_layout(len(jpegs), packer.out_shape, arena_bytes=sum(map(len, jpegs)))
    batch = views_of(bytearray(layout.nbytes), layout)
    batch.cpu_probe[0] = len(jpegs)  # the first is the packer's untimed warm-up
    packer.start(batch)
    for slot, data in enumerate(jpegs):
        packer.fill(batch, slot, data, 1000 + slot)
    seconds, timed = float(batch.cpu_probe[1]), int(batch.cpu_probe[2])
    if timed == 0:  # e.g. all progressive: none packed for the GPU, so none probed
        return {"images": 0, "cpu_ms_per_image": None, "img_per_s": None}
    return {"images": timed, "cpu_ms_per_image": round(1000 * seconds / timed, 3),
            "img_per_s": round(max(workers, 1) * timed / seconds, 1)}


def main(args) -> dict:
    warnings.simplefilter("ignore", UserWarning)  # skipped members: not what is measured here
    bound = probe_bound(args.archive, args.bound, args.size, args.workers) if args.bound else None
    with ImageLoader(args.archive, batch_size=args.batch_size, size=args.size, device="cpu",
                     workers=args.workers, normalize=False, train=True) as loader:
        t0 = time.perf_counter()
        first = sum(len(labels) for _, labels in loader)
        first_s = time.perf_counter() - t0
        t0, cpu0, images = time.perf_counter(), time.process_time(), 0
        for _ in range(args.epochs):
            images += sum(len(labels) for _, labels in loader)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    result = {"archive": args.archive, "workers": args.workers, "batch_size": args.batch_size,
              "first_epoch": {"images": first, "seconds": round(first_s, 2)},
              "img_per_s": round(images / seconds, 1), "epochs": args.epochs,
              "cpu_ms_per_image": round(1000 * cpu / images, 3)}
    if bound is not None:
        over = None if bound["img_per_s"] is None else \
            round(bound["img_per_s"] / result["img_per_s"], 2)  # >= 1: a bound indeed
        result["probe_bound"] = {**bound, "over_rate": over}
    print(json.dumps(result))
    return result


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archive", default="bench-data/imagenet-like.tgz")
    p.add_argument("--workers", type=int, default=2, help="decode processes (default: 2)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--epochs", type=int, default=2, help="timed epochs after the first")
    p.add_argument("--bound", type=int, default=0, help="first time this many JPEGs as "
                   "decode=\"auto\"'s trial does and report its bound on the CPU's rate")
    return p


if __name__ == "__main__":
    main(get_args_parser().parse_args())
