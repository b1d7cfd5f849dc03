"""Benchmark: our loader against the data-on-GPU ceiling and peer recipes, in ONE run.

    python scripts/bench/bench.py --out bench-out/results.json --plot bench-out/bench.png

Builds (or takes) an ImageNet-like archive of photo-like JPEGs (scripts/bench/make_imagenet_like.py),
then measures, each after warm-up and with torch.cuda.synchronize() around the timed region:
- ceiling: the training step with a uint8 batch already on the GPU (normalized each step);
- ours: ImageLoader on the ONE .tgz, training, for each --prefetch value; data-wait and the
  exposed copy time per batch (CUDA events from the consumer's wait to the batch being usable);
- loader alone (no training), and the single-process decode rate (for workers x rate);
- peers on the same images: torch DataLoader over the archive split into shards with N workers
  and pin_memory (a hand-made shard recipe), WebDataset and timm's PrefetchLoader if installed.
Results go to a JSON file with device, cores and versions, and optionally a PNG chart.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import importlib.util
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts" / "bench"))  # bench_reader, also when imported from elsewhere

from imageloader import ImageLoader, Normalize, Options, configure_cuda_queues  # noqa: E402
from imageloader import step_stream as priority_stream  # noqa: E402
from imageloader.decode import Augment, Decoder  # noqa: E402
from imageloader.loader import default_workers  # noqa: E402


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--archive", default="bench-data/imagenet-like.tgz",
                   help="one .tgz; built with make_imagenet_like.py if missing")
    p.add_argument("--images", type=int, default=16000, help="images when building")
    p.add_argument("--classes", type=int, default=100, help="classes when building")
    p.add_argument("--shards", type=int, default=16, help="shards for the peer recipes")
    p.add_argument("--sizes", choices=("fixed", "photos"), default="fixed",
                   help="when building: ImageNet-like 500x375 images, or varied photos "
                        "(make_imagenet_like.py --sizes)")
    p.add_argument("--gpu-decoder", default="auto",
                   help="Options.gpu_decoder for ours with decode=cuda")
    p.add_argument("--gpu-lanes", default="auto",
                   help="comma-separated Options.gpu_lanes for ours with decode=cuda or auto "
                        "(a count or engines like hw+hw+cuda; auto: the default, None)")
    p.add_argument("--cpu-large", default="none",
                   help="comma-separated Options.cpu_large (pixels; none: off) for ours with "
                        "GPU decoding")
    p.add_argument("--cpu-share", type=float, default=None,
                   help="Options.cpu_share for ours with GPU decoding: that share of the images "
                        "decoded by the packers on the CPU (default: none, or decode=auto's "
                        "trial)")
    p.add_argument("--helper-factor", type=float, default=None,
                   help="a split lane's CUDA helper takes JPEGs over this many times the "
                        "batch's median bytes (gpujpeg.LARGE_JPEG_FACTOR; default: its own)")
    p.add_argument("--stream-priority", type=int, default=None,
                   help="CUDA priority of the decode lanes' and the helper's streams (lower is "
                        "more urgent; default: the loader's, the most urgent the device allows)")
    p.add_argument("--arena", default="auto", metavar="KIB|auto",
                   help="JPEG bytes a batch slot holds for GPU decoding: auto sizes it from the "
                        "archive (loader.arena_per_image); a number fixes it (192: the loader "
                        "before 2026-11-30)")
    p.add_argument("--lanes-always", action="store_true",
                   help="every GPU decoding lane at work all the time, not the lanes after "
                        "the first only while the consumer waits (loader.LANES_ON_DEMAND)")
    add_step_priority(p)
    p.add_argument("--models", default="resnet50", help="comma-separated torchvision models")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=60, help="timed steps per recipe")
    p.add_argument("--warmup", type=int, default=40,
                   help="untimed steps first: more than any loader buffers (ours with CPU "
                        "decode holds prefetch + 2 + workers batches, a DataLoader workers x 2), "
                        "or the timed window is partly served from before the timer")
    p.add_argument("--max-seconds", type=float, default=45.0, help="cap on a timed region")
    p.add_argument("--workers", type=int, default=None,
                   help="decode workers of the decode=cpu rows (default: cores-1); "
                        "GPU decoding's packers: --gpu-workers")
    p.add_argument("--split", default=None,
                   help="Options.split for ours: the split folder read from an archive that "
                        "holds two (train/ and val/; DALI's rows read train/)")
    p.add_argument("--readers", type=int, default=None,
                   help="Options.readers for ours (default: the loader's own count)")
    p.add_argument("--gpu-workers", type=int, default=None,
                   help="packers with GPU decoding (default: the loader's: 8, or 16 for "
                        "decode=auto's trial)")
    p.add_argument("--prefetch", default="2", help="comma-separated prefetch depths for ours")
    p.add_argument("--decode", default="cpu,cuda", help="comma-separated decode modes for ours")
    p.add_argument("--recipes", default="ceiling,ours,loader,loader-one-stream,decode,reader,"
                   "peer-shards,wds-shards,wds-one,timm-shards", help="which recipes to run")
    p.add_argument("--verbose", action="store_true", help="the loader's INFO log on stderr")
    p.add_argument("--decode-images", type=int, default=400, help="images for the decode rate")
    p.add_argument("--out", default="bench-out/results.json")
    p.add_argument("--plot", default=None, help="PNG chart path (needs matplotlib)")
    p.add_argument("--trace", default=None, help="write a profiler trace of ours here")
    p.add_argument("--sync-steps", action="store_true",
                   help="wait for the GPU after every training step (a diagnostic: the GPU's "
                        "queue is then empty when a batch is taken, so a wait is not the host "
                        "blocked on a full queue; the rate is lower)")
    p.add_argument("--time-calls", default=None, metavar="MODULE:NAME,...",
                   help="time every call of these functions during ours' training rows (per "
                        "thread: median and 90th percentile, in the row), e.g. "
                        "imageloader.prefetch:Prefetcher._hand_over: where a data-wait goes")
    p.add_argument("--decode-calls", action="store_true",
                   help="record every lane's decode call during ours' training rows (when, in "
                        "which thread, the batch's bytes and pixels): which calls are slow, "
                        "in the row and in the JSON")
    p.add_argument("--switch-interval", type=float, default=None,
                   help="sys.setswitchinterval for this process (Python's default: 0.005 s): "
                        "how long a thread holding the GIL may keep it from one that waits")
    p.add_argument("--spy", default=None,
                   help="folder: py-spy's raw stacks of each loader-alone and training row's "
                        "timed window (this process and its children; py-spy on PATH), for "
                        "summarize_stacks.py")
    p.add_argument("--spy-gil", action="store_true",
                   help="with --spy: sample only the thread holding the GIL at each tick "
                        "(py-spy --gil): which threads take it from the training thread")
    p.add_argument("--spy-start", type=float, default=None, metavar="SECONDS",
                   help="with --spy: sample the loader's start instead (from before it is made, "
                        "for SECONDS): what its first batch waits for")
    return p


def probe_args(description: str, steps: int, out: str,
               extra: Callable[[argparse.ArgumentParser], None] | None = None
               ) -> argparse.Namespace:
    """The arguments of the probes (probe_host_threads.py, probe_gpu_share.py): ResNet steps
    on data already on the GPU and fed by our loader with its defaults (`extra` adds a
    probe's own)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--archive", required=True, help="a .tgz (make_imagenet_like.py)")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch-size", type=int, default=256)
    if extra is not None:
        extra(p)
    p.add_argument("--warmup", type=int, default=30, help="untimed steps of each timed row")
    p.add_argument("--loader-warmup", type=int, default=100,
                   help="untimed steps of the loader rows: more than an epoch of the archive")
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--max-seconds", type=float, default=6.0)
    p.add_argument("--gpu-decoder", default="auto")
    p.add_argument("--out", default=out)
    args = p.parse_args()
    # our_loader's: the loader's defaults
    args.workers = args.gpu_workers = args.readers = args.cpu_share = None
    return args


# ---- data ----------------------------------------------------------------------------------


def ensure_archive(args) -> tuple[str, list[str]]:
    archive = Path(args.archive)
    shards = sorted(archive.parent.glob(archive.stem + "-shard-*.tgz"))
    if not archive.exists() or (args.shards and len(shards) != args.shards):
        check_sizes_match_name(archive, args.sizes)
        # A subprocess: the generator's multiprocessing pool must import it by path.
        t0 = time.perf_counter()
        subprocess.run([sys.executable, str(REPO / "scripts/bench/make_imagenet_like.py"),
                        "--out", str(archive), "--images", str(args.images),
                        "--classes", str(args.classes), "--shards", str(args.shards),
                        "--sizes", args.sizes],
                       check=True)
        print(f"built {archive} in {time.perf_counter() - t0:.1f} s", flush=True)
        shards = sorted(archive.parent.glob(archive.stem + "-shard-*.tgz"))
    return str(archive), [str(s) for s in shards]


def check_sizes_match_name(archive: Path, sizes: str) -> None:
    """An archive to build whose name says the other kind is a mistyped folder, not a wish:
    2026-11-27, `photos-16000.tgz` under an empty folder was built as 500x375 images (--sizes
    fixed, the default) and two calls timed the wrong data. Nor is a name without .tgz: on
    2026-11-29 `--archive fixed` (meant: the host's fixed-16000.tgz) built a file `fixed`."""
    if not archive.name.endswith(".tgz"):
        raise SystemExit(f"{archive} is missing, and the archives bench.py builds are named "
                         f"*.tgz: check the path (e.g. bench-data/{archive.name}-16000.tgz)")
    other = {"fixed": "photos", "photos": "fixed"}[sizes]
    if other in archive.name and sizes not in archive.name:
        raise SystemExit(f"{archive} is missing, and building it with --sizes {sizes} would "
                         f"not match its name: pass --sizes {other}, or check the path")


# ---- training step -------------------------------------------------------------------------


class Trainer:
    """One model, bf16 autocast, channels_last, SGD: the step every recipe feeds."""

    def __init__(self, arch: str, classes: int):
        import torchvision
        self.model = torchvision.models.get_model(arch, num_classes=classes).cuda()
        self.model = self.model.to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9,
                                   weight_decay=1e-4)
        torch.backends.cudnn.benchmark = True

    def step(self, images, labels) -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(self.model(images), labels)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def call_timer():
    """probe_start.py's wrappers, which time every call of a function per thread."""
    spec = importlib.util.spec_from_file_location(
        "probe_start", Path(__file__).with_name("probe_start.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def timed_calls(targets: str | None):
    """Every call of `targets` ("module:qualified.name,...") timed inside the block; the list
    it yields holds their rows (probe_start.call_summary) once the block ends. Nothing is
    wrapped without `targets`."""
    rows: list[dict] = []
    if not targets:
        yield rows
        return
    timer = call_timer()
    timer.DURATIONS.clear()
    originals = timer.wrap_all([t.split(":", 1) for t in targets.split(",")])
    try:
        yield rows
    finally:
        timer.undo(originals)
        rows.extend(timer.call_summary())


@contextlib.contextmanager
def decode_calls(on: bool):
    """--decode-calls: every one-call decode of a lane (NvImageCodecJpeg.decode_at) inside the
    block, recorded with what it decoded; yields the list the records go to. The time is the
    call's on the host, which is what a lane spends per batch (nvImageCodec waits for its own
    GPU work before returning)."""
    records: list[dict] = []
    if not on:
        yield records
        return
    from imageloader.gpujpeg import NvImageCodecJpeg
    original = NvImageCodecJpeg.decode_at

    def recorded(self, starts, lengths, boxes=None):
        began = time.perf_counter()
        batch = original(self, starts, lengths, boxes=boxes)
        ended = time.perf_counter()
        if batch is not None:
            records.append(call_record(threading.current_thread().name, began, ended,
                                       lengths, batch.geometry[batch.done]))
        return batch

    NvImageCodecJpeg.decode_at = recorded
    try:
        yield records
    finally:
        NvImageCodecJpeg.decode_at = original


def call_record(thread: str, began: float, ended: float, lengths, geometry) -> dict:
    """One decode call: its thread, start and end (perf_counter seconds), JPEGs and bytes sent,
    and the pixels decoded (`geometry`: gpucrop.image_geometry's rows of the decoded images,
    height and width in columns 1 and 2), of which how many images had 1 MP or more."""
    pixels = geometry[:, 1].astype(np.int64) * geometry[:, 2]
    return dict(thread=thread, start=began, end=ended, jpegs=len(lengths),
                bytes=int(np.sum(lengths)), pixels=int(pixels.sum()),
                large=int((pixels >= 1_000_000).sum()))


def decode_call_summary(records: list[dict], skip_first: int = 3) -> dict:
    """Which decode calls are slow: the slowest tenth against the rest, in seconds, megapixels
    and images of 1 MP or more per call, and the share of the call during which another
    thread's call ran too (two lanes on the same engines); and the correlation of a call's
    seconds with its pixels. Each thread's first `skip_first` calls (the decoder's start) are
    left out."""
    seen: dict[str, int] = {}
    kept = []
    for r in sorted(records, key=lambda r: r["start"]):
        seen[r["thread"]] = seen.get(r["thread"], 0) + 1
        if seen[r["thread"]] > skip_first:
            kept.append(r)
    if len(kept) < 10:
        return {}
    start = np.array([r["start"] for r in kept])
    end = np.array([r["end"] for r in kept])
    seconds = end - start
    mp = np.array([r["pixels"] for r in kept]) / 1e6
    large = np.array([r["large"] for r in kept])
    threads = np.array([r["thread"] for r in kept])
    # overlap[i, j]: how long calls i and j ran at once; only other threads' calls count
    overlap = np.clip(np.minimum(end[:, None], end[None, :])
                      - np.maximum(start[:, None], start[None, :]), 0, None)
    overlap[threads[:, None] == threads[None, :]] = 0
    beside = np.minimum(overlap.sum(axis=1), seconds) / np.maximum(seconds, 1e-9)
    slow = seconds >= np.quantile(seconds, 0.9)

    def part(mask):
        return dict(calls=int(mask.sum()), ms=float(1e3 * seconds[mask].mean()),
                    mp=float(mp[mask].mean()), large=float(large[mask].mean()),
                    beside_pct=float(100 * beside[mask].mean()))
    corr = float(np.corrcoef(mp, seconds)[0, 1]) if mp.std() > 0 and seconds.std() > 0 \
        else float("nan")
    return dict(calls=len(kept), slowest_tenth=part(slow), rest=part(~slow),
                corr_mp_seconds=corr)


def decode_calls_text(summary: dict) -> str:
    if not summary:
        return ""
    s, r = summary["slowest_tenth"], summary["rest"]
    return (f"; decode calls {summary['calls']}: slowest tenth {s['ms']:.1f} ms, "
            f"{s['mp']:.1f} MP, {s['large']:.1f} of 1 MP+, {s['beside_pct']:.0f}% beside "
            f"another call; the rest {r['ms']:.1f} ms, {r['mp']:.1f} MP, {r['large']:.1f}, "
            f"{r['beside_pct']:.0f}%; r(MP, time) {summary['corr_mp_seconds']:.2f}")


def calls_text(rows: list[dict]) -> str:
    return "".join(f"; {r['what'].rpartition('.')[2]} in {r['thread']} p50 "
                   f"{1e3 * (r['median_rest_s'] or 0):.2f} p90 "
                   f"{1e3 * (r['p90_rest_s'] or 0):.2f} ms" for r in rows)


def timed_training(trainer, batches, args, label: str) -> dict:
    """img/s over `steps` after `warmup`, and host time spent waiting for batches: handing a
    ready batch over (ResNet-50: 0.18 ms a step at the median, results/2026-11-28-h200-handover)
    or waiting for a late one. How the waits spread tells the two apart."""
    with timed_calls(getattr(args, "time_calls", None)) as calls, \
            decode_calls(getattr(args, "decode_calls", False)) as decodes, \
            step_stream(getattr(args, "step_priority", None)):
        result = _timed_training(trainer, batches, args, label)
    if calls:
        result["calls"] = calls
    summary = decode_call_summary(decodes)
    if decodes:
        result["decode_calls"] = dict(summary=summary, calls=decodes)
    print(f"{label:32s} {result['img_per_s']:9.0f} img/s  data-wait "
          f"{result['data_wait_pct']:5.1f}%{at_epoch_starts_text(result)}"
          f"{wait_spread_text(result)}{calls_text(calls)}{decode_calls_text(summary)}",
          flush=True)
    return result


def add_step_priority(p: argparse.ArgumentParser) -> None:
    """--step-priority, for every script whose rows run through timed_training (bench_dali.py:
    DALI's batches are handed over to the current stream as ours are)."""
    p.add_argument("--step-priority", type=int, default=None,
                   help="CUDA priority of a stream the training rows step on (lower is more urgent; "
                        "default: the caller's stream): the GPU then starts the model's "
                        "kernels before nvJPEG's, which run at the default priority")


def step_stream(priority: int | None):
    """--step-priority: the block runs on a new stream of that CUDA priority
    (imageloader.step_stream: ordered after the caller's stream, which is current again and
    ordered after it on leaving, since the next row runs there). None: the caller's stream."""
    if priority is None:
        return contextlib.nullcontext()
    return priority_stream(priority)


def _timed_training(trainer, batches, args, label: str) -> dict:
    it = iter(batches)
    wait = at_epoch_starts = 0.0
    images_seen = epoch_starts = 0
    mid_epoch: list[float] = []  # each step's wait but at epoch starts: many short or few long?
    t_start = spy = None
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        images, labels = next(it)
        if t_start is not None:
            waited = time.perf_counter() - t0
            wait += waited
            images_seen += len(labels)
            if getattr(it, "starts_epoch", False):
                epoch_starts += 1
                at_epoch_starts += waited
            else:
                mid_epoch.append(waited)
        trainer.step(images, labels)
        if getattr(args, "sync_steps", False):
            torch.cuda.synchronize()  # --sync-steps: the next batch is taken with an idle GPU
        if i == args.warmup - 1:
            torch.cuda.synchronize()  # the timed region starts with an idle GPU
            spy = spy_on_window(args, args.max_seconds, f"train-{label}")
            t_start = time.perf_counter()
        if t_start is not None and time.perf_counter() - t_start > args.max_seconds:
            break
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t_start
    end_spy(spy)
    result = {"recipe": label, "img_per_s": images_seen / seconds, "seconds": seconds,
              "images": images_seen, "data_wait_pct": 100 * wait / seconds,
              "epoch_starts": epoch_starts,
              "data_wait_at_epoch_starts_pct": 100 * at_epoch_starts / seconds,
              **wait_spread(mid_epoch)}
    return result


LONG_WAIT_S = 0.005  # a longer wait found no batch ready (handing one over: ~0.2 ms, H200)


def wait_spread(waits: list[float]) -> dict:
    """How the waits between epoch starts spread: median and 90th percentile, and the steps
    that waited over LONG_WAIT_S with their part of those waits. Many short waits are the
    cost of handing a batch over; few long ones, a loader that fell behind."""
    if not waits:
        return {}
    ordered, total = sorted(waits), sum(waits)
    long = [w for w in waits if w > LONG_WAIT_S]
    return {"wait_p50_ms": 1e3 * ordered[len(ordered) // 2],
            "wait_p90_ms": 1e3 * ordered[int(0.9 * (len(ordered) - 1))],
            "wait_max_ms": 1e3 * ordered[-1],
            "long_waits_pct_of_steps": 100 * len(long) / len(waits),
            "long_waits_pct_of_wait": 100 * sum(long) / total if total else 0.0}


def wait_spread_text(row: dict) -> str:
    if "wait_p50_ms" not in row:
        return ""
    return (f"; mid-epoch waits p50 {row['wait_p50_ms']:.2f} p90 {row['wait_p90_ms']:.2f} max "
            f"{row['wait_max_ms']:.0f} ms, {row['long_waits_pct_of_steps']:.0f}% of steps over "
            f"{1e3 * LONG_WAIT_S:.0f} ms hold {row['long_waits_pct_of_wait']:.0f}% of it")


def at_epoch_starts_text(row: dict) -> str:
    """" (x at n epoch starts)": the part of a training row's data-wait at epoch starts."""
    if not row.get("epoch_starts"):
        return ""
    return f" ({row['data_wait_at_epoch_starts_pct']:.1f} at {row['epoch_starts']} epoch starts)"


class Forever:
    """A loader's batches epoch after epoch; `starts_epoch` says whether the batch just
    yielded was the first of an epoch (a loader whose pipeline starts each epoch empty waits
    there: timed_training counts those waits apart)."""

    def __init__(self, loader):
        self.loader, self.starts_epoch, self._epoch = loader, False, iter(())

    def __iter__(self) -> "Forever":
        return self

    def __next__(self):
        try:
            item, self.starts_epoch = next(self._epoch), False
        except StopIteration:
            self._epoch = iter(self.loader)
            item, self.starts_epoch = next(self._epoch), True  # an empty loader raises
        return item


def forever(loader) -> Forever:
    return Forever(loader)


def ceiling_batches(args, classes: int):
    normalize = Normalize()
    images = torch.randint(0, 256, (args.batch_size, 3, 224, 224), dtype=torch.uint8,
                           device="cuda").contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, classes, (args.batch_size,), device="cuda")
    while True:
        yield normalize(images), labels


# ---- our loader ----------------------------------------------------------------------------


def our_loader(archive, args, prefetch: int, decode: str = "cpu", options=None,
               lanes: str = "auto", large: str = "none", **kw) -> ImageLoader:
    return ImageLoader(archive, **our_loader_kwargs(args, prefetch, decode, options, lanes,
                                                    large), **kw)


def our_loader_kwargs(args, prefetch: int, decode: str = "cpu", options=None,
                      lanes: str = "auto", large: str = "none") -> dict:
    """ImageLoader's arguments for ours (besides the archive): a dict, so that a probe can
    make the same loader in a process of its own."""
    # GPU decode: the loader's own count of packers (8; 16 with decode="auto"'s trial),
    # unless --gpu-workers says otherwise.
    workers = args.workers if decode == "cpu" else args.gpu_workers
    options = options or Options()
    if args.split is not None:
        options = dataclasses.replace(options, split=args.split)
    if args.readers is not None:
        options = dataclasses.replace(options, readers=args.readers)
    options = dataclasses.replace(options, gpu_decoder=args.gpu_decoder,
                                  gpu_lanes=None if lanes == "auto" else lanes,
                                  cpu_large=None if large == "none" else int(float(large)))
    if decode != "cpu" and args.cpu_share is not None:
        options = dataclasses.replace(options, cpu_share=args.cpu_share)
    return dict(batch_size=args.batch_size, train=True, size=224, device="cuda",
                workers=workers, prefetch=prefetch, drop_last=True, decode=decode,
                options=options)


def exposed_copy_ms(loader) -> float | None:
    """Median ms the consumer stream waited for a batch (events around its wait)."""
    pairs = loader.prefetcher.wait_events
    if not pairs:
        return None
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b in pairs)
    return times[len(times) // 2]


def variants(args, decode: str) -> list[tuple[str, str]]:
    """(gpu_lanes, cpu_large) pairs to run for a decode mode: one for the CPU path."""
    if decode == "cpu":
        return [("auto", "none")]
    return [(lanes, large) for lanes in args.gpu_lanes.split(",")
            for large in args.cpu_large.split(",")]


def variant_label(decode: str, lanes: str, large: str, cpu_share: float | None) -> str:
    if decode == "cpu":
        return ""
    return (f", lanes {lanes}" if lanes != "auto" else "") + (
        f", cpu_large {large}" if large != "none" else "") + (
        f", cpu_share {cpu_share:g}" if cpu_share is not None else "")


def run_ours(trainer, archive, args, prefetch: int, model: str, decode: str = "cpu",
             lanes: str = "auto", large: str = "none") -> dict:
    with our_loader(archive, args, prefetch, decode, lanes=lanes, large=large) as loader:
        loader.prefetcher.record_waits = True
        label = f"ours {decode} decode, prefetch={prefetch}" + variant_label(
            decode, lanes, large, args.cpu_share)
        if args.trace and (prefetch in (0, 2) if decode == "cpu" else True):
            kind = "" if decode == "cpu" else f"-{decode}"
            # GPU decoding traced past --warmup: "auto"'s trial runs over its first ~110
            # batches, and the lanes' first calls are slow; the CPU path is steady in a few
            trace_steps(trainer, forever(loader),
                        args.trace.replace(".json", f"{kind}-p{prefetch}-{model}.json"),
                        warmup=4 if decode == "cpu" else args.warmup)
        result = timed_training(trainer, forever(loader), args, label)
        result["fallbacks"] = dict(loader.stats.fallbacks)
        result["exposed_copy_ms_median"] = exposed_copy_ms(loader)
        result["workers"] = loader.workers
        result["inflate"] = loader.stats.inflate
        result["decoder"] = loader.decode_name
        result.update(trial_stats(loader))
        large = getattr(loader.cpu_share, "large", None)  # what decided it (share.LargeOnCpu)
        result["cpu_large_windows"] = None if large is None else {
            "state": large.state, "chosen": loader.cpu_share.chosen, "windows": large.windows}
        print(f"{'':32s} {result['decoder']}, cpu share {result['cpu_share']} "
              f"{result['share_rates']}, cpu bound {result['cpu_bound']}, "
              f"cpu_large {result['cpu_large']} {result['cpu_large_windows']}, fallbacks "
              f"{result['fallbacks']}", flush=True)
    return result


def trial_stats(loader) -> dict:
    """What decode="auto"'s trial did: the share it kept, the batches a second each share fed
    (keys as strings, for JSON), the CPU's bound (most batches/s, or None) and the pixels from
    which large JPEGs went to the CPU (0: none)."""
    stats = loader.stats
    return {"cpu_share": stats.cpu_share,
            "share_rates": {str(k): v for k, v in stats.share_rates.items()},
            "cpu_bound": stats.cpu_bound, "cpu_large": stats.cpu_large}


def trace_steps(trainer, batches, path: str, steps: int = 6, warmup: int = 4) -> None:
    """A chrome trace of a few training steps after `warmup` untimed ones: copies vs compute
    streams. Each step, its batch's wait included, is a range named ProfilerStep#i, as
    torch.profiler's schedule names them in train_resnet.py's traces, so that
    plot_timeline.py --host reads the steps' host time from either."""
    from torch.profiler import ProfilerActivity, profile, record_function
    cuda = torch.cuda.is_available()  # without: the host side alone (the tests' CPU run)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    it = iter(batches)
    for _ in range(warmup):
        trainer.step(*next(it))
    sync()
    # acc_events: one cycle, kept whole (older torch warns that cycles clear their events)
    with profile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda,
                 acc_events=True) as prof:
        for step in range(steps):
            with record_function(f"ProfilerStep#{step}"):
                trainer.step(*next(it))
        sync()
    prof.export_chrome_trace(path)
    print(f"trace of {steps} steps written to {path}", flush=True)


def memory_in_use() -> dict:
    """Device memory in use on this GPU (all allocators: torch's and nvImageCodec's), and
    host memory of this process and its children (host_memory_gb), in GB."""
    free, total = torch.cuda.mem_get_info()
    return {"gpu_used_gb": round((total - free) / 1e9, 2), **host_memory_gb()}


def host_memory_gb() -> dict:
    """Resident host memory of this process and its children (psutil; empty without it), GB.
    `host_rss_gb` counts shared memory (the batch buffers, the byte rings) once per process
    that maps it: an upper bound. `host_pss_gb` divides each shared page among the processes
    that map it, so the sum is what they hold together (Linux)."""
    try:
        import psutil
        me = psutil.Process()
        procs = [me, *me.children(True)]
        out = {"host_rss_gb": round(sum(p.memory_info().rss for p in procs) / 1e9, 2)}
    except Exception:  # not installed, or a child gone meanwhile
        return {}
    try:
        out["host_pss_gb"] = round(sum(p.memory_full_info().pss for p in procs) / 1e9, 2)
    except Exception:  # no PSS on this system, or a child gone meanwhile
        pass
    return out


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds (user + system) used so far by this process, and by it with its live
    children (readers, packers); zeros without psutil. Over a timed window the differences
    say how many cores the loader kept busy, and how many of them in this process."""
    try:
        import psutil
        me = psutil.Process()
        mine = sum(me.cpu_times()[:2])
        children = 0.0
        for child in me.children(recursive=True):
            try:
                children += sum(child.cpu_times()[:2])
            except psutil.Error:  # gone meanwhile
                pass
        return mine, mine + children
    except Exception:
        return 0.0, 0.0


def run_loader_alone(archive, args, decode: str = "cpu", readers: int | None = None,
                     lanes: str = "auto", large: str = "none") -> dict:
    options = Options(readers=readers)
    torch.cuda.synchronize()
    before = memory_in_use()
    tag = f"{decode}-{lanes}-{large}"
    start_spy = spy_on_this_process(args.spy if args.spy_start else None, args.spy_start or 0,
                                    f"start-{tag}")
    with our_loader(archive, args, prefetch=2, decode=decode, options=options,
                    lanes=lanes, large=large) as loader:
        # The first epoch in full (its rate includes the wait for the first batch), then the
        # steady state: `warmup` batches of the next epochs untimed, then timed.
        t_first, n = time.perf_counter(), 0
        for images, labels in loader:
            n += len(labels)
            if n == len(labels):
                first_batch_s, first_batch_n = time.perf_counter() - t_first, n
        torch.cuda.synchronize()
        first_epoch_s = time.perf_counter() - t_first
        first_epoch = n / first_epoch_s
        end_spy(start_spy)  # waits out its SECONDS: nothing after this is timed yet
        # Past the first batch: the start (processes importing torch, decoders, pinned
        # buffers; ~1.5-2.5 s) is paid once per loader, and on 16,000 images it is half the
        # epoch: this is the rate a long first epoch approaches.
        past_start = (n - first_batch_n) / max(first_epoch_s - first_batch_s, 1e-9)
        it = forever(loader)
        for _ in range(args.warmup):
            next(it)
        torch.cuda.synchronize()
        window = min(args.max_seconds, 20)
        spy = spy_on_window(args, window, f"loader-{tag}")
        cpu0, t0, n = cpu_seconds(), time.perf_counter(), 0
        while time.perf_counter() - t0 < window:
            images, labels = next(it)
            n += len(labels)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        end_spy(spy)
        rate = n / seconds
        cores = [round((b - a) / seconds, 1) for a, b in zip(cpu0, cpu_seconds())]
        memory = {k: round(v - before.get(k, 0), 2) for k, v in memory_in_use().items()}
        workers, readers, regions = loader.workers, loader.stats.readers, loader.stats.regions
        decoder, fallbacks = loader.decode_name, dict(loader.stats.fallbacks)
        trial = trial_stats(loader)
    name = f"ours loader alone, {decode} decode, {readers} reader(s)" + (
        f" in {regions} regions" if regions else ", one stream") + variant_label(
        decode, lanes, large, args.cpu_share)
    print(f"{name:32s} {rate:9.0f} img/s  first epoch {first_epoch:.0f} img/s ({past_start:.0f} "
          f"past its first batch, {first_batch_s:.2f} s)  {decoder} {memory}, cores: this "
          f"process {cores[0]}, all {cores[1]}"
          + (f", fallbacks {fallbacks}" if fallbacks else ""), flush=True)
    if decode == "auto":  # which share the trial kept, its rates, and the CPU's bound
        print(f"{'':32s} trial: {trial}", flush=True)
    return {"recipe": name, "img_per_s": rate, "first_epoch_img_per_s": first_epoch,
            "first_epoch_past_first_batch_img_per_s": past_start,
            "cores_this_process": cores[0], "cores_all": cores[1], "fallbacks": fallbacks,
            "workers": workers, "readers": readers, "regions": regions,
            "first_batch_s": first_batch_s, "decoder": decoder, "memory_gb": memory, **trial}


def spy_on_this_process(folder: str | None, seconds: float, tag: str, gil: bool = False):
    """py-spy sampling this process and its children for the coming `seconds` (None: no
    folder given). py-spy runs as our child; where the kernel's Yama module lets only
    ancestors trace a process (ptrace_scope 1), we first let any process of ours trace us
    (PR_SET_PTRACER_ANY; without Yama the call fails and nothing needs it). `gil`: each tick
    only the thread holding the GIL (none while it is free), instead of every live thread."""
    if folder is None:
        return None
    os.makedirs(folder, exist_ok=True)
    ctypes.CDLL(None, use_errno=True).prctl(0x59616D61, ctypes.c_ulong(2**64 - 1), 0, 0, 0)
    path = os.path.join(folder, "stacks-" + "".join(c if c.isalnum() else "_" for c in tag)
                        + ".txt")
    spy = subprocess.Popen(
        [shutil.which("py-spy") or "py-spy", "record", "--pid", str(os.getpid()),
         "--subprocesses", "--threads", "--gil" if gil else "--idle", "--nonblocking",
         "--rate", str(SPY_RATE),
         "--duration", str(max(1, int(seconds) - 1)), "--format", "raw", "-o", path],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)  # it finds the processes and their threads before the window starts
    return spy


def spy_on_window(args, seconds: float, tag: str):
    """py-spy over a timed window of `seconds` (--spy, --spy-gil); none with --spy-start, which
    spies on the start instead. Probes' arguments may lack the options: no spy then."""
    if getattr(args, "spy_start", None):
        return None
    return spy_on_this_process(getattr(args, "spy", None), seconds, tag,
                               gil=getattr(args, "spy_gil", False))


SPY_RATE = 50  # samples a second: a GIL holder's samples / (SPY_RATE x seconds) is its share


def end_spy(spy) -> None:
    if spy is None:
        return
    try:
        _, err = spy.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        spy.kill()
        _, err = spy.communicate()
    print("py-spy: " + " | ".join(line for line in err.splitlines()[-3:] if line.strip()),
          flush=True)


def steady_rate(batches, warmup: int, seconds: float) -> float:
    """Images per second an iterator of (images, labels) delivers after `warmup` untimed
    batches, timed for `seconds`. Both ends wait for the GPU's queued work (where there is a
    GPU), so the time counts what the batches cost there too."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for _ in range(warmup):
        next(batches)
    sync()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        n += len(next(batches)[1])
    sync()
    return n / (time.perf_counter() - t0)


def run_peer_loader_alone(shards, classes, args) -> dict:
    """The 16-shard WebDataset recipe without training: what its loader alone delivers."""
    import webdataset  # noqa: F401  (fails early, with a clear ImportError, if missing)
    loader = wds_loader(shards, classes, args, args.workers or default_workers())
    rate = steady_rate(on_gpu(wds_tensors(loader)), args.warmup, min(args.max_seconds, 20))
    name = f"WebDataset {len(shards)} shards loader alone"
    print(f"{name:32s} {rate:9.0f} img/s", flush=True)
    return {"recipe": name, "img_per_s": rate}


def run_reader_rate(archive, args) -> dict:
    """What the reader process does per epoch (inflate, walk the tar, label, shuffle, seed),
    alone in this process: if it is slower than the workers decode, it is the loader's wall."""
    from bench_reader import reader_alone
    from imageloader.workers import ReadPlan
    loader = ImageLoader(archive, workers=0, device="cpu", options=Options(split=args.split))
    plan = ReadPlan((archive,), loader.vocab.index, args.batch_size, 4096, 0, split=args.split)
    rate = reader_alone(plan, min(args.max_seconds, 20))
    print(f"{'reader alone (tasks)':32s} {rate:9.0f} img/s", flush=True)
    return {"recipe": "reader alone", "img_per_s": rate}


def _sample_jpegs(archive, n: int) -> list[bytes]:
    from imageloader.read import iter_members
    from collections import Counter
    data = []
    for member in iter_members(archive, skipped=Counter()):
        data.append(member.data)
        if len(data) == n:
            break
    return data


def _decode_all(data: list[bytes], repeat: int = 1) -> float:
    """PIL decode + RandomResizedCrop + flip of every blob; returns seconds (one process)."""
    decoder = Decoder(Augment.make(224, True))
    out = np.empty(decoder.out_shape, np.uint8)
    t0 = time.perf_counter()
    for r in range(repeat):
        for i, blob in enumerate(data):
            decoder(blob, out, i + r * len(data))
    return time.perf_counter() - t0


_LOADED: dict = {}


def _load_jpegs(archive, n: int, start) -> None:
    _LOADED.update(data=_sample_jpegs(archive, n), start=start)


def _decode_loaded(repeat: int) -> tuple[int, float]:
    _LOADED["start"].wait(timeout=120)  # every process loaded: all decode at the same time
    return repeat * len(_LOADED["data"]), _decode_all(_LOADED["data"], repeat)


def run_decode_rate(archive, args) -> list[dict]:
    """Decode rate of one process alone, and of `workers` processes decoding at once.

    The second is what the cores deliver together (shared caches, memory bandwidth, SMT,
    lower turbo clocks): the loader can approach it, never workers x the first. Each process
    loads its JPEGs before the clock starts: only decoding is timed."""
    import multiprocessing as mp
    data = _sample_jpegs(archive, args.decode_images)
    rate = len(data) / _decode_all(data)
    print(f"{'decode, one process':32s} {rate:9.0f} img/s", flush=True)
    workers = args.workers or default_workers()
    ctx = mp.get_context("spawn")
    with ctx.Pool(workers, _load_jpegs,
                  (archive, args.decode_images, ctx.Barrier(workers))) as pool:
        # One task per process (each blocks at the barrier until all have one).
        done = pool.map(_decode_loaded, [2] * workers, chunksize=1)
        together = sum(n for n, _ in done) / max(seconds for _, seconds in done)
    name = f"decode, {workers} processes at once"
    print(f"{name:32s} {together:9.0f} img/s", flush=True)
    return [{"recipe": "decode one process", "img_per_s": rate},
            {"recipe": "decode all workers at once", "img_per_s": together, "workers": workers}]


# ---- peers ---------------------------------------------------------------------------------


class ShardDataset(torch.utils.data.IterableDataset):
    """The hand-made recipe: each DataLoader worker streams its own shards with tarfile + PIL."""

    def __init__(self, shards, classes):
        self.shards, self.classes = shards, {c: i for i, c in enumerate(classes)}

    def __iter__(self):
        from PIL import Image
        from torchvision.transforms import v2
        info = torch.utils.data.get_worker_info()
        mine = self.shards[info.id::info.num_workers] if info else self.shards
        crop = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
        while True:
            for shard in mine:
                with tarfile.open(shard, "r|gz") as tar:
                    for m in tar:
                        if not m.isfile():
                            continue
                        img = Image.open(io.BytesIO(tar.extractfile(m).read()))
                        img.draft("RGB", (320, 320))
                        img = crop(img.convert("RGB"))
                        pixels = torch.from_numpy(__import__("numpy").asarray(img).copy())
                        yield pixels.permute(2, 0, 1), self.classes[m.name.split("/")[-2]]


def peer_loader(shards, classes, args):
    dataset = ShardDataset(shards, classes)
    workers = args.workers or default_workers()
    return torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, num_workers=workers,
                                       pin_memory=True, persistent_workers=True, prefetch_factor=4)


def on_gpu(batches):
    normalize = Normalize()
    for images, labels in batches:
        yield normalize(images.cuda(non_blocking=True)), labels.cuda(non_blocking=True)


def wds_loader(urls, classes, args, workers):
    import webdataset as wds
    from torchvision.transforms import v2
    index = {c: i for i, c in enumerate(classes)}
    crop = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                       v2.PILToTensor()])

    def label_of(sample):
        return index[sample["__key__"].split("/")[-2]]

    def image_of(sample):
        from PIL import Image
        ext = next(k for k in sample if k.lower() in ("jpeg", "jpg"))
        img = Image.open(io.BytesIO(sample[ext]))
        img.draft("RGB", (320, 320))
        return crop(img.convert("RGB"))

    dataset = (wds.WebDataset(urls, shardshuffle=False, nodesplitter=None, empty_check=False)
               .map(lambda s: (image_of(s), label_of(s))).batched(args.batch_size).repeat())
    return wds.WebLoader(dataset, batch_size=None, num_workers=workers, pin_memory=True,
                         persistent_workers=workers > 0)


def wds_tensors(batches):
    for images, labels in batches:
        yield (torch.stack(images) if isinstance(images, list) else images,
               torch.as_tensor(labels))


def run_peer(trainer, name, batches, args) -> dict:
    try:
        return timed_training(trainer, batches, args, name)
    except Exception as error:  # a peer that cannot run is reported, not fatal
        print(f"{name}: skipped ({type(error).__name__}: {error})", flush=True)
        return {"recipe": name, "error": f"{type(error).__name__}: {error}"}


# ---- reporting -----------------------------------------------------------------------------


def environment() -> dict:
    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "cores": len(os.sched_getaffinity(0)), "host_cores": os.cpu_count(),
            "torch": torch.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M"),
            # imageloader sets it to 32 at import when unset (its __init__ says why)
            "cuda_device_max_connections":
                os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "8 (default)")}


def save(results: dict, path: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


def plot(results: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for model, rows in results["models"].items():
        runs = [r for r in rows if "img_per_s" in r and r["recipe"] != "ceiling"]
        ceiling = next((r["img_per_s"] for r in rows if r["recipe"] == "ceiling"), None)
        fig, ax = plt.subplots(figsize=(9, 0.45 * len(runs) + 1.6))
        names = [r["recipe"] for r in runs]
        values = [r["img_per_s"] for r in runs]
        colors = ["tab:blue" if n.startswith("ours") else "tab:gray" for n in names]
        ax.barh(names, values, color=colors)
        if ceiling:
            ax.axvline(ceiling, color="tab:red", linestyle="--",
                       label=f"data on GPU: {ceiling:,.0f} img/s")
            ax.legend(loc="lower right")
        for y, v in enumerate(values):
            pct = f" ({100 * v / ceiling:.0f}%)" if ceiling else ""
            ax.text(v, y, f" {v:,.0f}{pct}", va="center", fontsize=8)
        env = results["environment"]
        ax.set_xlabel("images / s")
        ax.set_title(f"{model} training from one .tgz — {env['device']}, {env['cores']} cores, "
                     f"torch {env['torch']}, {env['date']}", fontsize=9)
        ax.invert_yaxis()
        fig.tight_layout()
        target = path if len(results["models"]) == 1 else path.replace(".png", f"-{model}.png")
        fig.savefig(target, dpi=110)
        plt.close(fig)


def main(args) -> dict:
    if not torch.cuda.is_available():
        print("bench.py needs a CUDA device")
        return {}
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    if args.verbose:
        import logging
        logging.basicConfig(format="%(name)s: %(message)s")
        logging.getLogger("imageloader").setLevel(logging.INFO)
    if args.helper_factor is not None:
        import imageloader.gpujpeg
        imageloader.gpujpeg.LARGE_JPEG_FACTOR = args.helper_factor  # read at each batch
    if args.stream_priority is not None:  # read when the loader makes its streams
        import imageloader.prefetch
        imageloader.prefetch.SIDE_STREAM_PRIORITY = args.stream_priority
    if args.arena != "auto":  # read when a loader makes its buffers: floor = cap = this,
        import imageloader.loader  # and no room above the cap from the host's memory
        imageloader.loader.ARENA_PER_IMAGE = imageloader.loader.ARENA_MAX_PER_IMAGE = \
            int(args.arena) << 10
        imageloader.loader.ARENA_MEMORY_SHARE = 0.0
    if args.lanes_always:  # read when a loader makes its prefetcher
        import imageloader.loader
        imageloader.loader.LANES_ON_DEMAND = False
    archive, shards = ensure_archive(args)
    recipes = set(args.recipes.split(","))
    results = {"environment": environment(), "args": vars(args), "models": {}, "loader": []}
    # The first loader of an archive scans it (vocabulary, regions, seek index) and, for a
    # .tgz, writes its plain copy from the same inflate: the one pass that pays gzip.
    t0 = time.perf_counter()
    first = ImageLoader(archive, workers=0, device="cpu", options=Options(split=args.split))
    scan_s = time.perf_counter() - t0
    classes, images = first.vocab.classes, first.images_per_epoch()
    results["scan"] = {"seconds": round(scan_s, 2), "img_per_s": round(images / scan_s),
                       "images": images}
    print(f"{'first loader (scan, plain copy)':32s} {images / scan_s:9.0f} img/s  "
          f"{scan_s:.1f} s", flush=True)
    if "decode" in recipes:
        results["loader"].extend(run_decode_rate(archive, args))
    if "reader" in recipes:
        results["loader"].append(run_reader_rate(archive, args))
    if "loader" in recipes:
        for decode in args.decode.split(","):
            # The default (readers in regions of the archive) against one reader of one stream.
            for lanes, large in variants(args, decode):
                results["loader"].append(run_loader_alone(archive, args, decode, lanes=lanes,
                                                          large=large))
            if "loader-one-stream" in recipes:
                results["loader"].append(run_loader_alone(archive, args, decode, readers=1))
        if shards and importlib.util.find_spec("webdataset"):
            results["loader"].append(run_peer_loader_alone(shards, classes, args))
    save(results, args.out)
    for model in filter(None, args.models.split(",")):  # --models "": loader rows only
        rows = results["models"][model] = []
        trainer = Trainer(model, len(classes))
        if "ceiling" in recipes:
            rows.append(timed_training(trainer, ceiling_batches(args, len(classes)), args,
                                       "ceiling"))
            rows[-1]["recipe"] = "ceiling"
        if "ours" in recipes:
            for depth in map(int, args.prefetch.split(",")) if "cpu" in args.decode else ():
                rows.append(run_ours(trainer, archive, args, depth, model))
                save(results, args.out)
            for decode in [d for d in args.decode.split(",") if d != "cpu"]:
                for lanes, large in variants(args, decode):
                    rows.append(run_ours(trainer, archive, args, 2, model, decode, lanes,
                                         large))
                    save(results, args.out)
        import gc
        gc.collect()  # nothing of ours may be collected inside a forked DataLoader worker
        if shards and "peer-shards" in recipes:
            loader = peer_loader(shards, classes, args)
            rows.append(run_peer(trainer, f"DataLoader {len(shards)} shards", on_gpu(loader),
                                 args))
            del loader
        if shards and "timm-shards" in recipes and importlib.util.find_spec("timm"):
            rows.append(run_peer(trainer, f"timm PrefetchLoader {len(shards)} shards",
                                 timm_batches(shards, classes, args), args))
        if "wds-shards" in recipes and importlib.util.find_spec("webdataset") and shards:
            loader = wds_loader(shards, classes, args, args.workers or default_workers())
            rows.append(run_peer(trainer, f"WebDataset {len(shards)} shards",
                                 on_gpu(wds_tensors(loader)), args))
            del loader
        if "wds-one" in recipes and importlib.util.find_spec("webdataset"):
            loader = wds_loader([archive], classes, args, 1)
            rows.append(run_peer(trainer, "WebDataset one .tgz", on_gpu(wds_tensors(loader)),
                                 args))
            del loader
        for row in rows:
            if rows[0]["recipe"] == "ceiling" and "img_per_s" in row:
                row["pct_of_ceiling"] = 100 * row["img_per_s"] / rows[0]["img_per_s"]
        save(results, args.out)
    if args.plot:
        plot(results, args.plot)
    print_table(results)
    return results


def timm_batches(shards, classes, args):
    from timm.data.loader import PrefetchLoader
    loader = PrefetchLoader(peer_loader(shards, classes, args), mean=(0.485, 0.456, 0.406),
                            std=(0.229, 0.224, 0.225), channels=3, device=torch.device("cuda"))
    for images, labels in loader:
        yield images.contiguous(memory_format=torch.channels_last), labels


def print_table(results: dict) -> None:
    env = results["environment"]
    print(f"\n{env['device']}, {env['cores']} cores, torch {env['torch']}, {env['date']}, "
          f"CUDA_DEVICE_MAX_CONNECTIONS={env.get('cuda_device_max_connections')}")
    for row in results["loader"]:
        print(f"  {row['recipe']:40s} {row.get('img_per_s', 0):9.0f} img/s")
    for model, rows in results["models"].items():
        print(f"  {model}:")
        for row in rows:
            if "error" in row:
                print(f"    {row['recipe']:38s} error: {row['error'][:60]}")
                continue
            pct = f"{row.get('pct_of_ceiling', 100):5.1f}%"
            copy = row.get("exposed_copy_ms_median")
            copy = f"  exposed copy {copy:.3f} ms" if copy is not None else ""
            print(f"    {row['recipe']:38s} {row['img_per_s']:9.0f} img/s {pct}  "
                  f"wait {row.get('data_wait_pct', 0):5.1f}%{at_epoch_starts_text(row)}{copy}")


if __name__ == "__main__":
    configure_cuda_queues()  # before CUDA starts, as for training with GPU decoding
    main(get_args_parser().parse_args())
