"""Where each thread of a profiled run spent its time, from py-spy's raw stacks.

    python3 scripts/bench/bench.py --recipes loader --models= ... --spy DIR  # py-spy on PATH
    python scripts/bench/summarize_stacks.py DIR/stacks-*.txt --top 6

bench.py --spy runs `py-spy record --subprocesses --threads --idle --nonblocking --format raw`
on itself for each loader-alone and training row's timed window (--spy-gil: `--gil` instead of
`--idle`, only the GIL's holder a tick; then --ticks gives each row's share of the window);
any py-spy raw file will do (with
`--native`, GIL waits and native libraries show; py-spy 0.4.3 segfaulted with it on the GPU
host).

With `--idle` every live thread is sampled at every tick, so a thread's samples are its
lifetime and their split is how it spent it. Each sample is put in one state by its frames:
- `gil`: waiting to take the GIL (a native `take_gil` frame) -- contention between threads;
- `python`: running Python (the innermost frame is Python, or the interpreter itself);
  without `--native` also any native call made from Python (a decode call, a copy);
- `wait`: blocked in a lock, queue, sleep, poll or read (pthread, futex, sem, poll, sleep...;
  without `--native`: in threading, queue, multiprocessing's connection or synchronize);
- `native LIB`: in a native library's code (nvImageCodec, CUDA's driver, torch...), e.g. a
  decode call that the calling thread sits in until the decoder is done.
A row per (process, thread role) gives those shares and, for its heaviest states, the innermost
Python function it was called from: what the thread was doing. A thread's role is the function
it runs (`thread_role`): threads of one role are summed (a prefetcher's lanes, threads made
anew each epoch). Processes are named by their main function (reader_main, worker_main...),
the profiled one "main".
"""
from __future__ import annotations

import argparse
import gzip
import re
from collections import Counter, defaultdict
from pathlib import Path

PROCESS_FRAME = re.compile(r'process (\d+):"[^"]*";')  # its command line may hold ';'
PYTHON_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")
NATIVE_FRAME = re.compile(r"^(?P<func>.*) \((?P<lib>[^()]*)\)$")
# Native functions a sampled thread blocks in (their names' start, leading underscores off).
WAIT_SYMBOLS = ("pthread_cond_", "futex", "sem_wait", "sem_timedwait", "sem_clockwait",
                "epoll_wait", "poll", "select", "nanosleep", "clock_nanosleep", "sleep",
                "lll_lock_wait", "pthread_join", "waitpid", "wait4", "accept", "recv",
                "read", "pthread_mutex_lock", "do_futex_wait", "PyThread_acquire_lock",
                "sched_yield")
GIL_SYMBOLS = ("take_gil",)
# Frames a thread or a child process starts through, before its own code.
START_FILES = ("threading.py", "<string>", "spawn.py", "process.py", "context.py", "runpy",
               "<frozen runpy>", "popen_fork.py", "popen_spawn_posix.py", "popen_forkserver.py",
               "forkserver.py")
# Without --native a blocked thread's innermost frame is the Python function that blocked.
WAIT_FILES = ("threading.py", "queue.py", "selectors.py", "connection.py", "synchronize.py",
              "popen_fork.py", "resource_tracker.py")
INTERPRETER_LIBS = ("libpython",)


def parse_line(line: str) -> tuple[str, str, list[str], int] | None:
    """(process, thread, frames outermost first, samples) of one raw line, or None; the
    thread is 'thread (TID): NAME', or 'thread (TID)' where py-spy had no name for it."""
    line = line.rstrip("\n")
    stack, _, count = line.rpartition(" ")
    if not stack or not count.isdigit():
        return None
    # --subprocesses: one process frame per generation; the profiled process has one (or,
    # without the flag, none), its children two or more.
    pids = []
    while match := PROCESS_FRAME.match(stack):
        pids.append(match[1])
        stack = stack[match.end():]
    process = "main" if len(pids) <= 1 else f"process {pids[-1]}"
    frames = stack.split(";")
    if not frames or not frames[0].startswith("thread ("):
        return None
    return process, frames.pop(0), frames, int(count)


def state_of(frames: list[str]) -> tuple[str, str]:
    """(state, innermost Python function) of one sample's frames."""
    python_func = "-"
    for frame in reversed(frames):
        match = PYTHON_FRAME.match(frame)
        if not match:
            continue
        here = f"{match['func']} ({Path(match['file']).name})"
        if python_func == "-":
            python_func = here
        elif Path(match["file"]).name not in WAIT_FILES:
            python_func = f"{here} > {python_func}"  # what waited, then in what it waited
            break
        if Path(match["file"]).name not in WAIT_FILES:
            break
    if any(symbol in frame for frame in frames for symbol in GIL_SYMBOLS):
        return "gil", python_func
    if not frames:
        return "wait", python_func
    leaf = frames[-1]
    leaf_python = PYTHON_FRAME.match(leaf)
    if leaf_python:
        if Path(leaf_python["file"]).name in WAIT_FILES:
            return "wait", python_func
        return "python", python_func
    native = NATIVE_FRAME.match(leaf)
    func, lib = (native["func"], native["lib"]) if native else (leaf, "?")
    if re.sub(r"^_*(GI_+)?", "", func).startswith(WAIT_SYMBOLS):  # __GI___poll: poll
        return "wait", python_func
    if lib.startswith(INTERPRETER_LIBS):
        return "python", python_func
    if lib.startswith("libc.") and func.startswith("0x"):
        # An unnamed libc address: in a syscall wrapper, nearly always a wait when sampled
        # with --idle (a busy libc leaf, memcpy say, has its name).
        return "wait", python_func
    return f"native {lib.split('.so')[0]}", python_func


def process_label(process: str, frames_seen: Counter) -> str:
    if process == "main":
        return "main"
    for func in ("reader_main", "worker_main", "resource_tracker", "spawn_main"):
        if frames_seen[func]:
            return func
    return process.split(":")[0]


def thread_role(frames: list[str], name: str) -> str:
    """What a thread runs: its outermost Python function past the interpreter's and
    multiprocessing's start-up frames (a thread's target, a child's main function), else its
    name. Not the name alone: py-spy keeps a name per thread id, and threads made each epoch
    (the prefetcher's) get ids of earlier ones, so their names get mixed up."""
    for frame in frames:
        match = PYTHON_FRAME.match(frame)
        if match and Path(match["file"]).name not in START_FILES:
            return f"{match['func']} ({Path(match['file']).name})"
    return name


def summarize(lines, top: int = 5) -> list[dict]:
    """One dict per (process label, thread role), heaviest first."""
    samples: dict = defaultdict(Counter)          # (process, role) -> state -> samples
    doing: dict = defaultdict(Counter)            # (process, role) -> (state, func) -> n
    seen: dict = defaultdict(Counter)             # process -> Python function -> n
    for process, thread, frames, count in filter(None, map(parse_line, lines)):
        for frame in frames:
            match = PYTHON_FRAME.match(frame)
            if match:
                seen[process][match["func"]] += count
        role = thread_role(frames, thread.partition(": ")[2] or "(unnamed)")
        state, func = state_of(frames)
        samples[process, role][state] += count
        doing[process, role][state, func] += count
    labels = {process: process_label(process, seen[process]) for process, _ in samples}
    grouped: dict = defaultdict(lambda: [Counter(), Counter(), set()])
    for (process, role), states in samples.items():
        key = (labels[process], role)
        grouped[key][0].update(states)
        grouped[key][1].update(doing[process, role])
        grouped[key][2].add(process)
    rows = []
    for (label, name), (states, what, processes) in grouped.items():
        total = sum(states.values())
        rows.append({
            "process": label, "thread": name, "processes": len(processes), "samples": total,
            "states": {state: round(n / total, 3) for state, n in states.most_common()},
            "doing": [{"state": state, "in": func, "share": round(n / total, 3)}
                      for (state, func), n in what.most_common(top)]})
    rows.sort(key=lambda row: (row["process"] != "main", -row["samples"]))
    return rows


def format_rows(rows: list[dict], min_share: float = 0.02, ticks: int | None = None) -> str:
    """Rows with at least `min_share` of the largest row's samples (--nonblocking sampling
    catches some stacks half-built: they make rows of a few samples each), shares likewise.
    `ticks` (stacks of py-spy --gil: one thread or none a tick): each row's samples are also
    given as a share of them, the part of the window that its threads held the GIL."""
    out = []
    largest = max((row["samples"] for row in rows), default=0)
    hidden = [row for row in rows if row["samples"] < min_share * largest]
    for row in rows:
        if row in hidden:
            continue
        states = ", ".join(f"{state} {share:.0%}" for state, share in row["states"].items()
                           if share >= min_share)
        many = f" x{row['processes']}" if row["processes"] > 1 else ""
        held = f" (held the GIL {row['samples'] / ticks:.1%} of the window)" if ticks else ""
        out.append(f"{row['process']}{many} / {row['thread']}: {row['samples']} samples"
                   f"{held}: {states}")
        for item in row["doing"]:
            if item["share"] >= min_share:
                out.append(f"    {item['share']:>5.0%} {item['state']:<18} in {item['in']}")
    if hidden:
        out.append(f"({len(hidden)} rows of {sum(row['samples'] for row in hidden)} samples "
                   f"in all not shown: under {min_share:.0%} of the largest row's)")
    return "\n".join(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("stacks", help="py-spy record --format raw output (.gz too)")
    p.add_argument("--top", type=int, default=5, help="what each thread did: this many rows")
    p.add_argument("--min-share", type=float, default=0.02,
                   help="hide shares below this, and rows with fewer samples than this share "
                        "of the largest row's")
    p.add_argument("--ticks", type=int, default=None,
                   help="stacks of py-spy --gil: its rate x the window's seconds; each row's "
                        "samples are then also shown as the share of the window it held the GIL")
    args = p.parse_args(argv)
    opener = gzip.open if args.stacks.endswith(".gz") else open
    with opener(args.stacks, "rt") as f:
        print(format_rows(summarize(f, args.top), args.min_share, args.ticks))


if __name__ == "__main__":
    main()
