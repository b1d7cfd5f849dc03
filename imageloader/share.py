"""The CPU share of decode="cuda": which part of each batch the packers decode on the CPU, fixed,
chosen by a trial at the start (decode="auto"), or steered while training by the machine's idle
cores and the consumer's waits.

Why a share at all: with decode="cuda" nvJPEG's colour conversion and our crops run on the GPU
beside the model (~1 ms of a 55 ms ResNet-50 step on an H200). A model that keeps the GPU busy
loses that time, while the host's cores sit mostly idle: there, images the packers decode on
the CPU cost the GPU nothing. A model that the CPUs cannot feed (ResNet-18) needs every core for
reading, and loses at once when the packers decode (3-6 points at a share of 0.15 on the H200
host). So the share rises only while at least half of the cores are idle
and the consumer does not wait for batches, and falls as soon as either stops being true.

The parent decides; each batch buffer carries its share (batch.py's `cpu_share` field), written
when the buffer is handed to a packer, so packers read no shared state while they work.
"""
from __future__ import annotations

import os
import time
from collections import deque


class FixedShare:
    """The same share for every batch (Options.cpu_share as a number)."""

    def __init__(self, share: float):
        check_share(share)
        self.share = float(share)

    def stamp(self, buf) -> None:
        buf.arrays.cpu_share[0] = self.share

    def observe(self, wait_s: float, share: float | None = None) -> None:
        """One batch, stamped with `share`, reached the consumer after it waited `wait_s`."""

    @property
    def rates(self) -> dict:
        return {}


class TrialShare(FixedShare):
    """decode="auto": while training, decode on the GPU (share 0) and on the CPU (share 1) in
    turn, then keep whichever fed the consumer more batches per second.

    Which is faster depends on the model, the images and the host: ResNet-18 on an H200 is fed
    at ~95% of its data-on-GPU rate by GPU decoding and ~40% by 15 cores; ResNet-50, which
    keeps the GPU busy, lost ~2% to GPU decoding's kernels where 15 cores kept up, and lost
    12-15% where they did not (varied photos) (README, FACTS). So each share is measured here,
    on this model and host: batches reach the consumer in order, each carrying the share it
    was stamped with, so a share's rate is taken from its own batches only; the first `skip`
    of each are left out (the pipeline still holds batches of the other share), then `window`
    consecutive batch intervals are timed. The interval of a batch is the consumer's whole
    step: its training work and its wait for the batch."""

    def __init__(self, shares: tuple[float, ...] = (0.0, 1.0), skip: int = 8, window: int = 24,
                 clock=time.perf_counter):
        super().__init__(shares[0])
        self.clock = clock
        self.shares, self.skip, self.window = tuple(shares), skip, window
        self.seen = {s: 0 for s in self.shares}     # batches of each share consumed
        self.timed = {s: [] for s in self.shares}   # their intervals, after `skip`
        self.chosen: float | None = None
        self._last: float | None = None

    def observe(self, wait_s: float, share: float | None = None) -> None:
        now = self.clock()
        last, self._last = self._last, now
        if self.chosen is not None or share not in self.seen:
            return
        self.seen[share] += 1
        if last is not None and self.seen[share] > self.skip \
                and len(self.timed[share]) < self.window:
            self.timed[share].append(now - last)
        self._next_phase()

    def _next_phase(self) -> None:
        pending = [s for s in self.shares if len(self.timed[s]) < self.window]
        if pending:
            self.share = pending[0]  # stamped on the next buffers handed to the packers
            return
        rates = self.rates
        self.chosen = self.share = max(self.shares, key=lambda s: rates[s])

    @property
    def rates(self) -> dict:
        """Batches per second the consumer took with each share (measured so far)."""
        return {s: round(len(t) / sum(t), 3) for s, t in self.timed.items() if t}


class AdaptiveShare(FixedShare):
    """Options.cpu_share="auto": every `interval` seconds (and `batches` consumed batches at
    least), one step up while at least `idle_fraction` of the cores were idle and the consumer
    waited under `max_wait` of the time; a step down when fewer cores were idle (with one core
    of hysteresis); two steps down when the consumer waited more.

    The idle cores answer within a batch (packers start on a new share at once); waits answer
    only once the buffers stamped before have been consumed, hence two steps down for them."""

    def __init__(self, *, interval: float = 0.5, batches: int = 2, step: float = 0.1,
                 idle_fraction: float = 0.5, max_wait: float = 0.05, limit: float = 1.0,
                 idle=None):
        super().__init__(0.0)
        self.interval, self.batches, self.step, self.limit = interval, batches, step, limit
        self.idle_fraction, self.max_wait = idle_fraction, max_wait
        self.idle = idle if idle is not None else IdleCores()
        self.history: deque = deque(maxlen=256)  # (share, idle cores, wait fraction) per window
        self._count, self._wait = 0, 0.0
        self._since = time.perf_counter()

    def observe(self, wait_s: float, share: float | None = None) -> None:
        """One batch reached the consumer after it waited `wait_s` for it."""
        self._count += 1
        self._wait += wait_s
        now = time.perf_counter()
        if self._count >= self.batches and now - self._since >= self.interval:
            self.decide(self._wait / (now - self._since), self.idle.sample())
            self._count, self._wait, self._since = 0, 0.0, now

    def decide(self, wait: float, idle: float | None) -> None:
        """The next share from one window's wait fraction and idle cores (None: unknown)."""
        cores = self.idle.cores
        if wait > self.max_wait:
            change = -2 * self.step
        elif idle is None:
            change = 0.0  # cannot tell whether decoding on the CPU would be free: do not
        elif idle >= self.idle_fraction * cores:
            change = self.step
        elif idle < self.idle_fraction * cores - 1:
            change = -self.step
        else:
            change = 0.0
        self.share = round(min(self.limit, max(0.0, self.share + change)), 6)
        self.history.append((self.share, idle, wait))


class IdleCores:
    """Idle cores among those this process may run on, between two calls, from /proc/stat
    (Linux; elsewhere `sample()` returns None and an adaptive share stays where it is)."""

    def __init__(self, path: str = "/proc/stat"):
        self.path = path
        self.cpus = {f"cpu{i}" for i in _allowed_cpus()}
        self.cores = len(self.cpus)
        self._last = self._read()

    def _read(self) -> dict | None:
        try:
            with open(self.path) as stat:
                lines = stat.read().splitlines()
        except OSError:
            return None
        times = {}
        for line in lines:
            name, *fields = line.split()
            if name in self.cpus:
                ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq ...
                times[name] = (ticks[3] + ticks[4], sum(ticks))
        return times or None

    def sample(self) -> float | None:
        now = self._read()
        last, self._last = self._last, now
        if now is None or last is None:
            return None
        idle = 0.0
        for cpu, (idle_ticks, total) in now.items():
            if cpu in last and total > last[cpu][1]:
                idle += (idle_ticks - last[cpu][0]) / (total - last[cpu][1])
        return idle


def _allowed_cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def check_share(cpu_share) -> None:
    """Options.cpu_share must be None, a number in [0, 1] or "auto"."""
    if cpu_share is None or cpu_share == "auto":
        return
    if isinstance(cpu_share, (str, bool)) or not 0.0 <= cpu_share <= 1.0:
        raise ValueError(f"cpu_share must be within [0, 1] or 'auto', got {cpu_share!r}")


def share_control(cpu_share, trial: bool = False) -> FixedShare:
    """The controller for Options.cpu_share; None: a trial of GPU against CPU decoding where
    the loader chose the decode itself (decode="auto"), else share 0."""
    check_share(cpu_share)
    if cpu_share is None:
        return TrialShare() if trial else FixedShare(0.0)
    return AdaptiveShare() if cpu_share == "auto" else FixedShare(cpu_share)
