"""scripts/bench/: plot_timeline.py on a synthetic chrome trace, and bench_h2d.py's flags.

The trace is built by hand in the format libkineto writes (complete events, "ph": "X", cat
kernel / gpu_memcpy / gpu_memset, ts/dur in us, args.device / args.stream), so the overlap it
contains is known exactly: kernels cover 1.0-6.0 ms on stream 7; on stream 20 one HtoD copy of
3.0 ms lies entirely under them and one of 1.0 ms comes after them: 3.0 of 4.0 ms are hidden.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "bench"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


@pytest.fixture(scope="module")
def timeline():
    yield load("plot_timeline")
    sys.modules.pop("plot_timeline", None)


@pytest.fixture(scope="module")
def bench():
    yield load("bench_h2d")
    sys.modules.pop("bench_h2d", None)


def gpu(cat: str, name: str, stream: int, ts: float, dur: float, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "context": 1, "stream": stream, "correlation": 1, **args}}


def synthetic_trace() -> dict:
    """Times in us. First GPU event: the memset at 500 us."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 123, "tid": 123,
         "ts": 100.0, "dur": 9000.0, "args": {"External id": 5}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 123, "tid": 123,
         "ts": 1900.0, "dur": 50.0, "args": {"correlation": 9}},
        {"ph": "s", "id": 9, "pid": 123, "tid": 123, "ts": 1900.0, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 9, "pid": 0, "tid": 20, "ts": 2000.0, "cat": "ac2g", "name": "ac2g",
         "bp": "e"},
        gpu("gpu_memset", "Memset (Device)", 7, 500.0, 100.0, bytes=1024),
        gpu("kernel", "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>", 7, 1000.0, 2500.0),
        gpu("kernel", "sm90_xmma_gemm_f32f32_tf32f32_f32_nt_n_tilesize128x128", 7, 3500.0,
            2500.0),
        gpu("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20, 2000.0, 3000.0, bytes=38535168),
        gpu("kernel", "void at::native::vectorized_elementwise_kernel<4, ...>", 20, 5000.0,
            500.0),
        gpu("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20, 8000.0, 1000.0, bytes=38535168),
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 9500.0},
    ]
    return {"schemaVersion": 1, "displayTimeUnit": "ms", "traceEvents": events}


@pytest.fixture
def trace_path(tmp_path: Path) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(synthetic_trace()))
    return path


def by_stream(summary: dict) -> dict:
    return {s["stream"]: s for s in summary["streams"]}


def test_overlap_summary_counts_exactly_the_hidden_copy(timeline) -> None:
    events = timeline.gpu_events(synthetic_trace())
    assert len(events) == 6 and {e.kind for e in events} == {"kernel", "memcpy", "memset"}
    summary = timeline.overlap_summary(events)
    assert summary["copy_ms"] == pytest.approx(4.0)
    assert summary["copy_overlap_ms"] == pytest.approx(3.0)
    assert summary["copy_hidden"] == pytest.approx(0.75)
    assert summary["htod_overlap_ms"] == pytest.approx(3.0)
    assert summary["span_ms"] == pytest.approx(8.5)
    # Busy: the memset (0.1), kernels and the copy under them (5.0), the last copy (1.0).
    assert summary["idle_ms"] == pytest.approx(2.4)
    assert summary["nccl_ms"] == 0.0
    streams = by_stream(summary)
    assert streams[7]["kernel_ms"] == pytest.approx(5.0)
    assert streams[7]["memset_ms"] == pytest.approx(0.1)
    assert streams[7]["copy_overlap_ms"] == 0.0
    assert streams[7]["label"] == "stream 7: kernels"
    assert streams[20]["copy_ms"] == pytest.approx(4.0)
    assert streams[20]["kernel_ms"] == pytest.approx(0.5)
    assert streams[20]["copy_kinds"] == {"HtoD Pinned": 2}
    assert streams[20]["label"] == "stream 20: copies + conversion kernels"
    # Raw event dicts are accepted too; a copy is not "hidden" by kernels on its own stream.
    assert timeline.overlap_summary(synthetic_trace()["traceEvents"]) == summary
    same = [timeline.GpuEvent("kernel", "k", 0, 20, 0.0, 10_000.0),
            timeline.GpuEvent("memcpy", "Memcpy HtoD", 0, 20, 1000.0, 2000.0, "HtoD")]
    assert timeline.overlap_summary(same)["copy_overlap_ms"] == 0.0


def test_nccl_time_is_the_union_of_its_kernels_on_every_stream(timeline) -> None:
    events = [timeline.GpuEvent("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 0, 30,
                                0.0, 2000.0),
              timeline.GpuEvent("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", 0, 31,
                                1000.0, 3000.0),
              timeline.GpuEvent("kernel", "void cudnn::conv", 0, 7, 0.0, 4000.0),
              timeline.GpuEvent("kernel", "void cudnn::conv", 0, 7, 5000.0, 6000.0)]
    summary = timeline.overlap_summary(events)
    assert summary["nccl_ms"] == pytest.approx(3.0)
    assert summary["idle_ms"] == pytest.approx(1.0)
    assert "1.00 ms with nothing on it, NCCL kernels 3.00 ms" in timeline.format_summary(
        summary, "rank 0")


def test_host_summary_gives_each_traced_step_and_the_heaviest_cpu_ops(timeline) -> None:
    def op(name, ts, dur, cat="cpu_op"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}

    trace = {"traceEvents": [
        op("ProfilerStep#41", 30_000.0, 25_000.0, "user_annotation"),
        op("ProfilerStep#40", 0.0, 30_000.0, "user_annotation"),
        op("DistributedDataParallel.forward", 100.0, 12_000.0, "user_annotation"),
        op("aten::conv2d", 200.0, 1_000.0), op("aten::conv2d", 30_200.0, 1_500.0),
        op("aten::relu_", 1_300.0, 100.0),
        op("cudaEventSynchronize", 400.0, 50.0, "cuda_runtime"),
        op("cudaEventSynchronize", 900.0, 150.0, "cuda_runtime"),
        op("cudaLaunchKernel", 500.0, 5.0, "cuda_runtime"),
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 0.0, "dur": 9e9}]}
    summary = timeline.host_summary(trace, 2)
    assert summary["steps_ms"] == [("ProfilerStep#40", 30.0), ("ProfilerStep#41", 25.0)]
    assert summary["top_ops"] == [("DistributedDataParallel.forward", 12.0, 1),
                                  ("aten::conv2d", 2.5, 2)]
    assert summary["runtime_calls"] == [("cudaEventSynchronize", 0.2, 2),
                                        ("cudaLaunchKernel", 0.005, 1)]
    text = timeline.format_host_summary(summary)
    assert "steps (ms) 40: 30.0, 41: 25.0" in text and "2.50 ms     2x  aten::conv2d" in text


def test_thread_calls_show_which_threads_cuda_calls_sometimes_block(timeline) -> None:
    def call(name, tid, ts, dur):
        return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": ts,
                "dur": dur}

    trace = {"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        call("cudaLaunchKernel", 1, 0.0, 8.0), call("cudaLaunchKernel", 1, 10.0, 9.0),
        call("cudaLaunchKernel", 1, 20.0, 5_000.0),
        call("cudaEventSynchronize", 2, 0.0, 100.0), call("cudaEventSynchronize", 2, 200.0, 600.0),
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 0.0,
         "dur": 9e6}]}
    rows = timeline.thread_calls(trace, 5)
    assert [(r["thread"], r["call"], r["count"]) for r in rows] == [
        ("main", "cudaLaunchKernel", 3), ("tid 2", "cudaEventSynchronize", 2)]
    assert rows[0]["median_us"] == 9.0 and rows[0]["max_ms"] == 5.0
    assert rows[0]["long_ms"] == 5.0 and rows[1]["long_ms"] == pytest.approx(0.6)
    assert "main" in timeline.format_thread_calls(rows) and len(timeline.thread_calls(trace, 1)) == 1


def test_blocked_calls_name_what_other_threads_were_in_as_a_long_launch_ended(timeline) -> None:
    def span(name, tid, ts, dur, cat="cuda_runtime"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}

    trace = {"traceEvents": [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        span("cudaLaunchKernel", 1, 0.0, 8.0), span("cudaLaunchKernel", 1, 100.0, 2_000.0),
        span("cudaLaunchKernel", 1, 5_000.0, 900.0),
        span("cudaEventSynchronize", 2, 50.0, 2_045.0),   # ends 5 us before the 2 ms launch
        span("cudaMemcpyAsync", 2, 3_000.0, 5.0),         # overlaps neither
        span("aten::copy_", 3, 4_000.0, 1_800.0, "cpu_op"),  # ends 100 us before the 0.9 ms one
        span("cudaLaunchKernel", 3, 5_100.0, 10.0)]}
    rows = timeline.blocked_calls(trace, 5)
    assert [(r["thread"], r["ms"]) for r in rows] == [("main", 2.0), ("main", 0.9)]
    assert [(o["thread"], o["name"], o["end_us"]) for o in rows[0]["others"]] == [
        ("tid 2", "cudaEventSynchronize", -5.0)]
    assert [o["name"] for o in rows[1]["others"]] == ["aten::copy_", "cudaLaunchKernel"]
    assert timeline.blocked_calls(trace, 1)[0]["ms"] == 2.0
    assert "cudaEventSynchronize" in timeline.format_blocked_calls(rows)


def test_top_kernels_ranks_each_streams_kernels_by_gpu_time(timeline) -> None:
    events = timeline.gpu_events(synthetic_trace())
    events.append(timeline.GpuEvent("kernel", "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>",
                                    0, 7, 9000.0, 10_000.0))
    top = timeline.top_kernels(events, 1)
    assert top[7] == [("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>", pytest.approx(3.5), 2)]
    assert [name for name, _, _ in top[20]] == ["void at::native::vectorized_elementwise_kernel"
                                                "<4, ...>"]  # memcpys are not kernels
    assert "3.50 ms     2x  void cudnn" in timeline.format_top_kernels(events, 1)


def test_parse_reads_cupti_monitor_memcpy_and_legacy_kernel_category(timeline) -> None:
    memcpy = gpu("gpu_memcpy", "Memcpy", 13, 10.0, 5.0, **{"copy kind": "DtoH",
                                                           "src kind": "device"})
    legacy = {"ph": "X", "cat": "Kernel", "name": "k", "pid": 1, "tid": "stream 9",
              "ts": 1.5, "dur": 2.25}
    a, b = timeline.gpu_events([memcpy, legacy])
    assert (b.kind, b.copy_kind, b.src_kind, b.stream) == ("memcpy", "DtoH", "Device", 13)
    assert (a.kind, a.device, a.stream, a.start, a.end) == ("kernel", 1, 9, 1.5, 3.75)


def test_main_writes_png_and_prints_summary(timeline, trace_path, tmp_path, capsys) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "timeline.png"
    args = timeline.get_args_parser().parse_args([str(trace_path), "--out", str(out),
                                                  "--title", "synthetic"])
    result = timeline.main(args)
    assert out.is_file() and out.stat().st_size > 1000
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result["trace.json"]["copy_overlap_ms"] == pytest.approx(3.0)
    text = capsys.readouterr().out
    assert "stream 20: copies + conversion kernels" in text and "75% hidden" in text


def test_compare_gzip_and_window(timeline, trace_path, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    other = tmp_path / "other.json.gz"
    with gzip.open(other, "wt") as f:
        json.dump(synthetic_trace(), f)
    out = tmp_path / "compare.png"
    # Window 0-5 ms from the first GPU event (the memset at 0.5 ms): 0.5-5.5 ms absolute, so
    # the late copy drops out and the gemm is clipped at 5.5 ms.
    args = timeline.get_args_parser().parse_args([
        str(trace_path), "--compare", str(other), "--labels", "prefetch=0", "prefetch=2",
        "--window-ms", "0", "5", "--out", str(out)])
    result = timeline.main(args)
    assert out.is_file() and out.stat().st_size > 1000
    assert set(result) == {"prefetch=0", "prefetch=2"}
    for summary in result.values():
        assert summary["copy_ms"] == pytest.approx(3.0)
        assert summary["copy_overlap_ms"] == pytest.approx(3.0)
        assert by_stream(summary)[7]["kernel_ms"] == pytest.approx(4.5)


def test_trace_without_gpu_events_is_refused(timeline, tmp_path) -> None:
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps({"traceEvents": synthetic_trace()["traceEvents"][:5]}))
    args = timeline.get_args_parser().parse_args([str(path), "--out", str(tmp_path / "x.png")])
    with pytest.raises(SystemExit, match="no GPU events"):
        timeline.main(args)


def test_bench_h2d_defaults(bench) -> None:
    args = bench.get_args_parser().parse_args([])
    assert (args.batch_size, args.size, args.out) == (256, 224, None)
    assert args.repeats >= 1
    assert args.batch_size * args.size * args.size * 3 == 38_535_168  # the 38.5 MB batch


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bench_h2d_runs_on_gpu(bench, tmp_path) -> None:
    out = tmp_path / "h2d.json"
    args = bench.get_args_parser().parse_args(["--repeats", "3", "--warmup", "1",
                                               "--batch-size", "4", "--size", "32",
                                               "--out", str(out)])
    result = bench.main(args)
    assert json.loads(out.read_text())["bytes"] == 4 * 32 * 32 * 3
    rows = {r["kind"]: r for r in result["rows"]}
    assert set(rows) == {"pinned", "shm-registered", "pageable"}
    for row in rows.values():
        assert row["bytes_ok"] and row["gb_per_s"] > 0 and row["host_ms"] >= 0
    assert rows["pinned"]["is_pinned"] and not rows["pageable"]["is_pinned"]
