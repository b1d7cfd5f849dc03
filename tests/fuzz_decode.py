"""Fuzz the CPU decoder (`imageloader.decode.Decoder.__call__`) with damaged image bytes.

Seeds: small JPEG (baseline, gray, progressive, EXIF-rotated), PNG (RGB, palette with
transparency, 16-bit, LA), GIF and BMP images, plus TIFF, WebP and PPM (the other formats the
decoder allows by default).

The oracle (`check`): for ANY input bytes, decoding either fills the whole output array or
raises `SampleError` whose reason is one of `imageloader.errors.DECODE_SKIPS` or "empty". Any
other exception would escape `batch.fill_batch` and stop training on one bad image; a partly
written output would put stale pixels from an earlier batch into this one. "Fully written" is
checked by decoding twice, into arrays poisoned with 0x00 and 0xFF: equal results mean every
byte was written (decoding is deterministic for a given seed).

Two ways to run it:

1. Under pytest, through hypothesis (always): `tests/test_properties.py::test_decoder_fuzz`
   mutates the seeds below (bit flips, truncations, insertions, deletions, overwrites).

2. Coverage-guided with atheris (when installed; this file is not collected by pytest):

       pip install atheris
       python tests/fuzz_decode.py --write-seeds /tmp/decode-corpus    # the seed corpus
       python tests/fuzz_decode.py /tmp/decode-corpus -max_len=65536 -timeout=10 -rss_limit_mb=4096
       python tests/fuzz_decode.py crash-<hash>                        # replay one input

   The first input byte chooses the decoder configuration (train/eval, RGB/L, size); the rest is
   the image. A crash prints the exception and writes the input to `crash-<hash>`; libFuzzer
   flags apply (`-runs=N`, `-max_total_time=S`, `-jobs=N`).
"""
from __future__ import annotations

import io
import os
import sys

import numpy as np
from PIL import Image

from imageloader.decode import Augment, Decoder
from imageloader.errors import DECODE_SKIPS, Limits, SampleError

ALLOWED_REASONS = frozenset(DECODE_SKIPS) | {"empty"}
# Small enough that a mutated header cannot make one input take seconds or gigabytes.
FUZZ_LIMITS = Limits(max_pixels=1 << 20)


def _decoder(train: bool, mode: str, size) -> Decoder:
    return Decoder(Augment.make(size, train), mode=mode, limits=FUZZ_LIMITS)


DECODERS = (
    _decoder(False, "RGB", 8),
    _decoder(True, "RGB", 8),
    _decoder(False, "L", (6, 10)),
    _decoder(True, "L", 5),
)


def _encode(img: Image.Image, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **kwargs)
    return out.getvalue()


def seed_images() -> dict[str, bytes]:
    """Small valid images of each format and several modes: the corpus that gets mutated."""
    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8))
    gray = rgb.convert("L")
    exif = Image.Exif()
    exif[0x0112] = 6   # rotated: exercises the EXIF orientation path
    palette = rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    sixteen = Image.fromarray(np.asarray(gray, dtype=np.uint16) * 257)   # mode I;16
    return {
        "rgb.jpg": _encode(rgb, "JPEG", quality=90),
        "gray.jpg": _encode(gray, "JPEG", quality=90),
        "progressive.jpg": _encode(rgb, "JPEG", progressive=True),
        "rotated.jpg": _encode(rgb, "JPEG", exif=exif.tobytes()),
        "rgb.png": _encode(rgb, "PNG"),
        "palette_transparent.png": _encode(palette, "PNG", transparency=0),
        "gray16.png": _encode(sixteen, "PNG"),
        "la.png": _encode(rgb.convert("LA"), "PNG"),
        "rgb.gif": _encode(palette, "GIF"),
        "rgb.bmp": _encode(rgb, "BMP"),
        "gray.bmp": _encode(gray, "BMP"),
        # the other formats the decoder allows by default
        "rgb.tif": _encode(rgb, "TIFF"),
        "deflate.tif": _encode(gray, "TIFF", compression="tiff_adobe_deflate"),
        "rgb.webp": _encode(rgb, "WEBP", quality=80),
        "rgb.ppm": _encode(rgb, "PPM"),
    }


def check(data: bytes, decoder: Decoder, seed: int = 0) -> str | None:
    """Decode `data`; return the SampleError reason, or None when the image was decoded."""
    outputs = []
    for poison in (0x00, 0xFF):
        out = np.full(decoder.out_shape, poison, dtype=np.uint8)
        try:
            decoder(data, out, seed)
        except SampleError as error:
            if error.reason not in ALLOWED_REASONS:
                raise AssertionError(f"SampleError with unknown reason {error.reason!r}: "
                                     f"{error}") from error
            return error.reason
        outputs.append(out)
    if not np.array_equal(outputs[0], outputs[1]):
        rows = np.argwhere(outputs[0] != outputs[1])
        raise AssertionError(f"decoding left {len(rows)} output values unwritten, e.g. at "
                             f"{rows[:3].tolist()}")
    return None


def test_one_input(data: bytes) -> None:
    """atheris entry: first byte picks the decoder and the seed, the rest is the image."""
    if not data:
        return
    check(data[1:], DECODERS[data[0] % len(DECODERS)], seed=data[0])


def _write_seeds(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    for i, (name, data) in enumerate(sorted(seed_images().items())):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(bytes([i]) + data)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write-seeds":
        _write_seeds(sys.argv[2])
        sys.exit(0)
    import atheris

    atheris.instrument_all()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
