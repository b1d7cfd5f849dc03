"""scripts/train_resnet.py end to end on the bundled digits: learns, writes its files, resumes.

Short runs at the digits' native 8x8 (40 steps of 32 per epoch, ~6 s each) keep the file
under a minute on two CPU cores. Chance is 10%: a loader that mixed up labels and images
could not pass 30%.
"""
from __future__ import annotations

import importlib.util
import json
import tarfile
from pathlib import Path

import pytest
import torch

from conftest import torchrun

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "train_resnet.py"
CHANCE_PLUS = 30.0  # % val top-1 that only a learning run reaches (chance: 10%)


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("train_resnet", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(script, *flags: str) -> dict:
    tiny = ["--size", "8", "--batch-size", "32", "--max-steps", "40", "--device", "cpu"]
    return script.main(script.get_args_parser().parse_args(tiny + list(flags)))


def test_defaults_point_at_bundled_data(script) -> None:
    args = script.get_args_parser().parse_args([])
    assert args.arch == "resnet18" and args.lr is None and args.resume is None
    for path in args.data + args.val:
        assert Path(path).is_file(), path
    assert script.get_args_parser().format_help()


def test_train_resume_evaluate(script, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    first = run(script, "--epochs", "2", "--workers", "0", "--out-dir", str(out),
                "--print-every", "20")
    # Not a terminal (captured): no progress bar, a greppable line every 20 steps instead.
    printed = capsys.readouterr().out
    progress = [line for line in printed.splitlines() if " step " in line]
    assert [line.split(" loss ")[0] for line in progress] == [
        f"epoch {e} step {s}/40" for e in (0, 1) for s in (20, 40)], printed
    assert first["val_top1"] > CHANCE_PLUS, first
    assert first["val_top5"] >= first["val_top1"]
    assert json.loads((out / "args.json").read_text())["epochs"] == 2
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in lines] == [0, 1]
    assert lines[-1]["loader"]["batches"] == 40 and lines[-1]["loader"]["epoch"] == 1
    assert (out / "checkpoint.pt").is_file()

    resumed = run(script, "--epochs", "3", "--workers", "0", "--resume", str(out / "checkpoint.pt"))
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in lines] == [0, 1, 2]  # continued, did not restart at 0
    assert lines[-1]["loader"]["epoch"] == 2  # the loader was told: epoch 2's shuffle
    ckpt = torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert ckpt["epoch"] == 2 and ckpt["scheduler"]["last_epoch"] == 3 * 40
    assert ckpt["classes"] == [str(d) for d in range(10)]

    checked = run(script, "--workers", "0", "--resume", str(out / "checkpoint.pt"), "--evaluate")
    assert checked["val_top1"] == pytest.approx(resumed["val_top1"], abs=0.3)
    assert checked["val_top5"] == pytest.approx(resumed["val_top5"], abs=0.3)


def test_one_archive_of_two_splits_trains_on_one_and_validates_on_the_other(script, tmp_path):
    """The digits' train/ and val/ members in one archive (as Imagenette's is laid out):
    refused as one set, read split by split with --split and --val-split, or both as one
    set with --split train,val (a last run on all the data)."""
    both = tmp_path / "digits.tgz"
    with tarfile.open(both, "w:gz") as out:
        for name in ("digits-train.tgz", "digits-val.tgz"):
            with tarfile.open(SCRIPT.parents[1] / "data" / name) as archive:
                for member in archive:
                    out.addfile(member, archive.extractfile(member))
    with pytest.raises(ValueError, match=r"2 splits found \(train: 1437 images .*val: 360"):
        run(script, "--data", str(both), "--val", str(both), "--workers", "0")
    result = run(script, "--data", str(both), "--val", str(both), "--split", "train",
                 "--val-split", "val", "--epochs", "2", "--workers", "0", "--out-dir",
                 str(tmp_path / "run"))
    last = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["val_loader"]["samples"] == 360 and result["val_top1"] > CHANCE_PLUS
    run(script, "--data", str(both), "--val", str(both), "--split", "train,val",
        "--val-split", "val", "--epochs", "1", "--workers", "0", "--batch-size", "128",
        "--max-steps", "0", "--out-dir", str(tmp_path / "all"))  # every step of the epoch
    last = json.loads((tmp_path / "all" / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["loader"]["samples"] == 14 * 128 == 1437 + 360 - 5  # drop_last: 5 left


def test_train_with_a_worker_process(script, tmp_path: Path) -> None:
    result = run(script, "--epochs", "2", "--workers", "1", "--out-dir", str(tmp_path))
    assert result["val_top1"] > CHANCE_PLUS, result
    assert 0 <= result["data_wait_pct"] <= 100 and result["img_per_s"] > 0
    (waited,) = result["steady_wait_pct_per_rank"]  # one rank: its share of the steady window
    assert 0 <= waited <= 100
    # Each steady step's host time and its wait, one list per rank: 40 steps, 10 of warm-up.
    (step_ms,), (wait_ms,) = result["steady_step_ms_per_rank"], result["steady_wait_ms_per_rank"]
    (forward_ms,), (backward_ms,) = (result["steady_forward_ms_per_rank"],
                                     result["steady_backward_ms_per_rank"])
    assert len(step_ms) == len(wait_ms) == len(forward_ms) == len(backward_ms) == 30
    assert min(step_ms) > 0 and min(forward_ms) > 0 and min(backward_ms) > 0
    # The phases are parts of their step (its rest: the optimizer and the bookkeeping).
    assert all(0 <= w + f + b <= s for s, w, f, b in zip(step_ms, wait_ms, forward_ms, backward_ms))
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["loader"]["workers"] for line in lines] == [1, 1]


def test_evaluate_needs_a_checkpoint(script) -> None:
    with pytest.raises(SystemExit):
        run(script, "--evaluate")


def test_mid_epoch_checkpoint_resumes_with_the_batches_left(script, tmp_path, monkeypatch):
    """--save-every stores the loader's position; a run cut there continues exactly."""
    train = script
    out = tmp_path / "run"
    args = train.get_args_parser().parse_args(
        ["--epochs", "1", "--max-steps", "6", "--save-every", "2", "--size", "8",
         "--workers", "0", "--batch-size", "16", "--device", "cpu", "--out-dir", str(out)])
    saved = []
    real_save = train.save_checkpoint

    def keep_mid_epoch(path, *rest, **kw):
        real_save(path, *rest, **kw)
        if len(rest) > 6 and rest[6] is not None:  # mid-epoch: the loader state is given
            saved.append(torch.load(path, weights_only=True))

    monkeypatch.setattr(train, "save_checkpoint", keep_mid_epoch)
    train.main(args)
    monkeypatch.setattr(train, "save_checkpoint", real_save)
    assert [c["loaders"][0]["batches"] for c in saved] == [2, 4, 6]
    torch.save(saved[1], out / "mid.pt")  # as if the run had died after step 4
    resumed = train.get_args_parser().parse_args(
        ["--resume", str(out / "mid.pt"), "--epochs", "1", "--max-steps", "6", "--workers", "0",
         "--batch-size", "16", "--device", "cpu", "--out-dir", str(tmp_path / "resumed")])
    metrics = train.main(resumed)
    assert metrics["epoch"] == 0
    lines = (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["loader"]["batches"] == 2  # steps 5 and 6: what was left


def test_data_on_gpu_trains_on_one_batch_of_the_loader(script, tmp_path: Path) -> None:
    """--data-on-gpu: the ceiling run reads one batch and trains on it every step."""
    out = tmp_path / "ceiling"
    run(script, "--epochs", "1", "--max-steps", "6", "--workers", "0", "--data-on-gpu",
        "--out-dir", str(out))
    line = json.loads((out / "metrics.jsonl").read_text())
    assert line["data_on_gpu"] and line["arch"] == "resnet18" and line["ranks"] == 1
    assert line["loader"]["batches"] == 1  # one real batch, then the same one 5 more times
    assert line["train_loss"] < 2.0  # six steps on one batch already fit it (chance: 2.30)


def test_profile_traces_the_five_steps_asked_for(script, tmp_path: Path) -> None:
    """--profile --profile-at 12: the trace holds steps 12-16 (a later window than the default
    5-9, past start-up, as the 2-GPU comparison needs); --gpu-lanes reaches the loader."""
    out = tmp_path / "profiled"
    run(script, "--epochs", "1", "--max-steps", "20", "--workers", "0", "--profile",
        "--profile-at", "12", "--gpu-lanes", "hw", "--out-dir", str(out))
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    steps = sorted({int(e["name"].split("#")[1]) for e in events
                    if str(e.get("name", "")).startswith("ProfilerStep#")})
    assert steps == [12, 13, 14, 15, 16]
    with pytest.raises(ValueError, match="lanes"):
        run(script, "--epochs", "1", "--max-steps", "2", "--workers", "0", "--gpu-lanes",
            "nonsense", "--out-dir", str(tmp_path / "bad"))


@pytest.mark.timeout(240)
def test_two_ranks_under_torchrun_share_what_the_host_has(tmp_path) -> None:
    """torchrun with 2 ranks: on the CPU over gloo; on a GPU host both ranks on its one visible
    GPU (more ranks than GPUs used to fail with 'invalid device ordinal' on cuda:1)."""
    out = tmp_path / "run"
    result = torchrun(SCRIPT, "--epochs", "1", "--max-steps", "3", "--size", "8",
                      "--batch-size", "16", "--workers", "0", "--out-dir", str(out),
                      timeout=230)
    assert result.returncode == 0, result.stderr[-3000:]
    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert f"on {device} x 2 rank(s)" in result.stdout, result.stdout[-2000:]
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["loader"]["batches"] == 3
    assert len(json.loads(lines[0])["steady_wait_pct_per_rank"]) == 2  # each rank's own
    sums = json.loads(lines[0])["weights_sum_per_rank"]
    assert len(sums) == 2 and sums[0] == pytest.approx(sums[1], rel=1e-9)  # DDP: one model
    # 3 steps, none past the default 10 of warm-up: each rank's list of step times is empty.
    assert json.loads(lines[0])["steady_step_ms_per_rank"] == [[], []]


def test_a_failed_run_frees_its_ddp_model_before_leaving_the_group(script, monkeypatch, tmp_path):
    """An error in training must not leave the DDP model to be freed after the process group:
    its reducer would then free the group, which can deadlock with gloo's workers (torch 2.11).
    The traceback of the error holds run()'s frame, so main() clears it first."""
    import weakref

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    models = []

    def failing_run(args, device, ckpt):
        model = DistributedDataParallel(torch.nn.Linear(4, 2))
        models.append(weakref.ref(model))
        model(torch.zeros(3, 4)).sum().backward()  # the reducer has run a collective
        raise RuntimeError("out of memory, say")

    alive_when_left = []
    destroy = dist.destroy_process_group

    def recording_destroy(*a, **k):
        alive_when_left.append(models[0]() is not None)
        return destroy(*a, **k)

    monkeypatch.setattr(script, "run", failing_run)
    monkeypatch.setattr(dist, "destroy_process_group", recording_destroy)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        args = script.get_args_parser().parse_args(["--device", "cpu", "--out-dir",
                                                    str(tmp_path / "run")])
        with pytest.raises(RuntimeError, match="out of memory, say"):
            script.main(args)
    finally:
        if dist.is_initialized():
            destroy()
    assert alive_when_left == [False]


@pytest.mark.parametrize("view", [True, False])
def test_ddp_gradients_live_in_its_buckets_unless_asked_not_to(script, tmp_path, view) -> None:
    """--grad-bucket-view (the default): after backward each gradient is a view into DDP's
    all-reduce bucket, with the parameter's own (channels_last) strides; --no-grad-bucket-view
    keeps gradients of their own, which DDP copies into the buckets."""
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        flags = ["--device", "cpu", "--size", "8", "--channels-last"]
        args = script.get_args_parser().parse_args(
            flags + ([] if view else ["--no-grad-bucket-view"]))
        model = script.make_model(args, 10, None, torch.device("cpu"))
        images = torch.rand(4, 3, 8, 8).contiguous(memory_format=torch.channels_last)
        for _ in range(2):  # the training loop's zero_grad(set_to_none=True) in between
            model.zero_grad(set_to_none=True)
            model(images).sum().backward()
        conv = model.module.conv1.weight
        # No public handle on the buckets: gradients that are views into them share storage.
        grads = [p.grad for p in model.parameters()]
        storages = {g.untyped_storage().data_ptr() for g in grads}
        assert conv.grad.stride() == conv.stride()  # the layout autograd makes
        if view:
            assert len(storages) < len(grads)  # gradients share their bucket's storage
        else:
            assert len(storages) == len(grads)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("local_rank", [0, 1])
def test_pin_cores_gives_each_local_rank_its_own_half(local_rank) -> None:
    """ranks.pin_local_rank_cores in a process of its own: local rank r of 2 keeps the r-th
    contiguous half of the cores it was allowed, and a process it starts inherits that."""
    import os
    import subprocess
    import sys

    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs 2 cores to split")
    code = ("import os, subprocess, sys; from ranks import pin_local_rank_cores; "
            "kept = pin_local_rank_cores(); "
            "child = subprocess.run([sys.executable, '-c', 'import os; "
            "print(sorted(os.sched_getaffinity(0)))'], capture_output=True, text=True); "
            "print(kept); print(child.stdout.strip())")
    env = dict(os.environ, LOCAL_WORLD_SIZE="2", LOCAL_RANK=str(local_rank),
               PYTHONPATH=str(SCRIPT.parent))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout.splitlines()
    half = len(allowed) // 2
    mine = allowed[local_rank * half:(local_rank + 1) * half]
    assert out == [str(mine), str(mine)]


def test_switch_interval_reaches_the_interpreter_and_step_times_are_capped(
        script, tmp_path, monkeypatch) -> None:
    """--switch-interval sets the GIL's switch interval before training starts; the metrics
    keep at most STEP_TIMES_KEPT steady step times per rank (an epoch may hold thousands)."""
    set_to = []
    monkeypatch.setattr(script.sys, "setswitchinterval", set_to.append)
    monkeypatch.setattr(script, "STEP_TIMES_KEPT", 3)
    result = run(script, "--epochs", "1", "--max-steps", "14", "--workers", "0",
                 "--switch-interval", "0.0005", "--out-dir", str(tmp_path / "short"))
    assert set_to == [0.0005]
    assert [len(ms) for ms in result["steady_step_ms_per_rank"]] == [3]  # of 4 steady steps
    # Not given, the interpreter's own stays (run() sets it only when the flag is given).
    assert script.get_args_parser().parse_args([]).switch_interval is None


def test_train_stream_side_is_a_stream_of_its_own_on_cuda_and_nothing_on_the_cpu(script) -> None:
    """--train-stream side: on the CPU no stream at all (the run above trains the same); on
    CUDA a stream that is not the default one, current inside the context and not after."""
    assert script.get_args_parser().parse_args([]).train_stream == "auto"  # resolve() fills it
    with script.training_stream("side", torch.device("cpu")):
        pass
    if not torch.cuda.is_available():
        return
    device = torch.device("cuda:0")
    default = torch.cuda.current_stream(device)
    with script.training_stream("default", device):
        assert torch.cuda.current_stream(device) == default
    with script.training_stream("side", device):
        side = torch.cuda.current_stream(device)
        assert side != default and side != torch.cuda.default_stream(device)
        x = torch.ones(1000, device=device).cumsum(0)
    assert torch.cuda.current_stream(device) == default
    side.synchronize()
    assert x[-1].item() == 1000.0
    assert side.priority == default.priority  # "side": the default priority
    with script.training_stream("high", device):
        high = torch.cuda.current_stream(device)
        assert high != default and high.priority < default.priority
    assert torch.cuda.current_stream(device) == default


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("stream", ["side", "high"])
def test_training_on_a_side_stream_learns_on_cuda(script, tmp_path, stream) -> None:
    """The whole loop (GPU-fed batches, backward, optimizer, evaluation, checkpoint) on a side
    stream, of the default priority or a high one: the batches' events and record_stream
    follow the current stream."""
    result = script.main(script.get_args_parser().parse_args(
        ["--size", "8", "--batch-size", "32", "--max-steps", "40", "--device", "cuda:0",
         "--epochs", "2", "--workers", "0", "--train-stream", stream,
         "--out-dir", str(tmp_path / stream)]))
    assert result["val_top1"] > CHANCE_PLUS, result


def test_cuda_graph_needs_cuda_and_is_not_compile(script) -> None:
    parse = script.get_args_parser().parse_args
    assert parse([]).cuda_graph is None  # decided by resolve(): on for NCCL ranks only
    assert parse(["--no-cuda-graph"]).cuda_graph is False and parse([]).graph_ahead == 0
    with pytest.raises(SystemExit, match="choose one"):
        script.main(parse(["--cuda-graph", "--compile"]))
    with pytest.raises(SystemExit, match="needs CUDA"):
        script.main(parse(["--cuda-graph", "--device", "cpu"]))
    with pytest.raises(SystemExit, match="-1 for no bound"):
        script.main(parse(["--cuda-graph", "--graph-ahead", "-2"]))


def test_the_graph_is_the_default_only_for_nccl_ranks(script, monkeypatch) -> None:
    """resolve() fills --cuda-graph's default: on for DDP ranks over NCCL (a GPU each), off on
    one process, on the CPU, under gloo and with --compile (which makes graphs of its own);
    and --train-stream's: high on one GPU, else the default stream (side under a graph)."""
    parse = script.get_args_parser().parse_args

    def default_for(world_size, backend, cuda=True, flags=()):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(script, "setup_distributed",
                            lambda use_cuda: (0, world_size, None))
        monkeypatch.setattr(script.dist, "get_backend", lambda: backend)
        args = parse(["--device", "cuda" if cuda else "cpu", *flags])
        script.resolve(args)
        return args.cuda_graph, args.train_stream

    assert default_for(2, "nccl") == (True, "side")  # a capture needs a side stream
    # one GPU: the steps on a stream of high priority; DDP ranks and the CPU keep the default
    assert default_for(1, "nccl") == (False, "high")
    assert default_for(2, "gloo") == (False, "default")
    assert default_for(1, "gloo", cuda=False) == (False, "default")
    assert default_for(1, "nccl", flags=["--train-stream", "default"]) == (False, "default")
    assert default_for(2, "gloo")[0] is False
    assert default_for(2, "nccl", cuda=False)[0] is False
    assert default_for(2, "nccl", flags=["--compile"])[0] is False
    assert default_for(2, "nccl", flags=["--no-cuda-graph"])[0] is False
    # a stream of high priority is kept under the graph (it is not the legacy one either)
    assert default_for(2, "nccl", flags=["--train-stream", "high"]) == (True, "high")
    assert default_for(2, "nccl", flags=["--train-stream", "side"]) == (True, "side")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("ahead", [None, 0, 1])
def test_a_graphed_step_trains_as_the_eager_one(script, monkeypatch, ahead) -> None:
    """GraphedStep: WARMUP eager steps, then the capture and a replay per step, the optimizer
    stepping eagerly: after the same batches, the same losses and weights as EagerStep's
    (float32, cuDNN deterministic for the comparison). A replay that added this step's
    gradients to the last ones, or replayed nothing, would drift at once. With --graph-ahead
    N (-1: no bound), when a replay is launched every step but the last N has run."""
    from torch import nn
    monkeypatch.setattr(script.GraphedStep, "WARMUP", 2)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    args = script.get_args_parser().parse_args(
        ["--no-amp", "--graph-ahead", str(-1 if ahead is None else ahead)])
    launched = []  # per replay: were the events of the steps before it complete?
    original = torch.cuda.CUDAGraph.replay

    def replay(graph):
        launched.append([event.query() for event in steps[1]._queued])
        return original(graph)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "replay", replay)
    device = torch.device("cuda:0")
    torch.manual_seed(0)
    batches = [(torch.randn(8, 3, 32, 32, device=device),
                torch.randint(0, 10, (8,), device=device)) for _ in range(6)]
    models = [script.build_model("resnet18", 10, 32, 3).to(device) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    side = torch.cuda.Stream(device)  # a capture cannot run on the legacy default stream
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        steps = [kind(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9,
                                             weight_decay=1e-4), nn.CrossEntropyLoss(), args)
                 for model, kind in zip(models, (script.EagerStep, script.GraphedStep))]
        for images, labels in batches:
            eager, graphed = (step(images, labels, script.StepTimes(0))[0].item()
                              for step in steps)
            assert graphed == pytest.approx(eager, rel=1e-4)
        assert steps[1].graph is not None and steps[1].eager_steps == 2
        for p, q in zip(*(model.parameters() for model in models)):
            torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
    assert len(launched) == 4  # 6 batches: 2 eager steps, then 4 replays
    # At each launch, the steps not waited for: none kept without a bound, else at most N.
    bound = 0 if ahead is None else ahead
    assert [len(events) for events in launched] == [min(i, bound) for i in range(4)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_training_learns_and_its_clock_starts_after_the_capture(script,
                                                                          tmp_path) -> None:
    out = tmp_path / "graph"
    result = script.main(script.get_args_parser().parse_args(
        ["--size", "8", "--batch-size", "32", "--max-steps", "40", "--device", "cuda:0",
         "--epochs", "2", "--workers", "0", "--cuda-graph", "--out-dir", str(out)]))
    assert result["val_top1"] > CHANCE_PLUS, result
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(m["cuda_graph"] for m in lines)
    # Epoch 0: 11 eager steps, the capture in step 11, the clock from step 12 (28 steps of
    # 40); epoch 1 replays from its first step, the clock from step 10 (30).
    assert [len(m["steady_step_ms_per_rank"][0]) for m in lines] == [28, 30]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.timeout(240)
def test_cuda_graph_refuses_ranks_that_share_a_gpu(tmp_path) -> None:
    result = torchrun(SCRIPT, "--cuda-graph", "--epochs", "1", "--max-steps", "3", "--size",
                      "8", "--workers", "0", "--out-dir", str(tmp_path / "run"), timeout=230)
    assert result.returncode != 0
    assert "--cuda-graph under torchrun needs NCCL" in result.stderr, result.stderr[-3000:]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.timeout(300)
def test_two_gpus_each_replay_a_graph_with_ddps_all_reduces_inside(tmp_path) -> None:
    """Two NCCL ranks, one GPU each, no flag (the graph is their default): the all-reduces
    are captured with the backward, so the ranks' weights stay equal over 66 steps (a graph
    without them would let each rank train on its half alone), and the run learns."""
    out = tmp_path / "run"
    result = torchrun(SCRIPT, "--epochs", "3", "--size", "8", "--batch-size",
                      "32", "--workers", "0", "--out-dir", str(out), gpus=2, timeout=290)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "on cuda:0 x 2 rank(s)" in result.stdout and "CUDA graph" in result.stdout
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(m["cuda_graph"] and m["graph_ahead"] == 0 for m in lines)
    sums = lines[-1]["weights_sum_per_rank"]
    assert sums[0] == pytest.approx(sums[1], rel=1e-9), sums
    assert lines[-1]["val_top1"] > CHANCE_PLUS, lines[-1]

