"""What a split lane (gpujpeg.SplitJpeg: the JPEG engines and a CUDA helper on each batch) can
decode per second on an archive, by a cost model instead of a GPU: each decoder's time for a
set of JPEGs is a cost per image plus a cost per megapixel, measured decoders alone
(bench_decoders.py on both kinds of data, H200: engines ~12 us + ~160 us/MP, CUDA helper ~43 us
+ ~470 us/MP; SplitJpeg's docstring). It replays SplitJpeg's choice of the helper's JPEGs (the
largest, only those of at least LARGE_JPEG_FACTOR x the batch's median bytes) and its steering,
batch after batch, with the helper's share counted in JPEGs (as the loader does) or in bytes,
beside the best split of each batch (an oracle) and the engines alone.

    python scripts/bench/model_split_lane.py --archive bench-data/photos-16000.tgz

Only the JPEGs the packers would send to the GPU count (decode.gpu_screen). The model leaves out
everything but the two decode calls (the lane's Python, crops, copies): it is a ceiling for one
split lane, and says how much of the lane's time the engines would wait for the helper.
"""
from __future__ import annotations

import argparse
import sys
import tarfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from imageloader.decode import gpu_screen  # noqa: E402
from imageloader.errors import Limits  # noqa: E402
from imageloader.gpujpeg import LARGE_JPEG_FACTOR  # noqa: E402

WARMUP_BATCHES = 50  # the steering settles from its start share within these


def jpeg_sizes(archive: str, limit: int) -> np.ndarray:
    """(bytes, megapixels) of the archive's JPEGs that would go to the GPU, up to `limit`."""
    rows, limits = [], Limits()
    with tarfile.open(archive) as tar:
        for member in tar:
            if not member.isfile():
                continue
            data = tar.extractfile(member).read()
            screen = gpu_screen(data, "RGB", limits)  # the header's size, once
            if screen.refused is None:
                rows.append((len(data), screen.size[0] * screen.size[1] / 1e6))
                if len(rows) == limit:
                    break
    return np.array(rows, dtype=float)


def seconds(cost: tuple[float, float], megapixels: np.ndarray) -> float:
    return cost[0] * 1e-6 * len(megapixels) + cost[1] * 1e-6 * megapixels.sum()


def helper_count(ordered: np.ndarray, share: float, by: str, factor: float) -> int:
    """How many of a batch's JPEGs (bytes, largest first) the helper takes at this share."""
    n = len(ordered)
    if n < 2 or not share:
        return 0
    if by == "jpegs":
        count = min(n - 1, max(1, round(n * share)))
    else:
        fits = np.cumsum(ordered[:n - 1]) <= share * ordered.sum()
        count = max(1, int(fits.sum()))
    return min(count, int((ordered >= factor * np.median(ordered)).sum()))


def replay(items: np.ndarray, by: str, args, rng: np.random.Generator) -> dict:
    """SplitJpeg's choice and steering over `args.batches` batches (the share starts at 0.1,
    as SplitJpeg's does), with each decoder's time from the cost model."""
    share, batch_s, waited_s, shares = 0.1, [], [], []
    for _ in range(args.batches):
        batch = items[rng.choice(len(items), args.batch, replace=False)]
        batch = batch[np.argsort(-batch[:, 0], kind="stable")]
        count = helper_count(batch[:, 0], share, by, args.factor)
        first_s = seconds(args.engine_cost, batch[count:, 1])
        helper_s = seconds(args.helper_cost, batch[:count, 1]) if count else 0.0
        batch_s.append(max(first_s, helper_s))
        waited_s.append(max(0.0, helper_s - first_s))
        shares.append(share)
        if count and first_s > 0 and helper_s > 0:
            if by == "bytes":
                mine, theirs = batch[count:, 0].sum(), batch[:count, 0].sum()
            else:
                mine, theirs = args.batch - count, count
            first_rate, helper_rate = mine / first_s, theirs / helper_s
            share = min(0.6, max(0.02, 0.7 * share + 0.3 * helper_rate / (first_rate + helper_rate)))
    kept = slice(WARMUP_BATCHES, None)
    total = sum(batch_s[kept])
    return {"img_s": args.batch * len(batch_s[kept]) / total,
            "engines_wait": sum(waited_s[kept]) / total,
            "mean_share": float(np.mean(shares[kept]))}


def oracle(items: np.ndarray, args, rng: np.random.Generator) -> float:
    """img/s with each batch split at its best count (the largest JPEGs to the helper)."""
    total = 0.0
    for _ in range(args.batches - WARMUP_BATCHES):
        batch = items[rng.choice(len(items), args.batch, replace=False)]
        megapixels = batch[np.argsort(-batch[:, 0], kind="stable"), 1]
        total += min(max(seconds(args.engine_cost, megapixels[k:]),
                         seconds(args.helper_cost, megapixels[:k]))
                     for k in range(args.batch))
    return args.batch * (args.batches - WARMUP_BATCHES) / total


def cost(text: str) -> tuple[float, float]:
    per_image, per_megapixel = (float(x) for x in text.split(","))
    return per_image, per_megapixel


def get_args_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--archive", required=True)
    parser.add_argument("--images", type=int, default=4096, help="JPEGs read from the archive")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--engine-cost", type=cost, default=(12.0, 160.0),
                        help="the engines' microseconds per image, per megapixel")
    parser.add_argument("--helper-cost", type=cost, default=(43.0, 470.0),
                        help="the CUDA helper's microseconds per image, per megapixel")
    parser.add_argument("--factor", type=float, default=LARGE_JPEG_FACTOR,
                        help="the helper takes only JPEGs of this x the median bytes or more")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(args: argparse.Namespace) -> dict:
    items = jpeg_sizes(args.archive, args.images)
    if len(items) < args.batch:
        raise SystemExit(f"{args.archive}: {len(items)} JPEGs for the GPU, fewer than a batch")
    result = {"jpegs": len(items), "mean_kb": items[:, 0].mean() / 1e3,
              "mean_mp": items[:, 1].mean(),
              "engines_alone": len(items) / seconds(args.engine_cost, items[:, 1]),
              "share_in_jpegs": replay(items, "jpegs", args, np.random.default_rng(args.seed)),
              "share_in_bytes": replay(items, "bytes", args, np.random.default_rng(args.seed)),
              "best_split": oracle(items, args, np.random.default_rng(args.seed))}
    print(f"{args.archive}: {result['jpegs']} JPEGs, mean {result['mean_kb']:.1f} KB, "
          f"{result['mean_mp']:.3f} MP")
    print(f"engines alone                  {result['engines_alone']:8,.0f} img/s")
    for by in ("jpegs", "bytes"):
        row = result[f"share_in_{by}"]
        print(f"split lane, share in {by:5s}     {row['img_s']:8,.0f} img/s  engines wait "
              f"{row['engines_wait']:5.1%} of the time, helper's mean share {row['mean_share']:.1%}")
    print(f"split lane, best split a batch {result['best_split']:8,.0f} img/s")
    return result


if __name__ == "__main__":
    main(get_args_parser().parse_args())
