"""Check that ranks split an epoch exactly once, on any archive: run it under torchrun.

    torchrun --nproc-per-node=2 scripts/check_ranks.py --data bench-data/imagenet-like.tgz

Every rank iterates the epoch(s) with eval transforms (resize + center crop: deterministic), on
its own GPU (shared round-robin when there are more ranks than GPUs: scripts/ranks.py), and
fingerprints each image it receives. Rank 0 then reads the same archive alone
(world size 1) and compares: the ranks' images must be disjoint and together be every image
once, plus the repeats that `uneven="pad"` adds so that every rank takes the same number of
steps (or minus what "drop" leaves out). Prints one JSON line per epoch; exits 1 on a failure.

With --resume-at K it then checks resume under these ranks: each rank reads one more epoch with
training transforms (shuffle, random crops, flips) whole, then again cut after K batches, its
loader state saved and loaded into a new loader that reads the rest. The cut run must give every
rank exactly the batches of the whole one: same labels in the same order, same pixels.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from imageloader import ImageLoader, Options  # noqa: E402
from ranks import setup_distributed  # noqa: E402


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", required=True, help="archive(s), paths or globs")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--size", type=int, default=64, help="crop side: small keeps it fast")
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--uneven", default="pad", choices=["pad", "drop"])
    p.add_argument("--split", default=None,
                   help="read only the images below split folders of this name (Options.split)")
    p.add_argument("--resume-at", type=int, default=0,
                   help="also check resume: cut one training epoch after this many batches")
    p.add_argument("--out", default=None, help="also write the JSON lines here (rank 0)")
    return p


def fingerprints(images: torch.Tensor, weights: torch.Tensor) -> list[int]:
    """A 64-bit fingerprint of each image's pixels, computed on its device."""
    flat = images.reshape(len(images), -1).to(torch.int64)
    return (flat * weights[: flat.shape[1]]).sum(dim=1).tolist()


def read_epoch(loader: ImageLoader, epoch: int, weights) -> tuple[list[int], int, float]:
    loader.set_epoch(epoch)
    prints, steps, t0 = [], 0, time.perf_counter()
    for images, labels in loader:
        prints.extend(f * 1000 + int(y) for f, y in zip(fingerprints(images, weights),
                                                         labels.tolist()))
        steps += 1
    return prints, steps, time.perf_counter() - t0


def make_loader(data, args, device, train: bool = False, **options) -> ImageLoader:
    if device.type == "cuda":
        # Every batch on the GPU decoder: decode="auto" would try some batches on the CPU
        # (its trial of shares), and two decoders' pixels differ by rounding, which the exact
        # fingerprints here would count as other images.
        options.setdefault("cpu_share", 0.0)
    return ImageLoader(data, batch_size=args.batch_size, size=args.size, train=train,
                       normalize=False, device=device, workers=args.workers,
                       options=Options(uneven=args.uneven, split=args.split, **options))


def main(args) -> int:
    rank, world, device = setup_distributed()
    if device is None:
        raise SystemExit("run this under torchrun with --nproc-per-node >= 2")
    cuda = device.type == "cuda"
    weights = torch.randint(1, 1 << 20, (3 * args.size * args.size,),
                            generator=torch.Generator().manual_seed(0)).to(device)
    failures, lines, everything = 0, [], None
    with make_loader(args.data, args, device) as loader:
        for epoch in range(args.epochs):
            mine, steps, seconds = read_epoch(loader, epoch, weights)
            gathered: list = [None] * world
            dist.all_gather_object(gathered, (mine, steps, seconds, len(loader), str(device)))
            if rank == 0:
                if everything is None:  # eval transforms: the same images every epoch
                    everything = reference(args, device, weights)
                line, ok = compare(gathered, everything, args)
                line.update(epoch=epoch, world=world, device=torch.cuda.get_device_name()
                            if cuda else "cpu", devices=[g[4] for g in gathered],
                            backend=dist.get_backend(), torch=torch.__version__,
                            split=args.split)
                failures += not ok
                lines.append(line)
                print(json.dumps(line), flush=True)
    if args.resume_at:
        mine = resume_check(args, device, weights)
        gathered = [None] * world
        dist.all_gather_object(gathered, mine)
        if rank == 0:
            line = {"check": "resume", "cut_after": args.resume_at, "epoch": args.epochs,
                    "ok": all(g["ok"] for g in gathered), "ranks": gathered}
            failures += not line["ok"]
            lines.append(line)
            print(json.dumps(line), flush=True)
    if rank == 0 and args.out:
        Path(args.out).write_text("".join(json.dumps(x) + "\n" for x in lines))
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failures else 0


def batch_prints(batch, weights) -> tuple[list[int], list[int]]:
    images, labels = batch
    return fingerprints(images, weights), labels.tolist()


def resume_check(args, device, weights) -> dict:
    """This rank's training epoch read whole, against the same epoch cut after
    --resume-at batches and resumed in a new loader from the state saved there."""
    epoch = args.epochs  # an epoch the checks above did not read: its own shuffle
    with make_loader(args.data, args, device, train=True) as whole:
        whole.set_epoch(epoch)
        expected = [batch_prints(b, weights) for b in whole]
    with make_loader(args.data, args, device, train=True) as first:
        first.set_epoch(epoch)
        batches = iter(first)
        done = [batch_prints(next(batches), weights) for _ in range(args.resume_at)]
        state = first.state_dict()
        batches.close()
    with make_loader(args.data, args, device, train=True) as second:
        second.load_state_dict(state)
        rest = [batch_prints(b, weights) for b in second]
    got = done + rest
    same_labels = [g[1] for g in got] == [e[1] for e in expected]
    same_pixels = sum(g == e for g, e in zip(got, expected))
    return {"ok": same_labels and same_pixels == len(expected) == len(got),
            "batches": len(expected), "before_cut": len(done), "after_resume": len(rest),
            "same_labels_in_order": same_labels, "batches_with_same_pixels": same_pixels}


def reference(args, device, weights) -> Counter:
    """Every image of the archive once, read by this process alone."""
    with make_loader(args.data, args, device, rank=0, world_size=1) as alone:
        return Counter(read_epoch(alone, 0, weights)[0])


def compare(gathered, everything: Counter, args) -> tuple[dict, bool]:
    shares = [Counter(g[0]) for g in gathered]
    steps = [g[1] for g in gathered]
    union = sum(shares, Counter())
    overlap = sum((a & b for i, a in enumerate(shares) for b in shares[i + 1:]), Counter())
    missing = everything - union
    extra = union - everything       # repeats: padding, or a sample seen twice
    images = sum(everything.values())
    world, batch = len(shares), args.batch_size
    if args.uneven == "pad":
        # Padding repeats at most the last (world - 1) batches' worth of images.
        ok = not missing and sum(extra.values()) < world * batch and len(set(steps)) == 1
    else:
        ok = not extra and sum(missing.values()) < world * batch and len(set(steps)) == 1
    line = {"ok": ok, "images": images, "per_rank": [sum(s.values()) for s in shares],
            "steps": steps, "len": [g[3] for g in gathered], "missing": sum(missing.values()),
            "repeated": sum(extra.values()), "shared_between_ranks": sum(overlap.values()),
            "img_per_s_per_rank": [round(sum(Counter(g[0]).values()) / g[2]) for g in gathered]}
    return line, ok


if __name__ == "__main__":
    sys.exit(main(get_args_parser().parse_args()))
