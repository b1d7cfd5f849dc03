"""Stage 2: decoding and the train/eval presets, on real image bytes."""
from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps
from torchvision.transforms import v2

from conftest import encode, photo, solid, warnings_recorded_across_a_held_call
from imageloader.decode import Augment, Decoder, random_resized_crop_box
from imageloader.errors import Limits, SampleError

DATA = Path(__file__).resolve().parent / "data"


def run(decoder: Decoder, data: bytes, seed: int = 0) -> np.ndarray:
    out = np.full(decoder.out_shape, 7, dtype=np.uint8)  # poison: unwritten pixels show up
    decoder(data, out, seed)
    return out


def eval_decoder(size=224, **kw):
    return Decoder(Augment.make(size, train=False), **kw)


def train_decoder(size=32, **kw):
    return Decoder(Augment.make(size, train=True), **kw)


@pytest.mark.parametrize("src, mean_tol", [((500, 375), 0.5), ((64, 48), 0.5),
                                           ((300, 600), 0.5), ((1800, 1200), 2.5)])
def test_eval_preset_matches_torchvision_resize_center_crop(src, mean_tol):
    data = photo(3, src)
    ours = run(eval_decoder(), data).astype(int)
    img = Image.open(io.BytesIO(data)).convert("RGB")
    ref = np.asarray(v2.Compose([v2.Resize(256), v2.CenterCrop(224)])(img)).astype(int)
    # One box resize equals resize-then-crop; above ~900 px libjpeg's DCT downscale (draft)
    # changes pixels slightly, by design, for ~4x faster decoding.
    assert np.abs(ours - ref).mean() <= mean_tol


def test_a_lossless_jpeg_decodes_at_every_size_without_drafting():
    """A lossless JPEG (tests/data, libjpeg-turbo 3's, of huffman.jpg's pixels): libjpeg-turbo
    cannot decode one at a reduced scale (Pillow's draft: "broken data stream"), so a crop
    that would draft it was counted undecodable, a good image lost. Decoded whole, every
    size gives what the same pixels as a PNG give."""
    data = (DATA / "lossless.jpg").read_bytes()
    pixels = Image.open(DATA / "huffman.jpg").convert("RGB")
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(data)).convert("RGB")),
                          np.asarray(pixels))  # lossless: the very pixels
    png = encode(pixels, "PNG")
    for size in (224, 64, 16):  # 16 and 64 would draft a lossy JPEG by 8 and by 2
        for decoder in (eval_decoder(size), train_decoder(size)):
            for seed in range(3):
                assert np.array_equal(run(decoder, data, seed), run(decoder, png, seed))


def test_solid_images_keep_their_value_through_both_presets():
    for decoder in (eval_decoder(32), train_decoder(32)):
        for seed in range(5):
            out = run(decoder, solid(123, fmt="PNG"), seed)
            assert out.shape == (32, 32, 3) and (out == 123).all()


def test_train_crop_is_deterministic_per_seed_and_varies_across_seeds():
    data, decoder = photo(5, (120, 90)), train_decoder(48)
    first = [run(decoder, data, seed) for seed in range(6)]
    again = [run(decoder, data, seed) for seed in range(6)]
    assert all((a == b).all() for a, b in zip(first, again))
    assert len({a.tobytes() for a in first}) == 6


def test_random_resized_crop_box_stays_inside_and_respects_scale_and_ratio():
    rng = random.Random(0)
    for _ in range(2000):
        w, h = rng.randint(1, 900), rng.randint(1, 900)
        left, top, right, bottom = random_resized_crop_box((w, h), (0.08, 1.0), (3 / 4, 4 / 3), rng)
        assert 0 <= left < right <= w and 0 <= top < bottom <= h


def test_flip_happens_about_half_the_time_and_mirrors_pixels():
    gradient = np.tile(np.arange(0, 250, 5, dtype=np.uint8), (50, 1))  # left dark, right light
    data = encode(Image.fromarray(gradient).convert("RGB"), "PNG")
    decoder = Decoder(Augment.make(50, True, scale=(1.0, 1.0), ratio=(1.0, 1.0)))
    flips = 0
    for seed in range(200):
        row = run(decoder, data, seed)[25, :, 0].astype(int)
        assert abs(row[0] - row[-1]) > 200
        flips += row[0] > row[-1]
    assert 70 < flips < 130


def test_grayscale_mode_and_grayscale_source():
    gray = Decoder(Augment.make(16, False), mode="L")
    assert run(gray, solid(90, fmt="JPEG")).shape == (16, 16, 1)
    rgb = run(eval_decoder(16), solid(90, mode="L", fmt="PNG"))
    assert (rgb == 90).all()


def test_sixteen_bit_png_is_scaled_not_clipped():
    data = encode(Image.fromarray(np.full((20, 20), 40000, dtype=np.uint16)), "PNG")
    assert Image.open(io.BytesIO(data)).mode.startswith("I")
    assert (run(eval_decoder(8), data) == 40000 >> 8).all()


def test_palette_with_transparency_and_cmyk():
    pal = Image.new("P", (20, 20), 1)
    pal.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
    data = encode(pal, "PNG", transparency=0)
    assert (run(eval_decoder(8), data) == np.array([200, 100, 50], np.uint8)).all()
    cmyk = encode(Image.new("CMYK", (20, 20), (0, 255, 255, 0)), "JPEG")  # pure red in ink
    red = run(eval_decoder(8), cmyk).reshape(-1, 3).mean(axis=0)
    assert red[0] > 200 and red[1] < 60 and red[2] < 60


def test_exif_orientation_is_applied():
    img = Image.new("RGB", (60, 30), (0, 0, 255))
    img.paste((255, 0, 0), (0, 0, 30, 30))  # stored: left half red
    exif = Image.Exif()
    exif[0x0112] = 6  # display rotated 90 degrees clockwise: red on top
    data = encode(img, "JPEG", exif=exif.tobytes())
    out = Decoder(Augment.make((60, 30), False, crop_fraction=1.0))
    pixels = run(out, data)
    assert pixels.shape == (60, 30, 3)
    assert pixels[5, 15, 0] > 200 and pixels[55, 15, 2] > 200  # red top, blue bottom


def oriented(img: Image.Image, fmt: str, orientation: int) -> bytes:
    """`img` stored as `fmt` with an orientation tag: the TIFF tag for TIFF (as cameras and
    scanners write it), an EXIF block for the others."""
    if fmt.startswith("TIFF"):
        compression = {"TIFF": None, "TIFF_LZW": "tiff_lzw"}[fmt]  # raw, and through libtiff
        return encode(img, "TIFF", tiffinfo={0x0112: orientation}, compression=compression)
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(img, fmt, exif=exif.tobytes())


@pytest.mark.parametrize("fmt", ["TIFF", "TIFF_LZW", "JPEG", "PNG", "WEBP"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_orientation_gives_the_pixels_of_pillows_exif_transpose(fmt, orientation):
    """Train and eval presets on an oriented image = the same presets on the upright image
    that ImageOps.exif_transpose makes of it (stored as PNG, no tag). TIFFs 5-8 came out
    scrambled: Pillow orients TIFFs itself, and the box was drawn in a swapped frame."""
    rng = np.random.default_rng(orientation)
    texture = Image.fromarray(rng.integers(0, 256, (4, 6, 3), dtype=np.uint8))
    data = oriented(texture.resize((48, 32), Image.BICUBIC), fmt, orientation)
    upright = ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB")
    assert upright.size == ((32, 48) if orientation >= 5 else (48, 32))
    reference = encode(upright, "PNG")
    for decoder in (eval_decoder(24), train_decoder(24)):
        for seed in range(4):
            expected = run(decoder, reference, seed)
            assert np.array_equal(run(decoder, data, seed), expected), (fmt, orientation, seed)


@pytest.mark.parametrize("data, kwargs, reason", [
    (solid(1)[:200], {}, "truncated"),
    (b"definitely not an image" * 10, {}, "undecodable"),
    (solid(1, fmt="PNG"), {"formats": ("JPEG",)}, "format_not_allowed"),
    (solid(1, size=(40, 30)), {"limits": Limits(max_pixels=1000)}, "too_many_pixels"),
    (b"", {}, "empty"),
])
def test_bad_images_raise_sample_error_with_reason(data, kwargs, reason):
    decoder = eval_decoder(16, **kwargs)
    with pytest.raises(SampleError) as info:
        run(decoder, data)
    assert info.value.reason == reason


def test_custom_torchvision_transform_takes_and_returns_uint8():
    transform = v2.Compose([v2.RandomResizedCrop(24, antialias=True), v2.RandomHorizontalFlip()])
    decoder = Decoder(Augment.make(24, True), transform=transform)
    data = photo(2, (80, 60))
    first, again = run(decoder, data, seed=11), run(decoder, data, seed=11)
    assert first.shape == (24, 24, 3) and (first == again).all()
    assert not (run(decoder, data, seed=12) == first).all()


def test_a_broken_transform_is_an_error_not_a_skipped_image():
    decoder = Decoder(Augment.make(24, True), transform=lambda chw: chw.float())
    with pytest.raises(TypeError, match="uint8"):
        run(decoder, photo(2, (80, 60)))


def test_size_as_height_width():
    out = run(Decoder(Augment.make((20, 30), True)), photo(1, (90, 60)))
    assert out.shape == (20, 30, 3)
    with pytest.raises(ValueError):
        Augment.make((0, 3), True)
    with pytest.raises(ValueError):
        Decoder(Augment.make(8, True), mode="CMYK")


def test_decode_does_not_import_torch_in_workers():
    import subprocess
    import sys
    code = ("import sys, imageloader.decode, imageloader.batch, imageloader.workers; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert torch.__version__  # the test process itself has torch


def test_a_decode_in_another_thread_leaves_the_callers_warnings_alone(monkeypatch):
    """With a pixel limit above Pillow's, Pillow's bomb warning is ignored; a GPU lane
    decodes what nvJPEG refused with this decoder in its own thread, so the decode must not
    swap the process's warning state back when it ends (catch_warnings did): a warning the
    training thread recorded meanwhile is kept. The decode is held open by a stand-in."""
    limits = Limits(max_pixels=4 * Image.MAX_IMAGE_PIXELS)
    decoder = Decoder(Augment.make(8, False), limits=limits)

    def decode(stand_in):
        monkeypatch.setattr(decoder, "_decode_geometry", stand_in)
        return decoder._decode_image(solid(1), random.Random(0))

    recorded, _ = warnings_recorded_across_a_held_call(decode, (Image.new("RGB", (8, 8)), False))
    assert recorded == ["epoch 0: skipped 1 member"]
