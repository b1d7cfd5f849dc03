"""Ranks and checkpoints: disjoint shares, equal steps, exact mid-epoch resume (CPU, gloo)."""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import free_port, solid, torchrun, write_archive
from imageloader import ImageLoader, Options

REPO = Path(__file__).resolve().parent.parent


def numbered_archive(path, n: int, bad=()):
    """PNG i is solid gray 10 + 3 i: every yielded image says which member it was."""
    files = []
    for i in range(n):
        data = b"broken png" if i in bad else solid(10 + 3 * i, fmt="PNG", mode="L")
        files.append((f"t/c{i % 3}/{i:03d}.png", data))
    return write_archive(path, files)


def ids(images: torch.Tensor) -> list[int]:
    return [round((v - 10) / 3) for v in images.float().mean(dim=(1, 2, 3)).tolist()]


def loader(path, **kw):
    kw.setdefault("workers", 0)
    return ImageLoader(path, batch_size=4, size=8, mode="L", device="cpu", normalize=False,
                       seed=1, **kw)


def collect(it):
    return [(x.clone(), y.clone()) for x, y in it]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("cut", [1, 3, 7])
def test_resume_mid_epoch_gives_exactly_the_batches_that_were_left(tmp_path, workers, cut):
    path = numbered_archive(tmp_path / "a.tgz", 30, bad={2, 11, 12, 29})
    with loader(path, workers=workers, train=True) as full:
        with pytest.warns(UserWarning):
            expected = collect(full)
        expected_skips = dict(full.stats.skipped)
    with loader(path, workers=workers, train=True) as first, warnings.catch_warnings():
        # The cut epoch reports the skips it met so far when it ends (as it should): not news.
        warnings.filterwarnings("ignore", "epoch 0: skipped", UserWarning)
        it = iter(first)
        done = collect(next(it) for _ in range(cut))
        state = first.state_dict()
        del it
    with loader(path, workers=workers, train=True) as second:
        second.load_state_dict(state)
        with pytest.warns(UserWarning):
            rest = collect(second)
        assert dict(second.stats.skipped) == expected_skips
    got = done + rest
    assert len(got) == len(expected)
    for (a, b), (c, d) in zip(got, expected):
        assert torch.equal(a, c) and torch.equal(b, d)  # same order, same crops and flips


def test_state_between_epochs_points_at_the_next_one(tmp_path):
    path = numbered_archive(tmp_path / "a.tgz", 12)
    with loader(path) as first:
        list(first)
        state = first.state_dict()
        assert state["epoch"] == 1 and state["batches"] == 0
        epoch1 = collect(first)
    with loader(path) as second:
        second.load_state_dict(state)
        again = collect(second)
    assert all(torch.equal(a, c) for (a, _), (c, _) in zip(epoch1, again))


def test_resume_with_another_configuration_is_an_error(tmp_path):
    path = numbered_archive(tmp_path / "a.tgz", 12)
    with loader(path) as first:
        it = iter(first)
        next(it)
        state = first.state_dict()
    with pytest.raises(ValueError, match="workers"):
        loader(path, workers=1).load_state_dict(state)
    with pytest.raises(ValueError, match="world_size"):
        loader(path, options=Options(rank=0, world_size=2)).load_state_dict(state)


@pytest.mark.parametrize("uneven, steps", [("pad", 4), ("drop", 3)])
def test_ranks_take_equal_steps_and_see_every_sample_once(tmp_path, uneven, steps):
    path = numbered_archive(tmp_path / "a.tgz", 25)  # shares of 13 and 12 images
    seen = []
    for rank in range(2):
        with loader(path, workers=1, options=Options(rank=rank, world_size=2, uneven=uneven)
                    ) as mine:
            batches = collect(mine)
            assert len(batches) == steps == len(mine)
            seen.append(sum((ids(x) for x, _ in batches), []))
    if uneven == "pad":  # rank 1 repeats a batch to match rank 0's four steps
        assert sorted(set(seen[0]) | set(seen[1])) == list(range(25))
        assert not set(seen[0]) & set(seen[1])
    else:
        assert len(seen[0]) == len(seen[1]) == 12 and not set(seen[0]) & set(seen[1])


def _rank_main(rank: int, world: int, port: int, path: str, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        with loader(path, workers=1) as mine:  # rank and world size from torch.distributed
            for epoch in range(2):
                got = sum((ids(x) for x, _ in mine), [])
                steps = torch.tensor([len(mine)])
                everyone = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
                dist.all_gather(everyone, steps)  # would hang if the step counts differed
                out[(rank, epoch)] = (got, [int(t) for t in everyone])
    finally:
        dist.destroy_process_group()




@pytest.mark.timeout(120)
def test_two_gloo_processes_split_every_epoch_exactly_once(tmp_path):
    path = numbered_archive(tmp_path / "a.tgz", 22)
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank_main, args=(2, free_port(), path, out), nprocs=2, join=True)
        result = dict(out)
    for epoch in range(2):
        a, b = result[(0, epoch)][0], result[(1, epoch)][0]
        assert sorted(a + b) == list(range(22)) and not set(a) & set(b)
        assert result[(0, epoch)][1] == result[(1, epoch)][1] == [3, 3]


@pytest.mark.parametrize("workers", [0, 2])
def test_shards_are_split_by_rank_and_reshuffled_every_epoch(tmp_path, workers):
    """Five shards, two ranks: each rank reads its own shards only; together every image once
    per epoch; the split changes between epochs; steps stay equal (padding)."""
    sizes = [3, 5, 4, 6, 2]
    start = 0
    for s, n in enumerate(sizes):
        files = [(f"t/c{i % 3}/{i:03d}.png", solid(10 + 3 * i, fmt="PNG", mode="L"))
                 for i in range(start, start + n)]
        write_archive(tmp_path / f"shard-{s}.tgz", files)
        start += n
    total = sum(sizes)
    splits = []
    for epoch in range(3):
        seen = []
        for rank in range(2):
            with loader(str(tmp_path / "shard-*.tgz"), workers=workers,
                        options=Options(rank=rank, world_size=2)) as mine:
                assert mine.split_by_archive
                mine.set_epoch(epoch)
                steps = len(mine)
                batches = collect(mine)
                assert len(batches) == steps
                seen.append(sum((ids(x) for x, _ in batches), []))
        unique = [set(s) for s in seen]
        assert not unique[0] & unique[1] and unique[0] | unique[1] == set(range(total))
        splits.append(frozenset(unique[0]))
    assert len(set(splits)) > 1  # the shard order, hence the split, changes with the epoch


@pytest.mark.timeout(180)
def test_check_ranks_script_under_torchrun(tmp_path):
    """scripts/check_ranks.py, the exactly-once check run on the 2-GPU host, on 2 ranks: gloo on
    the CPU; on a GPU host, both ranks on its one visible GPU."""
    path = numbered_archive(tmp_path / "n.tgz", 45)
    out = tmp_path / "ranks.jsonl"
    result = torchrun(REPO / "scripts/check_ranks.py", "--data", path, "--epochs", "2",
                      "--batch-size", "4", "--size", "8", "--workers", "0", "--resume-at", "2",
                      "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    *lines, resume = [json.loads(x) for x in out.read_text().splitlines()]
    assert resume["check"] == "resume" and resume["ok"] and len(resume["ranks"]) == 2
    for rank in resume["ranks"]:  # each rank's training epoch, cut after 2 batches, resumed
        assert (rank["before_cut"], rank["after_resume"], rank["batches"]) == (2, 4, 6)
        assert rank["same_labels_in_order"] and rank["batches_with_same_pixels"] == 6
    assert [x["epoch"] for x in lines] == [0, 1]
    shared = "cuda:0" if torch.cuda.is_available() else "cpu"
    for x in lines:
        assert x["ok"] and x["images"] == 45 and x["missing"] == 0
        assert x["steps"] == [6, 6] and x["shared_between_ranks"] == x["repeated"]
        assert x["devices"] == [shared, shared] and x["backend"] == "gloo"


@pytest.mark.timeout(180)
def test_check_ranks_script_reads_one_split_under_torchrun(tmp_path):
    """--split: the ranks and the reference alone read the val images only (15 of 45), each
    once over the two ranks (8 and 7), with equal steps."""
    files = [(f"d/{'val' if i % 3 == 2 else 'train'}/c{i % 2}/{i:03d}.png",
              solid(10 + 3 * i, fmt="PNG", mode="L")) for i in range(45)]
    path = write_archive(tmp_path / "splits.tgz", files)
    out = tmp_path / "ranks.jsonl"
    result = torchrun(REPO / "scripts/check_ranks.py", "--data", path, "--epochs", "1",
                      "--batch-size", "4", "--size", "8", "--workers", "0", "--split", "val",
                      "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    line, = [json.loads(x) for x in out.read_text().splitlines()]
    assert line["ok"] and line["split"] == "val" and line["images"] == 15
    assert line["missing"] == 0 and line["steps"] == [2, 2] and sum(line["per_rank"]) == 15


@pytest.mark.parametrize("local_rank, local_world, gpus, expected", [
    (0, 2, 0, ("cpu", "gloo")),          # no GPU
    (1, 2, 2, ("cuda:1", "nccl")),       # one GPU per rank
    (1, 2, 4, ("cuda:1", "nccl")),
    (1, 2, 1, ("cuda:0", "gloo")),       # two ranks, one GPU: shared; NCCL would refuse
    (2, 3, 2, ("cuda:0", "gloo")),       # round-robin
    (3, 4, 2, ("cuda:1", "gloo")),
])
def test_ranks_share_the_gpus_round_robin_when_they_outnumber_them(local_rank, local_world,
                                                                   gpus, expected):
    sys.path.insert(0, str(REPO / "scripts"))
    from ranks import rank_device
    assert rank_device(local_rank, local_world, gpus) == expected


def test_ranks_of_one_host_share_its_cores(monkeypatch):
    from imageloader.loader import default_workers
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert default_workers() == 31
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")   # set by torchrun --nproc-per-node=2
    assert default_workers() == 15
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "64")
    assert default_workers() == 1
