"""The label vocabulary and its sidecar."""
from __future__ import annotations

import gzip
import io
import json
import os
import re
import tarfile
import warnings
from pathlib import Path

import pytest
import torch

from conftest import (add_file, assert_labels_match_pixels, class_level, labeled_files, solid,
                      write_archive)
from imageloader import ImageLoader, Options
from imageloader.errors import ArchiveError, UnknownLabelError
from imageloader.vocab import (ClassPlaces, Vocabulary, as_vocabulary, shared_names_message,
                               sidecar_path)


def test_sorted_and_independent_of_archive_order(tmp_path):
    files = [("t/zebra/1.jpg", solid(1)), ("t/ant/2.jpg", solid(2)), ("t/moose/3.jpg", solid(3))]
    a = Vocabulary.from_archives(write_archive(tmp_path / "a.tgz", files))
    b = Vocabulary.from_archives(write_archive(tmp_path / "b.tgz", files[::-1]))
    assert a.classes == b.classes == ("ant", "moose", "zebra")
    assert a["ant"] == 0 and a["zebra"] == 2 and len(a) == 3


def test_sidecar_is_written_reused_and_refreshed(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(3, 2))
    vocab = Vocabulary.from_archives(path)
    side = sidecar_path(path)
    data = json.load(open(side))
    assert data["classes"] == {"c00": 2, "c01": 2, "c02": 2} and vocab.images == 6
    # Reused: doctor the sidecar and see the doctored classes come back.
    data["classes"]["c99"] = 1
    json.dump(data, open(side, "w"))
    assert "c99" in Vocabulary.from_archives(path)
    # Stale once the archive changes: rescanned.
    write_archive(tmp_path / "a.tgz", labeled_files(2, 2))
    os.utime(path, ns=(1, 1))
    assert Vocabulary.from_archives(path).classes == ("c00", "c01")


def test_read_only_folder_still_works(tmp_path, monkeypatch):
    import imageloader.vocab as vocab_module

    def refuse(path, payload):
        raise PermissionError(13, "Permission denied", str(path))

    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 1))
    monkeypatch.setattr(vocab_module, "_write_json", refuse)  # as in a read-only folder
    assert Vocabulary.from_archives(path).classes == ("c00", "c01")
    assert not os.path.exists(sidecar_path(path))


def test_union_over_shards_and_explicit_forms(tmp_path):
    a = write_archive(tmp_path / "a.tgz", [("t/x/1.jpg", solid(1))])
    b = write_archive(tmp_path / "b.tgz", [("t/y/1.jpg", solid(1))])
    vocab = Vocabulary.from_archives([a, b])
    assert vocab.classes == ("x", "y")
    vocab.save(tmp_path / "v.json")
    assert as_vocabulary(str(tmp_path / "v.json")) == vocab
    (tmp_path / "v.txt").write_text("y\nx\n")
    assert as_vocabulary(str(tmp_path / "v.txt")) == vocab
    assert as_vocabulary(["y", "x"]) == vocab
    assert as_vocabulary({"x": 0, "y": 1}) == vocab
    with pytest.raises(ValueError):
        as_vocabulary({"x": 1, "y": 0})


def test_unknown_label_message_names_class_member_and_archive():
    error = UnknownLabelError("n999", "val.tgz", "val/n999/x.jpg")
    assert "n999" in str(error) and "val/n999/x.jpg" in str(error) and "val.tgz" in str(error)


def test_no_images_says_what_was_skipped_and_what_layout_is_read(tmp_path):
    files = [("a.jpg", solid(1)), ("b.jpg", solid(2)), ("t/c/readme.txt", b"hi"),
             ("t/c/._x.jpg", b"x")]  # flat images: no class folder to take a label from
    path = write_archive(tmp_path / "flat.tgz", files)
    empty = write_archive(tmp_path / "empty.tgz", [])
    for attempt in ("scan", "sidecar"):
        with pytest.raises(ValueError) as info:
            Vocabulary.from_archives([path, empty])
        message = str(info.value)
        assert f"no images found in {path} (skipped no_class_folder: 2, macos_metadata: 1, " \
               f"not_image: 1); {empty} (no members)" in message, (attempt, message)
        assert "<split>/<class>/<file> or <class>/<file>" in message and ".jpg" in message
        assert "2 images lie at the top level, outside any class folder" in message
        assert "python -m imageloader pack FOLDER OUT.tgz" in message


def test_a_tar_of_class_tars_is_counted_as_archives_and_named_with_the_pack_command(tmp_path):
    """ImageNet's ILSVRC2012_img_train.tar holds a tar per class: nothing the loader reads
    directly, so it says so, with the command that flattens it."""
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w") as tar:
        add_file(tar, "n01440764_1.JPEG", solid(1))
    path = tmp_path / "ILSVRC2012_img_train.tar"
    with tarfile.open(path, "w") as tar:
        for wnid in ("n01440764", "n01443537"):
            add_file(tar, f"{wnid}.tar", inner.getvalue())
        add_file(tar, "LICENSE", b"terms")
    with pytest.raises(ValueError) as info:
        Vocabulary.from_archives(path)
    message = str(info.value)
    assert f"no images found in {path} (skipped archive: 2, not_image: 1)" in message
    assert f"2 members of {path} are archives themselves" in message
    assert f"python -m imageloader pack {path} OUT.tgz --prefix train" in message


def test_images_in_a_split_folder_without_class_folders_are_refused(tmp_path):
    """train/x.jpg would train a one-class model named "train"."""
    path = write_archive(tmp_path / "t.tgz", [(f"train/{i}.jpg", solid(i)) for i in range(3)])
    with pytest.raises(ValueError) as info:
        ImageLoader(path, batch_size=2, device="cpu", workers=0)
    message = str(info.value)
    assert message.startswith(f"{path}: the only class found is 'train', a split folder "
                              f"holding 3 images directly")
    assert "(train/<class>/<file>)" in message and "python -m imageloader pack" in message


def test_one_class_is_a_warning_naming_the_archive_and_class(tmp_path):
    path = write_archive(tmp_path / "cats.tgz", labeled_files(1, 2))
    with pytest.warns(UserWarning, match=r"cats.tgz: one class found \('c00', 2 images\)"):
        Vocabulary.from_archives(path)
    with pytest.warns(UserWarning, match="one class found"):  # from the sidecar too
        ImageLoader(path, batch_size=2, device="cpu", workers=0).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Vocabulary.from_archives(write_archive(tmp_path / "two.tgz", labeled_files(2, 1)))


def test_a_class_name_of_folders_in_several_places_is_a_warning_naming_them(tmp_path):
    """SUN397's a/apartment_building/outdoor and c/church/outdoor: the parent-folder rule reads
    them as one class "outdoor"; the loader says so (from the sidecar too), naming the folders
    and the pack command that keeps them apart. Split folders are not places: train/c00 and
    val/c00 are one class in two splits."""
    folders = ["a/abbey", "a/apartment_building/outdoor", "c/church/outdoor", "c/church/indoor"]
    files = [(f"SUN397/{folder}/{i}.jpg", solid(class_level(k)))
             for k, folder in enumerate(folders) for i in range(2)]
    path = write_archive(tmp_path / "sun.tgz", files)
    expected = (r"sun.tgz: 1 class name stands for folders in several places, .*'outdoor': "
                r"2 folders \(SUN397/a/apartment_building/outdoor, SUN397/c/church/outdoor\)"
                r".* pack .*sun.tgz OUT.tgz --folder F --class-folder path")
    with pytest.warns(UserWarning, match=expected):
        vocab = Vocabulary.from_archives(path)
    assert vocab.classes == ("abbey", "indoor", "outdoor") and vocab.counts["outdoor"] == 4
    with pytest.warns(UserWarning, match=expected):  # each loader, from the sidecar
        ImageLoader(path, batch_size=2, device="cpu", workers=0).close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        splits = write_archive(tmp_path / "splits.tgz", split_files(["train", "val"]))
        Vocabulary.from_archives(splits, split=("train", "val"))


def test_a_class_folder_inside_another_class_is_a_warning_naming_both(tmp_path):
    """train/cat/extra/x.jpg beside train/cat/y.jpg: the parent-folder rule makes "extra" a
    class of its own; the loader says so (from the sidecar too) and how to pack the images
    as cat's. The split folder is not a class: train/cat is not inside a class "train"."""
    files = [("train/cat/0.jpg", solid(class_level(0))), ("train/cat/extra/1.jpg",
                                                          solid(class_level(1))),
             ("train/dog/2.jpg", solid(class_level(2))), ("train/dog/dog/3.jpg",
                                                          solid(class_level(2)))]
    path = write_archive(tmp_path / "pets.tgz", files)
    expected = (r"pets.tgz: 1 class folder lies inside another class's folder, its images "
                r"read as its own class .*: train/cat/extra is class 'extra', not 'cat'\. "
                r".*pack "
                r".*pets.tgz OUT.tgz --folder F --class-folder top")
    with pytest.warns(UserWarning) as caught:
        vocab = Vocabulary.from_archives(path)
    assert vocab.classes == ("cat", "dog", "extra")
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and re.search(expected, messages[1])  # dog/dog: shared only
    assert "'dog': 2 folders (train/dog, train/dog/dog)" in messages[0]
    with pytest.warns(UserWarning) as caught:  # each loader, from the sidecar
        ImageLoader(path, batch_size=2, device="cpu", workers=0).close()
    assert [str(w.message) for w in caught] == messages


def test_shared_names_show_three_and_count_their_folders_up_to_a_bound():
    shared = ClassPlaces()
    for place in range(ClassPlaces.KEPT + 50):
        shared.add("outdoor", f"d/{place:03d}/outdoor/x.jpg")
    for name in ("indoor", "exterior", "interior"):
        shared.add(name, f"a/{name}/1.jpg")
        shared.add(name, f"b/{name}/1.jpg")
    shared.add("abbey", "a/abbey/1.jpg")
    shared.add("abbey", "a/abbey/2.jpg")
    found = shared.shared()
    assert list(found) == ["exterior", "indoor", "interior", "outdoor"]
    assert found["indoor"] == ["a", "b"] and len(found["outdoor"]) == ClassPlaces.KEPT
    message = shared_names_message("x.tgz", found)
    assert message.startswith("x.tgz: 4 class names stand for folders in several places")
    assert "'exterior': 2 folders (a/exterior, b/exterior)" in message
    assert "'outdoor'" not in message and "(a/interior, b/interior); 1 more. Right" in message
    assert "100+" in shared_names_message("x.tgz", {"outdoor": found["outdoor"]})


def split_files(splits, root="imagenette2"):
    return [(f"{root}/{split}/c{k:02d}/{i}.jpg", solid(class_level(k)))
            for split in splits for k in range(2) for i in range(2)]


def test_two_splits_in_one_archive_are_refused_naming_them(tmp_path):
    """imagenette2/train/<class>/... beside imagenette2/val/<class>/... in one archive: one
    loader would train on the validation images too, so it refuses, naming the splits and
    their images, from a scan and again from the sidecar."""
    path = write_archive(tmp_path / "imagenette2.tgz", split_files(["train", "val"]))
    for _ in range(2):
        with pytest.raises(ValueError, match=r"2 splits found \(train: 4 images in "
                                             r".*imagenette2.tgz; val: 4 images in .*"
                                             r"imagenette2.tgz\).*Options\(split='train'\)"
                                             r".*Options\(split=\('train', 'val'\)\)"):
            ImageLoader(path, batch_size=2, device="cpu", workers=0)
    per_class = {"c00": 2, "c01": 2}
    assert json.loads(Path(sidecar_path(path)).read_text())["splits"] == \
        {"train": per_class, "val": per_class}
    states = []
    for split in (("val", "TRAIN"), ["train", "val"]):  # both on purpose: named
        with ImageLoader(path, batch_size=4, device="cpu", workers=0, train=False, size=8,
                         options=Options(split=split)) as loader:
            assert loader.options.split == ("train", "val") and len(loader) == 2
            if states:  # a checkpoint kept as JSON resumes where it stopped
                loader.load_state_dict(json.loads(json.dumps(states[0])))
                assert sum(len(y) for _, y in loader) == 4
            else:
                batches = iter(loader)
                assert len(next(batches)[1]) == 4
                states.append(loader.state_dict())
                assert 8 == 4 + sum(len(y) for _, y in batches) == loader.vocab.images


@pytest.mark.parametrize("workers", [0, 2])
def test_given_classes_do_not_make_two_splits_one_set(tmp_path, workers):
    """A loader given its classes (vocab=, e.g. the train loader's for a val loader) and no
    split still refuses two splits: from the archive's sidecar before the first batch, or,
    where none tells (a stream), when its reader meets the second split, naming a member of
    each."""
    path = write_archive(tmp_path / "imagenette2.tgz", split_files(["train", "val"]))
    settings = dict(batch_size=2, size=8, device="cpu", workers=workers, train=False,
                    vocab=["c00", "c01"])
    # never scanned: no sidecar yet (a plain copy would scan the archive while writing it)
    with ImageLoader(path, options=Options(plain_copy=None), **settings) as loader:
        assert not Path(sidecar_path(path)).exists()
        with pytest.raises(ValueError, match=r"2 splits found \(train: member 'imagenette2/"
                                             r"train/c00/0.jpg' of .*imagenette2.tgz; val: "
                                             r"member 'imagenette2/val/c00/0.jpg' of "):
            list(loader)
    # A scan (a split named in any case): the sidecar now says there are two splits
    assert Vocabulary.from_archives(path, split="VAL").images == 4
    with ImageLoader(path, **settings) as loader:
        with pytest.raises(ValueError, match=r"2 splits found \(train: 4 images in "):
            len(loader)
    with open(path, "rb") as stream, ImageLoader(stream, **settings) as loader:
        with pytest.raises(ValueError, match=r"val: member 'imagenette2/val/c00/0.jpg' of "):
            list(loader)
    with ImageLoader(path, options=Options(split="val"), **settings) as loader:
        assert sum(len(y) for _, y in loader) == 4


def test_two_splits_across_archives_are_refused_and_one_split_is_read(tmp_path):
    """A glob that takes train and val shards alike is the same mistake; each split alone,
    or folders that are not split names above the classes, read as before."""
    write_archive(tmp_path / "data-0.tgz", split_files(["train"], root="x"))
    write_archive(tmp_path / "data-1.tgz",  # a folder between the split and the classes
                  labeled_files(2, 2, prefix="Val/animals"))
    with pytest.raises(ValueError, match=r"2 splits found \(train: 4 images in .*data-0.tgz; "
                                         r"val: 4 images in .*data-1.tgz\)"):
        Vocabulary.from_archives(str(tmp_path / "data-*.tgz"))
    vocab = Vocabulary.from_archives(str(tmp_path / "data-0.tgz"))
    assert vocab.classes == ("c00", "c01") and vocab.images == 4
    for k, root in enumerate(("photos/2019", "cats")):  # not split names: read as before
        other = write_archive(tmp_path / f"other{k}.tgz", labeled_files(2, 2, prefix=root))
        assert Vocabulary.from_archives(other).classes == ("c00", "c01")


@pytest.mark.parametrize("workers", [0, 2])
def test_options_split_reads_only_that_split(tmp_path, workers):
    """imagenette2/train/... and imagenette2/val/... in one archive, val's pixels another
    class's level: Options(split=...) gives each loader its split's images, every one once an
    epoch, its classes and length from the sidecar's counts for that split."""
    files = [(f"imagenette2/{split}/c{k:02d}/{i}.jpg", solid(class_level(k + 3 * (split == "val"))))
             for split, n in (("train", 3), ("val", 2)) for k in range(2) for i in range(n)]
    path = write_archive(tmp_path / "imagenette2.tgz", files[::-1])  # val's first
    states = {}
    for split, per_class in (("train", 3), ("val", 2)):
        with ImageLoader(path, batch_size=4, size=8, device="cpu", workers=workers,
                         normalize=False, options=Options(split=split)) as loader:
            if states:  # a checkpoint of the other split's loader is refused, naming split
                with pytest.raises(ValueError, match="split"):
                    loader.load_state_dict(states["train"])
            assert loader.vocab.classes == ("c00", "c01") and len(loader) == -(-2 * per_class // 4)
            for _ in range(2):
                images, labels = zip(*loader)
                labels = torch.cat(labels)
                assert sorted(labels.tolist()) == [0] * per_class + [1] * per_class
                shift = 3 if split == "val" else 0
                assert_labels_match_pixels(torch.cat(images), labels + shift)
            states[split] = loader.state_dict()
    with pytest.raises(ValueError, match=r"no images below a folder named 'test' in .*"
                                         r"\(split folders found: train, val\)"):
        ImageLoader(path, batch_size=4, device="cpu", options=Options(split="test"))
    for wrong in ("c00", ("train", "c00"), (), 7):
        with pytest.raises(ValueError, match=r"split must be None, the name of a split "
                                             r"folder, or several names .*got "):
            ImageLoader(path, batch_size=4, device="cpu", options=Options(split=wrong))
    with pytest.raises(ValueError, match=r"no images below a folder named 'test' in "):
        ImageLoader(path, batch_size=4, device="cpu", options=Options(split=("train", "test")))


def test_split_folders_and_the_split_option_ignore_case(tmp_path):
    """`Train/` in one archive and `train/` in another are one split, not two; and
    Options(split=...) in any case reads the folders of that name in any case."""
    write_archive(tmp_path / "a-0.tgz", split_files(["Train"], root="x"))
    write_archive(tmp_path / "a-1.tgz", split_files(["train", "VAL"], root="y"))
    for split, images in (("train", 8), ("Val", 4), ("TRAIN", 8)):
        with ImageLoader(str(tmp_path / "a-*.tgz"), batch_size=4, size=8, device="cpu",
                         workers=0, train=False, options=Options(split=split)) as loader:
            assert sum(len(y) for _, y in loader) == images == loader.vocab.images
    with pytest.raises(ValueError, match=r"2 splits found \(train: 4 images in .*a-0.tgz, "
                                         r"4 images in .*a-1.tgz; val: 4 images in "):
        Vocabulary.from_archives(str(tmp_path / "a-*.tgz"))


@pytest.mark.parametrize("compress", [False, True])
def test_given_classes_do_not_make_shards_of_two_splits_one_set(tmp_path, compress):
    """A glob that takes train and val shards, never scanned (plain .tar: no copy, so no
    scan), given its classes: each shard goes to a reader of its own, which meets one split
    only; the shards' first images refuse the set before the first batch, with what the
    sidecars of others say. A shard that is not an archive is left to its reader, which names
    it as before."""
    suffix = "tgz" if compress else "tar"
    for split in ("train", "val"):
        write_archive(tmp_path / f"{split}-0.{suffix}", split_files([split], "x"),
                      compress=compress)
    settings = dict(batch_size=2, size=8, device="cpu", workers=2, vocab=["c00", "c01"],
                    options=Options(readers=2, plain_copy=None))
    with ImageLoader(str(tmp_path / f"*.{suffix}"), **settings) as loader:
        with pytest.raises(ValueError, match=r"2 splits found \(train: member 'x/train/c00/"
                                             r"0.jpg' of .*train-0.* val: member 'x/val/"):
            len(loader)
        assert not list(tmp_path.glob("*.classes.json"))  # told without a scan
    Vocabulary.from_archives(str(tmp_path / f"train-0.{suffix}"))  # one shard's sidecar
    with ImageLoader(str(tmp_path / f"*.{suffix}"), **settings) as loader:
        with pytest.raises(ValueError, match=r"\(train: 4 images in .*train-0.*; val: member "
                                             r"'x/val/c00/0.jpg' of .*val-0"):
            len(loader)
    (tmp_path / f"val-0.{suffix}").write_bytes(b"not an archive" * 100)
    with ImageLoader(str(tmp_path / f"*.{suffix}"), **settings) as loader:
        with pytest.raises(ArchiveError, match=r"val-0"):
            list(loader)


def test_split_folders_with_a_year_or_number_are_splits_too(tmp_path):
    """COCO-style train2017/ and val2017/ in one archive are two splits, refused as one set;
    split= names them in any case; alone as the only class they are a split folder holding
    images directly. A word that only starts with a split's name is a folder like any."""
    path = write_archive(tmp_path / "coco.tgz", split_files(["train2017", "Val2017"], "coco"))
    with pytest.raises(ValueError, match=r"2 splits found \(train2017: 4 images in .*; "
                                         r"val2017: 4 images in .*split='train2017'"):
        Vocabulary.from_archives(path)
    for split, images in (("TRAIN2017", 4), (("train2017", "val2017"), 8)):
        with ImageLoader(path, batch_size=4, size=8, device="cpu", workers=0, train=False,
                         options=Options(split=split)) as loader:
            assert sum(len(y) for _, y in loader) == images == loader.vocab.images
    with pytest.raises(ValueError, match="split must be None, the name of a split folder"):
        ImageLoader(path, batch_size=4, device="cpu", options=Options(split="train_"))
    alone = write_archive(tmp_path / "alone.tgz", [(f"val-1/{i}.jpg", solid(9)) for i in range(3)])
    with pytest.raises(ValueError, match="the only class found is 'val-1', a split folder"):
        Vocabulary.from_archives(alone)
    trainer = write_archive(tmp_path / "trainer.tgz", split_files(["trainer", "val"], "x"))
    # the folders as the archive has them: x/val/c00, not x/c00 (val is left out of places)
    with pytest.warns(UserWarning, match=r"'c00': 2 folders \(x/val/c00, x/trainer/c00\)"):
        assert Vocabulary.from_archives(trainer).classes == ("c00", "c01")  # one split: val


def test_split_folders_named_with_a_companion_word_are_splits_too(tmp_path):
    """Kaggle's layout, training_set/training_set/<class>/ beside test_set/test_set/<class>/
    in one archive: two splits (the test images would be trained on), refused as one set and
    read one at a time or together by split=; valset/ and images_train/ are splits too. A
    folder of a companion word alone (data/, images/) is not one."""
    files = [(f"{split}/{split}/{c}/{c}.{i}.jpg", solid(class_level(k)))
             for split in ("training_set", "test_set") for k, c in enumerate(("cats", "dogs"))
             for i in range(3 if split == "training_set" else 2)]
    path = write_archive(tmp_path / "catsdogs.tgz", files)
    with pytest.raises(ValueError, match=r"2 splits found \(test_set: 4 images in .*; "
                                         r"training_set: 6 images in .*split='test_set'"):
        Vocabulary.from_archives(path)
    for split, images in (("Training_Set", 6), ("test_set", 4), (["test_set", "training_set"], 10)):
        with ImageLoader(path, batch_size=2, size=8, device="cpu", workers=0, train=False,
                         options=Options(split=split)) as loader:
            assert loader.vocab.classes == ("cats", "dogs")
            labels = [label for _, y in loader for label in y.tolist()]
            assert len(labels) == images and labels.count(0) == labels.count(1)
    for folders in (("valset", "images_train"), ("data", "images")):
        mixed = write_archive(tmp_path / f"{folders[0]}.tgz",
                              [(f"{f}/c{k}/{i}.jpg", solid(k)) for f in folders for k in range(2)
                               for i in range(2)])
        if folders[0] == "data":  # no split: one set, each class in two places
            with pytest.warns(UserWarning, match=r"'c0': 2 folders \(data/c0, images/c0\)"):
                assert Vocabulary.from_archives(mixed).images == 8
        else:
            with pytest.raises(ValueError, match=r"2 splits found \(images_train: .*valset: "):
                Vocabulary.from_archives(mixed)


def test_a_split_folder_met_as_an_unknown_class_is_named_so(tmp_path):
    val = write_archive(tmp_path / "val.tgz", [("val/0.jpg", solid(1))])
    with ImageLoader(val, batch_size=2, device="cpu", workers=0, vocab=["cat", "dog"],
                     train=False) as loader:
        with pytest.raises(UnknownLabelError, match="'val' looks like a split folder holding "
                                                    "images directly"):
            list(loader)


def _encoded_archive(path, files, encoding: str, fmt: int) -> str:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt, encoding=encoding) as tar:
        for name, data in files:
            add_file(tar, name, data)
    Path(path).write_bytes(gzip.compress(raw.getvalue(), mtime=0))
    return str(path)


@pytest.mark.parametrize("workers", [0, 1])
def test_latin1_class_folders_agree_in_scan_sidecar_and_reading(tmp_path, workers):
    """Written with Latin-1 names (GNU tar), the same classes as a UTF-8 (pax) archive of the
    same folders: the scan, its sidecar and the readers all name them alike."""
    classes = ["caf\xe9", "na\xefve"]
    files = [(f"train/{name}/{i}.jpg", solid(class_level(k))) for i in range(4)
             for k, name in enumerate(classes)]
    latin = _encoded_archive(tmp_path / "latin.tgz", files, "latin-1", tarfile.GNU_FORMAT)
    utf8 = _encoded_archive(tmp_path / "utf8.tgz", files[:3], "utf-8", tarfile.PAX_FORMAT)
    kw = dict(batch_size=8, size=8, device="cpu", normalize=False, workers=workers, train=False)
    with ImageLoader(latin, **kw) as loader:
        assert loader.vocab.classes == tuple(classes) and len(loader) == 1
        images, labels = next(iter(loader))
        assert labels.tolist() == [0, 1] * 4  # archive order: every image, none skipped
        assert_labels_match_pixels(images, labels)
        assert not loader.stats.skipped
    with open(sidecar_path(latin), encoding="utf-8") as f:
        assert json.load(f)["classes"] == {"caf\xe9": 4, "na\xefve": 4}
    assert Vocabulary.from_archives(latin).classes == tuple(classes)  # from the sidecar
    with ImageLoader(utf8, vocab=loader.vocab, **kw) as val:  # unknown labels would raise
        images, labels = next(iter(val))
        assert labels.tolist() == [0, 1, 0]
        assert_labels_match_pixels(images, labels)


@pytest.mark.parametrize("workers", [0, 2])
def test_decomposed_class_names_from_a_mac_are_the_composed_class(tmp_path, workers):
    """macOS writes names decomposed (NFD): "crème" from a Mac and from Linux differ as
    strings and look alike. One class in an archive holding both, and a val archive made on
    a Mac gets the train archive's targets (unknown labels would raise)."""
    import unicodedata
    composed = "cr\xe8me br\xfbl\xe9e"
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    files = [(f"train/{name}/{i}.jpg", solid(class_level(0))) for i, name in
             enumerate([composed, decomposed, composed])] + [("train/pie/0.jpg", solid(
                 class_level(1)))]
    kw = dict(batch_size=8, size=8, device="cpu", normalize=False, workers=workers, train=False)
    with ImageLoader(write_archive(tmp_path / "train.tgz", files), **kw) as train:
        assert train.vocab.classes == (composed, "pie") and train.vocab.counts[composed] == 3
        images, labels = next(iter(train))
        assert labels.tolist() == [0, 0, 0, 1]
        assert_labels_match_pixels(images, labels)
    mac = write_archive(tmp_path / "val.tgz", [(f"val/{decomposed}/0.jpg", solid(class_level(0)))])
    with ImageLoader(mac, vocab=list(train.vocab.classes), **kw) as val:
        assert next(iter(val))[1].tolist() == [0]
    assert Vocabulary([decomposed, "pie"]).classes == (composed, "pie")
