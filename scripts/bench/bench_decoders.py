"""JPEG decoders side by side on the same images: which one, with which backends and how many in
flight, decodes a photo collection fastest on this host (GPU decoders need CUDA).

    python scripts/bench/bench_decoders.py --archive bench-data/photos.tgz --images 4096 --out dec.json

Each row decodes the same `--images` JPEGs of the archive in batches of `--batch`, after one
untimed pass over them (buffers grown), and reports images/s and the cores its process used. Rows:
- `torchvision`: torchvision.io.decode_jpeg(list, device="cuda"), one call per batch (nvJPEG's
  batched decoder behind one global handle: calls from several threads serialize);
- `torchcodec`: torchcodec.decoders.decode_jpeg(list, device="cuda"), if it imports here;
- `nvimgcodec[/backends=B][/threads=T][/roi=R][/cpu=C][/opts=O][/layout=L]`: nvImageCodec
  decoders; T threads each with its own Decoder and CUDA stream decode different batches at
  once. B: default, or "+"-joined hw (the hardware JPEG engines), gpu (CUDA decoder), hybrid
  (Huffman on CPU threads, the rest on the GPU), cpu (libjpeg-turbo), with load hints like
  hw0.7 (the share of a batch the hardware decoder takes; "~" for the adaptive policy);
  R=all|large decodes only each image's RandomResizedCrop box (all images, or those over
  1 MP); C: its CPU threads; O: its options string (e.g. ":num_cuda_streams=4"); fancy=0:
  chroma upsampled by replication like DALI's default and torchvision (faster, differs from
  Pillow at colour edges); prealloc=1: DALI's preallocation options; reuse=1: decode into the
  previous batch's Image buffers; tensors=0: no torch tensor per image;
- `pil`: the CPU path (imageloader.decode.Decoder: Pillow with draft, crop and resize) in
  `--cpu-procs` processes, all images and the large ones alone.
Rows are separated by commas, a row's settings by "/". Every GPU row is checked against Pillow
on a sample of images (max and mean absolute difference of the full decode, or of the box).

nvImageCodec finds libnvjpeg by name: where an older copy is already loaded (a CUDA toolkit's),
it decodes with that one. `--nvjpeg PATH` loads the given copy first; the output names the file
in use.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import tarfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader import configure_cuda_queues  # noqa: E402
from imageloader.decode import Augment, Decoder, gpu_screen, random_resized_crop_box  # noqa: E402
from imageloader.errors import Limits  # noqa: E402

LARGE_PIXELS = 1_000_000


def jpegs_parser(doc: str, images: int) -> argparse.ArgumentParser:
    """What every decoders-alone script (this one, bench_batch_call, probe_nvjpeg) is asked
    first: which JPEGs (the first --images of --archive) and how many a call (--batch)."""
    p = argparse.ArgumentParser(description=doc.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--archive", required=True, help=".tgz or .tar of JPEGs")
    p.add_argument("--images", type=int, default=images)
    p.add_argument("--batch", type=int, default=256)
    return p


def write_results(out: str | None, results) -> None:
    """--out: the results as JSON there (its folder made), or nowhere."""
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(results, indent=1))


def get_args_parser():
    p = jpegs_parser(__doc__, images=4096)
    p.add_argument("--rows", default="torchvision,torchcodec,nvimgcodec,nvimgcodec/backends=hw,"
                   "nvimgcodec/backends=hybrid,nvimgcodec/backends=hw0.7+hybrid,"
                   "nvimgcodec/threads=2,nvimgcodec/roi=all,nvimgcodec/roi=large,pil",
                   help="comma-separated rows (see the module docstring)")
    p.add_argument("--nvjpeg", help="load this libnvjpeg.so before nvImageCodec does")
    p.add_argument("--cpu-threads", type=int, default=0,
                   help="nvImageCodec's CPU threads per Decoder (0: its default, the cores)")
    p.add_argument("--cpu-procs", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--check", type=int, default=16, help="images compared with Pillow per row")
    p.add_argument("--out", help="write the rows as JSON here")
    return p


def load_jpegs(archive: str, count: int) -> list[bytes]:
    datas = []
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.isfile() and member.name.lower().endswith((".jpg", ".jpeg")):
                datas.append(tar.extractfile(member).read())
                if len(datas) == count:
                    break
    return datas


def screened_jpegs(archive: str, count: int) -> list[np.ndarray]:
    """The JPEGs among the first `count` that a GPU lane gets (decode.gpu_screen: none that the
    engines refuse, such as progressive ones, to be decoded again), as uint8 arrays."""
    return [np.frombuffer(d, np.uint8) for d in load_jpegs(archive, count)
            if gpu_screen(d, "RGB", Limits())[0] is None]


def describe(datas: list[bytes]) -> dict:
    from PIL import Image
    sizes = [Image.open(io.BytesIO(d)).size for d in datas]
    pixels = np.array([w * h for w, h in sizes], dtype=np.float64)
    return {"images": len(datas), "mean_kb": round(np.mean([len(d) for d in datas]) / 1e3, 1),
            "mean_mp": round(pixels.mean() / 1e6, 3), "large_share": round(float(
                (pixels > LARGE_PIXELS).mean()), 4), "large_pixel_share": round(float(
                    pixels[pixels > LARGE_PIXELS].sum() / pixels.sum()), 3)}


def crop_boxes(datas: list[bytes], seed: int = 0) -> list[tuple[int, int, int, int]]:
    from PIL import Image
    aug = Augment.make(224, True)
    boxes = []
    for i, data in enumerate(datas):
        size = Image.open(io.BytesIO(data)).size
        boxes.append(random_resized_crop_box(size, aug.scale, aug.ratio, random.Random(seed + i)))
    return boxes


def batches(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


# ---- decoders: each is make(stream) -> decode(batch of bytes) -> list of CUDA tensors ------


def gpu_ms_per_call(work, calls: int) -> dict:
    """GPU time of what `work()` queues, per call, over `calls` calls (torch.profiler): CUDA
    kernels (the SMs, which a model needs) apart from copies and memsets (the copy engines).
    Events around a call would time the host's part of it too."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            work()
        torch.cuda.synchronize()
    spent = {"kernels": 0.0, "copies": 0.0}
    for event in prof.key_averages():
        kind = "copies" if event.key.startswith(("Memcpy", "Memset")) else "kernels"
        spent[kind] += getattr(event, "self_device_time_total", 0)
    return {kind: round(us / 1000 / calls, 3) for kind, us in spent.items()}


def torchvision_decoder():
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    def make(stream, index=0):
        def decode(datas, boxes):
            tensors = [torch.frombuffer(d, dtype=torch.uint8) for d in datas]
            with torch.cuda.stream(stream):
                return decode_jpeg(tensors, mode=ImageReadMode.RGB, device="cuda")
        return decode
    return make


def torchcodec_decoder():
    import torch
    from torchcodec.decoders import decode_jpeg

    def make(stream, index=0):
        def decode(datas, boxes):
            tensors = [torch.frombuffer(d, dtype=torch.uint8) for d in datas]
            with torch.cuda.stream(stream):
                return decode_jpeg(tensors, mode="RGB", device="cuda")
        return decode
    return make


def nvimgcodec_backends(spec: str):
    from nvidia import nvimgcodec as nv
    if spec == "default":
        return None
    kinds = {"hw": nv.HW_GPU_ONLY, "gpu": nv.GPU_ONLY, "hybrid": nv.HYBRID_CPU_GPU,
             "cpu": nv.CPU_ONLY}
    backends = []
    for part in spec.split("+"):
        name = part.rstrip("0123456789.")
        load = float(part[len(name):] or 1.0)
        policy = nv.LoadHintPolicy.ADAPTIVE_MINIMIZE_IDLE_TIME if name.endswith("~") \
            else nv.LoadHintPolicy.FIXED
        backends.append(nv.Backend(kinds[name.rstrip("~")], load_hint=load,
                                   load_hint_policy=policy))
    return backends


FAST_OPTIONS = "nvjpeg_hw_decoder:fancy_upsampling=0 nvjpeg_cuda_decoder:fancy_upsampling=0"
PREALLOCATE = ("nvjpeg_hw_decoder:preallocate_batch_size={batch} nvjpeg_cuda_decoder:preallocate_buffers=1"
               " nvjpeg_cuda_decoder:device_memory_padding=16777216"
               " nvjpeg_cuda_decoder:host_memory_padding=8388608")


def nvimgcodec_decoder(spec: str, roi: str, cpu_threads: int, planar: bool, options: str,
                       reuse: bool = False, tensors: bool = True):
    import torch
    from nvidia import nvimgcodec as nv
    params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.ColorSpec.SRGB,
                             sample_format=nv.SampleFormat.P_RGB if planar
                             else nv.SampleFormat.I_RGB)

    def make(stream, index=0):
        specs = spec.split("|")  # "hw|hybrid": thread 0 the hardware decoder, thread 1 hybrid
        decoder = nv.Decoder(max_num_cpu_threads=cpu_threads,
                             backends=nvimgcodec_backends(specs[index % len(specs)]),
                             options=options)

        kept: list = []  # reuse=1: last batch's Images, whose buffers the decoder refills

        def decode(datas, boxes):
            streams = []
            for data, (left, top, right, bottom) in zip(datas, boxes):
                code = nv.CodeStream(data)
                if roi == "all" or (roi == "large" and code.width * code.height > LARGE_PIXELS):
                    code = code.get_sub_code_stream(region=nv.Region(top, left, bottom, right))
                streams.append(code)
            again = reuse and len(kept) == len(streams) and all(i is not None for i in kept)
            images = decoder.decode(streams, params=params, cuda_stream=stream.cuda_stream,
                                    **({"images": kept} if again else {}))
            if reuse:
                kept[:] = images
            if not tensors:
                return images
            return [None if image is None else torch.as_tensor(image, device="cuda")
                    for image in images]
        return decode
    return make


# ---- timing --------------------------------------------------------------------------------


def time_row(make, datas, boxes, batch: int, threads: int, passes: int = 2) -> dict:
    """Threads take the next batch when they are free (not every T-th one): a slow decoder
    (hybrid, Huffman on CPU threads) beside a fast one (the hardware engines) then adds its
    rate instead of holding the fast one to its own."""
    import torch
    work = list(zip(batches(datas, batch), batches(boxes, batch)))
    streams = [torch.cuda.Stream() for _ in range(threads)]
    decoders = [make(s, t) for t, s in enumerate(streams)]
    for t, decode in enumerate(decoders):  # untimed: handles, buffers, kernels
        decode(*work[t % len(work)])
    torch.cuda.synchronize()
    failed = [0]
    lock = threading.Lock()
    taken = [0] * threads
    todo = iter(range(len(work)))

    def run(t):
        while True:
            with lock:
                k = next(todo, None)
            if k is None:
                return
            out = decoders[t](*work[k])
            streams[t].synchronize()  # a batch is done when its pixels are
            with lock:
                failed[0] += sum(o is None for o in out)
                taken[t] += 1

    def run_all():
        pool = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()

    if passes > 1:  # untimed: every image once, so buffers have grown to the largest
        run_all()
        failed[0], taken[:] = 0, [0] * threads
        todo = iter(range(len(work)))
    torch.cuda.synchronize()
    cpu0, t0 = time.process_time(), time.perf_counter()
    run_all()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {"img_s": round(len(datas) / seconds), "seconds": round(seconds, 3),
            "cores": round((time.process_time() - cpu0) / seconds, 2), "failed": failed[0],
            "batches_per_thread": taken}


def check_row(make, datas, boxes, count: int) -> dict:
    """Max / mean absolute difference from Pillow's full decode (ROI rows: of the box)."""
    import torch
    from PIL import Image
    decode = make(torch.cuda.current_stream())
    outs = decode(datas[:count], boxes[:count])
    torch.cuda.synchronize()
    worst, means = 0, []
    for data, box, out in zip(datas, boxes, outs):
        if out is None:
            continue
        ref = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        got = out.cpu()
        got = got.numpy() if hasattr(got, "numpy") else np.asarray(got)  # torch or nvImageCodec
        if got.shape[0] == 3 and got.shape[-1] != 3:
            got = got.transpose(1, 2, 0)
        if got.shape != ref.shape:
            ref = ref[box[1]:box[3], box[0]:box[2]]
        if got.shape != ref.shape:
            return {"check": f"shape {got.shape} vs {ref.shape}"}
        diff = np.abs(got.astype(np.int16) - ref)
        worst, means = max(worst, int(diff.max())), means + [float(diff.mean())]
    return {"max_diff": worst, "mean_diff": round(float(np.mean(means)), 3) if means else None}


def make_for(row: str, cpu_threads: int, batch: int = 256):
    name, *opts = row.split("/")
    settings = dict(o.split("=", 1) for o in opts)
    spec = settings.get("backends", "default")
    threads = int(settings.get("threads", 1))
    if name == "torchvision":
        return torchvision_decoder(), threads
    if name == "torchcodec":
        return torchcodec_decoder(), threads
    if name == "nvimgcodec":
        options = settings.get("opts", "")
        if settings.get("fancy") == "0":
            options += " " + FAST_OPTIONS
        if settings.get("prealloc") == "1":
            options += " " + PREALLOCATE.format(batch=batch)
        return nvimgcodec_decoder(spec, settings.get("roi", "none"),
                                  int(settings.get("cpu", cpu_threads)),
                                  settings.get("layout", "planar") == "planar",
                                  options.strip(), settings.get("reuse") == "1",
                                  settings.get("tensors", "1") == "1"), threads
    raise ValueError(f"unknown row {row!r}")


# ---- the CPU path --------------------------------------------------------------------------

_CPU = None


def _cpu_init():
    global _CPU
    _CPU = (Decoder(Augment.make(224, True)), np.empty((224, 224, 3), np.uint8))


def _cpu_decode(item):
    seed, data = item
    _CPU[0](data, _CPU[1], seed)
    return 1


def pil_rows(datas, procs: int) -> list[dict]:
    from PIL import Image
    large = [d for d in datas if np.prod(Image.open(io.BytesIO(d)).size) > LARGE_PIXELS]
    rows = []
    with ProcessPoolExecutor(procs, initializer=_cpu_init) as pool:
        list(pool.map(_cpu_decode, enumerate(datas[:procs * 4]), chunksize=4))  # warm
        for label, items in (("pil", datas), ("pil:large-only", large)):
            if not items:
                continue
            t0 = time.perf_counter()
            done = sum(pool.map(_cpu_decode, enumerate(items), chunksize=8))
            seconds = time.perf_counter() - t0
            rows.append({"row": f"{label}:procs={procs}", "img_s": round(done / seconds),
                         "images": done, "seconds": round(seconds, 3)})
    return rows


def loaded_nvjpeg() -> list[str]:
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "nvjpeg" in line}
    # Relative to the working directory where they lie under it (no machine paths in results).
    return sorted(os.path.relpath(p) if p.startswith(os.getcwd() + os.sep) else p
                  for p in paths)


def main(args) -> list[dict]:
    if args.nvjpeg:
        import ctypes
        ctypes.CDLL(args.nvjpeg, mode=ctypes.RTLD_GLOBAL)
    else:  # the nvidia-nvjpeg wheel's copy, as the loader loads it (gpujpeg.py)
        from imageloader.gpujpeg import _load_nvjpeg_wheel
        _load_nvjpeg_wheel()
    datas = load_jpegs(args.archive, args.images)
    boxes = crop_boxes(datas)
    header = {"row": "data", "archive": os.path.basename(args.archive), **describe(datas)}
    print(json.dumps(header), flush=True)
    rows = [header]
    for row in [r for r in args.rows.split(",") if r]:
        if row == "pil":
            for result in pil_rows(datas, args.cpu_procs):
                print(json.dumps(result), flush=True)
                rows.append(result)
            continue
        try:
            make, threads = make_for(row, args.cpu_threads, args.batch)
            result = {"row": row, **time_row(make, datas, boxes, args.batch, threads)}
            if args.check:
                result.update(check_row(make, datas, boxes, args.check))
        except Exception as error:  # a decoder missing or failing here is a result too
            result = {"row": row, "error": f"{type(error).__name__}: {str(error)[:300]}"}
        print(json.dumps(result), flush=True)
        rows.append(result)
    rows.append({"row": "libraries", "nvjpeg": loaded_nvjpeg()})
    print(json.dumps(rows[-1]), flush=True)
    write_results(args.out, rows)
    return rows


if __name__ == "__main__":
    configure_cuda_queues()  # before CUDA starts, as for training with GPU decoding
    main(get_args_parser().parse_args())
