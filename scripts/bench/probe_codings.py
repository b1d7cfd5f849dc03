"""What each GPU JPEG decoder makes of the JPEGs the packers' screen treats specially, asked
directly with the screen bypassed, against Pillow's pixels (needs CUDA; decoders that are not
installed are left out).

    python scripts/bench/probe_codings.py --out codings.json

Cases: a plain 4:2:0 photo (the yardstick); RGB-coded (an Adobe marker's transform 0, and the
same file with that segment made a comment, so that the component names R, G, B decide);
libjpeg-turbo's arithmetic-coded test image and its Huffman twin (tests/data); a photo cut at
90% and at 50% of its bytes, without its end-of-image marker only, with 64 bytes in the middle
of its scan overwritten, and with a Huffman table whose code counts are impossible; a
baseline JPEG with a scan per component, an extended-sequential one (SOF1), one whose
components are numbered from 0; grey JPEGs of five widths (1x1 sampling factors). For each
case: what `decode.gpu_screen` says, what Pillow does (as the CPU path decodes: `decode.py`
skips what raises), and per decoder, alone and as one image in a batch of 7 plain ones:
decoded (the mean absolute difference from Pillow's pixels where Pillow decodes it, or from
the uncut photo's), refused (None) or raised. The batch shows whether one bad JPEG spoils its
neighbours. The decoders keep their buffers between calls, so where one leaves rows unwritten
they hold what an earlier call put there: a cut photo may then look nearer its whole decode
than it is.

Then a sweep (`--no-sweep` leaves it out): grey JPEGs of widths 320-337 and a few more, grey
ones with 2x2 and 2x1 sampling factors (as they are, and as the packers hand them over), and
colour ones of odd widths, in one batch, through each nvImageCodec engine by one C call
(nvbatch) and by the Python API, into RGB and into grey: the mean absolute difference from
Pillow's pixels per width (which decoders, widths and output modes go wrong on grey JPEGs).
"""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from imageloader import gpujpeg  # noqa: E402
from imageloader.decode import Limits, gpu_screen, gray_sampling_at  # noqa: E402

NEIGHBOURS = 7


def get_args_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the results as JSON here")
    p.add_argument("--no-sweep", dest="sweep", action="store_false",
                   help="leave out the sweep of widths (grey and colour JPEGs)")
    return p


def jpeg(image: Image.Image, **kwargs) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90, **kwargs)
    return out.getvalue()


def textured(seed: int, size=(640, 480)) -> Image.Image:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (size[1] // 16, size[0] // 16, 3), dtype=np.uint8)
    return Image.fromarray(small).resize(size, Image.BICUBIC)


def scan_start(data: bytes) -> int:
    """Where the entropy-coded data begins: after the start-of-scan segment."""
    at = data.index(b"\xff\xda")
    return at + 2 + int.from_bytes(data[at + 2:at + 4], "big")


def numbered_from_zero(data: bytes) -> bytes:
    """A 3-component baseline JPEG with its components' ids 1, 2, 3 made 0, 1, 2 in its frame
    and scan headers (ids are only names: libjpeg decodes the same pixels)."""
    out = bytearray(data)
    frame = data.index(b"\xff\xc0") + 10  # FF C0, Lf(2), P, Y(2), X(2), Nf: the first id
    for k in range(3):
        out[frame + 3 * k] -= 1
    scan = data.index(b"\xff\xda") + 5  # FF DA, Ls(2), Ns: the first id
    for k in range(3):
        out[scan + 2 * k] -= 1
    return bytes(out)


def cases() -> dict[str, tuple[bytes, bytes | None]]:
    """name: (the JPEG, the intact JPEG whose pixels a damaged one is compared with)."""
    plain = jpeg(textured(1))
    out = {"plain 4:2:0": (plain, None)}
    adobe = jpeg(textured(2), keep_rgb=True)
    if Image.open(io.BytesIO(adobe)).info.get("adobe_transform") == 0:  # Pillow >= 10.2
        at = adobe.index(b"\xff\xee")
        out["RGB-coded, Adobe transform 0"] = (adobe, None)
        out["RGB-coded, components R G B"] = (adobe[:at] + b"\xff\xfe" + adobe[at + 2:], None)
    for name in ("huffman", "arithmetic"):
        out[f"libjpeg-turbo {name}"] = ((ROOT / "tests" / "data" / f"{name}.jpg").read_bytes(),
                                        None)
    # Valid codings rare in collections: a baseline JPEG in three scans of one component each
    # (tests/data), extended sequential (SOF1: Pillow writes it for tables past 8 bits), and
    # components numbered 0, 1, 2 (some encoders' way) instead of 1, 2, 3
    out["baseline, a scan per component"] = ((ROOT / "tests" / "data" / "scans.jpg").read_bytes(),
                                             None)
    out["extended sequential (SOF1)"] = (jpeg(textured(7), qtables=[[300] * 64] * 2), None)
    out["components numbered 0, 1, 2"] = (numbered_from_zero(jpeg(textured(8))), None)
    start = scan_start(plain)
    out["cut at 90%"] = (plain[:len(plain) * 9 // 10], plain)
    out["cut at 50%"] = (plain[:len(plain) // 2], plain)
    out["no end-of-image marker"] = (plain[:-2], plain)
    middle = (start + len(plain)) // 2
    noise = bytes(np.random.default_rng(3).integers(0, 255, 64, dtype=np.uint8))  # no 0xff
    out["64 scan bytes overwritten"] = (plain[:middle] + noise + plain[middle + 64:], plain)
    table = plain.index(b"\xff\xc4") + 5  # the first table's 16 code counts
    out["bogus Huffman table"] = (plain[:table] + bytes([255] * 16) + plain[table + 16:], plain)
    for width in (320, 333, 336, 344, 658):  # grey, 1x1 sampling factors: right on every
        # decoder (H100, 2026-12-07); the sweep has those of 2x2 and 2x1 factors
        out[f"grey {width}x241"] = (jpeg(textured(4, (width, 241)).convert("L")), None)
    return out


def pillow(data: bytes) -> tuple[np.ndarray | None, str]:
    """(H, W, 3) pixels and "decoded", or None and what Pillow raised."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return np.asarray(image.convert("RGB")), "decoded"
    except Exception as error:  # noqa: BLE001 - reported, as the CPU path would skip it
        return None, f"raised {type(error).__name__}: {str(error)[:80]}"


def decoders(device: torch.device) -> dict:
    """name: a decoder, for each one that builds here."""
    makers = {f"nvimgcodec {engine}": (lambda e=engine: gpujpeg.NvImageCodecJpeg(
        device, "RGB", engine=e)) for engine in ("hw", "cuda", "hybrid", "all")}
    makers["torchvision"] = lambda: gpujpeg.TorchvisionJpeg(device, "RGB")
    makers["torchcodec"] = lambda: gpujpeg.TorchCodecJpeg(device, "RGB")
    out = {}
    for name, make in makers.items():
        try:
            out[name] = make()
        except Exception as error:  # noqa: BLE001 - that decoder is not here
            print(f"{name}: not here ({type(error).__name__}: {str(error)[:80]})")
    return out


def mean_abs_diff(pixels: np.ndarray, reference: np.ndarray) -> float:
    """Mean absolute difference of two (H, W, 3) images; NaN where their sizes differ."""
    if pixels.shape != reference.shape:
        return float("nan")
    return round(float(np.abs(pixels.astype(int) - reference.astype(int)).mean()), 2)


def difference(image, reference: np.ndarray | None) -> float | None:
    """A decoder's (C, H, W) image on the GPU against Pillow's pixels."""
    if image is None or reference is None:
        return None
    return mean_abs_diff(torch.as_tensor(image, device="cuda").permute(1, 2, 0).cpu().numpy(),
                         reference)


def outcome(decoder, datas: list[bytes], at: int, reference) -> dict:
    """What `decoder` gives for datas[at] (and whether the others came back) in one call."""
    arrays = [np.frombuffer(d, np.uint8).copy() for d in datas]
    try:
        images = decoder.decode(arrays, fresh=True)
        torch.cuda.synchronize()
    except Exception as error:  # noqa: BLE001 - what the call raised is the answer
        return {"result": f"raised {type(error).__name__}: {str(error)[:100]}"}
    image = images[at]
    others = sum(x is not None for i, x in enumerate(images) if i != at)
    return {"result": "refused (None)" if image is None else "decoded",
            "mean_abs_diff": difference(image, reference),
            **({"others_decoded": f"{others}/{len(datas) - 1}"} if len(datas) > 1 else {})}


SWEEP_WIDTHS = (*range(320, 338), 344, 400, 658, 661)


def sweep_cases() -> dict[str, bytes]:
    """name: JPEG, grey ones of many widths (which widths go wrong?), grey ones whose frame
    header gives 2x2 or 2x1 sampling factors as they are and with 1x1 written in (as the packers
    hand them over: decode.gray_sampling_at), and odd-width colour ones (decoded into grey
    batches)."""
    out = {f"grey {w}x241": jpeg(textured(4, (w, 241)).convert("L")) for w in SWEEP_WIDTHS}
    for w in (320, 333, 336, 344, 658):
        for subsampling, factors in ((2, "2x2"), (1, "2x1")):
            data = jpeg(textured(6, (w, 241)).convert("L"), subsampling=subsampling)
            at = gray_sampling_at(data)
            out[f"grey {factors} {w}x241"] = data
            out[f"grey {factors} as 1x1 {w}x241"] = data[:at] + b"\x11" + data[at + 1:]
    out |= {f"4:2:0 {w}x243": jpeg(textured(5, (w, 243))) for w in (333, 658, 661)}
    return out


def sweep_decoders(device: torch.device) -> dict:
    """name: nvImageCodec decoder, for each engine, way of calling and output mode."""
    out = {}
    for engine in ("hw", "cuda", "hybrid", "all"):
        for one_call in (True, False):
            for mode in ("RGB", "L"):
                name = f"{engine} {'one call' if one_call else 'python'} {mode}"
                try:
                    out[name] = gpujpeg.NvImageCodecJpeg(device, mode, engine=engine,
                                                         one_call=one_call)
                except Exception as error:  # noqa: BLE001 - that way is not here
                    print(f"{name}: not here ({type(error).__name__}: {str(error)[:80]})")
    return out


def sweep(device: torch.device) -> dict:
    """Per decoder, per JPEG of sweep_cases: the mean absolute difference from Pillow's pixels
    in its output mode, all JPEGs in one call (None: not decoded)."""
    cases = sweep_cases()
    arrays = [np.frombuffer(d, np.uint8).copy() for d in cases.values()]
    report = {}
    for name, decoder in sweep_decoders(device).items():
        mode = decoder.mode
        try:
            images = decoder.decode(arrays, fresh=True)
            torch.cuda.synchronize()
        except Exception as error:  # noqa: BLE001 - what the call raised is the answer
            report[name] = f"raised {type(error).__name__}: {str(error)[:100]}"
            print(f"  sweep {name}: {report[name]}")
            continue
        row = {}
        for case, data, image in zip(cases, cases.values(), images):
            with Image.open(io.BytesIO(data)) as pil:
                reference = np.asarray(pil.convert(mode)).reshape(pil.height, pil.width, -1)
            row[case] = difference(image, reference)
        report[name] = row
        bad = {case: d for case, d in row.items() if d is None or not d <= 3}
        worst = max((d for d in row.values() if d is not None), default=None)
        print(f"  sweep {name:22} worst {worst}; off by > 3 levels or not decoded: "
              f"{bad or 'none'}")
    return report


def main(args) -> None:
    device = torch.device("cuda")
    here = decoders(device)
    neighbours = [jpeg(textured(10 + i, (320, 240))) for i in range(NEIGHBOURS)]
    report = {}
    for name, (data, intact) in cases().items():
        pixels, said = pillow(data)
        whole = pillow(intact)[0] if intact is not None else None
        reference = pixels if pixels is not None else whole
        if whole is not None and pixels is not None:  # how far Pillow's own decode strays
            said += f", mean abs diff from the intact photo {mean_abs_diff(pixels, whole)}"
        row = {"screen": gpu_screen(data, "RGB", Limits())[0] or "to the GPU", "pillow": said}
        for dname, decoder in here.items():
            row[dname] = {"alone": outcome(decoder, [data], 0, reference),
                          "in a batch": outcome(decoder, neighbours[:3] + [data] + neighbours[3:],
                                                3, reference)}
        report[name] = row
        print(f"\n{name}: screen {row['screen']}; Pillow {said}")
        for dname in here:
            print(f"  {dname:18} alone {row[dname]['alone']}  in a batch {row[dname]['in a batch']}")
    if args.sweep:
        print("\nsweep: grey JPEGs of many widths, colour ones of odd widths, one batch")
        report["sweep"] = sweep(device)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(get_args_parser().parse_args())
