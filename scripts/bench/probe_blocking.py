"""Where a training process's main thread waits: its context switches and its native stacks.

    python scripts/bench/probe_blocking.py --after 20 --seconds 8 --dumps 12 --out blocking.jsonl \
        -- python3 scripts/train_resnet.py --data photos.tgz --decode cuda ...

Runs the command, and in the window [after, after + seconds] of its run reads the main
thread's context switches from /proc (voluntary: it went to sleep on something, a lock, the
GIL, a condition; nonvoluntary: the scheduler took its core) and takes `--dumps` stacks of it
with `py-spy dump --native` (which pauses the process for a moment: the run's own rate is
not a measurement). Each stack is put in one class by its innermost frames (`classify`):
a lock inside the CUDA driver, a CUDA synchronize, the autograd engine (backward runs on its
own thread while this one waits), the loader's next(), the GIL, elsewhere in the driver,
waiting elsewhere (e.g. in the JPEG decoder's library), running; or outside the training steps
(no `--steps-frame` in it: evaluation, a checkpoint). The switch counts cover the whole
window, steps or not: train_resnet.py's short epochs also evaluate and checkpoint inside it.

Why: fed ResNet-18's kernel launches sometimes took milliseconds with no CUDA call of another
thread in flight (`plot_timeline.py --blocked`); its main thread made ~1,600-2,300 voluntary
switches a second against ~190 with its data on the GPU, and a stack caught one launch in
`pthread_rwlock_wrlock` inside libcuda (results/2026-11-28-h200-blocking).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

LOCKS = ("pthread_rwlock", "pthread_mutex_lock", "__lll_lock_wait")
SYNCS = ("cuStreamSynchronize", "cudaStreamSynchronize", "cuEventSynchronize",
         "cudaEventSynchronize", "cuCtxSynchronize", "cudaDeviceSynchronize")
CLASSES = ("CUDA driver lock", "CUDA synchronize", "autograd engine", "loader", "GIL",
           "CUDA driver, other", "waiting, elsewhere", "running", "outside the steps")
_HEADER = re.compile(r'^Thread (\d+) \(([^)]*)\)(?:: "(.*)")?')


def main_thread_frames(dump: str) -> tuple[str, list[str]]:
    """The state ("idle", "active", "active+gil") and frames, innermost first, of the thread
    called MainThread in one `py-spy dump` (the first thread if none is named so)."""
    threads, current = [], None
    for line in dump.splitlines():
        header = _HEADER.match(line)
        if header:
            current = (header.group(3) or "", header.group(2), [])
            threads.append(current)
        elif current is not None and line.startswith("    ") and line.strip():
            current[2].append(line.strip())
    if not threads:
        raise ValueError(f"no thread in this py-spy dump: {dump[:200]!r}")
    name, state, frames = next((t for t in threads if t[0] == "MainThread"), threads[0])
    return state, frames


def classify(frames: list[str], state: str = "active", steps_frame: str | None = None) -> str:
    """One of CLASSES for a stack, innermost frame first, and py-spy's state of the thread;
    a stack without a frame that holds `steps_frame` (the training loop's function, when
    given) is "outside the steps" (evaluation, a checkpoint, the loader's start)."""
    def near(words, depth):
        return any(word in frame for frame in frames[:depth] for word in words)

    if steps_frame is not None and not any(steps_frame in frame for frame in frames):
        return "outside the steps"

    if near(LOCKS, 3) and near(("libcuda",), 8):
        return "CUDA driver lock"
    if near(SYNCS, 4):
        return "CUDA synchronize"
    if near(("ReadyQueue::pop", "Engine::execute"), 8):
        return "autograd engine"
    # In the loader's next(): waiting for a batch (or for anything else inside it).
    if any("imageloader/" in frame for frame in frames[:12]) and not near(("libcuda",), 4):
        return "loader"
    # Taking the GIL back: a timed condition wait right under CPython or torch's bindings
    # (torch's ops let go of the GIL while they run, and take it back after).
    for i, frame in enumerate(frames[:3]):
        if "pthread_cond_timedwait" in frame and i + 1 < len(frames) and (
                any(lib in frames[i + 1] for lib in ("libpython", "libtorch_python",
                                                     "PyEval", "take_gil"))
                or re.search(r"\.py:\d+\)$", frames[i + 1])):
            return "GIL"
    if near(("libcuda", "libcudart"), 4):
        return "CUDA driver, other"
    return "waiting, elsewhere" if state == "idle" else "running"


def switches(pid: int) -> tuple[int, int]:
    """(voluntary, nonvoluntary) context switches of the process's main thread so far."""
    fields = {}
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"])


def py_spy() -> str:
    found = shutil.which("py-spy")
    if found is None:
        raise SystemExit("--dumps needs py-spy on PATH (pip install py-spy), or --dumps 0")
    return found


def dump_main_thread(spy: str, pid: int) -> tuple[str, list[str]] | None:
    done = subprocess.run([spy, "dump", "--pid", str(pid), "--native"], capture_output=True,
                          text=True, timeout=30)
    if done.returncode != 0 or "Thread" not in done.stdout:
        return None  # the process ended meanwhile, or py-spy could not attach
    return main_thread_frames(done.stdout)


def probe(command: list[str], after: float, seconds: float, dumps: int, log: Path,
          steps_frame: str | None = None) -> dict:
    spy = py_spy() if dumps else None
    with open(log, "w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            return watch(child, after, seconds, dumps, spy, steps_frame)
        finally:
            child.wait()


def watch(child: subprocess.Popen, after: float, seconds: float, dumps: int,
          spy: str | None, steps_frame: str | None = None) -> dict:
    time.sleep(after)
    if child.poll() is not None:
        raise SystemExit(f"the command ended (exit {child.returncode}) before the window began "
                         f"at {after:g} s: lengthen its run or shorten --after")
    start, (vol0, invol0) = time.perf_counter(), switches(child.pid)
    stacks = []
    for i in range(dumps):
        time.sleep(max(0.0, start + seconds * i / dumps - time.perf_counter()))
        got = dump_main_thread(spy, child.pid)
        if got is not None:
            stacks.append(got)
    time.sleep(max(0.0, start + seconds - time.perf_counter()))
    if child.poll() is not None:
        raise SystemExit(f"the command ended (exit {child.returncode}) inside the window "
                         f"[{after:g}, {after + seconds:g}] s: lengthen its run")
    vol1, invol1 = switches(child.pid)
    elapsed = time.perf_counter() - start
    kinds = [classify(frames, state, steps_frame) for state, frames in stacks]
    classes = Counter(kinds)
    return {"window_s": [after, after + elapsed],
            "voluntary_per_s": (vol1 - vol0) / elapsed,
            "nonvoluntary_per_s": (invol1 - invol0) / elapsed,
            "classes": {name: classes[name] for name in CLASSES if classes[name]},
            "stacks": [{"state": state, "class": kind, "frames": frames[:24]}
                       for (state, frames), kind in zip(stacks, kinds)]}


def summary(result: dict, label: str) -> str:
    classes = ", ".join(f"{name} {count}" for name, count in result["classes"].items())
    return (f"{label}: main thread {result['voluntary_per_s']:.0f} voluntary / "
            f"{result['nonvoluntary_per_s']:.0f} nonvoluntary switches per s in "
            f"[{result['window_s'][0]:.0f}, {result['window_s'][1]:.0f}] s"
            + (f"; {len(result['stacks'])} stacks: {classes}" if result["stacks"] else ""))


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--after", type=float, default=20.0, help="seconds into the run the window "
                   "begins (past the start and the first epoch's warm-up)")
    p.add_argument("--seconds", type=float, default=8.0, help="the window's length")
    p.add_argument("--dumps", type=int, default=12, help="py-spy stacks taken in the window")
    p.add_argument("--steps-frame", default="train_one_epoch", help="a stack without a frame "
                   "holding this (the training loop) counts as outside the steps; '' = none")
    p.add_argument("--label", default="run", help="the summary line's label")
    p.add_argument("--log", type=Path, default=Path("probe-blocking.log"),
                   help="the command's own output")
    p.add_argument("--out", type=Path, default=None, help="JSON of the result (appended as a "
                   "line, with the label, so that several runs gather in one file)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- and the command to run")
    return p


def main(args: argparse.Namespace) -> dict:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("give the command to run after --")
    result = probe(command, args.after, args.seconds, args.dumps, args.log,
                   args.steps_frame or None)
    print(summary(result, args.label))
    if args.out is not None:
        with open(args.out, "a") as out:
            out.write(json.dumps({"label": args.label, **result}) + "\n")
    return result


if __name__ == "__main__":
    main(get_args_parser().parse_args())
