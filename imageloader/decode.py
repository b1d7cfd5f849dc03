"""Stage 2, decode: compressed image bytes -> augmented uint8 pixels written into a batch slot.

Runs in worker processes, so it imports neither torch nor the rest of the package unless a
custom torchvision transform is given. The presets are gotorch's: train = RandomResizedCrop +
horizontal flip, eval = resize the shorter side + center crop. Both are computed as ONE Pillow
resize of a box of the source (no intermediate full-size image) and, for JPEG, Pillow's `draft`
lets libjpeg decode at 1/2, 1/4 or 1/8 scale when the crop allows it (large photos only).

Randomness comes from a per-sample seed assigned by the reader, so the pixels of a sample do not
depend on which worker decodes it. Every failure is a `SampleError` with a reason.
"""
from __future__ import annotations

import functools
import io
import math
import os
import random
import re
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterator, NamedTuple

import numpy as np
from PIL import Image, ImageOps, JpegImagePlugin, UnidentifiedImageError

from .errors import Limits, SampleError

ALLOWED_FORMATS = ("JPEG", "PNG", "BMP", "GIF", "TIFF", "WEBP", "PPM")
_EXIF_ORIENTATION = 0x0112
GPU_PROGRESSIVE = "IMAGELOADER_GPU_PROGRESSIVE"  # which progressive JPEGs JpegPacker sends on
_SIXTEEN_BIT = {"I;16", "I;16B", "I;16L", "I;16N", "I"}


@dataclass(frozen=True)
class Augment:
    """The built-in presets. `size` is (height, width) of the output."""

    size: tuple[int, int]
    train: bool
    scale: tuple[float, float] = (0.08, 1.0)        # RandomResizedCrop area range
    ratio: tuple[float, float] = (3 / 4, 4 / 3)     # RandomResizedCrop aspect range
    flip: float = 0.5                               # horizontal flip probability (train)
    crop_fraction: float = 0.875                    # eval: 224 of 256

    @staticmethod
    def make(size: int | tuple[int, int], train: bool, **kwargs) -> "Augment":
        hw = (size, size) if isinstance(size, int) else tuple(size)
        if len(hw) != 2 or min(hw) <= 0:
            raise ValueError(f"size must be a positive int or (height, width), got {size!r}")
        return Augment(hw, train, **kwargs)


class Decoder:
    """`decoder(data, out, seed)` fills `out` (H, W, C uint8) or raises SampleError.

    `transform`, if given, replaces the preset geometry: it receives a uint8 CHW tensor of the
    whole decoded image and must return a uint8 CHW tensor of the output size (torchvision v2).
    """

    def __init__(self, augment: Augment, *, mode: str = "RGB", limits: Limits = Limits(),
                 formats: tuple[str, ...] = ALLOWED_FORMATS,
                 transform: Callable | None = None):
        if mode not in ("RGB", "L"):
            raise ValueError(f"mode must be 'RGB' or 'L', got {mode!r}")
        self.augment, self.mode, self.limits = augment, mode, limits
        self.formats, self.transform = tuple(formats), transform

    @property
    def channels(self) -> int:
        return 3 if self.mode == "RGB" else 1

    @property
    def out_shape(self) -> tuple[int, int, int]:
        return (*self.augment.size, self.channels)

    def start(self, batch) -> None:
        """Called before a batch is filled (the GPU packer resets its arena here)."""

    def fill(self, batch, slot: int, data: bytes, seed: int) -> None:
        self(data, batch.images[slot], seed)
        batch.lengths[slot] = 0  # pixels are in images[slot]

    def __call__(self, data: bytes, out: np.ndarray, seed: int) -> None:
        rng = random.Random(seed)
        img, flip = self._decode_image(data, rng)
        if self.transform is not None:
            self._apply_transform(img, out, rng)  # errors in user code are not skipped
        else:
            _write(out, img, flip)

    def _decode_image(self, data: bytes, rng: random.Random) -> tuple[Image.Image, bool]:
        """Everything Pillow does to the bytes; any failure becomes a SampleError."""
        try:
            if self.limits.max_pixels > (Image.MAX_IMAGE_PIXELS or math.inf):
                _ignore_pillows_bomb_warning()
            return self._decode_geometry(data, rng)
        except SampleError:
            raise
        except Image.DecompressionBombError as error:
            raise SampleError("too_many_pixels", str(error)) from None
        except Exception as error:  # Pillow raises many types on hostile input; all mean one image
            reason = "truncated" if "truncated" in str(error).lower() else "undecodable"
            raise SampleError(reason, f"{type(error).__name__}: {error}") from None

    def _decode_geometry(self, data: bytes, rng: random.Random) -> tuple[Image.Image, bool]:
        img = open_image(data, self.formats, self.limits)
        if self.transform is not None:
            return load_converted(img, self.mode), False
        orientation = _orientation(img)
        display = _upright_size(img, orientation)
        box = self._crop_box(display, rng)
        flip = self.augment.train and rng.random() < self.augment.flip
        _draft_for(img, data, box, self.augment.size, self.mode)
        img = load_converted(img, self.mode, orientation)
        sx, sy = img.size[0] / display[0], img.size[1] / display[1]
        box = (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)
        h, w = self.augment.size
        return img.resize((w, h), Image.BILINEAR, box=box), flip

    def _crop_box(self, size: tuple[int, int], rng: random.Random):
        if self.augment.train:
            return random_resized_crop_box(size, self.augment.scale, self.augment.ratio, rng)
        return center_crop_box(size, self.augment.size, self.augment.crop_fraction)

    def _apply_transform(self, img: Image.Image, out: np.ndarray, rng: random.Random) -> None:
        import torch  # only workers with a custom transform pay for importing torch

        torch.manual_seed(rng.getrandbits(63))  # torchvision draws from torch's global RNG
        chw = torch.from_numpy(np.array(img).reshape(img.size[1], img.size[0], -1)).permute(2, 0, 1)
        result = self.transform(chw)
        expected = (out.shape[2], out.shape[0], out.shape[1])
        if not isinstance(result, torch.Tensor) or result.dtype != torch.uint8 \
                or tuple(result.shape) != expected:
            got = (getattr(result, "dtype", type(result).__name__), tuple(getattr(result, "shape", ())))
            raise TypeError(f"transform must return a uint8 tensor of shape {expected}, got {got}")
        out[...] = result.permute(1, 2, 0).numpy()


class JpegPacker:
    """decode="cuda": pack each JPEG that nvJPEG can take into the batch's byte arena; decode
    anything else here on the CPU, exactly as the CPU path would, and count why.

    nvJPEG's batched decoder takes baseline 8-bit RGB/gray JPEGs with standard subsampling. We
    screen with Pillow's header parser (no pixel decoding): PNG, CMYK, oddly subsampled and
    rarely coded images (arithmetic, lossless, cut short), and images that no longer fit the
    arena, go the CPU way; progressive JPEGs too, unless ProgressiveRoute sends them on.
    EXIF-rotated JPEGs go to the GPU with their orientation, which the crops read them by;
    grey JPEGs with their sampling factors written as 1x1 (gray_sampling_at).
    """

    def __init__(self, cpu: Decoder, cpu_pixels: int | None = None):
        self.cpu = cpu
        # Images of at least this many pixels are decoded here: the GPU's JPEG engines spend
        # time in proportion to pixels, while Pillow decodes a large photo at 1/2-1/8 scale
        # (draft) when its crop allows: 2x more engine pixels per CPU millisecond than a small
        # image (~11 ms for 2.4 MP against ~3 ms for 0.34 MP, one core).
        self.cpu_pixels = cpu_pixels
        self.fallbacks: Counter = Counter()
        # Progressive JPEGs go to the GPU too while this packer would otherwise be busy
        # decoding them (ProgressiveRoute): the engines refuse them and a hybrid backend
        # decodes them in the same call (Huffman on the lane decoder's CPU threads, the rest
        # in CUDA: gpujpeg.NvImageCodecJpeg._with_fallback)
        self.progressive = progressive_route()
        self._end = 0
        self._share = 0.0
        self._large = cpu_pixels or 0  # this batch's threshold (start); 0: none
        self._probes = 0       # images of this batch still to time through the CPU path
        self._scratch = None   # their pixels, thrown away; None: no probe decoded here yet

    @property
    def out_shape(self) -> tuple[int, int, int]:
        return self.cpu.out_shape

    def start(self, batch) -> None:
        self._end = 0
        # A share of the images decoded here on purpose: when the GPU is busy training and
        # cores are idle, they take that much work off it (share.py; the parent sets it).
        self._share = float(batch.cpu_share[0])
        # decode="auto": the parent asks for a few images' CPU decode times while the GPU
        # decodes, so that its trial can tell when CPU decoding cannot win without running it
        # (share.py). The images still go to the GPU: the probe's pixels are thrown away.
        self._probes = int(batch.cpu_probe[0])
        batch.cpu_probe[1:] = 0
        # decode="auto" with a model that keeps the GPU busy: the parent sends the largest
        # JPEGs here too (share.LargeOnCpu), besides those Options.cpu_large names.
        stamped = int(batch.cpu_pixels[0])
        self._large = min((p for p in (self.cpu_pixels, stamped) if p), default=0)

    def fill(self, batch, slot: int, data: bytes, seed: int) -> None:
        route = self.progressive
        screen = gpu_screen(data, self.cpu.mode, self.cpu.limits, route.pixels_now())
        reason, size = screen.refused, screen.size
        if reason is None and self._end + len(data) > len(batch.arena):
            reason = "arena_full"
        if reason is None and self._share > 0 and _unit(seed) < self._share:
            reason = "cpu_share"
        if reason is None and self._large and size[0] * size[1] >= self._large:
            reason = "cpu_large"
        if reason is not None:
            batch.orientations[slot] = 1  # decoded upright here: nothing left to turn
            start = time.thread_time()
            self.cpu.fill(batch, slot, data, seed)  # raises SampleError; sets lengths 0
            self.fallbacks[reason] += 1
            if screen.progressive:
                route.decoded_here(size[0] * size[1], time.thread_time() - start)
            return
        if screen.progressive:
            route.sent(size[0] * size[1])
            self.fallbacks["progressive_sent"] += 1  # one of "gpu_decoded": auto's choice seen
        if self._probes > 0:
            self._time_on_cpu(batch, data, seed)
        batch.arena[self._end:self._end + len(data)] = np.frombuffer(data, np.uint8)
        if screen.gray_sampling_at is not None:  # the same pixels, as the GPU decodes them
            batch.arena[self._end + screen.gray_sampling_at] = 0x11
            self.fallbacks["gray_sampling_1x1"] += 1  # one of "gpu_decoded", seen
        batch.offsets[slot], batch.lengths[slot] = self._end, len(data)
        batch.orientations[slot] = screen.orientation
        self._end += len(data)
        augment = self.cpu.augment
        if augment.train:
            # The crop box is drawn here, where the header was parsed anyway, with the same
            # draws in the same order as Decoder (in the upright frame, as it draws them): the
            # GPU stage then does no per-image Python.
            rng = random.Random(seed)
            box = random_resized_crop_box(screen.upright_size, augment.scale, augment.ratio,
                                          rng)
            batch.boxes[slot] = (*box, rng.random() < augment.flip)

    def take_fallbacks(self) -> dict:
        counts, self.fallbacks = dict(self.fallbacks), Counter()
        return counts

    def _time_on_cpu(self, batch, data: bytes, seed: int) -> None:
        """Decode one image as the CPU path would, into scratch, and add the CPU time it
        took to the batch's probe. CPU time, not wall time: a packer preempted at a busy start
        must not make CPU decoding look slower than it is (the parent takes the bound for an
        upper one). This process's first probe is not timed (it warms the decoder's code
        and buffers), nor is an image the CPU cannot decode (the GPU's lane reports it)."""
        self._probes -= 1
        warm = self._scratch is not None
        if not warm:
            self._scratch = np.empty(self.cpu.out_shape, np.uint8)
        start = time.thread_time()
        try:
            self.cpu(data, self._scratch, seed)
        except SampleError:
            return
        if warm:
            batch.cpu_probe[1] += time.thread_time() - start
            batch.cpu_probe[2] += 1


def _unit(seed: int) -> float:
    """A number in [0, 1) that depends only on the sample's seed (which images a cpu_share
    takes is then the same for a given seed, whatever the worker count)."""
    return ((int(seed) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) / 2.0 ** 64


class Screen(NamedTuple):
    refused: str | None           # why nvJPEG should not get this image, or None
    size: tuple[int, int] | None  # (width, height) as stored
    orientation: int = 1          # EXIF orientation, 1-8: the GPU stage reads it upright
    upright_size: tuple[int, int] | None = None  # (width, height) upright: the crop box's frame
    progressive: bool = False     # a progressive JPEG, refused or not
    # Where a grey JPEG's frame header gives its one component sampling factors other than
    # 1x1: the offset of that byte, which the packer sets to 1x1 (gray_sampling_at)
    gray_sampling_at: int | None = None


@functools.cache
def _ignore_pillows_bomb_warning() -> None:
    """Pillow warns between 1x and 2x its bomb limit; a limit of ours above it is enforced
    instead. A filter set once per process: warnings.catch_warnings around each decode is not
    thread-safe, and a GPU lane decodes what nvJPEG refused with Pillow in its own thread,
    where it would swap the process's warning state under the training thread."""
    warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


def is_progressive(img: Image.Image) -> bool:
    """A progressive JPEG, by the header Pillow parsed (it names it either way)."""
    return bool(img.info.get("progressive") or img.info.get("progression"))


def gpu_screen(data: bytes, mode: str, limits: Limits, progressive_pixels: int = 0) -> Screen:
    """Whether nvJPEG should get this image, its size and orientation, from headers; a
    progressive JPEG only if it has fewer than `progressive_pixels` pixels."""
    if data[:3] != b"\xff\xd8\xff":
        return Screen("not_jpeg", None)
    try:
        img = Image.open(io.BytesIO(data), formats=("JPEG",))
    except Exception:
        return Screen("unreadable_header", None)
    width, height = img.size
    if width * height > limits.max_pixels or min(width, height) < 1:
        return Screen("size", img.size)
    if img.mode not in ("RGB", "L"):
        return Screen("color_" + img.mode.lower(), img.size)
    if img.mode == "RGB" and _stored_as_rgb(img):
        return Screen("color_rgb", img.size)
    progressive = is_progressive(img)
    if progressive and width * height >= progressive_pixels:
        return Screen("progressive", img.size, progressive=True)
    if img.mode == "RGB" and JpegImagePlugin.get_sampling(img) == -1:
        return Screen("subsampling", img.size)
    headers = _headers(data)  # walked once for the checks that read them
    coding = _frame_coding(data, headers)
    if coding is not None:
        return Screen(coding, img.size)
    if _ends_early(data, headers):
        return Screen("no_end_marker", img.size)
    orientation = _orientation(img)  # outside 1-8: upright, as exif_transpose leaves it
    orientation = orientation if 1 <= orientation <= 8 else 1
    return Screen(None, img.size, orientation, _upright_size(img, orientation), progressive,
                  gray_sampling_at(data, headers) if img.mode == "L" else None)


class ProgressiveRoute:
    """Which progressive JPEGs one packer sends to the GPU (IMAGELOADER_GPU_PROGRESSIVE).

    nvJPEG has no GPU Huffman decoder for progressive JPEGs: on the GPU a lane's hybrid
    fallback decodes their Huffman part on one of its CPU threads, inside the batch's call, so
    the call waits for the slowest. On an H200 (results/2026-11-30-h200-progressive-bound and
    -climb): where 30% of the photos were progressive, sending those under 0.5 MP took the
    loader from ~2.7k to ~4.4k img/s and fed ResNet-18 from ~2.2k to ~4.5k, sending every one
    fed it at ~6.5k (the packers, decoding them, were what the GPU waited for); where 1% were,
    sending those under 0.5 MP cost fed ResNet-18 ~3% (the packers had time to spare, the
    calls got longer); where 5% were, sending every one gained nothing.

    So by default ("auto") a packer climbs three levels, measured over windows of WINDOW_S: it
    sends none while decoding them here would keep it busy less than BUSY_ON of its wall time; then
    those under AUTO_PIXELS; then every one, if the larger ones it still decodes keep it that
    busy. It steps down from every one when all of them here would take less than BUSY_ON,
    and to none below BUSY_OFF. What the sent ones would cost here is estimated from the CPU
    seconds per pixel it measured on each kind (under or over AUTO_PIXELS) while it decoded
    them: large ones, decoded at 1/2-1/8 scale for their crop, cost less per pixel.
    """

    AUTO_PIXELS = 500_000   # a 0.5 MP progressive JPEG's Huffman decode takes ~5 ms of one
    # core: well under a lane's batch call (~20-37 ms), where a 5 MP one takes ~50 ms
    # (probe_progressive.py)
    ALL = 1 << 62
    WINDOW_S = 1.0
    MIN_IMAGES = 64         # a window's images before it decides (a packer's start is slow)
    BUSY_ON, BUSY_OFF = 0.5, 0.25

    def __init__(self, pixels: int, adaptive: bool, clock: Callable[[], float] = time.monotonic):
        self.pixels = pixels      # the most it may send: those of fewer pixels (0: none)
        self.adaptive = adaptive  # False: always send those
        # the bounds it climbs: none, the small ones, all it may; a fixed route has one
        self.levels = (0, min(self.AUTO_PIXELS, pixels), pixels) if adaptive else (pixels,)
        self.level = 0
        self._clock = clock
        self._start = clock()
        self._images = 0
        self._seconds = 0.0       # this window: CPU seconds decoding them here
        self._sent = [0, 0]       # this window: pixels of those sent, small and large
        self._cost = [[0.0, 0], [0.0, 0]]  # all along: CPU seconds and pixels of those
        # decoded here, small and large

    @property
    def may_send(self) -> bool:
        """Whether this route can ever send one (the lanes then need their fallback)."""
        return self.pixels > 0

    def pixels_now(self) -> int:
        """The bound for the next image (0: none goes to the GPU); counts it for the window."""
        if self.adaptive:
            self._images += 1
            if self._images >= self.MIN_IMAGES and self._clock() - self._start >= self.WINDOW_S:
                self._decide()
        return self.levels[self.level]

    def decoded_here(self, pixels: int, seconds: float) -> None:
        self._seconds += seconds
        cost = self._cost[pixels >= self.AUTO_PIXELS]
        cost[0] += seconds
        cost[1] += pixels

    def sent(self, pixels: int) -> None:
        self._sent[pixels >= self.AUTO_PIXELS] += pixels

    def _wall(self) -> float:
        return max(self._clock() - self._start, 1e-9)

    def busy_here(self) -> float:
        """This window's share of wall time spent decoding them here."""
        return self._seconds / self._wall()

    def busy(self) -> float:
        """This window's share of wall time that decoding all of them here takes (or would)."""
        prices = [seconds / pixels if pixels else None for seconds, pixels in self._cost]
        would = 0.0
        for kind, pixels in enumerate(self._sent):
            price = prices[kind] if prices[kind] is not None else prices[1 - kind]
            would += pixels * (price or 0.0)
        return self.busy_here() + would / self._wall()

    def _decide(self) -> None:
        busy, level = self.busy(), self.level
        if level == 0 and busy >= self.BUSY_ON:
            level = 1
        elif level == 1 and self.busy_here() >= self.BUSY_ON:
            level = 2  # the large ones alone keep it busy: send them too
        elif (level == 1 and busy < self.BUSY_OFF) or (level == 2 and busy < self.BUSY_ON):
            level -= 1
        self.level = level
        self._start, self._images, self._seconds, self._sent = self._clock(), 0, 0.0, [0, 0]


def progressive_route() -> ProgressiveRoute:
    """IMAGELOADER_GPU_PROGRESSIVE: unset or "auto", those under 0.5 MP while the packer is
    busy decoding them, every one while it stays busy (ProgressiveRoute); 0, none (all decoded
    by the packers); 1 or "all", every one; a number of pixels, always those smaller than
    that."""
    value = os.environ.get(GPU_PROGRESSIVE, "").strip().lower()
    if value in ("", "auto"):
        return ProgressiveRoute(ProgressiveRoute.ALL, adaptive=True)
    if value in ("1", "all"):
        return ProgressiveRoute(ProgressiveRoute.ALL, adaptive=False)
    try:
        pixels = int(value)
    except ValueError:
        pixels = -1
    if pixels < 0:
        raise ValueError(f'{GPU_PROGRESSIVE} must be "auto", 0, 1, "all" or a number of '
                         f"pixels, got {value!r}")
    return ProgressiveRoute(pixels, adaptive=False)


def open_image(data: bytes, formats: tuple[str, ...], limits: Limits) -> Image.Image:
    """Identify the image from its header only and enforce the pixel limit before decoding."""
    if not data:
        raise SampleError("empty", "zero bytes")
    try:
        img = Image.open(io.BytesIO(data), formats=formats)
    except UnidentifiedImageError:
        raise _unidentified(data, formats) from None
    width, height = img.size
    if width * height > limits.max_pixels:
        raise SampleError("too_many_pixels",
                          f"{width}x{height} exceeds the limit of {limits.max_pixels} pixels")
    if width == 0 or height == 0:
        raise SampleError("undecodable", f"image has size {width}x{height}")
    return img


def _unidentified(data: bytes, formats: tuple[str, ...]) -> SampleError:
    # Only on failure: ask Pillow's other plugins whether this is an image we chose to refuse.
    try:
        with Image.open(io.BytesIO(data)) as other:
            found = other.format
    except Exception:
        return SampleError("undecodable", "not an image Pillow can identify")
    return SampleError("format_not_allowed", f"{found} is not one of {', '.join(formats)}")


def load_converted(img: Image.Image, mode: str, orientation: int | None = None) -> Image.Image:
    """Decode, apply EXIF orientation, and convert to `mode` with correct pixel values."""
    if orientation is None:
        orientation = _orientation(img)
    img.load()
    if orientation != 1:
        img = ImageOps.exif_transpose(img)
    if img.mode in _SIXTEEN_BIT:
        # Pillow's convert clips 16-bit values at 255; scale them down instead.
        wide = np.asarray(img, dtype=np.int64)
        img = Image.fromarray((np.clip(wide, 0, 65535) >> 8).astype(np.uint8), "L")
    elif img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")  # the documented way; converting P+transparency to RGB warns
    if img.mode != mode:
        img = img.convert(mode)
    return img


def _stored_as_rgb(img: Image.Image) -> bool:
    """Whether a 3-component JPEG stores R, G and B rather than YCbCr, by libjpeg's rule
    (jdapimin.c): a JFIF marker means YCbCr; else an Adobe marker's transform 0 means RGB;
    else components named 'R', 'G', 'B' do. Pillow decodes both; the GPU decoders are given
    only YCbCr, whose conversion they do (an RGB-coded file read as YCbCr would give wrong
    colours, not an error), so the packers decode these rare files."""
    if "jfif" in img.info:
        return False
    if "adobe" in img.info:
        return img.info.get("adobe_transform") == 0
    return [layer[0] for layer in getattr(img, "layer", ())] == [82, 71, 66]


# Start-of-frame markers of the codings the JPEG engines refuse (ITU T.81, table B.1).
_ARITHMETIC_FRAMES = frozenset({0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_LOSSLESS_FRAMES = frozenset({0xC3, 0xC7, 0xCB, 0xCF})
_FRAMES = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # not DHT, JPG, DAC
_END_OF_IMAGE = b"\xff\xd9"
# A marker after coded data: 0xFF then neither a stuffed 0 nor a restart marker (which sit
# inside coded data), nor TEM or a fill byte (no length follows).
_NEXT_MARKER = re.compile(rb"\xff[^\x00\x01\xd0-\xd7\xff]")


def _markers(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(marker, where its segment starts (its 0xFF), where it ends, which may be past the
    data's end) for each marker segment from SOI to the first start-of-scan marker (whose
    segment ends where the scan's coded data begins): a few reads, no pixels. Stops where no
    marker is where one belongs (Pillow's parser judged the rest)."""
    at = 2
    while at + 4 <= len(data) and data[at] == 0xFF:
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # TEM, RSTn, SOI: no length follows
            at += 2
            continue
        start, at = at, at + 2 + int.from_bytes(data[at + 2:at + 4], "big")
        yield marker, start, at
        if marker == 0xDA:
            return


class _Headers(NamedTuple):
    """Where a JPEG's first frame header starts (its 0xFF; -1: not found), and where its first
    scan's coded data begins (0: no scan found): _headers."""
    frame: int = -1
    coded: int = 0


def _headers(data: bytes) -> _Headers:
    """One walk of the marker segments before the first scan (_markers)."""
    frame = -1
    for marker, start, end in _markers(data):
        if marker in _FRAMES and frame < 0:
            frame = start
        elif marker == 0xDA:
            return _Headers(frame, end)
    return _Headers(frame)


def _frame_coding(data: bytes, headers: _Headers | None = None) -> str | None:
    """"lossless" or "arithmetic" where the frame is coded so, else None. The hardware JPEG
    engines refuse an arithmetic-coded photo; nvImageCodec's other backends then decode it
    inside the lane's call, which waits on their CPU thread, as for progressive ones (H200,
    scripts/bench/results/2026-11-30-h200-camera). Pillow's libjpeg decodes both: the packers
    take them, rare as they are. `headers`: _headers(data), if the caller has them."""
    frame = (headers or _headers(data)).frame
    marker = data[frame + 1] if frame >= 0 else None
    if marker in _LOSSLESS_FRAMES:
        return "lossless"
    if marker in _ARITHMETIC_FRAMES:
        return "arithmetic"
    return None


def gray_sampling_at(data: bytes, headers: _Headers | None = None) -> int | None:
    """The offset of a one-component (grey) JPEG's sampling-factor byte in its frame header,
    where the factors are not 1x1; else None. A one-component scan is not interleaved: its
    units are 8x8 blocks whatever the factors say (ITU T.81, A.2.2), so libjpeg decodes the
    same pixels with 1x1 written there. The hardware JPEG engines do not: of 2,048 made photos
    (H100, nvImageCodec 0.9, scripts/check_decode.py) the 36 grey ones with 2x1 or 2x2 factors
    (Pillow writes them when asked for subsampling) came 30-64 levels off Pillow's pixels, the
    two with 1x1 matched. probe_codings.py's sweep: the engines (and "all", which tries them
    first) 43-127 levels off at every width with 2x2 or 2x1, right with 1x1 written in; the
    CUDA and hybrid backends right either way.
    Other decoders have had the same bug (SerenityOS's LibGfx, PRs 12664 and 22987: such files
    are rare but real, e.g. `cjpeg -sample 2x2` of a grey image). So the packers hand them over
    with 1x1 written in. `headers`: _headers(data), if the caller has them."""
    frame = (headers or _headers(data)).frame
    # FF Cn, Lf(2) P(1) Y(2) X(2) Nf(1), then per component C(1) HV(1) Tq(1)
    if frame < 0 or int.from_bytes(data[frame + 2:frame + 4], "big") != 11 \
            or frame + 13 > len(data):
        return None
    return frame + 11 if data[frame + 9] == 1 and data[frame + 11] != 0x11 else None


def _ends_early(data: bytes, headers: _Headers | None = None) -> bool:
    """Whether a JPEG has no end-of-image marker after its first scan's coded data: a file cut
    short. Pillow refuses it as truncated, while every GPU decoder hands back an image whose
    rows past the cut are gray or another image's (probe_codings.py; H200,
    scripts/bench/results/2026-11-30-h200-codings), so the packers take it and the CPU path's
    judgement holds on either path. Almost every JPEG simply ends with the marker. Otherwise
    the markers after the first scan are walked to the end marker, whatever follows it (a
    phone's trailer, padding). Coded data holds no marker but restarts (a 0xFF there is
    followed by 0 or a restart marker), and each segment between a progressive JPEG's scans
    is stepped over by its length: a Huffman table or a comment there may hold 0xFF 0xD9.
    `headers`: _headers(data), if the caller has them."""
    if data.endswith(_END_OF_IMAGE):
        return False
    at = (headers or _headers(data)).coded
    if at == 0:
        return False  # no scan found where the headers say: Pillow's parser judged them
    while (found := _NEXT_MARKER.search(data, at)) is not None:
        if data[found.start() + 1] == 0xD9:
            return False
        # A segment (tables, a comment, the next scan's header): step over its length; a
        # length past the data leaves no end marker, as a cut would.
        at = found.start() + 2 + int.from_bytes(data[found.start() + 2:found.start() + 4], "big")
    return True


def _orientation(img: Image.Image) -> int:
    try:
        return int(img.getexif().get(_EXIF_ORIENTATION, 1))
    except Exception:  # malformed EXIF must not cost the image: treat it as upright
        return 1


def _upright_size(img: Image.Image, orientation: int) -> tuple[int, int]:
    """(width, height) once the EXIF orientation is applied: the size the crop box is drawn in."""
    if orientation in (5, 6, 7, 8) and not _reports_upright_size(img):
        return img.size[::-1]
    return img.size


def _reports_upright_size(img: Image.Image) -> bool:
    # Pillow's TIFF plugin orients a TIFF itself: it reports the upright size at open and turns
    # the pixels (dropping the tag) at load. Swapping its size again drew the box in the wrong
    # frame and scrambled orientations 5-8. Other formats report the size as stored.
    if img.format != "TIFF":
        return False
    stored = img.tag_v2.get(256), img.tag_v2.get(257)  # ImageWidth, ImageLength
    return img.size != stored


def _draft_for(img: Image.Image, data: bytes, box, out_hw: tuple[int, int], mode: str) -> None:
    if img.format != "JPEG" or img.mode not in ("RGB", "L", "YCbCr"):
        return
    box_w, box_h = box[2] - box[0], box[3] - box[1]
    scale = max(out_hw[1] / box_w, out_hw[0] / box_h)
    if scale >= 0.5:
        return  # draft only reduces by 2, 4 or 8
    # A lossless JPEG has no DCT to scale: libjpeg-turbo refuses a reduced-scale decode ("broken
    # data stream" from Pillow) where it decodes the whole (tests/data/lossless.jpg)
    if _frame_coding(data) == "lossless":
        return
    w, h = img.size
    img.draft(mode, (math.ceil(w * scale), math.ceil(h * scale)))


def random_resized_crop_box(size: tuple[int, int], scale, ratio, rng: random.Random):
    """torchvision's RandomResizedCrop.get_params, returning a (left, top, right, bottom) box."""
    width, height = size
    area = width * height
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = rng.randint(0, height - h)
            left = rng.randint(0, width - w)
            return (left, top, left + w, top + h)
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    top, left = (height - h) // 2, (width - w) // 2
    return (left, top, left + w, top + h)


def center_crop_geometry(size: tuple[int, int], out_hw: tuple[int, int],
                         crop_fraction: float) -> tuple[int, int, int, int]:
    """torchvision's Resize(out / crop_fraction) + CenterCrop(out) in integers:
    (resized width, resized height, crop left, crop top), truncated and rounded as torchvision."""
    width, height = size
    short_target = int(max(out_hw) / crop_fraction)
    if width <= height:
        new_w, new_h = short_target, int(short_target * height / width)
    else:
        new_w, new_h = int(short_target * width / height), short_target
    top = int(round((new_h - out_hw[0]) / 2.0))
    left = int(round((new_w - out_hw[1]) / 2.0))
    return new_w, new_h, left, top


def center_crop_box(size: tuple[int, int], out_hw: tuple[int, int], crop_fraction: float):
    """The same crop as a box of the source, so that ONE box resize gives the pixels of
    resizing the whole image and then cropping."""
    new_w, new_h, left, top = center_crop_geometry(size, out_hw, crop_fraction)
    sx, sy = new_w / size[0], new_h / size[1]
    return (left / sx, top / sy, (left + out_hw[1]) / sx, (top + out_hw[0]) / sy)


def _write(out: np.ndarray, img: Image.Image, flip: bool) -> None:
    # Flip in Pillow and copy packed bytes once: a strided numpy flip costs 4x more.
    if flip:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    out[...] = np.frombuffer(img.tobytes(), np.uint8).reshape(out.shape)
