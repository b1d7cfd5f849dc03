"""Training crops of decode="cuda" in one kernel: every image's box, resized and flipped, read
straight from nvJPEG's uint8 output into the uint8 batch.

The reference is torchvision's roi_align (aligned=True, adaptive sampling ratio) on float copies
of the images, which gpudecode.py keeps for the CPU and for hosts without Triton. roi_align
needed a float32 copy of each full image (4x its bytes), a stack of same-sized images, one call
per distinct image size, then a flip and a rounding pass: ~2.5 ms of GPU per 256-image batch
on an H200, beside a ResNet-18 step of ~19 ms. This kernel reads only the pixels its samples
touch and writes each output byte once, whatever the mix of image sizes.

Per output pixel it averages grid_h x grid_w bilinear samples, grid = ceil(box / output) per
axis, exactly roi_align's sampling (its edge rules included): an area filter on downscaling.
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
TABLE_COLUMNS = 10


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
    table = _image_table(images, boxes, slots, out_h, out_w)
    # Triton's interpreter (TRITON_INTERPRET=1, the CPU tests) takes the CPU tables as they are.
    ints, box = (small_to_device(part, out.device) for part in table)
    grid = (count, triton.cdiv(out_h * out_w, BLOCK))
    with _LAUNCH:
        _crop_kernel[grid](ints, box, out, out_h, out_w, channels, BLOCK=BLOCK,
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


def _image_table(images, boxes, slots, out_h, out_w) -> tuple[np.ndarray, np.ndarray]:
    """Per image: int64 (pointer, height, width, slot, grid_h, grid_w, flip, channel stride,
    row stride, column stride) and float32 (left, top, bin_h, bin_w). Sampling grids as
    roi_align computes them, in float32."""
    ints = np.empty((len(images), TABLE_COLUMNS), np.int64)
    geometry = np.array([image_geometry(image) for image in images], np.int64).reshape(-1, 6)
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
    def _bilinear(src, stride_c, stride_y, stride_x, height, width, y, x, channel, channel_ok):
        """roi_align's bilinear_interpolate, for a block of sample points and all channels."""
        inside = (y >= -1.0) & (y <= height) & (x >= -1.0) & (x <= width)
        y = tl.maximum(y, 0.0)
        x = tl.maximum(x, 0.0)
        y_low = y.to(tl.int32)
        x_low = x.to(tl.int32)
        y_edge = y_low >= height - 1
        x_edge = x_low >= width - 1
        y_low = tl.where(y_edge, height - 1, y_low)
        x_low = tl.where(x_edge, width - 1, x_low)
        y_high = tl.where(y_edge, y_low, y_low + 1)
        x_high = tl.where(x_edge, x_low, x_low + 1)
        y = tl.where(y_edge, y_low.to(tl.float32), y)
        x = tl.where(x_edge, x_low.to(tl.float32), x)
        ly = y - y_low.to(tl.float32)
        lx = x - x_low.to(tl.float32)
        hy = 1.0 - ly
        hx = 1.0 - lx
        mask = inside[:, None] & channel_ok[None, :]
        base = src + channel[None, :].to(tl.int64) * stride_c
        row_low = (y_low.to(tl.int64) * stride_y)[:, None]
        row_high = (y_high.to(tl.int64) * stride_y)[:, None]
        col_low = (x_low.to(tl.int64) * stride_x)[:, None]
        col_high = (x_high.to(tl.int64) * stride_x)[:, None]
        v1 = tl.load(base + row_low + col_low, mask=mask, other=0).to(tl.float32)
        v2 = tl.load(base + row_low + col_high, mask=mask, other=0).to(tl.float32)
        v3 = tl.load(base + row_high + col_low, mask=mask, other=0).to(tl.float32)
        v4 = tl.load(base + row_high + col_high, mask=mask, other=0).to(tl.float32)
        return ((hy * hx)[:, None] * v1 + (hy * lx)[:, None] * v2
                + (ly * hx)[:, None] * v3 + (ly * lx)[:, None] * v4)

    @triton.jit
    def _crop_kernel(ints, floats, out, out_h, out_w, channels,
                     BLOCK: tl.constexpr, CHANNELS_POW2: tl.constexpr):
        image = tl.program_id(0)
        row = ints + image * 10  # TABLE_COLUMNS
        src = tl.load(row).to(tl.pointer_type(tl.uint8))  # the decoder's (C, H, W) output
        height = tl.load(row + 1).to(tl.int32)
        width = tl.load(row + 2).to(tl.int32)
        slot = tl.load(row + 3)
        grid_h = tl.load(row + 4).to(tl.int32)
        grid_w = tl.load(row + 5).to(tl.int32)
        flip = tl.load(row + 6)
        stride_c = tl.load(row + 7)
        stride_y = tl.load(row + 8)
        stride_x = tl.load(row + 9)
        # aligned=True: pixel i covers [i, i + 1), its centre is at i + 0.5.
        top = tl.load(floats + image * 4 + 1) - 0.5
        left = tl.load(floats + image * 4) - 0.5
        bin_h = tl.load(floats + image * 4 + 2)
        bin_w = tl.load(floats + image * 4 + 3)

        pixel = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        pixel_ok = pixel < out_h * out_w
        out_y = pixel // out_w
        out_x = pixel % out_w
        channel = tl.arange(0, CHANNELS_POW2)
        channel_ok = channel < channels

        total = tl.zeros((BLOCK, CHANNELS_POW2), tl.float32)
        for iy in range(grid_h):
            y = top + out_y.to(tl.float32) * bin_h \
                + (iy + 0.5) * bin_h / grid_h.to(tl.float32)
            for ix in range(grid_w):
                x = left + out_x.to(tl.float32) * bin_w \
                    + (ix + 0.5) * bin_w / grid_w.to(tl.float32)
                total += _bilinear(src, stride_c, stride_y, stride_x, height, width, y, x,
                                   channel, channel_ok)
        mean = total / (grid_h * grid_w).to(tl.float32)
        value = tl.minimum(tl.maximum(tl.floor(mean + 0.5), 0.0), 255.0).to(tl.uint8)

        out_col = tl.where(flip != 0, out_w - 1 - out_x, out_x)
        target = (slot * out_h * out_w + out_y.to(tl.int64) * out_w + out_col) * channels
        tl.store(out + target[:, None] + channel[None, :], value,
                 mask=pixel_ok[:, None] & channel_ok[None, :])
