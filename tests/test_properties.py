"""Property tests: random class trees with injected faults, and a fuzz of the decoder.

1. For any archive of `<prefix>/<class>/<image>` members mixed with damaged, empty, non-image,
   macOS metadata and directory members, every epoch yields each good image exactly once with
   its label (the label is encoded in the pixels), and every other member is counted under its
   reason: samples + sum(skipped) == members in the archive.
2. The decoder never raises anything but a SampleError with a known reason, and fills the whole
   output when it succeeds (the oracle lives in fuzz_decode.py, shared with the atheris entry).
"""
from __future__ import annotations

import tarfile
import warnings
from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import add_entry, assert_labels_match_pixels, class_level, solid, write_archive
from fuzz_decode import DECODERS, check, seed_images
from imageloader import ImageLoader
from imageloader.errors import DECODE_SKIPS

NAME = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=6)
FAULTS = ("garbage", "truncated", "empty", "not_image", "macos", "directory")
READER_REASON = {"empty": "empty", "not_image": "not_image", "macos": "macos_metadata",
                 "directory": "directory"}


@st.composite
def class_trees(draw):
    classes = draw(st.lists(NAME, min_size=1, max_size=4, unique=True))
    prefix = "".join(d + "/" for d in draw(st.lists(NAME, max_size=2)))
    images = []   # (class index, width, height, format)
    for k in range(len(classes)):
        for _ in range(draw(st.integers(0, 6))):
            images.append((k, draw(st.integers(8, 40)), draw(st.integers(8, 40)),
                           draw(st.sampled_from(["JPEG", "PNG"]))))
    faults = draw(st.lists(st.tuples(st.sampled_from(FAULTS), st.integers(0, len(classes) - 1),
                                     st.binary(min_size=0, max_size=64), st.integers(1, 10**6)),
                           max_size=6))
    order = draw(st.permutations(range(len(images) + len(faults))))
    return classes, prefix, images, faults, order


def build(tmp_path, tree):
    """Write the archive. Returns its path, the vocabulary, the sorted labels of the good
    images, the expected reader skips by reason, the number of members that must fail to
    decode, and the number of members (tar entries) written."""
    classes, prefix, images, faults, order = tree
    vocab = sorted(classes)
    members, labels = [], []
    for i, (k, w, h, fmt) in enumerate(images):
        label = vocab.index(classes[k])
        ext = "jpg" if fmt == "JPEG" else "png"
        members.append(("file", f"{prefix}{classes[k]}/img{i}.{ext}",
                        solid(class_level(label), (w, h), fmt=fmt)))
        labels.append(label)
    reader_skips, decode_faults = Counter(), 0
    for j, (kind, k, junk, cut) in enumerate(faults):
        folder = f"{prefix}{classes[k]}/"
        if kind == "garbage":   # a NUL first: no image format's magic number matches
            members.append(("file", f"{folder}garbage{j}.jpg", b"\x00" + junk))
        elif kind == "truncated":
            whole = solid(class_level(0), (16, 16), fmt="PNG" if cut % 2 else "JPEG")
            members.append(("file", f"{folder}cut{j}.{'png' if cut % 2 else 'jpg'}",
                            whole[: 1 + cut % (len(whole) // 2)]))
        elif kind == "empty":
            members.append(("file", f"{folder}empty{j}.png", b""))
        elif kind == "not_image":
            members.append(("file", f"{folder}notes{j}.txt", junk))
        elif kind == "macos":
            members.append(("file", f"{folder}._img{j}.jpg", junk or b"\x00"))
        else:
            members.append(("dir", f"{folder}dir{j}", b""))
        if kind in READER_REASON:
            reader_skips[READER_REASON[kind]] += 1
        else:
            decode_faults += 1
    members = [members[i] for i in order]
    files = [(name, data) for kind, name, data in members if kind == "file"]
    dirs = [name for kind, name, _ in members if kind == "dir"]

    def add_dirs(tar):
        for name in dirs:
            add_entry(tar, name, tarfile.DIRTYPE)
    path = write_archive(tmp_path / "tree.tgz", files, extra=add_dirs)
    with tarfile.open(path) as tar:
        assert len(tar.getmembers()) == len(members)
    return path, vocab, sorted(labels), reader_skips, decode_faults, len(members)


@pytest.mark.timeout(240)
@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(tree=class_trees(), workers=st.sampled_from([2, 0]), batch_size=st.integers(1, 7),
       train=st.booleans())
def test_every_member_is_a_sample_or_a_counted_skip(tmp_path_factory, tree, workers,
                                                    batch_size, train):
    event(f"workers={workers}")
    event("with faults" if tree[3] else "no faults")
    tmp_path = tmp_path_factory.mktemp("tree")
    path, vocab, labels, reader_skips, decode_faults, n_members = build(tmp_path, tree)
    loader = ImageLoader(path, batch_size=batch_size, size=8, train=train, workers=workers,
                         vocab=vocab, normalize=False, device="cpu")
    with loader, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for _epoch in range(2):
            batches = list(loader)
            got = [int(y) for _, ys in batches for y in ys]
            assert sorted(got) == labels
            # full batches, then at most one short one (workers merge their short last batches)
            assert all(len(ys) == batch_size for _, ys in batches[:-1])
            assert all(0 < len(ys) <= batch_size for _, ys in batches[-1:])
            if batches:
                assert_labels_match_pixels(torch.cat([x for x, _ in batches]),
                                           torch.cat([y for _, y in batches]))
            skipped = Counter(loader.stats.skipped)
            decoded_skips = sum(skipped.pop(reason, 0) for reason in DECODE_SKIPS)
            assert +skipped == +reader_skips, loader.stats.skipped
            assert decoded_skips == decode_faults, loader.stats.skipped
            assert len(got) + sum(loader.stats.skipped.values()) == n_members


SEEDS = seed_images()


@st.composite
def damaged_images(draw):
    data = bytearray(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete", "overwrite"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "delete":
            del data[at: at + draw(st.integers(1, 16))]
        elif kind == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=8))
            data[at: at + len(chunk)] = chunk
    return bytes(data)


def test_decoder_accepts_every_seed():
    # The oracle must be able to pass: the undamaged seeds decode in every configuration.
    for name, data in SEEDS.items():
        for decoder in DECODERS:
            assert check(data, decoder, seed=3) is None, name


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning",
                            "ignore::UserWarning")   # Pillow on corrupt EXIF/TIFF tags
@settings(max_examples=1000, deadline=None, database=None)
@given(data=damaged_images() | st.binary(max_size=64), which=st.integers(0, len(DECODERS) - 1),
       seed=st.integers(0, 2**64 - 1))
def test_decoder_fuzz(data, which, seed):
    event(f"outcome: {check(data, DECODERS[which], seed) or 'decoded'}")
