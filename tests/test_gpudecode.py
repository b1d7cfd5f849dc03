"""decode="cuda": packing on the CPU side, the GPU stage's geometry, and (on a GPU host) nvJPEG."""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from conftest import (Clock, assert_labels_match_pixels, bogus_huffman_jpeg, camera_jpeg,
                      camera_kinds_here, class_level, encode, labeled_files, noisy_jpeg, photo,
                      solid, with_exif_thumbnail, write_archive)
from imageloader import ImageLoader, Options, gpucrop
from imageloader.batch import FALLBACK, batch_layout, views_of
from imageloader.decode import (GPU_PROGRESSIVE, Augment, Decoder, JpegPacker,
                                ProgressiveRoute, _frame_coding, gpu_screen, gray_sampling_at,
                                progressive_route)
from imageloader.errors import Limits
from imageloader.gpudecode import GpuDecode, Packed, choose_crop
from imageloader.loader import (ARENA_HEADROOM, ARENA_MAX_PER_IMAGE, ARENA_PER_IMAGE,
                                arena_per_image, arena_room_per_slot, gpu_packers)
from imageloader.prefetch import Backlog
from imageloader.gpujpeg import (DECODERS, ENGINES, NvImageCodecJpeg, SplitJpeg, available,
                                 decoder_turns_upright, has_jpeg_engines)
from imageloader.pool import BufferPool, check_shared_memory

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
HERE = Path(__file__).resolve().parent
DATA = HERE / "data"


def has_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def cmyk_jpeg(level):
    return encode(Image.new("CMYK", (40, 30), (0, 0, 0, 255 - level)), "JPEG")


def progressive_jpeg(level):
    return encode(Image.new("RGB", (40, 30), (level,) * 3), "JPEG", progressive=True)


def exif_oriented(image: Image.Image, orientation: int, **options) -> bytes:
    """`image` stored as a JPEG tagged with this EXIF orientation (the pixels as they are)."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(image, "JPEG", exif=exif.tobytes(), **options)


def rotated_jpeg(level):
    return exif_oriented(Image.new("RGB", (40, 30), (level,) * 3), 6)


def test_screening_sends_only_baseline_jpegs_to_the_gpu():
    limits = Limits()
    assert gpu_screen(solid(50), "RGB", limits)[0] is None
    # grey: to the GPU in either mode; sampling factors other than 1x1 are to be set to 1x1
    grey, grey_2x2 = solid(50, mode="L"), encode(Image.new("L", (43, 30), 50), "JPEG",
                                                  subsampling=2)
    for mode in ("RGB", "L"):
        screen = gpu_screen(grey, mode, limits)
        assert screen.refused is None and screen.gray_sampling_at is None
        screen = gpu_screen(grey_2x2, mode, limits)
        at = screen.gray_sampling_at
        assert screen.refused is None and grey_2x2[at - 1:at + 2] == b"\x01\x22\x00"
    assert gpu_screen(solid(50, fmt="PNG"), "RGB", limits)[0] == "not_jpeg"
    assert gpu_screen(cmyk_jpeg(50), "RGB", limits)[0] == "color_cmyk"
    assert gpu_screen(progressive_jpeg(50), "RGB", limits)[0] == "progressive"
    # IMAGELOADER_GPU_PROGRESSIVE's bound: those of fewer pixels than it pass (40x30)
    assert gpu_screen(progressive_jpeg(50), "RGB", limits, 1 << 62)[0] is None
    assert gpu_screen(progressive_jpeg(50), "RGB", limits, 1201)[0] is None
    assert gpu_screen(progressive_jpeg(50), "RGB", limits, 1200)[0] == "progressive"
    rotated = gpu_screen(rotated_jpeg(50), "RGB", limits)  # to the GPU, read upright there
    assert rotated.refused is None and rotated.orientation == 6
    assert rotated.size == (40, 30) and rotated.upright_size == (30, 40)
    assert gpu_screen(solid(50), "RGB", Limits(max_pixels=10))[0] == "size"


def with_frame_marker(jpeg: bytes, marker: int) -> bytes:
    """`jpeg` with its start-of-frame marker (SOF0, baseline) replaced: the headers of
    another coding, the scan left as it is (what a screen reads is only the headers)."""
    at = jpeg.index(b"\xff\xc0")
    return jpeg[:at + 1] + bytes([marker]) + jpeg[at + 2:]


def test_screening_leaves_arithmetic_and_lossless_jpegs_to_the_cpu():
    """The JPEG engines take Huffman-coded DCT frames only; Pillow's libjpeg decodes the
    others, so the packers get them: a real arithmetic-coded photo and a real lossless one
    (libjpeg-turbo's, tests/data), and the start-of-frame marker of each such coding. An EXIF thumbnail's frame
    (inside APP1) is not the image's. A baseline one whose components come in scans of their
    own goes to the GPU (every GPU decoder got it right: probe_codings.py, H100)."""
    limits = Limits()
    assert gpu_screen(DATA.joinpath("arithmetic.jpg").read_bytes(), "RGB", limits)[0] \
        == "arithmetic"
    assert gpu_screen(DATA.joinpath("huffman.jpg").read_bytes(), "RGB", limits)[0] is None
    # the same photo, baseline still, its components in three scans (jpegtran -scans)
    assert gpu_screen(DATA.joinpath("scans.jpg").read_bytes(), "RGB", limits)[0] is None
    lossless = DATA.joinpath("lossless.jpg").read_bytes()  # its components RGB, as is usual
    # for lossless JPEGs (no colour transform): refused for that first
    assert gpu_screen(lossless, "RGB", limits)[0] == "color_rgb"
    assert _frame_coding(lossless) == "lossless"
    for marker, coding in ((0xC1, None), (0xC3, "lossless"), (0xC9, "arithmetic"),
                           (0xCB, "lossless"), (0xCD, "arithmetic")):
        assert gpu_screen(with_frame_marker(solid(50), marker), "RGB", limits)[0] == coding
    arithmetic = with_frame_marker(solid(50), 0xC9)
    at = arithmetic.index(b"\xff\xc9")  # a marker with no length before the frame's (Pillow
    # refuses the file, so only the walk itself is asked)
    assert _frame_coding(arithmetic[:at] + b"\xff\x01" + arithmetic[at:]) == "arithmetic"
    thumbnail = with_frame_marker(solid(90, size=(8, 8)), 0xC9)
    assert gpu_screen(with_exif_thumbnail(solid(50), thumbnail), "RGB", limits)[0] is None


def test_screening_leaves_jpegs_cut_short_to_the_cpu():
    """A JPEG with no end-of-image marker after its scan was cut short: the GPU decoders
    would fill what is missing with gray or stale rows, Pillow calls it truncated, so the
    packers take it. What may follow a whole JPEG (a trailer, padding, a second frame) and a
    cut one's EXIF thumbnail (whose end marker is before the scan) do not fool the check."""
    limits = Limits()
    whole = noisy_jpeg(class_level(1), 7, (64, 80))
    assert gpu_screen(whole, "RGB", limits)[0] is None
    for cut in (whole[:-2], whole[: len(whole) * 9 // 10], whole[: len(whole) // 2]):
        assert gpu_screen(cut, "RGB", limits)[0] == "no_end_marker"
    trailer = np.random.default_rng(0).bytes(2000).replace(b"\xff\xd9", b"")  # as a phone's
    for after in (bytes(300), b"SEFH" + trailer + b"SEFT", solid(60)):
        assert gpu_screen(whole + after, "RGB", limits)[0] is None
    with_thumbnail = with_exif_thumbnail(whole, solid(90, size=(8, 8)))
    assert gpu_screen(with_thumbnail, "RGB", limits)[0] is None
    assert gpu_screen(with_thumbnail[:-100], "RGB", limits)[0] == "no_end_marker"


def test_screening_finds_a_cut_progressive_jpeg_whose_later_segment_holds_the_end_bytes():
    """Between a progressive JPEG's scans lie segments (Huffman tables, comments) whose bytes
    may be 0xFF 0xD9. Cut after such a segment, the JPEG still has no end: the screen steps
    over each segment by its length, sends the cut one to the packers, where Pillow calls it
    truncated, and passes the whole one."""
    progressive = encode(Image.open(io.BytesIO(photo(5, (96, 72), fmt="PNG"))), "JPEG",
                         progressive=True)
    second_scan = progressive.index(b"\xff\xda", progressive.index(b"\xff\xda") + 2)
    comment = b"\xff\xfe\x00\x08ab\xff\xd9cd"  # a segment holding the end marker's bytes
    whole = progressive[:second_scan] + comment + progressive[second_scan:]

    def screened(data):  # progressive JPEGs of any size for the GPU, as a route may send
        return gpu_screen(data, "RGB", Limits(), progressive_pixels=10**9)[0]
    assert screened(whole) is None
    Image.open(io.BytesIO(whole)).load()
    cut = whole[:second_scan + len(comment) + 40]  # inside the second scan
    assert screened(cut) == "no_end_marker"
    with pytest.raises(OSError, match="truncated"):
        Image.open(io.BytesIO(cut)).load()
    assert screened(whole + bytes(50)) is None  # padded, not cut


def rgb_coded_jpeg(image: Image.Image) -> bytes:
    """`image` stored as R, G, B components (an Adobe marker with transform 0), as Pillow
    writes with keep_rgb (Pillow >= 10.2; a skip before)."""
    data = encode(image, "JPEG", keep_rgb=True)
    if Image.open(io.BytesIO(data)).info.get("adobe_transform") != 0:
        pytest.skip("this Pillow writes no RGB-coded JPEGs (keep_rgb)")
    return data


def test_screening_leaves_rgb_coded_jpegs_to_the_cpu():
    """A JPEG storing R, G, B instead of YCbCr (libjpeg's rule: an Adobe marker's transform
    0, or components named R, G, B without JFIF or Adobe markers) goes to the packers: a GPU
    decoder converting it as YCbCr would give wrong colours silently. Plain JPEGs do not."""
    image = Image.open(io.BytesIO(photo(4, (80, 64), fmt="PNG")))
    limits = Limits()
    adobe = rgb_coded_jpeg(image)
    assert gpu_screen(adobe, "RGB", limits)[0] == "color_rgb"
    at = adobe.index(b"\xff\xee")  # the Adobe segment becomes a comment: the names decide
    named = adobe[:at] + b"\xff\xfe" + adobe[at + 2:]
    assert "adobe" not in Image.open(io.BytesIO(named)).info
    assert gpu_screen(named, "RGB", limits)[0] == "color_rgb"
    assert gpu_screen(encode(image, "JPEG"), "RGB", limits)[0] is None
    assert gpu_screen(encode(image, "JPEG", subsampling=0), "RGB", limits)[0] is None


def test_a_grey_jpegs_sampling_factors_are_found_in_its_frame_header_and_1x1_decodes_alike():
    """gray_sampling_at: the byte a packer sets to 1x1, in baseline and progressive frames,
    after other segments (EXIF); none in 1x1 grey, colour, or a header cut before its frame.
    Written as 1x1, Pillow decodes the same pixels."""
    grey = Image.open(io.BytesIO(photo(3, (45, 37), fmt="PNG"))).convert("L")
    assert gray_sampling_at(encode(grey, "JPEG")) is None
    assert gray_sampling_at(photo(3, (45, 37))) is None  # colour, 4:2:0
    exif = Image.Exif()
    exif[0x0112] = 1
    for options in ({"subsampling": 2}, {"subsampling": 1},
                    {"subsampling": 2, "progressive": True},
                    {"subsampling": 1, "exif": exif.tobytes()}):
        data = encode(grey, "JPEG", **options)
        at = gray_sampling_at(data)
        assert at is not None and data[at] in (0x21, 0x22), options
        as_1x1 = data[:at] + b"\x11" + data[at + 1:]
        assert gray_sampling_at(as_1x1) is None
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(as_1x1))),
                              np.asarray(Image.open(io.BytesIO(data))))
    data = encode(grey, "JPEG", subsampling=2)
    assert gray_sampling_at(data[:data.index(b"\xff\xc0") + 6]) is None  # cut in its frame


def test_packer_packs_bytes_and_decodes_the_rest_on_the_cpu():
    layout = batch_layout(5, (8, 8, 3), arena_bytes=3000)
    batch = views_of(bytearray(layout.nbytes), layout)
    packer = JpegPacker(Decoder(Augment.make(8, False)))
    jpeg, png = solid(60), solid(70, fmt="PNG")
    grey = encode(Image.open(io.BytesIO(photo(7, (43, 30), fmt="PNG"))).convert("L"), "JPEG",
                  subsampling=2)
    packer.start(batch)
    packer.fill(batch, 0, jpeg, 1)
    packer.fill(batch, 1, png, 2)
    packer.fill(batch, 2, jpeg, 3)
    big = photo(1, (200, 150))  # larger than what is left of the arena
    packer.fill(batch, 3, big, 4)
    packer.fill(batch, 4, grey, 5)  # a grey JPEG with 2x2 factors: packed with 1x1 ones
    assert batch.lengths.tolist() == [len(jpeg), 0, len(jpeg), 0, len(grey)]
    assert bytes(batch.arena[batch.offsets[2]:][:len(jpeg)]) == jpeg
    assert (batch.images[1] == 70).all()
    packed = bytes(batch.arena[batch.offsets[4]:][:len(grey)])
    changed = [i for i in range(len(grey)) if packed[i] != grey[i]]
    assert len(changed) == 1 and (grey[changed[0]], packed[changed[0]]) == (0x22, 0x11)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(packed))),
                          np.asarray(Image.open(io.BytesIO(grey))))  # libjpeg: the same pixels
    assert packer.take_fallbacks() == {"not_jpeg": 1, "arena_full": 1, "gray_sampling_1x1": 1}


def test_a_slot_holds_more_than_the_archives_mean_member_within_bounds():
    assert arena_per_image(None) == arena_per_image(1000) == ARENA_PER_IMAGE
    assert arena_per_image(300_000) == int(ARENA_HEADROOM * 300_000) > ARENA_PER_IMAGE
    assert arena_per_image(3_300_000) == ARENA_MAX_PER_IMAGE  # phone photos: page-locked
    # Where the host's memory has room, above the cap: phone photos' whole 1.5x, or the room
    assert arena_per_image(3_300_000, room=8 << 20) == int(ARENA_HEADROOM * 3_300_000)
    assert arena_per_image(3_300_000, room=3 << 20) == 3 << 20
    assert arena_per_image(3_300_000, room=100 << 10) == ARENA_MAX_PER_IMAGE  # never below it
    assert arena_per_image(100_000, room=8 << 20) == ARENA_PER_IMAGE  # room is not a floor


def test_a_gpu_decoding_loader_starts_8_packers_or_a_multiple_of_8_that_may_decode():
    """Packers only pack: at most 8 (fewer cost phone photos their rate, more add buffers);
    where they may decode too (the trial, cpu_large), the CPU path's count rounded up to 8s,
    so that 8 readers feed them evenly."""
    assert [gpu_packers(w, decodes_too=False) for w in (1, 3, 8, 15, 31)] == [1, 3, 8, 8, 8]
    assert [gpu_packers(w, decodes_too=True) for w in (1, 8, 15, 31)] == [8, 8, 16, 32]


def test_the_room_a_slot_may_take_is_a_share_of_memory_split_among_slots_and_ranks(monkeypatch):
    import imageloader.loader as loader_module
    from imageloader import pool as pool_module
    monkeypatch.setattr(pool_module, "host_memory", lambda: 64 << 30)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    share = loader_module.ARENA_MEMORY_SHARE
    assert arena_room_per_slot(1000, None) == int(share * (64 << 30)) // 1000  # not shared
    assert arena_room_per_slot(1000, 16 << 30) == int(share * (16 << 30)) // 1000  # /dev/shm
    assert arena_room_per_slot(1000, 1 << 40) == int(share * (64 << 30)) // 1000  # the host
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # four ranks of one host share it
    assert arena_room_per_slot(1000, 16 << 30) == int(share * (16 << 30) / 4) // 1000
    monkeypatch.setattr(loader_module, "ARENA_MEMORY_SHARE", 0.0)  # bench.py --arena: fixed
    assert arena_room_per_slot(1000, 16 << 30) == 0


def test_a_loaders_arena_takes_the_room_its_pool_has_and_shrinks_where_dev_shm_is_tight(
        monkeypatch, tmp_path, caplog):
    """The sizes a GPU-decoding loader's start gives its pool, without a GPU: a loader of
    (pretended) two lanes over an archive of phone photos' mean member (3.3 MB), as /dev/shm
    has more or less free."""
    import logging
    from imageloader import pool as pool_module
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 4))
    loader = ImageLoader(path, batch_size=8, size=8, device="cpu", workers=3)
    monkeypatch.setattr(loader, "_gpu", [None, None])  # two lanes
    loader.__dict__["_mean_member_bytes"] = 3.3e6
    monkeypatch.setattr(pool_module, "host_memory", lambda: 64 << 30)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    buffers = loader.prefetch + 2 + 3 + 2 + 2
    assert loader._buffer_count() == buffers

    def arena_per_slot(free: int) -> int:
        monkeypatch.setattr(pool_module, "shared_memory_free", lambda folder: free)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="imageloader.loader"):
            arena = loader._arena_bytes()
        return arena // 8

    assert arena_per_slot(1 << 40) == int(ARENA_HEADROOM * 3.3e6)  # every one fits
    assert f"page-locked over {buffers} buffers" in caplog.text
    assert arena_per_slot(1 << 30) == (1 << 30) // 4 // (buffers * 8)  # a quarter, a slot
    # Tight: less than 1 MiB a slot fits beside the rest (the workers' rings take 158 MB
    # here): a smaller arena that passes the check, and a warning naming the remedy
    tight = 230 << 20
    per_slot = arena_per_slot(tight)
    assert ARENA_PER_IMAGE < per_slot < ARENA_MAX_PER_IMAGE
    check_shared_memory(loader._shared_bytes(8 * per_slot))  # passes, with ~10% to spare
    assert loader._shared_bytes(8 * per_slot) < 0.91 * tight < loader._shared_bytes(8 << 20)
    assert "/dev/shm has room for" in caplog.text and "--shm-size" in caplog.text
    # Too little even for the least: the least, which the start's check then refuses
    assert arena_per_slot(50 << 20) == ARENA_PER_IMAGE
    assert "has room for" not in caplog.text  # the check's refusal says it
    with pytest.raises(MemoryError, match="--shm-size"):
        check_shared_memory(loader._shared_bytes(8 * ARENA_PER_IMAGE))
    loader.close()


def test_an_arena_sized_from_the_archive_sends_every_large_jpeg_to_the_gpu():
    """JPEGs above the old fixed room per slot: with it, part of every batch was decoded on
    the packers' CPU (arena_full); with the room sized from their mean, none is."""
    jpegs = [noisy_jpeg(20 + 23 * (k % 4), k) for k in range(8)]
    mean = sum(map(len, jpegs)) / len(jpegs)
    turned_away = {}
    for per_image in (ARENA_PER_IMAGE, arena_per_image(mean)):
        layout = batch_layout(8, (8, 8, 3), arena_bytes=8 * per_image)
        batch = views_of(bytearray(layout.nbytes), layout)
        packer = JpegPacker(Decoder(Augment.make(8, False)))
        packer.start(batch)
        for slot, data in enumerate(jpegs):
            packer.fill(batch, slot, data, slot)
        turned_away[per_image] = packer.take_fallbacks().get("arena_full", 0)
        packed = batch.lengths > 0
        assert packed.sum() + turned_away[per_image] == 8
    assert turned_away == {ARENA_PER_IMAGE: 2, arena_per_image(mean): 0}


def test_cpu_large_decodes_the_large_images_on_the_cpu_and_packs_the_rest():
    """Options.cpu_large: images of at least that many pixels are the packers' to decode
    (exactly as the CPU path: same seed, same crop), the others go to the GPU as bytes."""
    cpu = Decoder(Augment.make(16, True))
    layout = batch_layout(3, cpu.out_shape, arena_bytes=1 << 20)
    batch = views_of(bytearray(layout.nbytes), layout)
    packer = JpegPacker(cpu, cpu_pixels=200 * 150)
    small, exact, large = photo(1, (64, 48)), photo(2, (200, 150)), photo(3, (320, 240))
    packer.start(batch)
    for slot, data in enumerate((small, exact, large)):
        packer.fill(batch, slot, data, 10 + slot)
    assert batch.lengths[0] == len(small) and batch.lengths[1:].tolist() == [0, 0]
    for slot, data in ((1, exact), (2, large)):
        expected = np.empty(cpu.out_shape, np.uint8)
        cpu(data, expected, 10 + slot)
        assert np.array_equal(batch.images[slot], expected)
    assert packer.take_fallbacks() == {"cpu_large": 2}


def test_the_threshold_stamped_on_a_batch_sends_its_large_images_to_the_cpu():
    """decode="auto" on a GPU-bound model (share.LargeOnCpu): the parent stamps a pixel
    threshold on each buffer; that batch's JPEGs of at least so many pixels are decoded here,
    the next batch stamped 0 packs them all again. With Options.cpu_large too, the lower
    threshold of the two counts."""
    cpu = Decoder(Augment.make(16, True))
    layout = batch_layout(3, cpu.out_shape, arena_bytes=1 << 20)
    batch = views_of(bytearray(layout.nbytes), layout)
    small, medium, large = photo(1, (64, 48)), photo(2, (200, 150)), photo(3, (320, 240))

    def on_cpu(packer, stamped: int) -> list[int]:
        batch.cpu_pixels[0] = stamped
        packer.start(batch)
        for slot, data in enumerate((small, medium, large)):
            packer.fill(batch, slot, data, 20 + slot)
        return [slot for slot in range(3) if batch.lengths[slot] == 0]

    packer = JpegPacker(cpu)
    assert on_cpu(packer, 320 * 240) == [2]
    expected = np.empty(cpu.out_shape, np.uint8)
    cpu(large, expected, 22)
    assert np.array_equal(batch.images[2], expected)  # exactly as the CPU path
    assert on_cpu(packer, 0) == []
    assert packer.take_fallbacks() == {"cpu_large": 1}
    both = JpegPacker(cpu, cpu_pixels=320 * 240)
    assert on_cpu(both, 200 * 150) == [1, 2] and on_cpu(both, 0) == [2]


def test_a_refused_image_clears_what_the_slot_held_in_the_last_batch():
    layout = batch_layout(2, (8, 8, 3), arena_bytes=3000)
    batch = views_of(bytearray(layout.nbytes), layout)
    packer = JpegPacker(Decoder(Augment.make(8, False)))
    packer.start(batch)
    packer.fill(batch, 0, rotated_jpeg(60), 1)
    assert batch.lengths[0] > 0 and batch.orientations[0] == 6
    packer.start(batch)  # the buffer's next batch: slot 0 now gets a PNG
    packer.fill(batch, 0, solid(70, fmt="PNG"), 2)
    assert batch.lengths[0] == 0 and (batch.images[0] == 70).all()
    assert batch.orientations[0] == 1  # nothing for the GPU stage to turn


def test_cpu_share_decodes_that_share_on_the_cpu_the_same_images_every_time():
    layout = batch_layout(64, (8, 8, 3), arena_bytes=64 * 1000)
    jpegs = [solid(10 + 3 * i) for i in range(64)]

    def pack(share):
        batch = views_of(bytearray(layout.nbytes), layout)
        packer = JpegPacker(Decoder(Augment.make(8, False)))
        batch.cpu_share[0] = share  # the parent's decision for this batch (share.py)
        packer.start(batch)
        for slot, data in enumerate(jpegs):
            packer.fill(batch, slot, data, 5000 + slot)
        on_cpu = [slot for slot in range(64) if batch.lengths[slot] == 0]
        for slot in on_cpu:  # decoded here: the pixels are in the batch
            assert abs(int(batch.images[slot].mean()) - (10 + 3 * slot)) <= 1
        return on_cpu, packer.take_fallbacks()

    assert pack(0.0) == ([], {})
    half, counts = pack(0.5)
    assert 20 <= len(half) <= 44 and counts == {"cpu_share": len(half)}
    assert pack(0.5)[0] == half  # chosen by each sample's seed
    assert len(pack(1.0)[0]) == 64


def test_a_probe_times_the_cpu_path_on_images_it_still_packs_for_the_gpu():
    """decode="auto"'s trial asks the packer (batch.cpu_probe[0]) to time a few images through
    the CPU path; the batch is packed exactly as without the probe, refused images are not
    timed, nor is a packer's first probe (a warm-up) or one the CPU cannot decode (the GPU's
    lane reports it). The time is the packer's CPU time."""
    layout = batch_layout(5, (8, 8, 3), arena_bytes=1 << 16)
    bad = bogus_huffman_jpeg(photo(4))  # its headers pass the screen, Pillow refuses it
    jpegs = [solid(60), solid(70, fmt="PNG"), photo(3), bad, photo(5)]

    def pack(probes):
        batch = views_of(bytearray(layout.nbytes), layout)
        batch.cpu_probe[:] = (probes, 7.0, 7.0)  # the last batch's answer: not added to
        packer = JpegPacker(Decoder(Augment.make(8, True)))
        packer.start(batch)
        for slot, data in enumerate(jpegs):
            packer.fill(batch, slot, data, 40 + slot)
        return batch, packer.take_fallbacks()

    plain, plain_counts = pack(0)
    assert plain.cpu_probe.tolist() == [0, 0, 0]
    assert plain.lengths.tolist() == [len(jpegs[0]), 0, len(jpegs[2]), len(bad), len(jpegs[4])]
    # A packer's first probe warms it up, untimed; the 4th packed JPEG is refused: not timed.
    for probes, timed in ((2, 1), (3, 1), (10, 2)):
        probed, counts = pack(probes)
        assert probed.cpu_probe[2] == timed and probed.cpu_probe[1] > 0, probes
        assert counts == plain_counts == {"not_jpeg": 1}
        for name in ("lengths", "offsets", "boxes", "arena"):
            assert np.array_equal(getattr(probed, name), getattr(plain, name)), name
        assert np.array_equal(probed.images[1], plain.images[1])  # the PNG, decoded here


def packed_batch(files, augment, arena=1 << 20, mode="RGB"):
    """A host batch packed exactly as the workers would, without processes."""
    cpu = Decoder(augment, mode=mode)
    pool = BufferPool(1, len(files), cpu.out_shape, arena_bytes=arena)
    buf = pool.lease()
    packer = JpegPacker(cpu)
    packer.start(buf.arrays)
    for slot, data in enumerate(files):
        packer.fill(buf.arrays, slot, data, 1000 + slot)
        buf.arrays.labels[slot] = slot
        buf.arrays.seeds[slot] = 1000 + slot
    buf.count = len(files)
    return buf, cpu


class PillowJpeg:
    """A batched JPEG decoder on the CPU with the GPU decoders' interface (gpujpeg.py), so that
    the GPU stage's own code runs here: Pillow's full decode as (C, H, W) tensors."""

    name = "pillow"
    device = torch.device("cpu")
    mode = "RGB"

    turns_upright = False  # as nvImageCodec and torchvision are asked to decode

    def decode(self, datas, fresh=False):  # new tensors every time
        images = []
        for data in datas:
            try:  # failing as nvJPEG does: RuntimeError
                with Image.open(io.BytesIO(data.tobytes()), formats=("JPEG",)) as img:
                    img = ImageOps.exif_transpose(img) if self.turns_upright else img
                    pixels = np.array(img.convert(self.mode)).reshape(img.height, img.width, -1)
            except (OSError, ValueError) as error:
                raise RuntimeError(f"not decodable: {error}") from error
            images.append(torch.from_numpy(pixels).permute(2, 0, 1))
        return images


class UprightPillowJpeg(PillowJpeg):
    """As TorchCodec decodes on CUDA: every image turned by its EXIF orientation."""

    turns_upright = True


def cpu_jpeg_decoder(mode: str = "RGB"):
    """libjpeg through Pillow in nvJPEG's place. Not torchvision.io.decode_jpeg: deprecated
    since torchvision 0.29."""
    decoder = PillowJpeg()
    decoder.mode = mode
    return [decoder]


class EnginePillow(PillowJpeg):
    """Pillow as one engine of a split lane, `delay` seconds slower per image."""

    mode = "RGB"

    def __init__(self, engine: str, delay: float = 0.0):
        self.engine, self.delay, self.calls = engine, delay, []

    def decode(self, datas, fresh=False):
        self.calls.append([len(d) for d in datas])
        time.sleep(self.delay * len(datas))
        return super().decode(datas)


def cpu_decoders(name):
    if name == "pillow":
        return cpu_jpeg_decoder()
    if name == "pillow-upright":
        return [UprightPillowJpeg()]
    if name == "split":
        return [SplitJpeg(EnginePillow("hw"), EnginePillow("hybrid"), share=0.4)]
    pytest.importorskip("nvidia.nvimgcodec")
    return available(torch.device("cpu"), "RGB", "nvimgcodec")  # its CPU backend


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("train", [False, True])
def test_the_gpu_stage_with_nvimgcodecs_cpu_backend_matches_the_cpu_path(train, mode):
    """The CUDA tests' varied photos (every subsampling, grey of every sampling factor, handed
    over as 1x1, EXIF turns, camera files) through the GPU stage's code on the CPU, nvImageCodec's
    CPU backend decoding: what the stage does around the decoder, where CI can see it."""
    pytest.importorskip("nvidia.nvimgcodec")
    assert_gpu_stage_matches_the_cpu_path(available(torch.device("cpu"), mode, "nvimgcodec"),
                                          train, "nvimgcodec", mode, device="cpu")


@pytest.mark.parametrize("decoder", ["pillow", "nvimgcodec", "split"])
@pytest.mark.parametrize("train", [False, True])
def test_gpu_stage_geometry_matches_the_cpu_path(train, decoder):
    """Runs the GPU stage's code on the CPU (a CPU decoder instead of nvJPEG), twice: the
    second batch goes through the images nvImageCodec kept from the first."""
    sizes = [(300, 200), (120, 90), (300, 200), (90, 160), (300, 200)]  # groups of equal size
    files = [photo(seed, size) for seed, size in enumerate(sizes)]
    augment = Augment.make(64, train)
    buf, cpu = packed_batch(files, augment)
    stage = GpuDecode(cpu, None, torch.device("cpu"), cpu_decoders(decoder))
    stage(Packed(buf))
    images, labels = stage(Packed(buf))
    assert images.shape == (5, 3, 64, 64) and labels.tolist() == [0, 1, 2, 3, 4]
    for slot, data in enumerate(files):
        reference = np.empty(cpu.out_shape, np.uint8)
        cpu(data, reference, 1000 + slot)  # same seed: same crop box and flip
        ours = images[slot].permute(1, 2, 0).numpy().astype(int)
        assert np.abs(ours - reference).mean() <= 2.0, slot


@pytest.mark.parametrize("orientation", [*range(1, 9), 0, 9])
def test_upright_views_read_what_pillows_exif_transpose_turns(orientation):
    """gpucrop's upright views of a stored image, as geometry rows (what the crop kernel reads:
    address, sizes and strides, negative ones included) and as a tensor (roi_align's crops,
    evaluation's resize), give the pixels of Pillow's exif_transpose for every orientation;
    0 and 9 are not orientations and stay as stored, as Pillow leaves them."""
    stored = np.random.default_rng(orientation).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    tagged = Image.open(io.BytesIO(encode(Image.fromarray(stored), "PNG", exif=exif.tobytes())))
    upright = np.array(ImageOps.exif_transpose(tagged))
    image = torch.from_numpy(stored).permute(2, 0, 1)  # C x H x W view of H x W x C memory
    assert np.array_equal(gpucrop.upright_tensor(image, orientation).permute(1, 2, 0), upright)
    address, height, width, *strides = gpucrop.upright_geometry(
        [gpucrop.image_geometry(image)], [orientation])[0]
    index = (address - image.data_ptr()) + np.arange(3) * strides[0] \
        + np.arange(height)[:, None, None] * strides[1] + np.arange(width)[:, None] * strides[2]
    assert np.array_equal(stored.reshape(-1)[index], upright)


@pytest.mark.parametrize("decoder", ["pillow", "nvimgcodec", "split", "pillow-upright"])
@pytest.mark.parametrize("train", [False, True])
def test_rotated_jpegs_go_to_the_gpu_stage_and_come_out_as_the_cpu_path_turns_them(train,
                                                                                  decoder):
    """A JPEG with an EXIF orientation is packed for the GPU with it (no longer decoded on the
    CPU for it), and the GPU stage (run on the CPU, as above) reads it upright: its crop box
    drawn in the upright frame with the CPU path's draws, so the pixels are the CPU path's,
    not those of the image as stored, for all eight orientations; and not turned twice where
    the decoder turned it already ("pillow-upright", as TorchCodec does)."""
    texture = Image.open(io.BytesIO(photo(7, (120, 80), fmt="PNG")))
    files = [exif_oriented(texture, orientation) for orientation in range(1, 9)]
    augment = Augment.make(48, train)
    buf, cpu = packed_batch(files, augment)
    assert (buf.arrays.lengths[:8] > 0).all()  # every one packed for the GPU
    assert buf.arrays.orientations[:8].tolist() == list(range(1, 9))
    stage = GpuDecode(cpu, None, torch.device("cpu"), cpu_decoders(decoder))
    images, labels = stage(Packed(buf))
    assert labels.tolist() == list(range(8))
    as_stored = files[0]  # orientation 1: the same pixels, not turned
    for slot, data in enumerate(files):
        reference, unturned = (np.empty(cpu.out_shape, np.uint8) for _ in range(2))
        cpu(data, reference, 1000 + slot)  # same seed: same crop box and flip
        cpu(as_stored, unturned, 1000 + slot)
        ours = images[slot].permute(1, 2, 0).numpy().astype(int)
        assert np.abs(ours - reference).mean() <= 2.0, slot
        if slot > 0:  # what reading it as stored would have given
            assert np.abs(ours - unturned.astype(int)).mean() > 8.0, slot
    assert FALLBACK + "exif_orientation" not in stage.take_counts()


@pytest.mark.parametrize("decoder", ["pillow", "nvimgcodec"])
def test_progressive_jpegs_under_the_bound_go_to_the_gpu_stage(monkeypatch, decoder):
    """IMAGELOADER_GPU_PROGRESSIVE=<pixels>: the packers pack progressive JPEGs of fewer
    pixels for the GPU stage (run on the CPU here, as above), which gives the CPU path's
    pixels; larger ones they decode themselves."""
    monkeypatch.setenv(GPU_PROGRESSIVE, str(120 * 80 + 1))
    texture = Image.open(io.BytesIO(photo(3, (240, 160), fmt="PNG")))
    small, large = (encode(texture.resize(size), "JPEG", progressive=True, quality=90)
                    for size in ((120, 80), (240, 160)))
    files = [small, large, photo(4, (100, 90))]
    buf, cpu = packed_batch(files, Augment.make(48, True))
    lengths = buf.arrays.lengths
    assert lengths[0] > 0 and lengths[1] == 0 and lengths[2] > 0  # the large one: decoded
    stage = GpuDecode(cpu, None, torch.device("cpu"), cpu_decoders(decoder))
    images, labels = stage(Packed(buf))
    for slot, data in enumerate(files):
        reference = np.empty(cpu.out_shape, np.uint8)
        cpu(data, reference, 1000 + slot)  # same seed: same crop box and flip
        ours = images[slot].permute(1, 2, 0).numpy().astype(int)
        assert np.abs(ours - reference).mean() <= 2.0, slot
    assert stage.take_counts() == {FALLBACK + "gpu_decoded": 2}


def test_a_decoder_is_asked_once_whether_it_turns_images_upright():
    """gpujpeg.decoder_turns_upright, on stand-ins for a decoder that turns images by their
    EXIF orientation (TorchCodec's on CUDA) and one that does not (as nvImageCodec and
    torchvision are asked); TorchCodecJpeg asks it on the first rotated JPEG, then keeps it."""
    assert decoder_turns_upright(UprightPillowJpeg().decode) is True
    assert decoder_turns_upright(PillowJpeg().decode) is False


def test_what_the_engines_refuse_is_counted_once_as_a_fallback(monkeypatch):
    """JPEGs the hardware engines refuse (a layout they lack) are decoded by nvImageCodec's
    other backends and reported under fallbacks' "engines_refused", each batch its own,
    besides "gpu_decoded"; one that the other backends fail too goes to Pillow, counted once
    as "gpu_refused" and not as theirs; a split lane sums its two decoders' refusals. On the
    CPU: the refusals are played by the CPU backend's images of the wide JPEGs dropped."""
    pytest.importorskip("nvidia.nvimgcodec")
    decoder = NvImageCodecJpeg(torch.device("cpu"), "RGB", engine="hw", one_call=False)
    decode, every_backend = decoder._decode, decoder._make_decoder("all", None)

    def engines_refuse_the_wide_ones(streams, fresh=False):
        return [None if stream.width >= 300 else image
                for stream, image in zip(streams, decode(streams, fresh))]

    class EveryBackendFailsTheWidest:
        def decode(self, streams, **kw):
            return [None if stream.width == 400 else image
                    for stream, image in zip(streams, every_backend.decode(streams, **kw))]
    monkeypatch.setattr(decoder, "_decode", engines_refuse_the_wide_ones)
    decoder._fallback = EveryBackendFailsTheWidest()
    files = [photo(seed, size) for seed, size in
             enumerate([(300, 200), (120, 90), (400, 300), (90, 160), (300, 200)])]
    buf, cpu = packed_batch(files, Augment.make(64, True))
    stage = GpuDecode(cpu, None, torch.device("cpu"), [decoder])
    for _ in range(2):
        images, labels = stage(Packed(buf))
        assert labels.tolist() == [0, 1, 2, 3, 4]
        counts = stage.take_counts()
        assert counts[FALLBACK + "engines_refused"] == 2, counts
        assert counts[FALLBACK + "gpu_refused"] == 1 and counts[FALLBACK + "gpu_decoded"] == 4
        for slot, data in enumerate(files):  # the refused ones decoded all the same
            reference = np.empty(cpu.out_shape, np.uint8)
            cpu(data, reference, 1000 + slot)
            ours = images[slot].permute(1, 2, 0).numpy().astype(int)
            assert np.abs(ours - reference).mean() <= 2.0, slot
    assert FALLBACK + "engines_refused" not in stage.take_counts()  # nothing new: no count
    helper = EnginePillow("hybrid")
    helper.refused = 1
    assert SplitJpeg(decoder, helper).refused == decoder.refused + 1 == 5


@pytest.mark.parametrize("slow", ["helper", "first"])
@pytest.mark.parametrize("helper_engine", ["hybrid", "cuda"])
def test_a_split_lane_decodes_every_jpeg_once_in_order_and_steers_to_the_faster(
        slow, helper_engine):
    """SplitJpeg: each call's smallest JPEGs go to a hybrid helper, the largest to a CUDA
    one, the rest to the first decoder, at once; the images come back in the caller's
    order; the helper's share falls when it is the slower (per image) and rises when the
    first one is."""
    files = [photo(seed, (60 + 23 * (seed % 9), 40 + 17 * (seed % 5))) for seed in range(24)]
    datas = [np.frombuffer(data, np.uint8) for data in files]
    # The slow one sleeps 20 ms an image: slower than Pillow's decodes of these small JPEGs
    # even on a machine busy with other programs (4 ms was not, beside another test run).
    first = EnginePillow("hw", delay=0.02 if slow == "first" else 0.0)
    helper = EnginePillow(helper_engine, delay=0.02 if slow == "helper" else 0.0)
    split = SplitJpeg(first, helper, share=0.3)
    assert split.engine == f"hw|{helper_engine}"
    for _ in range(6):
        images = split.decode(datas)
        for data, image in zip(files, images):
            pillow = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).transpose(2, 0, 1)
            assert np.array_equal(image.numpy(), pillow)
        mine, theirs = first.calls[-1], helper.calls[-1]
        assert sorted(mine + theirs) == sorted(len(d) for d in datas)  # each once
        if helper_engine == "cuda":
            assert min(theirs) >= max(mine)  # the helper had the largest
        else:
            assert max(theirs) <= min(mine)  # the helper had the smallest
    shares = [*split.shares, split.share]
    assert shares[0] == 0.3
    assert split.mean_share == pytest.approx(np.mean(shares[:-1]))  # what stats show
    if slow == "helper":
        assert shares[-1] < 0.15, shares
    else:
        assert shares[-1] > 0.45, shares


def test_a_cuda_helper_takes_only_jpegs_far_above_the_batch_median():
    """On images of one size (ImageNet-like) a CUDA helper gets none; beside a tail of large
    ones it gets those alone, however large its share."""
    uniform = [np.frombuffer(photo(seed, (120, 90)), np.uint8) for seed in range(16)]
    first, helper = EnginePillow("hw"), EnginePillow("cuda")
    split = SplitJpeg(first, helper, share=0.5)
    split.decode(uniform)
    assert helper.calls == [] and len(first.calls[-1]) == 16
    large = [np.frombuffer(photo(100 + seed, (480, 360)), np.uint8) for seed in range(3)]
    split.decode(uniform + large)
    assert sorted(helper.calls[-1]) == sorted(len(d) for d in large)


def test_a_split_lane_helps_only_while_the_consumer_waits_for_batches():
    """Batches finished and not taken (the model is slower than decoding): the helper's share
    falls to none and it gets nothing; none waiting again: it is back at work."""
    datas = [np.frombuffer(photo(seed, (60 + 23 * (seed % 9), 40)), np.uint8)
             for seed in range(16)]
    first, helper = EnginePillow("hw"), EnginePillow("hybrid")
    backlog = Backlog()
    split = SplitJpeg(first, helper, share=0.4, backlog=backlog)
    backlog.add(2)  # the consumer has two batches to take
    for _ in range(12):
        split.decode(datas)
    assert split.needed < 0.5 and split.share == 0.0
    calls = len(helper.calls)
    split.decode(datas)
    assert len(helper.calls) == calls  # not needed: nothing to the helper
    backlog.add(-2)  # the consumer waits
    for _ in range(20):
        split.decode(datas)
    assert split.needed > 0.5 and split.share > 0 and len(helper.calls) > calls


def test_a_consumer_that_waits_is_seen_though_the_lanes_last_batch_was_counted_moments_ago():
    """The prefetcher counts a lane's batch as the lane finishes it, then the lane starts the
    next; a waiting consumer takes the finished batch while that next one decodes. So at a
    decode's start the count still holds the last batch: read there, it said "not waiting"
    and the helper's share fell to 3-5% (H200, 2026-11-26). Read at the batch's end: 0."""
    datas = [np.frombuffer(photo(seed, (60 + 23 * (seed % 9), 40)), np.uint8)
             for seed in range(16)]
    first, helper = EnginePillow("hw"), EnginePillow("hybrid")
    backlog = Backlog()
    engines = first.decode

    def consumer_takes_the_last_batch_meanwhile(batch, fresh=False):
        if backlog():
            backlog.add(-1)
        return engines(batch, fresh)

    first.decode = consumer_takes_the_last_batch_meanwhile
    split = SplitJpeg(first, helper, share=0.4, backlog=backlog)
    for _ in range(20):
        split.decode(datas)
        backlog.add(1)  # the prefetcher: finished, not yet taken
    assert split.needed > 0.5 and split.share > 0 and len(helper.calls) == 20


@cuda
def test_the_prefetch_backlog_counts_batches_finished_and_not_taken():
    """What SplitJpeg reads: it rises as lanes finish batches the consumer has not taken and
    is back to 0 once all are taken (the threaded prefetch stage: CUDA only)."""
    from imageloader.prefetch import Prefetcher
    backlog = Backlog()
    items = [torch.full((2,), k) for k in range(6)]
    prefetcher = Prefetcher(items, "cuda", prefetch=3, threaded=True, backlog=backlog,
                            lanes=[lambda item: item])
    it = iter(prefetcher)
    assert next(it).tolist() == [0, 0]
    deadline = time.monotonic() + 10
    while backlog() < 4 and time.monotonic() < deadline:  # the lane runs ahead, then stops
        time.sleep(0.01)
    time.sleep(0.2)
    assert backlog() == 4  # prefetch + one in the lane: all it may take before a hand-out
    assert [x[0].item() for x in it] == [1, 2, 3, 4, 5]
    assert backlog() == 0
    again = iter(prefetcher)  # a run left early leaves nothing waiting for the next one
    next(again)
    deadline = time.monotonic() + 10
    while backlog() < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    again.close()  # four finished, never taken
    third = iter(prefetcher)
    assert next(third).tolist() == [0, 0]
    time.sleep(0.5)  # its lane fills up again
    assert backlog() == 4, backlog()  # this run's only (not 8)
    third.close()


def test_a_split_lane_sends_a_single_jpeg_to_the_first_decoder():
    first, helper = EnginePillow("hw"), EnginePillow("hybrid")
    split = SplitJpeg(first, helper, share=0.6)
    assert split.decode([np.frombuffer(photo(1, (40, 30)), np.uint8)])[0].shape == (3, 30, 40)
    assert first.calls == [[len(photo(1, (40, 30)))]] and helper.calls == []


def test_a_dropped_split_lane_ends_its_helper_thread():
    """SplitJpeg's helper thread is ended when the decoder is dropped (a loader let go of)."""
    import gc
    import threading
    split = SplitJpeg(EnginePillow("hw"), EnginePillow("hybrid"), share=0.5)
    split.decode([np.frombuffer(photo(seed, (40, 30)), np.uint8) for seed in range(4)])
    assert any(t.name.startswith("imageloader-split") for t in threading.enumerate())
    del split
    gc.collect()
    deadline = time.monotonic() + 10
    while any(t.name.startswith("imageloader-split") for t in threading.enumerate()) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name.startswith("imageloader-split") for t in threading.enumerate())


def cuda_loader(path, decode, **kw):
    kw.setdefault("normalize", False)
    kw.setdefault("workers", 2)
    return ImageLoader(path, batch_size=8, size=32, device="cuda", decode=decode, seed=5, **kw)


@cuda
def test_a_started_loader_has_warmed_its_crops_and_page_locked_every_buffer(tmp_path,
                                                                          monkeypatch):
    """The start's order (spawn, then warm and page-lock while the workers start) leaves
    nothing undone: by the first batch every buffer is page-locked, the crop kernel was
    launched once per lane on one image before any batch's crops, and the warming thread is
    gone after close()."""
    from imageloader import gpucrop
    path = write_archive(tmp_path / "a.tgz", [(f"t/c{k % 2}/{k}.jpg", photo(k, (64, 48)))
                                              for k in range(24)])
    launches = []
    real = gpucrop.crop_resize_flip

    def counted(images, boxes, slots, out):
        launches.append(len(images))
        return real(images, boxes, slots, out)
    monkeypatch.setattr(gpucrop, "crop_resize_flip", counted)
    with cuda_loader(path, "cuda") as loader:
        if loader._gpu[0].crop != "triton":
            pytest.skip("the Triton crop kernel is not in use here")
        batches = list(loader)
        runtime = loader._runtime
        assert all(buf.images.is_pinned() for buf in runtime.pool.buffers)
        assert launches[0] == 1 and launches.count(1) == len(loader._gpu), launches
        assert sum(len(labels) for _, labels in batches) == 24
        warming = runtime.warming
    assert warming is not None and not warming.is_alive()


@cuda
def test_cuda_decode_matches_cpu_decode_in_eval_mode(tmp_path):
    # 64x48 -> 32: no Pillow draft (DCT downscaling) on the CPU side, so both decode fully.
    files = [(f"t/c{k % 3}/{k}.jpg", photo(k, (64, 48))) for k in range(20)]
    path = write_archive(tmp_path / "a.tgz", files)
    batches = {}
    for decode in ("cpu", "cuda"):
        with cuda_loader(path, decode, train=False) as loader:
            batches[decode] = [(x.cpu(), y.cpu()) for x, y in loader]
            if decode == "cuda":
                assert loader.stats.decode.startswith("cuda")
                assert loader.stats.fallbacks["gpu_decoded"] == 20
    for (a, la), (b, lb) in zip(batches["cpu"], batches["cuda"]):
        assert torch.equal(la, lb)
        diff = (a.int() - b.int()).abs().float().mean(dim=(1, 2, 3))
        assert diff.max() <= 2.0, diff  # nvJPEG vs libjpeg, antialiased bilinear both ways


def test_the_progressive_switch_reads_auto_off_all_or_a_pixel_bound(monkeypatch):
    monkeypatch.delenv(GPU_PROGRESSIVE, raising=False)
    for value, pixels, adaptive in ((None, 1 << 62, True), ("auto", 1 << 62, True),
                                    ("0", 0, False), ("1", 1 << 62, False),
                                    ("all", 1 << 62, False), (" 500000 ", 500000, False)):
        if value is not None:
            monkeypatch.setenv(GPU_PROGRESSIVE, value)
        route = progressive_route()
        assert (route.pixels, route.adaptive, route.may_send) == (pixels, adaptive, pixels > 0)
        # auto starts by decoding them in the packer; a fixed bound sends from the first
        assert route.pixels_now() == (0 if adaptive else pixels)
    for bad in ("yes", "-5", "1.5"):
        monkeypatch.setenv(GPU_PROGRESSIVE, bad)
        with pytest.raises(ValueError, match=GPU_PROGRESSIVE):
            progressive_route()


SMALL = ((100_000, 0.015),)  # a small progressive JPEG, 15 ms when decoded here


def route_through(route, clock, images, wall, every=1, kinds=SMALL):
    """`images` images through a packer's route, each taking `wall` seconds of the packer's
    time; one in `every` (0: none) brings progressive JPEGs of `kinds`: (pixels, the seconds
    more each takes when decoded here). The bound each image saw."""
    bounds = []
    for k in range(images):
        bound = route.pixels_now()
        bounds.append(bound)
        for pixels, decode in (kinds if every and k % every == 0 else ()):
            if pixels < bound:
                route.sent(pixels)
            else:
                route.decoded_here(pixels, decode)
                clock.now += decode
        clock.now += wall
    return bounds


def test_auto_sends_progressive_jpegs_while_decoding_them_would_keep_the_packer_busy():
    """ProgressiveRoute ("auto"): off while decoding them takes a small share of the
    packer's wall time; on from the window where it takes more than half, and kept on while
    what the sent ones would cost here (at the CPU seconds per pixel measured) stays above a
    quarter; off again when they stop coming. A window decides after 1 s and 64 images."""
    clock = Clock()
    route = ProgressiveRoute(ProgressiveRoute.ALL, adaptive=True, clock=clock)
    # 1% progressive at 15 ms each, the packer at ~2 ms an image: ~7% busy, kept here
    assert set(route_through(route, clock, 1000, 0.002, every=100)) == {0}
    # a window of 60 images over 4 s (too few to decide), busy all along
    assert set(route_through(route, clock, 60, 0.05)) == {0}
    # every one progressive, 15 ms of the packer's 18: the next window sends them
    bounds = route_through(route, clock, 200, 0.003)
    assert 0 in bounds and bounds[-1] == 500_000
    # sent, the packer takes 3 ms an image: what they would cost here (15 ms, at the
    # seconds per pixel it measured) keeps them going
    assert set(route_through(route, clock, 2000, 0.003)) == {500_000}
    assert route.busy() > 1
    # plain JPEGs again: nothing to send, it takes them back
    assert route_through(route, clock, 2000, 0.003, every=0)[-1] == 0
    # a fixed bound never changes
    fixed = ProgressiveRoute(500_000, adaptive=False, clock=clock)
    assert set(route_through(fixed, clock, 2000, 0.01, every=0)) == {500_000}


def test_auto_prices_what_it_sends_by_the_ones_under_its_bound():
    """While it sends the small ones, a packer still decodes the large ones, each at 1/2-1/8
    scale for its crop and so cheaper per pixel: they must not make the small ones it sends
    look cheap, and the route give them back to a packer that would be busy."""
    clock = Clock()
    route = ProgressiveRoute(ProgressiveRoute.ALL, adaptive=True, clock=clock)
    route_through(route, clock, 200, 0.003)  # small ones at 15 ms: sending by the end
    assert route.pixels_now() == 500_000
    # with each small one, a 2 MP one decoded here at 1/4 scale: 5 ms (and 6 ms of the rest)
    assert set(route_through(route, clock, 2000, 0.006,
                             kinds=SMALL + ((2_000_000, 0.005),))) == {500_000}
    assert route.pixels_now() == 500_000
    assert route.busy() > 1.5  # (5 + 15) ms of every 11


def test_auto_sends_every_one_while_the_large_ones_alone_keep_the_packer_busy():
    """Sending the small ones is not enough where the large ones it still decodes take half
    its time: the next window sends every one, priced per pixel as each kind cost here. When
    all of them here would take under half its time, it goes back to the small ones; under a
    quarter, to none."""
    clock = Clock()
    route = ProgressiveRoute(ProgressiveRoute.ALL, adaptive=True, clock=clock)
    small, large = ProgressiveRoute.AUTO_PIXELS, ProgressiveRoute.ALL
    mixed = SMALL + ((2_000_000, 0.010),)  # with each small one a large one, 10 ms here
    bounds = route_through(route, clock, 400, 0.003, kinds=mixed)
    assert bounds[0] == 0 and small in bounds and bounds[-1] == large  # one level a window
    assert bounds.index(large) > bounds.index(small)
    # 25 ms here per 3 ms: stays
    assert set(route_through(route, clock, 3000, 0.003, kinds=mixed)) == {large}
    assert 0.3 * 25 / 3 < route.busy() < 3 * 25 / 3  # each kind at its own price, not 0
    # one pair in 20 (1.25 ms here per 3 ms an image: 0.42): back to the small ones, where
    # the large ones it decodes again take 0.1, so it stays there
    assert route_through(route, clock, 3000, 0.003, every=20, kinds=mixed)[-1] == small
    # none at all: none sent
    assert route_through(route, clock, 3000, 0.003, every=0, kinds=mixed)[-1] == 0


def test_a_packer_on_auto_packs_progressive_jpegs_for_the_gpu_once_they_keep_it_busy():
    """JpegPacker with "auto": it decodes progressive JPEGs itself, timing them, until a
    window finds them taking most of its wall time; the next ones it packs for the GPU."""
    cpu = Decoder(Augment.make(48, True))
    buf = BufferPool(1, 80, cpu.out_shape, arena_bytes=1 << 20).lease()
    packer, clock = JpegPacker(cpu), Clock()
    packer.progressive = ProgressiveRoute(ProgressiveRoute.ALL, adaptive=True, clock=clock)
    packer.progressive.WINDOW_S = 0.0  # decide at 64 images; the clock stands still: all the
    # packer's wall time is its decoding
    packer.start(buf.arrays)
    for slot in range(80):
        packer.fill(buf.arrays, slot, progressive_jpeg(50), slot)
    lengths = buf.arrays.lengths[:80]
    assert (lengths[:63] == 0).all() and (lengths[63:] > 0).all()  # the 64th is sent
    assert packer.take_fallbacks() == {"progressive": 63, "progressive_sent": 17}


@cuda
@pytest.mark.parametrize("switch", [None, "0", "1"])
def test_cuda_decode_train_labels_pixels_and_fallbacks(tmp_path, monkeypatch, switch):
    """What the packers refuse is decoded on the CPU and counted by why. A progressive JPEG
    too, by default (too few images for "auto" to measure the packers busy) and with
    IMAGELOADER_GPU_PROGRESSIVE=0; with =1 it goes to the GPU, where the engines refuse it
    and the hybrid backend decodes it in the same call."""
    if switch is None:
        monkeypatch.delenv(GPU_PROGRESSIVE, raising=False)
    else:
        monkeypatch.setenv(GPU_PROGRESSIVE, switch)
    progressive_to_gpu = switch == "1"
    files = labeled_files(4, 6)
    files += [("train/c01/cmyk.jpg", cmyk_jpeg(class_level(1))),
              ("train/c02/prog.jpg", progressive_jpeg(class_level(2))),
              ("train/c03/rot.jpg", rotated_jpeg(class_level(3))),
              ("train/c00/png.png", solid(class_level(0), fmt="PNG"))]
    path = write_archive(tmp_path / "a.tgz", files)
    with cuda_loader(path, "cuda") as loader:
        pairs = [(x.cpu(), y.cpu()) for x, y in loader]
        images = torch.cat([x for x, _ in pairs])
        labels = torch.cat([y for _, y in pairs])
        assert_labels_match_pixels(images, labels, tolerance=8)
        fallbacks = loader.stats.fallbacks
    if not progressive_to_gpu:
        assert fallbacks == {"gpu_decoded": 25, "color_cmyk": 1, "progressive": 1,
                             "not_jpeg": 1}
        return
    # Not decoded again after the call: none counted (the lanes' own test checks it)
    assert fallbacks.pop("engines_refused", 0) <= 1
    assert fallbacks == {"gpu_decoded": 26, "progressive_sent": 1, "color_cmyk": 1,
                         "not_jpeg": 1}


def camera_archive(tmp_path) -> tuple[str, int]:
    """Each kind of camera JPEG that this Pillow writes (conftest.camera_jpeg) in each of 3
    classes, twice, its main frame the class's gray level and the part a wrong decode would
    take (second frame, thumbnail) another class's; with plain JPEGs beside them. The path
    and the image count."""
    files = labeled_files(3, 2)
    for k in range(3):
        main = Image.new("RGB", (96 + 8 * k, 64), (class_level(k),) * 3)
        other = Image.new("RGB", (48, 32), (class_level(k + 4),) * 3)
        files += [(f"train/c{k:02d}/{kind}{i}.jpg", camera_jpeg(kind, main, other))
                  for kind in camera_kinds_here() for i in range(2)]
    return write_archive(tmp_path / "camera.tgz", files), len(files)


def test_camera_jpegs_are_screened_for_the_gpu_by_their_main_frame():
    """Multi-picture files, EXIF thumbnails and restart markers are baseline JPEGs the GPU
    decoders take: the screen passes them with the main frame's size, not the other's."""
    main, other = Image.new("RGB", (300, 200), (90,) * 3), Image.new("RGB", (48, 32), (200,) * 3)
    for kind in camera_kinds_here():
        screen = gpu_screen(camera_jpeg(kind, main, other), "RGB", Limits())
        assert screen.refused is None and screen.size == (300, 200), kind


def test_camera_jpegs_decode_to_their_main_frame_on_the_cpu(tmp_path):
    """The CPU path decodes the main frame of each: every image its label's level."""
    path, count = camera_archive(tmp_path)
    with ImageLoader(path, batch_size=8, size=32, device="cpu", decode="cpu", workers=2,
                     normalize=False, train=False) as loader:
        pairs = list(loader)
        assert sum(len(y) for _, y in pairs) == count
        assert_labels_match_pixels(torch.cat([x for x, _ in pairs]),
                                   torch.cat([y for _, y in pairs]))
        assert not loader.stats.skipped


def coded_archive(tmp_path) -> str:
    """libjpeg-turbo's photo Huffman-coded and arithmetic-coded (tests/data), in two classes,
    with plain JPEGs."""
    coded = [(f"train/c0{k}/{name}.jpg", DATA.joinpath(f"{name}.jpg").read_bytes())
             for k, name in enumerate(("huffman", "arithmetic"))]
    files = labeled_files(2, 3) + coded
    return write_archive(tmp_path / "coded.tgz", files)


def evaluation_batch(path, decode: str, size: int) -> tuple[torch.Tensor, list, dict]:
    """An archive of up to 8 images as one evaluation batch, decoded by `decode` (on CUDA with
    "cuda"): its images and labels on the CPU, and the epoch's fallbacks."""
    device = "cuda" if decode == "cuda" else "cpu"
    with ImageLoader(path, batch_size=8, size=size, device=device, decode=decode, workers=2,
                     normalize=False, train=False) as loader:
        (images, labels), = [(x.cpu(), y.cpu()) for x, y in loader]
        return images, labels.tolist(), dict(loader.stats.fallbacks)


def coded_batch(path, decode: str) -> torch.Tensor:
    images, labels, fallbacks = evaluation_batch(path, decode, 64)
    if decode == "cuda":
        assert fallbacks == {"gpu_decoded": 7, "arithmetic": 1}
    assert labels == [0, 0, 0, 1, 1, 1, 0, 1]
    return images


def test_an_arithmetic_coded_jpeg_decodes_on_the_cpu_path(tmp_path):
    """The photo both ways through the CPU path: the same picture (their quantization
    differs a little), not skipped."""
    images = coded_batch(coded_archive(tmp_path), "cpu")
    huffman, arithmetic = images[6].int(), images[7].int()
    assert (huffman - arithmetic).abs().float().mean() < 2.0
    assert huffman.float().std() > 30  # a photo, not a gray field


@cuda
def test_an_arithmetic_coded_jpeg_goes_to_the_packers_and_matches_the_cpu_path(tmp_path):
    """On the GPU path the packers decode it (counted under "arithmetic"), to the CPU path's
    pixels exactly; its Huffman twin is GPU-decoded, within the decoders' tolerance."""
    path = coded_archive(tmp_path)
    on_gpu, on_cpu = coded_batch(path, "cuda"), coded_batch(path, "cpu")
    assert torch.equal(on_gpu[7], on_cpu[7])
    assert (on_gpu[6].int() - on_cpu[6].int()).abs().float().mean() <= 4.0


RGB_COLOUR = (200, 40, 90)


def rgb_coded_batch(tmp_path, decode: str) -> torch.Tensor:
    """An RGB-coded JPEG of RGB_COLOUR after 6 plain ones, through a loader: the batch."""
    files = labeled_files(2, 3) + [("train/c00/rgb.jpg", rgb_coded_jpeg(
        Image.new("RGB", (64, 48), RGB_COLOUR)))]
    path = write_archive(tmp_path / f"rgb-{decode}.tgz", files)
    images, _, fallbacks = evaluation_batch(path, decode, 32)
    if decode == "cuda":
        assert fallbacks == {"gpu_decoded": 6, "color_rgb": 1}
    colour = images[6].float().mean(dim=(1, 2))
    assert (colour - torch.tensor(RGB_COLOUR, dtype=torch.float)).abs().max() <= 4
    return images


def test_an_rgb_coded_jpeg_keeps_its_colours_on_the_cpu_path(tmp_path):
    rgb_coded_batch(tmp_path, "cpu")


@cuda
def test_an_rgb_coded_jpeg_goes_to_the_packers_and_keeps_its_colours(tmp_path):
    """On the GPU path the packers decode it (counted under "color_rgb"), to the CPU path's
    pixels exactly."""
    assert torch.equal(rgb_coded_batch(tmp_path, "cuda")[6],
                       rgb_coded_batch(tmp_path, "cpu")[6])


def cut_archive(tmp_path) -> str:
    """Six whole JPEGs of 2 classes and two cut inside their scan (at 90% and 60% of their
    bytes), headers whole: what the packers' screen passed to the GPU before it looked for
    the end marker."""
    whole = noisy_jpeg(class_level(1), 7, (64, 80))
    cut = [("train/c01/cut90.jpg", whole[: len(whole) * 9 // 10]),
           ("train/c00/cut60.jpg", whole[: len(whole) * 6 // 10])]
    assert all(gpu_screen(data, "RGB", Limits())[0] == "no_end_marker" for _, data in cut)
    return write_archive(tmp_path / "cut.tgz", labeled_files(2, 3) + cut)


@pytest.mark.parametrize("decode", ["cpu", pytest.param("cuda", marks=cuda)])
def test_jpegs_cut_inside_their_scan_are_skipped_as_truncated_on_either_path(tmp_path, decode):
    """What Pillow finds truncated the GPU path must not hand over half decoded: both paths
    skip the cut JPEGs, count them, and give the whole ones. (Before the screen looked for
    the end marker, the GPU path gave them: probe_codings.py.)"""
    with pytest.warns(UserWarning, match=r"skipped 2 members .*\{'truncated': 2\}"):
        images, labels, fallbacks = evaluation_batch(cut_archive(tmp_path), decode, 32)
    assert labels == [0, 0, 0, 1, 1, 1]
    assert_labels_match_pixels(images, torch.tensor(labels), tolerance=8)
    if decode == "cuda":
        assert fallbacks.get("gpu_decoded") == 6


@cuda
def test_camera_jpegs_decode_to_their_main_frame_on_the_gpu(tmp_path):
    """The GPU decoders take the main frame of each, none left to the packers."""
    path, count = camera_archive(tmp_path)
    with cuda_loader(path, "cuda") as loader:
        pairs = [(x.cpu(), y.cpu()) for x, y in loader]
        assert_labels_match_pixels(torch.cat([x for x, _ in pairs]),
                                   torch.cat([y for _, y in pairs]), tolerance=8)
        assert loader.stats.fallbacks == {"gpu_decoded": count}


@cuda
def test_a_loader_sends_jpegs_larger_than_the_old_arena_to_the_gpu_and_labels_them(tmp_path):
    """An archive of ~230 KB JPEGs (the arena held 192 KiB a slot): every one GPU-decoded,
    pixels still their label's."""
    files = [(f"t/c{k % 4:02d}/{k}.jpg", noisy_jpeg(class_level(k % 4), k)) for k in range(24)]
    path = write_archive(tmp_path / "a.tgz", files)
    with cuda_loader(path, "cuda") as loader:
        for _ in range(2):  # the counts are the epoch's
            pairs = [(x.cpu(), y.cpu()) for x, y in loader]
            assert_labels_match_pixels(torch.cat([x for x, _ in pairs]),
                                       torch.cat([y for _, y in pairs]), tolerance=8)
            assert loader.stats.fallbacks == {"gpu_decoded": 24}


@cuda
def test_jpegs_above_the_cap_go_to_the_gpu_where_the_hosts_memory_has_room(tmp_path,
                                                                            monkeypatch):
    """~1.2 MB JPEGs (1.5x their mean is above the 1 MiB a slot that any host gets): with
    room in the host's memory every one is GPU-decoded; with none (ARENA_MEMORY_SHARE 0) the
    arena holds 1 MiB a slot and the packers decode the rest, counted. Pixels their label's."""
    import imageloader.loader as loader_module
    files = [(f"t/c{k % 4:02d}/{k}.jpg", noisy_jpeg(class_level(k % 4), k, (1000, 1400)))
             for k in range(16)]
    assert min(len(data) for _, data in files) > ARENA_MAX_PER_IMAGE / ARENA_HEADROOM
    path = write_archive(tmp_path / "a.tgz", files)
    for share in (loader_module.ARENA_MEMORY_SHARE, 0.0):
        monkeypatch.setattr(loader_module, "ARENA_MEMORY_SHARE", share)
        with cuda_loader(path, "cuda") as loader:
            pairs = [(x.cpu(), y.cpu()) for x, y in loader]
            assert_labels_match_pixels(torch.cat([x for x, _ in pairs]),
                                       torch.cat([y for _, y in pairs]), tolerance=8)
            counts = loader.stats.fallbacks
            per_image = loader._pool.layout.fields["arena"][2][0] // 8  # (offset, dtype, shape)
        if share:
            assert counts == {"gpu_decoded": 16}
            assert per_image == int(ARENA_HEADROOM * os.path.getsize(path) / 16)
        else:
            assert per_image == ARENA_MAX_PER_IMAGE
            assert counts["arena_full"] > 0 and sum(counts.values()) == 16


@cuda
def test_cpu_share_mixes_cpu_and_gpu_decoded_images_in_every_batch(tmp_path):
    files = labeled_files(4, 16)  # JPEGs whose pixels say their class
    path = write_archive(tmp_path / "a.tgz", files)
    with cuda_loader(path, "cuda", options=Options(cpu_share=0.5)) as loader:
        for _ in range(3):  # later epochs reuse buffers that held packed bytes
            pairs = [(x.cpu(), y.cpu()) for x, y in loader]
            images = torch.cat([x for x, _ in pairs])
            labels = torch.cat([y for _, y in pairs])
            assert len(labels) == 64
            assert_labels_match_pixels(images, labels, tolerance=8)
            counts = loader.stats.fallbacks
            assert counts["cpu_share"] + counts["gpu_decoded"] == 64
            assert 16 <= counts["cpu_share"] <= 48


@cuda
def test_a_changed_share_reaches_the_packers_batch_by_batch(tmp_path):
    """As the trial of decode="auto" changes it: buffers handed out after the change carry it."""
    files = labeled_files(4, 64)  # 32 batches of 8 per epoch
    path = write_archive(tmp_path / "a.tgz", files)
    with cuda_loader(path, "cuda", options=Options(cpu_share=0.0)) as loader:
        control = loader.cpu_share
        control.share = 1.0
        for images, labels in loader:
            assert_labels_match_pixels(images.cpu(), labels.cpu(), tolerance=8)
        assert loader.stats.fallbacks == {"cpu_share": 256}
        control.share = 0.0
        list(loader)
        # Buffers handed out before the change keep their share: at most the pool's worth.
        assert loader.stats.fallbacks["gpu_decoded"] >= 256 - 8 * len(loader._pool.buffers)
        list(loader)
        assert loader.stats.fallbacks == {"gpu_decoded": 256}


@cuda
def test_cuda_decode_memory_is_flat_and_auto_says_what_it_chose(tmp_path):
    path = write_archive(tmp_path / "a.tgz", [(f"t/c{k % 2}/{k}.jpg", photo(k, (200, 150)))
                                              for k in range(40)])
    with cuda_loader(path, "auto", normalize=True) as loader:
        assert loader.decode == "cuda"
        readings = []
        for _ in range(8):
            for images, labels in loader:
                assert images.dtype == torch.float32 and images.is_cuda
            torch.cuda.synchronize()
            readings.append(torch.cuda.memory_reserved())
        assert readings[3] == readings[-1], readings
        chosen = loader.stats.decode.split("(")[1].split(",")[0]
        assert chosen == gpu_decoders_here()[0], loader.stats  # the preferred one installed


def test_decode_choice_on_a_cpu_device(labeled_archive):
    loader = ImageLoader(labeled_archive, device="cpu", decode="auto", workers=0)
    assert loader.decode == "cpu" and loader.stats.decode.startswith("cpu")
    with pytest.raises(ValueError, match="CUDA"):
        ImageLoader(labeled_archive, device="cpu", decode="cuda", workers=0)
    with pytest.raises(ValueError, match="decode"):
        ImageLoader(labeled_archive, device="cpu", decode="gpu", workers=0)
    for bad in (0, -5, 1.5, True):  # checked whatever the decode, as cpu_share
        with pytest.raises(ValueError, match="cpu_large must be"):
            ImageLoader(labeled_archive, device="cpu", workers=0, options=Options(cpu_large=bad))
    for bad in (0, "hw+nvjpg", "hw:x", "hw|hybrid|cuda", "hw|", 2.0, True):
        with pytest.raises(ValueError, match="gpu_lanes"):
            ImageLoader(labeled_archive, device="cpu", workers=0, options=Options(gpu_lanes=bad))


@pytest.mark.skipif(not has_triton(), reason="needs Triton")
@pytest.mark.parametrize("channels, count, max_side", [(3, 12, 70), (1, 12, 70), (3, 6, 400)],
                         ids=["rgb", "grey", "rgb-large-grids"])
def test_crop_kernel_matches_roi_align_under_the_triton_interpreter(channels, count, max_side):
    """The crop kernels (gpucrop.py), run by Triton's CPU interpreter: on mixed image sizes,
    whole / one-pixel / random boxes, flips and shuffled slots they give roi_align's pixels
    within one level (its rounding), and write only the slots they were given. Images of up
    to 400 px into 24 x 20: grids of up to 20 samples a bin."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(HERE.parent))
    done = subprocess.run([sys.executable, str(HERE / "crop_reference.py"), "cpu", "11",
                           str(count), str(channels), str(max_side), "24", "20"],
                          env=env, capture_output=True, text=True, timeout=240, cwd=HERE)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in result:
        pytest.skip(result["skip"])
    assert result["max"] <= 1 and result["mean"] <= 0.05 and result["untouched_kept"], result


def test_crop_choice():
    assert choose_crop("auto", torch.device("cpu")) == "roi_align"
    assert choose_crop("roi_align", torch.device("cpu")) == "roi_align"
    with pytest.raises(RuntimeError, match="Triton and a CUDA device"):
        choose_crop("triton", torch.device("cpu"))
    with pytest.raises(ValueError, match="gpu_crop"):
        choose_crop("fast", torch.device("cpu"))


@cuda
@pytest.mark.parametrize("seed, count, max_side", [(1, 40, 600), (2, 40, 600), (3, 40, 600),
                                                   (4, 6, 4000)])
def test_crop_kernel_matches_roi_align_on_cuda(seed, count, max_side):
    """As under the interpreter, at the training size; the last case with photos of up to
    4,000 px (grids of up to 18 samples a bin into 224 x 224)."""
    sys.path.insert(0, str(HERE))
    from crop_reference import compare
    result = compare("cuda", seed, count, 3, max_side, (224, 224))
    assert result["max"] <= 1 and result["mean"] <= 0.05 and result["untouched_kept"], result


@cuda
def test_triton_and_roi_align_crops_agree_on_a_packed_batch():
    """The whole GPU stage both ways, nvJPEG included: images of four sizes in one batch."""
    sizes = [(300, 200), (120, 90), (300, 200), (90, 160), (500, 375), (64, 48)]
    files = [photo(seed, size) for seed, size in enumerate(sizes)]
    buf, cpu = packed_batch(files, Augment.make(64, True))
    device = torch.device("cuda")
    results = {}
    for crop in ("triton", "roi_align"):
        stage = GpuDecode(cpu, None, device, available(device, "RGB"), crop=crop)
        images, labels = stage(Packed(buf))
        results[crop] = images.cpu().int()
        assert labels.tolist() == list(range(len(files)))
    difference = (results["triton"] - results["roi_align"]).abs()
    assert difference.max() <= 1 and difference.float().mean() <= 0.05


@cuda
def test_close_stops_the_decode_threads_of_a_suspended_iteration(tmp_path):
    """The probe's segfault: a generator over the loader outlived the `with` block; its
    prefetch threads went on merging batches in buffers that close() had unmapped."""
    import threading
    path = write_archive(tmp_path / "a.tgz", labeled_files(4, 10))
    with cuda_loader(path, "cuda") as loader:
        iteration = iter(loader)
        next(iteration)
    names = {thread.name for thread in threading.enumerate()}
    assert not names & {"imageloader-collect", "imageloader-prefetch"}, names
    assert next(iteration, None) is None


@cuda
def test_gpu_decode_children_are_niced_by_default(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 8))
    own = os.getpriority(os.PRIO_PROCESS, 0)
    with cuda_loader(path, "cuda") as loader:
        next(iter(loader))
        pids = [proc.pid for proc in loader._workers._procs]
        assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in pids} == {min(19, own + 10)}


def test_auto_crop_falls_back_to_roi_align_when_the_kernel_fails(monkeypatch, caplog):
    """A host where Triton imports but cannot compile (no C compiler): "auto" crops with
    roi_align instead, the same pixels as asking for roi_align; an explicit "triton" raises."""
    from imageloader import gpucrop
    files = [photo(seed, size) for seed, size in enumerate([(120, 90), (90, 160), (64, 48)])]
    buf, cpu = packed_batch(files, Augment.make(32, True))
    expected, _ = GpuDecode(cpu, None, torch.device("cpu"), cpu_jpeg_decoder(),
                            crop="roi_align")(Packed(buf))

    def broken(*args, **kwargs):
        raise RuntimeError("Failed to compile the launcher: no C compiler")
    monkeypatch.setattr(gpucrop, "crop_resize_flip", broken)
    for requested in ("auto", "triton"):
        stage = GpuDecode(cpu, None, torch.device("cpu"), cpu_jpeg_decoder(), crop="roi_align")
        stage.crop, stage._crop_chosen_by_us = "triton", requested == "auto"  # as on a GPU host
        if requested == "triton":
            with pytest.raises(RuntimeError, match="no C compiler"):
                stage(Packed(buf))
            continue
        with caplog.at_level("WARNING", logger="imageloader.gpudecode"):
            images, labels = stage(Packed(buf))
        assert stage.crop == "roi_align" and "roi_align from now on" in caplog.text
        assert torch.equal(images, expected) and labels.tolist() == [0, 1, 2]


def test_warm_launches_the_crops_once_and_falls_back_as_a_batch_would(monkeypatch, caplog):
    """GpuDecode.warm: the loader crops one small image before the first batch, so that
    Triton's first launch (~0.5 s) is paid while the workers start; where the kernel fails,
    "auto" changes to roi_align there, as the first batch would have, and an explicit
    "triton" is left for the first batch to raise; roi_align needs no warming."""
    from imageloader import gpucrop
    cpu = Decoder(Augment.make(32, True))
    calls = []
    monkeypatch.setattr(gpucrop, "crop_resize_flip",
                        lambda images, boxes, slots, out: calls.append((len(images), out.shape)))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    stage = GpuDecode(cpu, None, torch.device("cpu"), cpu_jpeg_decoder(), crop="roi_align")
    stage.warm()
    assert calls == []  # roi_align: nothing to build
    stage.crop, stage._crop_chosen_by_us = "triton", True  # as "auto" on a GPU host
    stage.warm()
    assert calls == [(1, (1, 32, 32, 3))]

    def broken(*args, **kwargs):
        raise RuntimeError("Failed to compile the launcher: no C compiler")
    monkeypatch.setattr(gpucrop, "crop_resize_flip", broken)
    stage._crop_chosen_by_us = False  # gpu_crop="triton": the first batch raises, not warm()
    stage.warm()
    assert stage.crop == "triton"
    stage._crop_chosen_by_us = True
    with caplog.at_level("WARNING", logger="imageloader.gpudecode"):
        stage.warm()
    assert stage.crop == "roi_align" and "roi_align from now on" in caplog.text


def test_the_preferred_nvimgcodec_decoder_is_the_engines_probe_and_lanes_reuse_it(
        monkeypatch):
    """Where the GPU has JPEG engines, the first lane's decoder is the one the probe made:
    one decoder and one probe for the default lanes (each decoder made cost ~0.5 s of the
    start, the probe ~1.3 s); without engines, nvImageCodec's choice of backends, and the
    lanes do not probe a second time."""
    from imageloader import gpujpeg
    made, probes = [], []

    def fake_init(self, device, mode, threads=None, engine="all", **kwargs):
        self.device, self.mode, self.engine, self.threads = device, mode, engine, threads
        self.without_engines = False
        made.append(engine)
    monkeypatch.setattr(NvImageCodecJpeg, "__init__", fake_init)
    cuda = torch.device("cuda", 0)

    def probe(device, mode, engines=True):
        probes.append(device)
        return NvImageCodecJpeg(device, mode, engine="hw") if engines else None
    monkeypatch.setattr(gpujpeg, "_engines_decoder", probe)
    preferred = gpujpeg._preferred_nvimgcodec(cuda, "RGB")
    assert preferred.engine == "hw" and made == ["hw"] and len(probes) == 1
    lanes = gpujpeg.lanes(preferred)
    assert [lane.engine for lane in lanes] == ["hw", "hw"] and lanes[0] is preferred
    assert made == ["hw", "hw"] and len(probes) == 1  # the second lane's decoder, no probe

    made.clear(), probes.clear()
    monkeypatch.setattr(gpujpeg, "_engines_decoder",
                        lambda device, mode: probe(device, mode, engines=False))
    preferred = gpujpeg._preferred_nvimgcodec(cuda, "RGB")
    assert preferred.engine == "all" and made == ["all"]
    assert [lane.engine for lane in gpujpeg.lanes(preferred)] == ["all"]
    assert len(probes) == 1  # the lanes knew: no second probe on a GPU without engines


def varied_jpegs() -> list[bytes]:
    """Photos as collections hold them: sizes from tiny to 5 MP, every chroma subsampling,
    grayscale, EXIF orientations (a camera's portrait and upside-down shots, a mirror), and
    what cameras and phones write besides: a multi-picture file, an EXIF thumbnail, restart
    markers (conftest.camera_jpeg), and a baseline JPEG with a scan per component."""
    specs = [((64, 48), 2, 1), ((500, 375), 2, 1), ((375, 500), 1, 1), ((333, 251), 0, 1),
             ((2600, 1950), 2, 1), ((1700, 2400), 0, 1), ((97, 301), 1, 1), ((250, 250), 2, 1),
             ((640, 427), 2, 6), ((480, 360), 2, 8), ((300, 200), 0, 3), ((427, 320), 1, 5)]
    files = []
    for seed, (size, subsampling, orientation) in enumerate(specs):
        image = Image.open(io.BytesIO(photo(seed, size, fmt="PNG")))
        files.append(exif_oriented(image, orientation, quality=90, subsampling=subsampling))
    # Grey, sampling factors 1x1 (Pillow's default), 2x2 and 2x1: the hardware engines got
    # the last two wrong (decode.gray_sampling_at)
    for seed, size, subsampling in ((99, (320, 240), -1), (98, (333, 251), -1),
                                    (97, (658, 241), 2), (96, (337, 250), 1)):
        files.append(encode(Image.open(io.BytesIO(photo(seed, size, fmt="PNG"))).convert("L"),
                            "JPEG", subsampling=subsampling))
    for seed, kind in enumerate(camera_kinds_here(), 100):
        main = Image.open(io.BytesIO(photo(seed, (448, 336), fmt="PNG")))
        other = Image.open(io.BytesIO(photo(seed + 10, (160, 120), fmt="PNG")))
        files.append(camera_jpeg(kind, main, other))
    # libjpeg-turbo's: a baseline JPEG whose components come in a scan each (jpegtran -scans)
    files.append(DATA.joinpath("scans.jpg").read_bytes())
    return files


def gpu_decoders_here():
    return [d.name for d in available(torch.device("cuda"), "RGB")] \
        if torch.cuda.is_available() else []


@cuda
@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("train", [True, False])
def test_every_gpu_decoder_matches_the_cpu_path(name, train):
    """Each installed decoder through the whole GPU stage (twice: nvImageCodec refills the
    images it kept) against the same stage on the CPU with Pillow's full decode: sizes up to
    5 MP, every subsampling, grayscale; same boxes, flips and resampling, so what differs is
    the decoder (chroma replication against interpolation). The CPU path itself decodes large
    JPEGs at a reduced scale (draft) and differs more there: ~11 levels on the 5 MP textured
    photo, the same for every GPU decoder (seen on the H200)."""
    if name not in gpu_decoders_here():
        pytest.skip(f"{name} is not installed here")
    assert_gpu_stage_matches_the_cpu_path(available(torch.device("cuda"), "RGB", name), train,
                                          name)


@cuda
@pytest.mark.parametrize("train", [True, False])
def test_grey_batches_from_the_gpu_match_the_cpu_path(train):
    """mode="L": colour JPEGs of every subsampling and grey ones of every sampling factor,
    decoded into grey by the preferred GPU decoder, against the stage on the CPU (into grey,
    nvImageCodec had only been asked for JPEGs alone: probe_codings.py's sweep)."""
    decoders = available(torch.device("cuda"), "L", first=True)
    if not decoders:
        pytest.skip("no GPU JPEG decoder is installed here")
    assert_gpu_stage_matches_the_cpu_path(decoders, train, decoders[0].name, mode="L")


def assert_gpu_stage_matches_the_cpu_path(decoders, train: bool, name: str, mode: str = "RGB",
                                          device: str = "cuda") -> None:
    """`decoders` through the whole GPU stage on varied_jpegs(), twice (the second time into
    the images nvImageCodec kept), against the stage on the CPU with Pillow's full decode."""
    files = varied_jpegs()
    buf, cpu = packed_batch(files, Augment.make(224, train), arena=32 << 20, mode=mode)
    reference = GpuDecode(cpu, None, torch.device("cpu"), cpu_jpeg_decoder(mode),
                          crop="roi_align")(Packed(buf))[0]
    stage = GpuDecode(cpu, None, torch.device(device), decoders)
    for _ in range(2):
        images, labels = stage(Packed(buf))
        if device == "cuda":
            torch.cuda.synchronize()
        assert labels.tolist() == list(range(len(files)))
        for slot in range(len(files)):
            ours, theirs = images[slot].cpu().int(), reference[slot].int()
            assert (ours - theirs).abs().float().mean() <= 4.0, (name, slot)
            if train:  # the neighbour's crop: what a wrong box or slot would give
                other = reference[(slot + 1) % len(files)].int()
                assert (ours - other).abs().float().mean() > 12.0, (name, slot)
    assert FALLBACK + "gpu_refused" not in stage.take_counts()  # all decoded on the GPU


def nvimgcodec_engine(engine: str):
    """nvImageCodec on one engine of this GPU, or a skip saying why not; "hw|hybrid": a lane
    splitting each batch between two, half of it to the helper at first; "hw@python": through
    its Python API (kept images) instead of one C call per batch (nvbatch)."""
    if "nvimgcodec" not in gpu_decoders_here():
        pytest.skip("nvimgcodec is not installed here")
    if "|" in engine:
        first, helper = engine.split("|")
        return SplitJpeg(nvimgcodec_engine(first), nvimgcodec_engine(helper), share=0.5)
    engine, _, way = engine.partition("@")
    # "@regions": large images' crops decoded as regions (nvbatch's experiment), here every
    # image's
    decoder = NvImageCodecJpeg(torch.device("cuda"), "RGB", engine=engine,
                               one_call=False if way == "python" else None,
                               regions_from=1 if way == "regions" else None)
    if engine == "hw" and not has_jpeg_engines(decoder):
        pytest.skip("this GPU has no hardware JPEG engines")
    return decoder


@cuda
@pytest.mark.parametrize("engine", ENGINES + ("hw|hybrid", "hw|cuda", "hw@python", "all@python",
                                    "hw@regions", "cuda@regions", "hw|cuda@pools"))
def test_each_nvimgcodec_engine_matches_the_cpu_path(engine, monkeypatch):
    """The lanes' engines (hardware, CUDA with Huffman on the GPU, nvImageCodec's choice) on
    sizes up to 5 MP, every subsampling and grayscale, through the whole GPU stage; "@pools":
    with IMAGELOADER_DECODER_POOLS=1 (preallocated and padded decoder buffers, an experiment)."""
    if engine.endswith("@pools"):
        monkeypatch.setenv("IMAGELOADER_DECODER_POOLS", "1")
        engine = engine.removesuffix("@pools")
    assert_gpu_stage_matches_the_cpu_path([nvimgcodec_engine(engine)], True, engine)


@cuda
@pytest.mark.parametrize("engine", ["hw", "hw@python"])
@pytest.mark.parametrize("in_one_call", [False, True])
def test_the_hardware_lane_decodes_what_the_engines_refuse_with_the_other_backends(
        engine, in_one_call, monkeypatch):
    """The engines take baseline JPEGs only; a progressive one reaching them is decoded by
    the other backends: in that same call by the hybrid backend (by default), or with
    IMAGELOADER_GPU_PROGRESSIVE=0 after the engines' call (the packers then route progressive
    JPEGs to the CPU; a lane must not depend on it). A first call of two JPEGs must not leave
    later, larger batches to the hybrid backend (nvbatch.c's LOAD_HINT_ALL)."""
    if in_one_call:
        monkeypatch.delenv(GPU_PROGRESSIVE, raising=False)
    else:
        monkeypatch.setenv(GPU_PROGRESSIVE, "0")
    decoder = nvimgcodec_engine(engine)
    progressive = [encode(Image.open(io.BytesIO(photo(seed, (96, 64), fmt="PNG"))), "JPEG",
                          progressive=True, quality=90) for seed in (2, 3)]
    for files in ([photo(1, (120, 90)), progressive[0]],
                  [photo(k, (100 + 4 * k, 80)) for k in range(5, 12)] + progressive):
        refused = decoder.refused
        images = decoder.decode([np.frombuffer(data, np.uint8) for data in files])
        torch.cuda.synchronize()
        # counted when decoded again (GpuDecode reports it); none in one call
        assert decoder.refused - refused == (0 if in_one_call else sum(
            data in progressive for data in files))
        for data, image in zip(files, images):
            assert image is not None
            ours = np.asarray(torch.as_tensor(image, device="cuda").cpu()).astype(int)
            pillow = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).transpose(2, 0, 1)
            # Chroma replicated (the engines') against Pillow's interpolation, at sharp colour
            # edges: ~5.6 levels on average for the 120x90 one (H200); a wrong image is ~60.
            assert ours.shape == pillow.shape and np.abs(ours - pillow).mean() <= 10.0


@cuda
def test_lanes_give_the_same_batches_as_one_lane(tmp_path):
    """Three lanes decoding different batches at once, and one lane splitting each batch
    between the engines and a hybrid or a CUDA helper: the same batches in the same order as one lane
    (evaluation: archive order), every image once, pixels within the decoders' difference;
    the stats name the lanes."""
    files = [(f"t/c{k % 4}/{k}.jpg", photo(k, (96 + 8 * (k % 5), 72))) for k in range(80)]
    path = write_archive(tmp_path / "a.tgz", files)
    got = {}
    specs = [1, 3]
    if "nvimgcodec" in gpu_decoders_here() and has_jpeg_engines(nvimgcodec_engine("all")):
        # one lane, each batch split between two decoders (the helper's end of it differs)
        specs += ["hw|hybrid:2", "hw|cuda"]
    for lanes in specs:
        with cuda_loader(path, "cuda", train=False, options=Options(gpu_lanes=lanes)) as loader:
            assert len(loader._gpu) == (3 if lanes == 3 else 1)
            for _ in range(2):
                got[lanes] = [(x.cpu(), y.cpu()) for x, y in loader]
                assert loader.stats.fallbacks["gpu_decoded"] == 80
            if lanes != 1 and "nvimgcodec" in loader.stats.decode:
                assert "lanes: " in loader.stats.decode, loader.stats.decode
    assert [len(y) for _, y in got[1]] == [8] * 10
    for spec in specs[1:]:
        for (a, la), (b, lb) in zip(got[1], got[spec]):
            assert torch.equal(la, lb)
            assert (a.int() - b.int()).abs().float().mean() <= 2.0


@cuda
@pytest.mark.parametrize("decode", ["cuda", "cpu"])
def test_the_next_epochs_first_batches_are_made_before_it_is_asked_for(tmp_path, decode):
    """An epoch read to its end leaves the prefetcher going on into the next one (epoch.py):
    with GPU decoding its lanes decode the next epoch's first batches before iter(loader)
    asks for them; with CPU decoding they are copied ahead. Epochs in a row still give the
    same batches (evaluation: archive order), each epoch's stats are its own, and closing the
    loader ends the stream's threads."""
    import threading
    files = [(f"t/c{k % 4}/{k}.jpg", photo(k, (96 + 8 * (k % 5), 72))) for k in range(80)]
    path = write_archive(tmp_path / "a.tgz", files)
    epochs, before = [], set(threading.enumerate())  # another test's threads are not ours
    with cuda_loader(path, decode, train=False, options=Options(gpu_lanes=2)) as loader:
        for epoch in range(3):
            epochs.append([(x.cpu(), y.cpu()) for x, y in loader])
            assert loader.stats.epoch == epoch and loader.stats.samples == 80
            if decode == "cuda":
                assert loader.stats.fallbacks["gpu_decoded"] == 80
                deadline = time.monotonic() + 10
                while loader.prefetcher.backlog() == 0 and time.monotonic() < deadline:
                    time.sleep(0.01)
                assert loader.prefetcher.backlog() > 0  # the next epoch's, decoded already
        threads = [t for t in set(threading.enumerate()) - before
                   if t.name.startswith(("imageloader-prefetch", "imageloader-collect"))]
        assert bool(threads) == (decode == "cuda")
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert [len(y) for _, y in epochs[0]] == [8] * 10
    for later in epochs[1:]:  # a batch's lane may differ: "2" is one of the engines, one CUDA
        for (a, la), (b, lb) in zip(epochs[0], later, strict=True):
            assert torch.equal(la, lb) and (a.int() - b.int()).abs().float().mean() <= 2.0


@cuda
@pytest.mark.parametrize("name", DECODERS + tuple(
    f"nvimgcodec:{e}" for e in ENGINES[1:] + ("hw|hybrid", "hw|cuda", "hw@python", "all@python")))
def test_a_busy_gpu_never_lets_the_next_decode_overwrite_images_before_their_crops(name):
    """nvImageCodec decodes each batch into the buffer (one C call per batch) or the images
    (its Python API) it kept from the last one. With the
    side stream busy (a long kernel queued first), batch A's crops wait behind it; batch B's
    decode, submitted right after, must wait for them (stream order), or A's crops would read
    B's pixels. The result must equal what an idle GPU gives. Also for each lane engine."""
    device = torch.device("cuda")
    if ":" in name:
        decoders = [nvimgcodec_engine(name.split(":")[1])]
    elif name not in gpu_decoders_here():
        pytest.skip(f"{name} is not installed here")
    else:
        decoders = available(device, "RGB", name)
    if isinstance(decoders[0], SplitJpeg):
        # The same JPEGs to each decoder in every call (the helper's pixels may differ from
        # the engines' by a level): its share is held, not steered.
        decoders[0]._steer = lambda *measured: None
    # The last one large (over twice the median bytes): a CUDA helper's part of the batch.
    sizes = [(320 + 8 * seed, 240) for seed in range(7)] + [(1280, 960)]
    files_a = [photo(seed, size) for seed, size in enumerate(sizes)]
    files_b = [photo(100 + seed, size) for seed, size in enumerate(sizes)]
    augment = Augment.make(64, True)
    (buf_a, cpu), (buf_b, _) = packed_batch(files_a, augment), packed_batch(files_b, augment)
    idle = GpuDecode(cpu, None, device, decoders)
    expected_a = idle(Packed(buf_a))[0].clone()
    expected_b = idle(Packed(buf_b))[0].clone()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(int(2e8))  # ~100 ms of one SM spinning: the stream is busy
        got_a = idle(Packed(buf_a))[0]
        got_b = idle(Packed(buf_b))[0]
    side.synchronize()
    assert torch.equal(got_a, expected_a) and torch.equal(got_b, expected_b)


@cuda
def test_auto_decode_times_gpu_and_cpu_decoding_while_training_and_keeps_one(tmp_path):
    from imageloader.share import TRIAL_WARMUP, TrialShare
    path = write_archive(tmp_path / "a.tgz", labeled_files(4, 64))  # 32 batches of 8
    with ImageLoader(path, batch_size=8, size=32, device="cuda", seed=5,
                     normalize=False) as loader:  # decode="auto" is the default
        trial = loader.cpu_share
        assert loader.decode == "cuda" and isinstance(trial, TrialShare)
        next(iter(loader))  # starts the workers and makes the buffers
        assert trial.skip == len(loader._runtime.pool.buffers)  # all that can be in flight
        assert trial.warmup == TRIAL_WARMUP
        trial.skip, trial.window, trial.warmup = 2, 4, 6  # a trial that fits in 3 epochs
        for _ in range(3):
            for images, labels in loader:
                assert_labels_match_pixels(images.cpu(), labels.cpu(), tolerance=8)
        assert trial.chosen in (0.0, 1.0), trial.timed
        assert set(loader.stats.share_rates) == {0.0, 1.0}
        assert loader.stats.cpu_share == trial.chosen
        assert loader.workers % 8 == 0  # as many packers as CPU decoding would have workers


@cuda
def test_auto_decode_does_not_try_cpu_decoding_that_cannot_win(tmp_path):
    """The packers time a few images through the CPU path while the GPU decodes; where even
    every packer at that pace would feed fewer batches a second than the GPU did, the trial
    keeps the GPU without a CPU turn (here the bound is made tiny: one packer's pace spread
    over a huge batch)."""
    path = write_archive(tmp_path / "a.tgz", labeled_files(4, 64))  # 32 batches of 8
    # Two packers: few buffers, so that they come back with their probes' answers well
    # before the GPU's window (its ~10 buffers skipped, then 8 batches) is timed.
    with ImageLoader(path, batch_size=8, size=32, device="cuda", seed=5, workers=2,
                     normalize=False) as loader:
        trial = loader.cpu_share
        next(iter(loader))
        assert trial.skip == len(loader._runtime.pool.buffers) <= 12
        trial.window, trial.min_probes, trial.warmup = 8, 4, 0
        trial.decoders, trial.batch_size = 1, 10 ** 4  # ~1 batch/s at most
        decoded = Counter()
        for _ in range(3):
            for images, labels in loader:
                assert_labels_match_pixels(images.cpu(), labels.cpu(), tolerance=8)
            decoded.update(loader.stats.fallbacks)
        assert trial.chosen == 0.0 and set(loader.stats.share_rates) == {0.0}
        assert 0 < loader.stats.cpu_bound < loader.stats.share_rates[0.0]
        assert "cpu_share" not in decoded and decoded["gpu_decoded"] == 3 * 256  # no CPU turn


@cuda
@pytest.mark.parametrize("gpu_bound", [True, False])
def test_auto_decode_sends_large_jpegs_to_the_cpu_only_for_a_gpu_bound_consumer(tmp_path,
                                                                               gpu_bound):
    """Once decode="auto" kept GPU decoding, a consumer whose GPU runs behind its host (here
    each step queues ~20 ms of GPU work and waits only for the one two steps back) gets the
    large JPEGs decoded by the packers (share.LargeOnCpu; here every image counts as large);
    one that waits for each step's end keeps them all on the GPU. Pixels and labels stay right
    either way."""
    path = write_archive(tmp_path / "a.tgz", labeled_files(4, 64))  # 32 batches of 8
    with ImageLoader(path, batch_size=8, size=32, device="cuda", seed=5, workers=2,
                     normalize=False) as loader:
        trial = loader.cpu_share
        next(iter(loader))
        trial.window, trial.min_probes, trial.warmup = 8, 4, 0
        trial.decoders, trial.batch_size = 1, 10 ** 4  # no CPU turn (as above)
        trial.large.pixels, trial.large.window, trial.large.give_up_wait = 1, 4, 1.0
        decoded, steps = Counter(), []
        for _ in range(4):
            epoch = []
            for images, labels in loader:
                torch.cuda._sleep(int(4e7))  # the model's step: ~20 ms on the GPU
                steps.append(torch.cuda.Event())
                steps[-1].record()
                if not gpu_bound:
                    torch.cuda.synchronize()  # e.g. a loss printed every step
                elif len(steps) > 2:
                    # A GPU-bound loop's host runs ahead, but only so far (CUDA's launch
                    # queue holds ResNet-50's host within a step of its GPU): two steps here.
                    steps[-3].synchronize()
                epoch.append((images, labels))  # checked after the epoch: .cpu() would wait
            for images, labels in epoch:
                assert_labels_match_pixels(images.cpu(), labels.cpu(), tolerance=8)
            decoded.update(loader.stats.fallbacks)
        assert trial.chosen == 0.0
        if gpu_bound:
            assert trial.large.state == "on" and loader.stats.cpu_large == 1, trial.large.windows
            assert decoded["cpu_large"] > 0
        else:
            assert trial.large.state == "off" and loader.stats.cpu_large == 0, trial.large.windows
            assert "cpu_large" not in decoded and decoded["gpu_decoded"] == 4 * 256


@cuda
@pytest.mark.parametrize("workers", [0, 2])
def test_drop_last_batches_stay_full_when_an_image_fails_both_decoders(tmp_path, monkeypatch,
                                                                       workers):
    """A JPEG whose headers pass the packers' screen but whose Huffman table is bogus: the GPU
    decoder refuses it (made sure of here), Pillow too, and GpuDecode drops its row. Its
    batch once came out short mid-epoch with drop_last=True (CUDA graphs and torch.compile
    need static shapes); now the next rows fill it, in archive order (evaluation), and the
    image is counted."""
    bad = bogus_huffman_jpeg(photo(7, (64, 48)))
    assert gpu_screen(bad, "RGB", Limits())[0] is None
    files = labeled_files(3, 7)
    files = files[:5] + [("train/c01/bad.jpg", bad)] + files[5:]
    path = write_archive(tmp_path / "a.tgz", files)
    def refusing(decode):
        def decode_all_but_the_bad_one(datas, **kw):
            ok = [d for d in datas if len(d) != len(bad)]
            decoded = iter(decode(ok, **kw) if ok else [])
            return [None if len(d) == len(bad) else next(decoded) for d in datas]
        return decode_all_but_the_bad_one

    def refusing_in_one_call(decode_at):  # the lanes' way where nvbatch builds
        def all_but_the_bad_one(starts, lengths, **kw):
            batch = decode_at(starts, lengths, **kw)
            if batch is not None:
                batch.done &= lengths != len(bad)
            return batch
        return all_but_the_bad_one

    with cuda_loader(path, "cuda", drop_last=True, train=False, workers=workers) as loader:
        for lane in loader._gpu:
            monkeypatch.setattr(lane.jpeg, "decode", refusing(lane.jpeg.decode))
            if hasattr(lane.jpeg, "decode_at"):
                monkeypatch.setattr(lane.jpeg, "decode_at",
                                    refusing_in_one_call(lane.jpeg.decode_at))
        for _ in range(2):
            with pytest.warns(UserWarning, match="skipped 1 member"):
                batches = [(x.cpu(), y.cpu()) for x, y in loader]
            assert [len(y) for _, y in batches] == [8, 8]
            labels = torch.cat([y for _, y in batches])
            good = [int(name.split("/")[1][1:]) for name, _ in files if name != "train/c01/bad.jpg"]
            assert labels.tolist() == good[:16]
            assert_labels_match_pixels(torch.cat([x for x, _ in batches]), labels, tolerance=8)
            assert sum(loader.stats.skipped.values()) == 1


def photo_archive(folder: Path, images: int) -> Path:
    """make_imagenet_like.py's varied photos (250-2,600 px, any aspect, some progressive),
    8 classes: what the benchmarks read, small."""
    path = folder / "photos.tgz"
    subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "bench" /
                                        "make_imagenet_like.py"), "--out", str(path),
                    "--images", str(images), "--classes", "8", "--sizes", "photos"],
                   check=True, capture_output=True)
    return path


def class_counts(path: Path) -> Counter:
    with tarfile.open(path) as tar:
        return Counter(Path(m.name).parent.name for m in tar if m.isfile())


def assert_every_photo_once_per_epoch(path: Path, device: str, decode: str, epochs: int = 2):
    expected = class_counts(path)
    with ImageLoader(str(path), batch_size=256, size=224, device=device, decode=decode,
                     seed=1) as loader:
        for _ in range(epochs):
            labels = torch.cat([y.cpu() for _, y in loader]).tolist()
            assert Counter(loader.vocab.classes[k] for k in labels) == expected
            assert sum(loader.stats.skipped.values()) == 0
        assert loader.stats.decode.startswith(decode)


@cuda
@pytest.mark.parametrize("regions_from", [None, "1000000"])
def test_a_photo_archive_in_batches_of_256_gives_every_image_once_per_epoch(
        tmp_path, monkeypatch, regions_from):
    """The default GPU path (lanes, packers, one C call) on the benchmarks' photos: the other
    CUDA tests decode a few small images per batch, and 5291009's freed sizes (read by C after
    another thread reused them) failed every benchmark on photos while they all passed."""
    if regions_from:
        monkeypatch.setenv("IMAGELOADER_REGIONS_FROM", regions_from)
    assert_every_photo_once_per_epoch(photo_archive(tmp_path, 2048), "cuda", "cuda")


@cuda
def test_a_newer_iterator_stops_the_decode_threads_of_the_older(tmp_path):
    """With decode="cuda" the older iterator's threads once went on changing the worker pool's
    state beside the newer one's, and its next() waited for the whole timeout."""
    import threading
    import time
    path = write_archive(tmp_path / "a.tgz", labeled_files(3, 16))
    with cuda_loader(path, "cuda", options=Options(timeout=30, lookahead=False)) as loader:
        first = iter(loader)
        next(first)
        second = iter(loader)
        # The first one's collect/prefetch threads stopped. (A split lane's helper thread is
        # the loader's, not an iterator's: it ends with the loader, see
        # test_a_dropped_split_lane_ends_its_helper_thread.)
        assert not [t for t in threading.enumerate() if t.name.startswith("imageloader-")
                    and not t.name.startswith("imageloader-split") and t.is_alive()]
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="newer"):
            next(first)
        assert time.monotonic() - start < 5
        labels = torch.cat([y.cpu() for _, y in second])
        assert sorted(labels.tolist()) == sorted(k for k in range(3) for _ in range(16))
        assert loader._pool.in_use() == 0


def check_decode_script():
    """scripts/check_decode.py, imported from its file (scripts/ is not a package)."""
    import importlib.util
    path = Path(__file__).parents[1] / "scripts" / "check_decode.py"
    spec = importlib.util.spec_from_file_location("check_decode", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cuda
def test_check_decode_script_passes_on_varied_and_generated_photos(tmp_path):
    """scripts/check_decode.py on the varied JPEGs (5 MP, every subsampling, EXIF, gray,
    camera files) beside make_imagenet_like's photos (some progressive, large ones): both
    paths give every image with its label, each within the tolerance, the worst named."""
    script = check_decode_script()
    photos = photo_archive(tmp_path, 48)
    varied = write_archive(tmp_path / "varied.tgz", [
        (f"v/c{k % 8}/{k:02d}.jpg", data) for k, data in enumerate(varied_jpegs())])
    out = tmp_path / "report.json"
    args = script.get_args_parser().parse_args([
        "--data", str(varied), str(photos), "--images", "0", "--batch-size", "8",
        "--workers", "2", "--out", str(out)])
    assert script.main(args) == 0
    report = json.loads(out.read_text())
    assert report["images"] == len(varied_jpegs()) + 48 and report["over_tolerance"] == 0
    assert report["cuda"]["decode"].startswith("cuda") and report["cpu"]["decode"] == "cpu (Pillow)"
    assert report["cuda"]["fallbacks"]["gpu_decoded"] > 0
    assert report["worst"][0]["member"].split(": ")[0] in (str(varied), str(photos))
