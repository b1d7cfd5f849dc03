"""nvbatch: nvImageCodec's decode of a whole batch in one C call, built at first use.

Here on nvImageCodec's CPU backend (libjpeg-turbo), against its Python API on the same JPEGs;
tests/test_gpudecode.py runs both ways on CUDA, through the whole GPU stage and with a busy GPU.
"""
from __future__ import annotations

import ctypes
import io
import logging
import shutil
import threading

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import photo
from imageloader import nvbatch
from imageloader.decode import Augment
from imageloader.gpucrop import image_geometry
from imageloader.gpudecode import GpuDecode, Packed
from imageloader.gpujpeg import NvImageCodecJpeg
from test_gpudecode import packed_batch
from test_gpujpeg import as_array, jpeg, pillow_chw
from test_scripts import load_script

pytest.importorskip("nvidia.nvimgcodec", reason="nvidia-nvimgcodec not installed")
pytestmark = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")),
                                reason="needs a C compiler")
CPU = torch.device("cpu")


@pytest.fixture
def fresh_build(tmp_path, monkeypatch):
    """nvbatch built anew into an empty cache folder (and forgotten again afterwards)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    nvbatch.library.cache_clear()
    yield tmp_path / "imageloader"
    nvbatch.library.cache_clear()


def layouts() -> list[bytes]:
    """Every chroma subsampling, grey, odd sizes, one large."""
    return [jpeg(1, (64, 48), 2), jpeg(2, (48, 64), 1), jpeg(3, (33, 17), 0),
            jpeg(4, (40, 40), mode="L"), jpeg(5, (640, 360)), jpeg(6, (11, 9))]


def pixels(image) -> np.ndarray:
    return np.array(image)


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_one_call_gives_the_python_apis_pixels_for_every_layout(mode):
    files = [as_array(d) for d in layouts()]
    one_call = NvImageCodecJpeg(CPU, mode, one_call=True)
    python = NvImageCodecJpeg(CPU, mode, one_call=False)
    assert one_call.batch is not None and python.batch is None
    for _ in range(2):  # the second batch into the buffer the first one grew
        ours, theirs = one_call.decode(files), python.decode(files)
        for data, a, b in zip(layouts(), ours, theirs):
            assert isinstance(a, nvbatch.Decoded)
            assert a.shape == (3 if mode == "RGB" else 1, *pillow_chw(data).shape[1:])
            assert np.array_equal(pixels(a), pixels(b))
            if mode == "RGB":
                assert np.abs(pixels(a).astype(int) - pillow_chw(data)).max() <= 1


def test_geometry_is_the_address_and_strides_of_each_planar_image():
    files = [jpeg(1, (64, 48)), jpeg(2, (30, 20))]
    first, second = NvImageCodecJpeg(CPU, "RGB", one_call=True).decode(
        [as_array(d) for d in files])
    address, height, width, channel, row, column = image_geometry(first)
    assert (height, width, channel, row, column) == (48, 64, 48 * 64, 64, 1)
    assert image_geometry(second)[0] == address + 3 * 48 * 64  # packed one after the other
    assert first.__array_interface__["data"][0] == address
    with pytest.raises(AttributeError, match="host image"):
        first.__cuda_array_interface__


def test_what_cannot_be_decoded_is_none_and_the_rest_is_decoded():
    good = jpeg(1, (64, 48))
    files = [good, b"not a jpeg at all" * 4, good[:len(good) // 3], good, b""]
    images = NvImageCodecJpeg(CPU, "RGB", one_call=True).decode([as_array(d) for d in files])
    assert [image is None for image in images] == [False, True, True, False, True]
    for image in (images[0], images[3]):
        assert np.abs(pixels(image).astype(int) - pillow_chw(good)).max() <= 1


def test_a_batch_larger_than_any_before_gets_more_handles_and_one_buffer():
    decoder = NvImageCodecJpeg(CPU, "RGB", one_call=True)
    lib, device = decoder.batch.lib, decoder.batch.device
    decoder.batch.close()
    decoder.batch = nvbatch.BatchDecoder(lib, device, "cpu", None, "", 3, capacity=4)
    for count in (3, 10, 4):
        files = [jpeg(count + k, (16 + 4 * k, 12)) for k in range(count)]
        images = decoder.decode([as_array(d) for d in files])
        for data, image in zip(files, images):
            assert np.abs(pixels(image).astype(int) - pillow_chw(data)).max() <= 1
    assert decoder.batch.capacity == 10
    empty = decoder.decode_at(np.zeros(0, np.uint64), np.zeros(0, np.int64))
    assert empty.geometry.shape == (0, 6) and empty.images() == [] and decoder.decode([]) == []


def test_views_of_an_earlier_batch_survive_the_buffer_growing():
    """A larger batch replaces the buffer; what still views the old one keeps it alive."""
    decoder = NvImageCodecJpeg(CPU, "RGB", one_call=True)
    small = jpeg(1, (32, 24))
    kept_view = np.asarray(decoder.decode([as_array(small)])[0])
    old_buffer = decoder.batch.buffer
    big = [jpeg(k, (400, 300)) for k in range(3)]
    decoder.decode([as_array(d) for d in big])
    assert decoder.batch.buffer is not old_buffer
    assert np.abs(kept_view.astype(int) - pillow_chw(small)).max() <= 1


class ReusingFreedMemory:
    """The library, called as in a busy process: just before each call into C, arrays of the
    call's sizes are made and filled with -1, so memory that was freed before the call (an
    address taken from a temporary array) holds -1 when C reads it."""

    def __init__(self, lib):
        self.lib = lib

    def __getattr__(self, name):
        return getattr(self.lib, name)

    def bd_parse(self, handle, *args):
        return self._call(self.lib.bd_parse, args[2], handle, *args)

    def bd_decode(self, handle, *args):
        return self._call(self.lib.bd_decode, args[0], handle, *args)

    @staticmethod
    def _call(function, n, *args):
        garbage = [np.full(n * width * itemsize, 0xFF, np.uint8) for _ in range(4)
                   for width in (1, 2, 4) for itemsize in (4, 8)]
        result = function(*args)
        del garbage
        return result


@pytest.mark.parametrize("regions", [False, True])
def test_every_array_handed_to_c_lives_through_the_call(regions):
    """5291009 passed the decode's sizes as the address of a temporary array: freed before C
    read it, and on an H200 the decoder wrote past its buffer (photos, every run)."""
    files = [jpeg(k, (64 + 16 * k, 48)) for k in range(5)]
    decoder = NvImageCodecJpeg(CPU, "RGB", one_call=True, regions_from=1 if regions else None)
    decoder.batch.lib = ReusingFreedMemory(decoder.batch.lib)
    boxes = np.array([[4, 2, 40, 30]] * len(files), np.float32)
    for _ in range(2):
        images = decoder.decode([as_array(d) for d in files], boxes=boxes)
        for data, image in zip(files, images):
            expected = pillow_chw(data)
            if regions:
                top, left = image.origin
                expected = expected[:, top:top + image.shape[1], left:left + image.shape[2]]
            assert image.shape == expected.shape
            assert np.abs(pixels(image).astype(int) - expected).max() <= 1


class Lying(ReusingFreedMemory):
    """The library, handed one wrong output size: the first image one row taller than its JPEG
    ("size"), or its region reaching one row past the image ("region")."""

    def __init__(self, lib, wrong: str):
        super().__init__(lib)
        self.wrong = wrong

    def bd_decode(self, handle, n, channels, sizes, regions, *rest):
        sizes, regions = sizes.copy(), regions.copy()
        height, width = sizes[0]
        if self.wrong == "region":
            regions[0] = (0, 0, height + 1, width)
        sizes[0] = (height + 1, width)
        return self.lib.bd_decode(handle, n, channels, sizes, regions, *rest)


@pytest.mark.parametrize("wrong", ["size", "region"])
def test_sizes_that_do_not_fit_the_jpegs_are_refused_before_anything_is_written(wrong):
    """A wrong size would make the decoder write past its buffer (what freed memory did): C
    checks every size and region against the parsed JPEGs and decodes nothing."""
    files = [as_array(jpeg(k, (64, 48))) for k in range(3)]
    decoder = NvImageCodecJpeg(CPU, "RGB", one_call=True)
    decoder.decode(files)  # the buffer grown
    decoder.batch.buffer.fill_(7)
    decoder.batch.lib = Lying(decoder.batch.lib, wrong)
    with pytest.raises(ValueError, match="do not fit the JPEGs"):
        decoder.decode(files)
    assert bool((decoder.batch.buffer == 7).all())


def test_the_engines_refusals_are_decoded_again_with_every_backend(monkeypatch):
    """One C call on the engines ("hw") marks what they refuse None; the lane decodes those
    once more through the Python API with every backend, into the same positions."""
    decoder = NvImageCodecJpeg(CPU, "RGB", engine="hw", one_call=True)
    files = [jpeg(k, (40 + 8 * k, 30)) for k in range(4)]
    first = decoder.batch.decode

    def engines_refuse_the_odd_ones(datas, fresh=False, boxes=None):
        return [None if k % 2 else image for k, image in enumerate(first(datas, fresh, boxes))]
    monkeypatch.setattr(decoder.batch, "decode", engines_refuse_the_odd_ones)
    images = decoder.decode([as_array(d) for d in files])
    assert decoder._fallback is not None
    for data, image in zip(files, images):
        assert np.abs(pixels(image).astype(int) - pillow_chw(data)).max() <= 1
    assert decoder.decode([as_array(b"not a jpeg" * 8)]) == [None]
    assert decoder.decode([as_array(d) for d in files], retry=False)[1] is None


def test_it_is_built_once_into_the_cache_and_loaded_from_there(fresh_build):
    assert nvbatch.library() is not None
    built = list(fresh_build.glob("nvbatch-*.so"))
    assert len(built) == 1 and not list(fresh_build.glob("tmp*"))  # no leftovers
    stamp = built[0].stat().st_mtime_ns
    nvbatch.library.cache_clear()
    assert nvbatch.library() is not None
    assert built[0].stat().st_mtime_ns == stamp  # loaded, not built again


def test_a_cache_folder_that_cannot_be_written_builds_in_the_temporary_folder(
        tmp_path, monkeypatch):
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    monkeypatch.setattr(nvbatch.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    built = nvbatch._built()
    assert built.parent == tmp_path / "tmp" / f"imageloader-{__import__('os').getuid()}"
    assert nvbatch._declare(__import__("ctypes").CDLL(str(built))) is not None


def test_builders_racing_each_other_all_get_a_working_library(fresh_build):
    paths, errors = [], []

    def build():
        try:
            paths.append(nvbatch._built())
        except Exception as error:  # pragma: no cover - the failure this test looks for
            errors.append(error)
    threads = [threading.Thread(target=build) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(paths)) == 1
    assert len(list(fresh_build.glob("nvbatch-*.so"))) == 1


def test_without_a_compiler_the_python_api_decodes_and_the_log_says_why(
        fresh_build, monkeypatch, caplog):
    monkeypatch.setenv("CC", "no-such-compiler-here")
    monkeypatch.setattr(nvbatch.subprocess, "run", _no_compiler)
    with caplog.at_level(logging.WARNING, logger="imageloader.nvbatch"):
        decoder = NvImageCodecJpeg(CPU, "RGB")
    assert decoder.batch is None and decoder.decoder is not None
    assert "one-call batch decode is unavailable" in caplog.text
    assert "no-such-compiler-here" in caplog.text
    image = decoder.decode([as_array(jpeg(1, (20, 10)))])[0]
    assert pixels(image).shape == (3, 10, 20)
    with pytest.raises(RuntimeError, match="unavailable here"):
        NvImageCodecJpeg(CPU, "RGB", one_call=True)


def _no_compiler(command, **kwargs):
    raise FileNotFoundError(2, "No such file or directory", command[0])


def test_the_environment_switch_keeps_the_python_api(monkeypatch):
    monkeypatch.setenv(nvbatch.SWITCH, "0")
    assert NvImageCodecJpeg(CPU, "RGB").batch is None
    monkeypatch.delenv(nvbatch.SWITCH)
    assert NvImageCodecJpeg(CPU, "RGB").batch is not None


def photos_and_their_batch(sizes, train: bool, decoder=None):
    """A packed batch of photos of `sizes` (the packers' crops for `train`), and the images
    GpuDecode makes of it with `decoder` (one C call by default) where nothing fails."""
    buf, cpu = packed_batch([photo(seed, size) for seed, size in enumerate(sizes)],
                            Augment.make(64, train))
    decoder = decoder or NvImageCodecJpeg(CPU, "RGB", one_call=True)
    return buf, cpu, GpuDecode(cpu, None, CPU, [decoder])(Packed(buf))[0].clone()


@pytest.mark.parametrize("one_call", [True, False])
@pytest.mark.parametrize("train", [True, False])
def test_a_jpeg_retried_alone_leaves_the_batchs_other_images_alone(one_call, train):
    """GpuDecode decodes a JPEG that came back None from the batch call once more, alone,
    before the batch's crops run: into new memory, not over the kept buffer (or images) that
    still hold the batch's other images. Both ways, cropped (train) and resized (eval)."""
    sizes = [(300, 200), (120, 90), (160, 100), (90, 160)]  # the retried one fits in slot 0
    decoder = NvImageCodecJpeg(CPU, "RGB", one_call=one_call)
    buf, cpu, expected = photos_and_their_batch(sizes, train, decoder)
    real, real_at, batches = decoder.decode, decoder.decode_at, []

    def third_fails_in_the_batch(datas, fresh=False, **kwargs):
        out = real(datas, fresh=fresh, **kwargs)
        return [None if len(datas) > 1 and k == 2 else image for k, image in enumerate(out)]

    def third_fails_in_one_call(starts, lengths, **kwargs):  # GpuDecode's way with one_call
        batch = real_at(starts, lengths, **kwargs)
        if batch is not None:
            batch.done[2] = False
            batches.append(batch)
        return batch
    decoder.decode, decoder.decode_at = third_fails_in_the_batch, third_fails_in_one_call
    stage = GpuDecode(cpu, None, CPU, [decoder])
    images = stage(Packed(buf))[0]
    assert torch.equal(images, expected)
    assert stage.take_counts()["fallback:gpu_decoded"] == len(sizes)
    assert len(batches) == one_call  # the batch went through the one call where there is one


def region_decoder(monkeypatch, pixels: int) -> NvImageCodecJpeg:
    """Regions as IMAGELOADER_REGIONS_FROM turns them on (the constructor's own argument is
    what the CUDA tests and bench_batch_call use)."""
    monkeypatch.setenv(nvbatch.REGIONS_FROM, str(pixels))
    decoder = NvImageCodecJpeg(CPU, "RGB", one_call=True)
    monkeypatch.delenv(nvbatch.REGIONS_FROM)
    assert NvImageCodecJpeg(CPU, "RGB", one_call=True, regions_from=pixels).regions_from \
        == decoder.regions_from == pixels
    return decoder


def test_a_large_images_crop_is_decoded_as_its_region_with_the_same_pixels(monkeypatch):
    """Images of at least IMAGELOADER_REGIONS_FROM pixels: only the crop box (and a margin) is
    decoded, at the box's origin; pixels as the whole image's there. Smaller images whole."""
    files = [photo(1, (400, 300)), photo(2, (64, 48))]
    boxes = np.array([[101.5, 40.2, 250.0, 199.7], [3.0, 4.0, 40.0, 30.0]], np.float32)
    whole = NvImageCodecJpeg(CPU, "RGB", one_call=True).decode([as_array(d) for d in files])
    region = region_decoder(monkeypatch, 100 * 100)
    assert region.regions_from == 10_000
    large, small = region.decode([as_array(d) for d in files], boxes=boxes)
    assert large.origin == (38, 99) and large.shape == (3, 202 - 38, 252 - 99)
    expected = pixels(whole[0])[:, 38:202, 99:252]
    assert np.abs(pixels(large).astype(int) - expected).max() <= 1
    assert small.origin == (0, 0) and np.array_equal(pixels(small), pixels(whole[1]))
    # a box reaching the image's edges: the region is clipped to it, or is the whole image
    edge = region.decode([as_array(files[0])], boxes=np.array([[0, 0, 399.5, 299.0]]))[0]
    assert edge.origin == (0, 0) and edge.shape == (3, 300, 400)


@pytest.mark.parametrize("split", [False, True])
def test_training_crops_from_regions_equal_those_from_whole_images(monkeypatch, split):
    """The GPU stage with regions on gives the crops it gives without them (its boxes moved
    to each region's origin), one decoder or a split lane; evaluation decodes whole images."""
    from imageloader.gpujpeg import SplitJpeg
    sizes = [(400, 300), (120, 90), (300, 400), (90, 160), (640, 480)]
    for train in (True, False):
        buf, cpu, expected = photos_and_their_batch(sizes, train)
        decoder = region_decoder(monkeypatch, 200 * 200)
        if split:
            decoder = SplitJpeg(decoder, region_decoder(monkeypatch, 200 * 200), share=0.4)
        seen = []
        real, real_at = decoder.decode, getattr(decoder, "decode_at", None)

        def spy(datas, fresh=False, **kwargs):
            out = real(datas, fresh, **kwargs)
            seen.extend(getattr(image, "origin", (0, 0)) for image in out)
            return out

        def spy_at(starts, lengths, **kwargs):  # GpuDecode's way with one decoder
            batch = real_at(starts, lengths, **kwargs)
            seen.extend(map(tuple, batch.origins.tolist()))
            return batch
        decoder.decode = spy
        if real_at is not None:
            decoder.decode_at = spy_at
        images = GpuDecode(cpu, None, CPU, [decoder])(Packed(buf))[0]
        assert (images.int() - expected.int()).abs().max() <= 1
        if not split:  # (a split lane's helper decodes through its own decode)
            assert any(origin != (0, 0) for origin in seen) == train


def host_image(row: list[int], channels: int) -> torch.Tensor:
    """A copy of the planar uint8 image that a geometry row (image_geometry's) points at in host
    memory: what gpucrop's kernel reads on the GPU."""
    address, height, width, *strides = row
    extent = sum((n - 1) * stride for n, stride in zip((channels, height, width), strides)) + 1
    memory = np.ctypeslib.as_array((ctypes.c_uint8 * extent).from_address(address))
    view = np.lib.stride_tricks.as_strided(memory, (channels, height, width), strides)
    return torch.from_numpy(view.copy())


def crops_by_address(cpu, calls: list):
    """gpucrop.crop_resize_flip for the CPU, as the kernel takes its images (a list, or their
    geometry rows): each read back from its address, then roi_align's crops (GpuDecode's
    other way), which the kernel matches on the GPU (test_gpudecode)."""
    def crop(images, boxes, slots, out):
        calls.append(images)
        rows = images if isinstance(images, np.ndarray) else [image_geometry(i) for i in images]
        reference = GpuDecode(cpu, None, CPU, [NvImageCodecJpeg(CPU, "RGB")], crop="roi_align")
        every = np.zeros((len(out), 5), np.float32)
        every[slots] = boxes
        reference.train_crops([(slot, host_image(row, out.shape[3]))
                               for slot, row in zip(slots, np.asarray(rows).tolist())],
                              every, out)
    return crop


@pytest.mark.parametrize("regions", [None, 200 * 200])
def test_a_training_batch_is_cropped_from_the_one_calls_table(monkeypatch, regions):
    """With gpucrop's kernel (a GPU host), a training batch that one call decoded whole is
    cropped from the call's geometry table (no object per image): the same crops as image by
    image, regions' boxes moved to their origins. A JPEG the call did not decode sends the
    batch image by image (that JPEG alone once more), with the same pixels."""
    from imageloader import gpucrop
    sizes = [(400, 300), (120, 90), (300, 400), (90, 160), (640, 480)]
    buf, cpu, expected = photos_and_their_batch(sizes, True)
    calls = []
    monkeypatch.setattr(gpucrop, "crop_resize_flip", crops_by_address(cpu, calls))
    for fail in (False, True):
        decoder = region_decoder(monkeypatch, regions) if regions \
            else NvImageCodecJpeg(CPU, "RGB", one_call=True)
        if fail:
            real_at = decoder.decode_at
            decoder.decode_at = lambda *args, **kwargs: _not_done(real_at(*args, **kwargs), 3)
        stage = GpuDecode(cpu, None, CPU, [decoder])
        stage.crop = "triton"  # as "auto" on a GPU host
        calls.clear()
        images = stage(Packed(buf))[0]
        assert (images.int() - expected.int()).abs().max() <= (1 if regions else 0)
        assert len(calls) == 1 and isinstance(calls[0], np.ndarray) != fail
        assert stage.take_counts()["fallback:gpu_decoded"] == len(sizes)


def test_jpegs_the_one_call_left_undecoded_are_decoded_again_together():
    """Several JPEGs of a batch that the one call did not decode (the engines refusing a
    layout, say) are decoded once more in one call of their own, into new memory, before any
    goes alone (where the engines' refusals go to the other backends at once): the pixels of a
    batch where nothing failed, every JPEG counted as decoded on the GPU."""
    sizes = [(300, 200), (120, 90), (160, 100), (90, 160), (200, 150)]
    decoder = NvImageCodecJpeg(CPU, "RGB", one_call=True)
    buf, cpu, expected = photos_and_their_batch(sizes, True, decoder)
    real_at, real, calls = decoder.decode_at, decoder.decode, []

    def counted(datas, fresh=False, **kwargs):
        calls.append((len(datas), fresh))
        return real(datas, fresh, **kwargs)
    decoder.decode_at = lambda *args, **kwargs: _not_done(_not_done(real_at(*args, **kwargs), 1), 3)
    decoder.decode = counted
    stage = GpuDecode(cpu, None, CPU, [decoder])
    images = stage(Packed(buf))[0]
    assert torch.equal(images, expected)
    assert calls == [(2, True)]  # together, fresh; none alone after
    assert stage.take_counts()["fallback:gpu_decoded"] == len(sizes)


def _not_done(batch, row: int):
    batch.done[row] = False
    return batch


def test_a_bad_regions_setting_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(nvbatch.REGIONS_FROM, "lots")
    with pytest.raises(ValueError, match="IMAGELOADER_REGIONS_FROM must be a number"):
        nvbatch.regions_from()
    monkeypatch.setenv(nvbatch.REGIONS_FROM, "")
    assert nvbatch.regions_from() is None


def pillow_ycbcr(data: bytes) -> np.ndarray:
    """The JPEG's own YCbCr as libjpeg decodes it (no conversion to RGB), H x W x 3."""
    image = Image.open(io.BytesIO(data))
    image.draft("YCbCr", image.size)
    return np.asarray(image)


@pytest.fixture
def probe_yuv(monkeypatch):
    return load_script("probe_yuv", monkeypatch)


def test_ycbcr_planes_are_the_coded_ones_and_only_jpegs_coded_so_give_them(probe_yuv):
    """decode_yuv (the experiment of scripts/bench/probe_yuv.py) on the CPU backend, which
    gives YCbCr only unsubsampled: a 4:4:4 JPEG's planes are libjpeg's and the probe's
    conversion of them is the RGB decode; a 4:2:0 one is refused here (the GPU engines take it:
    the CUDA test below); grey and broken JPEGs are None; and the RGB decode into the same kept
    buffer is unchanged after it."""
    full, halved = jpeg(1, (33, 17), 0), jpeg(2, (64, 48), 2)
    files = [full, halved, jpeg(3, (40, 40), mode="L"), b"not a jpeg at all" * 4]
    decoder = NvImageCodecJpeg(CPU, "RGB", one_call=True)
    planes = decoder.batch.decode_yuv([as_array(d) for d in files])
    assert [p is None for p in planes] == [False, True, True, True]
    luma, cb, cr = planes[0]
    assert luma.shape == cb.shape == cr.shape == (17, 33)
    reference = pillow_ycbcr(full).astype(int)
    for k, plane in enumerate((luma, cb, cr)):
        assert np.abs(plane.numpy().astype(int) - reference[..., k]).max() <= 1
    converted = probe_yuv.replicated_rgb((luma, cb, cr)).numpy().astype(int)
    assert np.abs(converted - pillow_chw(full)).max() <= 1
    rgb = decoder.decode([as_array(d) for d in files[:2]])
    for data, image in zip(files, rgb):
        assert np.abs(pixels(image).astype(int) - pillow_chw(data)).max() <= 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("engine", ["hw", "cuda"])
def test_ycbcr_planes_on_the_gpu_convert_to_its_rgb_decode(engine, probe_yuv):
    """Every subsampling the engines take, odd sizes: Y is libjpeg's Y, and the planes turned
    into RGB with replicated chroma are the GPU's own RGB decode of the same JPEG, within the
    conversion's rounding."""
    device = torch.device("cuda")
    files = [jpeg(1, (64, 48), 2), jpeg(2, (48, 64), 1), jpeg(3, (33, 17), 0),
             jpeg(5, (640, 360)), jpeg(6, (11, 9))]
    decoder = NvImageCodecJpeg(device, "RGB", engine=engine, one_call=True)
    planes = decoder.batch.decode_yuv([as_array(d) for d in files])
    yuv = [tuple(p.clone() for p in planes_of) if planes_of else None for planes_of in planes]
    rgb = [torch.as_tensor(image, device=device) if image is not None else None
           for image in decoder.decode([as_array(d) for d in files])]
    decoded = [(data, p, r) for data, p, r in zip(files, yuv, rgb) if p is not None]
    assert yuv[3] is not None and yuv[3][1].shape == (180, 320), \
        f"{engine}: a 4:2:0 JPEG not decoded to its planes"
    for data, (luma, cb, cr), ours in decoded:
        luma_error = np.abs(luma.cpu().numpy().astype(int)
                            - pillow_ycbcr(data)[..., 0].astype(int))  # two IDCTs apart
        assert luma_error.max() <= 3 and luma_error.mean() <= 0.5
        assert (probe_yuv.replicated_rgb((luma, cb, cr)).int() - ours.int()).abs().max() <= 2
