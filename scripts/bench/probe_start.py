"""When each step of a loader's start happens: construction, iter(), the first batch.

    python scripts/bench/probe_start.py --archive bench-data/photos-16000.tgz --decode cuda

py-spy over the start (`gpu_host.sh OUT start`) says which functions take the time, summed; it
does not say which of them stand between `ImageLoader(...)` and the first batch, since the
readers, the packers and the decoding lanes work side by side. This wraps a few functions of
the package (only in this process: the children are timed by what the parent sees of them) and
prints, for the first calls of each, when it began and ended, in seconds from the start of the
construction, and by which thread. Then the whole first epoch, its rate with and without the
construction. The loader is made as bench.py makes it (batches of 256, 224 px, drop_last).
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
    ("imageloader.gpudecode", "GpuDecode._decode_all"),
    ("imageloader.gpudecode", "GpuDecode.train_crops"),
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
        if seen >= FIRST_CALLS:
            return fn(*args, **kwargs)
        calls[thread] = seen + 1
        start = now()
        try:
            return fn(*args, **kwargs)
        finally:
            EVENTS.append((start, now(), what, thread))
    return wrapper


def wrap_all() -> list[tuple[object, str, object]]:
    """Wrap WRAPPED; returns what undo() needs to put the originals back."""
    originals = []
    for module_name, qualname in WRAPPED:
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


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archive", required=True)
    p.add_argument("--decode", default="cuda", choices=["cuda", "cpu", "auto"])
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=256)
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
    originals = wrap_all()
    try:
        t_construct = now()
        loader = ImageLoader(args.archive, batch_size=args.batch_size, train=True, size=224,
                             device="cuda" if cuda else "cpu", workers=args.workers,
                             decode=args.decode, drop_last=True)
        constructed = now()
        n, first = 0, None
        with loader:
            t_iter = now()
            for images, labels in loader:
                n += len(labels)
                if first is None:
                    first = now()
            if cuda:
                torch.cuda.synchronize()
            ended = now()
            name = loader.decode_name
    finally:
        undo(originals)
    print(f"torch and CUDA ready at {imported:.2f} s; {name}, {n} images")
    for start, end, what, thread in sorted(EVENTS):
        print(f"{start:7.2f} {end:7.2f} {end - start:6.2f}  {what:34s} {thread}")
    rows = {
        "construction_s": constructed - t_construct,
        "iter_to_first_batch_s": first - t_iter,
        "first_epoch_img_per_s": n / (ended - t_iter),
        "first_epoch_with_construction_img_per_s": n / (ended - t_construct),
        "past_first_batch_img_per_s": (n - args.batch_size) / max(ended - first, 1e-9),
    }
    for key, value in rows.items():
        print(f"{key:40s} {value:10.2f}")
    result = {"archive": str(args.archive), "decode": name, "images": n, **rows,
              "events": [dict(start=s, end=e, what=w, thread=t) for s, e, w, t in sorted(EVENTS)]}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main(get_args_parser().parse_args())
