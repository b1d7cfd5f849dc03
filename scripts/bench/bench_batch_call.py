"""What the Python around each GPU decode call costs: the loader's way (an nv.CodeStream per JPEG,
each image's address read back) against one C call per batch (batch_decode.c).

    python scripts/bench/bench_batch_call.py --archive bench-data/fixed-16000.tgz --out call.json

Both decode the same JPEGs in batches of `--batch` with the same nvImageCodec backend, into
planar RGB; each row reports images/s and the calling thread's CPU time per batch (the host
work a lane thread does; the decoders' own threads are not in it). The C row builds
batch_decode.c with the C compiler against nvImageCodec's header and library from its wheel
(a CUDA header is not needed: a stand-in declares cudaStream_t), once per run, into a
temporary folder. Its pixels are checked against the loader's decoder on the first batch.
Without a GPU (or with `--device cpu`) both use the CPU backend (libjpeg-turbo).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader.gpucrop import image_geometry  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decoders import batches, load_jpegs  # noqa: E402  (same JPEGs, same batching)

HERE = Path(__file__).resolve().parent
BACKENDS = {"cpu": 1, "cuda": 2, "hybrid": 3, "hw": 4}
CUDA_STUB = "typedef struct CUstream_st* cudaStream_t;\n"


def get_args_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--archive", required=True, help=".tgz or .tar of JPEGs")
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--passes", type=int, default=3, help="timed passes over the images, each row")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    p.add_argument("--backend", default="hw", choices=sorted(BACKENDS),
                   help="nvImageCodec backend on a GPU (the CPU backend without one)")
    p.add_argument("--out", default=None, help="JSON results")
    return p


def pack(datas: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An arena of the JPEGs' bytes, their offsets and lengths: a packed batch's layout."""
    lengths = np.array([len(d) for d in datas], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return np.frombuffer(b"".join(datas), np.uint8).copy(), offsets, lengths


def nvimgcodec_dir() -> Path:
    from nvidia import nvimgcodec
    return Path(nvimgcodec.__file__).resolve().parent


def build(folder: str) -> ctypes.CDLL:
    """batch_decode.c as a shared library in `folder`, linked to the wheel's libnvimgcodec."""
    lib_dir = nvimgcodec_dir()
    (Path(folder) / "cuda_runtime_api.h").write_text(CUDA_STUB)
    target = os.path.join(folder, "batch_decode.so")
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-I", folder, "-I", str(lib_dir / "include"),
                    str(HERE / "batch_decode.c"), str(lib_dir / "libnvimgcodec.so.0"),
                    f"-Wl,-rpath,{lib_dir}", "-o", target], check=True)
    lib = ctypes.CDLL(target)
    p, i, i64, i32 = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int64), \
        ctypes.POINTER(ctypes.c_int32)
    lib.bd_create.argtypes = [ctypes.c_char_p, i, i, i, ctypes.c_char_p, i, ctypes.POINTER(p)]
    lib.bd_parse.argtypes = [p, p, i64, i64, i, i32]
    lib.bd_decode.argtypes = [p, i, i32, ctypes.POINTER(ctypes.c_uint64), p, i32]
    lib.bd_destroy.argtypes = [p]
    return lib


class BatchCall:
    """One C call to parse a batch and one to decode it, into one output buffer."""

    def __init__(self, lib, device, backend: str, capacity: int):
        import torch
        self.lib, self.device, self.torch = lib, device, torch
        on_gpu = device.type == "cuda"
        handle = ctypes.c_void_p()
        options = b"nvjpeg_hw_decoder:fancy_upsampling=0 nvjpeg_cuda_decoder:fancy_upsampling=0"
        status = lib.bd_create(str(nvimgcodec_dir() / "extensions").encode(),
                               (device.index or 0) if on_gpu else -99999,
                               BACKENDS[backend] if on_gpu else BACKENDS["cpu"], 0, options,
                               capacity, ctypes.byref(handle))
        if status:
            raise RuntimeError(f"bd_create failed: status {status}")
        self.handle, self.buffer = handle, None
        self.sizes = np.zeros((capacity, 2), np.int32)
        self.status = np.zeros(capacity, np.int32)

    def decode(self, arena: np.ndarray, offsets: np.ndarray, lengths: np.ndarray):
        """(buffer, sizes, byte offsets into it, decoded flags) for the batch."""
        n = len(offsets)
        ptr = lambda a, t: a.ctypes.data_as(ctypes.POINTER(t))  # noqa: E731
        self.lib.bd_parse(self.handle, arena.ctypes.data, ptr(offsets, ctypes.c_int64),
                          ptr(lengths, ctypes.c_int64), n, ptr(self.sizes, ctypes.c_int32))
        sizes = self.sizes[:n]
        nbytes = 3 * sizes[:, 0].astype(np.int64) * sizes[:, 1]
        starts = np.concatenate([[0], np.cumsum(nbytes)[:-1]]).astype(np.int64)
        total = int(nbytes.sum())
        if self.buffer is None or self.buffer.numel() < total:
            self.buffer = self.torch.empty(int(total * 1.25) + 1, dtype=self.torch.uint8,
                                           device=self.device)
        addresses = (self.buffer.data_ptr() + starts).astype(np.uint64)
        stream = self.torch.cuda.current_stream(self.device).cuda_stream \
            if self.device.type == "cuda" else 0
        status = self.lib.bd_decode(self.handle, n, ptr(sizes, ctypes.c_int32),
                                    ptr(addresses, ctypes.c_uint64), ctypes.c_void_p(stream),
                                    ptr(self.status, ctypes.c_int32))
        if status:
            raise RuntimeError(f"bd_decode failed: status {status}")
        return self.buffer, sizes.copy(), starts, self.status[:n].astype(bool)

    def close(self) -> None:
        if self.handle:
            self.lib.bd_destroy(self.handle)
            self.handle = None


def loader_way(decoder, arena, offsets, lengths) -> list:
    """What a lane does around its decode call: slices, code streams, the decode, then each
    image's address and strides for the crop kernel (on the CPU backend, from the array
    interface: the same kind of call)."""
    datas = [arena[int(o):int(o + n)] for o, n in zip(offsets, lengths)]
    images = decoder.decode(datas)
    if decoder.device.type == "cuda":
        return [image_geometry(image) if image is not None else None for image in images]
    return [image.__array_interface__["data"][0] if image is not None else None
            for image in images]


def timed(run, packed, passes: int) -> dict:
    run(*packed[0])  # untimed: buffers grown, kernels loaded
    sync()
    wall, cpu, n = time.perf_counter(), time.thread_time(), 0
    for _ in range(passes):
        for batch in packed:
            run(*batch)
            n += len(batch[1])
    sync()
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    return {"img_per_s": round(n / wall), "thread_cpu_ms_per_batch":
            round(1000 * cpu / (passes * len(packed)), 3)}


def sync() -> None:
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def same_pixels(decoder, call: BatchCall, batch) -> tuple[bool, int]:
    """Whether the C call's images equal the loader decoder's wherever both decoded, and how
    many the C call left undecoded that the loader's decoder did decode (with the engines
    alone it refuses what they cannot take, where the loader tries every backend again)."""
    import torch
    arena, offsets, lengths = batch
    ours = decoder.decode([arena[int(o):int(o + n)] for o, n in zip(offsets, lengths)])
    buffer, sizes, starts, ok = call.decode(arena, offsets, lengths)
    sync()
    flat, equal, refused = buffer.cpu().numpy(), True, 0
    for image, (h, w), start, good in zip(ours, sizes, starts, ok):
        if image is None or not good:
            refused += image is not None
            equal &= not (image is None and good)
            continue
        theirs = flat[start:start + 3 * h * w].reshape(3, h, w)
        mine = torch.as_tensor(image, device=call.device).cpu().numpy() \
            if call.device.type == "cuda" else np.asarray(image)
        equal &= mine.shape == theirs.shape and bool(np.array_equal(mine, theirs))
    return equal, refused


def main(args) -> dict:
    import torch
    from imageloader.gpujpeg import NvImageCodecJpeg, _load_nvjpeg_wheel
    _load_nvjpeg_wheel()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    # The loader's decoder on the same backend (on the CPU: its CPU backend, whatever asked).
    engine = {"cuda": "cuda", "hybrid": "hybrid", "hw": "hw", "cpu": "all"}[args.backend] \
        if device.type == "cuda" else "all"
    datas = load_jpegs(args.archive, args.images)
    packed = [pack(batch) for batch in batches(datas, args.batch)]
    decoder = NvImageCodecJpeg(device, "RGB", engine=engine)
    results = {"device": str(torch.cuda.get_device_name(device)) if device.type == "cuda"
               else "cpu", "images": len(datas), "batch": args.batch, "backend": engine,
               "rows": []}
    results["rows"].append({"row": "loader's way (code stream objects, addresses read back)",
                            **timed(lambda *b: loader_way(decoder, *b), packed, args.passes)})
    with tempfile.TemporaryDirectory() as folder:
        call = BatchCall(build(folder), device, args.backend, args.batch)
        try:
            results["same_pixels"], results["refused_by_c_only"] = same_pixels(
                decoder, call, packed[0])
            results["rows"].append({"row": "one C call per batch",
                                    **timed(call.decode, packed, args.passes)})
        finally:
            call.close()
    for row in results["rows"]:
        print(f"{row['row']:60s} {row['img_per_s']:8d} img/s  "
              f"{row['thread_cpu_ms_per_batch']:7.2f} ms of the calling thread per batch")
    print("same pixels:", results["same_pixels"], "; undecoded by the C call alone (first "
          "batch):", results["refused_by_c_only"])
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main(get_args_parser().parse_args())
