"""nvImageCodec's decode of a whole batch in one C call: nvbatch.c, built at first use.

The Python way around nvImageCodec's batched decode makes an nv.CodeStream per JPEG, sorts
them, decodes into kept images and reads each image's address back through its array
interface: ~500 Python calls per batch of 256, 20-40% of a decoding lane's thread, which is the
loader's wall (scripts/bench/results/2026-11-26-h200-spy). With nvbatch.c the lane makes two
C calls per batch (parse, decode) that take addresses and sizes in numpy arrays and decode into
one device buffer at offsets; ctypes lets go of the GIL for each, so lanes decode side by side.
H200, 16 cores (scripts/bench/results/2026-11-27-h200-cbatch, `gpu_host.sh OUT versus` with
IMAGELOADER_C_BATCH=0 on one side): the loader alone 18,400-18,600 -> 22,000-23,600 img/s on
ImageNet-like data, 11,300-11,900 -> 12,100-12,900 on photos; with two split lanes 31,200 and
15,100 (the Python API: 19,700 and 12,800). Decoders alone (bench_batch_call.py), ImageNet-like:
25,900 -> 34,100 img/s, the lane thread's CPU 9.8 -> 7.5 ms per batch of 256.

Built like Triton builds its launchers: with the C compiler (CC, cc or gcc) against the header
and library in nvImageCodec's wheel (a stand-in declares cudaStream_t, so no CUDA toolkit is
needed), into the user's cache folder under a name keyed by the source, the header and the
library, written to a temporary name and renamed into place (two processes building at once
both succeed). Where it cannot be built or loaded (no compiler, another nvImageCodec layout),
`library()` says why once in the log and returns None: gpujpeg.NvImageCodecJpeg keeps the
Python way. IMAGELOADER_C_BATCH=0 in the environment also keeps it (A/B benchmarks).

Regions (an experiment, off unless IMAGELOADER_REGIONS_FROM=<pixels> is set): a training crop
of an image of at least that many pixels is decoded alone, as a region of the JPEG (DALI's
decoders.image_random_crop does so for every image), so the decoder's GPU work (IDCT, colour
conversion, the writes) follows the crop, not the photo; the Huffman decoding stays whole.
Measured no faster for every image with the Python API (scripts/bench/README.md, "Real
photos"); through one C call, from 1 MP on photos, the hardware engines alone decode 34% more
per second (H200, scripts/bench/results/2026-11-27-h200-ctypes); in the loader alone no
faster, one lane or two, only lighter on GPU memory (scripts/bench/results/2026-11-27-h200-regions).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import torch

from .cache import default_cache_folder

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("nvbatch.c")
SWITCH = "IMAGELOADER_C_BATCH"
# nvimgcodecBackendKind_t, and 0: every backend (nvImageCodec's choice per image).
BACKEND_KINDS = {"all": 0, "cpu": 1, "gpu": 2, "hybrid": 3, "hw": 4}
LOAD_HINT_ALL = 100000.0  # nvbatch.c's: the first backend takes every JPEG it can
CPU_ONLY_DEVICE = -99999  # NVIMGCODEC_DEVICE_CPU_ONLY
CUDA_STUB = "typedef struct CUstream_st* cudaStream_t;\n"
GROWTH = 1.25  # the output buffer grows by this much over what a batch needs
SIZES_MISMATCH = -2  # bd_decode's BD_SIZES_MISMATCH
SYCC = 3  # NVIMGCODEC_COLORSPEC_SYCC: a JPEG coded in YCbCr
# nvimgcodecChromaSubsampling_t -> (rows, columns) of luma per chroma sample, for those the
# hardware engines take (4:4:4, 4:2:2, 4:2:0, 4:4:0)
CHROMA_FACTORS = {0: (1, 1), 2: (1, 2), 3: (2, 2), 4: (2, 1)}
REGIONS_FROM = "IMAGELOADER_REGIONS_FROM"
# Pixels kept around a crop box in its region: the crops' bilinear samples reach up to one
# pixel past the box (roi_align's, gpucrop's), so the region gives them what the whole image
# would have.
REGION_MARGIN = 2


def enabled() -> bool:
    return os.environ.get(SWITCH, "1") != "0"


def regions_from() -> int | None:
    """IMAGELOADER_REGIONS_FROM as pixels, or None (regions off)."""
    value = os.environ.get(REGIONS_FROM, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{REGIONS_FROM} must be a number of pixels >= 1, got {value!r}")
    return int(value)


@functools.lru_cache(maxsize=None)
def library() -> ctypes.CDLL | None:
    """nvbatch.c built and loaded, or None (logged once) where it cannot be."""
    try:
        return _declare(ctypes.CDLL(str(_built())))
    except Exception as error:  # no compiler, no header, a layout we do not know
        log.warning("imageloader: nvImageCodec's one-call batch decode is unavailable (%s); "
                    "decoding through its Python API", error)
        return None


def _wheel_folder() -> Path:
    from nvidia import nvimgcodec
    return Path(nvimgcodec.__file__).resolve().parent


def _built() -> Path:
    folder = _wheel_folder()
    header, lib = folder / "include" / "nvimgcodec.h", folder / "libnvimgcodec.so.0"
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), header.read_bytes(), str(lib.resolve()).encode(),
                 str(lib.stat().st_mtime_ns).encode()):
        key.update(part)
    name = f"nvbatch-{key.hexdigest()[:16]}.so"
    for cache in _cache_folders():
        target = cache / name
        if target.exists():
            return target
        try:
            _compile(folder, header.parent, lib, target)
            return target
        except OSError as error:  # a cache folder we cannot write: the next one
            log.info("imageloader: cannot build %s in %s (%s)", name, cache, error)
    raise RuntimeError(f"no writable folder to build {name} in: {_cache_folders()}")


def _cache_folders() -> list[Path]:
    """The user's cache folder, then one of this user's in the temporary folder (a home that
    cannot be written, as on some clusters)."""
    return [Path(default_cache_folder()),
            Path(tempfile.gettempdir()) / f"imageloader-{os.getuid()}"]


def _compile(wheel: Path, include: Path, lib: Path, target: Path) -> None:
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("no C compiler (set CC, or install cc or gcc)")
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        Path(work, "cuda_runtime_api.h").write_text(CUDA_STUB)
        built = Path(work, target.name)
        try:
            run = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-I", work, "-I",
                                  str(include), str(SOURCE), str(lib), f"-Wl,-rpath,{wheel}",
                                  "-o", str(built)], capture_output=True, text=True)
        except OSError as error:  # not a folder problem: no use trying another
            raise RuntimeError(f"the C compiler {compiler} could not run: {error}") from None
        if run.returncode:
            raise RuntimeError(f"{compiler} failed on {SOURCE.name}: {run.stderr.strip()[-500:]}")
        os.replace(built, target)  # atomic: a process building beside us wrote the same bytes


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    p, i = ctypes.c_void_p, ctypes.c_int
    # Arrays are passed as arrays, not as addresses: ctypes holds each one for the call and
    # checks its type and layout. An address taken from a temporary array (`.ctypes.data`)
    # points at freed memory by the time C reads it: 5291009 passed the sizes that way, and
    # on photos the decoder wrote past its buffer (illegal memory access on an H200).
    u64, i64, i32 = (np.ctypeslib.ndpointer(t, flags="C_CONTIGUOUS")
                     for t in (np.uint64, np.int64, np.int32))
    lib.bd_create.argtypes = [ctypes.c_char_p, i, i, i, i, ctypes.c_char_p, i,
                              ctypes.POINTER(p)]
    lib.bd_reserve.argtypes = [p, i]
    lib.bd_parse.argtypes = [p, u64, i64, i, i32]
    lib.bd_decode.argtypes = [p, i, i, i32, i32, u64, p, i32]
    lib.bd_layout.argtypes = [p, i, i32]
    lib.bd_decode_yuv.argtypes = [p, i, i32, i32, u64, p, i32]
    lib.bd_destroy.argtypes = [p]
    return lib


def stream_handle(device: torch.device) -> int:
    """The current CUDA stream of `device` as nvImageCodec takes it (0 on the CPU): decodes
    are queued there, after the work queued before."""
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


def on_device(device: torch.device):
    """`device` made current for the block (nothing on the CPU). nvImageCodec makes its
    streams and events on the calling thread's current device, whatever device it is given
    (its source: PerStream, PerThread), and frees them there; the CUDA runtime makes a
    context on that device for any call. A thread's current device is cuda:0 until set, so a
    decoder for cuda:1 made or dropped in a script that set none would put one on cuda:0 as
    well; so would importing nvImageCodec (gpujpeg._import_nvimgcodec)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


class Decoded:
    """One decoded image inside a batch's buffer, C x H x W uint8, read by address: `geometry`
    as gpucrop.image_geometry gives it, and the array interfaces torch and numpy view it by.
    It holds the buffer, so a view made from it keeps the memory allocated; the decoder writes
    the next batch into the same buffer in stream order (after the crops queued before)."""

    __slots__ = ("geometry", "channels", "buffer", "origin")

    def __init__(self, geometry: tuple, channels: int, buffer: torch.Tensor,
                 origin: tuple[int, int] = (0, 0)):
        self.geometry, self.channels, self.buffer = geometry, channels, buffer
        self.origin = origin  # (top, left) in the whole image: a region's, else (0, 0)

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.channels, self.geometry[1], self.geometry[2]

    def _interface(self) -> dict:
        return {"shape": self.shape, "typestr": "|u1", "data": (self.geometry[0], False),
                "strides": None, "version": 3}

    @property
    def __cuda_array_interface__(self) -> dict:
        if not self.buffer.is_cuda:
            raise AttributeError("a host image has no CUDA array interface")
        return self._interface()

    @property
    def __array_interface__(self) -> dict:
        if self.buffer.is_cuda:
            raise AttributeError("a device image has no host array interface")
        return self._interface()


class DecodedBatch:
    """The images of one `BatchDecoder.decode_at` call, as arrays: per JPEG its `geometry`
    (gpucrop.image_geometry's row: address, height, width, channel, row and column strides),
    whether it was decoded (`done`; not: its header did not parse, or the backend refused
    it) and its region's `origin` (top, left; (0, 0) for a whole image), all in the one
    device `buffer` that this object holds."""

    __slots__ = ("buffer", "channels", "geometry", "done", "origins")

    def __init__(self, buffer: torch.Tensor | None, channels: int, geometry: np.ndarray,
                 done: np.ndarray, origins: np.ndarray):
        self.buffer, self.channels = buffer, channels
        self.geometry, self.done, self.origins = geometry, done, origins

    @classmethod
    def nothing(cls, count: int, channels: int) -> DecodedBatch:
        """A batch of `count` JPEGs of which none was decoded (its call failed as a whole, or
        there were none)."""
        return cls(None, channels, np.zeros((count, 6), np.int64), np.zeros(count, bool),
                   np.zeros((count, 2), np.int64))

    def images(self) -> list:
        """Per JPEG a `Decoded` viewing the buffer, or None: what `BatchDecoder.decode` gives."""
        # The origins' lists are let go before the images are made: with them alive too, the
        # containers a batch holds at once crossed the collector's threshold, and the garbage
        # collector ran ~18x as often, its full passes ~0.6 ms a batch on the CPU machine
        # (bench_lane_python.py's "image by image" row).
        origins = [(top, left) for top, left in self.origins.tolist()]
        return [Decoded(tuple(row), self.channels, self.buffer, origin) if ok else None
                for row, ok, origin in zip(self.geometry.tolist(), self.done, origins)]


def _addresses(datas: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The host addresses (uint64) and lengths (int64) of JPEGs held as arrays."""
    n = len(datas)
    return (np.fromiter((d.__array_interface__["data"][0] for d in datas), np.uint64, n),
            np.fromiter((d.nbytes for d in datas), np.int64, n))


def _geometry(addresses: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """(n, 6) int64 geometry rows of planar images of `sizes` (height, width) at `addresses`."""
    plane = sizes[:, 0] * sizes[:, 1]
    return np.stack([addresses.astype(np.int64), sizes[:, 0], sizes[:, 1], plane, sizes[:, 1],
                     np.ones_like(plane)], axis=1)


def _check(result: int, mismatch: str) -> None:
    """bd_decode's or bd_decode_yuv's status as an exception; `mismatch` says what did not fit
    where the call answered SIZES_MISMATCH (ours, not the data's: loud, not a batch to redo)."""
    if result == SIZES_MISMATCH:
        raise ValueError(f"nvbatch: {mismatch} (nothing was decoded)")
    if result:
        raise RuntimeError(f"nvImageCodec's batch decode failed: status {result}")


class BatchDecoder:
    """An nvImageCodec decoder (one backend, or "all") driven through nvbatch.c: decode(datas)
    returns, per JPEG, a `Decoded` or None (its header did not parse, or the backend refused
    it). With `fallback` (a second backend, on a GPU) what the first refuses is decoded by that
    one in the same call, in the decoder's threads while the first decodes the rest. Calls
    from one thread at a time: the handles are reused by every call."""

    def __init__(self, lib: ctypes.CDLL, device: torch.device, backend: str,
                 threads: int | None, options: str, channels: int, capacity: int = 256,
                 regions_from: int | None = None, fallback: str | None = None):
        self.lib, self.device, self.channels = lib, device, channels
        self.regions_from = regions_from  # see the module's docstring
        on_gpu = device.type == "cuda"
        self.capacity = capacity
        handle = ctypes.c_void_p()
        status = lib.bd_create(str(_wheel_folder() / "extensions").encode(),
                               (device.index or 0) if on_gpu else CPU_ONLY_DEVICE,
                               BACKEND_KINDS[backend if on_gpu else "cpu"],
                               BACKEND_KINDS[fallback] if fallback and on_gpu else 0,
                               threads or 0, options.encode(), capacity, ctypes.byref(handle))
        if status:
            raise RuntimeError(f"nvImageCodec decoder ({backend}) could not be made: status "
                               f"{status}")
        self.handle = handle
        self.buffer: torch.Tensor | None = None
        self.sizes = np.zeros((capacity, 2), np.int32)
        self.status = np.zeros(capacity, np.int32)

    def decode(self, datas: list[np.ndarray], fresh: bool = False,
               boxes: np.ndarray | None = None) -> list:
        """With `fresh`, into a new buffer: the kept one may still hold images that crops
        queued on the stream have yet to read (a JPEG retried alone in the middle of a batch).
        `boxes`: each JPEG's crop box (left, top, right, bottom), whose region is decoded
        alone where the image has at least `regions_from` pixels (see `Decoded.origin`)."""
        if not datas:
            return []
        return self.decode_at(*_addresses(datas), fresh, boxes).images()

    def decode_at(self, starts: np.ndarray, lengths: np.ndarray, fresh: bool = False,
                  boxes: np.ndarray | None = None) -> DecodedBatch:
        """`decode` of the JPEGs at host addresses `starts` (uint64) of `lengths` bytes (int64),
        as one `DecodedBatch`: no Python object per image, so a lane's thread holds the GIL
        for a few numpy calls per batch, not a few per JPEG (under ResNet-18 the lanes' Python
        around this call held the training process's GIL 10.7% of the time, most of it per
        JPEG: results/2026-11-28-h200-handover). The caller keeps the JPEGs' memory alive
        for the call."""
        n = len(starts)
        if not n:
            return DecodedBatch.nothing(0, self.channels)
        whole = self._parse(starts, lengths)
        regions = self._regions(whole, boxes)
        sizes = np.where(regions[:, 2:3] > 0, regions[:, 2:] - regions[:, :2], whole)
        buffer, _, addresses = self._place(self.channels * sizes[:, 0] * sizes[:, 1], fresh)
        result = self.lib.bd_decode(self.handle, n, self.channels, sizes.astype(np.int32),
                                    regions.astype(np.int32), addresses,
                                    ctypes.c_void_p(stream_handle(self.device)), self.status)
        _check(result, "the sizes handed to bd_decode do not fit the JPEGs bd_parse read")
        return DecodedBatch(buffer, self.channels, _geometry(addresses, sizes),
                            self.status[:n].astype(bool), regions[:, :2].copy())

    def decode_yuv(self, datas: list[np.ndarray]) -> list:
        """Whole JPEGs into their own planar YCbCr, with no colour conversion and chroma at its
        coded resolution (bd_decode_yuv): per JPEG a (Y, Cb, Cr) of 2-D uint8 tensors viewing
        the kept buffer, or None where it is not coded in YCbCr with a subsampling in
        CHROMA_FACTORS, or the backend refused it. An experiment (scripts/bench/probe_yuv.py):
        is the conversion that `decode` asks for a cost worth moving into the crop kernel? No:
        the engines decode 25-40% fewer JPEGs a second this way, and a GPU-bound model beside
        them loses no less per image (results/2026-11-28-h200-yuv, 2026-11-28-h200-crops)."""
        n = len(datas)
        if not n:
            return []
        whole = self._parse(*_addresses(datas))
        layout = np.zeros((n, 2), np.int32)
        self.lib.bd_layout(self.handle, n, layout)
        factors = np.array([CHROMA_FACTORS.get(int(s), (0, 0)) for s in layout[:, 0]], np.int64)
        usable = (layout[:, 1] == SYCC) & (factors[:, 0] > 0) & (whole[:, 0] > 0)
        sizes = np.where(usable[:, None], whole, 0)
        chroma = np.where(usable[:, None], -(-sizes // np.maximum(factors, 1)), 0)
        buffer, offsets, addresses = self._place(
            sizes[:, 0] * sizes[:, 1] + 2 * chroma[:, 0] * chroma[:, 1])
        result = self.lib.bd_decode_yuv(self.handle, n, sizes.astype(np.int32),
                                        chroma.astype(np.int32), addresses,
                                        ctypes.c_void_p(stream_handle(self.device)), self.status)
        _check(result, "the planes handed to bd_decode_yuv do not fit the JPEGs bd_parse read")
        planes = []
        for (h, w), (ch, cw), start, ok in zip(sizes.tolist(), chroma.tolist(),
                                               offsets.tolist(), self.status[:n].tolist()):
            if not ok:
                planes.append(None)
                continue
            luma = buffer[start:start + h * w].view(h, w)
            cb = buffer[start + h * w:start + h * w + ch * cw].view(ch, cw)
            cr = buffer[start + h * w + ch * cw:start + h * w + 2 * ch * cw].view(ch, cw)
            planes.append((luma, cb, cr))
        return planes

    def _place(self, nbytes: np.ndarray, fresh: bool = False) -> tuple:
        """(buffer, offsets, addresses) for outputs of `nbytes` each, one after the other: the
        kept buffer (grown as needed), or with `fresh` a new one (see `decode`)."""
        offsets = np.concatenate([[0], np.cumsum(nbytes)[:-1]])
        total = int(nbytes.sum())
        buffer = self._new_buffer(total) if fresh else self._buffer(total)
        return buffer, offsets, (buffer.data_ptr() + offsets).astype(np.uint64)

    def _parse(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """bd_parse: the JPEGs' (height, width), int64, 0 where a header did not parse."""
        n = len(starts)
        if n > self.capacity:
            self._reserve(n)
        self.lib.bd_parse(self.handle, np.ascontiguousarray(starts, np.uint64),
                          np.ascontiguousarray(lengths, np.int64), n, self.sizes)
        return self.sizes[:n].astype(np.int64)

    def _regions(self, whole: np.ndarray, boxes: np.ndarray | None) -> np.ndarray:
        """Per JPEG (top, left, bottom, right) of the region to decode, or zeros: the whole
        image. Only images of at least `regions_from` pixels, and only where the region is
        smaller than the image."""
        regions = np.zeros((len(whole), 4), np.int64)
        if boxes is None or self.regions_from is None:
            return regions
        height, width = whole[:, 0], whole[:, 1]
        left, top, right, bottom = (np.asarray(boxes, np.float64)[:, k] for k in range(4))
        regions[:, 0] = np.clip(np.floor(top) - REGION_MARGIN, 0, height)
        regions[:, 1] = np.clip(np.floor(left) - REGION_MARGIN, 0, width)
        regions[:, 2] = np.clip(np.ceil(bottom) + REGION_MARGIN, 0, height)
        regions[:, 3] = np.clip(np.ceil(right) + REGION_MARGIN, 0, width)
        smaller = (regions[:, 2] - regions[:, 0]) * (regions[:, 3] - regions[:, 1]) \
            < height * width
        wanted = (height * width >= self.regions_from) & smaller \
            & (regions[:, 2] > regions[:, 0]) & (regions[:, 3] > regions[:, 1])
        regions[~wanted] = 0
        return regions

    def _reserve(self, capacity: int) -> None:
        """Handles for a larger batch than any so far (one batch shares one buffer, so it is
        never decoded in parts)."""
        if self.lib.bd_reserve(self.handle, capacity):
            raise MemoryError(f"no memory for {capacity} nvImageCodec handles")
        self.capacity = capacity
        self.sizes = np.zeros((capacity, 2), np.int32)
        self.status = np.zeros(capacity, np.int32)

    def _buffer(self, nbytes: int) -> torch.Tensor:
        """The output buffer, grown when a batch needs more. The old one is freed to torch's
        caching allocator in stream order: only work queued after this batch's can reuse it,
        and the views of it that are still held keep it."""
        if self.buffer is None or self.buffer.numel() < nbytes:
            self.buffer = self._new_buffer(int(nbytes * GROWTH))
        return self.buffer

    def _new_buffer(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes + 1, dtype=torch.uint8, device=self.device)

    def close(self) -> None:
        if self.handle:
            with on_device(self.device):  # nvImageCodec frees where the device is current
                self.lib.bd_destroy(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001  (at interpreter exit torch may be half torn down)
            pass
