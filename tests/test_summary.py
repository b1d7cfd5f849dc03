"""summary.py: what an archive holds, each member counted once."""
from conftest import labeled_files, write_archive

from imageloader import summary


def run(capsys, *argv):
    code = summary.main(summary.get_args_parser().parse_args([str(a) for a in argv]))
    return code, capsys.readouterr().out


def test_counts_classes_and_lists_bad_members(tmp_path, capsys):
    files = labeled_files(2, 3) + [("train/c00/broken.jpg", b"nope"), ("train/c01/n.txt", b"x")]
    path = write_archive(tmp_path / "a.tgz", files)
    code, out = run(capsys, path, "--decode")
    assert code == 0
    # The undecodable member is skipped, and not also one of the images.
    assert "6 images in 2 classes" in out
    assert "skipped 1 x undecodable" in out and "skipped 1 x not_image" in out
    assert "not read 'train/c00/broken.jpg': undecodable" in out
    assert "not read 'train/c01/n.txt': not_image" in out  # the reader's skips named too


def test_without_decode_every_image_member_counts(tmp_path, capsys):
    files = labeled_files(2, 3) + [("train/c00/broken.jpg", b"nope")]
    code, out = run(capsys, write_archive(tmp_path / "a.tgz", files))
    assert code == 0 and "7 images in 2 classes" in out and "undecodable" not in out


def test_json_counts_each_member_once(tmp_path):
    files = labeled_files(2, 3) + [("train/c00/broken.jpg", b"nope")]
    result = summary.summarize(write_archive(tmp_path / "a.tgz", files), decode=True)
    assert result["classes"] == {"c00": 3, "c01": 3} and result["images"] == 6
    assert result["skipped"] == {"undecodable": 1}
    assert result["bad_members"] == [("train/c00/broken.jpg", "undecodable")]


def test_a_corrupt_archive_is_an_error(tmp_path, capsys):
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 3))
    blob = bytearray(open(path, "rb").read())
    blob[-8] ^= 1  # the gzip trailer's CRC
    (tmp_path / "bad.tgz").write_bytes(bytes(blob))
    code, out = run(capsys, tmp_path / "bad.tgz")
    assert code == 1 and "ERROR" in out and "bad.tgz" in out


def test_the_splits_of_an_archive_are_counted_and_two_are_pointed_out(tmp_path, capsys):
    files = labeled_files(2, 3, prefix="d/train") + labeled_files(2, 1, prefix="d/val")
    path = write_archive(tmp_path / "a.tgz", files)
    assert summary.summarize(path)["splits"] == {"train": 6, "val": 2}
    code, out = run(capsys, path)
    assert code == 0 and "splits: train: 6, val: 2 (a loader reads one: Options(split" in out
    one = write_archive(tmp_path / "one.tgz", labeled_files(2, 3))
    assert summary.summarize(one)["splits"] == {"train": 6}
    assert "  splits:" not in run(capsys, one)[1]


def test_skips_a_repack_would_read_name_the_command(tmp_path, capsys):
    with open(write_archive(tmp_path / "inner.tgz", [("x.jpg", b"x")]), "rb") as f:
        inner = f.read()
    path = write_archive(tmp_path / "a.tgz", [("n01440764.tar.gz", inner), ("loose.jpg", b"y")])
    code, out = run(capsys, path)
    assert code == 0 and "0 images in 0 classes" in out
    assert (f"skipped 1 x archive (a tar of <class>.tar archives (as ImageNet's "
            f"ILSVRC2012_img_train.tar) is flattened into one the loader reads by python -m "
            f"imageloader pack {path} OUT.tgz --prefix train)") in out
    assert f"skipped 1 x no_class_folder (python -m imageloader pack {path} OUT.tgz --labels " \
           f"FILE puts them in class folders" in out


def test_a_class_name_of_folders_in_several_places_is_pointed_out(tmp_path, capsys):
    files = [(f"SUN397/{folder}/outdoor/{i}.jpg", b"x") for folder in ("a/apartment", "c/church")
             for i in range(2)] + [("SUN397/a/abbey/0.jpg", b"x")]
    path = write_archive(tmp_path / "sun.tgz", files)
    assert summary.summarize(path)["shared"] == {"outdoor": ["SUN397/a/apartment",
                                                             "SUN397/c/church"]}
    code, out = run(capsys, path)
    assert code == 0 and "5 images in 2 classes" in out
    assert "'outdoor': 2 folders (SUN397/a/apartment/outdoor, SUN397/c/church/outdoor)" in out
    assert "--class-folder path" in out and summary.summarize(path)["nested"] == {}
    nested = write_archive(tmp_path / "nested.tgz", [("t/cat/0.jpg", b"x"),
                                                     ("t/cat/extra/1.jpg", b"x")])
    assert summary.summarize(nested)["nested"] == {"extra": "t/cat"}
    assert "t/cat/extra is class 'extra', not 'cat'" in run(capsys, nested)[1]
    assert summary.summarize(write_archive(tmp_path / "one.tgz", labeled_files(2, 3)))[
        "shared"] == {}
