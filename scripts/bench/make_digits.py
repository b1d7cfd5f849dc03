"""Build the committed embedded dataset ``data/digits-{train,val}.tgz``.

Source: scikit-learn's ``load_digits()`` -- the UCI ML hand-written digits data
set (E. Alpaydin, C. Kaynak; CC BY 4.0): 1,797 8x8 grayscale images, 10 classes.

Each image is written as an 8x8 grayscale PNG (native resolution; the loader
resizes) in ImageNet layout, ``<split>/<digit>/<index:04d>.png``, where index is
the row in ``load_digits``. The archives are written straight from memory and
are byte-reproducible: sorted members, fixed metadata, gzip header mtime=0.

Needs scikit-learn (``pip install scikit-learn``); the package itself does not.

    python scripts/bench/make_digits.py
"""

import argparse
import io
import os

import numpy as np
from PIL import Image

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # a checkout, not installed
from imageloader.pack import write_reproducible_tgz  # noqa: E402

# load_digits pixel values are counts in 0..16 (4x4 blocks of a 32x32 bitmap).
DIGITS_MAX_VALUE = 16


def get_args_parser():
    parser = argparse.ArgumentParser(
        description="Build data/digits-train.tgz and data/digits-val.tgz from sklearn load_digits().",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--out-dir", default="data", help="folder that receives digits-train.tgz and digits-val.tgz")
    parser.add_argument("--val-fraction", type=float, default=0.2, help="fraction of each class held out for val")
    parser.add_argument("--seed", type=int, default=0, help="random_state of the stratified split")
    return parser


def to_uint8_image(row):
    """Scale one 0..16 digits image to 0..255 uint8, rounding rather than truncating."""
    scaled = np.rint(row.reshape(8, 8) * (255.0 / DIGITS_MAX_VALUE))
    return np.clip(scaled, 0, 255).astype(np.uint8)


def encode_png(pixels):
    buffer = io.BytesIO()
    Image.fromarray(pixels, mode="L").save(buffer, format="PNG")
    return buffer.getvalue()


def split_indices(labels, val_fraction, seed):
    from sklearn.model_selection import train_test_split

    indices = np.arange(len(labels))
    train_idx, val_idx = train_test_split(
        indices, test_size=val_fraction, random_state=seed, stratify=labels
    )
    return np.sort(train_idx), np.sort(val_idx)


def build_members(split, indices, images, labels):
    return [
        (f"{split}/{int(labels[i])}/{int(i):04d}.png", encode_png(to_uint8_image(images[i])))
        for i in indices
    ]


def main(args):
    from sklearn.datasets import load_digits

    digits = load_digits()
    images, labels = digits.data, digits.target
    train_idx, val_idx = split_indices(labels, args.val_fraction, args.seed)

    os.makedirs(args.out_dir, exist_ok=True)
    outputs = {}
    for split, indices in (("train", train_idx), ("val", val_idx)):
        path = os.path.join(args.out_dir, f"digits-{split}.tgz")
        write_reproducible_tgz(path, sorted(build_members(split, indices, images, labels)))
        counts = np.bincount(labels[indices], minlength=10).tolist()
        print(f"{path}: {len(indices)} images, {os.path.getsize(path)} bytes, per class {counts}")
        outputs[split] = path
    return outputs


if __name__ == "__main__":
    main(get_args_parser().parse_args())
