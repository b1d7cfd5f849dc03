"""The Python a GPU-decoding lane runs around its C calls, per batch: image by image (an array,
an address and a `Decoded` per JPEG) against one `DecodedBatch` (nvbatch.decode_at: arrays).

    python scripts/bench/bench_lane_python.py --batches 300 --out lane.json

`GpuDecode` (the lane's stage) decodes a packed batch of `--images` small JPEGs with
nvImageCodec's CPU backend through nvbatch's one C call, as training does (random-resized
crops), both ways in turn: "image by image" hides the decoder's `decode_at`, so the stage
takes its list path; "one call" is the lanes' way since 2026-11-29. The crops are gpucrop's on
a GPU host: here its host side stands in for the launch (`_image_table`, the table the kernel
reads), so the rows time what the lane's thread does on the host, not the kernels. The C calls
(bd_parse, bd_decode) are timed apart and taken out: "python_ms" is the rest, what holds the
GIL. The JPEGs are tiny (24 x 16) so that the C calls stay short: the Python around them does
not depend on the pixels. Both ways' crop tables are compared (the same boxes, sizes, slots).
"""
from __future__ import annotations

import argparse
import io
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader import gpucrop  # noqa: E402
from imageloader.decode import Augment, Decoder, JpegPacker  # noqa: E402
from imageloader.gpudecode import GpuDecode, Packed  # noqa: E402
from imageloader.gpujpeg import NvImageCodecJpeg  # noqa: E402
from imageloader.pool import BufferPool  # noqa: E402

CPU = torch.device("cpu")
OUT_SIDE = 8  # the crops' output side: small, the kernel does not run here anyway


def get_args_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=256, help="JPEGs per batch")
    p.add_argument("--batches", type=int, default=300, help="timed batches per row")
    p.add_argument("--out", default=None, help="JSON of the rows")
    return p


class ImageByImage:
    """The lane's decoder without `decode_at`: GpuDecode then decodes a list of arrays."""

    def __init__(self, decoder: NvImageCodecJpeg):
        self.decoder = decoder

    def decode(self, datas, fresh=False, **kwargs):
        return self.decoder.decode(datas, fresh, **kwargs)


class TimedLibrary:
    """nvbatch's library with the time spent in its C calls summed."""

    def __init__(self, lib):
        self.lib, self.seconds = lib, 0.0

    def __getattr__(self, name):
        call = getattr(self.lib, name)

        def timed(*args):
            started = time.perf_counter()
            try:
                return call(*args)
            finally:
                self.seconds += time.perf_counter() - started
        return timed


def packed_batch(count: int):
    """A host batch of `count` tiny JPEGs packed as the workers pack them."""
    cpu = Decoder(Augment.make(OUT_SIDE, True))
    buf = BufferPool(1, count, cpu.out_shape, arena_bytes=count * 4096).lease()
    packer = JpegPacker(cpu)
    packer.start(buf.arrays)
    rng = np.random.default_rng(0)
    for slot in range(count):
        data = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (16, 24, 3), dtype=np.uint8)).save(data, "JPEG")
        packer.fill(buf.arrays, slot, data.getvalue(), 1000 + slot)
        buf.arrays.seeds[slot] = 1000 + slot
    buf.count = count
    return buf, cpu


def time_row(name: str, buf, cpu, one_call: bool, batches: int, tables: list) -> dict:
    decoder = NvImageCodecJpeg(CPU, "RGB", one_call=True)
    stage = GpuDecode(cpu, None, CPU, [decoder if one_call else ImageByImage(decoder)])
    stage.crop = "triton"  # as on a GPU host, where crop_resize_flip stands in (see main)
    for _ in range(20):  # warm: buffers grown, code paths taken once
        stage(Packed(buf))
    library = decoder.batch.lib = TimedLibrary(decoder.batch.lib)
    tables.clear()
    started = time.perf_counter()
    for _ in range(batches):
        stage(Packed(buf))
    seconds = time.perf_counter() - started
    decoder.batch.lib = library.lib  # untimed again (its handles are freed through it)
    total_ms, c_ms = 1e3 * seconds / batches, 1e3 * library.seconds / batches
    print(f"{name:14s} {total_ms:6.3f} ms a batch, {c_ms:6.3f} in C, "
          f"{total_ms - c_ms:6.3f} Python", flush=True)
    return {"row": name, "ms_per_batch": total_ms, "c_ms": c_ms, "python_ms": total_ms - c_ms,
            "crops_from_table": tables[2], "table": tables[:2]}  # the last batch's


def main(args) -> dict:
    buf, cpu = packed_batch(args.images)
    tables: list = []

    def host_side_of_the_crops(images, boxes, slots, out):
        tables[:] = [*gpucrop._image_table(images, boxes, slots, OUT_SIDE, OUT_SIDE),
                     isinstance(images, np.ndarray)]  # the geometry rows as they came
    kernel, gpucrop.crop_resize_flip = gpucrop.crop_resize_flip, host_side_of_the_crops
    try:
        rows = [time_row("image by image", buf, cpu, False, args.batches, tables),
                time_row("one call", buf, cpu, True, args.batches, tables)]
    finally:
        gpucrop.crop_resize_flip = kernel
    (ints, floats), (their_ints, their_floats) = (row.pop("table") for row in rows)
    # (the address differs; the last two columns are filled by crop_resize_flip after the table)
    same = np.array_equal(ints[:, 1:10], their_ints[:, 1:10]) \
        and np.array_equal(floats, their_floats)
    result = {"images": args.images, "batches": args.batches, "same_crop_tables": same,
              "rows": rows}
    print(f"same crop tables: {result['same_crop_tables']}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main(get_args_parser().parse_args())
