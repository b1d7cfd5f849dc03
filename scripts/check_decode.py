"""Check that GPU decoding gives the pixels the CPU path gives, on any archive of your own.

    python scripts/check_decode.py --data photos.tgz --images 1024

Reads the archive's first --images images twice with eval transforms (resize + center crop:
deterministic, in archive order), once with decode="cpu" (Pillow in the workers) and once with
decode="cuda" (the GPU decoder the loader picks, with its fallbacks to the CPU), and compares
them image by image: same labels in the same order, and each image's mean absolute difference
in 0-255 levels. Decoders differ a little (chroma upsampling, IDCT); the CPU path also decodes
large JPEGs at a reduced scale when the crop allows (Pillow's draft), which differs more on
fine texture (~11 levels on a 5 MP textured photo). A wrong decode (colour space, a swapped or
stale image, a wrong crop) differs by tens of levels. Prints a JSON report with the worst
images by member name, each with its kind (format, mode, JPEG subsampling, progressive) and
size, and how many of each kind differ by more than --tolerance (grey JPEGs, 2026-12-07);
exits 1 if any image does, or if the two paths do not give the same images and labels.
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from collections import Counter
from pathlib import Path

import torch
from PIL import Image, JpegImagePlugin

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from imageloader import ImageLoader, Options  # noqa: E402
from imageloader.decode import gray_sampling_at, is_progressive  # noqa: E402
from imageloader.errors import DECODE_SKIPS, check_split  # noqa: E402
from imageloader.read import expand_sources, in_split, iter_members, split_folder  # noqa: E402


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", required=True, help="archive(s), paths or globs")
    p.add_argument("--images", type=int, default=1024, help="compare this many (0: all)")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--split", default=None, help="read only this split folder (Options.split)")
    p.add_argument("--tolerance", type=float, default=12.0,
                   help="largest mean absolute difference an image may have, in levels")
    p.add_argument("--worst", type=int, default=8, help="list this many of the worst images")
    p.add_argument("--out", default=None, help="also write the report here")
    return p


def read_images(args, decode: str) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The first --images images and labels as one uint8 tensor on the CPU, and what the
    loader says it did (its decoder, fallbacks, skips)."""
    images, labels, count = [], [], 0
    with ImageLoader(args.data, batch_size=args.batch_size, size=args.size, train=False,
                     decode=decode, normalize=False, device="cuda", workers=args.workers,
                     options=Options(split=args.split)) as loader:
        for batch, batch_labels in loader:
            images.append(batch.cpu())  # the copy waits for the batch's decode (a sync)
            labels.append(batch_labels.cpu())
            count += len(batch_labels)
            if args.images and count >= args.images:
                break
        stats = loader.stats
        said = {"decode": stats.decode, "fallbacks": dict(stats.fallbacks),
                "skipped": dict(stats.skipped)}
    n = args.images or count
    return torch.cat(images)[:n], torch.cat(labels)[:n], said


SAMPLINGS = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}  # JpegImagePlugin.get_sampling's codes


def image_kind(data: bytes) -> dict:
    """What an image is, from its header: {"kind": "JPEG RGB 4:2:0 progressive", "size":
    [w, h]}, the kind alone where Pillow cannot read the header."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            words = [image.format or "?", image.mode]
            if image.format == "JPEG" and image.mode != "L":
                words.append(SAMPLINGS.get(JpegImagePlugin.get_sampling(image), "other"))
            elif image.format == "JPEG" and (at := gray_sampling_at(data)) is not None:
                # grey with other sampling factors than 1x1: the engines got them wrong as is
                words.append(f"factors {data[at] >> 4}x{data[at] & 15}")
            if is_progressive(image):
                words.append("progressive")
            return {"kind": " ".join(words), "size": list(image.size)}
    except Exception:  # noqa: BLE001 - what the header is, not why it failed
        return {"kind": "unreadable"}


def members(args, n: int) -> list[dict]:
    """The archives' first n image members in stream order (the order eval reads them), to
    name the worst images: {"member": "archive: name", "kind": ..., "size": ...}. An image
    both paths skipped (undecodable) is among them, so they no longer line up with the
    images: compare() then gives indices only."""
    split, found = check_split(args.split), []
    for source in expand_sources(args.data):
        for member in iter_members(source, skipped=Counter()):
            if in_split(split_folder(member.name), split):
                found.append({"member": f"{member.archive}: {member.name}",
                              **image_kind(member.data)})
                if len(found) == n:
                    return found
    return found


def compare(cpu, gpu, names: list[dict], tolerance: float, worst: int) -> dict:
    (cpu_images, cpu_labels, cpu_said), (gpu_images, gpu_labels, gpu_said) = cpu, gpu
    report = {"images": len(cpu_labels), "cpu": cpu_said, "cuda": gpu_said,
              "tolerance": tolerance}
    if len(cpu_labels) != len(gpu_labels) or not torch.equal(cpu_labels, gpu_labels):
        report["failure"] = (f"the paths gave different images: {len(cpu_labels)} against "
                             f"{len(gpu_labels)}, labels equal: "
                             f"{torch.equal(cpu_labels, gpu_labels)}")
        return report
    diff = (cpu_images.int() - gpu_images.int()).abs().float().mean(dim=(1, 2, 3))
    skips = sum(said.get("skipped", {}).get(reason, 0) for said in (cpu_said, gpu_said)
                for reason in DECODE_SKIPS)
    named = not skips and len(names) == len(diff)  # else a skipped image shifts the names
    over = diff > tolerance
    order = diff.argsort(descending=True)[:worst].tolist()
    report.update({
        "mean_abs_diff": {"mean": round(diff.mean().item(), 3),
                          "p99": round(diff.quantile(0.99).item(), 3),
                          "max": round(diff.max().item(), 3)},
        "over_tolerance": int(over.sum()),
        "worst": [{"index": i, "diff": round(diff[i].item(), 2), **(names[i] if named else {})}
                  for i in order]})
    if named:  # what the images over the tolerance are: one kind often says why
        report["over_tolerance_by_kind"] = dict(Counter(
            names[i]["kind"] for i in over.nonzero().flatten().tolist()))
    if report["over_tolerance"]:
        report["failure"] = f"{report['over_tolerance']} image(s) differ by > {tolerance} levels"
    return report


def main(args) -> int:
    if not torch.cuda.is_available():
        print("check_decode.py compares GPU decoding with the CPU path: it needs CUDA",
              file=sys.stderr)
        return 2
    cpu = read_images(args, "cpu")
    gpu = read_images(args, "cuda")
    report = compare(cpu, gpu, members(args, len(cpu[1])), args.tolerance, args.worst)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 1 if "failure" in report else 0


if __name__ == "__main__":
    sys.exit(main(get_args_parser().parse_args()))
