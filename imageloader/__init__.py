"""imageloader: feed GPUs from a .tgz of labeled images.

Pipeline, one module per stage: read.py -> decode.py -> batch.py -> prefetch.py, with pool.py
(page-locked buffers with owner counts), workers.py (reader and decode processes) and loader.py
(the public ImageLoader that assembles them).

Names are imported lazily: decode worker processes import this package without paying for torch.
"""
from __future__ import annotations

import importlib
import os
import sys

__version__ = "0.1.0"

# CUDA maps every stream of a process onto a few hardware work queues: 8 by default. Ours (the
# side stream, nvJPEG's own) then share queues with the training's stream, and a small decode
# kernel waits behind whole training kernels queued before it. With 32 queues, ResNet-18 fed by
# GPU decoding went from 77-80% to 91-94% of its data-on-GPU rate (H200 host,
# scripts/probe_contention.py, scripts/results/h200-probe-queues). The driver reads the
# variable when CUDA starts, so it is set here, at import, unless the user set it or CUDA is
# already running in this process (ImageLoader then says so).
MAX_CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"
if MAX_CONNECTIONS not in os.environ and not (
        "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized()):
    os.environ[MAX_CONNECTIONS] = "32"

_EXPORTS = {
    "ImageLoader": "loader", "Options": "loader", "LoaderStats": "loader",
    "Vocabulary": "vocab", "PlainCopy": "cache",
    "Prefetcher": "prefetch", "Normalize": "prefetch",
    "BufferPool": "pool",
    "Parallel": "parallel",
    "ArchiveError": "errors", "SampleError": "errors", "UnknownLabelError": "errors",
    "Limits": "errors",
    "WorkerError": "workers",
    "Decoder": "decode", "Augment": "decode",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'imageloader' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
