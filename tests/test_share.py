"""share.py: the CPU share of decode="cuda", fixed or chosen by a trial of GPU against CPU."""
from __future__ import annotations

import pytest
from conftest import Clock

from imageloader.batch import batch_layout, views_of
from imageloader.pool import BufferPool
from imageloader.share import (AUTO_CPU_LARGE, TRIAL_WARMUP, FixedShare, LargeOnCpu,
                               TrialShare, share_control)


def test_each_buffer_carries_the_share_given_when_it_was_handed_out():
    pool = BufferPool(2, 4, (8, 8, 3), arena_bytes=1000)
    first, second = pool.lease(), pool.lease()
    control = TrialShare()  # the trial changes its share between buffers
    control.share = 0.4
    control.stamp(first)
    control.share = 0.9
    control.stamp(second)
    assert first.arrays.cpu_share[0] == pytest.approx(0.4)
    assert second.arrays.cpu_share[0] == pytest.approx(0.9)
    fixed = share_control(0.25)
    fixed.stamp(first)
    assert isinstance(fixed, FixedShare) and first.arrays.cpu_share[0] == 0.25
    layout = batch_layout(4, (8, 8, 3))
    assert views_of(bytearray(layout.nbytes), layout).cpu_share.shape == (1,)


@pytest.mark.parametrize("bad", [1.5, -0.1, "half", "auto", True])
def test_a_bad_share_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="cpu_share"):
        share_control(bad)


def consume(trial: TrialShare, clock: Clock, shares: list[float], step: float) -> None:
    """The consumer takes one batch per stamped share, `step` seconds apart."""
    for share in shares:
        clock.now += step
        trial.observe(0.0, share)


@pytest.mark.parametrize("gpu_step, cpu_step, chosen", [(0.01, 0.03, 0.0), (0.05, 0.02, 1.0)])
def test_the_trial_times_each_share_by_its_own_batches_and_keeps_the_faster(
        gpu_step, cpu_step, chosen):
    clock = Clock()
    trial = TrialShare(skip=2, window=5, clock=clock)
    assert trial.share == 0.0  # GPU decoding first
    consume(trial, clock, [0.0] * 7, gpu_step)
    assert trial.share == 1.0 and trial.chosen is None  # the next buffers: CPU decoding
    # Batches stamped before the switch still arrive: they count for nobody now.
    consume(trial, clock, [0.0] * 4, gpu_step)
    consume(trial, clock, [1.0] * 6, cpu_step)
    assert trial.chosen is None
    consume(trial, clock, [1.0], cpu_step)
    assert trial.chosen == chosen and trial.share == chosen
    rates = trial.rates
    assert rates[0.0] == pytest.approx(1 / gpu_step, rel=1e-3)
    assert rates[1.0] == pytest.approx(1 / cpu_step, rel=1e-3)
    consume(trial, clock, [chosen, 1.0 - chosen] * 3, 1.0)  # decided: nothing changes it
    assert trial.share == chosen and trial.rates == rates


@pytest.mark.parametrize("cpu_step, chosen, cpu_batches", [
    (0.03, 0.0, 1 + 3),    # 3x slower: dropped after `early` intervals (skipped ones count)
    (0.011, 0.0, 2 + 5),   # within the margin: timed whole, then the faster (GPU) kept
    (0.005, 1.0, 2 + 5),   # faster: timed whole and kept
])
def test_a_clearly_slower_share_is_dropped_early(cpu_step, chosen, cpu_batches):
    clock = Clock()
    trial = TrialShare(skip=2, window=5, early=3, margin=0.2, clock=clock)
    consume(trial, clock, [0.0] * 7, 0.01)
    assert trial.share == 1.0 and trial.chosen is None
    consume(trial, clock, [1.0] * (cpu_batches - 1), cpu_step)
    assert trial.chosen is None
    consume(trial, clock, [1.0], cpu_step)
    assert trial.chosen == chosen and trial.share == chosen
    assert len(trial.early_timed[1.0]) == cpu_batches - 1  # what the CPU share cost


@pytest.mark.parametrize("cpu_faster_by, chosen", [(0.0, 0.0), (0.06, 0.0), (0.09, 0.0),
                                                    (0.12, 1.0), (0.5, 1.0)])
def test_gpu_decoding_is_kept_unless_the_cpu_fed_clearly_faster(cpu_faster_by, chosen):
    """What the trial times leans towards CPU decoding (the GPU's window comes first, in the
    model's warm-up; a CPU share falling behind is hidden by the batches it made ahead): it chose
    CPU decoding at +0.4 to +6.5% where GPU decoding then fed ResNet-50 2 to 8 points better.
    So the first share is kept unless another was faster by more than `keep_first`."""
    clock = Clock()
    trial = TrialShare(skip=2, window=5, keep_first=0.1, clock=clock)
    consume(trial, clock, [0.0] * 7, 0.01)
    consume(trial, clock, [1.0] * 7, 0.01 / (1 + cpu_faster_by))
    assert trial.chosen == chosen and trial.share == chosen
    assert trial.rates[1.0] == pytest.approx(100 * (1 + cpu_faster_by), rel=1e-3)


def test_a_share_dropped_early_is_not_chosen_for_a_fast_steady_interval():
    clock = Clock()
    trial = TrialShare(skip=2, window=5, early=3, margin=0.2, clock=clock)
    consume(trial, clock, [0.0] * 7, 0.01)
    consume(trial, clock, [1.0], 0.5)     # the run's first: waited for the pipeline
    consume(trial, clock, [1.0], 0.06)    # left out of the steady ones, not of the early
    consume(trial, clock, [1.0] * 2, 0.001)  # two steady intervals, faster than the GPU's
    assert trial.rates[1.0] > trial.rates[0.0]
    assert trial.chosen == 0.0  # the three since the run's first: clearly slower


def test_a_share_timed_whole_is_judged_by_its_steady_rate_not_the_warm_up_of_training():
    """The first share (GPU decoding) starts with training itself: its early intervals hold
    the model's first steps (cuDNN's autotuning, allocations: seconds each). Judged on them
    against the CPU's whole window, it was dropped after both were timed whole, and CPU
    decoding kept at 16.86 batches/s against the GPU's 17.05; with 2 GPUs at 13.59 against
    16.83 (ResNet-50 on ImageNet-like, 2 x H200, 2026-11-26)."""
    clock = Clock()
    trial = TrialShare(skip=4, window=6, early=3, margin=0.2, clock=clock)
    consume(trial, clock, [0.0] * 3, 2.0)        # training warms up
    consume(trial, clock, [0.0] * 8, 1 / 17.05)
    assert trial.share == 1.0
    consume(trial, clock, [1.0] * 11, 1 / 16.86)
    assert trial.chosen == 0.0
    assert trial.rates[0.0] > trial.rates[1.0]


def test_a_share_is_not_dropped_for_the_wait_of_its_first_batch():
    """The first batch of a new share waits for the pipeline (its decode began one step
    before); the ones after it were started meanwhile. Judged on that first wait, a share
    that keeps up would be dropped."""
    clock = Clock()
    trial = TrialShare(skip=4, window=5, early=3, margin=0.2, clock=clock)
    consume(trial, clock, [0.0] * 9, 0.01)
    assert trial.share == 1.0
    consume(trial, clock, [1.0], 0.2)          # 20 steps' wait for the first CPU batch
    consume(trial, clock, [1.0] * 3, 0.009)
    assert trial.chosen is None                 # not dropped: it may yet win
    consume(trial, clock, [1.0] * 5, 0.009)
    assert trial.chosen == 1.0


def test_the_first_batches_after_a_change_of_share_are_not_timed_however_fast():
    """After the switch the CPU batches decoded while GPU batches were still taken arrive at
    once (as many as the loader has buffers); then the CPU's own pace shows. Only that pace
    may count: timed, the early ones made CPU decoding the winner (2 x H200, 2026-11-26)."""
    clock, in_flight = Clock(), 6
    trial = TrialShare(skip=in_flight, window=5, clock=clock)
    consume(trial, clock, [0.0] * (in_flight + 5), 0.01)
    assert trial.share == 1.0
    consume(trial, clock, [1.0] * in_flight, 0.0001)  # decoded ahead: no wait at all
    consume(trial, clock, [1.0] * 5, 0.012)           # then the CPU's pace: slower
    assert trial.chosen == 0.0
    assert trial.rates[1.0] == pytest.approx(1 / 0.012, rel=1e-3)


def test_an_epoch_starts_the_count_again_and_the_gap_between_epochs_is_no_step():
    clock = Clock()
    trial = TrialShare(skip=2, window=6, clock=clock)
    consume(trial, clock, [0.0] * 5, 0.01)  # 3 timed
    trial.start_epoch()
    clock.now += 100.0                      # validation, a checkpoint: not a training step
    consume(trial, clock, [0.0] * 2, 0.5)   # the new epoch's pipeline fills: not timed
    assert len(trial.timed[0.0]) == 3
    consume(trial, clock, [0.0] * 3, 0.01)
    assert trial.share == 1.0 and trial.rates[0.0] == pytest.approx(100, rel=1e-3)


def test_short_epochs_still_end_the_trial():
    """Each epoch starts the skip again: with epochs just longer than `skip`, a few steady
    intervals come from each, and the window fills over several epochs."""
    clock = Clock()
    trial = TrialShare(skip=4, window=6, early=3, clock=clock)
    for _ in range(20):
        trial.start_epoch()
        clock.now += 10.0
        share = trial.share
        consume(trial, clock, [share] * 6, 0.01 if share == 0.0 else 0.011)
        if trial.chosen is not None:
            break
    assert trial.chosen == 0.0
    assert len(trial.timed[0.0]) == len(trial.timed[1.0]) == 6


def test_nothing_is_timed_while_training_warms_up():
    """The first share's window starts after `warmup` batches of all epochs together: timed in
    the warm-up, GPU decoding fed ResNet-50 11.97 batches/s where it fed 16.8 later, and a CPU
    bound of 10.9 earned the CPU a turn that cost the second epoch a third of its rate (2 x
    H200, 2026-11-29)."""
    clock = Clock()
    trial = TrialShare(skip=2, window=5, warmup=10, clock=clock)
    consume(trial, clock, [0.0] * 6, 0.05)   # slow warm-up steps: a first epoch
    trial.start_epoch()
    clock.now += 10.0
    consume(trial, clock, [0.0] * 4, 0.05)   # the 10th batch: still warming up
    assert trial.timed[0.0] == [] and trial.share == 0.0
    consume(trial, clock, [0.0] * 5, 0.01)   # its run is past the skip: timed at once
    assert trial.share == 1.0 and trial.rates[0.0] == pytest.approx(100, rel=1e-3)


def test_the_loader_skips_as_many_batches_as_it_has_buffers():
    assert share_control(None, trial=True, in_flight=22).skip == 22
    assert FixedShare(0.0).start_epoch() is None  # a fixed share has nothing to restart


def test_cpu_share_none_means_zero_unless_the_loader_chose_the_decode():
    assert type(share_control(None)) is FixedShare and share_control(None).share == 0.0
    assert isinstance(share_control(None, trial=True), TrialShare)
    assert share_control(0.5, trial=True).share == 0.5
    with pytest.raises(ValueError, match="cpu_share"):
        share_control(1.5)


def packer_answers(buf, seconds_per_image: float) -> None:
    """What a packer writes back into a buffer it was asked to probe (decode.JpegPacker)."""
    asked = int(buf.arrays.cpu_probe[0])
    buf.arrays.cpu_probe[1:] = (asked * seconds_per_image, asked)


@pytest.mark.parametrize("seconds_per_image, tried", [
    (0.01, False),     # at most 50 batches a second against the GPU's 100: no CPU turn
    (0.0059, False),   # at most 84.7 (ResNet-50 on 500x375 images: 17.0 against 17.6-17.9)
    (0.00501, False),  # at most 99.8
    (0.0049, False),   # 102: even at its bound it would not be 10% faster (keep_first)
    (0.0045, True),    # 111: at its bound it would win
    (0.001, True)])    # 500: tried
def test_a_cpu_share_that_cannot_win_is_not_tried(seconds_per_image, tried):
    """4 packers, batches of 8, the GPU's share fed 100 batches a second. A CPU bound under
    110 (what it must feed to be chosen) ends the trial without a CPU turn."""
    clock = Clock()
    pool = BufferPool(3, 8, (8, 8, 3), arena_bytes=100)
    buffers = [pool.lease() for _ in range(3)]
    trial = TrialShare(skip=2, window=5, clock=clock, decoders=4, batch_size=8, probes=2,
                       min_probes=4)
    for k in range(7):  # the GPU's window: buffers go round, each answered before reuse
        buf = buffers[k % 3]
        trial.stamp(buf)
        assert buf.arrays.cpu_share[0] == 0.0 and buf.arrays.cpu_probe[0] == 2
        packer_answers(buf, seconds_per_image)
        consume(trial, clock, [0.0], 0.01)
    assert trial.cpu_bound == pytest.approx(4 / seconds_per_image / 8, rel=1e-3)
    if tried:
        assert trial.chosen is None and trial.share == 1.0
        return
    assert trial.chosen == 0.0 and trial.share == 0.0 and set(trial.rates) == {0.0}
    trial.stamp(buffers[0])  # decided: no more probes
    assert buffers[0].arrays.cpu_probe.tolist() == [0, 0, 0]


def test_probes_stop_once_enough_are_timed_and_make_no_bound_before():
    pool = BufferPool(1, 8, (8, 8, 3), arena_bytes=100)
    buf = pool.lease()
    trial = TrialShare(decoders=2, batch_size=8, probes=3, probe_images=6, min_probes=4)
    trial.stamp(buf)
    packer_answers(buf, 0.002)
    trial.stamp(buf)  # 3 timed: fewer than min_probes
    assert trial.cpu_bound is None and buf.arrays.cpu_probe[0] == 3
    packer_answers(buf, 0.002)
    trial.stamp(buf)  # 6 timed: enough
    assert buf.arrays.cpu_probe.tolist() == [0, 0, 0]
    assert trial.cpu_bound == pytest.approx(2 / 0.002 / 8)
    trial.stamp(buf)  # an answer is read once
    assert trial.cpu_bound == pytest.approx(2 / 0.002 / 8)
    no_packers = TrialShare(batch_size=8)  # decoding in the loader's own process: no probes
    no_packers.stamp(buf)
    assert buf.arrays.cpu_probe[0] == 0 and no_packers.cpu_bound is None
    buf.arrays.cpu_probe[0] = 5
    FixedShare(0.0).stamp(buf)  # a buffer a trial asked: a fixed share asks nothing
    assert buf.arrays.cpu_probe.tolist() == [0, 0, 0]


def test_the_loader_gives_the_trial_its_packers_and_batch_size():
    trial = share_control(None, trial=True, in_flight=22, decoders=16, batch_size=256)
    assert (trial.skip, trial.decoders, trial.batch_size) == (22, 16, 256)
    assert trial.warmup == TRIAL_WARMUP > trial.skip


def steps(large: LargeOnCpu, n: int, *, wait: float = 0.0, behind: bool | None = True,
          interval: float = 0.05) -> None:
    """`n` steady steps of the consumer: `interval` s apart, `wait` of it waiting, its GPU
    half a step behind its host or only a 20th (None: not known)."""
    lag = None if behind is None else interval * (0.5 if behind else 0.05)
    for _ in range(n):
        large.observe(interval, wait * interval, lag)


def test_large_jpegs_go_to_the_cpu_only_where_the_gpu_runs_behind_and_batches_are_ready():
    gpu_bound = LargeOnCpu(pixels=1000, window=4)
    steps(gpu_bound, 3)
    assert gpu_bound.state == "watching" and gpu_bound.cpu_pixels == 0  # a window first
    steps(gpu_bound, 1, wait=0.02)
    assert gpu_bound.state == "on" and gpu_bound.cpu_pixels == 1000
    waits = LargeOnCpu(pixels=1000, window=4)   # ResNet-18 on photos: waits for its batches
    steps(waits, 4, wait=0.25)
    assert waits.state == "off" and waits.cpu_pixels == 0 and not waits.watching
    steps(waits, 8)                             # off is for good
    assert waits.state == "off"
    host_bound = LargeOnCpu(pixels=1000, window=10)  # the GPU catches up with the host
    for lag in [0.02] * 8 + [0.001] * 2:       # 50 ms steps: 20 ms behind, then 1 ms
        host_bound.observe(0.05, 0.0, lag)
    assert host_bound.state == "off"
    unknown = LargeOnCpu(window=4)             # a step the lag was not asked for
    steps(unknown, 8, behind=None)
    assert unknown.state == "watching"


def test_large_jpegs_come_back_to_the_gpu_for_good_when_the_cores_fall_behind(caplog):
    large = LargeOnCpu(pixels=1000, window=4, give_up_wait=0.08, still_behind=0.5)
    with caplog.at_level("INFO", logger="imageloader.share"):
        steps(large, 4)
        steps(large, 4, wait=0.05)              # within what it allows
        assert large.state == "on"
        steps(large, 4, wait=0.1)               # the packers no longer keep up
        assert large.state == "off"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "by the workers" in said[0] and "by the GPU" in said[1]
    assert "10.0% of the time waiting" in said[1]  # what decided it, in the log
    steps(large, 8)
    assert large.state == "off" and large.cpu_pixels == 0
    stops_lagging = LargeOnCpu(pixels=1000, window=4)
    steps(stops_lagging, 4)
    steps(stops_lagging, 4, behind=False)       # the host now waits on the GPU no more
    assert stops_lagging.state == "off"


def test_the_trial_watches_the_steps_once_it_kept_gpu_decoding_and_stamps_the_threshold():
    clock = Clock()
    trial = TrialShare(skip=2, window=5, clock=clock)
    trial.large = LargeOnCpu(pixels=AUTO_CPU_LARGE, window=4)
    assert not trial.watches_steps and trial.cpu_large == 0  # not while the trial runs
    consume(trial, clock, [0.0] * 7, 0.01)
    consume(trial, clock, [0.0] * 4, 0.01)
    consume(trial, clock, [1.0] * 10, 0.05)
    assert trial.chosen == 0.0 and trial.watches_steps
    for _ in range(4):                          # steady steps of a GPU-bound model
        clock.now += 0.05
        trial.observe(0.0, 0.0, 0.03)
    assert trial.cpu_large == AUTO_CPU_LARGE
    pool = BufferPool(1, 4, (8, 8, 3), arena_bytes=1000)
    buf = pool.lease()
    trial.stamp(buf)
    assert buf.arrays.cpu_pixels[0] == AUTO_CPU_LARGE and buf.arrays.cpu_share[0] == 0.0
    FixedShare(0.0).stamp(buf)                  # a buffer handed on by a fixed share
    assert buf.arrays.cpu_pixels[0] == 0


def test_an_epochs_first_batches_are_not_steady_steps_for_the_large_jpegs():
    clock = Clock()
    trial = TrialShare(skip=3, window=5, clock=clock)
    trial.chosen = 0.0                          # GPU decoding kept
    trial.large = LargeOnCpu(window=2)
    trial.start_epoch()
    for _ in range(3):                          # the burst after the gap: not counted
        clock.now += 0.001
        trial.observe(0.0, 0.0, 0.0)
    assert trial.large.state == "watching"
    for _ in range(2):
        clock.now += 0.05
        trial.observe(0.0, 0.0, 0.03)
    assert trial.large.state == "on"


def test_a_cpu_trial_that_won_watches_no_steps():
    clock = Clock()
    trial = TrialShare(skip=2, window=5, clock=clock)
    consume(trial, clock, [0.0] * 7, 0.05)
    consume(trial, clock, [0.0] * 4, 0.05)
    consume(trial, clock, [1.0] * 8, 0.01)
    assert trial.chosen == 1.0 and not trial.watches_steps and trial.cpu_large == 0


def test_a_threshold_the_user_gave_stands_alone():
    """Options.cpu_large set: the trial never sends other JPEGs to the packers."""
    assert share_control(None, trial=True).large.watching
    trial = share_control(None, trial=True, large=False)
    trial.chosen = 0.0                          # GPU decoding kept
    assert not trial.watches_steps and trial.large.state == "off"
    steps(trial.large, 64)                      # a GPU-bound model's steps
    assert trial.cpu_large == 0
