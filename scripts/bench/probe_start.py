"""When each step of a loader's start happens: construction, iter(), the first batch.

    python scripts/bench/probe_start.py --archive bench-data/photos-16000.tgz --decode cuda

py-spy over the start (`gpu_host.sh OUT start`) says which functions take the time, summed; it
does not say which of them stand between `ImageLoader(...)` and the first batch, since the
readers, the packers and the decoding lanes work side by side. This wraps a few functions of
the package (only in this process: the children are timed by what the parent sees of them) and
prints, for the first calls of each, when it began and ended, in seconds from the start of the
construction, and by which thread; for every call of each, per thread, how many and how long
(the first three, the median of the rest, the slowest). Then each epoch (`--epochs`): its rate
with and without the construction, and by tenths of its batches, so that a first epoch slower
than the later ones says where it loses (its start, the first decodes, its end, or throughout).
The loader is made as bench.py makes it (batches of 256, 224 px, drop_last).
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

T0 = time.perf_counter()
EVENTS: list[tuple[float, float, str, str]] = []   # (start, end, what, thread)
DURATIONS: dict[tuple[str, str], list[float]] = {}  # (what, thread): every call's seconds
FIRST_CALLS = 3  # of each wrapped function, per thread

# module, qualified name: the steps of a start (the first calls of each are recorded)
WRAPPED = [
    ("imageloader.loader", "plain_copies"),
    ("imageloader.loader", "Vocabulary.from_archives"),
    ("imageloader.loader", "_choose_decode"),
    ("imageloader.loader", "gpu_lanes"),
    ("imageloader.gpujpeg", "NvImageCodecJpeg.__init__"),
    ("imageloader.gpujpeg", "_engines_decoder"),
    ("imageloader.loader", "ImageLoader._make_pool"),
    ("imageloader.loader", "ImageLoader._make_producer"),
    ("imageloader.workers", "WorkerPool._begin"),
    ("imageloader.workers", "WorkerPool._handle"),
    ("imageloader.prefetch", "Prefetcher._transform"),
    ("imageloader.gpudecode", "GpuDecode._decode_in_one_call"),
    ("imageloader.gpudecode", "GpuDecode._crop_by_address"),
    ("imageloader.epoch", "EpochIterator.__next__"),
]


def now() -> float:
    return time.perf_counter() - T0


def recording(what: str, fn):
    calls: dict[str, int] = {}

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        thread = threading.current_thread().name
        seen = calls.get(thread, 0)
        calls[thread] = seen + 1
        start = now()
        try:
            return fn(*args, **kwargs)
        finally:
            end = now()
            DURATIONS.setdefault((what, thread), []).append(end - start)
            if seen < FIRST_CALLS:
                EVENTS.append((start, end, what, thread))
    return wrapper


def wrap_all(targets=WRAPPED) -> list[tuple[object, str, object]]:
    """Wrap each (module, qualified name) of `targets`; returns what undo() needs to put the
    originals back."""
    originals = []
    for module_name, qualname in targets:
        module = importlib.import_module(module_name)
        owner, _, name = qualname.rpartition(".")
        holder = getattr(module, owner) if owner else module
        original = holder.__dict__[name] if isinstance(holder, type) else getattr(holder, name)
        originals.append((holder, name, original))
        setattr(holder, name, recording(qualname, getattr(holder, name)))
    return originals


def undo(originals) -> None:
    for holder, name, original in reversed(originals):
        setattr(holder, name, original)


def call_summary() -> list[dict]:
    """Per wrapped function and thread: calls, total seconds, the first three, the median and
    90th percentile of the rest and the slowest call."""
    rows = []
    for (what, thread), seconds in sorted(DURATIONS.items()):
        rest = sorted(seconds[FIRST_CALLS:])
        rows.append(dict(what=what, thread=thread, calls=len(seconds), total_s=sum(seconds),
                         first_s=seconds[:FIRST_CALLS],
                         median_rest_s=rest[len(rest) // 2] if rest else None,
                         p90_rest_s=rest[int(0.9 * (len(rest) - 1))] if rest else None,
                         slowest_s=max(seconds)))
    return rows


def by_tenths(arrivals: list[float], start: float, batch_size: int) -> list[float]:
    """img/s over each tenth of an epoch's batches (by count), from the batch before each
    tenth (the first tenth from `iter()`)."""
    n = len(arrivals)
    edges = [round(n * k / 10) for k in range(11)]
    rates = []
    for lo, hi in zip(edges, edges[1:]):
        if hi <= lo:
            continue
        since = start if lo == 0 else arrivals[lo - 1]
        rates.append(batch_size * (hi - lo) / max(arrivals[hi - 1] - since, 1e-9))
    return rates


def epoch_row(images: int, t_iter: float, arrivals: list[float], ended: float,
              batch_size: int) -> dict:
    first = arrivals[0]
    return {
        "images": images,
        "seconds": ended - t_iter,
        "iter_to_first_batch_s": first - t_iter,
        "img_per_s": images / (ended - t_iter),
        "past_first_batch_img_per_s": (images - batch_size) / max(ended - first, 1e-9),
        "img_per_s_by_tenths": by_tenths(arrivals, t_iter, batch_size),
    }


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archive", required=True)
    p.add_argument("--decode", default="cuda", choices=["cuda", "cpu", "auto"])
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1, help="the later ones for comparison")
    p.add_argument("--out", default=None, help="JSON of the events and rates")
    return p


def main(args) -> dict:
    import torch
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.init()  # CUDA's own start is the training script's, not the loader's
    imported = now()
    from imageloader import ImageLoader
    EVENTS.clear()
    DURATIONS.clear()
    originals = wrap_all()
    try:
        t_construct = now()
        loader = ImageLoader(args.archive, batch_size=args.batch_size, train=True, size=224,
                             device="cuda" if cuda else "cpu", workers=args.workers,
                             decode=args.decode, drop_last=True)
        constructed = now()
        epochs = []
        with loader:
            for _ in range(args.epochs):
                n, arrivals, t_iter = 0, [], now()
                for images, labels in loader:
                    n += len(labels)
                    arrivals.append(now())
                if cuda:
                    torch.cuda.synchronize()
                epochs.append(epoch_row(n, t_iter, arrivals, now(), args.batch_size))
            name = loader.decode_name
    finally:
        undo(originals)
    first_epoch = epochs[0]
    n = first_epoch["images"]
    print(f"torch and CUDA ready at {imported:.2f} s; {name}, {n} images")
    for start, end, what, thread in sorted(EVENTS):
        print(f"{start:7.2f} {end:7.2f} {end - start:6.2f}  {what:34s} {thread}")
    calls = call_summary()
    print("calls, per thread: count, total s, the first three, median of the rest, slowest")
    for c in calls:
        median = "-" if c["median_rest_s"] is None else f"{c['median_rest_s']:.3f}"
        print(f"{c['what']:34s} {c['thread']:24s} {c['calls']:5d} {c['total_s']:7.2f} "
              f"{' '.join(f'{x:.3f}' for x in c['first_s']):20s} {median:>6s} "
              f"{c['slowest_s']:.3f}")
    rows = {
        "construction_s": constructed - t_construct,
        "iter_to_first_batch_s": first_epoch["iter_to_first_batch_s"],
        "first_epoch_img_per_s": first_epoch["img_per_s"],
        "first_epoch_with_construction_img_per_s":
            n / (constructed - t_construct + first_epoch["seconds"]),
        "past_first_batch_img_per_s": first_epoch["past_first_batch_img_per_s"],
    }
    for key, value in rows.items():
        print(f"{key:40s} {value:10.2f}")
    for k, row in enumerate(epochs):
        print(f"epoch {k}: {row['img_per_s']:8.0f} img/s from iter(), "
              f"{row['past_first_batch_img_per_s']:8.0f} past its first batch "
              f"({row['iter_to_first_batch_s']:.2f} s); by tenths: "
              + " ".join(f"{r:.0f}" for r in row["img_per_s_by_tenths"]))
    result = {"archive": str(args.archive), "decode": name, "images": n, **rows,
              "epochs": epochs, "calls": calls,
              "events": [dict(start=s, end=e, what=w, thread=t) for s, e, w, t in sorted(EVENTS)]}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main(get_args_parser().parse_args())
