"""The JSON every GPU demo and benchmark script writes: device, versions, arguments, rows."""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch


def cuda_report(args, rows: list, **extra) -> dict:
    """Device and versions first, then the script's arguments and rows (NaN becomes null)."""
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, **extra,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "rows": [{k: (None if isinstance(v, float) and math.isnan(v) else v)
                      for k, v in row.items()} for row in rows]}


def write_report(result: dict, out: Path | None) -> dict:
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
        print(f"wrote {out}")
    return result
