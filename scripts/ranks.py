"""Which device and process-group backend each torchrun rank uses (train_resnet.py, check_ranks.py).

One GPU per rank is the normal case: local rank r takes cuda:r and the ranks talk over NCCL.
Users also run torchrun with more processes than the host has GPUs, to debug a multi-rank run
on a small machine; cuda:r then does not exist ("invalid device ordinal"). Instead the ranks
share the GPUs round-robin (cuda:<r mod GPUs>) and talk over gloo, because NCCL refuses two
ranks on one GPU ("Duplicate GPU detected"). Gloo reduces CUDA tensors through the host: fine
for debugging, not for speed. Every host must make the same choice (torchrun starts the same
number of processes on each; give them the same number of GPUs).
"""
from __future__ import annotations

import logging
import os

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)


def rank_device(local_rank: int, local_world: int, gpus: int) -> tuple[str, str]:
    """(device, backend) of local rank `local_rank` of `local_world` ranks on a host with
    `gpus` visible GPUs."""
    if gpus == 0:
        return "cpu", "gloo"
    if local_world <= gpus:
        return f"cuda:{local_rank}", "nccl"
    return f"cuda:{local_rank % gpus}", "gloo"


def setup_distributed(use_cuda: bool = True) -> tuple[int, int, torch.device | None]:
    """Under torchrun (WORLD_SIZE > 1): join the process group on this rank's device and return
    (rank, world size, device). Outside torchrun: (0, 1, None), nothing is started."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, None
    local = int(os.environ.get("LOCAL_RANK", "0"))
    # torchrun sets LOCAL_WORLD_SIZE; a launcher that does not: assume one host (the safe side)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    gpus = torch.cuda.device_count() if use_cuda else 0
    device, backend = rank_device(local, local_world, gpus)
    if device.startswith("cuda"):
        # This rank's GPU only: no context on GPU 0 from the other ranks.
        torch.cuda.set_device(torch.device(device))
        if backend == "gloo" and local == 0:
            log.warning("%d ranks share %d GPU(s) on this host: each rank uses cuda:<local "
                        "rank mod %d> and the gloo backend (NCCL refuses two ranks on one GPU). "
                        "Fine for debugging; slow for training.", local_world, gpus, gpus)
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size(), torch.device(device)


def pin_local_rank_cores() -> list[int] | None:
    """Under torchrun, keep this rank on its own contiguous share of the cores this process may
    use (1/LOCAL_WORLD_SIZE of them); the loader's processes, started after, inherit it. Without
    it the ranks' workers and readers all roam over all the cores. Returns the cores kept, or
    None where there is nothing to split (one local rank, or fewer cores than ranks)."""
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if local_world <= 1:
        return None
    cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // local_world
    if share == 0:
        return None
    local = int(os.environ.get("LOCAL_RANK", "0"))
    mine = cores[local * share:(local + 1) * share]
    os.sched_setaffinity(0, mine)
    return mine
