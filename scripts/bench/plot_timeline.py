"""Timeline of GPU activity from a torch.profiler chrome trace: is the host->device copy hidden?

    python scripts/bench/plot_timeline.py trace.json --out timeline.png
    python scripts/bench/plot_timeline.py p0.json.gz --compare p2.json.gz --labels prefetch=0 prefetch=2

Reads a trace written by `prof.export_chrome_trace(path)` (plain JSON or .json.gz) and draws one
row per CUDA stream: compute kernels in one colour, memcpy (HtoD / DtoH / DtoD ...) in a second,
memset in a third, on an x axis in ms from the first GPU event of that trace. Each row is labelled
with its stream id and what dominates it ("stream 7: kernels", "stream 23: copies + conversion
kernels"). With --compare two traces are drawn as two stacked panels on one time scale.

It also prints the time with nothing on the GPU and NCCL's kernel time (under DDP: the wait for
the other rank), per stream the busy time of kernels, copies and memsets, and the number that
shows whether the prefetcher works: the time during which copies on one stream run while kernels
run on ANOTHER stream of the same GPU (copy time hidden under compute). `overlap_summary(events)`
returns the same numbers as a dict.

Event format (libkineto's ChromeTraceLogger::handleActivity and the CUPTI activity metadata):
GPU activities are complete events, "ph": "X", with "cat" "kernel" (older Kineto: "Kernel"),
"gpu_memcpy" or "gpu_memset"; "ts" and "dur" in microseconds; "pid" is the device and "tid" the
stream, and "args" holds "device" and "stream" (used first). Memcpy names read like
"Memcpy HtoD (Pinned -> Device)"; traces merged by torch's CUPTI-monitor backend name them just
"Memcpy" and put the direction in args["copy kind"], so both are read.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

KINDS = ("kernel", "memcpy", "memset")
COLOURS = {"kernel": "tab:blue", "memcpy": "tab:orange", "memset": "tab:green"}
LEGEND = {"kernel": "compute kernels", "memcpy": "memcpy (HtoD / DtoH / DtoD)",
          "memset": "memset"}
_CATEGORY = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
             "gpu_memset": "memset", "memset": "memset"}
_COPY_KIND = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|HtoA|AtoH|AtoA|AtoD|DtoA)\b")
_SRC_KIND = re.compile(r"\((\w+)\s*->\s*(\w+)\)")
# PyTorch's elementwise kernels: dtype conversion, mul_/add_ of Normalize, .to(channels_last).
_CONVERSION = re.compile(r"elementwise|copy|convert|fill", re.IGNORECASE)


@dataclass(frozen=True)
class GpuEvent:
    """One GPU activity; times in microseconds as in the trace."""

    kind: str                # "kernel", "memcpy" or "memset"
    name: str
    device: int
    stream: int
    start: float
    end: float
    copy_kind: str = ""      # memcpy only: "HtoD", "DtoH", "DtoD", ...
    src_kind: str = ""       # memcpy only, when the trace says: "Pinned", "Pageable", "Device"

    @property
    def key(self) -> tuple[int, int]:
        return self.device, self.stream


# ---- reading --------------------------------------------------------------------------------


def load_trace(path: str | Path) -> dict:
    """The trace as a dict with "traceEvents"; gzip is detected by its magic bytes."""
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    data = json.loads(raw)
    return {"traceEvents": data} if isinstance(data, list) else data


def _as_int(value: Any, default: int = -1) -> int:
    if isinstance(value, (int, float)):
        return int(value)
    digits = re.search(r"-?\d+", str(value)) if value is not None else None
    return int(digits.group()) if digits else default


def parse_event(raw: dict) -> GpuEvent | None:
    """A GpuEvent for a kernel / memcpy / memset complete event, else None."""
    if raw.get("ph") != "X":
        return None
    kind = _CATEGORY.get(str(raw.get("cat", "")).lower())
    if kind is None or "ts" not in raw:
        return None
    args = raw.get("args") or {}
    start = float(raw["ts"])
    end = start + max(float(raw.get("dur", 0.0)), 0.0)
    name = str(raw.get("name", ""))
    copy_kind = src_kind = ""
    if kind == "memcpy":
        found = _COPY_KIND.search(name)
        copy_kind = str(args.get("copy kind") or (found.group(1) if found else "other"))
        kinds = _SRC_KIND.search(name)
        src_kind = str(args.get("src kind") or (kinds.group(1) if kinds else "")).capitalize()
    return GpuEvent(kind, name, _as_int(args.get("device", raw.get("pid")), 0),
                    _as_int(args.get("stream", raw.get("tid"))), start, end, copy_kind, src_kind)


def trace_events(trace: dict | list) -> list:
    """The events of a trace: a dict with "traceEvents", or the event list itself."""
    return trace.get("traceEvents", []) if isinstance(trace, dict) else trace


def gpu_events(trace: dict | list) -> list[GpuEvent]:
    """GPU activities of a trace (dict with "traceEvents", or the event list), by start time."""
    raw = trace_events(trace)
    events = [e for e in (parse_event(r) for r in raw if isinstance(r, dict)) if e is not None]
    return sorted(events, key=lambda e: (e.start, e.end))


def _ensure_events(events: Iterable) -> list[GpuEvent]:
    events = list(events)
    if events and not isinstance(events[0], GpuEvent):
        return gpu_events(events)
    return events


def crop(events: list[GpuEvent], start_us: float, end_us: float) -> list[GpuEvent]:
    """Events clipped to [start_us, end_us]; those entirely outside are dropped."""
    out = []
    for e in events:
        s, t = max(e.start, start_us), min(e.end, end_us)
        if t > s or (e.start == e.end and start_us <= e.start <= end_us):
            out.append(GpuEvent(e.kind, e.name, e.device, e.stream, s, t, e.copy_kind, e.src_kind))
    return out


# ---- interval arithmetic ---------------------------------------------------------------------


def merge(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Union of intervals as sorted, disjoint intervals."""
    merged: list[list[float]] = []
    for s, t in sorted(intervals):
        if t <= s:
            continue
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], t)
        else:
            merged.append([s, t])
    return [(s, t) for s, t in merged]


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(t - s for s, t in intervals)


def intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Total length of the intersection of two merged interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


# ---- summary ---------------------------------------------------------------------------------


def describe_stream(busy_ms: dict[str, float], kernel_names: list[str]) -> str:
    """What dominates a stream, largest first: "kernels", "copies + conversion kernels", ..."""
    total = sum(busy_ms.values())
    if total <= 0:
        return "idle"
    copy_dominated = busy_ms["memcpy"] >= busy_ms["kernel"]
    conversion = bool(kernel_names) and all(_CONVERSION.search(n) for n in kernel_names)
    words = {"kernel": "conversion kernels" if copy_dominated and conversion else "kernels",
             "memcpy": "copies", "memset": "memsets"}
    parts = [k for k in sorted(KINDS, key=lambda k: -busy_ms[k])
             if busy_ms[k] > 0 and (busy_ms[k] >= 0.02 * total or k != "memset")]
    return " + ".join(words[k] for k in parts)


def overlap_summary(events: Iterable) -> dict:
    """Busy time per stream and how much copy time ran under kernels on other streams.

    `events`: GpuEvents (or raw chrome-trace event dicts). All times in the result are ms.
    copy_overlap_ms of a stream = |union of its copies  AND  union of the kernels on the other
    streams of the same device|; the totals sum it over streams. copy_hidden is that total over
    all copy time (None without copies): 1.0 means every copy ran while the GPU computed.
    """
    events = _ensure_events(events)
    by_stream: dict[tuple[int, int], dict[str, list[GpuEvent]]] = defaultdict(
        lambda: {k: [] for k in KINDS})
    for e in events:
        by_stream[e.key][e.kind].append(e)
    unions = {key: {k: merge((e.start, e.end) for e in kinds[k]) for k in KINDS}
              for key, kinds in by_stream.items()}
    devices = {key[0] for key in by_stream}
    multi_device = len(devices) > 1
    streams = []
    for key in sorted(by_stream):
        device, stream = key
        others = merge(iv for other, u in unions.items()
                       if other != key and other[0] == device for iv in u["kernel"])
        copies = by_stream[key]["memcpy"]
        htod = merge((e.start, e.end) for e in copies if e.copy_kind == "HtoD")
        busy = {k: length(unions[key][k]) / 1e3 for k in KINDS}
        name = f"stream {stream}" if not multi_device else f"cuda:{device} stream {stream}"
        label = describe_stream(busy, [e.name for e in by_stream[key]["kernel"]])
        streams.append({
            "device": device, "stream": stream, "label": f"{name}: {label}",
            "kernel_ms": busy["kernel"], "copy_ms": busy["memcpy"], "memset_ms": busy["memset"],
            "kernels": len(by_stream[key]["kernel"]), "copies": len(copies),
            "memsets": len(by_stream[key]["memset"]),
            "copy_kinds": dict(Counter(f"{e.copy_kind} {e.src_kind}".strip() for e in copies)),
            "htod_ms": length(htod) / 1e3,
            "copy_overlap_ms": intersection(unions[key]["memcpy"], others) / 1e3,
            "htod_overlap_ms": intersection(htod, others) / 1e3,
        })
    copy_ms = sum(s["copy_ms"] for s in streams)
    overlap_ms = sum(s["copy_overlap_ms"] for s in streams)
    start = min((e.start for e in events), default=0.0)
    end = max((e.end for e in events), default=0.0)
    # Time with nothing at all on the GPU: the host (or another rank) kept it waiting.
    busy_us = length(merge((e.start, e.end) for e in events))
    # NCCL's kernels run for as long as the slower rank keeps them waiting, so their time under
    # DDP says how long this GPU waited for the other.
    nccl_us = length(merge((e.start, e.end) for e in events
                           if e.kind == "kernel" and "nccl" in e.name.lower()))
    return {
        "span_ms": (end - start) / 1e3,
        "idle_ms": (end - start - busy_us) / 1e3,
        "nccl_ms": nccl_us / 1e3,
        "kernel_ms": sum(s["kernel_ms"] for s in streams),
        "copy_ms": copy_ms,
        "memset_ms": sum(s["memset_ms"] for s in streams),
        "copy_overlap_ms": overlap_ms,
        "copy_hidden": overlap_ms / copy_ms if copy_ms > 0 else None,
        "htod_ms": sum(s["htod_ms"] for s in streams),
        "htod_overlap_ms": sum(s["htod_overlap_ms"] for s in streams),
        "streams": streams,
    }


def format_summary(summary: dict, title: str) -> str:
    lines = [f"== {title}: {summary['span_ms']:.2f} ms of GPU timeline, "
             f"{summary['idle_ms']:.2f} ms with nothing on it"
             + (f", NCCL kernels {summary['nccl_ms']:.2f} ms" if summary["nccl_ms"] else "")]
    width = max([len(s["label"]) for s in summary["streams"]] + [10])
    for s in summary["streams"]:
        kinds = ", ".join(f"{n}x {k}" for k, n in sorted(s["copy_kinds"].items()))
        lines.append(f"  {s['label']:<{width}}  kernels {s['kernel_ms']:9.2f} ms ({s['kernels']})"
                     f"  copies {s['copy_ms']:8.2f} ms ({s['copies']})"
                     f"  memset {s['memset_ms']:6.2f} ms" + (f"  [{kinds}]" if kinds else ""))
    hidden = summary["copy_hidden"]
    lines.append(f"  copies {summary['copy_ms']:.2f} ms in all; overlapping kernels on other "
                 f"streams: {summary['copy_overlap_ms']:.2f} ms"
                 + (f" ({hidden:.0%} hidden)" if hidden is not None else " (no copies)"))
    if summary["htod_ms"] > 0:
        lines.append(f"  HtoD {summary['htod_ms']:.2f} ms, of which "
                     f"{summary['htod_overlap_ms']:.2f} ms under kernels on other streams")
    return "\n".join(lines)


# ---- drawing ---------------------------------------------------------------------------------


def draw_panel(ax, events: list[GpuEvent], summary: dict, origin_us: float, title: str) -> None:
    """One row per stream, bars in ms from `origin_us`."""
    rows = summary["streams"]
    for y, row in enumerate(rows):
        key = (row["device"], row["stream"])
        for kind in KINDS:
            bars = [((e.start - origin_us) / 1e3, (e.end - e.start) / 1e3)
                    for e in events if e.key == key and e.kind == kind]
            if bars:
                # A thin edge in the fill colour keeps microsecond kernels visible at ms scale.
                ax.broken_barh(bars, (y - 0.35, 0.7), facecolors=COLOURS[kind],
                               edgecolors=COLOURS[kind], linewidth=0.3)
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    hidden = summary["copy_hidden"]
    note = (f"copies {summary['copy_ms']:.1f} ms, {summary['copy_overlap_ms']:.1f} ms under "
            f"kernels on other streams ({hidden:.0%})") if hidden is not None else "no copies"
    ax.set_title(f"{title}  —  {note}", fontsize=10, loc="left")
    ax.grid(axis="x", alpha=0.3)


def plot(panels: list[tuple[str, list[GpuEvent], dict, float]], out: Path, title: str | None,
         window_ms: tuple[float, float] | None) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    heights = [max(1, len(summary["streams"])) for _, _, summary, _ in panels]
    fig_height = 1.4 + 0.55 * sum(heights) + 0.6 * len(panels)
    fig, axes = plt.subplots(len(panels), 1, sharex=True, squeeze=False,
                             figsize=(14, fig_height), gridspec_kw={"height_ratios": heights})
    for ax, (label, events, summary, origin) in zip(axes[:, 0], panels):
        draw_panel(ax, events, summary, origin, label)
    if window_ms is not None:
        axes[0, 0].set_xlim(*window_ms)
    axes[-1, 0].set_xlabel("ms from the first GPU event")
    present = {e.kind for _, events, _, _ in panels for e in events}
    fig.legend(handles=[Patch(color=COLOURS[k], label=LEGEND[k]) for k in KINDS if k in present],
               loc="upper right", ncol=3, fontsize=9, frameon=False)
    if title:
        fig.suptitle(title, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig_height))  # 0.4 inch for legend and title
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)


def top_kernels(events: list[GpuEvent], n: int) -> dict:
    """{stream: [(kernel name, total ms, count)]}, the n with the most time, per stream."""
    totals: dict = defaultdict(Counter)
    counts: dict = defaultdict(Counter)
    for e in events:
        if e.kind == "kernel":
            totals[e.stream][e.name] += (e.end - e.start) / 1e3
            counts[e.stream][e.name] += 1
    return {stream: [(name, ms, counts[stream][name]) for name, ms in t.most_common(n)]
            for stream, t in sorted(totals.items())}


def format_top_kernels(events: list[GpuEvent], n: int) -> str:
    lines = []
    for stream, rows in top_kernels(events, n).items():
        lines.append(f"  stream {stream}: top kernels")
        lines += [f"    {ms:8.2f} ms {count:5d}x  {name[:90]}" for name, ms, count in rows]
    return "\n".join(lines)


def host_summary(trace: dict | list, n: int) -> dict:
    """The host side of the traced steps: each ProfilerStep's length (ms, in order), the n CPU
    ops with the most time in all (inclusive: an op's time holds its children's) and the n
    most frequent CUDA runtime calls, as (name, total ms, count). Under DDP its forward and
    gradient hooks show here; a decoder's per-image calls show in the runtime calls."""
    raw = trace_events(trace)
    ops = [e for e in raw if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    steps = sorted((e for e in ops if str(e.get("name", "")).startswith("ProfilerStep#")),
                   key=lambda e: float(e["ts"]))
    totals, counts = Counter(), Counter()
    for e in ops:
        if not str(e.get("name", "")).startswith("ProfilerStep#"):
            totals[e["name"]] += float(e.get("dur", 0)) / 1e3
            counts[e["name"]] += 1
    calls, call_ms = Counter(), Counter()  # CUDA runtime calls, any thread (the decoders')
    for e in raw:
        if e.get("ph") == "X" and e.get("cat") == "cuda_runtime":
            calls[e["name"]] += 1
            call_ms[e["name"]] += float(e.get("dur", 0)) / 1e3
    return {"steps_ms": [(e["name"], float(e["dur"]) / 1e3) for e in steps],
            "top_ops": [(name, ms, counts[name]) for name, ms in totals.most_common(n)],
            "runtime_calls": [(name, call_ms[name], count)
                              for name, count in calls.most_common(n)]}


def format_host_summary(summary: dict) -> str:
    steps = ", ".join(f"{name.split('#')[1]}: {ms:.1f}" for name, ms in summary["steps_ms"])
    lines = [f"  host: steps (ms) {steps or 'none traced'}"]
    lines += [f"    {ms:8.2f} ms {count:5d}x  {name[:90]}" for name, ms, count in
              summary["top_ops"]]
    lines.append("  host: CUDA runtime calls, most first")
    lines += [f"    {ms:8.2f} ms {count:5d}x  {name[:90]}" for name, ms, count in
              summary["runtime_calls"]]
    return "\n".join(lines)


def thread_names(raw: list) -> dict:
    """(pid, tid) -> the thread's name, from the trace's thread_name metadata events."""
    return {(e.get("pid"), e.get("tid")): e.get("args", {}).get("name", "")
            for e in raw if e.get("ph") == "M" and e.get("name") == "thread_name"}


def thread_calls(trace: dict | list, n: int, long_us: float = 500.0) -> list[dict]:
    """The n (thread, CUDA runtime call) pairs with the most time: count, total ms, median us,
    longest ms and ms in calls longer than `long_us`. A launch that usually takes ~8 us and
    sometimes milliseconds waited for something (a driver lock another thread held, the
    core): a fed ResNet-18's training thread, 2026-11-27-h200-twolanes."""
    raw = trace_events(trace)
    names = thread_names(raw)
    durations: dict[tuple, list[float]] = {}
    for e in raw:
        if e.get("ph") == "X" and e.get("cat") == "cuda_runtime":
            durations.setdefault((e.get("pid"), e.get("tid"), e["name"]), []).append(
                float(e.get("dur", 0)))
    rows = []
    for (pid, tid, name), us in durations.items():
        us.sort()
        rows.append({"thread": names.get((pid, tid)) or f"tid {tid}", "call": name,
                     "count": len(us), "total_ms": sum(us) / 1e3, "median_us": us[len(us) // 2],
                     "max_ms": us[-1] / 1e3, "long_ms": sum(d for d in us if d > long_us) / 1e3})
    return sorted(rows, key=lambda row: -row["total_ms"])[:n]


def format_thread_calls(rows: list[dict]) -> str:
    lines = ["  host: CUDA runtime calls by thread (count, total, median, longest, in calls "
             "> 0.5 ms)"]
    lines += [f"    {r['thread'][:24]:24s} {r['call'][:24]:24s} {r['count']:5d}x "
              f"{r['total_ms']:7.2f} ms  median {r['median_us']:6.1f} us  longest "
              f"{r['max_ms']:5.2f} ms  long {r['long_ms']:6.2f} ms" for r in rows]
    return "\n".join(lines)


def blocked_calls(trace: dict | list, n: int, long_us: float = 500.0) -> list[dict]:
    """The n longest kernel launches (over `long_us`) and, for each, what other threads were in
    when it ended: their CUDA runtime / driver calls and CPU ops that overlap it, nearest end
    first. A launch held up by a lock ends just after the holder lets go, so a call of another
    thread that ends within microseconds of it, each time, names the holder."""
    raw = trace_events(trace)
    names = thread_names(raw)
    spans = [e for e in raw if e.get("ph") == "X"
             and e.get("cat") in ("cuda_runtime", "cuda_driver", "cpu_op")]
    launches = sorted((e for e in spans if e.get("cat") == "cuda_runtime"
                       and str(e["name"]).startswith("cudaLaunchKernel")
                       and float(e.get("dur", 0)) > long_us), key=lambda e: -float(e["dur"]))
    thread = lambda e: names.get((e.get("pid"), e.get("tid"))) or f"tid {e.get('tid')}"
    rows = []
    for launch in launches[:n]:
        start, end = float(launch["ts"]), float(launch["ts"]) + float(launch["dur"])
        others = [e for e in spans if thread(e) != thread(launch) and float(e["ts"]) < end
                  and float(e["ts"]) + float(e.get("dur", 0)) > start]
        others.sort(key=lambda e: abs(float(e["ts"]) + float(e.get("dur", 0)) - end))
        rows.append({"thread": thread(launch), "ms": float(launch["dur"]) / 1e3,
                     "others": [{"thread": thread(e), "name": str(e["name"]),
                                 "ms": float(e.get("dur", 0)) / 1e3,
                                 "end_us": float(e["ts"]) + float(e.get("dur", 0)) - end}
                                for e in others[:4]]})
    return rows


def format_blocked_calls(rows: list[dict]) -> str:
    lines = ["  host: the longest kernel launches and what other threads were in as each ended"
             " (their end relative to the launch's, us)"]
    for r in rows:
        lines.append(f"    {r['thread'][:24]:24s} launch {r['ms']:5.2f} ms")
        lines += [f"      {o['thread'][:24]:24s} {o['name'][:40]:40s} {o['ms']:6.2f} ms  end "
                  f"{o['end_us']:+8.1f} us" for o in r["others"]]
    return "\n".join(lines)


# ---- command line ----------------------------------------------------------------------------


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("trace", type=Path, help="chrome trace (.json or .json.gz) from torch.profiler")
    p.add_argument("--out", type=Path, default=Path("timeline.png"), help="PNG to write")
    p.add_argument("--title", default=None, help="figure title")
    p.add_argument("--window-ms", type=float, nargs=2, metavar=("START", "END"), default=None,
                   help="crop to this window, ms from the first GPU event (plot and summary)")
    p.add_argument("--compare", type=Path, default=None, metavar="OTHER_TRACE",
                   help="a second trace, drawn as a second panel below the first")
    p.add_argument("--top", type=int, default=0,
                   help="also print each stream's N kernels with the most GPU time")
    p.add_argument("--host", type=int, default=0,
                   help="also print the traced steps' host time and the N CPU ops with the most")
    p.add_argument("--threads", type=int, default=0,
                   help="also print the N (thread, CUDA runtime call) pairs with the most time")
    p.add_argument("--blocked", type=int, default=0,
                   help="also print the N longest kernel launches and what other threads "
                        "were in as each ended")
    p.add_argument("--labels", nargs=2, metavar=("A", "B"), default=None,
                   help="panel titles for trace and --compare (default: file names)")
    return p


def load_panel(path: Path, label: str, window_ms) -> tuple[str, list[GpuEvent], dict, float]:
    events = gpu_events(load_trace(path))
    if not events:
        raise SystemExit(f"{path}: no GPU events (kernel / gpu_memcpy / gpu_memset); was the "
                         f"profiler run with ProfilerActivity.CUDA?")
    origin = events[0].start
    if window_ms is not None:
        events = crop(events, origin + window_ms[0] * 1e3, origin + window_ms[1] * 1e3)
    return label, events, overlap_summary(events), origin


def main(args: argparse.Namespace) -> dict:
    paths = [args.trace] + ([args.compare] if args.compare is not None else [])
    labels = list(args.labels) if args.labels else [p.name for p in paths]
    if len(labels) < len(paths):
        raise SystemExit("--labels needs one label per trace")
    window = tuple(args.window_ms) if args.window_ms else None
    panels = [load_panel(p, label, window) for p, label in zip(paths, labels)]
    events_of = {label: events for label, events, _, _ in panels}
    for label, _, summary, _ in panels:
        print(format_summary(summary, label + (f" [{window[0]:g}, {window[1]:g}] ms"
                                               if window else "")))
        if args.top:
            print(format_top_kernels(events_of[label], args.top))
        trace = (load_trace(paths[labels.index(label)])
                 if args.host or args.threads or args.blocked else None)
        if args.host:
            print(format_host_summary(host_summary(trace, args.host)))
        if args.threads:
            print(format_thread_calls(thread_calls(trace, args.threads)))
        if args.blocked:
            print(format_blocked_calls(blocked_calls(trace, args.blocked)))
    plot(panels, args.out, args.title, window)
    print(f"wrote {args.out}")
    return {label: summary for label, _, summary, _ in panels}


if __name__ == "__main__":
    main(get_args_parser().parse_args())
