"""How many JPEGs a batch's byte arena turns away to the CPU, for a fixed room per slot and
for the room the loader now sizes from the archive (loader.arena_per_image): on any host
("sized", at most 1 MiB a slot) and on this one ("here", with the room its memory allows the
buffers of a default loader decoding with "cuda", loader.arena_room_per_slot; --packers 16 for
decode="auto"'s).

    python scripts/bench/probe_arena.py --archive bench-data/photos-16000.tgz --images 2048

With decode="cuda" the packers copy each JPEG into its batch's arena for the GPU's engines; one
that no longer fits is decoded on the packer's CPU instead (stats.fallbacks["arena_full"]),
many times slower. This packs the archive's first --images JPEGs in shuffled batches through
decode.JpegPacker, as a packer does, and counts the fallbacks by reason. No GPU needed.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader.batch import batch_layout, views_of  # noqa: E402
from imageloader.decode import Augment, Decoder, JpegPacker  # noqa: E402
from imageloader.loader import (  # noqa: E402
    ARENA_PER_IMAGE, arena_per_image, arena_room_per_slot, buffer_count, default_workers,
    gpu_packers)
from imageloader.pool import shared_memory_now  # noqa: E402
from bench_decoders import load_jpegs  # noqa: E402  (beside this script)


def pack(jpegs: list[bytes], batch_size: int, per_image: int, size: int) -> dict:
    """Fallbacks by reason over every batch, packed as a packer fills them."""
    packer = JpegPacker(Decoder(Augment.make(size, True)))
    layout = batch_layout(batch_size, packer.out_shape, arena_bytes=batch_size * per_image)
    batch = views_of(bytearray(layout.nbytes), layout)
    for first in range(0, len(jpegs) - batch_size + 1, batch_size):
        packer.start(batch)
        for slot in range(batch_size):
            packer.fill(batch, slot, jpegs[first + slot], first + slot)
    return packer.take_fallbacks()


def main(args) -> dict:
    warnings.simplefilter("ignore", UserWarning)
    jpegs = load_jpegs(args.archive, args.images)
    random.Random(0).shuffle(jpegs)  # the loader's batches draw from across the archive
    packed = len(jpegs) // args.batch_size * args.batch_size
    mean = os.path.getsize(args.archive) / args.archive_images if args.archive_images \
        else sum(map(len, jpegs)) / len(jpegs)
    # a default loader's buffers with GPU decoding: prefetch 2, its packers, two lanes
    packers = args.packers or gpu_packers(default_workers(), decodes_too=False)
    slots = buffer_count(2, packers, 2) * args.batch_size
    room = arena_room_per_slot(slots, shared_memory_now())
    rows = {}
    for label, per_image in (("fixed", ARENA_PER_IMAGE), ("sized", arena_per_image(mean)),
                             ("here", arena_per_image(mean, room))):
        fallbacks = pack(jpegs, args.batch_size, per_image, args.size)
        rows[label] = {"per_image_kib": round(per_image / 1024, 1),
                       "arena_full_share": round(fallbacks.get("arena_full", 0) / packed, 4),
                       "fallbacks": fallbacks}
    return {"archive": args.archive, "images": packed, "batch_size": args.batch_size,
            "mean_member_kb": round(mean / 1000, 1), "packers": packers,
            "room_here_kib": room >> 10, **rows}


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archive", required=True)
    parser.add_argument("--images", type=int, default=2048, help="JPEGs packed (first ones)")
    parser.add_argument("--archive-images", type=int, default=0,
                        help="the archive's image count: the mean from its size, as the loader "
                             "takes it (default: the mean of the JPEGs read)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--packers", type=int, default=0,
                        help='the "here" row\'s packers (default: a loader\'s with decode="cuda", '
                             'gpu_packers; 16 on a 16-core host with "auto")')
    return parser


if __name__ == "__main__":
    print(json.dumps(main(get_args_parser().parse_args())))
