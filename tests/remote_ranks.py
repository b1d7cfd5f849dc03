"""One rank of test_remote's two-node run: two epochs from one URL, then what it saw.

    torchrun --nnodes=2 --node-rank=N --nproc-per-node=2 ... remote_ranks.py URL CACHE OUT
"""
from __future__ import annotations

import json
import os
import sys
import urllib.request

import torch.distributed as dist

from imageloader import ImageLoader, Options, read, remote
from imageloader.remote import RemoteOptions


def main(url: str, cache: str, out: str) -> None:
    remote.REGION_BYTES, read.RAPIDGZIP_CHUNK = 1 << 20, 32 << 10  # as test_remote's fixture
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    server = url.rsplit("/", 1)[0]

    def mark(name: str) -> None:  # the server notes its counts: bytes sent between two marks
        dist.barrier()
        if rank == 0:
            urllib.request.urlopen(f"{server}/_mark/{name}").read()
        dist.barrier()

    options = Options(lookahead=False, remote=RemoteOptions(cache_dir=cache))
    loader = ImageLoader(url, batch_size=8, size=8, mode="L", device="cpu", normalize=False,
                         seed=3, workers=1, options=options)
    mark("built")
    seen, fetched = [], []
    for epoch in range(2):
        mark(f"before{epoch}")
        batches = [[round(v - 10) for v in images.float().mean(dim=(1, 2, 3)).tolist()]
                   for images, _ in loader]
        # Ranks with fewer batches repeat their last one (Options.uneven): not new images.
        seen.append(sum(batches[:len(batches) - loader.stats.padded], []))
        fetched.append(loader.stats.fetched)
        mark(f"epoch{epoch}")
    loader.close()
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump({"rank": rank, "ids": seen, "fetched": fetched,
                   "parts": len(loader.plan.parts)}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
