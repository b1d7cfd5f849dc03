"""Stage 1: the streaming tar reader."""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
import tracemalloc
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from conftest import (add_entry, add_file, labeled_files, photo, solid, sparse_archive,
                      write_archive)
from imageloader import read
from imageloader.errors import ArchiveError, Limits
from imageloader.pack import pack
from imageloader.read import available_inflaters, expand_sources, iter_members


def members(source, **kwargs):
    skipped = Counter()
    found = list(iter_members(source, skipped=skipped, **kwargs))
    return found, skipped


class NonSeekable(io.RawIOBase):
    """A pipe-like stream: read only, no seek, no tell."""

    def __init__(self, data: bytes):
        self._buf = io.BytesIO(data)

    def readable(self):
        return True

    def readinto(self, b):
        chunk = self._buf.read(min(len(b), 1000))  # short reads, like a socket
        b[:len(chunk)] = chunk
        return len(chunk)


def test_labels_come_from_parent_folder_in_stream_order(tmp_path):
    files = [("train/n01/a.jpg", solid(10)), ("train/n02/deep/b.JPEG", solid(20)),
             ("x/n03/c.png", solid(30, fmt="PNG"))]
    found, skipped = members(write_archive(tmp_path / "a.tgz", files))
    assert [(m.name, m.label) for m in found] == [
        ("train/n01/a.jpg", "n01"), ("train/n02/deep/b.JPEG", "deep"), ("x/n03/c.png", "n03")]
    assert [m.data for m in found] == [d for _, d in files]
    assert [m.index for m in found] == [0, 1, 2]
    assert not skipped


@pytest.mark.parametrize("compress", [True, False])
def test_tgz_tar_and_non_seekable_stream_agree(tmp_path, compress):
    files = labeled_files(3, 4)
    path = write_archive(tmp_path / "a.tar", files, compress=compress)
    from_path, _ = members(path)
    with open(path, "rb") as f:
        from_stream, _ = members(NonSeekable(f.read()))
    assert [m.name for m in from_path] == [n for n, _ in files]
    assert [(m.name, m.data) for m in from_stream] == [(m.name, m.data) for m in from_path]
    assert from_stream[0].archive.startswith("<")  # streams are named by their type


@pytest.mark.parametrize("inflate", available_inflaters())
def test_every_inflater_gives_the_same_members(tmp_path, inflate):
    files = labeled_files(2, 5)
    found, _ = members(write_archive(tmp_path / "a.tgz", files), inflate=inflate)
    assert [(m.name, m.data) for m in found] == files


def test_skipped_members_are_counted_by_reason_never_decoded(tmp_path):
    good = [("t/cat/1.jpg", solid(50)), ("t/dog/2.png", solid(60, fmt="PNG"))]
    files = good + [
        ("t/cat/._1.jpg", b"resource fork"), ("t/cat/.DS_Store", b"x"),
        ("__MACOSX/t/cat/1.jpg", solid(1)), ("t/cat/notes.txt", b"hello"),
        ("root.jpg", solid(2)), ("t/cat/empty.jpg", b""), ("t/cat/1.jpg", solid(3)),
        ("t/cat/huge.jpg", b"x" * 5000),
    ]

    def extra(tar):
        add_entry(tar, "t/dir", tarfile.DIRTYPE)
        add_entry(tar, "t/cat/link.jpg", tarfile.SYMTYPE, "1.jpg")
        add_entry(tar, "t/cat/hard.jpg", tarfile.LNKTYPE, "t/cat/1.jpg")
        add_entry(tar, "t/cat/fifo.jpg", tarfile.FIFOTYPE)
        add_entry(tar, "t/cat/chr.jpg", tarfile.CHRTYPE)

    path = write_archive(tmp_path / "a.tgz", files, extra=extra)
    found, skipped = members(path, limits=Limits(max_member_bytes=4096))
    assert [(m.name, m.data) for m in found] == good
    assert skipped == Counter(macos_metadata=3, not_image=1, no_class_folder=1, empty=1,
                              duplicate=1, too_large=1, directory=1, link=2, special=2)


@pytest.mark.parametrize("name, reason", [
    ("/abs/cat/x.jpg", "bad_name"), ("t/../cat/x.jpg", "bad_name"),
    ("t\\cat\\x.jpg", "bad_name"), ("t/ca\x01t/x.jpg", "bad_name"),
    ("./t/cat/x.jpg", None), ("t//cat/x.jpg", None),
])
def test_hostile_names_are_counted_and_odd_ones_normalized(tmp_path, name, reason):
    path = write_archive(tmp_path / "a.tgz", [(name, solid(9))])
    found, skipped = members(path)
    if reason:
        assert not found and skipped == Counter({reason: 1})
    else:
        assert [(m.name, m.label) for m in found] == [("t/cat/x.jpg", "cat")]


def _tar_with_names(path, names: list[str], fmt: int, encoding: str = "utf-8") -> str:
    """A plain tar written by tarfile with `encoding`; names may hold surrogateescape'd bytes
    (raw bytes that are not valid UTF-8). Image i is solid gray 10 + i."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt, encoding=encoding) as tar:
        for i, name in enumerate(names):
            add_file(tar, name, solid(10 + i))
    Path(path).write_bytes(raw.getvalue())
    return str(path)


LONG = "\xe9" * 120  # a long name: GNU long-name entry or pax path record


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT],
                         ids=["gnu", "pax", "ustar"])
def test_latin1_names_are_read_not_skipped(tmp_path, fmt):
    """tarfile's encoding="latin-1" stores these names as bytes that are not valid UTF-8 (pax
    stores UTF-8 records instead): every image is read, under the class folder it was given."""
    names = ["t/caf\xe9/x.jpg", "t/caf\xe9/\xe9t\xe9.jpg", "t/na\xefve/y.jpg"]
    if fmt != tarfile.USTAR_FORMAT:
        names.append(f"t/na\xefve/{LONG}.jpg")
    path = _tar_with_names(tmp_path / "a.tar", names, fmt, encoding="latin-1")
    found, skipped = members(path)
    assert [m.name for m in found] == names and not skipped
    assert [m.label for m in found] == ["caf\xe9", "caf\xe9", "na\xefve", "na\xefve"][:len(names)]
    assert [m.data for m in found] == [solid(10 + i) for i in range(len(names))]


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["gnu", "pax"])
def test_raw_byte_names_decode_per_component(tmp_path, fmt):
    """Raw bytes in names (pax marks them hdrcharset=BINARY): a component that is not UTF-8
    reads as cp1252, Latin-1 where cp1252 has no character; UTF-8 components stay UTF-8."""
    written = ["t/caf\udce9/x.jpg",            # b"caf\xe9"
               "t/caf\xe9/\udc80\udc96.jpg",    # UTF-8 folder, cp1252 file name: euro, dash
               "t/\udcff\udc81/y.jpg",          # 0x81: no cp1252 character, Latin-1's
               f"t/caf\udce9/{LONG}.jpg"]        # long UTF-8 name in a non-UTF-8 folder
    read = ["t/caf\xe9/x.jpg", "t/caf\xe9/\u20ac\u2013.jpg", "t/\xff\x81/y.jpg",
            f"t/caf\xe9/{LONG}.jpg"]
    path = _tar_with_names(tmp_path / "a.tar", written, fmt)
    with tarfile.open(path) as tar:  # the archive really holds those bytes
        assert tar.getnames()[0].encode("utf-8", "surrogateescape") == b"t/caf\xe9/x.jpg"
    found, skipped = members(path)
    assert [m.name for m in found] == read and not skipped
    assert [m.label for m in found] == ["caf\xe9", "caf\xe9", "\xff\x81", "caf\xe9"]


def _scan_peak(path) -> tuple[int, int]:
    tracemalloc.start()
    count = sum(1 for _ in iter_members(path, skipped=Counter(), read_data=False))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return count, peak


def test_member_list_does_not_grow(tmp_path):
    peaks = {}
    for n in (5_000, 20_000):
        files = [(f"t/c{i % 10}/{i:05d}.jpg", b"\xff\xd8" + bytes(30)) for i in range(n)]
        path = write_archive(tmp_path / f"many{n}.tar", files, compress=False,
                             fmt=tarfile.USTAR_FORMAT)
        count, peaks[n] = _scan_peak(path)
        assert count == n
    # 15,000 more retained headers would take > 7 MB; the duplicate check's set of name digests
    # legitimately grows ~1.5-2.5 MB (set tables double). The block being walked is the same.
    growth = peaks[20_000] - peaks[5_000]
    assert growth < 4_000_000, f"peak grew by {growth} bytes: the member list grows"
    assert peaks[20_000] < 4_000_000 + 2 * read._READ_CHUNK


def test_glob_and_list_sources(tmp_path):
    for i in range(3):
        write_archive(tmp_path / f"shard-{i}.tgz", labeled_files(1, 1))
    assert expand_sources(str(tmp_path / "shard-*.tgz")) == [
        str(tmp_path / f"shard-{i}.tgz") for i in range(3)]
    assert len(expand_sources([str(tmp_path / "shard-0.tgz"), str(tmp_path / "shard-2.tgz")])) == 2
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        expand_sources(str(tmp_path / "nothing-here-*.tgz"))
    with pytest.raises(FileNotFoundError, match="missing.tgz"):
        expand_sources(str(tmp_path / "missing.tgz"))


# ---- archive-level errors name the archive, the member and the offset -----------------------


def _tar_bytes(files):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in files:
            add_file(tar, name, data)
    return bytearray(raw.getvalue())


@pytest.mark.parametrize("inflate", available_inflaters())
def test_gzip_crc_mismatch_is_reported(tmp_path, inflate):
    blob = bytearray(gzip.compress(bytes(_tar_bytes(labeled_files(2, 3))), mtime=0))
    blob[-8] ^= 0x01  # the stored CRC32: data inflates fine, only the checksum disagrees
    path = tmp_path / "crc.tgz"
    path.write_bytes(blob)
    with pytest.raises(ArchiveError, match="checksum|CRC") as info:
        members(str(path), inflate=inflate)
    assert "crc.tgz" in str(info.value)


@pytest.mark.parametrize("inflate", available_inflaters())
@pytest.mark.parametrize("images", ["solid", "photos"])
def test_truncated_gzip_is_reported(tmp_path, inflate, images):
    """A cut .tgz (an interrupted download) is said to be truncated, naming the member, with
    no inflater's internals (rapidgzip cut inside textured JPEGs: ISA-L's thread and bits)."""
    files = labeled_files(2, 3) if images == "solid" else \
        [(f"t/c{i % 2}/{i}.jpg", photo(i, size=(256, 256))) for i in range(40)]
    blob = gzip.compress(bytes(_tar_bytes(files)), mtime=0)
    path = tmp_path / "cut.tgz"
    path.write_bytes(blob[: len(blob) * 2 // 3])
    with pytest.raises(ArchiveError, match="cut.tgz") as info:
        members(str(path), inflate=inflate)
    assert "truncated" in str(info.value) and "Thread" not in str(info.value)
    if images == "photos":  # cut past its first members: the one it ends in is named
        assert info.value.member in {name for name, _ in files}


@pytest.mark.parametrize("inflate", available_inflaters())
def test_zero_padding_after_the_gzip_data_is_read_past(tmp_path, inflate):
    """Zero bytes after the gzip data (tapes' and some packers' padding, which gzip, tar and
    Python's gzip skip) read as no data, however many: rapidgzip, refusing more than a few, is
    handed the file without them. Both tars' trailers end in zero bytes of their own (their
    lengths' high bytes), which the cut must keep."""
    for tar in (_tar_bytes(labeled_files(2, 3)), _tar_bytes(labeled_files(2, 3, size=(900, 700)))):
        blob = gzip.compress(bytes(tar), mtime=0)
        assert blob[-1] == 0
        plain = tmp_path / "plain.tgz"
        plain.write_bytes(blob)
        expected = contents(plain, inflate)
        trailer_zeros = len(blob) - len(blob.rstrip(b"\0"))
        for zeros in [*range(1, 12), 512, 10240, 70_000]:
            padded = blob + bytes(zeros)
            path = tmp_path / f"pad{zeros}.tgz"
            path.write_bytes(padded)
            # Cut 4 zero bytes past the last non-zero one (fewer: not cut), rapidgzip's most
            assert read.gzip_end(len(padded), lambda a, b: padded[a:b]) == \
                len(blob) + min(zeros, 4 - trailer_zeros)
            assert contents(path, inflate) == expected, zeros


def contents(path, inflate):
    found, skipped = members(str(path), inflate=inflate)
    return [(m.index, m.name, m.label, m.data) for m in found], skipped


@pytest.mark.parametrize("inflate", available_inflaters())
def test_bytes_after_the_gzip_data_that_are_not_gzip_are_named(tmp_path, inflate):
    blob = gzip.compress(bytes(_tar_bytes(labeled_files(2, 3))), mtime=0)
    path = tmp_path / "tail.tgz"
    path.write_bytes(blob + b"GARBAGE" * 10)
    with pytest.raises(ArchiveError, match=r"the gzip data is followed by bytes that are not "
                                           r"gzip .*tail.tgz"):
        members(str(path), inflate=inflate)


@pytest.mark.parametrize("fmt", ["gnu", "posix-0.0", "posix-0.1", "posix-1.0"])
def test_sparse_members_read_as_the_files_tar_stored(tmp_path, fmt):
    """tar -S stores a file with holes as its pieces and a map of them: read as the file,
    zeros in the holes (as tar -x writes it), not skipped, whichever sparse format."""
    path, files = sparse_archive(tmp_path, fmt)
    found, skipped = members(path)
    assert {m.name: m.data for m in found} == files
    assert skipped == {"directory": 2}


def test_corrupt_header_mid_archive_is_not_a_silent_end(tmp_path):
    files = labeled_files(1, 4)
    tar = _tar_bytes(files)
    second_header = 512 + -(-len(files[0][1]) // 512) * 512
    tar[second_header + 148:second_header + 156] = b"9999999\x00"  # wrong header checksum
    path = tmp_path / "bad.tar"
    path.write_bytes(bytes(tar))
    with pytest.raises(ArchiveError, match="corrupt tar header") as info:
        members(str(path))
    assert info.value.offset == second_header
    assert "bad.tar" in str(info.value) and files[0][0] in str(info.value)


def test_truncated_plain_tar_inside_data(tmp_path):
    tar = _tar_bytes(labeled_files(1, 3))
    path = tmp_path / "short.tar"
    path.write_bytes(bytes(tar[:1500]))
    with pytest.raises(ArchiveError, match="short.tar"):
        members(str(path))


def test_tar_without_end_marker_is_truncated(tmp_path):
    files = labeled_files(1, 2)
    tar = _tar_bytes(files)
    end = 2 * (512 + -(-len(files[0][1]) // 512) * 512)
    path = tmp_path / "noend.tar"
    path.write_bytes(bytes(tar[:end]))
    with pytest.raises(ArchiveError, match="truncated"):
        members(str(path))


def test_garbage_after_end_marker_is_reported(tmp_path):
    tar = _tar_bytes(labeled_files(1, 2)) + bytearray(b"\x01" * 2048)
    path = tmp_path / "tail.tar"
    path.write_bytes(bytes(tar))
    with pytest.raises(ArchiveError, match="after the end-of-archive"):
        members(str(path))


def test_not_an_archive(tmp_path):
    path = tmp_path / "photo.tgz"
    path.write_bytes(solid(3))
    with pytest.raises(ArchiveError, match="not a tar") as info:
        members(str(path))
    assert "photo.tgz" in str(info.value)


@pytest.mark.parametrize("kind", ["zip", "bz2", "xz", "zst", "7z"])
def test_other_archive_formats_are_named_with_the_command_that_makes_a_tgz(tmp_path, kind):
    """A zip (Kaggle's usual), a tar compressed with bzip2, xz or zstd, a 7-Zip archive: the
    error says what the file is and how to make a tar of it (plain, from a compressed tar);
    for the zip and the xz the command's archive reads the same members."""
    files = labeled_files(2, 3)
    path = tmp_path / f"photos.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(path, "w") as out:
            for name, data in files:
                out.writestr(name, data)  # train/<class>/<file>, as pack keeps it
    elif kind in ("bz2", "xz"):
        write_archive(tmp_path / "photos.tar", files, compress=False)
        module = bz2 if kind == "bz2" else lzma
        path.write_bytes(module.compress((tmp_path / "photos.tar").read_bytes()))
    else:  # no compressor of these here: their magic numbers, then bytes
        magic = {"zst": b"\x28\xb5\x2f\xfd", "7z": b"7z\xbc\xaf\x27\x1c"}[kind]
        path.write_bytes(magic + bytes(range(256)) * 8)
    said = {"zip": r"a zip file: .*python -m imageloader pack .*photos.zip OUT.tgz makes one",
            "bz2": r"bzip2-compressed: .*bzip2 -dc .*photos.bz2 > OUT.tar",
            "xz": r"xz-compressed: .*xz -dc .*photos.xz > OUT.tar",
            "zst": r"zstd-compressed: .*zstd -dc .*photos.zst",
            "7z": r"a 7-Zip archive: .*7z x .*photos.7z"}[kind]
    with pytest.raises(ArchiveError, match=said + r".*\(archive '.*photos\." + kind):
        members(str(path))
    if kind == "zip":
        made = pack(path, tmp_path / "made.tgz")[0]
    elif kind == "xz":  # what xz -dc writes: the plain tar
        made = tmp_path / "made.tar"
        made.write_bytes(lzma.decompress(path.read_bytes()))
    else:
        return
    assert [(m.name, m.data) for m in members(str(made))[0]] == sorted(files)


# --------------------------------------------------------------------------------------------
# The block walker against tarfile: every format, every header kind, written by other tools


def _tarfile_view(path):
    """What tarfile itself finds: (name, size, data) of regular files, in order."""
    out = []
    with tarfile.open(path) as tar:
        for info in tar:
            if info.isfile():
                out.append((info.name, info.size, tar.extractfile(info).read()))
    return out


def _mixed_entries(tar):
    long_dir = "train/" + "d" * 120           # > 100 bytes: ustar prefix, GNU or pax long name
    d = tarfile.TarInfo("train/c00")
    d.type = tarfile.DIRTYPE
    tar.addfile(d)
    add_file(tar, f"{long_dir}/c01/long-{'n' * 90}.jpg", solid(60))
    add_file(tar, "train/c\u00e9/non-ascii.jpg", solid(70))   # pax path record, or raw UTF-8
    link = tarfile.TarInfo("train/c00/link.jpg")
    link.type, link.linkname = tarfile.SYMTYPE, "img000.jpg"
    tar.addfile(link)
    add_file(tar, "train/c00/after-link.jpg", solid(80))
    big = tarfile.TarInfo("train/c00/exact-block.jpg")
    big.size = 1024                            # data ends exactly on a block: no padding
    tar.addfile(big, io.BytesIO(bytes(1024)))


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("inflate", available_inflaters())
def test_walker_agrees_with_tarfile_on_every_format(tmp_path, fmt, inflate):
    files = labeled_files(2, 3)

    def extra(tar):
        if fmt == tarfile.USTAR_FORMAT:  # no long names in plain ustar beyond the prefix
            add_file(tar, "train/" + "p" * 120 + "/c01/prefixed.jpg", solid(50))
            return
        _mixed_entries(tar)

    path = write_archive(tmp_path / "mixed.tgz", files, extra=extra, fmt=fmt)
    found, skipped = members(path, inflate=inflate)
    expected = [(n, s, d) for n, s, d in _tarfile_view(path) if n.endswith(".jpg")]
    assert [(m.name, len(m.data), m.data) for m in found] == expected
    assert [m.label for m in found][-1] in ("c00", "c01")
    if fmt != tarfile.USTAR_FORMAT:
        assert skipped == Counter(directory=1, link=1)


def test_walker_reads_archives_made_by_gnu_tar_and_git(tmp_path):
    import shutil
    import subprocess
    tree = tmp_path / "tree"
    for name, data in labeled_files(2, 2) + [("train/c01/" + "x" * 150 + ".jpg", solid(5))]:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    made = []
    if shutil.which("tar"):
        for fmt in ("gnu", "posix", "ustar", "v7"):
            out = tmp_path / f"{fmt}.tgz"
            if subprocess.run(["tar", f"--format={fmt}", "-czf", str(out), "-C", str(tree),
                               "train"], capture_output=True).returncode == 0:
                made.append(str(out))
    if shutil.which("git"):
        git = ["git", "-C", str(tree), "-c", "user.email=t@t", "-c", "user.name=t"]
        subprocess.run(git[:3] + ["init", "-q"], check=True)
        subprocess.run(git + ["add", "."], check=True)
        subprocess.run(git + ["commit", "-qm", "x"], check=True)
        out = tmp_path / "git.tgz"   # starts with a global pax header (the commit id)
        subprocess.run(git + ["archive", "--format=tar.gz", "-o", str(out), "HEAD"], check=True)
        made.append(str(out))
    if not made:
        pytest.skip("neither tar nor git is installed")
    for path in made:
        found, _ = members(path)
        expected = sorted((n, d) for n, _, d in _tarfile_view(path) if n.endswith(".jpg"))
        assert sorted((m.name, m.data) for m in found) == expected, path
        assert len(found) == 5, path  # the long name too (v7 cannot store it: tar refuses)


def test_damage_far_into_a_big_archive_names_the_member_that_holds_it(tmp_path):
    """The walker reads MiBs ahead; the blame must still land on the damaged member."""
    import random
    rng = random.Random(0)
    files = [(f"train/c{i % 2:02d}/{i:04d}.jpg", rng.randbytes(100_000)) for i in range(120)]
    path = write_archive(tmp_path / "big.tgz", files)   # ~12 MB, incompressible
    blob = open(path, "rb").read()
    cut = len(blob) * 7 // 10
    (tmp_path / "cut.tgz").write_bytes(blob[:cut])
    for inflate in available_inflaters():
        with pytest.raises(ArchiveError, match="(?i)truncated|unexpected end") as info:
            members(str(tmp_path / "cut.tgz"), inflate=inflate)
        # Incompressible data: the compressed offset of the cut ~ its tar offset; each member
        # takes 100,352 bytes + a 512-byte header. Allow the member before (inflaters buffer).
        holder = cut // (100_352 + 512)
        assert holder - 2 <= info.value.index <= holder + 1, (inflate, str(info.value))


def test_a_folder_as_the_source_says_pass_an_archive_and_how_to_make_one(tmp_path):
    (tmp_path / "photos" / "cat").mkdir(parents=True)
    folder = str(tmp_path / "photos")
    with pytest.raises(IsADirectoryError) as info:
        expand_sources(folder)
    message = str(info.value)
    assert message.startswith(f"{folder!r} is a folder: pass an archive (.tgz, .tar.gz, .tar)")
    assert f"python -m imageloader pack {folder} {folder}.tgz" in message

