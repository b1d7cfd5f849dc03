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

Rows: nvImageCodec's one C call per batch (the loader's lane, imageloader/nvbatch.py); nvJPEG's
hardware backend with the bitstreams in pinned host memory (as the packers leave them); the
same with the bitstreams copied to the device in one copy a batch (NVJPEG_BACKEND_HARDWARE_DEVICE);
each of the two in two threads, each with its own handle, state and stream. Each row: img/s,
the host time of the decode call (median, 90th percentile), and how often the call returned
with its stream still busy. Before every call the thread waits on the host for its stream:
the engines' writes do not wait for earlier work on the stream (meta-pytorch/torchcodec pull
request 1634, measured on H100s), so a real lane must know that the last batch's crops are
done with the buffer, as nvImageCodec does by waiting on an event. Pixels: the first batch
from nvJPEG against nvImageCodec's.

No CUDA toolkit: nvjpeg.h's functions are declared here for ctypes; the library is the
nvidia-nvjpeg wheel's (libnvjpeg.so.13), found on sys.path as gpujpeg finds it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decoders import jpegs_parser, write_results  # noqa: E402  (the same JPEGs, batched)

# nvjpeg.h (13.3): backends, output format, chroma subsampling, flags
BACKEND_HARDWARE, BACKEND_HARDWARE_DEVICE = 3, 5
OUTPUT_RGB = 3  # planar: three full-size planes
CSS_444 = 0
FLAG_UPSAMPLING_WITH_INTERPOLATION = 1 << 5  # libjpeg's chroma upsampling, as nvImageCodec sets
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


def get_args_parser():
    p = jpegs_parser(__doc__, images=4096)
    p.add_argument("--passes", type=int, default=3, help="timed passes over the images, each row")
    p.add_argument("--out", default=None, help="JSON results")
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

    def __init__(self, lib: ctypes.CDLL, backend: int, batch: int, size_hint=(480, 640)):
        self.lib, self.handle, self.state, self.parser = lib, P(), P(), P()
        check(lib.nvjpegCreateEx(backend, None, None, FLAG_UPSAMPLING_WITH_INTERPOLATION,
                                 ctypes.byref(self.handle)), "nvjpegCreateEx")
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

    def describe(self, data: np.ndarray) -> tuple[int, int, bool]:
        """Height, width, and whether the engines take this JPEG (nvjpegDecodeBatchedSupported:
        baseline, one scan, no 4:1:1 / 4:1:0, 1 or 3 components, within size limits)."""
        components, subsampling = I(), I()
        widths, heights = (I * 4)(), (I * 4)()
        if self.lib.nvjpegGetImageInfo(self.handle, data.ctypes.data, data.nbytes,
                                       ctypes.byref(components), ctypes.byref(subsampling),
                                       widths, heights) != 0:
            return 0, 0, False  # a header nvJPEG cannot read: not the engines'
        refused = I(1)
        if self.lib.nvjpegJpegStreamParseHeader(self.handle, data.ctypes.data, data.nbytes,
                                                self.parser) == 0:
            self.lib.nvjpegDecodeBatchedSupported(self.handle, self.parser, ctypes.byref(refused))
        return heights[0], widths[0], refused.value == 0

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

    def pointers(self, base: int) -> np.ndarray:
        return (np.uint64(base) + self.starts.astype(np.uint64)).astype(np.uint64)

    def destinations(self, out_base: int) -> np.ndarray:
        return planar_destinations(np.uint64(out_base) + self.offsets.astype(np.uint64),
                                   self.heights, self.widths)


def lane(decoder: HardwareDecoder, batches: list[Batch], mine: list[int], passes: int,
         on_device: bool, torch, device, times: list, busy: list) -> None:
    """What a lane thread would do per batch, over `passes`: wait for its stream on the host,
    (copy the bitstreams to the device), decode; host time of each decode call recorded."""
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
                began = time.perf_counter()
                decoder.decode(batch.pointers(source), batch.lengths,
                               batch.destinations(out.data_ptr()), stream.cuda_stream)
                times.append(time.perf_counter() - began)
                busy.append(not stream.query())
        stream.synchronize()


def timed_lanes(lib, batches: list[Batch], threads: int, on_device: bool, passes: int,
                batch_size: int, torch, device) -> dict:
    backend = BACKEND_HARDWARE_DEVICE if on_device else BACKEND_HARDWARE
    decoders = [HardwareDecoder(lib, backend, batch_size) for _ in range(threads)]
    try:
        shares = [list(range(t, len(batches), threads)) for t in range(threads)]
        for decoder, mine in zip(decoders, shares):  # untimed: buffers grown, engines woken
            lane(decoder, batches, mine[:1], 1, on_device, torch, device, [], [])
        times: list[float] = []
        busy: list[bool] = []
        errors: list[BaseException] = []

        def run(decoder, mine):
            try:
                lane(decoder, batches, mine, passes, on_device, torch, device, times, busy)
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
    ms = np.array(times) * 1e3
    return {"img_per_s": round(images / wall), "call_ms_p50": round(float(np.median(ms)), 2),
            "call_ms_p90": round(float(np.quantile(ms, 0.9)), 2),
            "returned_busy_pct": round(100 * float(np.mean(busy)), 1)}


def first_batch_pixels(lib, batch: Batch, reference: list, torch, device) -> dict:
    """The first batch decoded by nvJPEG's engines against nvImageCodec's images of it."""
    decoder = HardwareDecoder(lib, BACKEND_HARDWARE, len(batch.lengths))
    out = torch.zeros(batch.out_bytes, dtype=torch.uint8, device=device)
    try:
        stream = torch.cuda.current_stream(device)
        stream.synchronize()
        decoder.decode(batch.pointers(batch.host.data_ptr()), batch.lengths,
                       batch.destinations(out.data_ptr()), stream.cuda_stream)
        stream.synchronize()
    finally:
        decoder.close()
    equal = compared = 0
    worst = 0
    for i, image in enumerate(reference):
        if image is None:
            continue
        h, w = int(batch.heights[i]), int(batch.widths[i])
        ours = out[int(batch.offsets[i]):int(batch.offsets[i]) + 3 * h * w].view(3, h, w)
        theirs = torch.as_tensor(image, device=device)
        theirs = theirs.permute(2, 0, 1) if theirs.shape[-1] == 3 else theirs
        compared += 1
        if theirs.shape != ours.shape:
            worst = 255
            continue
        diff = int((ours.int() - theirs.int()).abs().max())
        equal += diff == 0
        worst = max(worst, diff)
    return {"compared": compared, "identical": equal, "max_abs_diff": worst}


def main(args) -> dict:
    import torch
    if not torch.cuda.is_available():
        print("probe_nvjpeg.py needs a CUDA device")
        return {}
    lib = load_library()
    if lib is None:
        print("probe_nvjpeg.py needs libnvjpeg (the nvidia-nvjpeg wheel)")
        return {}
    from bench_batch_call import timed
    from bench_decoders import batches as in_batches, screened_jpegs
    from imageloader.gpujpeg import NvImageCodecJpeg
    device = torch.device("cuda")
    torch.empty(1, device=device)  # the primary context, current: nvJPEG works in it
    probe = HardwareDecoder(lib, BACKEND_HARDWARE, args.batch)
    screened = screened_jpegs(args.archive, args.images)  # what a lane gets
    try:
        engines = probe.engines()
        described = [probe.describe(d) for d in screened]
    finally:
        probe.close()
    datas = [d for d, (_, _, taken) in zip(screened, described) if taken]
    shapes = [(h, w) for h, w, taken in described if taken]
    groups = in_batches(datas, args.batch)
    batches = [Batch(group, shape_group, torch)
               for group, shape_group in zip(groups, in_batches(shapes, args.batch))]
    results = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
               "engines_and_cores": engines, "images": len(datas),
               "refused_by_engines": len(described) - len(datas), "batch": args.batch,
               "rows": []}
    nvimgcodec = NvImageCodecJpeg(device, "RGB", engine="hw", one_call=True)
    results["rows"].append({"row": "nvImageCodec, one C call per batch (the loader's lane)",
                            **timed(nvimgcodec, groups, args.passes)})
    for threads in (1, 2):
        for on_device in (False, True):
            where = "on the device" if on_device else "in pinned host memory"
            row = {"row": f"nvJPEG hardware, bitstreams {where}, {threads} thread(s)"}
            try:
                row.update(timed_lanes(lib, batches, threads, on_device, args.passes,
                                       args.batch, torch, device))
            except RuntimeError as error:  # a backend this nvJPEG lacks: the row says so
                row["error"] = str(error)
            results["rows"].append(row)
    results["pixels"] = first_batch_pixels(lib, batches[0], nvimgcodec.decode(groups[0]),
                                           torch, device)
    print(f"{results['device']}, torch {results['torch']}, engines x cores "
          f"{engines}, {len(datas)} JPEGs ({results['refused_by_engines']} refused)")
    for row in results["rows"]:
        if "error" in row:
            print(f"{row['row']:62s} failed: {row['error']}")
            continue
        extra = (f"; call p50 {row['call_ms_p50']:.1f} p90 {row['call_ms_p90']:.1f} ms, "
                 f"returned busy {row['returned_busy_pct']:.0f}%") if "call_ms_p50" in row \
            else f"; {row['thread_cpu_ms_per_batch']:.1f} ms of the thread per batch"
        print(f"{row['row']:62s} {row['img_per_s']:7d} img/s{extra}")
    print("first batch, nvJPEG against nvImageCodec:", results["pixels"])
    write_results(args.out, results)
    return results


if __name__ == "__main__":
    main(get_args_parser().parse_args())
