"""What slows training when JPEGs are decoded on the GPU beside it: the GIL, or the GPU?

    python scripts/probe_contention.py --archive bench-data/imagenet-like.tgz --model resnet18

With decode="cuda" the training process itself calls nvJPEG (a thread of the prefetcher). This
times training steps on data already on the GPU (bench.py's Trainer and ceiling batches):
alone; beside a THREAD of the same process that decodes 256-JPEG batches with
torchvision.io.decode_jpeg as fast as it can on a side stream, under several thread switch
intervals (sys.setswitchinterval); beside a separate PROCESS doing the same (it shares the GPU,
not the GIL); and fed by ImageLoader(decode="cuda") with Options(switch_interval=each). Also a
pure-Python loop beside the decoding thread: how fast nvJPEG still decodes when another thread
always wants the GIL. One JSON line per row.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import multiprocessing as mp
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def load_jpegs(archive: str, n: int = 256) -> list[bytes]:
    from imageloader.read import iter_members
    datas = []
    for member in iter_members(archive, skipped=Counter()):
        if member.name.lower().endswith((".jpg", ".jpeg")):
            datas.append(bytes(member.data))
        if len(datas) == n:
            break
    return datas


def decode_paced(datas: list[bytes], rate: float, stop, done: list) -> None:
    """decode_jpeg batches on a side stream at `rate` images/s (or as fast as it can) until
    `stop` is set; `done` receives (images, seconds)."""
    from torchvision.io import decode_jpeg
    tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas]
    stream = torch.cuda.Stream()
    interval = len(tensors) / rate if rate > 0 else 0.0
    images, t0 = 0, time.perf_counter()
    next_start = t0
    with torch.cuda.stream(stream):
        while not stop.is_set():
            decode_jpeg(tensors, device="cuda")
            images += len(tensors)
            next_start += interval
            pause = next_start - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            else:
                next_start = time.perf_counter()  # behind: no catching up in bursts
        stream.synchronize()
    done.append((images, time.perf_counter() - t0))


def _process_main(archive: str, rate: float, ready, stop, result) -> None:
    datas = load_jpegs(archive)
    done: list = []
    ready.set()
    decode_paced(datas, rate, stop, done)
    result.put(done[0])


def train_rate(trainer, batches, seconds: float, warmup: int = 10) -> float:
    for _ in range(warmup):
        trainer.step(*next(batches))
    torch.cuda.synchronize()
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        images, labels = next(batches)
        trainer.step(images, labels)
        steps += 1
    torch.cuda.synchronize()
    return steps * len(labels) / (time.perf_counter() - t0)


def count_rate(seconds: float) -> float:
    """Iterations per second of a pure-Python loop: it needs the GIL and nothing else."""
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(1000):
            n += 1
    return n / (time.perf_counter() - t0)


def beside_thread(datas, rate, work, threads: int = 1):
    """`work()` beside `threads` decoding threads; returns its value and their total img/s."""
    stop, done = threading.Event(), []
    running = [threading.Thread(target=decode_paced, args=(datas, rate, stop, done))
               for _ in range(threads)]
    for thread in running:
        thread.start()
    time.sleep(0.5)  # the decoder's first (slow, allocating) batches out of the way
    try:
        value = work()
    finally:
        stop.set()
        for thread in running:
            thread.join()
    return value, sum(images / seconds for images, seconds in done)


def beside_process(archive, rate, work):
    ctx = mp.get_context("spawn")
    ready, stop, result = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_process_main, args=(archive, rate, ready, stop, result))
    proc.start()
    ready.wait(120)
    time.sleep(2.0)  # CUDA context and first batches
    try:
        value = work()
    finally:
        stop.set()
        images, seconds = result.get(timeout=60)
        proc.join(30)
    return value, images / seconds


def with_interval(seconds: float | None, work):
    """Run `work` with the interpreter's thread switch interval at `seconds` (None: as is)."""
    previous = sys.getswitchinterval()
    if seconds is not None:
        sys.setswitchinterval(seconds)
    try:
        return work()
    finally:
        sys.setswitchinterval(previous)


def loader_rate(args, trainer, decode: str = "cuda", workers: int | None = None, **options
                ) -> dict:
    """Training fed by ImageLoader(decode=..., workers=..., options=Options(...)): img/s,
    data-wait %, the machine's idle cores during the timed window and, with
    cpu_share="auto", the shares it chose (first and last ten windows)."""
    from bench import forever
    from imageloader import ImageLoader, Options
    from imageloader.share import IdleCores
    with ImageLoader(args.archive, batch_size=args.batch_size, train=True, size=224,
                     device="cuda", decode=decode, workers=workers, drop_last=True,
                     options=Options(**options)) as loader:
        batches = forever(loader)
        for _ in range(args.warmup):
            trainer.step(*next(batches))
        torch.cuda.synchronize()
        images = 0
        wait = 0.0
        idle = IdleCores()
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            t1 = time.perf_counter()
            x, y = next(batches)
            wait += time.perf_counter() - t1
            trainer.step(x, y)
            images += len(y)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        idle_cores = idle.sample()
        history = [round(share, 2) for share, _, _ in getattr(loader.cpu_share, "history", ())]
    row = {"img_per_s": images / seconds, "data_wait_pct": round(100 * wait / seconds, 1),
           "idle_cores": None if idle_cores is None else round(idle_cores, 1)}
    if history:
        row["shares"] = history[:10] + ["..."] + history[-10:] if len(history) > 20 else history
    return row


def main(args) -> list[dict]:
    from bench import Trainer, ceiling_batches
    datas = load_jpegs(args.archive)
    trainer = Trainer(args.model, 100)
    batches = ceiling_batches(args, 100)
    parts = set(args.parts.split(","))
    rows = []

    def emit(row):
        row.update(device=torch.cuda.get_device_name(), torch=torch.__version__,
                   max_connections=os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "8 (default)"))
        print(json.dumps(row), flush=True)
        rows.append(row)

    def train():
        return train_rate(trainer, batches, args.seconds)
    alone = train()
    emit({"row": f"{args.model} training alone", "img_per_s": round(alone)})
    def fed(shown: dict, **options):
        """Training fed by ImageLoader(**options), emitted with `shown` as the row's settings."""
        fed_row = loader_rate(args, trainer, **options)
        got = fed_row.pop("img_per_s")
        emit({"row": f"{args.model} training from ImageLoader("
                     f"decode='{options.get('decode', 'cuda')}')", **shown,
              "img_per_s": round(got), "pct_of_alone": round(100 * got / alone, 1), **fed_row})

    # The loader rows first: a GPU-decode loader created after the raw decode threads below
    # crashed once; the cause found later (close() freed buffers under a suspended
    # iteration's threads, fixed in c647f0b) may explain it, the order is kept anyway.
    for interval in args.intervals if "loader" in parts else ():
        fed({"switch_interval": interval},
            switch_interval=interval if interval != 0.005 else None)
    for share in args.cpu_shares if "shares" in parts else ():
        fed({"cpu_share": share}, cpu_share=share)
    for options in [json.loads(o) for o in args.options] * 2 if "options" in parts else ():
        fed({"options": options}, **options)
    for threads in (1, 2, 3) if "threads" in parts else ():
        # Does nvJPEG's latency beside training overlap across callers?
        _, decoded = beside_thread(datas, 0, lambda: time.sleep(args.seconds / 2), threads)
        emit({"row": f"nvJPEG alone in {threads} thread(s)", "decoded_img_per_s": round(decoded)})
        got, decoded = beside_thread(datas, 0, train, threads)
        emit({"row": f"{args.model} training + nvJPEG in {threads} thread(s)",
              "img_per_s": round(got), "pct_of_alone": round(100 * got / alone, 1),
              "decoded_img_per_s": round(decoded)})
    if "process" in parts:
        got, decoded = beside_process(args.archive, 0, train)
        emit({"row": f"{args.model} training + nvJPEG in a process", "img_per_s": round(got),
              "pct_of_alone": round(100 * got / alone, 1), "decoded_img_per_s": round(decoded)})
    counter = count_rate(args.seconds / 2)
    for interval in args.intervals if "intervals" in parts else ():
        got, decoded = with_interval(interval, lambda: beside_thread(
            datas, 0, lambda: count_rate(args.seconds / 2)))
        emit({"row": "Python loop + nvJPEG in a thread", "switch_interval": interval,
              "pct_of_alone": round(100 * got / counter, 1), "decoded_img_per_s": round(decoded)})
        got, decoded = with_interval(interval, lambda: beside_thread(datas, 0, train))
        emit({"row": f"{args.model} training + nvJPEG in a thread", "switch_interval": interval,
              "img_per_s": round(got), "pct_of_alone": round(100 * got / alone, 1),
              "decoded_img_per_s": round(decoded)})
    return rows


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archive", default="bench-data/imagenet-like.tgz")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--seconds", type=float, default=6.0, help="per timed row")
    p.add_argument("--warmup", type=int, default=10,
                   help="untimed steps of each loader row (more than the loader's buffers "
                        "hold, to time the steady state)")
    p.add_argument("--parts", default="loader,threads,process,intervals",
                   help="loader: training fed by ImageLoader, per switch interval; shares: "
                        "the same per --cpu-shares; options: the same per --options; "
                        "threads: decode_jpeg in 1-3 threads beside training; process: in "
                        "another process; intervals: beside a Python loop and training, per "
                        "switch interval")
    p.add_argument("--cpu-shares", type=float, nargs="+", default=[0.0, 0.2, 0.35, 0.5],
                   help="Options.cpu_share values for the 'shares' part")
    p.add_argument("--options", nargs="+", default=['{}', '{"worker_nice": 10}'],
                   help="JSON objects of Options fields (and 'decode', 'workers') for the "
                        "'options' part; the list runs twice, so that drift between rows "
                        "shows as a spread")
    p.add_argument("--intervals", type=float, nargs="+", default=[0.005, 0.001, 0.0005, 0.0002],
                   help="sys.setswitchinterval values to compare (0.005 is Python's default)")
    return p


if __name__ == "__main__":
    faulthandler.enable()  # a crash (it segfaulted before c647f0b) then says where
    from imageloader import configure_cuda_queues
    configure_cuda_queues()  # 32 queues unless the environment says (gpu_probe_queues.sh: 8)
    main(get_args_parser().parse_args())
