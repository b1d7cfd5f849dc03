"""Where a process working on the second GPU also lands on the first: each case runs in a fresh
process on `--device` (cuda:1), and nvml is asked after each step whether the process holds a
CUDA context on GPU 0 (needs two GPUs and pynvml; decoders that are not installed are left
out).

    python scripts/bench/probe_second_gpu.py --out second_gpu.jsonl

Cases:
- `nvimgcodec-api`: nvImageCodec's Python API alone (a `Decoder` given the device, one JPEG
  decoded on a stream of that device, then dropped): is it nvImageCodec itself? On the
  hardware engines; `nvimgcodec-api-cuda` on its CUDA decoder (the hybrid backend),
  `nvimgcodec-api-all` with every backend it has.
- `nvimgcodec-ours`: our `gpujpeg.NvImageCodecJpeg` on the hardware engines, the same steps;
- `loader-<decoder>`: an `ImageLoader` on the device (`decode="cpu"`, or `"cuda"` with that
  `gpu_decoder`, or every default): made, its first batch, the rest of the epoch, closed,
  dropped and collected.
With `--set-device` each case first makes the device current in its main thread, as a
torchrun script's `torch.cuda.set_device(local_rank)` does: whatever still lands on GPU 0
then comes from a thread of another library's. One JSON line per case: the first step after
which the process was on GPU 0 (null: never), and each step's answer.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from make_imagenet_like import encode_jpeg, synthesize_image  # noqa: E402

# Run in the child: step(name) prints a JSON line per step, which the parent reads.
CHILD = r'''
import gc, io, json, os, sys
import numpy as np, torch, pynvml
sys.path.insert(0, ROOT)
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)

def step(name):
    pids = {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    print(json.dumps({"step": name, "on_gpu0": os.getpid() in pids}), flush=True)

device = torch.device(DEVICE)
if SET_DEVICE:
    torch.cuda.set_device(device)
step("start")
if CASE.startswith("nvimgcodec-api"):
    from imageloader.gpujpeg import _load_nvjpeg_wheel
    _load_nvjpeg_wheel()
    from nvidia import nvimgcodec as nv
    step("imported")
    # "cuda": the backend our engine "cuda" uses (nvImageCodec refuses GPU_ONLY alone: "Could
    # not create decoder. Code: 7", 2-GPU H200)
    backend = {"nvimgcodec-api": nv.HW_GPU_ONLY,
               "nvimgcodec-api-cuda": nv.HYBRID_CPU_GPU}.get(CASE)
    backends = {} if backend is None else {"backends": [nv.Backend(backend)]}
    decoder = nv.Decoder(device_id=device.index, **backends)
    step("made")
    stream = torch.cuda.Stream(device)
    image = decoder.decode([nv.CodeStream(np.frombuffer(JPEG, np.uint8))],
                           cuda_stream=stream.cuda_stream)[0]
    stream.synchronize()
    step("decoded")
    del image, decoder
    gc.collect()
    step("dropped")
elif CASE == "nvimgcodec-ours":
    from imageloader.gpujpeg import NvImageCodecJpeg
    step("imported")
    jpeg = NvImageCodecJpeg(device, "RGB", engine="hw")
    step("made")
    images = jpeg.decode([np.frombuffer(JPEG, np.uint8)])
    torch.cuda.synchronize(device)
    step("decoded")
    del images, jpeg
    gc.collect()
    step("dropped")
else:
    from imageloader import ImageLoader, Options
    step("imported")
    kind = CASE.split("-", 1)[1]
    settings = {} if kind == "defaults" else (
        {"decode": "cpu"} if kind == "cpu" else
        {"decode": "cuda", "options": Options(gpu_decoder=kind)})
    loader = ImageLoader(ARCHIVE, batch_size=8, size=32, device=device, workers=1, **settings)
    step("made")
    batches = iter(loader)
    images, labels = next(batches)
    assert images.device == device
    step("first batch")
    for images, labels in batches:
        assert images.device == device
    step("epoch")
    loader.close()
    step("closed")
    del loader, batches, images, labels
    gc.collect()
    step("dropped")
'''


def get_args_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda:1")
    p.add_argument("--set-device", action="store_true",
                   help="make the device current in each case's main thread first")
    p.add_argument("--cases", nargs="+", default=[
        "nvimgcodec-api", "nvimgcodec-api-cuda", "nvimgcodec-api-all", "nvimgcodec-ours",
        "loader-cpu", "loader-torchvision", "loader-torchcodec", "loader-nvimgcodec", "loader-defaults"])
    p.add_argument("--out", default=None, help="also write the JSON lines here")
    return p


def write_archive(path: str) -> None:
    """24 photo-like JPEGs of 2 classes (make_imagenet_like.py)."""
    subprocess.run([sys.executable, str(HERE / "make_imagenet_like.py"), "--images", "24",
                    "--classes", "2", "--width", "96", "--height", "64", "--jobs", "1",
                    "--out", path], check=True, capture_output=True)


def installed(case: str) -> bool:
    """Whether the decoder a case needs is installed ("loader-cpu" needs none)."""
    name = case.removeprefix("loader-").split("-")[0]
    module = {"nvimgcodec": "nvidia.nvimgcodec", "torchcodec": "torchcodec"}.get(name)
    return module is None or importlib.util.find_spec(module) is not None


def run_case(case: str, args, archive: str, jpeg: bytes) -> dict:
    settings = (f"ROOT = {str(ROOT)!r}\nDEVICE = {args.device!r}\n"
                f"SET_DEVICE = {args.set_device!r}\nCASE = {case!r}\n"
                f"ARCHIVE = {archive!r}\nJPEG = {jpeg!r}\n")
    done = subprocess.run([sys.executable, "-c", settings + CHILD], capture_output=True,
                          text=True, timeout=300, env={**os.environ})
    steps = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    first = next((s["step"] for s in steps if s["on_gpu0"]), None)
    line = {"case": case, "set_device": args.set_device, "device": args.device,
            "first_on_gpu0": first, "steps": {s["step"]: s["on_gpu0"] for s in steps}}
    if done.returncode:
        line["error"] = done.stderr.strip().splitlines()[-1:] or ["exit " + str(done.returncode)]
    return line


def main(args) -> None:
    with tempfile.TemporaryDirectory() as folder:
        archive = os.path.join(folder, "two.tgz")
        write_archive(archive)
        jpeg = encode_jpeg(synthesize_image(0, 0, 96, 64), 90)  # the decoders-alone cases'
        lines = [run_case(case, args, archive, jpeg) for case in args.cases if installed(case)]
    for line in lines:
        print(json.dumps(line), flush=True)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(line) + "\n" for line in lines))


if __name__ == "__main__":
    main(get_args_parser().parse_args())
