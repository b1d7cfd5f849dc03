"""NVIDIA DALI as a peer: its loader alone and ResNets fed by it, on the same archive as bench.py.

    python scripts/bench/bench_dali.py --archive bench-data/photos-16000.tgz --models resnet18

DALI reads extracted files (or plain tars with an index), not a .tgz: the archive is extracted
once beside it (`<archive>.files/`, not timed), and DALI reads `train/<class>/<file>` from
there with `fn.readers.file` (labels: the sorted class folders, as ours). The recipe is DALI's
own ResNet example: `fn.decoders.image_random_crop` on the "mixed" device (nvImageCodec: the
GPU's hardware JPEG engines and CUDA, fed by `--threads` CPU threads; it decodes only the
RandomResizedCrop box), resize to 224, `crop_mirror_normalize` with a random flip, float NCHW,
then channels_last for the model. Training and timing are bench.py's (`Trainer`,
`timed_training`: bf16 autocast, SGD, batch 256, timed after `--warmup` steps), and the ceiling
(data already on the GPU) is measured in the same process, so rows compare with bench.py's.
`--device cpu` runs the same pipeline on the CPU (the test suite checks the recipe that way).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def get_args_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--archive", required=True, help=".tgz of train/<class>/<file> images")
    p.add_argument("--models", default="resnet18,resnet50", help="'' for the loader alone")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    p.add_argument("--device", choices=("mixed", "cpu"), default="mixed",
                   help="where DALI decodes (mixed: the GPU)")
    p.add_argument("--warmup", type=int, default=100, help="untimed steps (batches)")
    p.add_argument("--steps", type=int, default=80, help="timed training steps")
    p.add_argument("--max-seconds", type=float, default=12.0, help="cap on a timed region")
    p.add_argument("--out", help="write the rows as JSON here")
    p.add_argument("--trace", help="also write profiler traces of 6 training steps per model, "
                   "fed by DALI and with the data on the GPU: PATH.json -> "
                   "PATH-dali-MODEL.json, PATH-ceiling-MODEL.json (plot_timeline.py "
                   "--compare; bench.py --trace writes ours)")
    from bench import add_step_priority
    add_step_priority(p)
    return p


def extracted(archive: str) -> Path:
    """The archive's members as files beside it, once (DALI cannot read a .tgz)."""
    root = Path(archive + ".files")
    done = root / ".complete"
    if not done.exists():
        t0 = time.perf_counter()
        with tarfile.open(archive) as tar:
            tar.extractall(root, filter="data")
        done.touch()
        print(f"extracted {archive} to {root} in {time.perf_counter() - t0:.1f} s", flush=True)
    return class_root(root)


def class_root(root: Path) -> Path:
    """The folder whose folders are the classes, in the loader's layouts: `train/<class>/` if
    there is a train split, else down through lone folders (`<name>/<class>/` or `<class>/`).
    DALI's file reader takes each folder under it as a class."""
    if (root / "train").is_dir():
        return root / "train"
    while True:
        entries = [entry for entry in root.iterdir() if not entry.name.startswith(".")]
        if len(entries) != 1 or not entries[0].is_dir() \
                or not any(child.is_dir() for child in entries[0].iterdir()):
            return root
        root = entries[0]


def dali_batches(root: Path, args, device_id: int | None):
    """An endless iterator of (float NCHW channels_last images, int64 labels), DALI's recipe."""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    @pipeline_def(batch_size=args.batch_size, num_threads=args.threads, device_id=device_id,
                  prefetch_queue_depth=2, seed=0)
    def pipeline():
        jpegs, labels = fn.readers.file(file_root=str(root), random_shuffle=True,
                                        name="Reader")
        images = fn.decoders.image_random_crop(
            jpegs, device=args.device, output_type=types.RGB,
            random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3], num_attempts=10)
        images = fn.resize(images, resize_x=224, resize_y=224)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="CHW",
                                          mean=MEAN, std=STD, mirror=fn.random.coin_flip())
        return images, (labels.gpu() if args.device == "mixed" else labels)

    pipe = pipeline()
    pipe.build()
    it = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)
    import torch
    while True:
        for batch in it:
            images = batch[0]["images"].contiguous(memory_format=torch.channels_last)
            yield images, batch[0]["labels"].view(-1).long()


def loader_alone(batches, args) -> dict:
    from bench import steady_rate
    rate = steady_rate(batches, args.warmup, args.max_seconds)
    label = f"DALI loader alone, {args.device} decode, {args.threads} threads"
    print(f"{label:32s} {rate:9.0f} img/s", flush=True)
    return {"recipe": label, "img_per_s": rate}


def trace_both(trainer, ceiling, fed, args, model: str) -> None:
    """The same steps traced with the data on the GPU and fed by DALI (past --warmup, as
    bench.py traces ours): where the fed steps' host time goes beside DALI's threads, to set
    beside where it goes beside ours (results/2026-11-27-h200-twolanes: 19-20 ms a step
    grew to 25-42 ms, fed by our lanes)."""
    from bench import trace_steps
    trace_steps(trainer, ceiling, args.trace.replace(".json", f"-ceiling-{model}.json"),
                warmup=20)
    trace_steps(trainer, fed, args.trace.replace(".json", f"-dali-{model}.json"),
                warmup=args.warmup)


def main(args) -> dict:
    from imageloader.gpujpeg import _load_nvjpeg_wheel
    _load_nvjpeg_wheel()  # DALI's nvImageCodec finds libnvjpeg by name, as ours does
    root = extracted(args.archive)
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    device_id = 0 if args.device == "mixed" else None
    results = {"args": vars(args), "classes": len(classes), "loader": [], "models": {}}
    if args.device == "mixed":
        from bench import environment
        results["environment"] = environment()
    results["loader"].append(loader_alone(dali_batches(root, args, device_id), args))
    for model in filter(None, args.models.split(",")):
        from bench import Trainer, ceiling_batches, timed_training
        trainer = Trainer(model, len(classes))
        ceiling = timed_training(trainer, ceiling_batches(args, len(classes)), args, "ceiling")
        fed = dali_batches(root, args, device_id)
        if args.trace:
            trace_both(trainer, ceiling_batches(args, len(classes)), fed, args, model)
        ours = timed_training(trainer, fed, args,
                              f"DALI {args.device} decode, {args.threads} threads")
        ours["pct_of_ceiling"] = 100 * ours["img_per_s"] / ceiling["img_per_s"]
        print(f"{model}: DALI at {ours['pct_of_ceiling']:.1f}% of data on the GPU", flush=True)
        results["models"][model] = [{**ceiling, "recipe": "ceiling"}, ours]
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    from imageloader import configure_cuda_queues
    configure_cuda_queues()  # as bench.py, so that both run with the same CUDA queues
    main(get_args_parser().parse_args())
