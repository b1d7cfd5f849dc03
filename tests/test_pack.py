"""pack.py: a folder of labeled images -> reproducible archives the loader reads."""
import io
import logging
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imageloader import ImageLoader, Options
from imageloader.pack import pack, reproducible_tarinfo
from conftest import gzip_header_mtime, read_members, sparse_archive, write_archive
from test_readme import DATASETS, commands


def write_png(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("L", (4, 4), value).save(path)


@pytest.fixture
def class_folder(tmp_path):
    """photos/train/<class>/<i>.png: 3 classes x 5 images, plus hidden entries to be left out."""
    root = tmp_path / "photos" / "train"
    for class_index, class_name in enumerate(["cat", "dog", "fox"]):
        for i in range(5):
            write_png(root / class_name / f"{i}.png", 40 * class_index + i)
    write_png(root / "cat" / ".hidden.png", 0)
    write_png(root / ".thumbnails" / "cat" / "0.png", 0)
    return root


def expected_class_members():
    return sorted(f"train/{c}/{i}.png" for c in ["cat", "dog", "fox"] for i in range(5))


def test_one_archive_has_sorted_prefixed_members_with_fixed_metadata(class_folder, tmp_path):
    out = tmp_path / "out" / "train.tgz"
    assert pack(class_folder, out) == [str(out)]
    with tarfile.open(out, "r:gz") as tar:
        infos = tar.getmembers()
    assert [m.name for m in infos] == expected_class_members()
    assert all(m.isfile() and m.mtime == 0 and m.uid == 0 and m.gid == 0 and m.mode == 0o644
               for m in infos)
    assert gzip_header_mtime(out) == 0
    assert read_members(out)["train/dog/3.png"] == (class_folder / "dog" / "3.png").read_bytes()


def test_the_loader_reads_a_packed_folder_with_its_classes(class_folder, tmp_path):
    out = pack(class_folder, tmp_path / "train.tgz")[0]
    with ImageLoader(out, batch_size=15, size=4, train=False, workers=0, device="cpu",
                     normalize=False, options=None) as loader:
        images, labels = next(iter(loader))
    assert loader.vocab.classes == ("cat", "dog", "fox")
    assert sorted(labels.tolist()) == [0] * 5 + [1] * 5 + [2] * 5
    # Each class's images were written with gray levels 40 * class + i.
    assert sorted(images[labels == 1][:, 0, 0, 0].tolist()) == [40, 41, 42, 43, 44]


def test_shards_partition_the_images_exactly_once(class_folder, tmp_path):
    paths = pack(class_folder, tmp_path / "shards" / "train.tgz", shards=4, shuffle_seed=1)
    assert [Path(p).name for p in paths] == [f"train-{k:05d}-of-00004.tgz" for k in range(4)]
    names_per_shard = [list(read_members(p)) for p in paths]
    all_names = [name for names in names_per_shard for name in names]
    assert sorted(all_names) == expected_class_members()  # no file lost, none repeated
    assert sorted(len(names) for names in names_per_shard) == [3, 4, 4, 4]
    assert all_names != expected_class_members()  # the seed shuffled the order


def test_shards_written_in_parallel_are_the_same_bytes_and_none_is_left_half_written(
        class_folder, tmp_path, monkeypatch):
    one = pack(class_folder, tmp_path / "one" / "t.tgz", shards=3, shuffle_seed=0, jobs=1)
    many = pack(class_folder, tmp_path / "many" / "t.tgz", shards=3, shuffle_seed=0, jobs=3)
    assert [Path(p).read_bytes() for p in one] == [Path(p).read_bytes() for p in many]
    import imageloader.pack as packing
    read_files = packing._read_files

    def fail_after_one(src, prefix, pairs):
        yield from read_files(src, prefix, pairs[:1])
        raise OSError(f"{pairs[1][0]}: read error")

    monkeypatch.setattr(packing, "_read_files", fail_after_one)
    with pytest.raises(OSError, match="read error"):
        pack(class_folder, tmp_path / "broken" / "t.tgz", jobs=1)
    assert list((tmp_path / "broken").iterdir()) == []


def test_an_out_ending_in_tar_is_a_plain_tar_of_the_same_members(class_folder, tmp_path):
    plain = pack(class_folder, tmp_path / "p" / "train.tar", shards=2, shuffle_seed=0)
    gzipped = pack(class_folder, tmp_path / "g" / "train.tgz", shards=2, shuffle_seed=0)
    assert [Path(p).name for p in plain] == ["train-00000-of-00002.tar",
                                             "train-00001-of-00002.tar"]
    for tar_path, tgz_path in zip(plain, gzipped):
        assert Path(tar_path).read_bytes()[:2] != b"\x1f\x8b"
        with tarfile.open(tar_path, "r:") as tar:
            assert {m.name: tar.extractfile(m).read() for m in tar} == read_members(tgz_path)
    with ImageLoader(plain, batch_size=15, size=4, train=False, workers=0,
                     device="cpu") as loader:
        assert sum(len(labels) for _, labels in loader) == 15
    assert pack(class_folder, tmp_path / "one.tar")[0] == str(tmp_path / "one.tar")


def test_archives_are_byte_reproducible(class_folder, tmp_path):
    first = pack(class_folder, tmp_path / "a" / "x.tgz", shards=2)
    # Another output name too: the name must not leak into the gzip header.
    second = pack(class_folder, tmp_path / "b" / "y.tgz", shards=2)
    for a, b in zip(first, second):
        assert Path(a).read_bytes() == Path(b).read_bytes()


def test_split_layout_keeps_split_folders(tmp_path):
    root = tmp_path / "dataset"
    for split in ["train", "val"]:
        for name in ["cat", "dog"]:
            write_png(root / split / name / "0.png", 1)
    out = tmp_path / "all.tgz"
    pack(root, out)
    assert sorted(read_members(out)) == ["train/cat/0.png", "train/dog/0.png",
                                         "val/cat/0.png", "val/dog/0.png"]
    for split in ["train", "val"]:  # what a loader reads of it: one split at a time
        with ImageLoader(str(out), batch_size=1, size=8, device="cpu", workers=0,
                         options=Options(split=split)) as loader:
            assert len(loader) == 2 and loader.vocab.classes == ("cat", "dog")


def test_explicit_prefix(class_folder, tmp_path):
    out = tmp_path / "p.tgz"
    pack(class_folder, out, prefix="imagenet/train")
    assert sorted(read_members(out)) == ["imagenet/" + name for name in expected_class_members()]


def test_files_that_are_not_images_are_left_out_with_a_warning(class_folder, tmp_path, caplog):
    (class_folder / "cat" / "notes.txt").write_text("not an image")
    with caplog.at_level(logging.WARNING, logger="imageloader.pack"):
        out = pack(class_folder, tmp_path / "t.tgz")[0]
    assert sorted(read_members(out)) == expected_class_members()
    assert "left out 1 file that is not an image (e.g. cat/notes.txt)" in caplog.text


def test_images_outside_class_folders_are_refused_naming_the_layout(tmp_path):
    root = tmp_path / "flat"
    write_png(root / "a.png", 1)
    write_png(root / "cat" / "b.png", 2)
    with pytest.raises(ValueError, match=r"1 of 2 images lies directly in the folder \(e.g. "
                                         r"a.png\).*<class>/<file>"):
        pack(root, tmp_path / "flat.tgz")
    assert not (tmp_path / "flat.tgz").exists()


def test_a_folder_without_images_or_a_file_is_refused(tmp_path):
    (tmp_path / "empty" / "cat").mkdir(parents=True)
    with pytest.raises(ValueError, match="no images found"):
        pack(tmp_path / "empty", tmp_path / "e.tgz")
    write_png(tmp_path / "one.png", 1)
    with pytest.raises(NotADirectoryError,
                       match="or a .zip or tar holding one; .*one.png is none of these"):
        pack(tmp_path / "one.png", tmp_path / "e.tgz")


def test_a_zip_is_packed_as_its_folder_would_be_without_unpacking(class_folder, tmp_path):
    """Kaggle-style: the class folder zipped (with macOS's __MACOSX/ resource forks, a
    hidden file and directory entries): the archive holds what packing the folder gives,
    byte for byte, its prefix being the zip's name; the loader reads it."""
    zipped = tmp_path / "train.zip"
    with zipfile.ZipFile(zipped, "w") as out:
        for path in sorted(class_folder.rglob("*")):
            name = path.relative_to(class_folder).as_posix()
            if path.is_dir():
                out.writestr(name + "/", b"")
            else:
                out.write(path, name)
                out.writestr(f"__MACOSX/{Path(name).parent}/._{path.name}", b"\x00\x05\x16\x07")
    from_zip = pack(zipped, tmp_path / "z" / "train.tgz")[0]
    from_folder = pack(class_folder, tmp_path / "f" / "train.tgz")[0]
    assert Path(from_zip).read_bytes() == Path(from_folder).read_bytes()
    assert sorted(read_members(from_zip)) == expected_class_members()
    with ImageLoader(from_zip, batch_size=15, size=4, train=False, workers=0,
                     device="cpu") as loader:
        assert loader.vocab.classes == ("cat", "dog", "fox") and len(loader) == 1


def class_tars(class_folder, out, mode="w"):
    """ImageNet's training layout: one tar per class (n01440764.tar), its images directly in it,
    all in one tar (here also with a directory entry, a hidden file, ./ names and a link)."""
    with tarfile.open(out, mode) as outer:
        directory = tarfile.TarInfo("docs")
        directory.type = tarfile.DIRTYPE
        outer.addfile(directory)
        for k, folder in enumerate(sorted(p for p in class_folder.iterdir() if p.is_dir()
                                          and not p.name.startswith("."))):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as tar:
                for image in sorted(folder.iterdir(), reverse=k == 1):  # any order inside
                    tar.add(image, ("./" if k == 0 else "") + image.name)
            info = tarfile.TarInfo(("./" if k == 2 else "") + folder.name + ".tar")
            info.size = inner.tell()
            outer.addfile(info, io.BytesIO(inner.getvalue()))
        link = tarfile.TarInfo("latest.tar")
        link.type, link.linkname = tarfile.SYMTYPE, "cat.tar"
        outer.addfile(link)
    return out


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"])
def test_a_tar_of_class_tars_is_packed_as_their_folder_would_be(class_folder, tmp_path, mode,
                                                                 caplog, monkeypatch):
    """ImageNet's ILSVRC2012_img_train.tar, packed without unpacking it (or compressed): the
    same bytes as packing the folder it stands for, whole or shuffled into shards; the link
    left out with a warning; the loader reads the result. Shuffling a compressed one without
    rapidgzip warns that it is slow."""
    outer = class_tars(class_folder, tmp_path / "ILSVRC2012_img_train.tar", mode)
    with caplog.at_level(logging.WARNING, logger="imageloader.pack"):
        from_tar = pack(outer, tmp_path / "t" / "train.tgz", prefix="train")[0]
    assert ("left out 1 member that is not a regular file or a link to one in the archive "
            "(e.g. latest.tar)") in caplog.text
    assert Path(from_tar).read_bytes() == \
        Path(pack(class_folder, tmp_path / "f" / "train.tgz")[0]).read_bytes()
    shuffled = [pack(src, tmp_path / name / "s.tgz", shards=2, shuffle_seed=3, prefix="train")
                for src, name in ((outer, "ts"), (class_folder, "fs"))]
    assert [Path(p).read_bytes() for p in shuffled[0]] == \
        [Path(p).read_bytes() for p in shuffled[1]]
    assert sorted(read_members(pack(outer, tmp_path / "d" / "x.tgz")[0]))[0] == \
        "ILSVRC2012_img_train/cat/0.png"  # no prefix given: the tar's name less .tar
    with ImageLoader(from_tar, batch_size=15, size=4, train=False, workers=0, device="cpu",
                     normalize=False, options=None) as loader:
        images, labels = next(iter(loader))
    assert loader.vocab.classes == ("cat", "dog", "fox")
    assert sorted(images[labels == 2][:, 0, 0, 0].tolist()) == [80, 81, 82, 83, 84]
    import imageloader.pack as packing
    monkeypatch.setattr(packing, "available_inflaters", lambda: ["gzip"])
    caplog.clear()
    pack(outer, tmp_path / "w" / "s.tgz", shards=2, shuffle_seed=3)
    assert ("shuffled order mean seeking back in a compressed tar" in caplog.text) == \
        (mode != "w")


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs the tar program")
def test_links_in_a_tar_are_packed_as_the_files_they_name(class_folder, tmp_path, caplog):
    """A folder with hard links (stored by tar as links to their first name) and symlinks
    (a subset made with ln -s, a link to a link), tarred by tar itself, packs as the folder
    does: each link that names an image in the archive becomes that image under its own name;
    a link out of the archive, to a folder or in a cycle is left out with a warning."""
    root = class_folder.parent
    (root / "extra").mkdir()
    (root / "extra" / "out.png").symlink_to("/nonexistent/x.png")
    (root / "train" / "dog" / "hard.png").hardlink_to(class_folder / "cat" / "0.png")
    (root / "train" / "fox" / "soft.png").symlink_to("../cat/1.png")
    (root / "train" / "fox" / "chain.png").symlink_to("soft.png")
    (root / "train" / "fox" / "loop.png").symlink_to("loop2.png")
    (root / "train" / "fox" / "loop2.png").symlink_to("loop.png")
    (root / "train" / "wolf").symlink_to("fox")
    (root / "train" / "fox" / "up.png").symlink_to("../../../train/cat/2.png")
    archive = tmp_path / "photos.tgz"
    subprocess.run(["tar", "-czf", str(archive), "-C", str(root), "train", "extra"], check=True)
    with tarfile.open(archive) as tar:  # tar stored the links as links, not as copies
        kinds = {m.name: m.type for m in tar.getmembers()}
    assert kinds["train/fox/soft.png"] == tarfile.SYMTYPE
    assert tarfile.LNKTYPE in (kinds["train/dog/hard.png"], kinds["train/cat/0.png"])
    with caplog.at_level(logging.WARNING, logger="imageloader.pack"):
        out = pack(archive, tmp_path / "out.tgz", folder="train")[0]
    assert ("left out 5 members that are not a regular file or a link to one in the "
            "archive") in caplog.text  # out.png, loop.png, loop2.png, wolf, up.png
    members = read_members(out)
    originals = {name for name in members if name.split("/")[-1][0].isdigit()}
    assert originals == set(expected_class_members())
    assert sorted(set(members) - originals) == ["train/dog/hard.png", "train/fox/chain.png",
                                                "train/fox/soft.png"]
    assert members["train/dog/hard.png"] == (class_folder / "cat" / "0.png").read_bytes()
    assert members["train/fox/soft.png"] == members["train/fox/chain.png"] == \
        (class_folder / "cat" / "1.png").read_bytes()


@pytest.mark.parametrize("fmt", ["gnu", "posix-1.0"])
def test_sparse_files_in_a_tar_are_packed_whole(tmp_path, fmt):
    """A sparse member (tar -S) is packed as the file, holes as zeros: not its stored pieces
    alone (which is what reading its size's bytes at its offset gave)."""
    path, files = sparse_archive(tmp_path, fmt)
    members = read_members(pack(path, tmp_path / "out.tgz", prefix="train")[0])
    assert members == {f"train/{name}": data for name, data in files.items()}


def test_links_inside_a_class_tar_name_its_images(class_folder, tmp_path):
    """Inside a class's tar (ImageNet's training archive's layout) links name its members:
    a hard link and a symlink are packed as the image under the class's folder."""
    dog = class_folder / "dog"
    (dog / "hard.png").hardlink_to(dog / "0.png")
    (dog / "soft.png").symlink_to("1.png")
    outer = tmp_path / "train.tar"
    with tarfile.open(outer, "w") as tar:
        for name in ("cat", "dog"):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as class_tar:
                for image in sorted((class_folder / name).iterdir()):
                    class_tar.add(image, image.name)
            info = tarfile.TarInfo(f"{name}.tar")
            info.size = inner.tell()
            tar.addfile(info, io.BytesIO(inner.getvalue()))
    members = read_members(pack(outer, tmp_path / "out.tgz")[0])
    assert sorted(name for name in members if name.startswith("train/dog/")) == \
        [f"train/dog/{i}.png" for i in range(5)] + ["train/dog/hard.png", "train/dog/soft.png"]
    assert members["train/dog/hard.png"] == (dog / "0.png").read_bytes()
    assert members["train/dog/soft.png"] == (dog / "1.png").read_bytes()


def test_a_class_tar_with_folders_or_two_images_of_one_name_is_refused(tmp_path):
    def tar_of(path, members):
        return Path(write_archive(path, members, compress=False))

    nested = tar_of(tmp_path / "cat.tar", [("sub/0.png", b"x")])
    with pytest.raises(ValueError, match=r"member cat.tar holds sub/0.png, in a folder"):
        pack(tar_of(tmp_path / "a.tar", [("cat.tar", nested.read_bytes())]), tmp_path / "a.tgz")
    flat = tar_of(tmp_path / "dog.tar", [("0.png", b"x")])
    with pytest.raises(ValueError, match=r"two members are both dog/0.png"):
        pack(tar_of(tmp_path / "b.tar", [("dog.tar", flat.read_bytes()), ("dog/0.png", b"y")]),
             tmp_path / "b.tgz")
    with pytest.raises(ValueError, match=r"member fox.tar is named as a tar but cannot be read"):
        pack(tar_of(tmp_path / "c.tar", [("fox.tar", b"not a tar" * 100)]), tmp_path / "c.tgz")
    extracted = tmp_path / "extracted"  # the class tars taken out of the tar that held them
    extracted.mkdir()
    nested.rename(extracted / "cat.tar")
    flat.rename(extracted / "dog.tar")
    with pytest.raises(ValueError, match=r"no images found, but 2 tars \(e.g. cat.tar\): a "
                                         r"folder's tars are not unpacked; .*tar -cf classes.tar"):
        pack(extracted, tmp_path / "d.tgz")
    assert not any(tmp_path.glob("*.tgz"))


def test_loose_images_take_their_classes_from_a_labels_file(tmp_path, caplog):
    """Kaggle's layout: train/<id>.png beside labels.csv (id,breed; ids without extension),
    a row for an image that is not there, and a header; ImageNet's validation tar: flat
    files, and rows `file class x y ...` (LOC_val_solution.csv's first word is the class)."""
    flat = tmp_path / "kaggle" / "train"
    for i, breed in enumerate(["pug", "collie", "pug", "beagle"]):
        write_png(flat / f"{i:03d}.png", 10 * i)
    labels = tmp_path / "labels.csv"
    labels.write_text("id,breed\n000,pug\n001,collie\n002,pug\n003,beagle\n999,pug\n")
    from imageloader.pack import get_args_parser, main
    with caplog.at_level(logging.WARNING, logger="imageloader.pack"):
        out = main(get_args_parser().parse_args([str(flat), str(tmp_path / "k.tgz"),
                                                 "--labels", str(labels)]))[0]
    assert f"1 row of {labels} names no image (e.g. 999)" in caplog.text
    members = read_members(out)
    assert list(members) == ["train/beagle/003.png", "train/collie/001.png",
                             "train/pug/000.png", "train/pug/002.png"]
    assert members["train/collie/001.png"] == (flat / "001.png").read_bytes()
    with ImageLoader(out, batch_size=4, size=4, train=False, workers=0, device="cpu",
                     normalize=False, options=None) as loader:
        images, targets = next(iter(loader))
    assert loader.vocab.classes == ("beagle", "collie", "pug")
    assert sorted(zip(targets.tolist(), images[:, 0, 0, 0].tolist())) == \
        [(0, 30), (1, 10), (2, 0), (2, 20)]

    val = tmp_path / "ILSVRC2012_img_val.tar"
    with tarfile.open(val, "w") as tar:
        for i in range(2):
            tar.add(flat / f"{i:03d}.png", f"ILSVRC2012_val_{i:08d}.JPEG")
    solution = tmp_path / "LOC_val_solution.txt"
    solution.write_text("ILSVRC2012_val_00000000 n01751748 1 2 3 4 n01751748 5 6 7 8\n"
                        "ILSVRC2012_val_00000001\tn09193705 0 0 9 9\n")
    assert sorted(read_members(pack(val, tmp_path / "v.tgz", prefix="val",
                                    labels=solution)[0])) == \
        ["val/n01751748/ILSVRC2012_val_00000000.JPEG", "val/n09193705/ILSVRC2012_val_00000001.JPEG"]


def imagenet_devkit(path, truth: list[int], synsets: dict[int, str]):
    """ILSVRC2012_devkit_t12.tar.gz's two files that label the validation images: meta.mat
    (MATLAB; a struct array `synsets` with ILSVRC2012_ID, WNID, num_children, ...) and the
    ground truth, one ILSVRC2012_ID a line in image order."""
    from scipy.io import savemat
    table = np.array([(k, wnid, "words", 0) for k, wnid in synsets.items()],
                     dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"),
                            ("num_children", "O")])
    meta = io.BytesIO()
    savemat(meta, {"synsets": table})
    write_archive(path, [
        ("ILSVRC2012_devkit_t12/data/meta.mat", meta.getvalue()),
        ("ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt",
         "".join(f"{k}\n" for k in truth).encode())])
    return path


def test_imagenet_validation_images_take_their_classes_from_the_devkit(tmp_path, monkeypatch):
    pytest.importorskip("scipy")
    val = tmp_path / "ILSVRC2012_img_val.tar"
    with tarfile.open(val, "w") as tar:
        for n in (1, 2, 3):
            write_png(tmp_path / "v" / f"{n}.png", n)
            tar.add(tmp_path / "v" / f"{n}.png", f"ILSVRC2012_val_{n:08d}.JPEG")
    # IDs are not in WNID order (1 is n02119789 in the real devkit): the IDs' own WNIDs count.
    devkit = imagenet_devkit(tmp_path / "ILSVRC2012_devkit_t12.tar.gz", [2, 1, 2],
                             {1: "n02119789", 2: "n01440764", 1001: "n00001740"})
    out = pack(val, tmp_path / "val.tgz", prefix="val", labels=devkit)[0]
    assert list(read_members(out)) == ["val/n01440764/ILSVRC2012_val_00000001.JPEG",
                                       "val/n01440764/ILSVRC2012_val_00000003.JPEG",
                                       "val/n02119789/ILSVRC2012_val_00000002.JPEG"]
    with pytest.raises(ValueError, match=r"--labels .*other.tgz is a tar but not ImageNet's "
                                         r"devkit: it holds no data/ILSVRC2012_validation_gro"):
        pack(val, tmp_path / "x.tgz", labels=not_a_devkit(tmp_path / "other.tgz"))
    monkeypatch.setitem(sys.modules, "scipy.io", None)  # as if scipy were not installed
    with pytest.raises(ImportError, match=r"devkit, whose meta.mat needs scipy: pip install"):
        pack(val, tmp_path / "x.tgz", labels=devkit)


def not_a_devkit(path):
    """A tar with meta.mat's name but no ground truth."""
    write_archive(path, [("ILSVRC2012_devkit_t12/data/meta.mat", b"mat")])
    return path


def test_a_labels_file_that_leaves_an_image_out_or_contradicts_itself_is_refused(tmp_path):
    for name in ("a/x.png", "b/x.png", "y.png"):
        write_png(tmp_path / "src" / name, 1)
    labels = tmp_path / "labels.csv"
    cases = [("x.png,cat\n", r"1 of 3 images has no row in .*labels.csv \(e.g. y.png\)"),
             ("x,cat\ny,dog\ny,cat\n", r"labels.csv, line 3: y has two classes, dog and cat"),
             ("x,cat\ny\n", r"labels.csv, line 2: 'y' is not a file and its class"),
             ("x,a/b\ny,c\n", r"line 1: class 'a/b' cannot name a folder"),
             ("x,cat\ny,cat\n", r"a/x.png and b/x.png would both be cat/x.png")]
    for text, message in cases:
        labels.write_text(text)
        with pytest.raises(ValueError, match=message):
            pack(tmp_path / "src", tmp_path / "out.tgz", labels=labels)
    with pytest.raises(ValueError, match=r"directly in the folder .* \(--labels FILE\)"):
        pack(tmp_path / "src", tmp_path / "out.tgz")
    assert not (tmp_path / "out.tgz").exists()


def test_top_folders_are_classes_as_torchvision_image_folder_takes_them(tmp_path, caplog):
    """Tiny ImageNet's train/<wnid>/images/<file> beside <wnid>_boxes.txt: read as it is, the
    only class would be "images" (the loader warns, naming the fix); packed with
    class_folder="top", the classes are the wnids, images found at any depth below them."""
    train = tmp_path / "tiny-imagenet-200" / "train"
    for k, wnid in enumerate(["n01443537", "n01629819"]):
        for i in range(2):
            write_png(train / wnid / "images" / f"{wnid}_{i}.JPEG", 50 * k + i)
        (train / wnid / f"{wnid}_boxes.txt").write_text("0 0 1 1\n")
    as_is = pack(train, tmp_path / "as-is.tgz")[0]
    with pytest.warns(UserWarning, match=r"one class found \('images', 4 images\).*"
                                         r"pack train OUT.tgz --class-folder top"):
        ImageLoader(as_is, batch_size=5, size=4, workers=0, device="cpu").close()
    write_png(train / "n01629819" / "more" / "deeper" / "x.png", 99)
    from imageloader.pack import get_args_parser, main
    out = main(get_args_parser().parse_args([str(train), str(tmp_path / "top.tgz"),
                                             "--class-folder", "top"]))[0]
    assert sorted(read_members(out)) == [
        "train/n01443537/n01443537_0.JPEG", "train/n01443537/n01443537_1.JPEG",
        "train/n01629819/n01629819_0.JPEG", "train/n01629819/n01629819_1.JPEG",
        "train/n01629819/x.png"]
    with ImageLoader(out, batch_size=5, size=4, train=False, workers=0, device="cpu",
                     normalize=False, options=None) as loader:
        images, labels = next(iter(loader))
    assert loader.vocab.classes == ("n01443537", "n01629819")
    assert sorted(zip(labels.tolist(), images[:, 0, 0, 0].tolist())) == \
        [(0, 0), (0, 1), (1, 50), (1, 51), (1, 99)]
    write_png(train / "n01629819" / "dup" / "x.png", 98)
    with pytest.raises(ValueError, match=r"n01629819/dup/x.png and n01629819/more/deeper/x.png "
                                         r"would both be n01629819/x.png"):
        pack(train, tmp_path / "dup.tgz", class_folder="top")
    with pytest.raises(ValueError, match=r"from one of labels, class_folder='top' and "
                                         r"class_pattern, not several"):
        pack(train, tmp_path / "dup.tgz", class_folder="top", labels=tmp_path / "l.csv")


def test_a_folder_inside_a_zip_is_packed_as_its_own_source(tmp_path):
    """Tiny ImageNet as it is downloaded, never unpacked: tiny-imagenet-200.zip holds
    train/<wnid>/images/<file> (classes: the folders under train/) and val/images/<file> with
    val/val_annotations.txt (tab-separated: file, wnid, box)."""
    zipped = tmp_path / "tiny-imagenet-200.zip"
    png = io.BytesIO()
    Image.new("L", (4, 4), 7).save(png, "PNG")
    with zipfile.ZipFile(zipped, "w") as out:
        for wnid in ("n01443537", "n01629819"):
            out.writestr(f"tiny-imagenet-200/train/{wnid}/images/{wnid}_0.JPEG", png.getvalue())
            out.writestr(f"tiny-imagenet-200/train/{wnid}/{wnid}_boxes.txt", "0 0 1 1")
        for n in range(2):
            out.writestr(f"tiny-imagenet-200/val/images/val_{n}.JPEG", png.getvalue())
        out.writestr("tiny-imagenet-200/wnids.txt", "n01443537\nn01629819\n")
    train = pack(zipped, tmp_path / "train.tgz", folder="tiny-imagenet-200/train/",
                 class_folder="top")[0]
    assert list(read_members(train)) == ["train/n01443537/n01443537_0.JPEG",
                                         "train/n01629819/n01629819_0.JPEG"]
    annotations = tmp_path / "val_annotations.txt"
    annotations.write_text("val_0.JPEG\tn01629819\t0\t1\t2\t3\n"
                           "val_1.JPEG\tn01443537\t0\t1\t2\t3\n")
    val = pack(zipped, tmp_path / "val.tgz", folder="tiny-imagenet-200/val",
               labels=annotations)[0]
    assert list(read_members(val)) == ["val/n01443537/val_1.JPEG", "val/n01629819/val_0.JPEG"]
    assert read_members(val)["val/n01443537/val_1.JPEG"] == png.getvalue()
    with pytest.raises(ValueError, match=r"tiny-imagenet-200.zip: no files under test/"):
        pack(zipped, tmp_path / "test.tgz", folder="test")


def test_classes_taken_from_file_names_by_a_pattern(tmp_path):
    """Kaggle's Dogs vs. Cats: train.zip holds train/cat.0.jpg ... dog.12499.jpg; Oxford
    pets: Abyssinian_1.jpg (the class is all before the last _<number>)."""
    zipped = tmp_path / "train.zip"
    png = io.BytesIO()
    Image.new("L", (4, 4), 3).save(png, "PNG")
    with zipfile.ZipFile(zipped, "w") as out:
        for name in ("cat.0.jpg", "cat.1.jpg", "dog.0.jpg", "american_bulldog_12.jpg"):
            out.writestr(f"train/{name}", png.getvalue())
    from imageloader.pack import get_args_parser, main
    with pytest.raises(ValueError, match=r"1 of 4 images' names give no class by "
                                         r"'\^\(cat\|dog\)\[.\]' \(e.g. american_bulldog_12.jpg\)"):
        main(get_args_parser().parse_args([str(zipped), str(tmp_path / "a.tgz"), "--folder",
                                           "train", "--class-pattern", "^(cat|dog)[.]"]))
    out = pack(zipped, tmp_path / "b.tgz", folder="train", class_pattern=r"^(.+?)(?:[._]\d+)")
    assert list(read_members(out[0])) == [
        "train/american_bulldog/american_bulldog_12.jpg", "train/cat/cat.0.jpg",
        "train/cat/cat.1.jpg", "train/dog/dog.0.jpg"]


def test_imagenet_from_kaggle_and_oxford_pets_as_docs_datasets_packs_them(tmp_path):
    """docs/datasets.md's recipes on miniatures: Kaggle's ImageNet zip (class folders deep
    inside it; validation images side by side, classes in LOC_val_solution.csv, a header
    first) and the Oxford-IIIT Pet images.tar.gz (classes in the names, a .mat beside)."""
    png = io.BytesIO()
    Image.new("L", (4, 4), 5).save(png, "PNG")
    zipped = tmp_path / "imagenet-object-localization-challenge.zip"
    with zipfile.ZipFile(zipped, "w") as out:
        for wnid in ("n01440764", "n02119789"):
            out.writestr(f"ILSVRC/Data/CLS-LOC/train/{wnid}/{wnid}_10026.JPEG", png.getvalue())
        for n in (1, 2):
            out.writestr(f"ILSVRC/Data/CLS-LOC/val/ILSVRC2012_val_{n:08d}.JPEG", png.getvalue())
        out.writestr("LOC_synset_mapping.txt", "n01440764 tench, Tinca tinca\n")
    solution = tmp_path / "LOC_val_solution.csv"
    solution.write_text("ImageId,PredictionString\n"
                        "ILSVRC2012_val_00000002,n01440764 1 2 3 4 n01440764 5 6 7 8 \n"
                        "ILSVRC2012_val_00000001,n02119789 255 142 454 329 \n")
    train = pack(zipped, tmp_path / "train.tgz", folder="ILSVRC/Data/CLS-LOC/train")[0]
    assert list(read_members(train)) == ["train/n01440764/n01440764_10026.JPEG",
                                         "train/n02119789/n02119789_10026.JPEG"]
    val = pack(zipped, tmp_path / "val.tgz", folder="ILSVRC/Data/CLS-LOC/val",
               labels=solution)[0]
    assert list(read_members(val)) == ["val/n01440764/ILSVRC2012_val_00000002.JPEG",
                                       "val/n02119789/ILSVRC2012_val_00000001.JPEG"]
    pets = tmp_path / "images.tar.gz"
    write_archive(pets, [(f"images/{name}", png.getvalue()) for name in (
        "Abyssinian_1.jpg", "Abyssinian_10.jpg", "american_pit_bull_terrier_2.jpg",
        "Abyssinian_100.mat")])
    out = pack(pets, tmp_path / "pets.tgz", folder="images", prefix="train",
               class_pattern="^(.+)_[0-9]+[.]")[0]
    assert list(read_members(out)) == [
        "train/Abyssinian/Abyssinian_1.jpg", "train/Abyssinian/Abyssinian_10.jpg",
        "train/american_pit_bull_terrier/american_pit_bull_terrier_2.jpg"]


def test_a_split_given_by_a_list_takes_only_the_images_it_names(tmp_path):
    """Food-101: food-101.tar.gz holds images/<class>/<id>.jpg of both splits, and
    meta/train.txt and meta/test.txt name each split's (class/id, no extension)."""
    png = io.BytesIO()
    Image.new("L", (4, 4), 9).save(png, "PNG")
    food = tmp_path / "food-101.tar.gz"
    write_archive(food, [(f"food-101/images/{name}.jpg", png.getvalue()) for name in (
        "apple_pie/1005649", "apple_pie/1011328", "baklava/1006121", "baklava/1014880")])
    train_list, bad_list = tmp_path / "train.txt", tmp_path / "bad.txt"
    train_list.write_text("apple_pie/1005649\nbaklava/1014880.jpg\n")
    bad_list.write_text("apple_pie/1005649\napple_pie/999\n")
    train = pack(food, tmp_path / "train.tgz", folder="food-101/images", prefix="train",
                 only=train_list)[0]
    assert list(read_members(train)) == ["train/apple_pie/1005649.jpg",
                                         "train/baklava/1014880.jpg"]
    with pytest.raises(ValueError, match=r"1 of the 2 lines of .*bad.txt name no image "
                                         r"\(e.g. apple_pie/999\)"):
        pack(food, tmp_path / "bad.tgz", folder="food-101/images", only=bad_list)
    write_archive(tmp_path / "two.tar", [(name, png.getvalue()) for name in (
        "apple_pie/1005649.jpg", "apple_pie/1005649.png")], compress=False)
    bad_list.write_text("apple_pie/1005649\n")
    with pytest.raises(ValueError, match=r"line 'apple_pie/1005649' of .*bad.txt names "
                                         r"apple_pie/1005649.jpg and apple_pie/1005649.png"):
        pack(tmp_path / "two.tar", tmp_path / "two.tgz", only=bad_list)


def test_classes_named_by_all_their_folders_as_docs_datasets_packs_sun397_and_places365(
        tmp_path):
    """docs/datasets.md's recipes on miniatures: SUN397 (some classes one folder deeper:
    a/apartment_building/outdoor beside a/abbey; a split listed as /a/abbey/<file> paths) and
    Places365 (the same folders; validation classes as numbers, named by its categories file
    through the recipe's awk line, run as the page gives it)."""
    png = io.BytesIO()
    Image.new("L", (4, 4), 6).save(png, "PNG")
    folders = ("a/abbey", "a/apartment_building/outdoor", "c/church/outdoor")
    sun = tmp_path / "SUN397.tar.gz"
    write_archive(sun, [(f"SUN397/{folder}/sun_{n}.jpg", png.getvalue())
                        for folder in folders for n in range(2)] +
                  [("SUN397/ClassName.txt", b"/a/abbey\n")])
    partition = tmp_path / "Training_01.txt"
    partition.write_text("".join(f"/{folder}/sun_0.jpg\n" for folder in folders))
    train = pack(sun, tmp_path / "train.tar", folder="SUN397", prefix="train",
                 class_folder="path", only=partition)[0]
    assert list(read_members(train)) == [
        "train/a-abbey/sun_0.jpg", "train/a-apartment_building-outdoor/sun_0.jpg",
        "train/c-church-outdoor/sun_0.jpg"]
    (tmp_path / "categories_places365.txt").write_text(
        "".join(f"/{folder} {k}\n" for k, folder in enumerate(folders)))
    (tmp_path / "places365_val.txt").write_text("Places365_val_00000001.jpg 2\n"
                                                "Places365_val_00000002.jpg 0\n")
    awk = next(argv for argv in commands("awk", DATASETS))
    if shutil.which("awk") is None:
        pytest.skip("no awk on this machine")
    with open(tmp_path / awk[-1], "w") as out:
        subprocess.run(awk[:-2], cwd=tmp_path, stdout=out, check=True)
    write_archive(tmp_path / "val_256.tar", [(f"val_256/Places365_val_0000000{n}.jpg",
                                              png.getvalue()) for n in (1, 2)], compress=False)
    val = pack(tmp_path / "val_256.tar", tmp_path / "val.tar", folder="val_256", prefix="val",
               labels=tmp_path / awk[-1])[0]
    assert list(read_members(val)) == ["val/a-abbey/Places365_val_00000002.jpg",
                                       "val/c-church-outdoor/Places365_val_00000001.jpg"]


def test_folders_that_would_join_to_one_class_name_are_refused(tmp_path):
    png = io.BytesIO()
    Image.new("L", (4, 4), 6).save(png, "PNG")
    path = write_archive(tmp_path / "a.tgz", [("a-b/c/1.png", png.getvalue()),
                                              ("a/b-c/2.png", png.getvalue())])
    with pytest.raises(ValueError, match=r"folders a-b/c and a/b-c would both be class "
                                         r"'a-b-c'; rename one"):
        pack(path, tmp_path / "out.tgz", class_folder="path")
    with pytest.raises(ValueError, match=r"one of labels, class_folder='path' and "
                                         r"class_pattern, not several"):
        pack(path, tmp_path / "out.tgz", class_folder="path", class_pattern="(.)")


def test_more_shards_than_images_is_refused(class_folder, tmp_path):
    with pytest.raises(ValueError, match="15 images, fewer than 16 shards"):
        pack(class_folder, tmp_path / "s.tgz", shards=16)


def test_reproducible_tarinfo_pins_the_metadata():
    info = reproducible_tarinfo("train/cat/0.png", 7)
    assert (info.name, info.size, info.mtime, info.mode, info.uid, info.gid, info.uname,
            info.gname) == ("train/cat/0.png", 7, 0, 0o644, 0, 0, "", "")
