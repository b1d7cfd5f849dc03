"""gpujpeg: the batched JPEG decoders of decode="cuda", and which of them is used.

nvImageCodec runs here on its CPU backend (libjpeg-turbo), so its handling (code streams,
kept images, order, failures) is tested without a GPU; tests/test_gpudecode.py runs it on CUDA.
"""
from __future__ import annotations

import io
import types

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import encode, photo, warnings_recorded_across_a_held_call
from imageloader.gpujpeg import (DECODERS, ENGINES, NvImageCodecJpeg, TorchvisionJpeg,
                                 available, lanes)

try:
    from nvidia import nvimgcodec  # noqa: F401
    HAS_NVIMGCODEC = True
except Exception:
    HAS_NVIMGCODEC = False
nvimgcodec_cpu = pytest.mark.skipif(not HAS_NVIMGCODEC, reason="nvidia-nvimgcodec not installed")
CPU = torch.device("cpu")


def as_array(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8)


def jpeg(seed: int, size, subsampling=2, mode="RGB") -> bytes:
    image = Image.open(io.BytesIO(photo(seed, size, fmt="PNG"))).convert(mode)
    return encode(image, "JPEG", subsampling=subsampling, quality=90)


def pillow_chw(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).transpose(2, 0, 1)


def nvimgcodec_on_cpu():
    (decoder,) = available(CPU, "RGB", "nvimgcodec")
    return decoder


@nvimgcodec_cpu
def test_nvimgcodec_decodes_every_layout_like_pillow():
    files = [jpeg(1, (64, 48), 2), jpeg(2, (48, 64), 1), jpeg(3, (33, 17), 0),
             jpeg(4, (40, 40), mode="L"), jpeg(5, (200, 120))]
    images = nvimgcodec_on_cpu().decode([as_array(d) for d in files])
    for data, image in zip(files, images):
        ours = np.asarray(image)
        assert ours.shape == pillow_chw(data).shape  # (3, H, W), gray as RGB too
        assert np.abs(ours.astype(int) - pillow_chw(data)).max() <= 1


@nvimgcodec_cpu
def test_nvimgcodec_refills_the_images_it_kept_largest_first():
    """Through its Python API (where nvbatch cannot be built, or IMAGELOADER_C_BATCH=0)."""
    decoder = NvImageCodecJpeg(CPU, "RGB", one_call=False)
    first = [jpeg(k, size) for k, size in enumerate([(40, 30), (120, 90), (64, 48)])]
    second = [jpeg(10 + k, size) for k, size in enumerate([(30, 40), (64, 48), (50, 50)])]
    out1 = decoder.decode([as_array(d) for d in first])
    kept = list(decoder.kept)
    assert [image.shape for image in kept] == [(3, 90, 120), (3, 48, 64), (3, 30, 40)]
    assert kept[0] is out1[1]  # the largest JPEG went first
    out2 = decoder.decode([as_array(d) for d in second])
    assert {id(image) for image in out2} == {id(image) for image in kept}  # no new buffers
    for data, image in zip(second, out2):  # refilled with this batch's pixels and shapes
        assert np.abs(np.asarray(image).astype(int) - pillow_chw(data)).max() <= 1


@nvimgcodec_cpu
def test_nvimgcodec_marks_what_it_cannot_decode_and_decodes_the_rest():
    good = jpeg(1, (64, 48))
    truncated = good[:len(good) // 3]
    images = nvimgcodec_on_cpu().decode([as_array(d) for d in
                                         (good, b"not a jpeg at all" * 4, truncated, good)])
    assert images[1] is None and images[2] is None
    for image in (images[0], images[3]):
        assert np.abs(np.asarray(image).astype(int) - pillow_chw(good)).max() <= 1


def test_unknown_or_missing_decoders_are_clear_errors(monkeypatch):
    with pytest.raises(ValueError, match="gpu_decoder must be"):
        available(CPU, "RGB", "nvjpeg")
    import builtins
    real_import = builtins.__import__

    def no_torchcodec(name, *args, **kwargs):
        if name.startswith("torchcodec"):
            raise ImportError("No module named 'torchcodec'")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_torchcodec)
    with pytest.raises(ImportError, match="torchcodec.*not usable"):
        available(CPU, "RGB", "torchcodec")
    assert "torchcodec" not in [d.name for d in available(CPU, "RGB")]


def test_auto_prefers_nvimgcodec_then_torchcodec_then_torchvision():
    names = [decoder.name for decoder in available(CPU, "RGB")]
    assert names == [name for name in DECODERS if name in names]
    assert DECODERS == ("nvimgcodec", "torchcodec", "torchvision")
    if HAS_NVIMGCODEC:
        assert names[0] == "nvimgcodec"


@nvimgcodec_cpu
def test_a_hardware_lane_decodes_what_the_engines_refused_with_every_backend(monkeypatch):
    """The engines refuse layouts they lack (None at that position); those images are decoded
    once more by a decoder with every backend, in one call, into the same positions."""
    decoder = NvImageCodecJpeg(CPU, "RGB", engine="hw", one_call=False)  # on the CPU:
    files = [jpeg(k, (40 + 8 * k, 30)) for k in range(4)]  # libjpeg-turbo inside
    first = decoder._decode

    def engines_refuse_the_odd_ones(streams, fresh=False):
        images = first(streams, fresh)
        return [None if stream.width in (48, 64) else image
                for stream, image in zip(streams, images)]
    monkeypatch.setattr(decoder, "_decode", engines_refuse_the_odd_ones)
    images = decoder.decode([as_array(d) for d in files])
    assert decoder._fallback is not None and decoder.refused == 2  # counted: GpuDecode says
    for data, image in zip(files, images):
        assert np.abs(np.asarray(image).astype(int) - pillow_chw(data)).max() <= 1
    assert decoder.decode([as_array(b"not a jpeg" * 8)]) == [None]  # nothing to retry
    assert decoder.refused == 2  # a header that does not parse was not the engines' refusal


@nvimgcodec_cpu
def test_lanes_are_one_off_the_gpu_and_their_settings_are_checked():
    preferred = nvimgcodec_on_cpu()
    assert lanes(preferred) == [preferred] and lanes(preferred, 1) == [preferred]
    with pytest.raises(ValueError, match="gpu_lanes must be >= 1"):
        lanes(preferred, 0)
    with pytest.raises(ValueError, match="engine must be one of"):
        NvImageCodecJpeg(CPU, "RGB", engine="nvjpg")
    assert ENGINES == ("all", "hw", "cuda", "hybrid")


def test_the_default_is_two_lanes_of_the_engines_where_the_gpu_has_them_else_one_decoder():
    """gpu_lanes=None: two lanes of the hardware engines, no CUDA helpers (measured to feed
    ResNet-18 on photos 7-11 points better than two split lanes,
    results/2026-11-27-h200-helpers); without engines nvImageCodec's own choice, one lane."""
    from imageloader.gpujpeg import _lane_kinds
    split = [("hw", None), ("cuda", 8)]
    assert _lane_kinds(None, engines=True) == [[("hw", None)], [("hw", None)]]
    assert _lane_kinds(None, engines=False) == [[("all", None)]]
    assert _lane_kinds("hw|cuda:8+hw|cuda:8", engines=True) == [split, split]  # of before


@pytest.mark.parametrize("engine", ["hw", "cuda", "hybrid", "all"])
def test_decoder_pools_reach_the_gpu_decoders_options_only_when_asked(monkeypatch, engine):
    """IMAGELOADER_DECODER_POOLS=1 (an experiment) adds DALI's preallocation and pinned padding
    to nvImageCodec's options on a GPU, beside the options it always has; unset, nothing."""
    from imageloader.gpujpeg import POOL_OPTIONS, POOLS, NvImageCodecJpeg
    on_gpu = types.SimpleNamespace(device=torch.device("cuda"))
    monkeypatch.delenv(POOLS, raising=False)
    _, _, options = NvImageCodecJpeg._setup(on_gpu, engine, None)
    assert "fancy_upsampling=0" in options and "preallocate" not in options
    monkeypatch.setenv(POOLS, "1")
    _, _, pooled = NvImageCodecJpeg._setup(on_gpu, engine, None)
    assert pooled.replace(" " + POOL_OPTIONS, "") == options  # added, nothing else changed
    assert "host_memory_padding=8388608" in pooled and "preallocate_batch_size=256" in pooled
    _, _, on_cpu = NvImageCodecJpeg._setup(types.SimpleNamespace(device=CPU), engine, None)
    assert "preallocate" not in on_cpu  # the CPU backend has no such buffers


def test_first_makes_only_the_best_decoder_that_loads(monkeypatch):
    """The loader asks for one decoder: the others are not made (each holds GPU resources)."""
    import imageloader.gpujpeg as gpujpeg
    made = []
    for name, cls in [("nvimgcodec", "NvImageCodecJpeg"), ("torchcodec", "TorchCodecJpeg"),
                      ("torchvision", "TorchvisionJpeg")]:
        def make(device, mode, _name=name):
            made.append(_name)
            if _name == "nvimgcodec":
                raise ImportError("not installed here")
            return types.SimpleNamespace(name=_name)
        monkeypatch.setattr(gpujpeg, cls, make)
    assert [d.name for d in available(CPU, "RGB", first=True)] == ["torchcodec"]
    assert made == ["nvimgcodec", "torchcodec"]
    assert [d.name for d in available(CPU, "RGB")] == ["torchcodec", "torchvision"]


def test_torchvision_decoding_in_a_lane_thread_leaves_the_training_threads_warnings_alone():
    """A lane's call outlives the training thread's warning capture begun meanwhile (an
    epoch's skip warning under pytest.warns, or a user's catch_warnings): the lane must not
    swap the process's warning state back when its call ends, so that warning is kept. The
    call is held open by a stand-in for torchvision's decoder; it ran on an H200 when the
    decoder hid its deprecation warning with catch_warnings, and the epoch's warning was lost."""
    decoder = TorchvisionJpeg(torch.device("cpu"), "RGB")

    def decode(stand_in):
        decoder._decode = stand_in
        return decoder.decode([np.zeros(4, np.uint8)])

    recorded, images = warnings_recorded_across_a_held_call(decode, [None])
    assert recorded == ["epoch 0: skipped 1 member"] and images == [None]
