"""Small real archives built in fixtures: images whose pixels encode their class."""
from __future__ import annotations

import functools
import gzip
import io
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import warnings

import numpy as np
import pytest
from PIL import Image


def class_level(label: int) -> int:
    """Gray level that encodes a class: a solid image stays solid through crop and resize."""
    return 20 + 23 * label


def encode(img: Image.Image, fmt: str = "JPEG", **kwargs) -> bytes:
    out = io.BytesIO()
    if fmt == "JPEG":
        kwargs.setdefault("quality", 95)
    img.save(out, format=fmt, **kwargs)
    return out.getvalue()


def solid(level: int, size=(40, 30), mode="RGB", fmt="JPEG") -> bytes:
    color = level if mode == "L" else (level, level, level)
    return encode(Image.new(mode, size, color), fmt)


def photo(seed: int, size=(64, 48), fmt="JPEG") -> bytes:
    """A textured image: resampling differences between code paths show up in its pixels."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
    return encode(Image.fromarray(small).resize(size, Image.BICUBIC), fmt)


def warnings_recorded_across_a_held_call(call, returns) -> tuple[list[str], object]:
    """Runs `call(stand_in)` in another thread (a lane's): `stand_in`, which `call` puts in
    place of the decoder's inner step, holds it open and returns `returns`. Meanwhile this
    thread begins recording warnings; then the call ends and this thread warns. What was
    recorded: a call that swaps the process's warning state back as it ends (catch_warnings
    is not thread-safe) loses that warning. Also what the call returned."""
    inside, leave, result = threading.Event(), threading.Event(), []

    def stand_in(*args, **kwargs):
        inside.set()
        assert leave.wait(10)
        return returns

    lane = threading.Thread(target=lambda: result.append(call(stand_in)))
    lane.start()
    assert inside.wait(10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        leave.set()
        lane.join(10)
        warnings.warn("epoch 0: skipped 1 member", UserWarning)
    return [str(w.message) for w in caught], result[0] if result else None


def bogus_huffman_jpeg(data: bytes) -> bytes:
    """`data` (a JPEG) with its first Huffman table's code counts made impossible: Pillow opens
    its headers (it skips the tables) and the packers' screen passes it, libjpeg refuses it
    when decoding ("broken data stream")."""
    at = data.index(b"\xff\xc4")
    return data[:at + 5] + bytes([255] * 16) + data[at + 21:]


def noisy_jpeg(level: int, seed: int, shape: tuple[int, int] = (500, 600)) -> bytes:
    """~230-290 KB at the default (height, width), ~0.85 bytes a pixel: a photo of higher
    quality than the benchmarks' (110 KB a photo), its mean gray level still `level` (20-235)."""
    rng = np.random.default_rng(seed)
    pixels = np.clip(level + rng.integers(-18, 19, (*shape, 3)), 0, 255).astype(np.uint8)
    return encode(Image.fromarray(pixels), "JPEG", quality=98)


CAMERA_KINDS = ("mpo", "thumbnail", "restarts")


@functools.cache
def camera_kinds_here() -> tuple[str, ...]:
    """The kinds of camera_jpeg this Pillow writes: restart markers since Pillow 10.2."""
    probe = encode(Image.new("RGB", (32, 32)), "JPEG", restart_marker_blocks=1)
    return CAMERA_KINDS if b"\xff\xdd" in probe else CAMERA_KINDS[:2]


def camera_jpeg(kind: str, image: Image.Image, other: Image.Image) -> bytes:
    """`image` as cameras and phones write JPEGs beside plain ones, with `other` where a
    decoder that took the wrong part of the file would find it:
    "mpo": a multi-picture file (phones' portrait and 3D shots), `other` its second frame;
    "thumbnail": EXIF with a JPEG thumbnail in IFD1 (most cameras), `other` that thumbnail,
    a whole JPEG (SOI, SOF, EOI) before the main frame's;
    "restarts": restart markers every 4 MCUs (DRI, many cameras' encoders)."""
    if kind == "mpo":
        out = io.BytesIO()
        image.save(out, "MPO", save_all=True, append_images=[other], quality=95)
        return out.getvalue()
    if kind == "thumbnail":
        return with_exif_thumbnail(encode(image, "JPEG"), encode(other, "JPEG", quality=80))
    if kind == "restarts":
        if kind not in camera_kinds_here():
            raise RuntimeError("this Pillow writes no restart markers: camera_kinds_here()")
        return encode(image, "JPEG", restart_marker_blocks=4)
    raise ValueError(f"kind: one of {CAMERA_KINDS}, not {kind!r}")


def with_exif_thumbnail(jpeg: bytes, thumbnail: bytes) -> bytes:
    """`jpeg` with an APP1 EXIF segment right after its SOI, as cameras write it: IFD0 (one
    entry: orientation 1) and IFD1 pointing at `thumbnail`'s bytes inside the segment."""
    import struct
    ifd0 = struct.pack("<H", 1) + struct.pack("<HHII", 0x0112, 3, 1, 1) + struct.pack("<I", 26)
    at = 8 + len(ifd0) + 2 + 2 * 12 + 4  # the thumbnail follows IFD1
    ifd1 = (struct.pack("<H", 2) + struct.pack("<HHII", 0x0201, 4, 1, at)
            + struct.pack("<HHII", 0x0202, 4, 1, len(thumbnail)) + struct.pack("<I", 0))
    tiff = b"II*\x00" + struct.pack("<I", 8) + ifd0 + ifd1 + thumbnail
    body = b"Exif\x00\x00" + tiff
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body + jpeg[2:]


def add_file(tar: tarfile.TarFile, name: str, data: bytes, **attrs) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1_700_000_000
    for key, value in attrs.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data))


def add_entry(tar: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    tar.addfile(info)


def write_archive(path, files: list[tuple[str, bytes]], *, compress: bool = True,
                  extra=None, fmt=tarfile.PAX_FORMAT) -> str:
    """Write (name, data) files, then call extra(tar) for special entries."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as tar:
        for name, data in files:
            add_file(tar, name, data)
        if extra is not None:
            extra(tar)
    data = raw.getvalue()
    if compress:
        data = gzip.compress(data, mtime=0)
    with open(path, "wb") as f:
        f.write(data)
    return str(path)


def labeled_files(classes: int, per_class: int, *, prefix="train", size=(40, 30),
                  fmt="JPEG") -> list[tuple[str, bytes]]:
    """Class folders c00..cNN; images of class k are solid gray `class_level(k)`."""
    files = []
    for k in range(classes):
        for i in range(per_class):
            ext = "png" if fmt == "PNG" else "jpg"
            files.append((f"{prefix}/c{k:02d}/img{i:03d}.{ext}",
                          solid(class_level(k), size, fmt=fmt)))
    return files


@pytest.fixture
def labeled_archive(tmp_path):
    """5 classes x 7 images, members interleaved so archive order is not class order."""
    files = labeled_files(5, 7)
    files = files[::2] + files[1::2]
    return write_archive(tmp_path / "train.tgz", files)


def assert_labels_match_pixels(images_uint8, labels, tolerance: int = 6) -> None:
    """Every image's mean gray level must be the level of its label."""
    means = images_uint8.float().mean(dim=(1, 2, 3))
    expected = 20 + 23 * labels.float()
    worst = (means - expected).abs().max().item()
    assert worst <= tolerance, f"pixels do not match labels: max |mean - level| = {worst}"


def torchrun(script, *flags: str, ranks: int = 2, timeout: int = 170, gpus: int = 1):
    """Run a script under torchrun on this host. With CUDA the ranks see `gpus` GPUs: by
    default ONE, so they outnumber the GPUs (the case that used to ask for cuda:1 on a one-GPU
    host)."""
    import torch

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}  # this checkout's package
    if torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES",
                                 ",".join(map(str, range(torch.cuda.device_count()))))
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible.split(",")[:gpus])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
         "--master-port", str(port), str(script), *flags],
        capture_output=True, text=True, timeout=timeout, env=env)


def numbered_files(n: int, bad=(), prefix: str = "t") -> list[tuple[str, bytes]]:
    """Gray PNG i is solid 10 + 3 i (`ids` reads it back), class i % 3; members in `bad` are
    not images at all (they fail to decode and are counted as skipped)."""
    return [(f"{prefix}/c{i % 3}/{i:03d}.png",
             b"broken png" if i in bad else solid(10 + 3 * i, fmt="PNG", mode="L"))
            for i in range(n)]


def ids(images) -> list[int]:
    """Which numbered_files member each image is, from its gray level."""
    return [round((v - 10) / 3) for v in images.float().mean(dim=(1, 2, 3)).tolist()]


def read_members(path) -> dict:
    """{member name: bytes} of a .tgz or .tar, in archive order."""
    with tarfile.open(path, "r:*") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def gzip_header_mtime(path) -> int:
    with open(path, "rb") as f:
        return int.from_bytes(f.read(8)[4:8], "little")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for torchrun's rendezvous)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Clock:
    """A clock the test sets (`now`, in seconds), for code that takes a `clock` callable."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def write_with_holes(path, data: bytes, block: int = 4096) -> bool:
    """Write data with each all-zero block left a hole (seeked over), as cp --sparse=always
    does; whether this file system kept holes (a file tar -S then stores as sparse)."""
    with open(path, "wb") as f:
        for at in range(0, len(data), block):
            piece = data[at:at + block]
            if piece.count(0) == len(piece):
                f.seek(len(piece), io.SEEK_CUR)
            else:
                f.write(piece)
        f.truncate(len(data))
    return os.stat(path).st_blocks * 512 < len(data)


def sparse_archive(tmp_path, fmt: str) -> tuple[str, dict[str, bytes]]:
    """A .tgz that GNU tar made with -S of a folder holding a BMP with holes (mostly black)
    beside a plain JPEG: "gnu" (its own sparse headers) or "posix-0.0" / "-0.1" / "-1.0" (pax
    sparse versions). The archive and the files' bytes by member name; skips the test where
    tar or holes are missing."""
    if shutil.which("tar") is None:
        pytest.skip("needs the tar program")
    root = tmp_path / f"src-{fmt}"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    image = Image.new("RGB", (400, 400))
    image.paste((200, 10, 10), (0, 0, 50, 50))
    files = {"a/holes.bmp": encode(image, "BMP"), "b/photo.jpg": photo(1)}
    (root / "b/photo.jpg").write_bytes(files["b/photo.jpg"])
    if not write_with_holes(root / "a/holes.bmp", files["a/holes.bmp"]):
        pytest.skip("this file system keeps no holes")
    options = ["--format=gnu"] if fmt == "gnu" else \
        ["--format=posix", f"--sparse-version={fmt.split('-')[1]}"]
    out = tmp_path / f"sparse-{fmt}.tgz"
    subprocess.run(["tar", *options, "-cSzf", str(out), "-C", str(root), "a", "b"], check=True)
    with tarfile.open(out) as tar:
        assert tar.getmember("a/holes.bmp").issparse()
    return str(out), files
