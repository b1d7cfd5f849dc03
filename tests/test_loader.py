"""The public ImageLoader end to end on the CPU: pixels, labels, counts, order, epochs."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import warnings

import pytest
import torch

from conftest import (add_entry, assert_labels_match_pixels, class_level, labeled_files, photo,
                      solid, write_archive)
from imageloader import ImageLoader, Normalize, Options
from imageloader import loader as loader_module
from imageloader.errors import ArchiveError, UnknownLabelError


def raw_loader(path, **kw):
    kw.setdefault("size", 16)
    kw.setdefault("workers", 0)
    return ImageLoader(path, normalize=False, device="cpu", **kw)


def collect(loader):
    batches = list(loader)
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches]), batches


@pytest.mark.parametrize("workers", [0, 2])
def test_every_image_once_with_its_label_and_partial_last_batch(labeled_archive, workers):
    with raw_loader(labeled_archive, batch_size=8, workers=workers) as loader:
        images, labels, batches = collect(loader)
        assert [len(y) for _, y in batches] == [8, 8, 8, 8, 3]
        assert images.dtype == torch.uint8 and images.shape == (35, 3, 16, 16)
        assert labels.dtype == torch.int64
        assert sorted(labels.tolist()) == sorted([k for k in range(5) for _ in range(7)])
        assert_labels_match_pixels(images, labels)
        assert loader.stats.samples == 35 and loader.stats.batches == 5
        assert len(loader) == 5


def test_drop_last(labeled_archive):
    with raw_loader(labeled_archive, batch_size=8, drop_last=True, workers=2) as loader:
        assert [len(y) for _, y in loader] == [8, 8, 8, 8]
        assert len(loader) == 4


def test_order_is_seeded_identical_across_worker_counts_and_changes_per_epoch(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(4, 10, size=(50, 40)))
    runs = {}
    for workers in (0, 1, 3):
        with raw_loader(path, batch_size=6, workers=workers, seed=7) as loader:
            runs[workers] = [collect(loader) for _ in range(2)]
    for workers in (1, 3):
        for epoch in range(2):
            assert torch.equal(runs[workers][epoch][0], runs[0][epoch][0])
            assert torch.equal(runs[workers][epoch][1], runs[0][epoch][1])
    assert not torch.equal(runs[0][0][1], runs[0][1][1])  # epoch 1 has another order
    with raw_loader(path, batch_size=6, seed=8) as other:
        assert not torch.equal(collect(other)[1], runs[0][0][1])


def test_eval_loader_keeps_archive_order(tmp_path):
    files = labeled_files(3, 3)
    path = write_archive(tmp_path / "a.tgz", files)
    with raw_loader(path, batch_size=4, train=False) as loader:
        labels = collect(loader)[1]
    assert labels.tolist() == [int(name.split("/")[1][1:]) for name, _ in files]


def test_normalized_output_on_cpu(labeled_archive):
    mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    loader = ImageLoader(labeled_archive, batch_size=35, size=8, device="cpu", workers=0,
                         normalize=Normalize(mean, std, dtype=torch.bfloat16))
    images, labels = next(iter(loader))
    assert images.dtype == torch.bfloat16 and images.is_contiguous(memory_format=torch.channels_last)
    expected = (class_level(labels.float()) / 255 - 0.5) / 0.25
    assert (images.float().mean(dim=(1, 2, 3)) - expected).abs().max() < 0.1


def test_batches_handed_out_do_not_change_later(labeled_archive):
    with raw_loader(labeled_archive, batch_size=4, workers=2) as loader:
        batches = list(loader)
        copies = [(x.clone(), y.clone()) for x, y in batches]
        list(loader)  # another epoch reuses every pool buffer
        assert all(torch.equal(a, c) and torch.equal(b, d)
                   for (a, b), (c, d) in zip(batches, copies))


def test_grayscale_mode(labeled_archive):
    with raw_loader(labeled_archive, batch_size=35, mode="L") as loader:
        images, labels = next(iter(loader))
    assert images.shape == (35, 1, 16, 16)
    assert_labels_match_pixels(images, labels)


def test_skipped_images_are_counted_replaced_and_warned(tmp_path):
    files = labeled_files(2, 5) + [("train/c00/bad1.jpg", b"not a jpeg at all"),
                                   ("train/c01/bad2.jpg", solid(1)[:100]), ("train/c01/x.txt", b"x")]
    path = write_archive(tmp_path / "a.tgz", files)
    for workers in (0, 2):
        with raw_loader(path, batch_size=4, workers=workers) as loader:
            with pytest.warns(UserWarning, match="skipped 3 members"):
                images, labels, batches = collect(loader)
            assert [len(y) for _, y in batches] == [4, 4, 2]
            assert loader.stats.skipped == {"undecodable": 1, "truncated": 1, "not_image": 1}
            assert_labels_match_pixels(images, labels)


def test_one_skipped_member_is_one_member(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 2) + [("train/c00/n.txt", b"x")])
    with raw_loader(path, batch_size=4, workers=0) as loader:
        with pytest.warns(UserWarning, match=r"epoch 0: skipped 1 member of .*a.tgz: "
                                             r"\{'not_image': 1\}"):
            collect(loader)


def test_folder_entries_are_counted_but_not_warned_of(tmp_path):
    """An archive made the usual way (shutil.make_archive, as tar czf) has an entry per folder:
    counted in stats.skipped, but not warned of each epoch; a real skip still is."""
    root = tmp_path / "photos"
    for name, data in labeled_files(2, 2):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    path = shutil.make_archive(str(tmp_path / "plain"), "gztar", root_dir=root)
    with raw_loader(path, batch_size=4, workers=0) as loader, warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        images, labels, _ = collect(loader)
        assert len(labels) == 4 and loader.stats.skipped == {"directory": 4}  # ., train, c00, c01
    (root / "train" / "c00" / "notes.txt").write_text("x")
    path = shutil.make_archive(str(tmp_path / "noted"), "gztar", root_dir=root)
    with raw_loader(path, batch_size=4, workers=0) as loader:
        with pytest.warns(UserWarning, match=r"skipped 1 member of .*: \{'not_image': 1\}$"):
            collect(loader)
        assert loader.stats.skipped == {"directory": 4, "not_image": 1}


def test_hidden_images_and_class_folders_are_counted_not_classes(tmp_path):
    """A folder worked on in Jupyter holds .ipynb_checkpoints/ copies, and hidden thumbnails:
    tarred as they are (shutil.make_archive), they are skipped as "hidden", not read as a
    class of their own (torchvision's ImageFolder's classic surprise); a hidden folder above
    the class folders (an archive of .cache/...) is not."""
    root = tmp_path / "work"
    files = labeled_files(2, 2, prefix=".cache/data")
    files += [(".cache/data/c00/.ipynb_checkpoints/img000-checkpoint.jpg", files[0][1]),
              (".cache/data/c01/.thumb.jpg", files[2][1])]
    for name, data in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    path = shutil.make_archive(str(tmp_path / "work"), "gztar", root_dir=root)
    with raw_loader(path, batch_size=8, workers=0) as loader:
        assert loader.vocab.classes == ("c00", "c01")
        with pytest.warns(UserWarning, match=r"\{'hidden': 2\}"):
            images, labels, _ = collect(loader)
        assert len(labels) == 4 and loader.stats.skipped["hidden"] == 2
        assert_labels_match_pixels(images, labels)


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs the tar program")
def test_a_tarred_folder_of_symlinks_says_to_tar_it_with_dereference(tmp_path):
    """A subset made of symlinks (ln -s) and tarred as it is holds links to files outside the
    archive: the error says so and how to make it hold the files; tar -h's archive reads."""
    pool, subset = tmp_path / "pool", tmp_path / "subset"
    for name, data in labeled_files(2, 2, prefix="x"):
        (pool / name).parent.mkdir(parents=True, exist_ok=True)
        (pool / name).write_bytes(data)
        (subset / name).parent.mkdir(parents=True, exist_ok=True)
        (subset / name).symlink_to(pool / name)
    links, files = tmp_path / "links.tgz", tmp_path / "files.tgz"
    for out, options in ((links, "-czf"), (files, "-czhf")):
        subprocess.run(["tar", options, str(out), "-C", str(subset), "x"], check=True)
    with pytest.raises(ValueError, match=r"4 members of .*links.tgz are links.*tar -h "
                                         r"\(--dereference\)"):
        raw_loader(str(links), batch_size=4, workers=0)
    with raw_loader(str(files), batch_size=4, workers=0) as loader:
        images, labels, _ = collect(loader)
        assert len(labels) == 4 and loader.vocab.classes == ("c00", "c01")
        assert_labels_match_pixels(images, labels)


def test_the_skip_warning_says_what_pack_makes_of_links(tmp_path):
    """Links are skipped (a stream has no earlier member's bytes to hand them); the warning
    says that pack turns them into the images they name."""
    def links(tar):
        add_entry(tar, "train/c01/link.jpg", tarfile.SYMTYPE, linkname="../c00/img000.jpg")

    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 2), extra=links)
    with raw_loader(path, batch_size=4, workers=0) as loader:
        with pytest.warns(UserWarning, match=r"\{'link': 1\}; python -m imageloader pack "
                                             r".*a.tgz OUT.tgz packs each link to an image"):
            collect(loader)


def test_on_error_raise_names_member(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 2) + [("train/c00/z.jpg", b"junk")])
    for workers in (0, 1):
        loader = raw_loader(path, batch_size=8, workers=workers,
                            options=Options(on_error="raise"))
        with loader, pytest.raises(ValueError, match="train/c00/z.jpg"):
            list(loader)


def test_unknown_label_is_an_error_unless_skipped(tmp_path):
    train = write_archive(tmp_path / "train.tgz", labeled_files(2, 2))
    val = write_archive(tmp_path / "val.tgz", labeled_files(3, 1, prefix="val"))
    vocab = raw_loader(train).vocab
    for workers in (0, 1):
        with raw_loader(val, vocab=vocab, workers=workers) as loader:
            with pytest.raises(UnknownLabelError, match="c02") as info:
                list(loader)
            assert "val/c02/img000.jpg" in str(info.value)
    with raw_loader(val, vocab=vocab, options=Options(unknown_labels="skip")) as loader:
        with pytest.warns(UserWarning):
            assert collect(loader)[1].tolist() == [0, 1]


def test_archive_errors_reach_the_loop(tmp_path):
    blob = bytearray(open(write_archive(tmp_path / "ok.tgz", labeled_files(2, 3)), "rb").read())
    blob[-8] ^= 1
    bad = tmp_path / "bad.tgz"
    bad.write_bytes(bytes(blob))
    for workers in (0, 1):
        with raw_loader(str(bad), vocab=["c00", "c01"], workers=workers) as loader:
            with pytest.raises(ArchiveError, match="bad.tgz"):
                list(loader)


def test_stream_source_reads_one_epoch(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 3))

    class Pipe(io.RawIOBase):
        def __init__(self, data):
            self._b = io.BytesIO(data)

        def readable(self):
            return True

        def readinto(self, b):
            chunk = self._b.read(len(b))
            b[:len(chunk)] = chunk
            return len(chunk)

    loader = raw_loader(Pipe(open(path, "rb").read()), vocab=["c00", "c01"], batch_size=4)
    images, labels, _ = collect(loader)
    assert len(labels) == 6
    assert_labels_match_pixels(images, labels)
    with pytest.raises(ValueError, match="one epoch"):
        list(loader)
    with open(path, "rb") as f:  # a seekable file object is rewound every epoch
        seekable = raw_loader(f, vocab=["c00", "c01"], batch_size=4, workers=1)
        assert len(collect(seekable)[1]) == len(collect(seekable)[1]) == 6
        seekable.close()


def test_shards_glob_and_shard_order_shuffle(tmp_path):
    for i in range(3):
        write_archive(tmp_path / f"s{i}.tgz", labeled_files(3, 2, prefix=f"p{i}"))
    with raw_loader(str(tmp_path / "s*.tgz"), batch_size=5, workers=2) as loader:
        images, labels, _ = collect(loader)
        assert len(labels) == 18 and len(loader) == 4
        assert_labels_match_pixels(images, labels)


@pytest.mark.parametrize("lookahead", [False, True])
def test_break_and_new_iterators_recover_buffers(labeled_archive, lookahead):
    loader = raw_loader(labeled_archive, batch_size=4, workers=2, prefetch=1,
                        options=Options(lookahead=lookahead))
    with loader:
        for _ in range(12):  # a leaked buffer per round would exhaust the pool: a hang
            for i, _batch in enumerate(loader):
                if i == 1:
                    break
        first = iter(loader)
        next(first)
        second = iter(loader)  # abandons the first
        assert len(collect_iter(second)) == 35
        assert len(collect_iter(iter(loader))) == 35
        if not lookahead:  # with lookahead, the next epoch is already filling buffers
            assert loader._pool.in_use() == 0


def collect_iter(it):
    return torch.cat([y for _, y in it])


def test_exception_in_loop_body_leaves_loader_usable(labeled_archive):
    with raw_loader(labeled_archive, batch_size=4, workers=1) as loader:
        with pytest.raises(RuntimeError, match="boom"):
            for _ in loader:
                raise RuntimeError("boom")
        assert len(collect(loader)[1]) == 35


def test_distributed_shares_are_disjoint_and_cover(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(3, 7))
    seen = []
    for rank in range(3):
        with raw_loader(path, batch_size=4, train=False, workers=1,
                        options=Options(rank=rank, world_size=3)) as loader:
            images, labels, _ = collect(loader)
            assert len(labels) == 7 == loader.images_per_epoch()
            assert_labels_match_pixels(images, labels)
            seen.append(labels)
    assert sorted(torch.cat(seen).tolist()) == sorted(k for k in range(3) for _ in range(7))


def test_repr_and_invalid_arguments(labeled_archive):
    with pytest.raises(ValueError):
        ImageLoader(labeled_archive, batch_size=0)
    with pytest.raises(ValueError):
        ImageLoader(labeled_archive, options=Options(on_error="ignore"))
    with pytest.raises(ValueError, match="workers must be >= 0 .* got -1"):
        ImageLoader(labeled_archive, workers=-1)
    loader = raw_loader(labeled_archive)
    assert "5 classes" in repr(loader)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader.close()


def test_stats_of_an_epoch_cut_short_are_its_own(tmp_path):
    files = labeled_files(2, 12) + [("train/c00/bad.jpg", b"junk")]
    path = write_archive(tmp_path / "a.tgz", files)
    with raw_loader(path, batch_size=4, workers=1, train=False) as loader:
        with pytest.warns(UserWarning):
            list(loader)
        assert loader.stats.skipped == {"undecodable": 1} and loader.stats.samples == 24
        for i, _ in enumerate(loader):
            if i == 1:
                break
        assert loader.stats.samples == 8 and loader.stats.batches == 2
        assert loader.stats.skipped == {}  # the bad member is at the end: not reached


class _LateEvent:
    """A copy event that completes a little later, like a GPU copy behind other work."""

    def __init__(self, delay: float):
        import time
        self.at = time.monotonic() + delay

    def query(self):
        import time
        return time.monotonic() >= self.at

    def synchronize(self):
        import time
        time.sleep(max(0.0, self.at - time.monotonic()))


def test_buffers_freed_by_late_copy_events_keep_the_workers_busy(tmp_path, monkeypatch):
    """All orders answered and every buffer waiting on a copy event: no worker message can
    come, so the collector must wait for the events, not for messages (it once hung)."""
    import imageloader.epoch as epoch_module
    path = write_archive(tmp_path / "a.tgz", labeled_files(4, 16, size=(12, 10)))
    monkeypatch.setattr(epoch_module, "release_batch", lambda pool, buf: (
        lambda event: pool.release(buf, after=_LateEvent(0.05))))
    with raw_loader(path, batch_size=2, workers=2, prefetch=1, size=8,
                    options=Options(timeout=10)) as loader:
        for _ in range(2):
            assert len(collect(loader)[1]) == 64


@pytest.mark.parametrize("ring_bytes", [0, 4096, None])
def test_member_bytes_through_pipes_tiny_rings_or_default_rings(tmp_path, ring_bytes,
                                                               monkeypatch):
    """Bytes reach workers through a shared ring; members too large for it travel inline,
    and a ring smaller than a batch makes the reader wait for the worker, not corrupt it."""
    monkeypatch.setattr(loader_module, "RING_BYTES", ring_bytes)
    files = labeled_files(3, 8, size=(30, 20)) + [("train/c00/big.png", photo(1, (120, 90), "PNG"))]
    path = write_archive(tmp_path / "a.tgz", files)
    vocab = ["c00", "c01", "c02"]
    with raw_loader(path, batch_size=5, workers=2, vocab=vocab,
                    options=Options(timeout=20)) as loader:
        for _ in range(2):
            images, labels, _ = collect(loader)
            assert len(labels) == 25
        big = images[(images.float().std(dim=(1, 2, 3)) > 20)]
        assert len(big) == 1  # the textured one, not a solid class image


@pytest.mark.parametrize("readers", [2, 3])
def test_readers_split_one_archive_by_image(tmp_path, readers):
    """Several readers walk the same archive and keep every R-th image: every image once per
    epoch with its label, member-level skips counted once (not once per reader), and the
    same batches again for the same seed and worker count."""
    files = labeled_files(3, 11, size=(30, 20)) + [("train/c01/notes.txt", b"x"),
                                                     ("train/c02/bad.jpg", b"not a jpeg")]
    path = write_archive(tmp_path / "a.tgz", files)
    runs = []
    for _ in range(2):
        with raw_loader(path, batch_size=4, workers=4, options=Options(readers=readers)) \
                as loader:
            epochs = []
            for _ in range(2):
                with pytest.warns(UserWarning, match="skipped 2 members"):
                    images, labels, batches = collect(loader)
                assert sorted(labels.tolist()) == [k for k in range(3) for _ in range(11)]
                assert_labels_match_pixels(images, labels)
                assert loader.stats.skipped == {"not_image": 1, "undecodable": 1}
                assert [len(y) for _, y in batches] == [4] * 8 + [1]
                epochs.append(images)
            runs.append(epochs)
    for epoch in range(2):
        assert torch.equal(runs[0][epoch], runs[1][epoch])


def test_nice_lowers_the_priority_of_every_child(labeled_archive, monkeypatch):
    """As GPU decoding's readers and packers are niced (GPU_DECODE_NICE), here on the CPU."""
    monkeypatch.setattr(loader_module, "CPU_DECODE_NICE", 7)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    with ImageLoader(labeled_archive, batch_size=4, size=16, workers=2, device="cpu",
                     options=Options(readers=2)) as loader:
        assert sum(len(labels) for _, labels in loader) > 0
        pids = [proc.pid for proc in loader._workers._procs]
        assert len(pids) == 4  # two readers, two decoders
        assert {os.getpriority(os.PRIO_PROCESS, pid) for pid in pids} == {min(19, own + 7)}


@pytest.mark.parametrize("workers", [0, 2])
def test_close_ends_an_epoch_still_being_iterated(labeled_archive, workers):
    """close() while an iteration is suspended: the iteration ends (its threads and buffers
    first), it does not touch the freed memory when resumed or dropped later."""
    loader = ImageLoader(labeled_archive, batch_size=2, size=16, workers=workers, device="cpu")
    iteration = iter(loader)
    images, labels = next(iteration)
    assert len(labels) == 2
    loader.close()
    assert next(iteration, None) is None
    del iteration


def test_a_loader_short_of_shared_memory_says_so_at_its_start_and_starts_once_there_is(
        labeled_archive, monkeypatch):
    """Before any segment is made (an over-full tmpfs would show only as a SIGBUS later): a
    MemoryError naming /dev/shm and --shm-size; nothing is left half-started, and once the
    memory is there the same loader runs. Workers=0 needs none."""
    from imageloader import pool as pool_module
    real = pool_module.shared_memory_free
    monkeypatch.setattr(pool_module, "shared_memory_free", lambda folder: 1 << 20)
    with ImageLoader(labeled_archive, batch_size=4, size=16, device="cpu", workers=2) as loader:
        with pytest.raises(MemoryError, match="/dev/shm.*--shm-size"):
            next(iter(loader))
        assert loader._pool is None and loader._workers is None  # nothing half-started
        monkeypatch.setattr(pool_module, "shared_memory_free", real)
        assert sum(len(labels) for _, labels in loader) == loader.images_per_epoch()
    monkeypatch.setattr(pool_module, "shared_memory_free", lambda folder: 0)
    with ImageLoader(labeled_archive, batch_size=4, size=16, device="cpu", workers=0) as loader:
        assert sum(len(labels) for _, labels in loader) == loader.images_per_epoch()
