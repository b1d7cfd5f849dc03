"""The CPU share of decode="cuda": which part of each batch the packers decode on the CPU, fixed
(Options.cpu_share) or chosen by a trial at the start of training (decode="auto").

Why a share at all: with decode="cuda" the GPU decoder's colour conversion and our crops run on
the GPU beside the model (~1 ms of a 55 ms ResNet-50 step on an H200). A model that keeps the GPU
busy loses that time, while the host's cores sit mostly idle: there, images the packers decode
on the CPU cost the GPU nothing. A model that the CPUs cannot feed (ResNet-18) needs every core
for reading, and loses at once when the packers decode (3-6 points at a share of 0.15 on the
H200 host). Which way wins depends on the model, the images and the host, so decode="auto"
measures it (TrialShare). A share steered while training by idle cores and waits measured
within noise of a fixed one and is gone (scripts/bench/README.md).

Once GPU decoding is kept, a model that keeps the GPU busy gets one more part taken off it: the
largest JPEGs, which the packers decode at a reduced scale (LargeOnCpu). ResNet-50 on photos
gained 1.1-1.5 points from it where ResNet-18, host-bound, lost 3.6, so it is switched on by
what the consumer's steps show, not by a rule about images.

The parent decides; each batch buffer carries its share and threshold (batch.py's `cpu_share`,
`cpu_pixels`), written when the buffer is handed to a packer, so packers read no shared state
while they work.
"""
from __future__ import annotations

import logging
import time

# Batches of training the trial lets pass before it times anything (TrialShare's `warmup`):
# the whole first epoch of the benchmarks (60 steps of 256 images, slow throughout on photos),
# a few seconds of a real epoch's thousands of steps.
TRIAL_WARMUP = 64

# decode="auto", a GPU-bound consumer: JPEGs of at least this many pixels go to the packers
# (LargeOnCpu). On an H200 with photos of 250-2,600 px, ResNet-50 on a priority -1 stream was
# fed 97.9 / 98.0% of its data-on-GPU rate with 2 MP, 96.8 / 96.8% without (interleaved;
# scripts/bench/README.md).
AUTO_CPU_LARGE = 2_000_000

log = logging.getLogger(__name__)


class FixedShare:
    """The same share for every batch (Options.cpu_share as a number)."""

    def __init__(self, share: float):
        check_share(share)
        self.share = float(share)

    def stamp(self, buf) -> None:
        buf.arrays.cpu_share[0] = self.share
        buf.arrays.cpu_probe[:] = 0  # a buffer a trial used asks for no probe any more
        buf.arrays.cpu_pixels[0] = 0

    @property
    def watches_steps(self) -> bool:
        """Does `observe` want to know whether the consumer's GPU runs behind its host?"""
        return False

    @property
    def cpu_large(self) -> int:
        """Pixels from which the packers decode a JPEG on the CPU besides Options.cpu_large
        (0: none)."""
        return 0

    def observe(self, wait_s: float, share: float | None = None,
                lag: float | None = None) -> None:
        """One batch, stamped with `share`, reached the consumer after it waited `wait_s`;
        `lag`: seconds the consumer's GPU ran behind its host at a recent step (None: not
        asked, not known yet, or no GPU)."""

    def start_epoch(self) -> None:
        """An epoch's first batch comes next (its pipeline starts empty)."""

    @property
    def rates(self) -> dict:
        return {}

    @property
    def cpu_bound(self) -> float | None:
        return None


class TrialShare(FixedShare):
    """decode="auto": while training, decode on the GPU (share 0) and on the CPU (share 1) in
    turn, then keep whichever fed the consumer more batches per second.

    Which is faster depends on the model, the images and the host: ResNet-18 on an H200 is fed
    at ~95% of its data-on-GPU rate by GPU decoding and ~40% by 15 cores; ResNet-50, which
    keeps the GPU busy, lost ~2% to GPU decoding's kernels where 15 cores kept up, and lost
    12-15% where they did not (varied photos) (README, FACTS). So each share is measured here,
    on this model and host: batches reach the consumer in order, each carrying the share it
    was stamped with, so a share's rate is taken from its own batches only. The interval of a
    batch is the consumer's whole step: its training work and its wait for the batch.

    Only steady batches are timed: of each run of one share's batches within an epoch, the
    first `skip` are left out. `skip` must be at least the batches in flight (the loader passes
    its buffer count): when the share changes, every buffer in flight was stamped before, and
    the first batches of the new share were decoded while the consumer still took the old
    share's, so they arrive early. Timed, they made CPU decoding look as fast as the GPU's for
    ResNet-50 on photos (16.4 against 16.3 batches/s; it then fed 12.5: 2 x H200 run,
    2026-11-26). An epoch's start is such a change too (the pipeline starts empty, then
    arrives in a burst), and the gap between epochs (validation, checkpoints) is no step.
    Epochs of at most `skip` batches time nothing: decoding stays on the GPU, the first share.

    A share that is clearly slower (by more than `margin` against one measured whole) is
    dropped as soon as it has `early` intervals, skipped ones included: the trial is paid in
    training time, and ResNet-18 fed by the CPU ran at ~half speed for the whole window (H100
    host, 2026-11-25 run). The skipped batches may judge a share slower because they can only
    make it look faster: all but the first of a run were started before it (the first, which
    waited for the pipeline, is left out).

    Nothing is timed before training has taken `warmup` batches (all epochs together): the
    first share would be timed in the model's and the loader's warm-up, and judged by it. On
    varied photos the loader alone ran the 2nd-5th tenths of its first epoch at 9,191-11,488
    img/s, later epochs at 11,408-12,328, and ResNet-50 on 2 GPUs (graphed steps) waited for
    20-32% of its first epoch's steps: GPU decoding timed there fed 11.97 batches/s, where it
    fed 16.8 later, so a CPU bound of 10.9 looked as if it could win, and the CPU's turn held
    the second epoch to 5,479 img/s (the third: 8,583) before GPU decoding was kept
    (results/2026-11-29-h200-trial).

    A share that cannot win is not run at all: while the first share runs, its packers time a
    few images each through the CPU path (`stamp` asks, the packer answers in the buffer),
    which bounds what CPU decoding could feed (`cpu_bound`). Where that bound is not
    `keep_first` faster than the first share fed, the CPU's turn would only cost: with the
    loader alone on photos it held the first epoch to 5,510 img/s past its first batch
    against 13,394 steady (results/2026-11-28-h200-sidestream).

    The first share (GPU decoding) is kept unless another fed the consumer more than
    `keep_first` faster. What the trial times leans towards CPU decoding: the GPU's window comes
    first, where training may still be warming up (the figures below were timed before
    `warmup` existed), and a CPU share that cannot quite keep up is hidden for a while by the
    batches it made ahead (up to the loader's buffers: a window of 24 steps
    does not see one 20% short). And it times no epoch start, where CPU decoding begins with a
    whole batch's decode per packer. ResNet-50 on 500x375 images, H200 hosts: the trial chose
    CPU decoding at +0.4%, +2.3% and +6.5% and it then fed 90.8%, 89.3% and 95.6% of the
    data-on-GPU rate, where GPU decoding fed 97.1-97.9% (scripts/bench/README.md)."""

    def __init__(self, shares: tuple[float, ...] = (0.0, 1.0), skip: int = 8, window: int = 24,
                 early: int = 8, margin: float = 0.2, keep_first: float = 0.1,
                 clock=time.perf_counter, *, decoders: int = 0, batch_size: int = 0,
                 probes: int = 2, probe_images: int = 64, min_probes: int = 16,
                 warmup: int = 0, large: bool = True):
        super().__init__(shares[0])
        self.clock = clock
        self.shares, self.skip, self.window = tuple(shares), skip, window
        self.warmup, self._taken = warmup, 0  # batches untimed at the start; taken so far
        self.early, self.margin, self.keep_first = early, margin, keep_first
        # The CPU's bound (cpu_bound): `decoders` packers fill batches of `batch_size`; each
        # batch handed out while the trial runs asks its packer to time `probes` images
        # through the CPU path, until `probe_images` are timed; `min_probes` make a bound.
        self.decoders, self.batch_size = decoders, batch_size
        self.probes, self.probe_images, self.min_probes = probes, probe_images, min_probes
        self._probed = (0.0, 0)  # (seconds, images) timed so far; one tuple: read by another
                                 # thread than the one that writes it
        self.timed = {s: [] for s in self.shares}   # steady intervals of each share's batches
        self.early_timed = {s: [] for s in self.shares}  # and every one but a run's first
        self.chosen: float | None = None
        self._last: float | None = None            # when the last batch of this epoch came
        self._run: tuple = (None, 0)               # (share, its batches in a row this epoch)
        self._in_epoch = 0                         # batches of this epoch so far
        # Once GPU decoding is kept; not `large`: Options.cpu_large was given, and the user's
        # threshold stands alone.
        self.large = LargeOnCpu(enabled=large)

    def start_epoch(self) -> None:
        self._last, self._run, self._in_epoch = None, (None, 0), 0

    @property
    def watches_steps(self) -> bool:
        return self.chosen == self.shares[0] and self.large.watching

    @property
    def cpu_large(self) -> int:
        return self.large.cpu_pixels

    def stamp(self, buf) -> None:
        """Before a buffer is filled again: take what its last packer timed (its batch was
        consumed and released), then give it the share and the images to time now."""
        probe = buf.arrays.cpu_probe
        if probe[2] > 0:
            seconds, images = self._probed
            self._probed = (seconds + float(probe[1]), images + int(probe[2]))
        buf.arrays.cpu_share[0] = self.share
        buf.arrays.cpu_pixels[0] = self.cpu_large
        wanted = self.chosen is None and self.decoders > 0 and \
            self._probed[1] < self.probe_images
        probe[:] = (self.probes if wanted else 0, 0, 0)

    @property
    def cpu_bound(self) -> float | None:
        """The most batches a second that CPU decoding could feed: every packer decoding
        without a pause at the CPU time the images it timed took (None until `min_probes`
        were). A bound, not an estimate: a process decodes at most one CPU second a second,
        15 processes that all decode reach ~60% of 15 times one's rate on the GPU hosts
        (scripts/bench/README.md), and reading and the rest of the CPU path come on top."""
        seconds, images = self._probed
        if images < self.min_probes or seconds <= 0 or self.batch_size < 1:
            return None
        return round(self.decoders * images / seconds / self.batch_size, 3)

    def observe(self, wait_s: float, share: float | None = None,
                lag: float | None = None) -> None:
        now = self.clock()
        last, self._last = self._last, now
        self._taken += 1
        self._in_epoch += 1
        if self.chosen is not None:
            # An epoch's first batches come in a burst after a gap: no steady steps.
            if self.watches_steps and last is not None and self._in_epoch > self.skip:
                self.large.observe(now - last, wait_s, lag)
            return
        if share not in self.timed:
            return
        run_share, run = self._run
        self._run = (share, run + 1 if share == run_share else 1)
        if self._taken <= self.warmup:
            return  # still warming up: the run is counted (its skip passes), nothing timed
        if last is not None and self._run[1] > 1:
            if len(self.early_timed[share]) < self.skip + self.window:
                self.early_timed[share].append(now - last)
            if self._run[1] > self.skip and len(self.timed[share]) < self.window:
                self.timed[share].append(now - last)
        self._next_phase()

    def _next_phase(self) -> None:
        rates, whole = self.rates, self._timed_whole
        pending = [s for s in self.shares if s not in whole and not
                   self._clearly_slower(s, rates, whole) and not self._cannot_win(s, rates, whole)]
        if pending:
            self.share = pending[0]  # stamped on the next buffers handed to the packers
            return
        # Only shares timed whole compete (none pending means one is: a share is dropped only
        # against one): one dropped early may have a steady interval or two, too few to
        # outvote them. A share timed whole is not judged by its early intervals: the first
        # share's hold the model's warm-up (seconds of cuDNN autotuning), which once dropped
        # GPU decoding for CPU decoding 1-24% slower (2 x H200, 2026-11-26).
        self.chosen = self.share = self._pick(whole, rates)
        log.info("imageloader: decode='auto' keeps CPU share %g (batches/s by share: %s, "
                 "CPU bound %s)", self.chosen, rates, self.cpu_bound)

    def _pick(self, whole: list[float], rates: dict) -> float:
        """The fastest share timed whole, unless the first is within `keep_first` of it."""
        fastest, first = max(whole, key=rates.get), self.shares[0]
        if first in whole and rates[fastest] <= (1 + self.keep_first) * rates[first]:
            return first
        return fastest

    @property
    def _timed_whole(self) -> list[float]:
        """The shares with a whole window of steady intervals."""
        return [s for s in self.shares if len(self.timed[s]) >= self.window]

    def _clearly_slower(self, share: float, rates: dict, whole: list[float]) -> bool:
        """`share` has `early` intervals, and even with its skipped ones it is slower than a
        share timed whole by more than `margin`."""
        intervals = self.early_timed[share]
        if len(intervals) < self.early or not whole:
            return False
        fastest = max(rates[s] for s in whole)
        return len(intervals) / sum(intervals) < (1 - self.margin) * fastest

    def _cannot_win(self, share: float, rates: dict, whole: list[float]) -> bool:
        """`share` needs the CPU to decode that part of every batch, and even at the CPU's
        bound it would not feed `keep_first` faster than the first share fed, timed whole, as
        it must to be chosen: it is not run. The CPU share fed 87-96% of its bound on the H200
        hosts (results/2026-11-29-h200-trial, results/2026-11-29-h200x2-defaults), never more.
        (The rule was "no faster than the first share", and ResNet-50 on 500x375 images, which
        waits for no batch under GPU decoding, took a CPU turn at a bound 1.8% over the GPU's
        rate: it fed 16.41 batches/s against the GPU's 18.42, and waits of ~100 ms in the
        turn took 11% of the next epoch's steady time (91.2% of the data-on-GPU rate, the
        epochs before it 93-95%). Before, 20% more lenient: turns in 3 of 4 runs, all
        lost: 16.4 against 17.6, bound 17.0; 14.2 against 16.5, bound 15.9; one dropped early.
        The probes' CPU time per image varied by ~35% between runs on a 2-core VM only:
        results/2026-11-28-cpu-bound.)"""
        first, bound = self.shares[0], self.cpu_bound
        if share == first or share <= 0 or first not in whole or bound is None:
            return False
        return bound / share <= (1 + self.keep_first) * rates[first]

    @property
    def rates(self) -> dict:
        """Batches per second the consumer took with each share (measured so far)."""
        return {s: round(len(t) / sum(t), 3) for s, t in self.timed.items() if t}


class LargeOnCpu:
    """decode="auto", once its trial kept GPU decoding: whether the packers also decode the
    JPEGs of at least `pixels` pixels on the CPU (at a reduced scale, decode.py's draft).

    That pays only where the GPU is what the steps wait for: on photos of 250-2,600 px, on one
    H200, ResNet-50 (55 ms steps the GPU is busy through) was fed 97.9 / 98.0% of its
    data-on-GPU rate with them on the CPU against 96.8 / 96.8% without: the engines' colour
    conversion of those images no longer takes SM time from the model. ResNet-18, whose host
    issues its steps no faster than the GPU runs them and which waits 25-29% of the time for
    its batches, was fed 82.9 / 82.9% against 86.6 / 86.4%: the packers' decoding slowed its
    host side (scripts/bench/README.md, 2026-11-29).

    So the consumer's steps decide, over `window` steady steps: on where in at least `behind`
    of them the GPU ran behind the host, when it came for the next batch, by at least
    `lag_share` of a step (prefetch.StepLag; the host runs ahead: GPU-bound, where a host-bound
    model's GPU finishes a step's last kernels just after they are queued) and the consumer
    waited at most `max_wait` of the time for its batches; else off for good. ResNet-50 was
    behind in 97-100% of its steps, waiting 0.3-0.9%, and fed 97.1 / 97.7% under "auto"
    against 95.6 / 96.2% under "cuda"; ResNet-18 behind in 62.5%, waiting 11.7%: off. Once
    on, it is off for good as soon as a window shows the consumer waiting more than
    `give_up_wait` (the cores do not keep up) or behind in fewer than `still_behind` of its
    steps. A loop that waits for each step's end before it asks for the next batch (a loss
    read every step) shows no lag and keeps it off; one that waits for the step before
    (train_resnet.py's graphed steps on 2 GPUs) runs a whole step behind, and is judged by
    its waits alone. Under DDP each rank judges alone, and a rank whose partner is late sees
    its GPU behind (the all-reduce waits there) without waiting itself: on 2 x H200 it came
    on for ResNet-50 on photos (1.98x over one GPU) and for ResNet-18's rank 0 there, waiting
    3% while rank 1 waited 36% (results/2026-11-29-h200x2-defaults). That rank then decodes
    its large JPEGs on its own cores; if they do not keep up, its own waits turn it off."""

    def __init__(self, pixels: int = AUTO_CPU_LARGE, window: int = 32, behind: float = 0.9,
                 max_wait: float = 0.05, give_up_wait: float = 0.08, still_behind: float = 0.5,
                 lag_share: float = 0.25, enabled: bool = True):
        self.pixels, self.window, self.lag_share = pixels, window, lag_share
        self.behind, self.max_wait = behind, max_wait
        self.give_up_wait, self.still_behind = give_up_wait, still_behind
        # then "on" or "off"; "off" is for good (not enabled: from the start)
        self.state = "watching" if enabled else "off"
        self._steps: list[tuple[float, float, bool]] = []  # (interval, wait, behind)
        self.windows: list[tuple[float, float]] = []  # (share behind, share waited) of the
                                                       # first windows, for whoever asks why

    @property
    def watching(self) -> bool:
        return self.state != "off"

    @property
    def cpu_pixels(self) -> int:
        return self.pixels if self.state == "on" else 0

    def observe(self, interval: float, wait_s: float, lag: float | None) -> None:
        """One steady step: `interval` seconds since the last batch, `wait_s` of them waiting
        for this one; `lag`: seconds the GPU ran behind the host (None: not known for this
        step, which then does not count)."""
        if self.state == "off" or lag is None:
            return
        self._steps.append((interval, wait_s, lag >= self.lag_share * interval))
        if len(self._steps) < self.window:
            return
        intervals, waits, behinds = zip(*self._steps)
        self._steps = []
        waited = sum(waits) / max(sum(intervals), 1e-9)
        ran_behind = sum(behinds) / len(behinds)
        if len(self.windows) < 16:
            self.windows.append((round(ran_behind, 3), round(waited, 4)))
        was = self.state
        if self.state == "watching":
            gpu_bound = ran_behind >= self.behind and waited <= self.max_wait
            self.state = "on" if gpu_bound else "off"
        elif waited > self.give_up_wait or ran_behind < self.still_behind:
            self.state = "off"
        if self.state != was:
            log.info("imageloader: JPEGs of >= %d pixels decoded by the %s from now on (the GPU "
                     "behind in %.0f%% of %d steps, %.1f%% of the time waiting for batches)",
                     self.pixels, "workers" if self.state == "on" else "GPU", 100 * ran_behind,
                     len(behinds), 100 * waited)


def check_share(cpu_share) -> None:
    """Options.cpu_share must be None or a number in [0, 1]."""
    if cpu_share is None:
        return
    if isinstance(cpu_share, (str, bool)) or not 0.0 <= cpu_share <= 1.0:
        raise ValueError(f"cpu_share must be None or within [0, 1], got {cpu_share!r}")


def share_control(cpu_share, trial: bool = False, in_flight: int = 8, decoders: int = 0,
                  batch_size: int = 0, large: bool = True) -> FixedShare:
    """The controller for Options.cpu_share; None: a trial of GPU against CPU decoding where
    the loader chose the decode itself (decode="auto"), else share 0. `in_flight`: the most
    batches the loader has on their way (its buffers), the trial's `skip`; `decoders` (the
    packer processes) and `batch_size` turn the packers' timed CPU decodes into the CPU's
    bound in batches a second (0: no probes). The trial times nothing in training's first
    TRIAL_WARMUP batches. `large`: once GPU decoding is kept, may the trial send a GPU-bound
    model's large JPEGs to the packers (LargeOnCpu)? Not where Options.cpu_large is set."""
    check_share(cpu_share)
    if cpu_share is None:
        return TrialShare(skip=in_flight, decoders=decoders, batch_size=batch_size,
                          warmup=TRIAL_WARMUP, large=large) if trial else FixedShare(0.0)
    return FixedShare(cpu_share)
