"""The plan and resume: every cut point of an epoch resumes into exactly the batches that were
left (same batches, order, pixels, labels and skip counts), with several readers and workers
and in this process; a checkpoint of another stream is refused, naming what differs."""
from __future__ import annotations

import gc
import random
import warnings
import weakref

import pytest
import torch

from conftest import numbered_files, solid, write_archive
from imageloader import ImageLoader, Options, index, read


@pytest.fixture
def small_regions(monkeypatch):
    # Test archives are a few MB: regions of 256 KiB give several of them.
    monkeypatch.setattr(index, "REGION_BYTES", 256 << 10)
    monkeypatch.setattr(read, "RAPIDGZIP_CHUNK", 256 << 10)


def regions_archive(path, n: int = 60) -> str:
    """numbered_files, each image followed by ~60 KB of incompressible non-image data, so that
    60 images span 8 regions (with small_regions)."""
    rng = random.Random(0)
    files = []
    for i in range(n):
        files.append((f"t/c{i % 3}/{i:03d}.png", solid(10 + 3 * i, fmt="PNG", mode="L")))
        files.append((f"t/c{i % 3}/{i:03d}.txt", rng.randbytes(60_000)))
    return write_archive(path, files, compress="rapidgzip" in read.available_inflaters())


def loader(path, **kw) -> ImageLoader:
    kw.setdefault("workers", 0)
    kw.setdefault("seed", 1)
    return ImageLoader(path, size=8, mode="L", device="cpu", normalize=False, **kw)


def copies(batches):
    return [(x.clone(), y.clone()) for x, y in batches]


def assert_same_batches(got, expected, what: str) -> None:
    assert [len(y) for _, y in got] == [len(y) for _, y in expected], what
    for i, ((a, b), (c, d)) in enumerate(zip(got, expected)):
        assert torch.equal(b, d) and torch.equal(a, c), f"{what}: batch {i} differs"


def epoch_with_every_state(make):
    """The batches of one uninterrupted epoch, its skip counts, and the state after each
    batch (and before the first)."""
    with make() as whole:
        states, batches = [whole.state_dict()], []
        for x, y in whole:
            batches.append((x.clone(), y.clone()))
            states.append(whole.state_dict())
        return batches, dict(whole.stats.skipped), states


def check_every_cut(make, fresh_cuts=()) -> None:
    """Resume at every cut point; all in one loader (as a training job that restores its
    state), and at `fresh_cuts` in a new loader too (as a restarted job)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # the skip warning of each epoch
        expected, skipped, states = epoch_with_every_state(make)
        with make() as resumed:
            for cut, state in enumerate(states):
                resumed.load_state_dict(state)
                rest = copies(resumed)
                assert_same_batches(expected[:cut] + rest, expected, f"resumed at {cut}")
                assert dict(resumed.stats.skipped) == skipped, f"skips, resumed at {cut}"
        for cut in fresh_cuts:
            with make() as again:
                again.load_state_dict(states[cut])
                assert_same_batches(expected[:cut] + copies(again), expected,
                                    f"a new loader resumed at {cut}")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("readers,workers", [(3, 3), (3, 6)])
def test_resume_with_uneven_region_readers_at_every_cut(tmp_path, small_regions, readers,
                                                        workers):
    """The case of the issue: 60 images in 8 regions, batch 8. Once, a checkpoint after 7
    batches resumed with 3 images twice and 3 never: the workers' short last batches were
    merged in an order that resume renumbered."""
    path = regions_archive(tmp_path / "a.tgz")

    def make():
        return loader(path, batch_size=8, workers=workers, options=Options(readers=readers))
    with make() as probe:
        assert len(probe.plan.parts) == 8
    check_every_cut(make, fresh_cuts=(7,))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("workers,readers,train", [(0, None, True), (4, 2, True),
                                                   (3, None, False)])
def test_resume_with_skipped_images_at_every_cut(tmp_path, workers, readers, train):
    """Decode failures shift a worker's later batches (training) or leave gaps that rows of
    later batches fill (evaluation); resume must reproduce both, and the skip counts."""
    path = write_archive(tmp_path / "a.tgz", numbered_files(45, bad={2, 11, 12, 30, 44}))

    def make():
        return loader(path, batch_size=4, workers=workers, train=train,
                      options=Options(readers=readers))
    check_every_cut(make)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_with_drop_last_and_rows_carried_over_at_every_cut(tmp_path, workers):
    path = write_archive(tmp_path / "a.tgz", numbered_files(38, bad={5, 17}))

    def make():
        return loader(path, batch_size=4, workers=workers, drop_last=True)
    check_every_cut(make)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_of_a_rank_that_repeats_its_last_batch(tmp_path, workers):
    """Rank 1 of 2 has 12 of 25 images: 3 batches and a repeat for rank 0's 4 steps. Resumed
    after its last real batch, or during the repeat, it must still take 4 steps."""
    path = write_archive(tmp_path / "a.tgz", numbered_files(25))

    def make():
        return loader(path, batch_size=4, workers=workers,
                      options=Options(rank=1, world_size=2))
    batches, _, _ = epoch_with_every_state(make)
    assert len(batches) == 4 and torch.equal(batches[3][1], batches[2][1])
    check_every_cut(make)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_checkpoint_of_another_configuration_is_refused_naming_what_differs(
        tmp_path, small_regions):
    """Saved with readers=2 and loaded with readers=3, an epoch once gave 33/28/30/29 images
    per class instead of 30 each."""
    path = regions_archive(tmp_path / "a.tgz")
    with loader(path, batch_size=8, workers=3, options=Options(readers=2)) as first:
        it = iter(first)
        next(it)
        state = first.state_dict()
    with loader(path, batch_size=8, workers=3, options=Options(readers=3)) as other:
        with pytest.raises(ValueError, match=r"readers \(checkpoint 2, now 3\)"):
            other.load_state_dict(state)
    with loader(path, batch_size=4, workers=3, seed=2, options=Options(readers=2)) as other:
        with pytest.raises(ValueError, match=r"batch_size .*seed"):
            other.load_state_dict(state)
    with loader(path, batch_size=8, workers=3, options=Options(readers=2)) as same:
        same.load_state_dict(state)  # the same stream: accepted


def test_check_resume_names_a_state_of_another_version():
    from imageloader.plan import Position, check_resume
    with pytest.raises(ValueError, match="state version 1"):
        check_resume({"seed": 0}, {"version": 1, "epoch": 3, "batches": 5})
    state = Position(2, batches=3, mark={"next": [4], "consumed": [12], "tail": 0},
                     rows=1).as_state({"seed": 0})
    check_resume({"seed": 0}, state)
    assert Position.from_state(state).as_state({"seed": 0}) == state


def test_the_plan_is_plain_data_and_outlives_nothing(tmp_path):
    """The plan's methods go to the processes and (through them) the finalizer: they must not
    keep the loader alive."""
    path = write_archive(tmp_path / "a.tgz", numbered_files(12))
    made = loader(path, batch_size=4, workers=1)
    plan = made.plan
    assert plan.order(0) == (0,) and plan.batches(0) == 3 and plan.steps(0) == 3
    next(iter(made))
    gone = weakref.ref(made)
    del made
    gc.collect()
    assert gone() is None
    assert plan.fingerprint()["batch_size"] == 4
