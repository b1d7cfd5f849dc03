"""Train a torchvision ResNet on .tgz archives of labeled images, fed by imageloader.

Small on purpose (torchvision's references/classification/train.py, in nanoGPT's spirit): one
file, the loop fits on a screen, and every host-device sync is marked. With no flags it trains
ResNet-18 on the bundled 8x8 digits (upscaled) to >= 90% val top-1 in a few CPU minutes:

    python scripts/train_resnet.py
    python scripts/train_resnet.py --data "/data/imagenet/train-*.tgz" --val /data/in/val.tgz \
        --size 224 --batch-size 256 --epochs 90 --lr-schedule step --workers 12
    python scripts/train_resnet.py --resume runs/<stamp>/checkpoint.pt --epochs 20   # continue
    python scripts/train_resnet.py --resume runs/<stamp>/checkpoint.pt --evaluate    # val only

Writes to --out-dir: args.json, metrics.jsonl (one line per epoch), checkpoint.pt (every epoch),
trace.json (with --profile).
"""
from __future__ import annotations

import argparse
import collections
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package
sys.path.insert(0, str(Path(__file__).resolve().parent))  # ranks.py, also when loaded by path
from imageloader import (ImageLoader, Normalize, Options, configure_cuda_queues,  # noqa: E402
                         step_stream)
from ranks import pin_local_rank_cores, setup_distributed  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
ARCHS = sorted(n for n in torchvision.models.list_models(module=torchvision.models) if "resne" in n)
ROW = "{:>5} {:>10} {:>9} {:>9} {:>9} {:>8} {:>7} {:>7}"
HEADER = ROW.format("epoch", "train_loss", "train_acc", "val_top1", "val_top5", "img/s",
                    "wait%", "sec")


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = p.add_argument
    a("--data", nargs="+", default=[str(REPO / "data/digits-train.tgz")],
      help="training archive(s): paths or globs")
    a("--val", nargs="+", default=[str(REPO / "data/digits-val.tgz")],
      help="validation archive(s): paths or globs")
    a("--split", type=split_names, help="read only the images below split folders of this "
      "name from --data (e.g. train, for an archive of train/<class>/... beside "
      "val/<class>/...), or of these names as one set (train,val)")
    a("--val-split", type=split_names, help="the same for --val (e.g. val)")
    a("--arch", default="resnet18", choices=ARCHS, help="torchvision ResNet")
    # The digits are 8x8: 16 px is plenty. 32 px costs 4x the compute and learned no faster
    # per epoch here (90% vs 93% val top-1 after 4 epochs); use 224 for ImageNet-like data.
    a("--size", type=int, default=16, help="image side in pixels (< 64: CIFAR-style stem)")
    a("--mode", default="RGB", choices=["RGB", "L"], help="color mode the images decode to")
    a("--epochs", type=int, default=5, help="passes over --data (5: >= 90%% on the digits)")
    a("--batch-size", type=int, default=32, help="images per step")
    a("--lr", type=float, default=None, help="peak learning rate; default 0.1 x batch-size/256")
    a("--momentum", type=float, default=0.9, help="SGD momentum")
    a("--wd", type=float, default=1e-4, help="weight decay (L2 coefficient)")
    a("--label-smoothing", type=float, default=0.0, help="cross-entropy label smoothing")
    a("--warmup-epochs", type=float, default=0.5, help="linear lr warmup, in epochs")
    a("--lr-warmup-decay", type=float, default=0.1, help="warmup starts at lr x this")
    a("--lr-schedule", default="cosine", choices=["cosine", "step"], help="after warmup")
    a("--lr-step-size", type=int, default=30, help="step schedule: epochs between decays")
    a("--lr-gamma", type=float, default=0.1, help="step schedule: lr factor per decay")
    a("--lr-per", default="iter", choices=["iter", "epoch"], help="how often the lr changes")
    a("--workers", type=int, default=None, help="decode processes (default: this rank's share "
      "of the cores - 1; "
      "0 = decode in this process)")
    a("--pin-cores", action="store_true", help="under torchrun: each rank and its loader "
      "processes keep to their own 1/LOCAL_WORLD_SIZE of the cores")
    a("--decode", default="auto", choices=["cpu", "cuda", "auto"],
      help="JPEG decode: Pillow in the workers, on the GPU, or auto (the loader measures "
      "which feeds this model faster; CPU without CUDA)")
    a("--prefetch", type=int, default=2, help="batches copied to the GPU ahead (0 = sync)")
    a("--gpu-lanes", default=None, help="GPU decoding's lanes (imageloader Options.gpu_lanes, "
      "e.g. hw or hw|cuda:8); default: the loader's choice for this GPU")
    a("--switch-interval", type=float, default=None, help="sys.setswitchinterval, seconds "
      "(Python's default 0.005): how long the training thread or a loader thread may hold the "
      "GIL while the other waits for it")
    a("--train-stream", default="auto", choices=["auto", "default", "side", "high"],
      help="the CUDA stream the steps run on: CUDA's legacy default stream (what a plain "
      "training script uses), a non-blocking stream of its own, or one of high priority, "
      "whose kernels the GPU starts before the loader's (auto: high on one GPU, where it "
      "measured faster; under torchrun the default one, or side with --cuda-graph)")
    a("--cuda-graph", action=argparse.BooleanOptionalAction, default=None,
      help="CUDA: capture the forward, the loss and the backward (with DDP's all-reduces) once "
      "as a CUDA graph after 11 eager steps and replay it every step, the optimizer stepping "
      "eagerly; the steps run on a side stream (a graph cannot be captured on the legacy "
      "default stream) (default: on for DDP ranks with a GPU each, NCCL, without --compile, "
      "where it measured fastest; off on one GPU)")
    a("--graph-ahead", type=int, default=0, help="with --cuda-graph: how many earlier steps "
      "may still be queued or running on the GPU when the host launches the next replay "
      "(0, the default: each waits for the last to end; -1: no bound)")
    a("--seed", type=int, default=0, help="seed of init, shuffle and augmentation")
    a("--device", default=None, help="cuda, cuda:1, cpu (default: cuda if available; under "
      "torchrun: the rank's GPU, shared round-robin if ranks outnumber GPUs)")
    a("--amp", action=argparse.BooleanOptionalAction, default=None,
      help="bf16 autocast (default: on for CUDA, off on CPU)")
    a("--channels-last", action=argparse.BooleanOptionalAction, default=None,
      help="NHWC model and batches (default: on for CUDA, off on CPU)")
    a("--compile", action="store_true", help="torch.compile the model")
    a("--grad-bucket-view", action=argparse.BooleanOptionalAction, default=True,
      help="under torchrun: gradients as views into DDP's all-reduce buckets (no copy)")
    a("--out-dir", default=None, help="default: runs/<timestamp> in the repository "
      "(with --resume: the checkpoint's folder)")
    a("--resume", default=None, help="checkpoint.pt to continue from")
    a("--evaluate", action="store_true", help="only validate the --resume checkpoint")
    a("--profile", action="store_true", help="chrome trace of 5 steps of the first epoch to "
      "out-dir/trace.json")
    a("--profile-at", type=int, default=5, help="with --profile: the first step traced (the "
      "default skips start-up and cuDNN's autotuning; later steps show the steady state)")
    a("--max-steps", type=int, default=None, help="stop each epoch after this many steps")
    a("--data-on-gpu", action="store_true", help="train on the loader's first batch over and "
      "over, already on the device: the rate this loop reaches when data costs nothing (the "
      "ceiling the loader's img/s is compared with)")
    a("--steady-after", type=int, default=10, help="steps before the steady-state img/s "
      "clock starts (cuDNN autotuning and start-up excluded)")
    a("--log-every", type=int, default=10, help="steps between loss syncs for the progress bar")
    a("--print-every", type=int, default=100, help="when the output is not a terminal (a log "
      "file): a progress line every N steps, besides the row per epoch; 0: rows only")
    a("--save-every", type=int, default=0, help="also checkpoint every N steps mid-epoch "
      "(with the loader's position: --resume continues with exactly the batches left)")
    return p


# ---- setup ---------------------------------------------------------------------------------


def is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def say(*values) -> None:
    """Print on the main rank, at once: a log file read while training runs has every line."""
    if is_main():
        print(*values, flush=True)


def resolve(args) -> tuple[torch.device, dict | None]:
    """Fill the device-dependent defaults in place; load the checkpoint if resuming."""
    wants_cuda = torch.cuda.is_available() and (args.device or "cuda").startswith("cuda")
    args.rank, args.world_size, rank_device = setup_distributed(use_cuda=wants_cuda)
    if args.graph_ahead < -1:
        raise SystemExit("--graph-ahead N: N >= 0, or -1 for no bound")
    if args.cuda_graph is None:  # the default: where it measured fastest (GraphedStep)
        args.cuda_graph = (wants_cuda and args.world_size > 1 and not args.compile
                           and dist.get_backend() == "nccl")
    if args.cuda_graph and args.compile:
        raise SystemExit("--cuda-graph and --compile: choose one (torch.compile's "
                         "mode='reduce-overhead' makes graphs of its own)")
    if args.cuda_graph and not wants_cuda:
        raise SystemExit("--cuda-graph needs CUDA")
    if args.cuda_graph and args.world_size > 1 and dist.get_backend() != "nccl":
        # Gloo reduces through the host, which no graph can capture.
        raise SystemExit("--cuda-graph under torchrun needs NCCL, one GPU per rank; these "
                         "ranks share GPUs over gloo")
    if args.train_stream == "auto":
        # One GPU: the model's kernels ahead of the loader's (results/2026-11-29-h200-priority).
        # DDP ranks stay where they were measured: NCCL's all-reduces run on streams of the
        # default priority, and whether steps ahead of them help is not measured.
        args.train_stream = "high" if wants_cuda and args.world_size == 1 else "default"
    if args.cuda_graph and args.train_stream == "default":
        args.train_stream = "side"  # CUDA cannot capture on the legacy default stream
    if args.pin_cores:
        args.cores = pin_local_rank_cores()  # before any loader starts its processes
        if args.cores and args.workers is None:
            # The loader's default divides the cores it may use among the local ranks: these
            # are this rank's already.
            args.workers = max(1, len(args.cores) - 1)
    if rank_device is not None:  # torchrun: this rank's device (ranks.py)
        args.device = str(rank_device)
    device = torch.device(args.device) if args.device else \
        torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args.device, cuda = str(device), device.type == "cuda"
    args.amp = cuda if args.amp is None else args.amp
    args.channels_last = cuda if args.channels_last is None else args.channels_last
    # Linear scaling rule (Goyal et al.): 0.1 at 256 images per step, as the reference.
    args.lr = 0.1 * args.batch_size / 256 if args.lr is None else args.lr
    ckpt = None
    if args.resume:
        ckpt = torch.load(args.resume, map_location="cpu", weights_only=True)
        # The weights only fit the model they came from: the checkpoint decides its shape.
        for key in ("arch", "size", "mode"):
            setattr(args, key, ckpt["args"][key])
    elif args.evaluate:
        raise SystemExit("--evaluate needs --resume CHECKPOINT")
    out = args.out_dir or (Path(args.resume).parent if args.resume
                           else REPO / "runs" / time.strftime("%Y%m%d-%H%M%S"))
    args.out_dir = str(out)
    return device, ckpt


def build_model(arch: str, num_classes: int, size: int, channels: int) -> nn.Module:
    model = torchvision.models.get_model(arch, weights=None, num_classes=num_classes)
    width = model.conv1.out_channels
    if size < 64:
        # The ImageNet stem (7x7 stride 2 + max-pool) divides the side by 4 before the first
        # block: a 32x32 image would reach layer4 as 1x1, its digit squeezed out in the stem.
        # A 3x3 stride-1 conv and no pool (the CIFAR ResNet stem) keeps 32x32 through layer1.
        model.conv1 = nn.Conv2d(channels, width, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    elif channels != 3:
        model.conv1 = nn.Conv2d(channels, width, 7, stride=2, padding=3, bias=False)
    return model


def split_names(text: str) -> str | tuple[str, ...]:
    """--split's value as Options.split takes it: "train", or "train,val" for both."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    return names[0] if len(names) == 1 else names


def build_loader(paths, args, device, *, train: bool, vocab=None,
                 split: str | tuple[str, ...] | None = None) -> ImageLoader:
    # The loader normalizes on the device (on a side stream under CUDA) and hands out NHWC
    # batches when the model is NHWC, so no layout copy happens in the step.
    return ImageLoader(paths, batch_size=args.batch_size, train=train, size=args.size,
                       device=device, vocab=vocab, workers=args.workers, prefetch=args.prefetch,
                       seed=args.seed, drop_last=train, mode=args.mode, decode=args.decode,
                       normalize=Normalize(dtype=torch.float32,
                                           channels_last=args.channels_last),
                       options=Options(gpu_lanes=args.gpu_lanes, split=split))


def lr_factor(step: int, steps_per_epoch: int, args) -> float:
    """lr multiplier at optimizer step `step`: linear warmup, then cosine to 0 or step decay."""
    epoch = step / steps_per_epoch if args.lr_per == "iter" else step // steps_per_epoch
    if epoch < args.warmup_epochs:  # big steps on random weights blow up BN statistics
        return args.lr_warmup_decay + (1 - args.lr_warmup_decay) * epoch / args.warmup_epochs
    if args.lr_schedule == "step":
        return args.lr_gamma ** int(epoch // args.lr_step_size)
    done = (epoch - args.warmup_epochs) / max(args.epochs - args.warmup_epochs, 1e-9)
    return 0.5 * (1 + math.cos(math.pi * min(done, 1.0)))


def build_optimizer(model, steps_per_epoch: int, args):
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                          weight_decay=args.wd)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: lr_factor(step, steps_per_epoch, args))  # stepped every iteration
    return opt, sched


# ---- train and evaluate --------------------------------------------------------------------


def summed(*values: torch.Tensor) -> list[float]:
    """Sum over ranks (one all_reduce), then read on the host: this synchronizes."""
    stacked = torch.stack([v.double() for v in values])
    if dist.is_initialized():
        dist.all_reduce(stacked)
    return stacked.tolist()


def each_rank(value: float, args, device) -> list[float]:
    """Every rank's `value`, in rank order: under DDP every step waits for the slowest rank,
    so one rank's figures hide why."""
    return [values[0] for values in each_rank_series([value], 1, args, device)]


# Steady steps whose times the metrics keep per epoch: enough for their spread, and an
# ImageNet epoch's 5,000 would make each metrics line ~100 KB.
STEP_TIMES_KEPT = 1000


def median_and_p90(values: list[float]) -> str:
    """'p50/p90' of a rank's step times, or '-' for a window too short to have them."""
    if len(values) < 2:
        return "-"
    deciles = statistics.quantiles(values, n=10)
    return f"{statistics.median(values):.1f}/{deciles[-1]:.1f}"


def each_rank_series(values: list[float], capacity: int, args, device) -> list[list[float]]:
    """Every rank's list of `values` (at most `capacity` each, lengths may differ), in rank
    order: one all_reduce of a table holding each rank's length and values in its row."""
    slots = torch.zeros(args.world_size, capacity + 1, dtype=torch.float64, device=device)
    kept = values[:capacity]
    slots[args.rank, 0] = len(kept)
    slots[args.rank, 1:1 + len(kept)] = torch.tensor(kept, dtype=torch.float64)
    if dist.is_initialized():
        dist.all_reduce(slots)
    return [row[1:1 + int(row[0])] for row in slots.tolist()]


class StepTimes:
    """Each steady step's host time and its phases (the wait for data, the forward pass with
    the loss, the backward pass; the rest is the optimizer's step and the bookkeeping), at most
    `kept` steps. Under DDP every step lasts as long as the slower rank's, so a rank's spread of
    step times (not only its mean) says what a second rank costs, and the phase that varies
    says where (scripts/bench/lockstep.py reads them)."""

    PHASES = ("wait", "forward", "backward")

    def __init__(self, kept: int):
        self.kept = kept
        self.steps: list[float] = []
        self.phases: dict[str, list[float]] = {phase: [] for phase in self.PHASES}
        self._start = self._last = 0.0
        self._marks: dict[str, float] = {}

    def begin(self) -> None:
        self._start = self._last = time.perf_counter()
        self._marks = {}

    def mark(self, phase: str) -> float:
        """The seconds since the last mark (or begin), recorded as `phase`."""
        now = time.perf_counter()
        self._marks[phase], self._last = now - self._last, now
        return self._marks[phase]

    def end(self, keep: bool) -> None:
        if keep and len(self.steps) < self.kept:
            self.steps.append(round(1000 * (time.perf_counter() - self._start), 3))
            for phase in self.PHASES:
                self.phases[phase].append(round(1000 * self._marks.get(phase, 0.0), 3))

    def gathered(self, args, device) -> dict:
        """Every rank's lists, for the metrics: steady_step_ms_per_rank and one per phase."""
        lists = {"step": self.steps, **self.phases}
        return {f"steady_{name}_ms_per_rank": each_rank_series(values, self.kept, args, device)
                for name, values in lists.items()}


class EagerStep:
    """One training step as written: forward with the loss, backward, the optimizer's step."""

    settled = True  # no warm-up of its own: the steady clock may start

    def __init__(self, model, opt, criterion, args):
        self.model, self.opt, self.criterion, self.args = model, opt, criterion, args

    def forward_backward(self, images, labels, times: StepTimes | None = None,
                         cache: bool = True):
        # cache=False under capture: autocast's cast cache must not outlive the graph.
        with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=self.args.amp,
                            cache_enabled=cache):
            logits = self.model(images)
            loss = self.criterion(logits, labels)
        if times is not None:
            times.mark("forward")
        loss.backward()
        if times is not None:
            times.mark("backward")
        return loss, logits

    def __call__(self, images, labels, times: StepTimes):
        self.opt.zero_grad(set_to_none=True)
        loss, logits = self.forward_backward(images, labels, times)
        self.opt.step()
        return loss, logits


class GraphedStep(EagerStep):
    """--cuda-graph: the forward, the loss and the backward (DDP's all-reduces included)
    captured once as a CUDA graph, then one replay per step; the optimizer steps eagerly (a
    few foreach kernels), so the learning-rate schedule applies as usual. Why: fed by the
    loader, ResNet-18's eager step launches its ~300 kernels from a host thread that shares the
    driver with the decoders' threads, and those launches vary by milliseconds
    (results/2026-11-28-h200-blocking); under DDP each step lasts as long as the slower rank's.
    A replay is one launch. Replays queued without a bound made photos slower: while several
    (~455 kernels each) were queued, the decoding threads' CUDA calls waited in the driver (up
    to ~40 ms) and the GPU idled for batches. Those waits shrink with the queue's depth (not
    to nothing), so the host now waits for the previous replay's end before the next
    (--graph-ahead 0). Measured (results/2026-11-28-h200x2-ahead, 2 x H200, ResNet-18, third
    epochs): per GPU on two GPUs photos 9,678-9,858 img/s (eager 8,416-8,739), 500x375
    11,344 (eager 10,214), within 5 points of one GPU's %; on one GPU eager is
    level or ahead on photos, so the graph is the default only for DDP ranks.

    WARMUP eager steps come first: cuDNN's autotuning, and DDP's bucket rebuild and its timing
    of the first 10 iterations, cannot run inside a capture. The capture then runs on the
    current stream, which must not be the legacy default one (--cuda-graph makes the steps'
    stream a side stream; DDP was built on it too, as CUDA graphs under DDP require).
    capture_error_mode="thread_local": the loader's threads go on calling CUDA meanwhile."""

    WARMUP = 11

    def __init__(self, model, opt, criterion, args):
        super().__init__(model, opt, criterion, args)
        self.eager_steps, self.graph = 0, None
        self.ahead = graph_bound(args)
        self._queued: collections.deque = collections.deque()  # events of steps not waited for

    @property
    def settled(self) -> bool:  # the steady clock starts after the capture, not before
        return self.graph is not None

    def __call__(self, images, labels, times: StepTimes):
        if self.graph is None and self.eager_steps < self.WARMUP:
            self.eager_steps += 1
            return super().__call__(images, labels, times)
        if self.graph is None:
            self._capture(images, labels)
        if self.ahead is not None and len(self._queued) > self.ahead:
            # Host and device synchronize here: the thread sleeps (the GIL released) until
            # the step `ahead` + 1 back has run on the GPU. Unbounded, the host queued four
            # replays back to back on photos, and meanwhile a CUDA call of the training thread
            # and one of a decoding thread each waited ~40 ms in the driver while decoding
            # stopped (results/2026-11-28-h200x2-graph, call 7). The training thread's longest
            # launch went 46.8 -> 24.2 -> 17.2 ms with no bound, 1 and 0 ahead, and 0 ahead
            # fed ResNet-18 on two GPUs fastest (results/2026-11-28-h200x2-ahead).
            self._queued.popleft().synchronize()
        # Stream order: the copies wait for the previous replay's reads, the replay for them.
        self.images.copy_(images, non_blocking=True)
        self.labels.copy_(labels, non_blocking=True)
        self.graph.replay()
        times.mark("forward")  # the whole of forward and backward, as queued
        times.mark("backward")
        self.opt.step()
        if self.ahead is not None:
            done = torch.cuda.Event(blocking=True)  # a sleeping wait, not a spinning one
            done.record(torch.cuda.current_stream(images.device))
            self._queued.append(done)
        return self.loss, self.logits

    def _capture(self, images, labels) -> None:
        self.images, self.labels = images.clone(), labels.clone()  # the graph's static inputs
        # With no gradients held, the captured backward assigns them rather than adding to
        # them: each replay writes this step's gradients over the last ones (no zero_grad).
        self.opt.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.current_stream(images.device)
        # torch.cuda.graph synchronizes the device and empties the cache first: once.
        with torch.cuda.graph(self.graph, stream=stream, capture_error_mode="thread_local"):
            self.loss, self.logits = self.forward_backward(self.images, self.labels,
                                                           cache=False)


def graph_bound(args) -> int | None:
    """--graph-ahead as a bound on the replays queued: None for -1 (no bound)."""
    return None if args.graph_ahead < 0 else args.graph_ahead


def make_step(model, opt, criterion, args) -> EagerStep:
    return (GraphedStep if args.cuda_graph else EagerStep)(model, opt, criterion, args)


def weights_sum(model: nn.Module) -> float:
    """The sum of every weight, in float64: one number a rank's drift would change."""
    with torch.no_grad():
        return sum(p.double().sum() for p in model.parameters()).item()  # synchronizes


def train_one_epoch(step_fn, loader, sched, epoch, args, profiler=None, save=None) -> dict:
    step_fn.model.train()
    steps = min(len(loader), args.max_steps or len(loader))
    device = loader.device
    # Running sums stay on the device: reading them every step would make the host wait for
    # the GPU every step and stop it from queueing the next one.
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    seen, wait_s, start = 0, 0.0, time.perf_counter()
    steady_seen, steady_start, steady_wait0 = 0, None, 0.0
    times = StepTimes(STEP_TIMES_KEPT)
    bar = tqdm(total=steps * loader.batch_size, desc=f"epoch {epoch}", unit="img",
               leave=False, disable=None if is_main() else True, dynamic_ncols=True)
    first = loader.state_dict()["batches"]  # > 0 when resuming mid-epoch
    batches = iter(loader)
    try:
        for step in range(first, steps):
            if steady_start is None and step >= first + args.steady_after and step_fn.settled:
                # One synchronize, once: the steady clock starts when the warm-up steps have
                # really run, not when they were queued.
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                steady_seen, steady_start, steady_wait0 = seen, time.perf_counter(), wait_s
            times.begin()
            batch = next(batches, None)  # host time blocked on data (decode, or CPU transfer)
            wait_s += times.mark("wait")
            if batch is None:  # fewer batches than scanned: some images failed to decode
                break
            images, labels = batch
            loss, logits = step_fn(images, labels, times)
            sched.step()
            loss_sum += loss.detach() * len(labels)
            correct += (logits.argmax(1) == labels).sum()
            seen += len(labels)
            bar.update(len(labels))
            times.end(keep=steady_start is not None)
            if profiler is not None:
                profiler.step()
            if save is not None and args.save_every and (step + 1) % args.save_every == 0:
                save(epoch, loader.state_dict())
            if (step + 1) % args.log_every == 0 and not bar.disable:
                # This .item() synchronizes: once per --log-every steps, not every step.
                bar.set_postfix(loss=f"{loss_sum.item() / seen:.3f}",
                                wait=f"{100 * wait_s / (time.perf_counter() - start):.0f}%")
            elif args.print_every and (step + 1) % args.print_every == 0 and bar.disable \
                    and is_main():
                # No terminal, no bar: a line that a log file keeps (and grep finds). The
                # .item() synchronizes, once per --print-every steps.
                elapsed = time.perf_counter() - start
                say(f"epoch {epoch} step {step + 1}/{steps} loss {loss_sum.item() / seen:.4f} "
                    f"img/s {seen / elapsed:.0f} wait {100 * wait_s / elapsed:.0f}%")
    finally:
        batches.close()  # ends the epoch in the loader (and finalizes loader.stats)
        bar.close()
    # This synchronizes: the epoch's time below includes all its queued GPU work.
    loss_total, correct_total, seen_total, steady_total = summed(
        loss_sum, correct, torch.tensor(seen, device=device),
        torch.tensor(seen - steady_seen, device=device))
    loss, acc = loss_total / max(seen_total, 1), 100 * correct_total / max(seen_total, 1)
    end = time.perf_counter()
    seconds = end - start
    steady = steady_total / (end - steady_start) if steady_start is not None else None
    # The share of the steady window each rank spent waiting for its batches.
    steady_waits = each_rank(100 * (wait_s - steady_wait0) / (end - steady_start)
                             if steady_start is not None else 0.0, args, device)
    return {"train_loss": loss, "train_acc": acc, "img_per_s": seen_total / seconds,
            "steady_img_per_s": steady, "steady_wait_pct_per_rank": steady_waits,
            # DDP keeps every rank's weights equal; a rank whose all-reduces went missing
            # (say, from a graph's replays) drifts from the others.
            "weights_sum_per_rank": each_rank(weights_sum(step_fn.model), args, device),
            **times.gathered(args, device),
            "data_wait_pct": 100 * wait_s / seconds, "seconds": seconds,
            "lr": sched.get_last_lr()[0]}


@torch.no_grad()
def evaluate(model, loader, args) -> dict:
    model.eval()
    device = loader.device
    hits = torch.zeros(2, device=device, dtype=torch.long)  # top-1, top-5; summed on device
    seen = 0
    for images, labels in loader:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.amp):
            logits = model(images)
        top = logits.topk(min(5, logits.shape[1]), dim=1).indices == labels[:, None]
        hits += torch.stack([top[:, 0].sum(), top.any(dim=1).sum()])
        seen += len(labels)
    # Summed over ranks; this synchronizes, once per evaluation.
    top1, top5, seen = summed(hits[0], hits[1], torch.tensor(seen, device=device))
    return {"val_top1": 100 * top1 / max(seen, 1), "val_top5": 100 * top5 / max(seen, 1)}


# ---- files ---------------------------------------------------------------------------------


def save_checkpoint(path: Path, model, opt, sched, epoch: int, args, classes,
                    loader_state: dict | None = None) -> None:
    """`epoch` is the last finished epoch; with `loader_state` it is the one in progress."""
    loaders = [loader_state]
    if dist.is_initialized():  # every rank's position, so each can resume its own share
        loaders = [None] * dist.get_world_size()
        dist.all_gather_object(loaders, loader_state)
    if not is_main():
        return
    state = {"model": unwrap(model).state_dict(), "optimizer": opt.state_dict(),
             "scheduler": sched.state_dict(), "epoch": epoch, "args": jsonable(vars(args)),
             "classes": list(classes), "loaders": loaders if loader_state else None}
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # atomic: a crash while saving keeps the previous checkpoint


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


def jsonable(d: dict) -> dict:
    return {k: v if isinstance(v, (str, int, float, bool, type(None), list)) else str(v)
            for k, v in d.items()}


def make_profiler(out_dir: Path, first: int):
    trace = out_dir / "trace.json"
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)

    def write(prof) -> None:
        prof.export_chrome_trace(str(trace))
        tqdm.write(f"profile of steps {first}-{first + 4} written to {trace} "
                   "(open in https://ui.perfetto.dev)")

    # Skip the steps before `first` (by default 0-3: worker start-up, cudnn.benchmark
    # autotuning), warm up on the one before it, record 5, once (repeat=1; the default repeats
    # the cycle for the whole epoch). With one cycle, acc_events=True costs nothing and
    # silences torch's "clears events each cycle" warning.
    first = max(first, 1)
    steps = torch.profiler.schedule(wait=first - 1, warmup=1, active=5, repeat=1)
    return torch.profiler.profile(activities=activities, schedule=steps, on_trace_ready=write,
                                  acc_events=True)


# ---- main ----------------------------------------------------------------------------------


def main(args) -> dict:
    device, ckpt = resolve(args)
    try:
        return run(args, device, ckpt)
    except BaseException as error:
        if dist.is_initialized():
            # The traceback holds run()'s frames and so their locals, the DDP model among
            # them: clear them, or the model outlives the group on the way out (see below).
            traceback.clear_frames(error.__traceback__)
        raise
    finally:
        if dist.is_initialized():
            leave_process_group()


def leave_process_group() -> None:
    """Leave torchrun's process group once the DDP model is gone (it went with run()'s frame).
    DDP's C++ reducer holds the group too. Whoever frees the group last joins gloo's worker
    threads; from the reducer's destructor that happens with the GIL held, while a worker may
    still need the GIL to free the tensors of the last collective: both wait forever (1 run in
    ~7 with torch 2.11 on 2 cores; py-spy --native: the main thread in ~Reducer ->
    ~ProcessGroupGloo -> thread::join, a gloo worker in ~AsyncAllgatherWork -> decref_pyobject
    -> gil_scoped_acquire). destroy_process_group() frees the group without holding the GIL,
    so the reducer must not be the last owner."""
    gc.collect()  # a DDP model kept past run() by a reference cycle goes now, not at exit
    dist.destroy_process_group()


def run(args, device, ckpt) -> dict:
    torch.manual_seed(args.seed)
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    torch.backends.cudnn.benchmark = True  # fixed input shapes: autotune the convs once
    classes = ckpt["classes"] if ckpt else None  # resuming: the head's classes, not a rescan
    if args.evaluate:
        with build_loader(args.val, args, device, train=False, vocab=classes,
                          split=args.val_split) as val:
            metrics = evaluate(make_model(args, len(val.vocab), ckpt, device), val, args)
        say(f"{args.resume} (epoch {ckpt['epoch']}): val top-1 "
            f"{metrics['val_top1']:.2f}%  top-5 {metrics['val_top5']:.2f}%")
        return metrics
    with build_loader(args.data, args, device, train=True, vocab=classes,
                      split=args.split) as train, \
            build_loader(args.val, args, device, train=False, vocab=train.vocab,
                         split=args.val_split) as val:
        if args.data_on_gpu:
            train = FirstBatchOnly(train)
        with training_stream(args.train_stream, device):
            # Built on the steps' stream: DDP under a CUDA graph must be (--cuda-graph).
            model = make_model(args, len(train.vocab), ckpt, device)
            return fit(model, train, val, ckpt, Path(args.out_dir), args)


def training_stream(choice: str, device: torch.device):
    """The stream the steps, evaluation and checkpoints run on: "default" leaves the current
    one (CUDA's legacy default stream); "side" and "high" make a new stream current
    (imageloader.step_stream, ordered after the current one, where the weights were copied
    in), of the default priority or of -1. "high", auto's choice on one GPU: nvJPEG's
    kernels run at the default priority, so the GPU starts a waiting kernel of the model's
    before them (bench.py --step-priority -1 against the caller's stream, ResNet-18 and -50 on
    photos and 500x375, interleaved: +0.3 to +4.9% img/s in all eight pairs,
    results/2026-11-29-h200-priority); since the loader's own streams are the most urgent,
    "side" (0) and "high" feed ResNet-18 on photos the same (results/2026-11-29-h200-wall).
    Why "side" was tried: a launch on the legacy stream
    must order itself after every blocking stream of the context, and fed ResNet-18's launches
    waited for milliseconds on a lock inside the driver (results/2026-11-28-h200-blocking; the
    trace had nvJPEG's kernels on 14 streams, which nvImageCodec's source makes non-blocking,
    so the lock may be another's); on a side stream the thread sleeps
    2.6x less and waits for data instead, at the same rate (results/2026-11-28-h200-sidestream).
    The batches follow: the loader makes the current stream wait for each batch's event and
    records its tensors there."""
    if choice == "default":
        return nullcontext()
    return step_stream(-1 if choice == "high" else 0, device)  # on the CPU: changes nothing


class FirstBatchOnly:
    """The loader, but every step gets its first batch again (--data-on-gpu): the same loop,
    model and steps with no data cost, so its img/s is the loader's ceiling."""

    def __init__(self, loader: ImageLoader):
        self.loader, self.batch = loader, None

    def __getattr__(self, name):  # vocab, device, stats, state_dict...: the loader's own
        return getattr(self.loader, name)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self):
        if self.batch is None:
            batches = iter(self.loader)
            try:  # one real batch, a copy of its own: the loader may reuse its memory
                self.batch = tuple(t.clone() for t in next(batches))
            finally:
                batches.close()
        for _ in range(len(self.loader)):
            yield self.batch


def make_model(args, num_classes: int, ckpt: dict | None, device) -> nn.Module:
    model = build_model(args.arch, num_classes, args.size, 3 if args.mode == "RGB" else 1)
    if ckpt:
        model.load_state_dict(ckpt["model"])
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(device, memory_format=fmt)
    if dist.is_initialized():
        # Gradients as views into DDP's all-reduce buckets: no copy of each gradient into its
        # bucket after backward (profiled two-rank ResNet-18 steps spent 18 ms of host time
        # per 5 steps in its gradient hooks against 2.3 on one GPU, and were host-bound), and
        # no second copy of the gradients in GPU memory. The views follow each parameter's
        # strides (the model is channels_last already), so the layout is the one autograd makes.
        model = DistributedDataParallel(model, device_ids=[device.index] if device.index
                                        is not None else None,
                                        gradient_as_bucket_view=args.grad_bucket_view)
    return model


def fit(model, train, val, ckpt, out_dir: Path, args) -> dict:
    if is_main():
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "args.json").write_text(json.dumps(jsonable(vars(args)), indent=1) + "\n")
    steps = min(len(train), args.max_steps or len(train))
    opt, sched = build_optimizer(model, steps, args)
    start = 0
    if ckpt:
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        start = ckpt["epoch"] + 1
        train.set_epoch(start)  # the shuffle and augmentation of epoch `start`, not of epoch 0
        if ckpt.get("loaders"):  # saved mid-epoch: continue with exactly the batches left
            train.load_state_dict(ckpt["loaders"][args.rank])
            start = ckpt["epoch"]
    compiled = torch.compile(model) if args.compile else model
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    step_fn = make_step(compiled, opt, criterion, args)
    say(f"{args.arch} on {train.device} x {args.world_size} rank(s): {len(train.vocab)} "
        f"classes, {steps} steps/epoch of {args.batch_size}, lr {args.lr:g} (effective "
        f"peak), amp {args.amp}{', CUDA graph' if args.cuda_graph else ''}, "
        f"epochs {start}..{args.epochs - 1}, out {out_dir}")
    say(HEADER)
    metrics: dict = {}

    def save_mid_epoch(epoch: int, loader_state: dict) -> None:
        save_checkpoint(out_dir / "checkpoint.pt", model, opt, sched, epoch, args,
                        train.vocab.classes, loader_state)

    for epoch in range(start, args.epochs):
        profiling = args.profile and epoch == start and is_main()
        with make_profiler(out_dir, args.profile_at) if profiling else nullcontext() as prof:
            metrics = train_one_epoch(step_fn, train, sched, epoch, args, prof, save_mid_epoch)
        metrics.update(evaluate(compiled, val, args), epoch=epoch)
        say(ROW.format(epoch, *(f"{metrics[k]:.{p}f}" for k, p in (
            ("train_loss", 4), ("train_acc", 2), ("val_top1", 2), ("val_top5", 2),
            ("img_per_s", 0), ("data_wait_pct", 1), ("seconds", 1)))))
        if metrics.get("steady_img_per_s"):
            say(f"steady: {metrics['steady_img_per_s']:.0f} img/s after {args.steady_after} "
                f"steps ({metrics['steady_img_per_s'] / args.world_size:.0f} per rank), "
                f"waiting for data: " + " ".join(
                    f"{w:.0f}%" for w in metrics["steady_wait_pct_per_rank"])
                + "; steps p50/p90 ms: " + " ".join(
                    median_and_p90(ms) for ms in metrics["steady_step_ms_per_rank"]))
        if is_main():
            with open(out_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps({**metrics, "arch": args.arch, "ranks": args.world_size,
                                    "data_on_gpu": args.data_on_gpu, "decode": args.decode,
                                    "cuda_graph": args.cuda_graph,
                                    "graph_ahead": graph_bound(args),
                                    "loader": train.stats.as_dict(),
                                    "val_loader": val.stats.as_dict()}) + "\n")
        save_checkpoint(out_dir / "checkpoint.pt", model, opt, sched, epoch, args,
                        train.vocab.classes)
    return {**metrics, "out_dir": str(out_dir)}


if __name__ == "__main__":
    arguments = get_args_parser().parse_args()
    if arguments.decode != "cpu":
        configure_cuda_queues()  # before CUDA starts: GPU decoding waits less behind training
    main(arguments)
