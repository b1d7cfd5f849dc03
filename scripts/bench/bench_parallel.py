"""Benchmark imageloader.parallel.Parallel against running the same branches one after the other.

Two kinds of workload:

* small branches (batch 8 MLPs and convs): each kernel leaves most SMs idle,
  so running the branches on their own streams should help;
* large branches (big matmuls, big-batch convs): each kernel fills the GPU,
  so it should not.

Both variants run the very same module (``Parallel.use_streams`` toggled), timed
with CUDA events: warm-up, then the median of ``--repeats`` timings, each the
mean over ``--iters`` back-to-back calls.  ``--cuda-graph`` replays a captured
forward instead, which takes the CPU's launch cost out of the picture.

    python scripts/bench/bench_parallel.py --out bench-out/parallel.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when loaded by path in tests
from report import cuda_report, write_report  # noqa: E402


try:
    from imageloader.parallel import Parallel
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from imageloader.parallel import Parallel

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Case:
    name: str
    kind: str  # "small" (should help) or "large" (should not)
    make_branch: Callable[[], nn.Module]
    input_shape: tuple[int, ...]


@dataclass
class Row:
    case: str
    kind: str
    branches: int
    input_shape: tuple[int, ...]
    sequential_ms: float
    parallel_ms: float
    speedup: float


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--branches", type=int, default=4, help="branches per Parallel")
    parser.add_argument("--small-batch", type=int, default=8, help="batch of the small cases")
    parser.add_argument("--large-batch", type=int, default=64, help="batch of the large conv case")
    parser.add_argument("--large-matmul", type=int, default=8192, help="M=N=K of the large matmul case")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--backward", action="store_true", help="time forward+backward, not forward alone")
    parser.add_argument("--cuda-graph", action="store_true", help="time replays of a captured forward")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls first")
    parser.add_argument("--iters", type=int, default=20, help="calls per timing")
    parser.add_argument("--repeats", type=int, default=15, help="timings; the median is reported")
    parser.add_argument("--cases", nargs="*", default=None, help="only these case names")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write results as JSON here")
    return parser


def small_mlp(width: int = 1024, depth: int = 4) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*layers)


def conv_stack(channels: int = 64, depth: int = 3, batch_norm: bool = True) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers.append(nn.Conv2d(channels, channels, 3, padding=1))
        if batch_norm:
            layers.append(nn.BatchNorm2d(channels))
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def build_cases(args: argparse.Namespace) -> list[Case]:
    m = args.large_matmul
    cases = [
        Case("small-mlp", "small", small_mlp, (args.small_batch, 1024)),
        Case("small-conv", "small", conv_stack, (args.small_batch, 64, 28, 28)),
        Case("large-matmul", "large", lambda: nn.Linear(m, m, bias=False), (m, m)),
        # No BatchNorm here: training-mode BN reduces per channel, which with
        # few channels is itself a kernel that leaves the GPU half idle.
        Case("large-conv", "large", lambda: conv_stack(256, depth=2, batch_norm=False),
             (args.large_batch, 256, 56, 56)),
    ]
    if args.cases:
        unknown = set(args.cases) - {c.name for c in cases}
        if unknown:
            raise SystemExit(f"unknown case(s) {sorted(unknown)}; known: {[c.name for c in cases]}")
        cases = [c for c in cases if c.name in args.cases]
    return cases


def make_step(model: Parallel, x: torch.Tensor, backward: bool) -> Callable[[], None]:
    if not backward:
        def forward() -> None:
            with torch.no_grad():
                model(x)
        return forward

    def train_step() -> None:
        model.zero_grad(set_to_none=True)
        loss = sum(out.float().mean() for out in model(x))
        loss.backward()
    return train_step


def capture(step: Callable[[], None]) -> Callable[[], None]:
    """Capture one call of ``step`` into a CUDA graph and return its replay."""
    # Warm up on a side stream, as torch.cuda.graph's docs ask, so lazy
    # initialisation (cuBLAS handles, Parallel's streams) happens before capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def time_ms(step: Callable[[], None], warmup: int, iters: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean GPU time of ``iters`` calls, in ms."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            step()
        end.record()
        # SYNC: the host waits for the GPU to read the events' times; it is
        # outside the timed region, between repeats.
        end.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return statistics.median(times)


def run_case(case: Case, args: argparse.Namespace) -> Row:
    dtype = DTYPES[args.dtype]
    torch.manual_seed(args.seed)
    branches = [case.make_branch() for _ in range(args.branches)]
    model = Parallel(*branches).to(device="cuda", dtype=dtype)
    x = torch.randn(case.input_shape, device="cuda", dtype=dtype)
    results = {}
    for use_streams in (False, True):
        model.use_streams = use_streams
        step = make_step(model, x, args.backward)
        if args.cuda_graph:
            step = capture(step)
        results[use_streams] = time_ms(step, args.warmup, args.iters, args.repeats)
    seq, par = results[False], results[True]
    return Row(case.name, case.kind, args.branches, case.input_shape, seq, par, seq / par)


def format_table(rows: list[Row]) -> str:
    header = f"{'case':<14}{'kind':<7}{'input':<20}{'sequential ms':>14}{'parallel ms':>13}{'speedup':>9}"
    lines = [header, "-" * len(header)]
    for r in rows:
        shape = "x".join(map(str, r.input_shape))
        lines.append(
            f"{r.case:<14}{r.kind:<7}{shape:<20}{r.sequential_ms:>14.3f}"
            f"{r.parallel_ms:>13.3f}{r.speedup:>8.2f}x"
        )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> dict | None:
    if not torch.cuda.is_available():
        print("bench_parallel: no CUDA device; nothing to measure.")
        return None
    if args.cuda_graph and args.backward:
        raise SystemExit("--cuda-graph times the forward only; drop --backward")
    torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its best
    rows = [run_case(case, args) for case in build_cases(args)]
    mode = "forward+backward" if args.backward else "forward"
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | {args.dtype} | {mode}"
          f"{' | CUDA graph' if args.cuda_graph else ''}")
    print(format_table(rows))
    return write_report(cuda_report(args, [asdict(r) for r in rows]), args.out)


if __name__ == "__main__":
    main(get_args_parser().parse_args())
