"""imageloader: feed GPUs from a .tgz of labeled images.

Pipeline, one module per stage: read.py -> decode.py -> batch.py -> prefetch.py, with pool.py
(page-locked buffers with owner counts), workers.py (reader and decode processes) and loader.py
(the public ImageLoader that assembles them).

Names are imported lazily: decode worker processes import this package without paying for torch.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "ImageLoader": "loader", "Options": "loader", "LoaderStats": "loader",
    "Vocabulary": "vocab",
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
