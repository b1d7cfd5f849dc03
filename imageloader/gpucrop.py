"""Training crops of decode="cuda" in one launch pair: every image's box, resized and flipped,
read straight from nvJPEG's uint8 output into the uint8 batch.

The reference is torchvision's roi_align (aligned=True, adaptive sampling ratio) on float copies
of the images, which gpudecode.py keeps for the CPU and for hosts without Triton. roi_align
needed a float32 copy of each full image (4x its bytes), a stack of same-sized images, one call
per distinct image size, then a flip and a rounding pass: ~2.5 ms of GPU per 256-image batch
on an H200, beside a ResNet-18 step of ~19 ms. This kernel reads only the pixels its samples
touch and writes each output byte once, whatever the mix of image sizes.

Per output pixel roi_align averages grid_h x grid_w bilinear samples, grid = ceil(box / output)
per axis (its edge rules included): an area filter on downscaling. The samples of one output
row share their source rows and those of one output column their source columns, so the
average is a sum over the pixel's source window of row weight x column weight. A first kernel
computes each output line's weights (a line of g samples touches at most g + 1 source lines),
the second reads each window pixel once: 0.48 against 0.65 ms of GPU per 256 photos, 0.38
against 0.43 for 500x375 (H200, bench_gpu_crop.py; one load per bilinear corner before).
"""
from __future__ import annotations

import threading

import numpy as np
import torch

from .nvbatch import Decoded
from .prefetch import small_to_device

try:
    import triton
    import triton.language as tl
except ImportError:  # torch wheels for CUDA ship Triton; elsewhere gpudecode uses roi_align
    triton = None

BLOCK = 256  # output pixels per program
# Decode lanes launch from several threads; Triton compiles a kernel on its first launch and
# caches it, and two threads compiling the same one at once is not a case it promises to
# handle. A launch is a few tens of microseconds: one at a time costs nothing measurable.
_LAUNCH = threading.Lock()
TABLE_COLUMNS = 12
# Taps per output line beyond its grid of g samples: they touch at most g + 1 source lines, and
# one more leaves room for float rounding at line boundaries.
EXTRA_TAPS = 2


def available(device: torch.device) -> bool:
    """Whether the fused kernel can run for this device."""
    return triton is not None and device.type == "cuda"


def crop_resize_flip(images: list, boxes: np.ndarray, slots: list[int],
                     out: torch.Tensor) -> None:
    """out[slots[i]] = images[i] (uint8, C x H x W with any strides) cropped to boxes[i] =
    (l, t, r, b, flip), resized to out's (H, W) and flipped where flip > 0.5; out is
    (N, H, W, C) uint8. An image is a tensor or anything with a CUDA array interface
    (nvImageCodec's images): see `image_geometry`.

    Launched on the current stream, where the decoder's outputs were made ready: the kernel
    reads them through raw pointers, so they must stay allocated until it has run. Both the
    caching allocator and nvImageCodec (cudaFreeAsync on the decode stream) free memory in
    stream order, hence it is enough that the images were made on this stream."""
    count = len(images)
    if count == 0:
        return
    out_h, out_w, channels = out.shape[1:]
    ints, floats = _image_table(images, boxes, slots, out_h, out_w)
    taps = ints[:, 4:6] + EXTRA_TAPS  # per output row / column: its weights' row width
    lengths = taps * np.array([out_h, out_w])
    ends = np.cumsum(lengths.reshape(-1))
    ints[:, 10:12] = (ends - lengths.reshape(-1)).reshape(-1, 2)
    out_pow2 = triton.next_power_of_2(max(out_h, out_w))
    # Triton's interpreter (TRITON_INTERPRET=1, the CPU tests) takes the CPU tables as they are.
    ints, box = (small_to_device(part, out.device) for part in (ints, floats))
    # Scratch for the weights, from the caching allocator on this stream: freed on return, it
    # is reused only by work queued after these kernels on the same stream.
    weights = torch.empty(int(ends[-1]), dtype=torch.float32, device=out.device)
    starts = torch.empty((count, 2, out_pow2 + 1), dtype=torch.int32, device=out.device)
    with _LAUNCH:
        _axis_weights_kernel[(count, 2)](ints, box, weights, starts, out_h, out_w,
                                         COLUMNS=TABLE_COLUMNS, EXTRA=EXTRA_TAPS,
                                         OUT_POW2=out_pow2)
        _weighted_crop_kernel[(count, triton.cdiv(out_h * out_w, BLOCK))](
            ints, weights, starts, out, out_h, out_w, channels, COLUMNS=TABLE_COLUMNS,
            EXTRA=EXTRA_TAPS, OUT_POW2=out_pow2, BLOCK=BLOCK,
            CHANNELS_POW2=triton.next_power_of_2(channels))


def image_geometry(image) -> tuple[int, int, int, int, int, int]:
    """(address, height, width, channel, row and column strides in bytes) of a uint8 image
    laid out C x H x W: a tensor (any strides), or an object with a CUDA array interface of
    shape (C, H, W) (nvImageCodec's planar images; strides None means contiguous), or an
    nvbatch.Decoded, which carries it."""
    if isinstance(image, Decoded):
        return image.geometry
    if isinstance(image, torch.Tensor):
        channels, height, width = image.shape
        return (image.data_ptr(), height, width, *image.stride())
    face = image.__cuda_array_interface__
    channels, height, width = face["shape"]
    strides = face.get("strides") or (height * width, width, 1)
    return (face["data"][0], height, width, *strides)


# EXIF orientation (1-8) as the view that shows the stored image upright: (transpose, then
# flip its rows, flip its columns), as Pillow's ImageOps.exif_transpose turns the pixels
# (e.g. 6, "rotate 90 clockwise": upright(y, x) = stored(H-1-x, y), the transpose flipped
# left-right). Values outside 1-8 are upright, as Pillow leaves them.
ORIENTATION_VIEWS = {1: (False, False, False), 2: (False, False, True),
                     3: (False, True, True), 4: (False, True, False),
                     5: (True, False, False), 6: (True, False, True),
                     7: (True, True, True), 8: (True, True, False)}


def _orientation_view(orientation) -> tuple[bool, bool, bool]:
    """ORIENTATION_VIEWS' (transpose, flip rows, flip columns); as stored outside 1-8."""
    return ORIENTATION_VIEWS.get(int(orientation), (False, False, False))


def upright_geometry(geometry: np.ndarray, orientations: np.ndarray) -> np.ndarray:
    """Geometry rows (image_geometry's, one per image) of the upright views of the stored
    images with these EXIF orientations: the same pixels read with their axes swapped and
    negative strides from the far end, so that the crops read the image upright and nothing
    is copied or turned first."""
    orientations = np.asarray(orientations)
    rows = np.asarray(geometry, np.int64).reshape(-1, 6)
    if (orientations == 1).all():  # nearly every batch
        return rows
    rows = rows.copy()
    for orientation in np.unique(orientations):
        transpose, flip_rows, flip_cols = _orientation_view(orientation)
        which = orientations == orientation
        part = rows[which]
        if transpose:
            part[:, [1, 2]] = part[:, [2, 1]]
            part[:, [4, 5]] = part[:, [5, 4]]
        for flip, size, stride in ((flip_rows, 1, 4), (flip_cols, 2, 5)):
            if flip:
                part[:, 0] += (part[:, size] - 1) * part[:, stride]
                part[:, stride] = -part[:, stride]
        rows[which] = part
    return rows


def upright_tensor(image: torch.Tensor, orientation: int) -> torch.Tensor:
    """A (C, H, W) image upright, as upright_geometry reads it (a transpose is a view; a
    flip copies): for the crops without Triton and evaluation's resize."""
    transpose, flip_rows, flip_cols = _orientation_view(orientation)
    if transpose:
        image = image.transpose(-1, -2)
    dims = [d for d, flip in ((-2, flip_rows), (-1, flip_cols)) if flip]
    return image.flip(dims) if dims else image


def _image_table(images, boxes, slots, out_h, out_w) -> tuple[np.ndarray, np.ndarray]:
    """`images` as crop_resize_flip takes them. Per image: int64 (pointer, height, width, slot,
    grid_h, grid_w, flip, channel stride, row stride, column stride, and two places for the
    offsets of its row and column weights) and float32 (left, top, bin_h, bin_w). Sampling
    grids as roi_align computes them, in float32."""
    ints = np.empty((len(images), TABLE_COLUMNS), np.int64)
    geometry = images if isinstance(images, np.ndarray) else \
        np.array([image_geometry(image) for image in images], np.int64).reshape(-1, 6)
    ints[:, 0:3] = geometry[:, 0:3]
    ints[:, 7:10] = geometry[:, 3:6]
    ints[:, 3] = slots
    rows = boxes.astype(np.float32)
    bin_h = (rows[:, 3] - rows[:, 1]) / np.float32(out_h)
    bin_w = (rows[:, 2] - rows[:, 0]) / np.float32(out_w)
    ints[:, 4] = np.maximum(np.ceil(bin_h), 1)
    ints[:, 5] = np.maximum(np.ceil(bin_w), 1)
    ints[:, 6] = rows[:, 4] > 0.5
    floats = np.stack([rows[:, 0], rows[:, 1], bin_h, bin_w], axis=1).astype(np.float32)
    return ints, floats


if triton is not None:
    @triton.jit
    def _axis_weights_kernel(ints, floats, weights, starts, out_h, out_w,
                             COLUMNS: tl.constexpr, EXTRA: tl.constexpr,
                             OUT_POW2: tl.constexpr):
        """For one image and one axis (0: rows, 1: columns): each output line's first source
        line and the weight of each of the grid + EXTRA source lines from there on, i.e. the sum
        of roi_align's bilinear weights over the line's grid of samples, divided by the
        grid's size. Tap by tap, each summing every sample: O(grid^2) a line, but no array
        whose size depends on the grid, hence one compiled kernel for every photo."""
        image = tl.program_id(0)
        axis = tl.program_id(1)
        row = ints + image * COLUMNS
        length = tl.load(row + 1 + axis).to(tl.int32)  # height, width
        grid = tl.load(row + 4 + axis).to(tl.int32)
        offset = tl.load(row + 10 + axis)
        origin = tl.load(floats + image * 4 + 1 - axis) - 0.5  # top, left; aligned=True
        bin_size = tl.load(floats + image * 4 + 2 + axis)
        out_len = tl.where(axis == 0, out_h, out_w)
        line = tl.arange(0, OUT_POW2)
        line_ok = line < out_len
        edge = (length - 1).to(tl.float32)
        step = bin_size / grid.to(tl.float32)
        first = origin + line.to(tl.float32) * bin_size + 0.5 * step
        start = tl.minimum(tl.maximum(first, 0.0), edge).to(tl.int32)
        width = grid + EXTRA
        used = tl.zeros((OUT_POW2,), tl.int32)
        for tap in range(width):
            source = (start + tap).to(tl.float32)
            total = tl.zeros((OUT_POW2,), tl.float32)
            for i in range(grid):
                x = origin + line.to(tl.float32) * bin_size + (i + 0.5) * step
                # roi_align's bilinear_interpolate: a sample out of [-1, length] adds nothing;
                # one in [-1, 0] reads line 0, one past the last line reads the last line;
                # otherwise lines floor(x) and floor(x) + 1 share it: a tent around x.
                inside = (x >= -1.0) & (x <= length)
                x = tl.minimum(tl.maximum(x, 0.0), edge)
                total += tl.where(inside, tl.maximum(1.0 - tl.abs(x - source), 0.0), 0.0)
            tl.store(weights + offset + line * width + tap, total / grid.to(tl.float32),
                     mask=line_ok)
            used = tl.where(total > 0.0, tap + 1, used)
        base = starts + (image * 2 + axis) * (OUT_POW2 + 1)
        tl.store(base + line, start, mask=line_ok)
        # The taps the crop kernel reads for this image and axis: the most any line needs.
        tl.store(base + OUT_POW2, tl.max(tl.where(line_ok, used, 0), axis=0))

    @triton.jit
    def _weighted_crop_kernel(ints, weights, starts, out, out_h, out_w, channels,
                              COLUMNS: tl.constexpr, EXTRA: tl.constexpr,
                              OUT_POW2: tl.constexpr, BLOCK: tl.constexpr,
                              CHANNELS_POW2: tl.constexpr):
        """Each output pixel: the sum of its source window weighted by row weight x column
        weight (_axis_weights_kernel), roi_align's area sampling with each source pixel read
        once instead of once per bilinear sample that touches it."""
        image = tl.program_id(0)
        row = ints + image * COLUMNS
        src = tl.load(row).to(tl.pointer_type(tl.uint8))
        height = tl.load(row + 1).to(tl.int32)
        width = tl.load(row + 2).to(tl.int32)
        slot = tl.load(row + 3)
        row_width = tl.load(row + 4).to(tl.int32) + EXTRA
        col_width = tl.load(row + 5).to(tl.int32) + EXTRA
        flip = tl.load(row + 6)
        stride_c = tl.load(row + 7)
        stride_y = tl.load(row + 8)
        stride_x = tl.load(row + 9)
        row_weights = weights + tl.load(row + 10)
        col_weights = weights + tl.load(row + 11)
        row_starts = starts + image * 2 * (OUT_POW2 + 1)
        col_starts = row_starts + OUT_POW2 + 1
        row_taps = tl.load(row_starts + OUT_POW2)
        col_taps = tl.load(col_starts + OUT_POW2)

        pixel = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        pixel_ok = pixel < out_h * out_w
        out_y = tl.where(pixel_ok, pixel // out_w, 0)
        out_x = tl.where(pixel_ok, pixel % out_w, 0)
        channel = tl.arange(0, CHANNELS_POW2)
        channel_ok = channel < channels
        first_row = tl.load(row_starts + out_y)
        first_col = tl.load(col_starts + out_x)
        planes = src + channel[None, :].to(tl.int64) * stride_c

        total = tl.zeros((BLOCK, CHANNELS_POW2), tl.float32)
        for j in range(row_taps):
            row_weight = tl.load(row_weights + out_y * row_width + j)
            source_row = first_row + j
            row_ok = pixel_ok & (source_row < height) & (row_weight != 0.0)
            line = planes + (source_row.to(tl.int64) * stride_y)[:, None]
            across = tl.zeros((BLOCK, CHANNELS_POW2), tl.float32)
            for k in range(col_taps):
                col_weight = tl.load(col_weights + out_x * col_width + k)
                source_col = first_col + k
                ok = row_ok & (source_col < width) & (col_weight != 0.0)
                value = tl.load(line + (source_col.to(tl.int64) * stride_x)[:, None],
                                mask=ok[:, None] & channel_ok[None, :], other=0)
                across += col_weight[:, None] * value.to(tl.float32)
            total += row_weight[:, None] * across
        value = tl.minimum(tl.maximum(tl.floor(total + 0.5), 0.0), 255.0).to(tl.uint8)

        out_col = tl.where(flip != 0, out_w - 1 - out_x, out_x)
        target = (slot * out_h * out_w + out_y.to(tl.int64) * out_w + out_col) * channels
        tl.store(out + target[:, None] + channel[None, :], value,
                 mask=pixel_ok[:, None] & channel_ok[None, :])
