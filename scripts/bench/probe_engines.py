"""Which JPEGs the GPU's hardware JPEG engines refuse, and what a refusal costs a lane's batch
(decoders alone; needs CUDA, nvImageCodec and a GPU with the engines).

    python scripts/bench/probe_engines.py --archive bench-data/photos-16000.tgz --out engines.json

A lane of the engines ("hw", gpujpeg.NvImageCodecJpeg) decodes each batch in one call; what the
engines refuse comes back empty and is decoded once more, after it, by a decoder with every
backend (`_decode_refused`), so a batch with even one refusal pays a second call. Two parts:
- classes: JPEGs made here of each kind (chroma subsampling 4:2:0 / 4:2:2 / 4:4:4, grayscale;
  sizes from 64x48 to 2600x1950, odd ones), each decoded by the engines alone: refused or not;
- archive: the first `--images` JPEGs of the archive that a GPU lane gets (decode.gpu_screen),
  counted by kind (grayscale or subsampling, megapixels), refused ones by kind; then batches
  of `--batch` timed as the lane decodes them (refusals decoded again) and, the same batches
  without the refused JPEGs, by the engines alone: the difference per batch is what the
  refusals cost (their second call included).
"""
from __future__ import annotations

import argparse
import collections
import io
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image, JpegImagePlugin

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decoders import screened_jpegs  # noqa: E402
from make_imagenet_like import synthesize_image  # noqa: E402
from imageloader.gpujpeg import NvImageCodecJpeg, has_jpeg_engines  # noqa: E402

SIZES = ((64, 48), (333, 251), (500, 375), (801, 599), (2600, 1950))
SUBSAMPLINGS = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}
SUBSAMPLING_NAMES = {code: name for name, code in SUBSAMPLINGS.items()}


def get_args_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--archive", help=".tgz or .tar of JPEGs (the archive part; none: classes only)")
    p.add_argument("--images", type=int, default=4096)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3, help="timed passes over the batches")
    p.add_argument("--out", help="write the results as JSON here")
    return p


def kind_and_size(data) -> tuple[str, str]:
    """From the JPEG's header: 'gray' or the chroma subsampling of a colour JPEG, and its
    megapixel bucket."""
    image = Image.open(io.BytesIO(bytes(data)))
    kind = "gray" if image.mode == "L" else \
        SUBSAMPLING_NAMES.get(JpegImagePlugin.get_sampling(image), "other")
    pixels = image.size[0] * image.size[1]
    size = "<0.1 MP" if pixels < 100_000 else "0.1-1 MP" if pixels < 1_000_000 else ">=1 MP"
    return kind, size


def made_classes() -> list[tuple[str, np.ndarray]]:
    """(label, JPEG) of each kind and size, from the benchmark archives' image synthesis."""
    out = []
    for index, size in enumerate(SIZES):
        image = synthesize_image(0, index, *size)
        for name, code in SUBSAMPLINGS.items():
            buffer = io.BytesIO()
            image.save(buffer, "JPEG", quality=90, subsampling=code)
            out.append((f"{name} {size[0]}x{size[1]}", np.frombuffer(buffer.getvalue(), np.uint8)))
        buffer = io.BytesIO()
        image.convert("L").save(buffer, "JPEG", quality=90)
        out.append((f"gray {size[0]}x{size[1]}", np.frombuffer(buffer.getvalue(), np.uint8)))
    return out


def refused(decoder: NvImageCodecJpeg, datas: list[np.ndarray], batch: int) -> list[bool]:
    """Per JPEG: did the engines alone give nothing for it?"""
    out = []
    for start in range(0, len(datas), batch):
        images = decoder.decode(datas[start:start + batch], fresh=True, retry=False)
        out += [image is None for image in images]
    torch.cuda.synchronize()
    return out


def one_pass(decoder: NvImageCodecJpeg, batches: list[list[np.ndarray]], retry: bool) -> float:
    """Seconds to decode the batches, each batch's GPU work finished before the next, as a
    lane's batches are handed over."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    for datas in batches:
        decoder.decode(datas, retry=retry)
        torch.cuda.synchronize()
    return time.perf_counter() - started


def best_seconds(decoder: NvImageCodecJpeg, rows: list[tuple[list, bool]],
                 repeats: int) -> list[float]:
    """Per row (batches, retry): the best of `repeats` timed passes, after one untimed pass
    of each. The rows take turns going first, so that neither is always the one that runs
    on engines warmed (or heated) by the other."""
    best = [float("inf")] * len(rows)
    for attempt in range(repeats + 1):
        shift = attempt % len(rows)
        for index in [*range(shift, len(rows)), *range(shift)]:
            seconds = one_pass(decoder, *rows[index])
            if attempt:
                best[index] = min(best[index], seconds)
    return best


def archive_part(decoder, args) -> dict:
    datas = screened_jpegs(args.archive, args.images)
    kinds, sizes = zip(*map(kind_and_size, datas))
    gone = refused(decoder, datas, args.batch)
    starts = range(0, len(datas), args.batch)
    batches = [datas[s:s + args.batch] for s in starts]
    refusals = [gone[s:s + args.batch] for s in starts]
    kept = [[d for d, r in zip(batch, flags) if not r] for batch, flags in zip(batches, refusals)]
    with_retry, engines_only = best_seconds(decoder, [(batches, True), (kept, False)],
                                            args.repeats)
    n_batches = len(batches)
    return {
        "images": len(datas), "batches": n_batches,
        "by_kind": dict(collections.Counter(kinds)),
        "refused_by_kind": dict(collections.Counter(k for k, r in zip(kinds, gone) if r)),
        "refused_by_size": dict(collections.Counter(s for s, r in zip(sizes, gone) if r)),
        "refused": int(sum(gone)),
        "batches_with_a_refusal": sum(map(any, refusals)),
        "lane_ms_per_batch": round(1e3 * with_retry / n_batches, 2),
        "engines_only_ms_per_batch": round(1e3 * engines_only / n_batches, 2),
        "lane_img_per_s": round(len(datas) / with_retry),
        "engines_only_img_per_s": round(sum(map(len, kept)) / engines_only),
    }


def main(args) -> dict:
    if not torch.cuda.is_available():
        sys.exit("probe_engines.py needs a CUDA device")
    decoder = NvImageCodecJpeg(torch.device("cuda"), "RGB", engine="hw")
    if not has_jpeg_engines(decoder):
        sys.exit("this GPU has no hardware JPEG engines")
    labels, datas = zip(*made_classes())
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "classes": dict(zip(labels, ("refused" if r else "decoded"
                                           for r in refused(decoder, list(datas), 64))))}
    for label, outcome in result["classes"].items():
        print(f"{label:>18}: {outcome}")
    if args.archive:
        result["archive"] = {"path": Path(args.archive).name, **archive_part(decoder, args)}
        print(json.dumps(result["archive"], indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main(get_args_parser().parse_args())
