"""What the Python around each GPU decode call costs: nvImageCodec's Python API (an nv.CodeStream
per JPEG, kept images, each image's address read back) against one C call per batch
(imageloader/nvbatch.py), both as a decoding lane drives them.

    python scripts/bench/bench_batch_call.py --archive bench-data/fixed-16000.tgz --out call.json

Both decode the same JPEGs in batches of `--batch` (those the packers would send to the GPU,
decode.gpu_screen: no progressive JPEG is refused by the engines and decoded again) with the
same nvImageCodec engine into planar RGB, through gpujpeg.NvImageCodecJpeg (one_call False,
then True), and read each image's geometry for the crop kernel; each row reports images/s and
the calling thread's CPU time per batch (the host work a lane thread does; the decoders' own
threads are not in it) and, on CUDA, the GPU time of a batch's kernels and of its copies
(torch.profiler: the kernels are what a GPU-bound model shares). Pixels are compared on the
first batch. Without a GPU (or with
`--device cpu`) both use the CPU backend (libjpeg-turbo). `--regions-from PIXELS...` adds a
row per value: the C call decoding the random-resized-crop box of each image of at least that
many pixels as a region (NvImageCodecJpeg(regions_from=...), as IMAGELOADER_REGIONS_FROM sets
it; nvbatch.py).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader.gpucrop import image_geometry  # noqa: E402
from imageloader.gpujpeg import ENGINES  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decoders import (batches, crop_boxes, gpu_ms_per_call,  # noqa: E402  (same JPEGs,
                             jpegs_parser, screened_jpegs,  # same batching, same crops)
                             write_results)


def get_args_parser():
    p = jpegs_parser(__doc__, images=2048)
    p.add_argument("--passes", type=int, default=3, help="timed passes over the images, each row")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--engine", default="hw", choices=ENGINES,
                   help="nvImageCodec engine on a GPU (the CPU backend without one)")
    p.add_argument("--regions-from", type=int, nargs="*", default=[],
                   help="also time regions, a row per value: the crops of images of at least "
                        "this many pixels (1: every image, as DALI's image_random_crop)")
    p.add_argument("--out", default=None, help="JSON results")
    return p


def lane_way(decoder, datas: list[np.ndarray], boxes: np.ndarray | None = None) -> list:
    """What a lane does around its decode call: the decode, then each image's address and
    strides for the crop kernel (on the CPU backend, from the array interface)."""
    images = decoder.decode(datas, boxes=boxes)
    if decoder.device.type == "cuda":
        return [image_geometry(image) if image is not None else None for image in images]
    return [image.__array_interface__["data"][0] if image is not None else None
            for image in images]


def timed(decoder, groups, passes: int, boxes=None) -> dict:
    boxes = boxes or [None] * len(groups)
    lane_way(decoder, groups[0], boxes[0])  # untimed: buffers grown, kernels loaded
    sync()
    wall, cpu, n = time.perf_counter(), time.thread_time(), 0
    for _ in range(passes):
        for group, group_boxes in zip(groups, boxes):
            lane_way(decoder, group, group_boxes)
            n += len(group)
    sync()
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    row = {"img_per_s": round(n / wall), "thread_cpu_ms_per_batch":
           round(1000 * cpu / (passes * len(groups)), 3)}
    if decoder.device.type == "cuda":  # what a GPU-bound model shares: the kernels' SM time
        queue = iter(list(zip(groups, boxes)))
        row["gpu_ms_per_batch"] = gpu_ms_per_call(lambda: lane_way(decoder, *next(queue)),
                                                  len(groups))
    return row


def sync() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def host_pixels(image, device) -> np.ndarray | None:
    import torch
    if image is None:
        return None
    return torch.as_tensor(image, device=device).cpu().numpy() if device.type == "cuda" \
        else np.array(image)


def same_pixels(python, c_call, group) -> tuple[bool, int]:
    """Whether both ways give equal images wherever both decoded, and how many only one did."""
    ours = [host_pixels(i, python.device) for i in python.decode(group)]
    theirs = [host_pixels(i, c_call.device) for i in c_call.decode(group)]
    equal = all(a is None or b is None or (a.shape == b.shape and np.array_equal(a, b))
                for a, b in zip(ours, theirs))
    return equal, sum((a is None) != (b is None) for a, b in zip(ours, theirs))


def timed_regions(device, args, datas: list[np.ndarray], groups, regions_from: int) -> dict:
    from imageloader.gpujpeg import NvImageCodecJpeg
    decoder = NvImageCodecJpeg(device, "RGB", engine=args.engine, one_call=True,
                               regions_from=regions_from)
    boxes = [np.array(group, np.float32) for group in batches(crop_boxes(datas), args.batch)]
    return timed(decoder, groups, args.passes, boxes)


def main(args) -> dict:
    import torch
    from imageloader.gpujpeg import NvImageCodecJpeg
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    datas = screened_jpegs(args.archive, args.images)  # what a lane gets
    groups = batches(datas, args.batch)
    ways = {"Python API (code stream objects, kept images, addresses read back)": False,
            "one C call per batch (nvbatch)": True}
    decoders = {row: NvImageCodecJpeg(device, "RGB", engine=args.engine, one_call=one_call)
                for row, one_call in ways.items()}
    results = {"device": str(torch.cuda.get_device_name(device)) if device.type == "cuda"
               else "cpu", "images": len(datas), "batch": args.batch, "engine": args.engine,
               "rows": [{"row": row, **timed(decoder, groups, args.passes)}
                        for row, decoder in decoders.items()]}
    results["same_pixels"], results["decoded_by_one_only"] = same_pixels(
        *decoders.values(), groups[0])
    for regions_from in args.regions_from:
        results["rows"].append({"row": f"one C call, crops of >= {regions_from} pixels "
                                       "as regions", **timed_regions(device, args, datas, groups,
                                                                     regions_from)})
    for row in results["rows"]:
        gpu = row.get("gpu_ms_per_batch")
        print(f"{row['row']:68s} {row['img_per_s']:8d} img/s  "
              f"{row['thread_cpu_ms_per_batch']:7.2f} ms of the calling thread per batch"
              + (f"; GPU kernels {gpu['kernels']:.3f}, copies {gpu['copies']:.3f} ms" if gpu
                 else ""))
    print("same pixels:", results["same_pixels"], "; decoded by one way only (first batch):",
          results["decoded_by_one_only"])
    write_results(args.out, results)
    return results


if __name__ == "__main__":
    main(get_args_parser().parse_args())
