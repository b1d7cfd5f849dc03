"""The loader alone on the CPU: images/s of ImageLoader(device="cpu") over whole epochs.

    python scripts/bench/bench_loader_cpu.py --archive bench-data/imagenet-like.tgz --workers 2

No training and no GPU: what the read -> decode -> batch stages deliver to a consumer that
does nothing, uint8 batches (normalize=False) in training mode. The first epoch starts the
processes and is reported apart; the rate is over the epochs after it. `cpu_ms_per_image` is
the CPU time of this process (all its threads) per image: with workers=0 the whole pipeline,
otherwise what the training process pays. On a shared machine it varies less than the rate.
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


def main(args) -> dict:
    warnings.simplefilter("ignore", UserWarning)  # skipped members: not what is measured here
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
    print(json.dumps(result))
    return result


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archive", default="bench-data/imagenet-like.tgz")
    p.add_argument("--workers", type=int, default=2, help="decode processes (default: 2)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--epochs", type=int, default=2, help="timed epochs after the first")
    return p


if __name__ == "__main__":
    main(get_args_parser().parse_args())
