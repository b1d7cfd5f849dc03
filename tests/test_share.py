"""share.py: the CPU share of decode="cuda", fixed or steered by idle cores and waits."""
from __future__ import annotations

import pytest

from imageloader.batch import batch_layout, views_of
from imageloader.pool import BufferPool
from imageloader.share import AdaptiveShare, FixedShare, IdleCores, TrialShare, share_control


class FakeIdle:
    """Idle cores as the test says, on a machine of `cores` cores."""

    def __init__(self, cores: int, idle: float | None = None):
        self.cores, self.idle = cores, idle

    def sample(self):
        return self.idle


def stat_file(path, rows: dict[str, tuple[int, int, int]]):
    """A /proc/stat with (busy, idle, iowait) ticks per cpu line."""
    lines = ["cpu  1 2 3 4 5 6 7 8 0 0"]
    lines += [f"{cpu} {busy} 0 0 {idle} {iowait} 0 0 0 0 0"
              for cpu, (busy, idle, iowait) in rows.items()]
    path.write_text("\n".join(lines + ["intr 12345", "ctxt 99"]) + "\n")


def test_idle_cores_come_from_the_idle_and_iowait_ticks_of_each_allowed_cpu(tmp_path):
    stat = tmp_path / "stat"
    stat_file(stat, {"cpu0": (100, 100, 0), "cpu1": (100, 100, 0), "cpu7": (0, 0, 0)})
    idle = IdleCores(str(stat))
    idle.cpus, idle.cores = {"cpu0", "cpu1"}, 2  # cpu7 is not ours
    idle._last = idle._read()
    # cpu0: 75 of 100 new ticks idle (50 idle + 25 iowait); cpu1: 10 of 100; cpu7 ignored.
    stat_file(stat, {"cpu0": (125, 150, 25), "cpu1": (190, 110, 0), "cpu7": (0, 500, 0)})
    assert idle.sample() == pytest.approx(0.85)
    assert idle.sample() == 0.0  # no ticks since: nothing counted


def test_idle_cores_are_unknown_without_proc_stat(tmp_path):
    idle = IdleCores(str(tmp_path / "missing"))
    assert idle.sample() is None and idle.cores >= 1


def test_the_share_rises_only_while_half_the_cores_idle_and_the_consumer_does_not_wait():
    control = AdaptiveShare(step=0.1, idle=FakeIdle(16))
    for _ in range(3):
        control.decide(wait=0.0, idle=9.0)
    assert control.share == pytest.approx(0.3)
    control.decide(wait=0.0, idle=7.5)   # within one core of half: hold
    assert control.share == pytest.approx(0.3)
    control.decide(wait=0.0, idle=6.0)   # the packers took the idle cores: back off
    assert control.share == pytest.approx(0.2)
    control.decide(wait=0.2, idle=15.0)  # the consumer waited: two steps down
    assert control.share == 0.0
    control.decide(wait=0.2, idle=15.0)
    assert control.share == 0.0          # never below 0
    control.decide(wait=0.0, idle=None)  # unknown idle: hold
    assert control.share == 0.0
    assert [round(s, 2) for s, _, _ in control.history] == [0.1, 0.2, 0.3, 0.3, 0.2, 0, 0, 0]


def test_the_share_never_exceeds_its_limit():
    control = AdaptiveShare(step=0.4, limit=1.0, idle=FakeIdle(2))
    for _ in range(5):
        control.decide(wait=0.0, idle=2.0)
    assert control.share == 1.0


def test_the_share_is_decided_once_per_window_of_consumed_batches():
    idle = FakeIdle(4, idle=4.0)
    control = AdaptiveShare(interval=0.0, batches=3, step=0.25, idle=idle)
    for _ in range(5):
        control.observe(0.0)
    assert control.share == 0.25 and len(control.history) == 1
    control.observe(0.0)
    assert control.share == 0.5
    for _ in range(3):
        control.observe(10.0)  # waited far longer than the window lasted
    assert control.share == 0.0
    slow = AdaptiveShare(interval=3600.0, batches=1, idle=idle)
    for _ in range(10):
        slow.observe(0.0)
    assert slow.share == 0.0 and not slow.history  # an hour has not passed


def test_each_buffer_carries_the_share_given_when_it_was_handed_out():
    pool = BufferPool(2, 4, (8, 8, 3), arena_bytes=1000)
    first, second = pool.lease(), pool.lease()
    control = share_control("auto")
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


@pytest.mark.parametrize("bad", [1.5, -0.1, "half", True])
def test_a_bad_share_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="cpu_share"):
        share_control(bad)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


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


def test_cpu_share_none_means_zero_unless_the_loader_chose_the_decode():
    assert type(share_control(None)) is FixedShare and share_control(None).share == 0.0
    assert isinstance(share_control(None, trial=True), TrialShare)
    assert isinstance(share_control("auto", trial=True), AdaptiveShare)  # the user's word
    assert share_control(0.5, trial=True).share == 0.5
    with pytest.raises(ValueError, match="cpu_share"):
        share_control(1.5)
