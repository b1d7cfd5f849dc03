"""Generate a benchmark .tgz of synthetic, photo-like JPEGs in the ImageNet layout.

Two kinds of collection (``--sizes``):
- ``fixed``: every image ``--width`` x ``--height`` at ``--quality`` (ImageNet-like, uniform);
- ``photos``: what real photo collections look like: widths 250-800 px with any aspect
  (1:2 to 2:1), a tail of ~4% large photos 1,600-2,600 px wide, qualities 75-95, chroma
  subsampling mostly 4:2:0 with some 4:4:4 and 4:2:2, ~2% grayscale and ~1% progressive
  JPEGs (mean ~0.5 MP and ~110-130 KB per file). A loader tuned on ``fixed`` alone can be
  several times slower here: large images dominate decode time.

``--exif-share`` tags a share of either kind with a phone camera's EXIF orientations, and
``--progressive-share`` sets the share of progressive photos (web collections hold more than
1%): what real collections send down slower paths.

Nothing is downloaded and nothing needs committing: the images are drawn from a
seeded generator, so the same ``--seed`` always gives the same archive bytes
(whatever ``--jobs``).

Each image is a smooth random colour field (low-res noise upsampled bicubically,
like an out-of-focus background), a few ellipses/rectangles filled with linear
gradients (objects with hard edges), and per-pixel gaussian noise (sensor
grain). The grain is what makes the JPEGs as large as real photos: at 500x375
and quality 90 the mean is ~59 KB (ImageNet train JPEGs average ~110 KB at
their larger, varied sizes). Flat synthetic images would compress to a few KB
and overstate decode throughput.

Members are ``train/<wnid>/<wnid>_<i>.JPEG`` in a seeded shuffled order, with
class folders named like ImageNet wnids (``--val-every N``: every N-th image of each class
under ``val/<wnid>/``, an archive of two splits). ``--shards N`` additionally writes the
same images as N archives ``<stem>-shard-00000.tgz`` ... (contiguous runs of the
shuffled order), for recipes that read one shard per worker or rank.

Why the workers deflate: gzip of already-compressed JPEGs runs at only ~25-40
MB/s on one core, so a parent that compressed the ~1 GB stream itself would be
the bottleneck (~45 s for 16,000 images on 16 cores). Instead, like pigz, each
worker turns its batch into tar member blocks and deflates them into a
byte-aligned, non-final raw-deflate piece; the parent writes the gzip header,
the pieces in order, a final piece with the tar end-of-archive blocks, and the
CRC-32/length trailer. The result is one ordinary gzip member holding one
ordinary tar stream; a piece never spans two shards, so the single archive and
the shards reuse the same compressed bytes. (Hence the single archive's gzip
bytes, though not the tar inside, also depend on ``--shards``.)

    python scripts/bench/make_imagenet_like.py                      # 16,000 images -> bench-data/imagenet-like.tgz
    python scripts/bench/make_imagenet_like.py --images 200 --classes 10 --out bench-data/small.tgz
    python scripts/bench/make_imagenet_like.py --sizes photos --images 32000 --out bench-data/photos.tgz
    python scripts/bench/make_imagenet_like.py --sizes photos --images 16000 --batch-pixels 256  # no archive:
                                                                    # megapixels per batch of 256
"""

import argparse
import contextlib
import functools
import io
import multiprocessing
import os
import struct
import tarfile
import time
import zlib
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageDraw

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a checkout, not installed
from imageloader.pack import reproducible_tarinfo  # noqa: E402

# Images handed to a worker per task: large enough to amortise IPC and the
# per-piece flush, small enough to keep every worker busy until the end.
IMAGES_PER_TASK = 16
NOISE_SIGMA_RANGE = (6.0, 11.0)
# 4M float32 (16 MB per process): room for random offsets of a 500x375x3 image.
NOISE_BANK_SIZE = 1 << 22
GRAIN_BANK_SIZE = 1 << 24      # int8: 16 MB per process, > 2,600 x 1,950 x 3
# --sizes photos: the share of large photos and their widths; everything else is "web sized".
LARGE_SHARE = 0.04
LARGE_WIDTHS = (1600, 2600)     # their long side
SMALL_WIDTHS = (250, 800)
LARGE_ASPECTS = (4 / 3, 3 / 2, 16 / 9)
ASPECTS = (0.5, 2.0)            # width / height, log-uniform
QUALITIES = (75, 95)
# (PIL subsampling code, cumulative probability): 2 = 4:2:0, 0 = 4:4:4, 1 = 4:2:2.
SUBSAMPLING = ((2, 0.80), (0, 0.90), (1, 1.0))
GRAY_SHARE = 0.02
# --exif-share: (EXIF orientation, cumulative probability) of a tagged photo: a phone held
# upright (6, the most common), the other way (8), upside down (3).
CAMERA_ORIENTATIONS = ((6, 0.70), (8, 0.85), (3, 1.0))
EXIF_ORIENTATION = 0x0112
PROGRESSIVE_SHARE = 0.01
TAR_BLOCK = tarfile.BLOCKSIZE  # 512
TAR_RECORD = tarfile.RECORDSIZE  # 10240: tarfile pads the finished archive to this
# gzip header: magic, deflate, no flags, mtime 0, no extra flags, OS "unknown" (as Python's gzip writes).
GZIP_HEADER = b"\x1f\x8b\x08\x00" + struct.pack("<I", 0) + b"\x00\xff"
ZEROS = bytes(1 << 20)


def get_args_parser():
    parser = argparse.ArgumentParser(
        description="Generate a .tgz of synthetic photo-like JPEGs in the ImageNet train/<wnid>/ layout.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--out", default="bench-data/imagenet-like.tgz", help="output .tgz path")
    parser.add_argument("--images", type=int, default=16000, help="number of images")
    parser.add_argument("--classes", type=int, default=100, help="number of class folders (images are spread evenly)")
    parser.add_argument("--width", type=int, default=500, help="image width in pixels")
    parser.add_argument("--height", type=int, default=375, help="image height in pixels")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality")
    parser.add_argument("--sizes", choices=("fixed", "photos"), default="fixed",
                        help="fixed: every image --width x --height at --quality; photos: varied sizes, "
                             "aspects, qualities and subsampling with a tail of large photos")
    parser.add_argument(
        "--shards",
        type=int,
        default=0,
        help="0: only the single .tgz; N>0: also write the same images as N archives <stem>-shard-0000k.tgz",
    )
    parser.add_argument("--exif-share", type=float, default=0.0, metavar="FRACTION",
                        help="this share of the images carry an EXIF orientation, as a phone "
                             "camera's photos do (mostly 6, some 8 and 3); 0 keeps the bytes "
                             "of an archive made without it")
    parser.add_argument("--progressive-share", type=float, default=None, metavar="FRACTION",
                        help=f"--sizes photos: this share of the photos progressive JPEGs, as "
                             f"web collections hold more of them (default {PROGRESSIVE_SHARE}; "
                             f"the other photos and their order stay as they are)")
    parser.add_argument("--val-every", type=int, default=0, metavar="N",
                        help="every N-th image of each class under val/<wnid>/, not train/: "
                             "an archive of two splits, read one at a time (Options.split)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the images and of the member order")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="worker processes; 1 runs in-process")
    parser.add_argument("--compresslevel", type=int, default=6, help="deflate level, 0-9")
    parser.add_argument("--batch-pixels", type=int, default=0, metavar="BATCH",
                        help="write nothing: print how many megapixels batches of BATCH images "
                             "hold, in the archive's member order (how uneven a GPU decoder's "
                             "batches are), and exit")
    return parser


def wnid(class_index):
    """An ImageNet-style synset id; fixed per class index, whatever the seed."""
    return f"n{10000000 + 7919 * class_index:08d}"


def member_name(index, num_classes, val_every=0):
    # Round-robin labels give every class the same count (+-1).
    class_id = wnid(index % num_classes)
    # Every val_every-th round of the classes: each class the same share of val images.
    split = "val" if val_every and index // num_classes % val_every == val_every - 1 else "train"
    return f"{split}/{class_id}/{class_id}_{index}.JPEG"


def random_colour(rng):
    return rng.integers(0, 256, size=3).astype(np.float32)


def smooth_colour_field(rng, width, height):
    """Low-res random colours upsampled bicubically: a soft, blurry background."""
    grid_w, grid_h = rng.integers(3, 12, size=2)
    low_res = rng.integers(0, 256, size=(grid_h, grid_w, 3), dtype=np.uint8)
    return Image.fromarray(low_res, "RGB").resize((width, height), Image.BICUBIC)


def linear_gradient(rng, box_w, box_h):
    """A box_h x box_w RGB gradient between two random colours along a random direction."""
    angle = rng.uniform(0, 2 * np.pi)
    # Broadcast a row and a column instead of building full coordinate grids.
    along = np.arange(box_w, dtype=np.float32) * np.float32(np.cos(angle)) + np.arange(
        box_h, dtype=np.float32
    )[:, None] * np.float32(np.sin(angle))
    low, high = along.min(), along.max()
    t = (along - low) * np.float32(1.0 / max(float(high - low), 1.0))
    start, end = random_colour(rng), random_colour(rng)
    pixels = start + t[..., None] * (end - start)
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


def paste_gradient_shape(rng, canvas):
    """An ellipse or rectangle, filled with a gradient, at a random place (may overhang the edge)."""
    width, height = canvas.size
    box_w = int(rng.integers(width // 10, width * 3 // 5))
    box_h = int(rng.integers(height // 10, height * 3 // 5))
    left = int(rng.integers(-box_w // 3, width - box_w // 2))
    top = int(rng.integers(-box_h // 3, height - box_h // 2))
    mask = Image.new("L", (box_w, box_h), 0)
    draw = ImageDraw.Draw(mask)
    if rng.random() < 0.5:
        draw.ellipse([0, 0, box_w - 1, box_h - 1], fill=255)
    else:
        draw.rectangle([0, 0, box_w - 1, box_h - 1], fill=255)
    canvas.paste(linear_gradient(rng, box_w, box_h), (left, top), mask)


@functools.lru_cache(maxsize=1)
def noise_bank(seed):
    """Standard-normal samples drawn once per process; every image adds a slice of them.

    Drawing ~560k fresh gaussians per image took ~3/4 of the generation time. A
    slice at a random offset is just as incompressible for the JPEG encoder, and
    the bank depends on the seed alone, so results do not depend on the worker.
    """
    return np.random.default_rng([seed, 2**32 - 2]).standard_normal(NOISE_BANK_SIZE, dtype=np.float32)


def add_sensor_noise(rng, image, seed):
    sigma = np.float32(rng.uniform(*NOISE_SIGMA_RANGE))
    pixels = np.asarray(image, dtype=np.float32)
    bank = noise_bank(seed)
    if pixels.size > bank.size:
        # Images larger than the bank (from ~1.4 MP) read it round from an offset: fresh
        # samples took ~3/4 of a phone photo's making (4032 x 3024: 1 s a photo on one core),
        # and a repeat every 4M samples is far beyond what an 8x8 JPEG block sees.
        offset = int(rng.integers(0, bank.size))
        noise = np.resize(np.roll(bank, -offset), pixels.size).reshape(pixels.shape)
    else:
        offset = int(rng.integers(0, bank.size - pixels.size + 1))
        noise = bank[offset : offset + pixels.size].reshape(pixels.shape)
    pixels += noise * sigma
    np.clip(pixels, 0, 255, out=pixels)
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


@functools.lru_cache(maxsize=1)
def grain_bank(seed):
    """--sizes photos: integer grain (sigma 8), enough for the largest photo; adding int16
    is ~3x faster than the float path, which matters at 5 MP per large photo."""
    noise = np.random.default_rng([seed, 2**32 - 3]).standard_normal(GRAIN_BANK_SIZE, dtype=np.float32)
    return np.clip(np.rint(noise * 8), -127, 127).astype(np.int8)


def add_grain(rng, image, seed):
    pixels = np.asarray(image, dtype=np.int16)
    bank = grain_bank(seed)
    offset = int(rng.integers(0, bank.size - pixels.size + 1))
    pixels += bank[offset : offset + pixels.size].reshape(pixels.shape)
    np.clip(pixels, 0, 255, out=pixels)
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


def synthesize_image(seed, index, width, height, grain=add_sensor_noise):
    # One generator per (seed, image): the pixels do not depend on --jobs or on chunking.
    rng = np.random.default_rng([seed, index])
    canvas = smooth_colour_field(rng, width, height)
    for _ in range(int(rng.integers(2, 7))):
        paste_gradient_shape(rng, canvas)
    return grain(rng, canvas, seed)


def encode_jpeg(image, quality, **options):
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality, **options)
    return buffer.getvalue()


class PhotoSpec(NamedTuple):
    """How one image of a --sizes photos collection is drawn and encoded."""

    width: int
    height: int
    quality: int
    subsampling: int
    gray: bool
    progressive: bool


def photo_spec(seed, index, progressive_share=PROGRESSIVE_SHARE):
    """The size and encoding of image `index`: a stream of its own, so the pixels (keyed
    [seed, index]) and this spec are independent and neither depends on --jobs. Another
    `progressive_share` moves only the threshold of the same draw."""
    rng = np.random.default_rng([seed, index, 1])
    if rng.random() < LARGE_SHARE:  # a camera photo: its long side 1,600-2,600 px, 4:3 to 16:9
        long_side = int(rng.integers(LARGE_WIDTHS[0], LARGE_WIDTHS[1] + 1))
        short_side = int(round(long_side / rng.choice(LARGE_ASPECTS)))
        width, height = (long_side, short_side) if rng.random() < 0.7 else (short_side, long_side)
    else:
        width = int(rng.integers(SMALL_WIDTHS[0], SMALL_WIDTHS[1] + 1))
        aspect = float(np.exp(rng.uniform(np.log(ASPECTS[0]), np.log(ASPECTS[1]))))
        height = max(16, int(round(width / aspect)))
    draw = rng.random()
    subsampling = next(code for code, upto in SUBSAMPLING if draw < upto)
    return PhotoSpec(width, height, int(rng.integers(QUALITIES[0], QUALITIES[1] + 1)), subsampling,
                     bool(rng.random() < GRAY_SHARE), bool(rng.random() < progressive_share))


def exif_orientation(settings, index):
    """--exif-share: the EXIF orientation a camera gave image `index` (1: none), from a stream
    of its own, so that an archive without the option keeps its bytes."""
    share = settings.get("exif_share", 0.0)
    if not share:
        return 1
    rng = np.random.default_rng([settings["seed"], index, 2])
    if rng.random() >= share:
        return 1
    draw = rng.random()
    return next(orientation for orientation, upto in CAMERA_ORIENTATIONS if draw < upto)


def make_jpeg(settings, index):
    """The JPEG bytes of image `index` for this collection."""
    options = {}
    orientation = exif_orientation(settings, index)
    if orientation != 1:
        exif = Image.Exif()
        exif[EXIF_ORIENTATION] = orientation
        options["exif"] = exif.tobytes()
    if settings.get("sizes", "fixed") == "fixed":
        image = synthesize_image(settings["seed"], index, settings["width"], settings["height"])
        return encode_jpeg(image, settings["quality"], **options)
    share = settings.get("progressive_share")
    spec = photo_spec(settings["seed"], index, PROGRESSIVE_SHARE if share is None else share)
    image = synthesize_image(settings["seed"], index, spec.width, spec.height, grain=add_grain)
    if spec.gray:
        image = image.convert("L")
    return encode_jpeg(image, spec.quality, subsampling=spec.subsampling, progressive=spec.progressive,
                       **options)


def tar_member_block(name, data):
    """The bytes tarfile would write for one regular-file member: header(s), data, NUL padding."""
    header = reproducible_tarinfo(name, len(data)).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
    return header + data + bytes(-len(data) % TAR_BLOCK)


def deflate_piece(data, level, final):
    """Raw deflate of data, ending byte-aligned so pieces can simply be concatenated.

    A fresh compressor per piece means no back-references across pieces; a sync
    flush ends a non-final piece on a byte boundary, and only the archive's last
    piece carries the final-block bit.
    """
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)


class Piece(NamedTuple):
    """A run of consecutive tar members, deflated; crc and length are of the uncompressed tar bytes."""

    members: int
    jpeg_bytes: int
    deflated: bytes
    crc: int
    length: int


def generate_piece(task):
    """Worker entry point: (indices, settings) -> Piece of deflated tar member blocks."""
    indices, settings = task
    blocks, jpeg_bytes = [], 0
    for index in indices:
        jpeg = make_jpeg(settings, index)
        name = member_name(index, settings["classes"], settings["val_every"])
        blocks.append(tar_member_block(name, jpeg))
        jpeg_bytes += len(jpeg)
    tar_bytes = b"".join(blocks)
    return Piece(
        members=len(indices),
        jpeg_bytes=jpeg_bytes,
        deflated=deflate_piece(tar_bytes, settings["compresslevel"], final=False),
        crc=zlib.crc32(tar_bytes),
        length=len(tar_bytes),
    )


def crc32_of_zeros(length, crc):
    """zlib.crc32(bytes(length), crc) without allocating length bytes."""
    view = memoryview(ZEROS)
    while length > 0:
        step = min(length, len(ZEROS))
        crc = zlib.crc32(view[:step], crc)
        length -= step
    return crc


def crc32_combine(crc_a, crc_b, length_b):
    """crc32(A + B) from crc32(A), crc32(B) and len(B) (Python's zlib does not expose this).

    CRC-32 is affine over GF(2) in (initial value, message), so
    crc32(B, crc_a) = crc32(zeros, crc_a) ^ crc32(B, 0) ^ crc32(zeros, 0) with len(zeros) == len(B).
    """
    return crc32_of_zeros(length_b, crc_a) ^ crc_b ^ crc32_of_zeros(length_b, 0)


class ConcatenatedGzipWriter:
    """Writes one gzip member whose deflate stream is assembled from pre-compressed pieces."""

    def __init__(self, path, compresslevel):
        self.path = path
        self.compresslevel = compresslevel
        self._file = open(path, "wb")
        self._file.write(GZIP_HEADER)
        self._crc = 0
        self._length = 0

    def add_piece(self, piece):
        self._file.write(piece.deflated)
        self._crc = crc32_combine(self._crc, piece.crc, piece.length)
        self._length += piece.length

    def close(self):
        # Same end as tarfile: two zero blocks, then zeros up to a whole record.
        end_of_archive = bytes(2 * TAR_BLOCK)
        end_of_archive += bytes(-(self._length + len(end_of_archive)) % TAR_RECORD)
        self._file.write(deflate_piece(end_of_archive, self.compresslevel, final=True))
        self._crc = zlib.crc32(end_of_archive, self._crc)
        self._length += len(end_of_archive)
        self._file.write(struct.pack("<II", self._crc, self._length & 0xFFFFFFFF))
        self._file.close()


def shuffled_order(num_images, seed):
    # A separate stream from the per-image ones (those are keyed [seed, index]).
    return np.random.default_rng([seed, 2**32 - 1]).permutation(num_images).tolist()


def contiguous_parts(items, num_parts):
    """num_parts contiguous runs of near-equal size (differing by at most one) covering items once."""
    return [items[len(items) * k // num_parts : len(items) * (k + 1) // num_parts] for k in range(num_parts)]


def batches_of(items, size):
    return [items[start : start + size] for start in range(0, len(items), size)]


def build_tasks(order, num_shards, settings):
    """(shard index, task) pairs; batches are cut per shard so no piece spans two shards."""
    return [
        (shard_index, (batch, settings))
        for shard_index, shard_members in enumerate(contiguous_parts(order, max(num_shards, 1)))
        for batch in batches_of(shard_members, IMAGES_PER_TASK)
    ]


def shard_path(out, shard_index):
    stem = out[: -len(".tgz")] if out.endswith(".tgz") else out
    return f"{stem}-shard-{shard_index:05d}.tgz"


def start_generating(stack, tasks, jobs):
    """The workers' results in task order; a process pool when jobs > 1."""
    if jobs <= 1:
        return map(generate_piece, tasks)
    pool = stack.enter_context(multiprocessing.Pool(jobs))
    return pool.imap(generate_piece, tasks)


def write_archives(pieces, shard_of_piece, args):
    """Append each piece to the single archive and to its shard; returns the total JPEG bytes."""
    main_archive = ConcatenatedGzipWriter(args.out, args.compresslevel)
    shard, jpeg_bytes, done = None, 0, 0
    start, report_every = time.perf_counter(), max(1, args.images // 10)
    for shard_index, piece in zip(shard_of_piece, pieces):
        main_archive.add_piece(piece)
        if args.shards > 0:
            if shard is None or shard.path != shard_path(args.out, shard_index):
                if shard is not None:
                    shard.close()
                shard = ConcatenatedGzipWriter(shard_path(args.out, shard_index), args.compresslevel)
            shard.add_piece(piece)
        jpeg_bytes += piece.jpeg_bytes
        previous, done = done, done + piece.members
        if done // report_every != previous // report_every:
            print(f"  {done}/{args.images} images, {done / (time.perf_counter() - start):.0f} images/s", flush=True)
    main_archive.close()
    if shard is not None:
        shard.close()
    return jpeg_bytes


def validate(args):
    if args.images < 1 or args.classes < 1:
        raise ValueError("--images and --classes must be >= 1")
    if not 0 <= args.shards <= args.images:
        raise ValueError(f"--shards must be in 0..--images, got {args.shards}")
    if args.val_every < 0 or args.val_every == 1:
        raise ValueError(f"--val-every must be 0 (none) or >= 2, got {args.val_every}")
    if not 0 <= args.exif_share <= 1:
        raise ValueError(f"--exif-share must be in 0..1, got {args.exif_share}")
    if args.progressive_share is not None and (args.sizes != "photos"
                                               or not 0 <= args.progressive_share <= 1):
        raise ValueError(f"--progressive-share must be in 0..1, with --sizes photos; got "
                         f"{args.progressive_share} with --sizes {args.sizes}")


def image_size(settings, index):
    """(width, height) of image `index`, as make_jpeg draws it."""
    if settings.get("sizes", "fixed") == "fixed":
        return settings["width"], settings["height"]
    spec = photo_spec(settings["seed"], index)
    return spec.width, spec.height


def batch_megapixels(args) -> dict:
    """Megapixels per batch of --batch-pixels consecutive members (the last, partial batch
    left out): quantiles over the batches. A GPU decoder's time per batch grows with its
    pixels, so their spread bounds how uneven decoding the batches of a shuffled epoch can be
    for that reason alone."""
    settings = {"seed": args.seed, "sizes": args.sizes, "width": args.width, "height": args.height}
    pixels = np.array([np.prod(image_size(settings, i)) for i in shuffled_order(args.images, args.seed)],
                      dtype=np.float64) / 1e6
    usable = len(pixels) // args.batch_pixels * args.batch_pixels
    if usable == 0:
        raise ValueError(f"--batch-pixels {args.batch_pixels} is more than --images {args.images}")
    per_batch = pixels[:usable].reshape(-1, args.batch_pixels).sum(axis=1)
    p10, p50, p90 = np.quantile(per_batch, [0.1, 0.5, 0.9])
    return {"batches": len(per_batch), "mean_mp_per_image": round(float(pixels.mean()), 4),
            "p10": round(float(p10), 2), "p50": round(float(p50), 2), "p90": round(float(p90), 2),
            "max": round(float(per_batch.max()), 2), "p90_over_p50": round(float(p90 / p50), 3)}


def main(args):
    validate(args)
    if args.batch_pixels:
        stats = batch_megapixels(args)
        print(f"{stats['batches']} batches of {args.batch_pixels} ({args.sizes}, {stats['mean_mp_per_image']} MP an "
              f"image): MP a batch p10 {stats['p10']}, p50 {stats['p50']}, p90 {stats['p90']}, max {stats['max']}; "
              f"p90/p50 {stats['p90_over_p50']}")
        return stats
    out_dir = os.path.dirname(args.out)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    settings = {
        "seed": args.seed,
        "classes": args.classes,
        "width": args.width,
        "height": args.height,
        "quality": args.quality,
        "sizes": args.sizes,
        "compresslevel": args.compresslevel,
        "exif_share": args.exif_share,
        "progressive_share": args.progressive_share,
        "val_every": args.val_every,
    }
    shard_of_piece, tasks = zip(*build_tasks(shuffled_order(args.images, args.seed), args.shards, settings))

    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        total_jpeg_bytes = write_archives(start_generating(stack, tasks, args.jobs), shard_of_piece, args)
    seconds = time.perf_counter() - start

    paths = [args.out] + [shard_path(args.out, k) for k in range(args.shards)]
    stats = {
        "images": args.images,
        "seconds": seconds,
        "images_per_s": args.images / seconds,
        "mean_jpeg_bytes": total_jpeg_bytes / args.images,
        "archive_bytes": os.path.getsize(args.out),
        "paths": paths,
    }
    print(
        f"{args.out}: {args.images} images in {seconds:.1f} s ({stats['images_per_s']:.0f} images/s, jobs={args.jobs}), "
        f"mean JPEG {stats['mean_jpeg_bytes'] / 1000:.1f} KB, archive {stats['archive_bytes'] / 1e6:.1f} MB"
    )
    if args.shards > 0:
        shard_bytes = sum(os.path.getsize(p) for p in paths[1:])
        print(f"  + {args.shards} shards {paths[1]} ... ({shard_bytes / 1e6:.1f} MB together)")
    return stats


if __name__ == "__main__":
    main(get_args_parser().parse_args())
