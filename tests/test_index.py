"""Regions: readers entering one archive mid-way must see exactly what one pass sees."""
from __future__ import annotations

import dataclasses
import os
import random
import shutil
import subprocess
from collections import Counter

import pytest
import torch

from conftest import add_file, photo, solid, write_archive
from imageloader import ImageLoader, Options, index, read
from imageloader.read import available_inflaters, iter_members
from imageloader.vocab import archive_regions, sidecar_path

GZIP_REGIONS = "rapidgzip" in available_inflaters()


@pytest.fixture(autouse=True)
def small_regions(monkeypatch):
    # Test archives are a few MB: regions of 256 KiB give several of them.
    monkeypatch.setattr(index, "REGION_BYTES", 256 << 10)
    monkeypatch.setattr(read, "RAPIDGZIP_CHUNK", 256 << 10)  # and checkpoints that often


def padded_archive(path, n: int = 60, compress: bool = True, extra=None) -> str:
    """PNG i is solid gray 10 + 3 i (its pixels say which member it was), each followed by
    ~60 KB of incompressible non-image data so that the archive spans several regions."""
    rng = random.Random(0)
    files = []
    for i in range(n):
        files.append((f"t/c{i % 3}/{i:03d}.png", solid(10 + 3 * i, fmt="PNG", mode="L")))
        files.append((f"t/c{i % 3}/{i:03d}.txt", rng.randbytes(60_000)))
    return write_archive(path, files, compress=compress, extra=extra)


def walk(source, **kw):
    skipped = Counter()
    found = [(m.index, m.name, m.label, m.data) for m in iter_members(source, skipped=skipped,
                                                                        **kw)]
    return found, skipped


def kinds():
    return (["gz"] if GZIP_REGIONS else []) + ["tar"]


@pytest.mark.parametrize("kind", kinds())
def test_regions_together_walk_exactly_what_one_pass_walks(tmp_path, kind):
    path = padded_archive(tmp_path / f"a.{kind}", compress=kind == "gz")
    assert_regions_walk_like_one_pass(path, gzip=kind == "gz")


def assert_regions_walk_like_one_pass(path, gzip: bool, min_regions: int = 4,
                                      skips_expected=None) -> None:
    regions = archive_regions(path)
    assert regions is not None and len(regions) >= min_regions
    assert [r.start for r in regions[1:]] == [r.end for r in regions[:-1]]
    assert regions[-1].end is None and regions[0].start == 0
    assert (regions[0].index is not None) == gzip
    whole, whole_skips = walk(path)
    pieces, skips, opened = [], Counter(), {}
    try:
        for region in regions:
            found, skipped = walk(region, opened=opened)
            assert len(found) == region.images  # what the scan counted, per region
            assert found and found[0][0] >= region.entry
            pieces += found
            skips.update(skipped)
    finally:
        for stream in opened.values():
            stream.close()
    assert pieces == whole  # same members, same order, same bytes, same entry ordinals
    assert skips == whole_skips == (skips_expected or {"not_image": 60})


@pytest.mark.skipif(not (GZIP_REGIONS and shutil.which("tar") and shutil.which("gzip")),
                    reason="needs rapidgzip, GNU tar and gzip")
@pytest.mark.parametrize("fmt", ["gnu", "posix"])
@pytest.mark.parametrize("members", [1, 3])
def test_regions_of_archives_made_by_gnu_tar_and_gzip(tmp_path, fmt, members):
    """What users have: `tar czf`, and gzip files of several members (as pigz or a split
    job writes them), with tar headers straddling the member boundaries."""
    rng = random.Random(2)
    root = tmp_path / "src"
    for i in range(60):
        folder = root / "t" / f"c{i % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:03d}.png").write_bytes(solid(10 + 3 * i, fmt="PNG", mode="L"))
        (folder / f"{i:03d}.txt").write_bytes(rng.randbytes(60_000))
    tar_bytes = subprocess.run(["tar", f"--format={fmt}", "--sort=name", "-cf", "-", "-C",
                                str(root), "t"], check=True, capture_output=True).stdout
    cuts = [len(tar_bytes) * k // members + 777 * (k % 2) for k in range(1, members)]
    parts = [tar_bytes[a:b] for a, b in zip([0, *cuts], [*cuts, len(tar_bytes)])]
    path = tmp_path / "a.tgz"
    with open(path, "wb") as out:
        for part in parts:
            out.write(subprocess.run(["gzip", "-6", "-c"], input=part, check=True,
                                     capture_output=True).stdout)
    assert_regions_walk_like_one_pass(str(path), gzip=True,
                                      skips_expected={"not_image": 60, "directory": 4})


@pytest.mark.skipif(not GZIP_REGIONS, reason="regions of a .tgz need rapidgzip")
def test_regions_of_a_gzip_padded_with_zeros(tmp_path):
    """Zero bytes after the gzip data (a tape record's padding) end no region early nor fail
    the last: rapidgzip is handed the file without them (read.gzip_end)."""
    path = padded_archive(tmp_path / "a.tgz")
    with open(path, "ab") as f:
        f.write(bytes(10240))
    assert_regions_walk_like_one_pass(path, gzip=True)
    with numbered_loader(path, workers=2, options=Options(readers=2)) as loader:
        assert len(loader.plan.parts) > 2
        assert sorted(epoch_ids(loader)[0]) == list(range(60))


@pytest.mark.skipif(not GZIP_REGIONS, reason="regions of a .tgz need rapidgzip")
def test_the_index_keeps_its_windows_sparse_and_an_older_whole_one_still_reads(tmp_path):
    """The scan writes gztool's format: windows only of the bytes that the data after a
    checkpoint refers back to, compressed; over JPEGs, which refer back little, a small share
    of indexed_gzip's format (every window whole, as written before). Both read."""
    import rapidgzip
    files = [(f"t/c{i % 3}/{i:03d}.jpg", photo(i, size=(512, 384))) for i in range(60)]
    path = write_archive(tmp_path / "a.tgz", files)  # ~5 MB
    regions = archive_regions(path)
    index_file = index.index_path(path)
    with open(index_file, "rb") as f:
        assert f.read(16) == bytes(8) + b"gzipindx"  # gztool's magic
    # Each region starts after a checkpoint of its own, whose 32 KiB window indexed_gzip's
    # format would hold whole.
    assert len(regions) >= 8 and os.path.getsize(index_file) < 0.05 * 32768 * len(regions)
    whole = str(tmp_path / "whole.gzindex")
    with rapidgzip.RapidgzipFile(path, parallelization=1) as stream:
        stream.import_index(index_file)
        stream.export_index(whole, index_format=rapidgzip.IndexFormat.INDEXED_GZIP)
    assert open(whole, "rb").read(5) == b"GZIDX"
    by_one_pass = walk(path)
    for index_of_regions in (index_file, whole):
        pieces, opened = [], {}
        try:
            for region in regions:
                pieces += walk(region._replace(index=index_of_regions), opened=opened)[0]
        finally:
            for stream in opened.values():
                stream.close()
        assert pieces == by_one_pass[0] and len(pieces) == 60


def test_no_regions_for_duplicate_names(tmp_path):
    """Which copy of a duplicate wins depends on seeing both: such archives are read whole."""
    path = padded_archive(tmp_path / "a.tar", compress=False,
                          extra=lambda tar: add_file(tar, "t/c0/000.png", solid(200, fmt="PNG")))
    assert archive_regions(path) is None


def test_a_global_pax_header_that_matters_stops_regions(tmp_path):
    import tarfile
    rng = random.Random(1)
    files = [(f"t/c0/{i:03d}.txt", rng.randbytes(60_000)) for i in range(20)]
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT,
                      pax_headers={"path": "ignored-by-some"}) as tar:
        for name, data in files:
            add_file(tar, name, data)
        add_file(tar, "t/c0/x.png", solid(50, fmt="PNG"))
    assert archive_regions(str(path)) is None


@pytest.mark.skipif(not GZIP_REGIONS, reason="gzip regions need rapidgzip")
def test_a_changed_index_file_means_a_new_scan(tmp_path):
    path = padded_archive(tmp_path / "a.tgz")
    first = archive_regions(path)
    with open(index.index_path(path), "ab") as f:
        f.write(b"x")  # not the index the scan wrote
    again = archive_regions(path)
    assert again == first  # scanned again: same regions, and a fresh index that fits them
    os.remove(index.index_path(path))
    assert archive_regions(path) == first
    assert os.path.exists(index.index_path(path))


def ids(images: torch.Tensor) -> list[int]:
    return [round((v - 10) / 3) for v in images.float().mean(dim=(1, 2, 3)).tolist()]


def numbered_loader(path, **kw):
    # These tests are about inflating regions: no plain copy (test_cache.py reads from one).
    options = dataclasses.replace(kw.pop("options", Options()), plain_copy=None)
    return ImageLoader(path, batch_size=8, size=8, mode="L", device="cpu", normalize=False,
                       seed=3, options=options, **kw)


def epoch_ids(loader) -> tuple[list[int], list[int]]:
    seen, sizes = [], []
    with pytest.warns(UserWarning, match="skipped 60 members"):
        for images, labels in loader:
            got = ids(images)
            assert labels.tolist() == [i % 3 for i in got]
            seen += got
            sizes.append(len(got))
    return seen, sizes


@pytest.mark.parametrize("kind", kinds())
@pytest.mark.parametrize("readers", [2, 3])
def test_loader_reads_regions_every_image_once_in_a_new_order_each_epoch(tmp_path, kind,
                                                                         readers):
    path = padded_archive(tmp_path / f"a.{kind}", compress=kind == "gz")
    runs = []
    for _ in range(2):
        with numbered_loader(path, workers=3, options=Options(readers=readers)) as loader:
            parts = loader.plan.parts
            assert len(parts) == len(archive_regions(path)) > readers
            assert len(loader) == 8  # 60 images, batches of 8
            orders = []
            for _ in range(2):
                seen, sizes = epoch_ids(loader)
                assert sorted(seen) == list(range(60))
                assert sum(sizes) == 60 and sizes.count(8) >= 7
                assert loader.stats.skipped == {"not_image": 60}  # counted once, not per reader
                assert (loader.stats.readers, loader.stats.regions) == (readers, len(parts))
                orders.append(seen)
            assert orders[0] != orders[1]
            runs.append(orders)
    assert runs[0] == runs[1]  # the same seed, workers and readers: the same batches


def split_archive(path, compress: bool) -> tuple[str, list[int]]:
    """padded_archive's 60 PNGs, the first 15 and every odd one below val/, the rest below
    train/: some regions hold no train image. The path and the train images' ids."""
    rng = random.Random(0)
    files, train = [], []
    for i in range(60):
        split = "val" if i < 15 or i % 2 else "train"
        train += [i] if split == "train" else []
        files.append((f"d/{split}/c{i % 3}/{i:03d}.png", solid(10 + 3 * i, fmt="PNG", mode="L")))
        files.append((f"d/{split}/c{i % 3}/{i:03d}.txt", rng.randbytes(60_000)))
    return write_archive(path, files, compress=compress), train


@pytest.mark.parametrize("kind", kinds())
def test_a_split_read_from_regions_gives_each_of_its_images_once(tmp_path, kind):
    """Each region counts its images of the split (the scan's count per split), which the
    ranks' and readers' shares are dealt from; a loader of that split reads them all once an
    epoch from regions, and nothing of the other split."""
    path, train = split_archive(tmp_path / f"a.{kind}", compress=kind == "gz")
    regions = archive_regions(path, split="train")
    assert len(regions) >= 4 and regions[0].images == 0  # the first 15 are val's
    opened = {}
    try:
        for region in regions:
            found, _ = walk(region, opened=opened)
            assert sum("/train/" in name for _, name, _, _ in found) == region.images
    finally:
        for stream in opened.values():
            stream.close()
    with numbered_loader(path, workers=3, options=Options(readers=2, split="train")) as loader:
        assert len(loader.plan.parts) == len(regions) and len(loader) == -(-len(train) // 8)
        for _ in range(2):
            seen = []
            with pytest.warns(UserWarning, match="skipped 60 members"):  # the .txt, as ever
                for images, labels in loader:
                    got = ids(images)
                    assert labels.tolist() == [i % 3 for i in got]
                    seen += got
            assert sorted(seen) == train


@pytest.mark.parametrize("kind", kinds())
def test_both_splits_named_are_read_from_regions_and_given_classes_do_not_mix_them(tmp_path,
                                                                                   kind):
    """split=("val", "Train") reads both splits as one set from regions: each region counts
    the images of both, and an epoch gives all 60 once. Given its classes and no split, a
    loader is refused once its plan's scan (for the regions) says there are two splits."""
    path, _ = split_archive(tmp_path / f"a.{kind}", compress=kind == "gz")
    both = archive_regions(path, split=("train", "val"))
    assert [r.images for r in both] == [r.images for r in archive_regions(path)]
    assert sum(r.images for r in both) == 60
    options = Options(readers=2, split=("val", "Train"))
    with numbered_loader(path, workers=3, options=options) as loader:
        assert loader.options.split == ("train", "val")
        assert len(loader.plan.parts) == len(both) and len(loader) == 60 // 8 + 1
        assert sorted(epoch_ids(loader)[0]) == list(range(60))
    with numbered_loader(path, workers=3, vocab=["c0", "c1", "c2"],
                         options=Options(readers=2)) as loader:
        with pytest.raises(ValueError, match=r"2 splits found \(train: 22 images in .*; val: "
                                             r"38 images in .*Options\(split=\('train', "):
            len(loader)


def test_regions_off_reads_the_archive_as_one_stream(tmp_path):
    path = padded_archive(tmp_path / "a.tar", compress=False)
    with numbered_loader(path, workers=2, options=Options(regions=False)) as loader:
        assert len(loader.plan.parts) == 1
        seen, _ = epoch_ids(loader)
        assert (loader.stats.readers, loader.stats.regions) == (1, 0)
    assert sorted(seen) == list(range(60))


def test_eval_keeps_the_archive_order_without_regions(tmp_path):
    path = padded_archive(tmp_path / "a.tar", compress=False)
    with numbered_loader(path, workers=3, train=False) as loader:
        assert len(loader.plan.parts) == 1
        seen, _ = epoch_ids(loader)
    assert seen == list(range(60))


@pytest.mark.parametrize("kind", kinds())
def test_ranks_split_the_regions_of_one_archive(tmp_path, kind):
    """Two ranks read disjoint regions (neither inflates the other's): together every image
    once, and the same number of steps on each."""
    path = padded_archive(tmp_path / f"a.{kind}", compress=kind == "gz")
    shares, steps, skipped = [], [], 0
    for rank in range(2):
        options = Options(rank=rank, world_size=2, readers=2)
        with numbered_loader(path, workers=2, options=options) as loader:
            assert loader.split_by_archive
            with pytest.warns(UserWarning, match="not_image"):
                batches = [ids(x) for x, _ in loader]
            skipped += loader.stats.skipped["not_image"]
            steps.append(len(batches))
            shares.append([i for b in batches for i in b])
    assert steps[0] == steps[1]
    assert skipped == 60  # the padding members: each counted once, by the rank that read it
    distinct = [set(s) for s in shares]
    assert not distinct[0] & distinct[1]
    assert distinct[0] | distinct[1] == set(range(60))


def test_sidecar_records_regions_and_counts(tmp_path):
    import json
    path = padded_archive(tmp_path / "a.tar", compress=False)
    regions = archive_regions(path)
    data = json.load(open(sidecar_path(path)))
    assert sum(r.images for r in regions) == sum(data["classes"].values()) == 60
    assert [row[0] for row in data["regions"]["starts"]] == [r.start for r in regions]


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("decode", ["cpu", "cuda"])
def test_regions_feed_the_gpu_every_image_once(tmp_path, decode):
    """JPEG i is solid gray 10 + 3 i (JPEG keeps a solid gray within a level): on the GPU
    path, packed bytes from several readers' regions, decoded by nvJPEG, each once."""
    rng = random.Random(0)
    files = []
    for i in range(60):
        files.append((f"t/c{i % 3}/{i:03d}.jpg", solid(10 + 3 * i, size=(32, 24))))
        files.append((f"t/c{i % 3}/{i:03d}.txt", rng.randbytes(60_000)))
    path = write_archive(tmp_path / "a.tgz", files, compress=GZIP_REGIONS)
    with ImageLoader(path, batch_size=8, size=8, device="cuda", normalize=False, seed=3,
                     workers=3, decode=decode,
                     options=Options(readers=3, plain_copy=None)) as loader:
        assert len(loader.plan.parts) > 3
        for _ in range(2):
            seen = []
            with pytest.warns(UserWarning, match="skipped 60 members"):
                for images, labels in loader:
                    assert images.device.type == "cuda"
                    got = ids(images.cpu())
                    assert labels.tolist() == [i % 3 for i in got]
                    seen += got
            assert sorted(seen) == list(range(60))
            # Every image took the path asked for: no CPU fallbacks on the GPU path.
            expected = {"gpu_decoded": 60} if decode == "cuda" else {}
            assert dict(loader.stats.fallbacks) == expected
