"""Byte-reproducible .tgz writing shared by the archive-building scripts.

Tar headers carry a fixed mtime, uid/gid 0, no user/group names and mode 0644; the gzip header
carries mtime 0 and no file name: the same members give the same bytes on every machine.
"""
from __future__ import annotations

import gzip
import io
import tarfile
from typing import Iterable

FIXED_MTIME = 0


def reproducible_tarinfo(name: str, size: int) -> tarfile.TarInfo:
    """A TarInfo whose metadata is the same on every machine and every run."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = FIXED_MTIME
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_reproducible_tgz(path, members: Iterable[tuple[str, bytes]],
                           compresslevel: int = 9) -> int:
    """Write (name, bytes) members in the given order; returns the payload bytes."""
    payload = 0
    with open(path, "wb") as raw:
        # gzip stores a timestamp (and optionally a file name) in its header; pin both.
        with gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0,
                           compresslevel=compresslevel) as gz:
            with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for name, data in members:
                    tar.addfile(reproducible_tarinfo(name, len(data)), io.BytesIO(data))
                    payload += len(data)
    return payload
