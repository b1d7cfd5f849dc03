"""The batched JPEG decoders that decode="cuda" can drive, and the choice among them.

Three libraries decode a list of JPEGs on an NVIDIA GPU, and which is fastest depends on the
images, not only on the host (scripts/bench/bench_decoders.py, H200, batches of 256):

    decoder, one call at a time          ImageNet-like 500x375     photos, 250-2,600 px wide
    torchvision.io.decode_jpeg           17,500-23,500 img/s       5,500-6,400 img/s
    torchcodec decode_jpeg               22,600                    6,000
    nvImageCodec, new images per call    11,400                    7,700
    nvImageCodec, images reused          13,000                    11,500-12,600

and inside the loader (scripts/bench/bench.py, loader alone, 8 readers, same host and run): photos
nvImageCodec 9,943, torchvision 8,318, torchcodec 7,694 img/s; ImageNet-like nvImageCodec
17,417, torchcodec 17,378. A trial of each decoder on the first batches picked wrongly there
(nvImageCodec's kept images make its first calls its slowest), so `Options(gpu_decoder=
"auto")` (the default) takes the first installed of nvImageCodec, TorchCodec, torchvision.
All of them upsample chroma by replicating samples (nvJPEG's default, and DALI's): pixels
differ from Pillow's (which interpolates) by about one level on average, up to ~100 at sharp
colour edges, the same for each decoder.

nvImageCodec is the codec library DALI decodes with: its decoder uses the GPU's hardware JPEG
engines and CUDA kernels fed by CPU threads together. Three things make it fast here: each
batch is decoded in one C call into one kept device buffer (nvbatch.py: no Python object per
JPEG, no GIL held while it decodes; +7-8% on photos and +18-28% on ImageNet-like data for the
loader alone, and lanes that scale); where that cannot be built, its Python API decodes into
kept images (allocating 256 device buffers per batch cost a third of its time); and nobody
wraps the outputs in tensors (the crop kernel reads them by address, gpucrop.image_geometry).
torchvision's image decoding is deprecated since 0.29 (TorchCodec replaces it), so it comes
last. nvJPEG's batched hardware decoder called directly (scripts/bench/probe_nvjpeg.py)
decodes photos no faster: its host side costs ~0.7 us per KB of JPEG either way, and the
engines top out near 15-16k photos/s on an H200 whoever feeds them. On small uniform JPEGs
it halves the call, and beside ResNet-18's steps two such lanes cost them 10% where two of
nvImageCodec's cost 22% (500x375). Yet as the loader's lanes (branch nvjpeg-lane) they fed
ResNet-18 no faster on either kind of data (scripts/bench/results/2026-11-30-h200-nvjpeglane),
so the loader does not call it. It gets grayscale JPEGs wrong.

nvImageCodec can be held to one engine: the GPU's hardware JPEG engines ("hw"; A100, H100,
H200), CUDA kernels ("cuda") or its own choice per image ("all"). Where the GPU has engines the
loader decodes with them alone (photos 12,200 img/s against 10,400 for "all", decoders alone,
H200) and gives what they refuse to "all". Several decoders can work on different batches at
once (`lanes`, Options.gpu_lanes), or two on each batch together (`SplitJpeg`): by default
the engines with a CUDA helper that takes the largest JPEGs while training waits for data,
for the reasons measured there.

Every decoder works on the current CUDA stream: its outputs are ready in stream order, and
nvImageCodec decodes into its kept buffer or images only after the work queued before on that
stream (its "pre-sync"), so the previous batch's crops have read them first.
"""
from __future__ import annotations

import collections
import ctypes
import io
import logging
import os
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, NoReturn, Protocol

import numpy as np
import torch

from . import prefetch
from .decode import progressive_route
from .nvbatch import LOAD_HINT_ALL, on_device, stream_handle

log = logging.getLogger(__name__)
DECODERS = ("nvimgcodec", "torchcodec", "torchvision")
ENGINES = ("all", "hw", "cuda", "hybrid")
CUDA_ENGINE_THREADS = 4
HYBRID_ENGINE_THREADS = 8
# A split lane's helper of these engines takes each batch's largest JPEGs, others the smallest.
HELPER_TAKES_LARGEST = frozenset({"cuda"})
# ...and of those only JPEGs of at least this many times the batch's median bytes: on uniform
# images (ImageNet-like) it then idles, where taking its share of them slowed the loader alone
# by 19%; on photos it takes the tail of large ones (results/2026-11-26-h200-gpushare).
LARGE_JPEG_FACTOR = 2.0
# A split lane's helper works while the consumer waits for batches (none finished and not
# yet taken) on at least this share of its recent batches; less, and the model is what is
# slow: the helper's share decays to nothing, so its CUDA kernels and threads do not slow a
# GPU-bound model (ResNet-50 on photos lost 2-3 points to it).
NEEDED_TO_HELP = 0.5
# Where the GPU has JPEG engines: two lanes of the engines, the second working only while
# training waits for data (see `lanes`); elsewhere one decoder. Not split with CUDA helpers:
# their CPU threads and kernels in the training process cost a host-bound model more than
# they give the loader (results/2026-11-27-h200-helpers).
DEFAULT_LANES = "hw+hw"
# An experiment, off unless IMAGELOADER_DECODER_POOLS=1 (A/B in one call: `THIS_ENV=
# IMAGELOADER_DECODER_POOLS=1 BASE=. gpu_host.sh OUT versus photos`): two nvImageCodec options
# DALI's image decoder sets and we did not: the engines' batch preallocated
# (nvjpeg_hw_decoder:preallocate_batch_size, DALI gives its batch size) and nvJPEG's pinned
# buffers padded (nvjpeg_cuda_decoder:host_memory_padding, DALI's default 8 MB), so that photos
# of growing sizes do not make the decoders reallocate while training: a trace of ResNet-18 fed
# photos caught a CUDA helper's cudaFreeHost + cudaHostAlloc (nvJPEG growing a pinned buffer)
# holding a training-thread launch for 5 ms (results/2026-11-27-h200-twolanes). Device
# padding would need allocators of our own: nvImageCodec ignores it without them.
POOLS = "IMAGELOADER_DECODER_POOLS"
POOL_OPTIONS = ("nvjpeg_hw_decoder:preallocate_batch_size=256 "
                "nvjpeg_cuda_decoder:host_memory_padding=8388608")
_NVJPEG_WHEEL_LIBS = ("nvidia/cu13/lib/libnvjpeg.so.13", "nvidia/nvjpeg/lib/libnvjpeg.so.12")


class JpegDecoder(Protocol):
    """decode(datas) -> one (C, H, W) uint8 image per JPEG on the current stream, or None
    where that JPEG could not be decoded; raises RuntimeError when the whole call failed.
    With `fresh`, into new memory: a decoder that decodes each batch into memory it kept (the
    last batch's) must then leave that alone, because the batch's crops have yet to read it
    (GpuDecode retries one JPEG in the middle of a batch so).
    `stream_ordered`: whether it writes its outputs in the current stream's order."""

    name: str
    stream_ordered: bool

    def decode(self, datas: list[np.ndarray], fresh: bool = False) -> list: ...


# The start of torchvision's deprecation warning for its image decoding (0.29).
_TORCHVISION_DEPRECATED = "The image decoding and encoding capabilities of TorchVision"


class TorchvisionJpeg:
    name = "torchvision"
    stream_ordered = False  # writes from its own stream: see GpuDecode._wait_for_last_batch

    def __init__(self, device: torch.device, mode: str):
        # Deprecated since 0.29, still the one decoder that every torchvision has: it is
        # tried last (module docstring), and the warning is not the user's. Ignored by a
        # filter for that message, set here once: warnings.catch_warnings around each call
        # would run in a lane's thread, and it swaps the process's warning state (it is not
        # thread-safe), so a warning the training thread recorded meanwhile (an epoch's
        # skips, under pytest.warns) was lost (H200, results/2026-11-30-h200-codings).
        warnings.filterwarnings("ignore", message=_TORCHVISION_DEPRECATED,
                                category=DeprecationWarning)
        from torchvision.io import ImageReadMode, decode_jpeg
        self.device, self._decode = device, decode_jpeg
        self._mode = ImageReadMode.RGB if mode == "RGB" else ImageReadMode.GRAY

    def decode(self, datas: list[np.ndarray], fresh: bool = False) -> list:
        # One call for the whole list: nvJPEG's batched decoder, on the current stream; new
        # tensors every time (fresh or not).
        return self._decode([torch.from_numpy(d) for d in datas], mode=self._mode,
                            device=self.device)


class TorchCodecJpeg:
    name = "torchcodec"
    stream_ordered = True

    def __init__(self, device: torch.device, mode: str):
        from torchcodec.decoders import decode_jpeg
        self.device, self._decode, self._mode = device, decode_jpeg, \
            "RGB" if mode == "RGB" else "GRAY"
        self._turns_upright: bool | None = None

    def decode(self, datas: list[np.ndarray], fresh: bool = False) -> list:
        return self._decode([torch.from_numpy(d) for d in datas], mode=self._mode,
                            device=self.device)

    @property
    def turns_upright(self) -> bool:
        """Whether its images come back turned by their EXIF orientation (TorchCodec 0.17
        turns them on CUDA, with no way to ask it not to; nvImageCodec and torchvision are
        asked not to): asked of it once, when the first rotated JPEG comes."""
        if self._turns_upright is None:
            self._turns_upright = decoder_turns_upright(self.decode)
        return self._turns_upright


def decoder_turns_upright(decode: Callable[[list[np.ndarray]], list]) -> bool:
    """Whether `decode` (a JPEG decoder's, a list of JPEGs' bytes to C x H x W images) turns
    a JPEG tagged with EXIF orientation 6 (turned a quarter: stored 16 x 8, upright 8 x 16)."""
    from PIL import Image  # the packers' dependency; imported here only when asked

    exif = Image.Exif()
    exif[0x0112] = 6
    data = io.BytesIO()
    Image.new("RGB", (16, 8)).save(data, "JPEG", exif=exif.tobytes())
    image = decode([np.frombuffer(data.getvalue(), np.uint8).copy()])[0]
    return tuple(image.shape[-2:]) == (16, 8)


class NvImageCodecJpeg:
    """nvImageCodec's batched decoder, on one engine: "hw" (the GPU's hardware JPEG engines;
    what they refuse is decoded again with every backend), "cuda" (CUDA kernels, Huffman
    decoding on the GPU too, fed by a few CPU threads), "hybrid" (Huffman decoding on CPU
    threads, the rest in CUDA) or "all" (nvImageCodec's own choice among hardware, CUDA and
    CPU backends, per image).

    The images of one call are kept and decoded into by the next (by position, largest JPEG
    first, so each kept buffer settles near the size its position needs: device memory stays
    about a batch of decoded images instead of growing to batch x the largest image)."""

    name = "nvimgcodec"
    stream_ordered = True  # decodes after the work queued before on our stream (pre-sync)

    def __init__(self, device: torch.device, mode: str, threads: int | None = None,
                 engine: str = "all", one_call: bool | None = None,
                 regions_from: int | None = None):
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        nv = _import_nvimgcodec(device)
        self.nv, self.device, self.engine, self.mode = nv, device, engine, mode
        gray = mode != "RGB"
        self.params = nv.DecodeParams(
            apply_exif_orientation=False,  # the crops read rotated JPEGs upright (gpucrop)
            color_spec=nv.ColorSpec.GRAY if gray else nv.ColorSpec.SRGB,
            sample_format=nv.SampleFormat.P_Y if gray else nv.SampleFormat.P_RGB)
        self.kept: list = []
        # Set where a probe found no hardware JPEG engines (_preferred_nvimgcodec), so that
        # `lanes` does not probe again
        self.without_engines = False
        self._fallback = None  # engine "hw": every backend, for what the engines refuse
        self.refused = 0  # JPEGs the engines refused and the other backends decoded
        # One C call per batch (nvbatch.py) where it builds, unless one_call=False; else the
        # Python API, decoding into kept images.
        with on_device(self.device):
            self.batch = self._batch_decoder(engine, threads, regions_from) \
                if one_call is not False else None
            if one_call and self.batch is None:
                raise RuntimeError("nvImageCodec's one-call batch decode is unavailable here")
            self.decoder = None if self.batch else self._make_decoder(engine, threads)

    def __del__(self):
        # The decoders and kept images are freed with the device current (nvbatch.on_device),
        # in whichever thread the last reference goes.
        try:
            with on_device(self.device):
                if self.batch is not None:
                    self.batch.close()
                self.kept, self.decoder, self._fallback = [], None, None
        except Exception:  # noqa: BLE001  (at interpreter exit torch may be half torn down)
            pass

    def _setup(self, engine: str, threads: int | None) -> tuple[str, int | None, str]:
        """(backend, CPU threads, options) of a decoder on `engine`; backend as nvbatch names
        them ("all": nvImageCodec's choice among every backend, per image)."""
        # Replicated chroma samples: as torchvision's and DALI's GPU decode, and twice as
        # fast on photos (the hardware engines do not interpolate).
        options = "nvjpeg_hw_decoder:fancy_upsampling=0 nvjpeg_cuda_decoder:fancy_upsampling=0"
        if self.device.type != "cuda":  # the CPU backend (libjpeg-turbo): tests without a GPU
            return "cpu", threads, options
        if os.environ.get(POOLS) == "1":
            options += " " + POOL_OPTIONS
        if engine == "cuda":
            # Huffman decoding on the GPU as well (nvJPEG's GPU-hybrid backend): the CPU
            # threads only feed it, so a lane of this kind costs ~4 cores, not ~12
            # (bench_decoders.py, 2026-11-26).
            return ("hybrid", threads or CUDA_ENGINE_THREADS,
                    options + " nvjpeg_cuda_decoder:hybrid_huffman_threshold=0")
        if engine == "hybrid":  # Huffman on CPU threads, the rest in CUDA (DALI's 35%)
            return "hybrid", threads or HYBRID_ENGINE_THREADS, options
        return engine, threads, options  # "hw" (the engines alone) or "all"

    def _with_fallback(self, backend: str) -> str | None:
        """The backend that decodes what the engines refuse (progressive JPEGs) in the same
        call, while they decode the rest: "hybrid" (Huffman on the decoder's CPU threads, the
        rest in CUDA; nvJPEG has no GPU Huffman for progressive JPEGs). Unless
        decode.GPU_PROGRESSIVE is 0; then the engines alone, and what they refuse is decoded
        again after the call (`_decode_refused`). Its presence costs nothing measurable (a
        bound that sent none: fed ResNet-18 on photos +0.7% and -1.8%, H200, 2026-11-30)."""
        on = backend == "hw" and progressive_route().may_send
        return "hybrid" if on else None

    def _make_decoder(self, engine: str, threads: int | None):
        nv = self.nv
        backend, threads, options = self._setup(engine, threads)
        kinds = {"cpu": nv.CPU_ONLY, "hybrid": nv.HYBRID_CPU_GPU, "hw": nv.HW_GPU_ONLY}
        backends = [nv.Backend(kinds[backend])] if backend in kinds else None
        fallback = self._with_fallback(backend)
        if fallback:  # the load hint: see nvbatch.c's LOAD_HINT_ALL
            backends = [nv.Backend(kinds[backend], load_hint=LOAD_HINT_ALL),
                        nv.Backend(kinds[fallback])]
        return nv.Decoder(
            device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY if backend == "cpu"
            else self.device.index or 0,
            max_num_cpu_threads=threads or 0, backends=backends, options=options)

    def _batch_decoder(self, engine: str, threads: int | None, regions_from: int | None):
        from . import nvbatch
        lib = nvbatch.library() if nvbatch.enabled() else None
        if lib is None:
            return None
        backend, threads, options = self._setup(engine, threads)
        return nvbatch.BatchDecoder(lib, self.device, backend, threads, options,
                                    channels=3 if self.mode == "RGB" else 1,
                                    regions_from=regions_from or nvbatch.regions_from(),
                                    fallback=self._with_fallback(backend))

    @property
    def regions_from(self) -> int | None:
        """Images of at least this many pixels are decoded as their crop box's region when
        decode() is given `boxes` (one C call per batch only; nvbatch.py): the constructor's
        `regions_from`, else IMAGELOADER_REGIONS_FROM, else None (off)."""
        return self.batch.regions_from if self.batch is not None else None

    def decode(self, datas: list[np.ndarray], fresh: bool = False, retry: bool = True,
               boxes: np.ndarray | None = None) -> list:
        """Per JPEG, its decoded image (C x H x W, by array interface) or None; with `fresh`
        into new memory, the kept buffer or images untouched. With the engines alone ("hw")
        what they refuse is decoded once more with every backend, unless `retry` is False.
        `boxes` (left, top, right, bottom per JPEG): see `regions_from`."""
        with on_device(self.device):
            return self._decode_on_device(datas, fresh, retry, boxes)

    def _decode_on_device(self, datas: list[np.ndarray], fresh: bool, retry: bool,
                          boxes: np.ndarray | None) -> list:
        if self.batch is not None:
            out = self.batch.decode(datas, fresh=fresh, boxes=boxes)
            # None: refused by the engines, or a header that did not parse
            if retry and self.engine == "hw" and None in out:
                self._decode_refused([self._code_stream(d) if image is None else None
                                      for d, image in zip(datas, out)], out)
            return out
        streams = [self._code_stream(d) for d in datas]
        order = sorted(range(len(streams)), key=lambda i: -_pixels(streams[i]))
        todo = [streams[i] for i in order if streams[i] is not None]
        images = self._decode(todo, fresh) if todo else []
        out: list = [None] * len(datas)
        for i, image in zip([i for i in order if streams[i] is not None], images):
            out[i] = image
        if retry and self.engine == "hw" and any(out[i] is None for i in range(len(out))
                                                 if streams[i] is not None):
            self._decode_refused(streams, out)
        return out

    def decode_at(self, starts: np.ndarray, lengths: np.ndarray,
                  boxes: np.ndarray | None = None):
        """The JPEGs at host addresses `starts` of `lengths` bytes, decoded into the kept
        buffer as one `nvbatch.DecodedBatch` (arrays, no object per image), or None where
        there is no one-call decode (the Python API: `decode`). Nothing is retried here: what
        the engines refused is not `done`, for the caller to decode again."""
        if self.batch is None:
            return None
        with on_device(self.device):
            return self.batch.decode_at(starts, lengths, boxes=boxes)

    def _decode_refused(self, streams: list, out: list) -> None:
        """What the hardware engines refused (a layout they lack), once more with every
        backend through the Python API; new images, not kept ones: this is rare."""
        if self._fallback is None:
            self._fallback = self._make_decoder("all", None)
        again = [i for i, image in enumerate(out) if image is None and streams[i] is not None]
        if not again:
            return
        images = self._fallback.decode([streams[i] for i in again], params=self.params,
                                       cuda_stream=stream_handle(self.device))
        for i, image in zip(again, images):
            out[i] = image
        # Those decoded so (what fails here too is retried alone, then goes to Pillow: counted
        # there, once)
        self.refused += sum(image is not None for image in images)

    def _code_stream(self, data: np.ndarray):
        try:
            stream = self.nv.CodeStream(data)
            stream.width  # parsed on first use: a header it cannot parse fails here
            return stream
        except RuntimeError:  # this image alone goes elsewhere (GpuDecode retries, Pillow)
            return None

    def _decode(self, streams: list, fresh: bool = False) -> list:
        reuse = self.kept[:len(streams)] if len(self.kept) >= len(streams) and not fresh \
            else None
        images = self.decoder.decode(streams, params=self.params,
                                     cuda_stream=stream_handle(self.device),
                                     **({"images": reuse} if reuse else {}))
        if reuse is None and not fresh:  # first call, or a longer list: these become the
            # kept ones (the old ones are freed in stream order); a failed one leaves a gap
            # until next time
            self.kept = [image for image in images if image is not None]
        return images


class SplitJpeg:
    """One batch decoded by two nvImageCodec decoders at once: `first` (the hardware engines)
    and `helper`, in a thread and on a CUDA stream of its own. A "hybrid" helper (Huffman on
    a few CPU threads, the rest in CUDA) takes the smallest JPEGs; a "cuda" helper (Huffman
    on the GPU too) the largest: its cost per image is ~3x the engines' (~43 against ~12 us,
    beside ~470 against ~160 us per megapixel: bench_decoders.py's rates on both archives,
    H200), so it pays where the pixels are. The helper's share of each batch follows both
    decoders' measured rates, so they finish together.

    Lanes (`lanes`) give each decoder whole batches, handed out in order: a slow one holds
    back the batches after its own (the engines beside a CUDA lane fed the loader 7,200
    photos/s, the engines alone 10,000). Splitting each batch never waits on the slower: it
    only gets less of the next one."""

    name = "nvimgcodec"
    stream_ordered = True  # the helper's stream waits for ours before, ours for it after

    def __init__(self, first: NvImageCodecJpeg, helper: NvImageCodecJpeg,
                 share: float = 0.1, backlog: Callable[[], int] | None = None):
        self.first, self.helper = first, helper
        self.engine = f"{first.engine}|{helper.engine}"
        self.helper_takes_largest = helper.engine in HELPER_TAKES_LARGEST
        self.device, self.mode = first.device, first.mode
        self.share = share  # of each batch's JPEGs, to the helper
        # The shares of the last batches (how it settled), bounded: a run has millions.
        self.shares: collections.deque[float] = collections.deque(maxlen=1000)
        # Its thread ends when the pool is collected with this decoder (the executor's own
        # weakref callback), so a dropped loader leaves none behind.
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="imageloader-split")
        # At the lanes' priority: the helper decodes part of the lane's batch.
        self._side = torch.cuda.Stream(
            self.device, priority=prefetch.side_stream_priority(self.device)) \
            if self.device.type == "cuda" else None
        # Batches finished and not yet taken by the consumer (prefetch.Backlog; None: always
        # help), and the smoothed share of batches decoded while there were none.
        self.backlog = backlog
        self.needed = 1.0

    @property
    def regions_from(self) -> int | None:
        return getattr(self.first, "regions_from", None)

    @property
    def refused(self) -> int:
        """JPEGs the hardware engines refused and other backends decoded, in either decoder."""
        return getattr(self.first, "refused", 0) + getattr(self.helper, "refused", 0)

    @property
    def mean_share(self) -> float:
        """The helper's share over the last batches (up to 1,000)."""
        return float(np.mean(self.shares)) if self.shares else self.share

    def decode(self, datas: list[np.ndarray], fresh: bool = False,
               boxes: np.ndarray | None = None) -> list:
        n = len(datas)
        sizes = [len(data) for data in datas]
        # By bytes (no header parsed here), the helper's end of the batch first: its share
        # is the first `count` of this order, the first decoder's the rest.
        order = sorted(range(n), key=sizes.__getitem__, reverse=self.helper_takes_largest)
        count = self._helper_count(sizes)
        theirs, mine = order[:count], order[count:]
        helped = self._pool.submit(self._help, [datas[i] for i in theirs], self._mark(),
                                   fresh, _rows(boxes, theirs)) if theirs else None
        started = time.perf_counter()
        out: list = [None] * n
        try:
            for i, image in zip(mine, self.first.decode([datas[i] for i in mine], fresh,
                                                        **_rows(boxes, mine))):
                out[i] = image
        finally:  # the helper's images are waited for even when ours failed
            first_s = time.perf_counter() - started
            images, helper_s, done = helped.result() if helped else ([], 0.0, None)
        if done is not None:
            # GPU side, not the host: our stream's next work (the crops) waits for the
            # helper's last kernels (colour conversion) queued on its stream.
            torch.cuda.current_stream(self.device).wait_event(done)
        for i, image in zip(theirs, images):
            out[i] = image
        self._follow_demand()  # for the next batch: see there why at this batch's end
        self._steer(len(mine), first_s, len(theirs), helper_s)
        return out

    def _helper_count(self, sizes: list[int]) -> int:
        n = len(sizes)
        # At least one while it has a share: its rate stays measured, so it can be steered.
        count = min(n - 1, max(1, round(n * self.share))) if n > 1 and self.share else 0
        if self.helper_takes_largest and count:
            least = LARGE_JPEG_FACTOR * float(np.median(sizes))
            count = min(count, sum(size >= least for size in sizes))
        return count

    @property
    def _consumer_waits(self) -> bool:
        """Whether the consumer has waited for batches often enough lately to want help."""
        return self.needed >= NEEDED_TO_HELP

    def _follow_demand(self) -> None:
        """The helper works only while the consumer waits for batches: with batches finished
        and not taken, the model is slower than decoding (ResNet-50), and the helper's GPU
        kernels would only slow it. (The time between its calls did not tell: under
        ResNet-50 a split lane so gated kept its share, 2026-11-26-h200-gpushare.)
        Not needed: its share halves each batch, to none; needed again: it restarts from 2%
        and is steered.

        Read at each batch's end, before the prefetcher counts this batch: a consumer that
        waits has had a whole decode's time to take the lane's last batch. Read as a decode
        started (until 2026-11-26), the count still held that batch, put there moments before
        and not yet taken by a consumer thread that had not run since, so the helper was judged
        not needed more often than it was: it settled at 3-5% of the photos even for the
        loader alone, whatever the bytes gate (2026-11-26-h200-gpushare, call 24)."""
        if self.backlog is None:
            return
        self.needed = 0.8 * self.needed + 0.2 * (self.backlog() == 0)
        if not self._consumer_waits:
            self.share = self.share / 2 if self.share >= 0.02 else 0.0
        elif self.share < 0.02:
            self.share = 0.02

    def _mark(self):
        """An event after the work queued so far on our stream: the last batch's crops, which
        read the helper's kept images too, before the helper decodes into them again."""
        if self._side is None:
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    def _help(self, datas: list[np.ndarray], after, fresh: bool,
              boxes: dict) -> tuple[list, float, object]:
        if self._side is None:
            started = time.perf_counter()
            return self.helper.decode(datas, fresh, **boxes), time.perf_counter() - started, None
        with torch.cuda.stream(self._side):
            self._side.wait_event(after)
            started = time.perf_counter()
            images = self.helper.decode(datas, fresh, **boxes)
            seconds = time.perf_counter() - started
            done = torch.cuda.Event()
            done.record(self._side)
        return images, seconds, done

    def _steer(self, mine: int, first_s: float, theirs: int, helper_s: float) -> None:
        """Move the helper's share towards where both would have finished together: its rate
        over both rates, each measured on this batch while the other ran. Smoothed, and kept
        between 2% (so the helper's rate stays measured while it works) and 60%."""
        self.shares.append(self.share)
        if not self._consumer_waits or not (mine and theirs and first_s > 0 and helper_s > 0):
            return  # not needed (_follow_demand lets its share decay), or nothing measured
        first_rate, helper_rate = mine / first_s, theirs / helper_s
        target = helper_rate / (first_rate + helper_rate)
        self.share = min(0.6, max(0.02, 0.7 * self.share + 0.3 * target))


def _rows(boxes: np.ndarray | None, which: list[int]) -> dict:
    """decode()'s `boxes` argument for the JPEGs `which` of a batch, or none."""
    return {} if boxes is None else {"boxes": boxes[which]}


def _pixels(stream) -> int:
    return -1 if stream is None else stream.width * stream.height


def _import_nvimgcodec(device: torch.device):
    """nvImageCodec's module, first imported with `device` current: the import itself makes a
    CUDA context on the current device, so a process that works on cuda:1 alone and imported
    it with cuda:0 current would hold ~500 MB of GPU 0 as well (probe_second_gpu.py on a
    2-GPU H200: on GPU 0 from the import on; results/2026-11-30-h200x2-second-gpu)."""
    with on_device(device):
        _load_nvjpeg_wheel()
        from nvidia import nvimgcodec
    return nvimgcodec


def _load_nvjpeg_wheel() -> None:
    """nvImageCodec opens libnvjpeg by name, so an older copy on the library path (a CUDA
    toolkit's) wins over the nvidia-nvjpeg wheel installed beside it. Before nvJPEG 13.2 the
    hardware decoder's region decoding misbehaves and it warns about it; load the wheel's."""
    for path in _nvjpeg_wheel_paths():
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as error:
            log.info("imageloader: could not load %s: %s", path, error)
            continue
        return


def _nvjpeg_wheel_paths() -> Iterator[str]:
    """The nvidia-nvjpeg wheel's libnvjpeg files on sys.path, in its order (CUDA 13's first
    within each entry)."""
    for entry in sys.path:
        for name in _NVJPEG_WHEEL_LIBS:
            path = os.path.join(entry or ".", name)
            if os.path.exists(path):
                yield path


def available(device: torch.device, mode: str, choice: str = "auto",
              first: bool = False) -> list[JpegDecoder]:
    """The decoders that load here, best first (`choice` alone, if given); with `first`, only
    the best (each made holds GPU memory and handles: the loader uses one)."""
    if choice not in ("auto", *DECODERS):
        raise ValueError(f"gpu_decoder must be 'auto' or one of {DECODERS}, got {choice!r}")
    kinds = {"nvimgcodec": _preferred_nvimgcodec, "torchcodec": TorchCodecJpeg,
             "torchvision": TorchvisionJpeg}
    found, errors = [], {}
    for name in DECODERS if choice == "auto" else (choice,):
        try:
            found.append(kinds[name](device, mode))
        except Exception as error:  # not installed, built for another torch or CUDA
            errors[name] = f"{type(error).__name__}: {error}"
            continue
        if first:
            break
    if choice != "auto" and not found:
        raise ImportError(f"gpu_decoder={choice!r} is not usable here: {errors[choice]}")
    for name, error in errors.items():
        log.info("imageloader: GPU JPEG decoder %s unavailable (%s)", name, error)
    return found


def lanes(preferred: JpegDecoder, spec: int | str | None = None,
          backlog: Callable[[], int] | None = None) -> list[JpegDecoder]:
    """Decoders for the lanes of GPU decoding, each decoding its own batches at the same time
    as the others (prefetch.Prefetcher(lanes=...)).

    `spec`: None (one lane), a number of lanes, or the lanes spelled out as engines joined
    by "+", each with its CPU threads if wanted: "hw+hw", "hw:2+hw:2", "hw+cuda:4"; a lane of
    two engines split by "|" decodes each of its batches with both at once ("hw|hybrid:4",
    `SplitJpeg`: the engines take the larger JPEGs, a hybrid helper the rest). A number
    alternates the hardware JPEG engines ("hw") and CUDA ("cuda") where the GPU has engines,
    else takes nvImageCodec's own choice ("all"). TorchCodec and torchvision decode through
    one handle per process (their calls from several threads take turns): one lane.

    Measured on an H200 (bench_decoders.py and bench.py, 2026-11-26, batches of 256): the
    decoders alone gain from lanes (photos 10,400 img/s with one, 14,800 with hw+hw+cuda;
    ImageNet-like 22,800 and 32,700 with hw+hw), the loader alone a little (hw:2+hw:2:
    11,300 against 10,200 photos, 21,700 against 19,400 ImageNet-like; hw+hybrid 11,700
    against 10,000 on ~12 cores), and training does not: ResNet-18 on photos lost 0-5
    points of its data-on-GPU rate with two hw lanes and 9 with a hybrid one, and a CUDA
    lane beside the engines slowed even the loader (7,200-9,000 photos/s). A lane splitting
    each batch between the engines and a hybrid helper ("hw|hybrid:8") settled with half the
    JPEGs on the helper and gained the loader 2-5% alone, ResNet-18 nothing, ResNet-50 -4
    points (2026-11-26-h200-split). A CUDA helper (Huffman on the GPU, 8 threads) taking
    the largest JPEGs, only those of over twice the batch's median bytes, and only while
    the consumer waits for batches ("hw|cuda:8", 2026-11-26-h200-gpushare): photos alone
    +5 to +22% (11,100-12,300 -> 11,700-13,900 img/s), ResNet-18 on photos 80.6, 80.4%
    against 80.1, 77.3% (8 s windows, interleaved), ResNet-50 96.1% against 96.2%;
    ImageNet-like alone -6 / +5% on two hosts, ResNet-18 +0.7 / +1.9 points; with its demand
    gate mended, photos alone +15%, ResNet-18 +7 points (H100, 2026-11-26-gpu1-mends-lanes).
    The loader's lanes after the first work only while no finished batch waits for the
    consumer (Prefetcher's lanes_on_demand). With nvImageCodec's batch in one C call
    (nvbatch, which lets go of the GIL) two split lanes pay: the loader alone +19-34% on
    photos (12,878 against 9,596 img/s) and +33% on ImageNet-like data (31,247 against
    23,560); ResNet-18 on photos +3 to +5 points (78.3, 75.7% against 73.6, 72.6%,
    interleaved; +7.6% and +12.8 points in two other runs), ImageNet-like a wash (91.2, 91.1
    against 92.8, 88.1%), ResNet-50 -1.0 / -0.4 points, within noise (H200,
    2026-11-27-h200-twolanes). But the helpers' work, even at 0-7% of each batch, costs a
    host-bound model's training thread more than it gives: ResNet-18 on photos 82.2, 80.9%
    with two lanes of the engines against 71.1, 74.1% with two split lanes (interleaved),
    ResNet-50 93.7 against 94.7%, the loader alone 12,590-12,755 against 12,672-13,882 img/s
    with 2.1 against 7.2 cores in the training process; beside ResNet-18's data-on-GPU steps
    the split lanes' helpers working all the time took 75% of its rate, two lanes of the
    engines 9% (H200, 2026-11-27-h200-helpers). So where the GPU has engines two lanes of
    them ("hw+hw") are the default (None); "hw|cuda:8+hw|cuda:8" feeds the loader alone
    faster, `1` is the engines alone. Two lanes do not fill the engines: a third ("hw+hw+hw")
    fed the loader alone 15,900 photos/s against 14,685 (a fourth 15,631), but cost ResNet-18
    5% (10,813-10,935 against 11,467-11,500 img/s, interleaved) and ResNet-50 nothing (H200,
    2026-11-29-h200-wall): a third decoding thread slows a host-bound model's steps more than
    its batches gain."""
    if not isinstance(preferred, NvImageCodecJpeg) or preferred.device.type != "cuda":
        check_lanes(spec)  # a bad spec is an error here too
        if spec not in (None, 1):
            log.info("imageloader: %s decodes in one lane", preferred.name)
        return [preferred]
    # The preferred decoder is the engines' own where the GPU has them (`available`), or
    # says the probe found none: no second probe, no second decoder.
    if preferred.engine == "hw":
        probed = preferred
    elif preferred.without_engines:
        probed = None
    else:
        probed = _engines_decoder(preferred.device, preferred.mode)
    made = []
    for lane in _lane_kinds(spec, probed is not None):
        decoders = []
        for kind, threads in lane:
            if kind == "hw" and threads is None and probed is not None:
                decoders.append(probed)  # the probe's decoder, the first engines one: made once
                probed = None
            else:
                decoders.append(NvImageCodecJpeg(preferred.device, preferred.mode,
                                                 threads=threads, engine=kind))
        made.append(SplitJpeg(*decoders, backlog=backlog) if len(decoders) == 2
                    else decoders[0])
    return made


def check_lanes(spec: int | str | None) -> None:
    """Options.gpu_lanes must be None, a count >= 1 or engines joined by "+" (see `lanes`)."""
    if isinstance(spec, bool) or not isinstance(spec, (int, str, type(None))):
        raise ValueError(f"gpu_lanes must be None, a count or engines like 'hw+hw', got "
                         f"{spec!r}")
    _lane_kinds(spec, True)


def _lane_kinds(spec: int | str | None,
                engines: bool) -> list[list[tuple[str, int | None]]]:
    """For each lane of `spec` (see `lanes`), its decoders: [(engine, CPU threads or None)],
    two where the lane splits each batch ("hw|hybrid:4")."""
    if spec is None:
        spec = DEFAULT_LANES if engines else 1
    if isinstance(spec, str) and not spec.isdigit():
        kinds = []
        for lane in spec.split("+"):
            parts = lane.split("|")
            if len(parts) > 2:
                _bad_lane(lane)
            kinds.append([_engine_of(part) for part in parts])
        return kinds
    count = int(spec)
    if count < 1:
        raise ValueError(f"gpu_lanes must be >= 1, got {spec!r}")
    if not engines:
        return [[("all", None)]] * count
    return [[(("hw", "cuda")[k % 2], None)] for k in range(count)]


def _engine_of(part: str) -> tuple[str, int | None]:
    engine, _, threads = part.partition(":")
    if engine not in ENGINES or (threads and not threads.isdigit()):
        _bad_lane(part)
    return engine, int(threads) if threads else None


def _bad_lane(part: str) -> NoReturn:
    raise ValueError(f"gpu_lanes: {part!r} is not an engine of {ENGINES} with optional "
                     f"':threads', or two such split by '|' (e.g. 'hw+hw', 'hw:2+cuda:4', "
                     f"'hw|hybrid:4')")


def has_jpeg_engines(decoder: NvImageCodecJpeg) -> bool:
    """Whether the GPU decodes JPEG in hardware (A100, H100, H200...; not most others)."""
    return _engines_decoder(decoder.device, decoder.mode) is not None


def _preferred_nvimgcodec(device: torch.device, mode: str) -> NvImageCodecJpeg:
    """nvImageCodec's decoder for the first lane: on the hardware JPEG engines where the GPU
    has them (the default lanes are theirs), else nvImageCodec's choice among its backends.
    One decoder made, not two: each costs ~0.5 s of a loader's start and its GPU memory, and
    the engines' first decode (the probe) ~1.3 s more (H200, probe_start.py, 2026-11-27)."""
    engines = _engines_decoder(device, mode) if device.type == "cuda" else None
    if engines is not None:
        return engines
    decoder = NvImageCodecJpeg(device, mode)
    decoder.without_engines = device.type == "cuda"
    return decoder


def _engines_decoder(device: torch.device, mode: str) -> NvImageCodecJpeg | None:
    """A decoder on the hardware JPEG engines, if this GPU has them: one small JPEG decoded
    with the engines alone says so."""
    from PIL import Image
    probe = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 90)).save(probe, "JPEG", quality=90)
    try:
        hw = NvImageCodecJpeg(device, mode, engine="hw")
        image = hw.decode([np.frombuffer(probe.getvalue(), np.uint8)], retry=False)[0]
    except Exception as error:  # no such backend on this GPU or in this nvImageCodec
        log.info("imageloader: no hardware JPEG decoding here (%s)", error)
        return None
    return hw if image is not None else None
