"""Is ResNet-18 fed by the loader held back by the GPU they share, or by the host thread that
launches its steps?

    python scripts/bench/probe_gpu_share.py --archive bench-data/photos-16000.tgz \
        --gpu-lanes hw,"hw|cuda:8" --out bench-out/gpu-share.json

On photos the loader alone delivers 11,000-13,700 img/s and ResNet-18 consumes ~12,900 with
its data already on the GPU, yet fed by the loader it trains at ~9,800-10,100. Two things are
shared: the GPU (the loader's crop kernels and CUDA decoding run between the model's kernels)
and the host (the training thread spends 10-12 ms of CPU per 20 ms step, beside the loader's
threads in the same process). A CUDA graph of the whole training step (forward, backward,
SGD) separates them: replayed, it keeps the GPU as busy as eager training while its thread
does almost nothing. Rows, for each `--gpu-lanes`:
- the loader alone;
- the loader alone while another thread replays the graphed step without pause (the GPU
  shared, the host not);
- the loader feeding the graphed step (each batch copied into its static input);
- the loader feeding the eager step (what bench.py times);
and the graphed and eager steps on data already on the GPU (their ceilings).
"""
from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (also puts the repository on sys.path)
from imageloader import configure_cuda_queues  # noqa: E402


class GraphedStep:
    """bench.Trainer's step (bf16 autocast, channels_last, SGD with momentum) captured once
    as a CUDA graph: a step is then one copy into the static batch and one replay."""

    def __init__(self, trainer: bench.Trainer, images: torch.Tensor, labels: torch.Tensor):
        self.trainer = trainer
        self.images, self.labels = images.clone(), labels.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph: cuDNN's choices, momentum
            for _ in range(3):
                self._step()
                trainer.opt.zero_grad(set_to_none=True)  # the graph allocates its own
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        trainer.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self._step()

    def _step(self) -> None:
        # cache_enabled=False: autocast's cast cache must not outlive the capture.
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            loss = F.cross_entropy(self.trainer.model(self.images), self.labels)
        loss.backward()
        self.trainer.opt.step()

    def step(self, images, labels) -> None:
        self.images.copy_(images, non_blocking=True)  # stream order: before the replay
        self.labels.copy_(labels, non_blocking=True)
        self.graph.replay()


class GpuLoad:
    """A thread replaying the graphed step without pause on a stream of its own: the GPU as
    busy as training, the host all but idle (its thread sleeps in each replay's wait)."""

    def __init__(self, graphed: GraphedStep):
        self.graphed, self.stop, self.steps = graphed, threading.Event(), 0
        self.thread = threading.Thread(target=self._run, name="gpu-load", daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            while not self.stop.is_set():
                self.graphed.graph.replay()
                done = torch.cuda.Event()
                done.record(stream)
                done.synchronize()  # drops the GIL while the GPU works
                self.steps += 1


def loader_alone_row(args, lanes: str, label: str, load: GraphedStep | None = None) -> dict:
    with bench.our_loader(args.archive, args, prefetch=2, decode="cuda", lanes=lanes) as loader:
        it = bench.forever(loader)
        for _ in range(args.loader_warmup):  # past the first epoch (the plain copy)
            next(it)
        if load is None:
            rate, load_rate = bench.steady_rate(it, 0, args.max_seconds), None
        else:
            with GpuLoad(load) as busy:
                t0 = time.perf_counter()
                rate = bench.steady_rate(it, 0, args.max_seconds)
                load_rate = busy.steps * args.batch_size / (time.perf_counter() - t0)
        decoder = loader.decode_name
    row = {"recipe": label, "lanes": lanes, "img_per_s": rate, "decoder": decoder,
           "gpu_load_img_per_s": load_rate}
    print(f"{label:48s} {rate:9.0f} img/s" + (
        f"  (graphed step beside it: {load_rate:.0f} img/s)" if load_rate else ""), flush=True)
    return row


def training_row(trainer, step, args, lanes: str, label: str) -> dict:
    """bench.timed_training with `step` (eager or graphed) in place of the trainer's."""
    with bench.our_loader(args.archive, args, prefetch=2, decode="cuda", lanes=lanes) as loader:
        it = bench.forever(loader)
        for _ in range(args.loader_warmup):
            step(*next(it))
        result = bench.timed_training(SimpleNamespace(step=step), it, args, label)
    result["lanes"] = lanes
    return result


def main() -> None:
    args = bench.probe_args(
        __doc__.splitlines()[0], steps=2000, out="bench-out/gpu-share.json",
        extra=lambda p: p.add_argument("--gpu-lanes", default="auto",
                                       help="comma-separated Options.gpu_lanes (auto: the "
                                            "default)"))
    configure_cuda_queues()
    trainer = bench.Trainer(args.model, 100)
    ceiling = bench.ceiling_batches(args, 100)
    graphed = GraphedStep(trainer, *next(ceiling))
    rows = [bench.timed_training(trainer, ceiling, args, "eager step, data on GPU"),
            bench.timed_training(SimpleNamespace(step=graphed.step), ceiling, args,
                                 "graphed step, data on GPU")]
    for lanes in args.gpu_lanes.split(","):
        name = "" if lanes == "auto" else f", lanes {lanes}"
        rows += [loader_alone_row(args, lanes, f"loader alone{name}"),
                 loader_alone_row(args, lanes, f"loader alone, graphed step beside{name}",
                                  load=graphed),
                 training_row(trainer, graphed.step, args, lanes, f"loader -> graphed{name}"),
                 training_row(trainer, trainer.step, args, lanes, f"loader -> eager{name}")]
    out = {"environment": bench.environment(), "args": vars(args), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
