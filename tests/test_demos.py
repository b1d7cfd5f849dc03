"""Smoke tests for the stream demos and benchmarks in scripts/bench/: flags parse, mains run at tiny sizes."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "bench"
NAMES = ["bench_parallel", "demo_overlap_chunks", "demo_pinned_pageable"]

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", NAMES)
def test_defaults_parse(name: str) -> None:
    script = load(name)
    args = script.get_args_parser().parse_args([])
    assert args.out is None
    assert script.get_args_parser().format_help()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA exit")
@pytest.mark.parametrize("name", NAMES)
def test_main_without_cuda_exits_cleanly(name: str, capsys) -> None:
    script = load(name)
    assert script.main(script.get_args_parser().parse_args([])) is None
    assert "no CUDA" in capsys.readouterr().out


TINY_BENCH = ["--warmup", "1", "--iters", "2", "--repeats", "2", "--small-batch", "2",
              "--large-batch", "2", "--large-matmul", "256"]


@pytest.mark.cuda
@requires_cuda
@pytest.mark.parametrize("extra", [[], ["--backward"], ["--cuda-graph"], ["--dtype", "float32"]])
def test_bench_parallel_tiny(extra: list[str], tmp_path: Path) -> None:
    script = load("bench_parallel")
    out = tmp_path / "bench.json"
    result = script.main(script.get_args_parser().parse_args(TINY_BENCH + extra + ["--out", str(out)]))
    assert {r["case"] for r in result["rows"]} == {"small-mlp", "small-conv", "large-matmul", "large-conv"}
    assert all(r["sequential_ms"] > 0 and r["parallel_ms"] > 0 for r in result["rows"])
    assert json.loads(out.read_text())["rows"]


@pytest.mark.cuda
@requires_cuda
def test_demo_overlap_chunks_tiny(tmp_path: Path) -> None:
    script = load("demo_overlap_chunks")
    out = tmp_path / "overlap.json"
    args = script.get_args_parser().parse_args(
        ["--size", str(1 << 16), "--work", "2", "--warmup", "1", "--repeats", "2", "--out", str(out)]
    )
    result = script.main(args)
    assert [r["variant"] for r in result["rows"]] == ["sequential", "per-chunk", "batched"]
    assert all(r["identical"] for r in result["rows"])
    assert json.loads(out.read_text())["rows"]


@pytest.mark.cuda
@requires_cuda
def test_demo_pinned_pageable_tiny(tmp_path: Path) -> None:
    script = load("demo_pinned_pageable")
    out = tmp_path / "pinned.json"
    args = script.get_args_parser().parse_args(
        ["--mb", "1", "--kernel-ms", "2", "--warmup", "1", "--repeats", "2", "--out", str(out)]
    )
    result = script.main(args)
    rows = result["rows"]
    assert len(rows) == 2 * 2 * 5
    assert all(r["total_ms"] > 0 and r["host_ms"] >= 0 for r in rows)
    assert all(r["overlap"] is None or 0 <= r["overlap"] <= 1 for r in rows)
    assert not any(isinstance(v, float) and math.isnan(v) for r in rows for v in r.values())
    json.loads(out.read_text())  # valid JSON: NaN was written as null


def test_bench_reader_runs_on_the_cpu(capsys) -> None:
    """bench_reader.py, the GPU-free measure of the reader, on the bundled archive."""
    bench = load("bench_reader")
    archive = str(SCRIPTS.parents[1] / "data/digits-train.tgz")
    result = bench.main(bench.get_args_parser().parse_args(
        ["--archive", archive, "--workers", "1", "--seconds", "1", "--batch-size", "64"]))
    assert result["reader_alone"] > 0 and result["walk"]["cpu_us_per_member"] > 0
    assert result["reader_to_packers"]["img_per_s"] > 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result
