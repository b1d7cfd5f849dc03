"""What a progressive JPEG costs one CPU core by its size: Pillow's decode of the same photo as a
baseline and as a progressive JPEG, whole and at 1/8 scale.

When the packers send progressive JPEGs on (IMAGELOADER_GPU_PROGRESSIVE; by default while
they keep a packer busy), they reach the engines' lane, where nvJPEG's hybrid backend decodes
their Huffman code on one of the decoder's CPU threads (there is no GPU Huffman decoder for
them): a batch's call lasts at least as long as its slowest one. At 1/8 scale libjpeg still
decodes every coefficient but does almost no IDCT, so that time is about the Huffman part
alone, what such a thread spends; the whole decode is what a packer spends. Which size keeps
it under a lane's batch time (~20-37 ms on an H200 host) is the pixel bound to try
(`gpu_host.sh OUT progressive`).

    python scripts/bench/probe_progressive.py --out progressive.json
"""
from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_imagenet_like import encode_jpeg, synthesize_image  # noqa: E402

SIZES = ((400, 300), (640, 480), (800, 600), (1024, 768), (1600, 1200), (2600, 1950))


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default=",".join(f"{w}x{h}" for w, h in SIZES),
                   help="comma-separated WIDTHxHEIGHT")
    p.add_argument("--repeats", type=int, default=7, help="decodes timed per JPEG (median)")
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--out", type=Path, default=None, help="JSON lines, one per size")
    return p


def decode_ms(data: bytes, repeats: int, scale: int = 1) -> float:
    """Median wall time of one decode on this thread, in ms; at 1/`scale` (Pillow's draft)."""
    times = []
    for _ in range(repeats + 1):  # the first one warms the decoder's code and buffers
        start = time.perf_counter()
        with Image.open(io.BytesIO(data)) as img:
            if scale > 1:
                img.draft("RGB", (img.width // scale, img.height // scale))
            img.load()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times[1:])


def encode_both(width: int, height: int, quality: int) -> dict[str, bytes]:
    """One photo-like image (make_imagenet_like's), as a baseline and a progressive JPEG."""
    image = synthesize_image(0, width, width, height)
    return {kind: encode_jpeg(image, quality, subsampling=2, progressive=kind == "progressive")
            for kind in ("baseline", "progressive")}


def probe_size(width: int, height: int, repeats: int, quality: int) -> dict:
    row = {"width": width, "height": height, "pixels": width * height}
    for kind, data in encode_both(width, height, quality).items():
        row[kind] = {"kb": round(len(data) / 1024, 1),
                     "whole_ms": round(decode_ms(data, repeats), 2),
                     "eighth_ms": round(decode_ms(data, repeats, scale=8), 2)}
    return row


def main(args: argparse.Namespace) -> list[dict]:
    sizes = [tuple(int(v) for v in size.split("x")) for size in args.sizes.split(",")]
    rows = [probe_size(w, h, args.repeats, args.quality) for w, h in sizes]
    print(f"{'size':>11} {'MP':>5} | {'baseline KB':>11} {'whole':>7} {'1/8':>7} | "
          f"{'progr. KB':>9} {'whole':>7} {'1/8':>7} | ms, one core")
    for r in rows:
        b, p = r["baseline"], r["progressive"]
        print(f"{r['width']:>5}x{r['height']:<5} {r['pixels'] / 1e6:5.2f} | {b['kb']:>11} "
              f"{b['whole_ms']:>7} {b['eighth_ms']:>7} | {p['kb']:>9} {p['whole_ms']:>7} "
              f"{p['eighth_ms']:>7}")
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


if __name__ == "__main__":
    main(get_args_parser().parse_args())
