"""What does the colour conversion cost the GPU? The hardware engines decoding into planar RGB
(what the loader asks for) against the JPEGs' own planar YCbCr (no conversion, chroma at its
coded size: nvbatch's decode_yuv), in one lane and in two.

    python scripts/bench/probe_yuv.py --archive bench-data/photos-16000.tgz --out yuv.json

ResNet-50 beside the loader loses ~3 points to the loader's GPU work (probe_gpu_share.py,
results/2026-11-28-h100x2-ranks): nvJPEG's YCbCr -> RGB pass over every decoded pixel and the
crop kernel. If the crop kernel read YCbCr and converted only its output pixels, the pass would
go. Rows, interleaved over `--rounds`: images/s of 1 and `--lanes` lanes (each its own decoder,
thread and stream, waiting for its batch's GPU work), and, one lane, the GPU time per batch of
its CUDA kernels and of its copies (torch.profiler; the engines' own work is neither). Also:
the share of JPEGs the engines decode to YCbCr, and how far those planes, turned into RGB with
replicated chroma, are from the RGB decode (what a fused kernel would have to match).
With --beside MODEL: that model's graphed step replayed without pause, alone and beside the
lanes decoding each way (does YCbCr cost a GPU-bound model less per decoded image?).
Answer on an H200 (results/2026-11-28-h200-yuv): YCbCr is slower, 25-40% fewer images/s; and
beside ResNet-50 no cheaper per decoded image (results/2026-11-28-h200-crops).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader.gpujpeg import NvImageCodecJpeg  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_decoders import batches, gpu_ms_per_call, screened_jpegs  # noqa: E402


def get_args_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--archive", required=True, help=".tgz or .tar of JPEGs")
    p.add_argument("--images", type=int, default=2048)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--seconds", type=float, default=4.0, help="per row and round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--engine", default="hw")
    p.add_argument("--beside", default=None, metavar="MODEL",
                   help="also: MODEL's graphed training step (e.g. resnet50) replayed without "
                        "pause alone and beside --lanes lanes decoding RGB or YCbCr flat out: "
                        "what each output costs a GPU-bound model per decoded image")
    p.add_argument("--out", default=None, help="JSON results")
    return p


def decode_call(decoder: NvImageCodecJpeg, yuv: bool):
    return decoder.batch.decode_yuv if yuv else decoder.batch.decode


def lane(decoder, yuv: bool, groups, seconds: float, counts: list, index: int) -> None:
    """Decode batches on the lane's own stream until `seconds` pass; each batch waits for its
    GPU work (as a lane's next batch waits for the crops that read the last)."""
    stream, call, done = torch.cuda.Stream(), decode_call(decoder, yuv), 0
    end = time.perf_counter() + seconds
    with torch.cuda.stream(stream):
        while time.perf_counter() < end:
            for group in groups:
                done += sum(image is not None for image in call(group))
                stream.synchronize()
    counts[index] = done


def rate(decoders, yuv: bool, groups, seconds: float) -> int:
    counts = [0] * len(decoders)
    threads = [threading.Thread(target=lane, args=(d, yuv, groups, seconds, counts, k))
               for k, d in enumerate(decoders)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return round(sum(counts) / (time.perf_counter() - start))


def model_rate(load, batch: int, work) -> tuple[float, int]:
    """(the graphed step's img/s while `work()` runs, what work() returned)."""
    steps, start = load.steps, time.perf_counter()
    result = work()
    return (load.steps - steps) * batch / (time.perf_counter() - start), result


def model_rows(args, decoders, groups) -> list[dict]:
    """`args.beside`'s graphed step replayed without pause (probe_gpu_share.GpuLoad: the GPU
    busy, the host idle) alone, and beside the lanes decoding RGB and YCbCr, interleaved; each
    row: the model's img/s and the lanes' img/s over one window."""
    import bench
    from probe_gpu_share import GpuLoad, GraphedStep
    trainer = bench.Trainer(args.beside, 100)
    graphed = GraphedStep(trainer, *next(bench.ceiling_batches(
        argparse.Namespace(batch_size=args.batch), 100)))
    rows = []
    with GpuLoad(graphed) as load:
        time.sleep(1.0)  # past cuDNN's and the clocks' warm-up
        for round_ in range(args.rounds):
            for output in ("alone", "RGB", "YCbCr", "alone"):
                if output == "alone":
                    work = lambda: time.sleep(args.seconds) or 0  # noqa: E731
                else:
                    work = lambda yuv=output == "YCbCr": rate(  # noqa: E731
                        decoders, yuv, groups, args.seconds)
                model, decoded = model_rate(load, args.batch, work)
                rows.append({"round": round_, "model": args.beside, "beside": output,
                             "model_img_per_s": round(model), "decoded_img_per_s": decoded})
                print(f"round {round_}  {args.beside} graphed, beside {output:5s}  "
                      f"{model:7.0f} img/s   lanes {decoded:6d} img/s", flush=True)
    return rows


def gpu_ms_per_batch(decoder, yuv: bool, groups) -> dict:
    """GPU time of what one lane's batches queue, per batch: CUDA kernels apart from copies
    and memsets (the JPEGs' bytes going in). Until 2026-11-28 the probe reported their sum
    (`kernel_ms_per_batch_*` in its results)."""
    call, queue = decode_call(decoder, yuv), iter(groups)
    return gpu_ms_per_call(lambda: call(next(queue)), len(groups))


def replicated_rgb(planes) -> torch.Tensor:
    """The planes to RGB as nvJPEG converts (JFIF's BT.601, chroma samples replicated)."""
    luma, cb, cr = planes
    h, w = luma.shape
    up = [c.repeat_interleave(-(-h // c.shape[0]), 0).repeat_interleave(-(-w // c.shape[1]), 1)
          [:h, :w].float() - 128 for c in (cb, cr)]
    y = luma.float()
    return torch.stack([y + 1.402 * up[1], y - 0.344136 * up[0] - 0.714136 * up[1],
                        y + 1.772 * up[0]]).round().clamp(0, 255)


def agreement(decoder, group) -> dict:
    """Of one batch: the share decoded to YCbCr, and the largest and mean difference between
    those planes turned into RGB and the RGB decode of the same JPEGs."""
    planes = [tuple(p.clone() for p in x) if x else None for x in decoder.batch.decode_yuv(group)]
    rgb = decoder.batch.decode(group)
    worst, means = 0, []
    for yuv, image in zip(planes, rgb):
        if yuv is None or image is None:
            continue
        diff = (replicated_rgb(yuv) - torch.as_tensor(image, device="cuda").float()).abs()
        worst, means = max(worst, int(diff.max().item())), means + [diff.mean().item()]
    return {"ycbcr_share": round(sum(p is not None for p in planes) / len(group), 3),
            "max_diff": worst, "mean_diff": round(float(np.mean(means)), 4) if means else None}


def main(args) -> dict:
    device = torch.device("cuda")
    datas = screened_jpegs(args.archive, args.images)  # what a lane gets
    groups = batches(datas, args.batch)
    decoders = [NvImageCodecJpeg(device, "RGB", engine=args.engine, one_call=True)
                for _ in range(args.lanes)]
    for decoder in decoders:  # untimed: buffers grown, kernels loaded, both ways
        for yuv in (False, True):
            decode_call(decoder, yuv)(groups[0])
    torch.cuda.synchronize()
    results = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
               "images": len(datas), "batch": args.batch, "engine": args.engine,
               **agreement(decoders[0], groups[0]), "rows": []}
    for round_ in range(args.rounds):
        for lanes in sorted({1, args.lanes}):
            for yuv in (False, True):
                row = {"round": round_, "lanes": lanes, "output": "YCbCr" if yuv else "RGB",
                       "img_per_s": rate(decoders[:lanes], yuv, groups, args.seconds)}
                results["rows"].append(row)
                print(f"round {round_}  {lanes} lane(s)  {row['output']:5s}  "
                      f"{row['img_per_s']:7d} img/s", flush=True)
    for yuv in (False, True):
        key = "gpu_ms_per_batch_" + ("ycbcr" if yuv else "rgb")
        results[key] = gpu_ms_per_batch(decoders[0], yuv, groups)
    if args.beside:
        results["beside"] = model_rows(args, decoders, groups)
    print({k: v for k, v in results.items() if k not in ("rows", "beside")})
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main(get_args_parser().parse_args())
