"""nvJPEG's hardware decoder called directly (ctypes), against nvImageCodec's, decoders alone.

    python scripts/bench/probe_nvjpeg.py --archive bench-data/photos-16000.tgz --images 4096

Why: on photos each lane's nvImageCodec call takes 30-34 ms per batch of 256 beside ResNet-18
(48-53 ms for the slowest tenth), two lanes decode 14,685 img/s and three 15,900
(results/2026-11-29-h200-wall): one call does not keep the engines busy, and every extra lane
is a thread in the training process. nvImageCodec's hardware decoder makes one
nvjpegDecodeBatched call per batch too, after a host wait for its previous call's event and
with per-image work around it (image info through callbacks, output descriptors; its
extensions/nvjpeg/hw_decoder.cpp); DALI and TorchCodec call nvJPEG themselves. This asks, on
the same JPEGs in the same batches, whether a lean direct call decodes faster, with how much
host time, whether the bitstreams on the device (one copy a batch) help, and whether two
threads then add anything.

Rows: nvImageCodec's one C call per batch (the loader's lane, imageloader/nvbatch.py), then
nvJPEG's hardware backend (ROWS): bitstreams in pinned host memory (as the packers leave them)
or copied to the device in one copy a batch (NVJPEG_BACKEND_HARDWARE_DEVICE); nvJPEG's memory
pools or not; chroma replicated (as the loader decodes) or interpolated (PIL's pixels); one
thread or two, each with its own handle, state and stream. Each row: img/s, the thread's CPU
per batch, the host time of the call (median, 90th percentile), and how often it returned
with its stream still busy. Before every call the thread waits on the host for its stream:
the engines' writes do not wait for earlier work on the stream (meta-pytorch/torchcodec pull
request 1634, measured on H100s), so a real lane must know that the last batch's crops are
done with the buffer, as nvImageCodec does by waiting on an event. Then what a call's host
time grows with (`call_cost`), and the first batch's pixels: direct against nvImageCodec,
interpolated against PIL. `--processes N` instead: one direct thread in each of N processes
at once.

Answer (H200, results/2026-11-29-h200-nvjpeg): on 500x375 a direct call decodes 2.1x as much
as nvImageCodec's (42,200 against 20,200 img/s) with half the host time; on photos the same
(10,900 against 11,300), because there the host time is nvJPEG's own, 0.67 us per KB of
bitstream. Two threads or several processes do not add to it much (photos: 3 processes
15,100): the engines top out near 15-16k photos/s. Gray JPEGs come out wrong from the direct
call into planar RGB. Beside ResNet-18's steps on 500x375 (probe_host_threads.py
--lanes-beside nvjpeg+nvjpeg, DirectLane), two direct lanes cost the steps 10% where the
default's two cost 22%, decoding more.

No CUDA toolkit: nvjpeg.h's functions are declared here for ctypes; the library is the
nvidia-nvjpeg wheel's (libnvjpeg.so.13), found on sys.path as gpujpeg finds it.
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decoders import batches as in_batches  # noqa: E402
from bench_decoders import jpegs_parser, write_results  # noqa: E402  (the same JPEGs, batched)

# nvjpeg.h (13.3): backends, output format, chroma subsampling, flags
BACKEND_HARDWARE, BACKEND_HARDWARE_DEVICE = 3, 5
OUTPUT_RGB = 3  # planar: three full-size planes
CSS_444 = 0
SUBSAMPLING = {0: "444", 1: "422", 2: "420", 3: "440", 4: "411", 5: "410", 6: "gray", 7: "410v"}
FLAG_MEMORY_POOLS = 1 << 1  # keep freed buffers for reuse (no cudaFree / cudaFreeHost a batch)
FLAG_UPSAMPLING_WITH_INTERPOLATION = 1 << 5  # libjpeg's (PIL's) chroma upsampling
STATUS = {1: "not initialized", 2: "invalid parameter", 3: "bad JPEG", 4: "JPEG not supported",
          5: "allocator failure", 6: "execution failed", 7: "architecture mismatch (no engines)",
          8: "internal error", 9: "implementation not supported", 10: "incomplete bitstream"}

P, I, U, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_size_t
SIGNATURES = {  # name: argument types (all return nvjpegStatus_t, an int)
    "nvjpegCreateEx": [I, P, P, U, ctypes.POINTER(P)],
    "nvjpegDestroy": [P],
    "nvjpegGetHardwareDecoderInfo": [P, ctypes.POINTER(U), ctypes.POINTER(U)],
    "nvjpegJpegStateCreate": [P, ctypes.POINTER(P)],
    "nvjpegJpegStateDestroy": [P],
    "nvjpegJpegStreamCreate": [P, ctypes.POINTER(P)],
    "nvjpegJpegStreamDestroy": [P],
    "nvjpegGetImageInfo": [P, P, S, ctypes.POINTER(I), ctypes.POINTER(I), P, P],
    "nvjpegJpegStreamParseHeader": [P, P, S, P],
    "nvjpegDecodeBatchedSupported": [P, P, ctypes.POINTER(I)],
    "nvjpegDecodeBatchedPreAllocate": [P, P, I, I, I, I, I],
    "nvjpegDecodeBatchedInitialize": [P, P, I, I, I],
    "nvjpegDecodeBatched": [P, P, P, P, P, P],
}


# (threads, bitstreams on the device, nvJPEG's memory pools, chroma interpolated) of each
# direct row
ROWS = [(1, False, False, False), (1, False, True, False), (1, False, True, True),
        (1, True, True, False), (2, False, True, False), (2, True, True, False)]


def get_args_parser():
    p = jpegs_parser(__doc__, images=4096)
    p.add_argument("--passes", type=int, default=3, help="timed passes over the images, each row")
    p.add_argument("--out", default=None, help="JSON results")
    p.add_argument("--processes", type=int, default=0,
                   help="instead of the rows: one direct thread in each of this many processes "
                        "at once")
    p.add_argument("--solo", action="store_true", help=argparse.SUPPRESS)
    return p


def load_library() -> ctypes.CDLL | None:
    """The nvidia-nvjpeg wheel's libnvjpeg (on sys.path, where gpujpeg._load_nvjpeg_wheel finds
    it), else one the dynamic loader finds by name; None if neither loads."""
    from imageloader.gpujpeg import _nvjpeg_wheel_paths
    for path in [*_nvjpeg_wheel_paths(), ctypes.util.find_library("nvjpeg") or "libnvjpeg.so"]:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name, argtypes in SIGNATURES.items():
            getattr(lib, name).argtypes = argtypes
            getattr(lib, name).restype = I
        return lib
    return None


def check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what}: nvJPEG status {status} ({STATUS.get(status, '?')})")


def plane_offsets(heights: np.ndarray, widths: np.ndarray) -> tuple[np.ndarray, int]:
    """Where each image of a batch starts in one output buffer (planar RGB: 3 * h * w bytes
    each, one after another), and the bytes the batch needs."""
    sizes = 3 * heights.astype(np.int64) * widths
    ends = np.cumsum(sizes)
    return ends - sizes, int(ends[-1]) if len(ends) else 0


def planar_destinations(addresses: np.ndarray, heights: np.ndarray,
                        widths: np.ndarray) -> np.ndarray:
    """nvjpegImage_t per image, as nvJPEG reads an array of them: (n, 8) uint64, channel[0..3]
    then pitch[0..3]. Planar RGB: plane c at address + c * h * w, pitch = width; the fourth
    channel unused (NULL, 0)."""
    out = np.zeros((len(addresses), 8), np.uint64)
    plane = heights.astype(np.uint64) * widths.astype(np.uint64)
    for c in range(3):
        out[:, c] = addresses.astype(np.uint64) + np.uint64(c) * plane
        out[:, 4 + c] = widths
    return out


class HardwareDecoder:
    """One nvJPEG handle of the hardware backend, with its state and a parser: what one lane
    (one thread) would own. `backend`: BACKEND_HARDWARE (bitstreams in host memory) or
    BACKEND_HARDWARE_DEVICE (on the device)."""

    def __init__(self, lib: ctypes.CDLL, backend: int, batch: int, size_hint=(480, 640),
                 pools: bool = False, interpolate: bool = False):
        self.lib, self.handle, self.state, self.parser = lib, P(), P(), P()
        # nvImageCodec hands nvJPEG its own pooling allocators (nvjpegCreateExV2); without
        # them or the pools flag, nvJPEG's default ones may free and allocate per batch
        # Chroma replicated unless `interpolate` (PIL's upsampling), as the loader's decoders
        flags = (FLAG_UPSAMPLING_WITH_INTERPOLATION if interpolate else 0) | \
            (FLAG_MEMORY_POOLS if pools else 0)
        check(lib.nvjpegCreateEx(backend, None, None, flags, ctypes.byref(self.handle)),
              "nvjpegCreateEx")
        check(lib.nvjpegJpegStateCreate(self.handle, ctypes.byref(self.state)), "state")
        check(lib.nvjpegJpegStreamCreate(self.handle, ctypes.byref(self.parser)), "parser")
        # Preallocated for `batch` images of about that size (DALI: >20% on 8-GPU training)
        check(lib.nvjpegDecodeBatchedPreAllocate(self.handle, self.state, batch, size_hint[1],
                                                 size_hint[0], CSS_444, OUTPUT_RGB),
              "nvjpegDecodeBatchedPreAllocate")

    def engines(self) -> tuple[int, int]:
        engines, cores = U(), U()
        check(self.lib.nvjpegGetHardwareDecoderInfo(self.handle, ctypes.byref(engines),
                                                    ctypes.byref(cores)), "decoder info")
        return engines.value, cores.value

    def describe(self, data: np.ndarray) -> tuple[int, int, int, bool]:
        """Height, width, chroma subsampling (nvjpegChromaSubsampling_t) and whether the engines
        take this JPEG (nvjpegDecodeBatchedSupported: baseline, one scan, no 4:1:1 / 4:1:0, 1
        or 3 components, within size limits)."""
        components, subsampling = I(), I()
        widths, heights = (I * 4)(), (I * 4)()
        if self.lib.nvjpegGetImageInfo(self.handle, data.ctypes.data, data.nbytes,
                                       ctypes.byref(components), ctypes.byref(subsampling),
                                       widths, heights) != 0:
            return 0, 0, -1, False  # a header nvJPEG cannot read: not the engines'
        refused = I(1)
        if self.lib.nvjpegJpegStreamParseHeader(self.handle, data.ctypes.data, data.nbytes,
                                                self.parser) == 0:
            self.lib.nvjpegDecodeBatchedSupported(self.handle, self.parser, ctypes.byref(refused))
        return heights[0], widths[0], subsampling.value, refused.value == 0

    def decode(self, pointers: np.ndarray, lengths: np.ndarray, destinations: np.ndarray,
               stream: int) -> None:
        """One batch: every JPEG at `pointers` into its planes, work queued on `stream`. The
        state is the batch's: the caller must know the last call's work is done (here: the
        host waited for the stream)."""
        n = len(pointers)
        check(self.lib.nvjpegDecodeBatchedInitialize(self.handle, self.state, n, 1, OUTPUT_RGB),
              "nvjpegDecodeBatchedInitialize")
        check(self.lib.nvjpegDecodeBatched(self.handle, self.state, pointers.ctypes.data,
                                           lengths.ctypes.data, destinations.ctypes.data,
                                           stream), "nvjpegDecodeBatched")

    def close(self) -> None:
        self.lib.nvjpegJpegStreamDestroy(self.parser)
        self.lib.nvjpegJpegStateDestroy(self.state)
        self.lib.nvjpegDestroy(self.handle)


class Batch:
    """One batch's JPEGs in one pinned host buffer (as the packers leave them), their sizes,
    and where each image goes in an output buffer."""

    def __init__(self, datas: list[np.ndarray], shapes: list[tuple[int, int]], torch):
        self.lengths = np.array([d.nbytes for d in datas], np.uint64)
        starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.host = torch.empty(int(self.lengths.sum()), dtype=torch.uint8, pin_memory=True)
        flat = self.host.numpy()
        for start, data in zip(starts, datas):
            flat[start:start + data.nbytes] = data
        self.starts = starts
        self.heights = np.array([h for h, _ in shapes], np.int64)
        self.widths = np.array([w for _, w in shapes], np.int64)
        self.offsets, self.out_bytes = plane_offsets(self.heights, self.widths)

    def views(self, out) -> list:
        """Each image of the batch, (3, H, W), as a view of the output tensor `out`."""
        return [out[int(o):int(o) + 3 * int(h) * int(w)].view(3, int(h), int(w))
                for o, h, w in zip(self.offsets, self.heights, self.widths)]

    def pointers(self, base: int) -> np.ndarray:
        return (np.uint64(base) + self.starts.astype(np.uint64)).astype(np.uint64)

    def destinations(self, out_base: int) -> np.ndarray:
        return planar_destinations(np.uint64(out_base) + self.offsets.astype(np.uint64),
                                   self.heights, self.widths)


def make_batches(datas: list[np.ndarray], shapes: list, size: int, torch) -> list[Batch]:
    """The JPEGs and their (height, width) as Batches of `size`, in order."""
    return [Batch(group, shape_group, torch)
            for group, shape_group in zip(in_batches(datas, size), in_batches(shapes, size))]


def no_calls() -> dict[str, list]:
    """Where `lane` records its calls: host ms, the thread's CPU ms, returned busy."""
    return {"ms": [], "cpu_ms": [], "busy": []}


class DirectLane:
    """nvJPEG's engines called as a lane of the loader would call them, for
    probe_host_threads.py --lanes-beside nvjpeg (what such a lane costs the training steps
    beside it): the JPEGs of each group (a list probe_host_threads decodes again and again)
    copied once into a pinned buffer and their sizes read ahead; per decode, a host wait for
    the lane's stream (the engines do not wait for its earlier work), then one call into one
    output buffer, chroma replicated, nvJPEG's memory pools on."""

    def __init__(self, groups: list[list[np.ndarray]], device, lib=None):
        import torch
        self.torch, self.device, lib = torch, device, lib or load_library()
        if lib is None:
            raise RuntimeError("a direct nvJPEG lane needs libnvjpeg (the nvidia-nvjpeg wheel)")
        self.decoder = HardwareDecoder(lib, BACKEND_HARDWARE, max(map(len, groups)), pools=True)
        self.batches, self.taken = {}, {}
        for group in groups:  # what the engines refuse is left out (and reported False)
            described = [self.decoder.describe(d) for d in group]
            taken = [ok for *_, ok in described]
            self.taken[id(group)] = taken
            self.batches[id(group)] = Batch([d for d, ok in zip(group, taken) if ok],
                                            [(h, w) for h, w, _, ok in described if ok], torch)
        self.out = torch.empty(max(b.out_bytes for b in self.batches.values()),
                               dtype=torch.uint8, device=device)

    def decode(self, group: list[np.ndarray]) -> list[bool]:
        """The group decoded on the current stream; per image whether it was (its pixels:
        `images`)."""
        batch = self.batches[id(group)]
        stream = self.torch.cuda.current_stream(self.device)
        stream.synchronize()  # the last batch's readers are done with the output buffer
        if len(batch.lengths):
            self.decoder.decode(batch.pointers(batch.host.data_ptr()), batch.lengths,
                                batch.destinations(self.out.data_ptr()), stream.cuda_stream)
        return list(self.taken[id(group)])

    def images(self, group: list[np.ndarray]) -> list:
        """The last decode of `group`, (3, H, W) per image the engines took, else None: views
        of the output buffer."""
        decoded = iter(self.batches[id(group)].views(self.out))
        return [next(decoded) if ok else None for ok in self.taken[id(group)]]

    def close(self) -> None:
        self.decoder.close()


def lane(decoder: HardwareDecoder, batches: list[Batch], mine: list[int], passes: int,
         on_device: bool, torch, device, calls: dict) -> None:
    """What a lane thread would do per batch, over `passes`: wait for its stream on the host,
    (copy the bitstreams to the device), decode. Per decode call into `calls`: its host time,
    the thread's CPU time, and whether it returned with its stream still busy."""
    stream = torch.cuda.Stream(device)
    out = torch.empty(max(b.out_bytes for b in batches), dtype=torch.uint8, device=device)
    staging = torch.empty(max(b.host.numel() for b in batches), dtype=torch.uint8,
                          device=device) if on_device else None
    with torch.cuda.stream(stream):
        for _ in range(passes):
            for index in mine:
                batch = batches[index]
                source = batch.host.data_ptr()
                if on_device:
                    staging[:batch.host.numel()].copy_(batch.host, non_blocking=True)
                    source = staging.data_ptr()
                stream.synchronize()  # the engines do not wait for the stream's earlier work
                began, cpu = time.perf_counter(), time.thread_time()
                decoder.decode(batch.pointers(source), batch.lengths,
                               batch.destinations(out.data_ptr()), stream.cuda_stream)
                calls["ms"].append(1e3 * (time.perf_counter() - began))
                calls["cpu_ms"].append(1e3 * (time.thread_time() - cpu))
                calls["busy"].append(not stream.query())
        stream.synchronize()


def timed_lanes(lib, batches: list[Batch], row: tuple, passes: int, batch_size: int, torch,
                device) -> dict:
    threads, on_device, pools, interpolate = row
    backend = BACKEND_HARDWARE_DEVICE if on_device else BACKEND_HARDWARE
    decoders = [HardwareDecoder(lib, backend, batch_size, pools=pools, interpolate=interpolate)
                for _ in range(threads)]
    calls = no_calls()
    try:
        shares = [list(range(t, len(batches), threads)) for t in range(threads)]
        for decoder, mine in zip(decoders, shares):  # untimed: buffers grown, engines woken
            lane(decoder, batches, mine, 1, on_device, torch, device, no_calls())
        errors: list[BaseException] = []

        def run(decoder, mine):
            try:
                lane(decoder, batches, mine, passes, on_device, torch, device, calls)
            except BaseException as error:  # raised below, in the caller's thread
                errors.append(error)
        workers = [threading.Thread(target=run, args=(decoder, mine))
                   for decoder, mine in zip(decoders, shares)]
        began = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        wall = time.perf_counter() - began
        if errors:
            raise errors[0]
    finally:
        for decoder in decoders:
            decoder.close()
    images = passes * sum(len(b.lengths) for b in batches)
    ms = np.array(calls["ms"])
    return {"img_per_s": round(images / wall), "call_ms_p50": round(float(np.median(ms)), 2),
            "call_ms_p90": round(float(np.quantile(ms, 0.9)), 2),
            "thread_cpu_ms_per_batch": round(float(np.mean(calls["cpu_ms"])), 2),
            "returned_busy_pct": round(100 * float(np.mean(calls["busy"])), 1)}


def call_cost(lib, datas: list[np.ndarray], shapes: list, kinds: list[int], torch, device,
              batch: int = 64, passes: int = 2) -> dict:
    """What a call's host time grows with: the JPEGs sorted by chroma subsampling, then
    pixels, into batches of `batch`; each batch decoded `passes` times by one thread (pools,
    chroma replicated), and its least host time fitted as microseconds per image of each
    subsampling, per KB of bitstream and per megapixel (least squares; r2 of the fit)."""
    order = sorted(range(len(datas)), key=lambda i: (kinds[i], shapes[i][0] * shapes[i][1]))
    groups = [order[i:i + batch] for i in range(0, len(order), batch)]
    made = [Batch([datas[i] for i in g], [shapes[i] for i in g], torch) for g in groups]
    calls = no_calls()
    decoder = HardwareDecoder(lib, BACKEND_HARDWARE, batch, pools=True)
    try:  # the first pass untimed: buffers grown
        lane(decoder, made, list(range(len(made))), passes + 1, False, torch, device, calls)
    finally:
        decoder.close()
    ms = np.array(calls["ms"]).reshape(passes + 1, len(made))[1:].min(axis=0)
    present = sorted(set(kinds))
    columns = [[sum(kinds[i] == k for i in g) for g in groups] for k in present]
    columns.append([sum(datas[i].nbytes for i in g) / 1e3 for g in groups])
    columns.append([sum(shapes[i][0] * shapes[i][1] for i in g) / 1e6 for g in groups])
    x = np.array(columns, np.float64).T
    fit, *_ = np.linalg.lstsq(x, ms, rcond=None)
    residual = ms - x @ fit
    r2 = 1 - float(residual @ residual) / max(float(((ms - ms.mean()) ** 2).sum()), 1e-12)
    names = [f"us_per_image_{SUBSAMPLING.get(k, k)}" for k in present] + ["us_per_kb", "us_per_mp"]
    return {**{n: round(1e3 * float(v), 2) for n, v in zip(names, fit)}, "r2": round(r2, 3),
            "batches": len(made)}


def direct_decode(lib, batch: Batch, torch, device, interpolate: bool) -> list:
    """One batch through nvJPEG's engines, each image (3, H, W) on the device."""
    decoder = HardwareDecoder(lib, BACKEND_HARDWARE, len(batch.lengths),
                              interpolate=interpolate)
    out = torch.zeros(batch.out_bytes, dtype=torch.uint8, device=device)
    try:
        stream = torch.cuda.current_stream(device)
        stream.synchronize()
        decoder.decode(batch.pointers(batch.host.data_ptr()), batch.lengths,
                       batch.destinations(out.data_ptr()), stream.cuda_stream)
        stream.synchronize()
    finally:
        decoder.close()
    return batch.views(out)


def cpu_reference(datas: list[np.ndarray]) -> list[np.ndarray]:
    """PIL's decode (libjpeg-turbo, fancy upsampling), (3, H, W) each."""
    import io
    from PIL import Image
    return [np.asarray(Image.open(io.BytesIO(d.tobytes())).convert("RGB")).transpose(2, 0, 1)
            for d in datas]


def pixel_diffs(images: list, reference: list[np.ndarray], torch, labels=None) -> dict:
    """Per image the largest |difference| against the reference (a shape that differs counts
    255): the largest, the median of those, how many are identical and how many are off by
    more than 2, and the mean |difference| over every pixel. With `labels` (one per image),
    the images off by more than 2, the most differing first (at most 4): label, largest
    difference, % of values off by more than 8, and the rows those lie in."""
    worst, total, count, off = [], 0.0, 0, []
    for index, (image, ref) in enumerate(zip(images, reference)):
        if image is None:
            continue
        ours = torch.as_tensor(image).cpu().numpy()
        if ours.shape != ref.shape:
            worst.append(255)
            if labels is not None:
                off.append((1.0, labels[index], 255, f"shape {ours.shape}, not {ref.shape}"))
            continue
        diff = np.abs(ours.astype(np.int16) - ref)
        worst.append(int(diff.max()))
        total, count = total + float(diff.sum()), count + diff.size
        if labels is not None and worst[-1] > 2:
            rows = np.flatnonzero((diff > 8).any(axis=(0, 2)))
            off.append((float((diff > 8).mean()), labels[index], worst[-1],
                        f"rows {rows.min()}-{rows.max()}" if len(rows) else "none over 8"))
    worst_arr = np.array(worst or [0])
    result = {"compared": len(worst), "identical": int((worst_arr == 0).sum()),
              "over_2": int((worst_arr > 2).sum()), "max_abs_diff": int(worst_arr.max()),
              "median_max_diff": float(np.median(worst_arr)),
              "mean_abs_diff": round(total / max(count, 1), 3)}
    if labels is not None:
        result["most_differing"] = [f"{label}: max {top}, {100 * share:.2f}% over 8, {rows}"
                                    for share, label, top, rows in sorted(off)[::-1][:4]]
    return result


def first_batch_pixels(lib, batch: Batch, datas: list[np.ndarray], labels: list[str],
                       nvimgcodec, torch, device) -> dict:
    """The first batch from nvJPEG's engines called directly against nvImageCodec's (the
    loader's, chroma replicated, both), and with chroma interpolated against PIL's decode of
    the same JPEGs; nvImageCodec's against PIL's shows what replicating costs."""
    theirs = [None if image is None else torch.as_tensor(image, device=device).clone()
              for image in nvimgcodec.decode(datas, fresh=True)]
    torch.cuda.synchronize(device)
    reference = cpu_reference(datas)
    return {"nvjpeg_vs_nvimgcodec": pixel_diffs(
                direct_decode(lib, batch, torch, device, False),
                [None if t is None else t.cpu().numpy() for t in theirs], torch, labels),
            "nvjpeg_interpolated_vs_pil": pixel_diffs(
                direct_decode(lib, batch, torch, device, True), reference, torch, labels),
            "nvimgcodec_vs_pil": pixel_diffs(theirs, reference, torch)}


def engine_jpegs(lib, args) -> tuple:
    """The archive's first JPEGs that a lane gets and the engines take: (engines x cores,
    how many they refuse, the JPEGs, their (height, width), their chroma subsampling)."""
    from bench_decoders import screened_jpegs
    probe = HardwareDecoder(lib, BACKEND_HARDWARE, args.batch)
    screened = screened_jpegs(args.archive, args.images)  # what a lane gets
    try:
        engines = probe.engines()
        described = [probe.describe(d) for d in screened]
    finally:
        probe.close()
    taken = [(d, (h, w), kind) for d, (h, w, kind, ok) in zip(screened, described) if ok]
    datas, shapes, kinds = (list(column) for column in zip(*taken)) if taken else ([], [], [])
    return engines, len(described) - len(taken), datas, shapes, kinds


def solo(lib, args, datas, shapes, torch, device) -> dict:
    """One of --processes: says "ready", waits for a line on stdin, then times the direct row
    of one thread (bitstreams pinned, pools) and prints its result as JSON."""
    batches = make_batches(datas, shapes, args.batch, torch)
    print("ready", flush=True)
    sys.stdin.readline()
    began = time.time()
    row = timed_lanes(lib, batches, (1, False, True, False), args.passes, args.batch, torch,
                      device)
    row.update(began=began, ended=time.time())
    print(json.dumps(row), flush=True)
    return row


def in_processes(args) -> dict:
    """--processes N: the direct row of one thread in N processes at once, each with its own
    nvJPEG (is the host's part of the engines' work serialized per process or per GPU?)."""
    command = [sys.executable, __file__, "--archive", str(args.archive), "--images",
               str(args.images), "--batch", str(args.batch), "--passes", str(args.passes),
               "--solo"]
    children = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True) for _ in range(args.processes)]
    for child in children:  # all loaded before any starts
        while child.stdout.readline().strip() != "ready":
            if child.poll() is not None:
                raise RuntimeError("a --solo process ended before it was ready")
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    rows = [json.loads(child.communicate()[0].strip().splitlines()[-1]) for child in children]
    overlap = min(r["ended"] for r in rows) - max(r["began"] for r in rows)
    span = max(r["ended"] for r in rows) - min(r["began"] for r in rows)
    result = {"processes": args.processes, "img_per_s_each": [r["img_per_s"] for r in rows],
              "img_per_s_sum": sum(r["img_per_s"] for r in rows),
              "overlap_pct": round(100 * max(overlap, 0) / span, 1),
              "call_ms_p50_each": [r["call_ms_p50"] for r in rows]}
    print(f"nvJPEG, bitstreams pinned, 1 thread, pools, in {args.processes} processes at once:",
          result)
    write_results(args.out, result)
    return result


def main(args) -> dict:
    import torch
    if not torch.cuda.is_available():
        print("probe_nvjpeg.py needs a CUDA device")
        return {}
    lib = load_library()
    if lib is None:
        print("probe_nvjpeg.py needs libnvjpeg (the nvidia-nvjpeg wheel)")
        return {}
    if args.processes:
        return in_processes(args)
    from bench_batch_call import timed
    from imageloader.gpujpeg import NvImageCodecJpeg
    device = torch.device("cuda")
    torch.empty(1, device=device)  # the primary context, current: nvJPEG works in it
    engines, refused, datas, shapes, kinds = engine_jpegs(lib, args)
    if args.solo:
        return solo(lib, args, datas, shapes, torch, device)
    groups = in_batches(datas, args.batch)
    batches = make_batches(datas, shapes, args.batch, torch)
    results = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
               "engines_and_cores": engines, "images": len(datas),
               "refused_by_engines": refused, "batch": args.batch,
               "rows": []}
    nvimgcodec = NvImageCodecJpeg(device, "RGB", engine="hw", one_call=True)
    results["rows"].append({"row": "nvImageCodec, one C call per batch (the loader's lane)",
                            **timed(nvimgcodec, groups, args.passes)})
    for threads, on_device, pools, interpolate in ROWS:
        row = {"row": f"nvJPEG, bitstreams {'on the device' if on_device else 'pinned'}, "
                      f"{threads} thread(s){', pools' if pools else ''}"
                      f"{', chroma interpolated' if interpolate else ''}"}
        try:
            row.update(timed_lanes(lib, batches, (threads, on_device, pools, interpolate),
                                   args.passes, args.batch, torch, device))
        except RuntimeError as error:  # a backend this nvJPEG lacks: the row says so
            row["error"] = str(error)
        results["rows"].append(row)
    results["call_cost"] = call_cost(lib, datas, shapes, kinds, torch, device)
    labels = [f"{w}x{h} {SUBSAMPLING.get(kind, kind)} {d.nbytes // 1000} KB"
              for (h, w), kind, d in zip(shapes, kinds, datas)]
    results["pixels"] = first_batch_pixels(lib, batches[0], groups[0], labels, nvimgcodec,
                                           torch, device)
    print(f"{results['device']}, torch {results['torch']}, engines x cores "
          f"{engines}, {len(datas)} JPEGs ({results['refused_by_engines']} refused)")
    for row in results["rows"]:
        if "error" in row:
            print(f"{row['row']:62s} failed: {row['error']}")
            continue
        extra = (f"; call p50 {row['call_ms_p50']:.1f} p90 {row['call_ms_p90']:.1f} ms, "
                 f"returned busy {row['returned_busy_pct']:.0f}%") if "call_ms_p50" in row \
            else ""
        print(f"{row['row']:66s} {row['img_per_s']:7d} img/s; "
              f"{row['thread_cpu_ms_per_batch']:.1f} ms of the thread per batch{extra}")
    print("host time of a call, fitted over batches of one subsampling by size:",
          results["call_cost"])
    for pair, diffs in results["pixels"].items():
        print(f"first batch, {pair.replace('_', ' ')}: {diffs}")
    write_results(args.out, results)
    return results


if __name__ == "__main__":
    main(get_args_parser().parse_args())
