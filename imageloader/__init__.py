"""imageloader: feed GPUs from a .tgz of labeled images.

Pipeline, one module per stage: read.py -> decode.py -> batch.py -> prefetch.py, with pool.py
(page-locked buffers with owner counts), workers.py (reader and decode processes) and loader.py
(the public ImageLoader that assembles them).

Names are imported lazily: decode worker processes import this package without paying for torch.
Importing it changes no process-wide setting; `configure_cuda_queues()` is the one that GPU
decoding wants, called explicitly.
"""
from __future__ import annotations

import importlib
import os
import sys
import warnings

__version__ = "0.1.0"

MAX_CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"
GPU_DECODE_QUEUES = 32


def configure_cuda_queues(queues: int = GPU_DECODE_QUEUES) -> bool:
    """Ask CUDA for `queues` hardware work queues per GPU in this process (and the processes it
    starts), as GPU decoding (`decode="cuda"`) needs beside a fast model. Call it before CUDA
    starts, e.g. first thing in a training script. Returns True when CUDA will use `queues`
    queues; False when CUDA_DEVICE_MAX_CONNECTIONS already holds another value (the user's
    choice is kept: Megatron-LM and Transformer Engine need 1), or when CUDA already runs in
    this process (with a warning: the driver read the variable when it started).

    Why: CUDA maps every stream of a process onto a few hardware queues, 8 by default. Ours (the
    side stream, nvJPEG's own) then share queues with the training's stream, and a small decode
    kernel waits behind whole training kernels queued before it. With 32 queues, ResNet-18 fed
    by GPU decoding went from 77-80% to 91-94% of its data-on-GPU rate (H200 host; the
    benchmarks document, scripts/bench/README.md). It is a process-wide setting, so importing
    imageloader never changes it: this call does, when asked.
    """
    chosen = os.environ.get(MAX_CONNECTIONS)
    if chosen is not None:
        return chosen == str(queues)
    torch = sys.modules.get("torch")  # never imported here: CPU-only users do not pay for it
    if torch is not None and torch.cuda.is_initialized():
        warnings.warn(f"configure_cuda_queues() came after CUDA started: it keeps its default "
                      f"8 hardware queues. Call it before the first CUDA call, or set "
                      f"{MAX_CONNECTIONS}={queues} in the environment.", stacklevel=2)
        return False
    os.environ[MAX_CONNECTIONS] = str(queues)
    return True


_EXPORTS = {
    "ImageLoader": "loader", "Options": "loader", "LoaderStats": "loader",
    "Vocabulary": "vocab", "PlainCopy": "cache",
    "Prefetcher": "prefetch", "Normalize": "prefetch", "step_stream": "prefetch",
    "BufferPool": "pool",
    "Parallel": "parallel",
    "ArchiveError": "errors", "SampleError": "errors", "UnknownLabelError": "errors",
    "Limits": "errors",
    "RemoteOptions": "remote", "RemoteError": "remote",
    "WorkerError": "workers",
    "Decoder": "decode", "Augment": "decode",
}
__all__ = sorted([*_EXPORTS, "configure_cuda_queues"])


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'imageloader' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
