"""Archives read where they live: URLs against real HTTP and S3 servers started here, with
faults injected between loader and server, and two torchrun "nodes" reading one URL."""
from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from conftest import free_port, solid, write_archive
from imageloader import ImageLoader, Options, index, read, remote, vocab
from imageloader.errors import ArchiveError
from imageloader.read import iter_members
from imageloader.remote import RemoteError, RemoteOptions, Url
from imageloader.vocab import archive_regions

pytest.importorskip("fsspec", reason="URL sources need the 'remote' extra (fsspec)")
pytest.importorskip("aiohttp", reason="http(s) URLs need the 'remote' extra (aiohttp)")
pytest.importorskip("rapidgzip", reason="regions of a .tgz need rapidgzip")
from servers import SECRET, MotoServer, fault_proxy, range_server  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:epoch .* skipped")
IMAGES = 120
HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def small_regions(monkeypatch):
    # Archives of ~8 MB: regions of 1 MiB give several; checkpoints every 32 KiB keep the
    # interval that neighbouring regions both fetch small beside them, as 4 MiB checkpoints
    # are beside remote regions of 64 MiB.
    monkeypatch.setattr(remote, "REGION_BYTES", 1 << 20)
    monkeypatch.setattr(read, "RAPIDGZIP_CHUNK", 32 << 10)


def numbered_archive(path, n: int = IMAGES, seed: int = 0) -> str:
    """PNG i is solid gray 10 + i (its pixels say which member it was), each followed by
    64 KB of incompressible non-image data, as JPEG data is."""
    rng = random.Random(seed)
    files = []
    for i in range(n):
        files.append((f"t/c{i % 3}/{i:03d}.png", solid(10 + i, fmt="PNG", mode="L")))
        files.append((f"t/c{i % 3}/{i:03d}.bin", rng.randbytes(64_000)))
    return write_archive(path, files)


@pytest.fixture
def served(tmp_path):
    """An archive under a folder that a Range-honouring HTTP server serves."""
    root = tmp_path / "www"
    (root / "private").mkdir(parents=True)
    path = numbered_archive(root / "a.tgz")
    server = range_server(str(root))
    yield server, path
    server.close()


def options(tmp_path, **kw) -> RemoteOptions:
    kw.setdefault("backoff", 0.01)
    return RemoteOptions(cache_dir=str(tmp_path / "cache"), **kw)


def ids(images) -> list[int]:
    return [round(v - 10) for v in images.float().mean(dim=(1, 2, 3)).tolist()]


def numbered_loader(url, tmp_path, remote_options=None, **kw) -> ImageLoader:
    o = dict(remote=remote_options or options(tmp_path), lookahead=False)
    o.update(kw.pop("options", {}))
    kw.setdefault("workers", 2)
    return ImageLoader(url, batch_size=8, size=8, mode="L", device="cpu", normalize=False,
                       seed=3, options=Options(**o), **kw)


def epoch_ids(loader) -> list[int]:
    seen = []
    for images, labels in loader:
        got = ids(images)
        assert labels.tolist() == [i % 3 for i in got]
        seen += got
    return seen


def walk(source, **kw) -> list[tuple]:
    return [(m.index, m.name, m.data) for m in iter_members(source, skipped=Counter(), **kw)]


# --------------------------------------------------------------------------------------------
# Names, credentials, the cache


def test_urls_and_what_they_show():
    assert remote.is_url("https://h/a.tgz") and remote.is_url("s3://b/a.tgz")
    assert not remote.is_url("data/a.tgz") and not remote.is_url("file:///data/a.tgz")
    url = Url(f"https://user:{SECRET}@h:8080/d/a.tgz?X-Amz-Signature={SECRET}")
    assert url == "https://h:8080/d/a.tgz?..." and SECRET in url.target
    assert SECRET not in remote.cache_path(url, ".classes.json")
    assert remote.cache_path(url, ".x").endswith("-a.tgz.x")
    # Another signature, the same object: the same cache entry.
    assert remote.cache_path(Url("https://h:8080/d/a.tgz?sig=other"), ".x") \
        == remote.cache_path(url, ".x")
    assert remote.cache_path(Url("https://h:8080/e/a.tgz"), ".x") != remote.cache_path(url, ".x")


def test_transient_and_permanent_errors_are_told_apart():
    import aiohttp
    assert remote.transient(ConnectionResetError())
    assert remote.transient(TimeoutError())
    assert remote.transient(aiohttp.ClientPayloadError("cut"))
    assert not remote.transient(FileNotFoundError("x"))
    assert not remote.transient(PermissionError("x"))
    assert not remote.transient(ValueError("a bug, not a fault"))
    try:  # fsspec's HTTP info says FileNotFoundError for a 503 it met on HEAD and on GET
        raise FileNotFoundError("u") from _status_error(503)
    except FileNotFoundError as error:
        assert remote.transient(error)
    assert remote.transient(_status_error(503)) and remote.transient(_status_error(429))
    assert not remote.transient(_status_error(403)) and not remote.transient(_status_error(404))


def _status_error(status: int):
    import aiohttp
    return aiohttp.ClientResponseError(None, (), status=status)


def test_credentials_stay_out_of_names_caches_and_messages(served, tmp_path):
    server, path = served
    shutil.copy(path, Path(server.root) / "private" / "a.tgz")
    host = server.url.removeprefix("http://")
    cache = tmp_path / "cache"
    for source in (f"http://user:{SECRET}@{host}/private/a.tgz",
                   f"{server.url}/private/a.tgz?token={SECRET}"):
        with numbered_loader(source, tmp_path, workers=0) as loader:
            assert sorted(epoch_ids(loader)) == list(range(IMAGES))
            text = repr(loader) + json.dumps(loader.state_dict()) + str(loader.sources)
            assert SECRET not in text
    for file in cache.iterdir():
        assert SECRET not in file.name and SECRET.encode() not in file.read_bytes()
    for source in (f"http://user:{SECRET}@{host}/private/missing.tgz",
                   f"http://user:wrong-{SECRET}@{host}/private/a.tgz",
                   f"{server.url}/private/missing.tgz?token={SECRET}"):
        with pytest.raises(RemoteError) as caught:
            numbered_loader(source, tmp_path, workers=0)
        assert SECRET not in str(caught.value) and f"{host}/private/" in str(caught.value)


def test_sidecar_and_index_live_in_the_cache_and_a_changed_object_is_scanned_again(
        served, tmp_path):
    server, path = served
    url = f"{server.url}/a.tgz"
    with numbered_loader(url, tmp_path, options={"readers": 2}) as loader:
        assert len(loader.plan.parts) >= 6
        assert len(loader) == IMAGES // 8
    names = sorted(f.name for f in (tmp_path / "cache").iterdir())
    assert len(names) == 2 and names[0].endswith("-a.tgz.classes.json") \
        and names[1].endswith("-a.tgz.gzindex")
    assert os.listdir(server.root) == ["private", "a.tgz"] or \
        sorted(os.listdir(server.root)) == ["a.tgz", "private"]  # nothing beside the archive
    server.reset()
    with numbered_loader(url, tmp_path) as again:  # from the cache: no scan
        assert len(again) == IMAGES // 8
    assert server.counts["bytes"] < 100 and server.counts["requests"] <= 2
    # The object changes (a new ETag): scanned again.
    numbered_archive(path, n=IMAGES - 40, seed=1)
    with numbered_loader(url, tmp_path) as changed:
        assert len(changed) == (IMAGES - 40) // 8
        assert sorted(epoch_ids(changed)) == list(range(IMAGES - 40))
    assert server.counts["bytes"] > os.path.getsize(path)


# --------------------------------------------------------------------------------------------
# Regions: ranged requests, each region's bytes only


def test_regions_of_a_url_walk_what_the_file_walks_fetching_its_bytes_once(served, tmp_path,
                                                                           monkeypatch):
    server, path = served
    monkeypatch.setattr(index, "REGION_BYTES", remote.REGION_BYTES)  # the local file's too
    size = os.path.getsize(path)
    url = Url(f"{server.url}/a.tgz", options(tmp_path))
    regions = archive_regions(url)
    assert server.counts["bytes"] <= 1.01 * size  # the scan: the archive once
    local = archive_regions(path)
    assert [r[1:5] for r in regions] == [r[1:5] for r in local] and len(regions) >= 6
    whole = walk(path)
    server.reset()
    pieces, opened = {}, {}
    try:
        for k in random.Random(1).sample(range(len(regions)), len(regions)):
            pieces[k] = walk(regions[k], opened=opened)
            assert len(pieces[k]) == regions[k].images
    finally:
        for stream in opened.values():
            stream.close()
    assert [m for k in sorted(pieces) for m in pieces[k]] == whole
    # One reader, every region: neighbours share one checkpoint interval, nothing more.
    assert server.counts["bytes"] <= 1.1 * size
    server.reset()
    assert walk(url) == whole  # evaluation: the archive streamed in order
    assert server.counts["bytes"] <= 1.01 * size


def test_a_zero_padded_gzip_url_reads_as_its_file_does(tmp_path):
    """Zero bytes after the gzip data (padding) stop no reader of the URL: the scan, its
    regions in any order, the stream in order, and the loader's epoch."""
    root = tmp_path / "www"
    root.mkdir()
    path = numbered_archive(root / "a.tgz")
    with open(path, "ab") as f:
        f.write(bytes(10240))  # a tape record of zeros
    server = range_server(str(root))
    try:
        url = Url(f"{server.url}/a.tgz", options(tmp_path))
        whole = walk(path)
        assert len(whole) == IMAGES and walk(url) == whole
        regions, opened = archive_regions(url), {}
        try:
            pieces = {k: walk(regions[k], opened=opened)
                      for k in random.Random(1).sample(range(len(regions)), len(regions))}
        finally:
            for stream in opened.values():
                stream.close()
        assert len(regions) >= 6 and [m for k in sorted(pieces) for m in pieces[k]] == whole
        with numbered_loader(url, tmp_path, options={"readers": 2}) as loader:
            assert sorted(epoch_ids(loader)) == list(range(IMAGES))
    finally:
        server.close()


def test_loader_over_http_every_image_once_counting_what_it_fetched(served, tmp_path):
    server, path = served
    size = os.path.getsize(path)
    with numbered_loader(f"{server.url}/a.tgz", tmp_path, options={"readers": 2}) as loader:
        assert len(loader.plan.parts) > 2
        server.reset()
        first = epoch_ids(loader)
        assert sorted(first) == list(range(IMAGES))
        stats = loader.stats
        # What the loader says it fetched is what the server sent.
        assert stats.fetched == server.counts["bytes"] <= 1.1 * size
        assert stats.requests == server.counts["requests"] >= len(loader.plan.parts)
        assert stats.retries == 0 and stats.skipped == {"not_image": IMAGES}
        server.reset()
        second = epoch_ids(loader)
        assert sorted(second) == list(range(IMAGES)) and second != first
        # No plain copy of a URL (README): the second epoch fetches the archive again (but
        # for the pieces each reader still holds from the first).
        assert server.counts["bytes"] > 0.5 * size and loader.stats.inflate != "none (plain copy)"
        assert not [p.name for p in tmp_path.rglob("*.plain*")]
    with numbered_loader(f"{server.url}/a.tgz", tmp_path, train=False) as evaluation:
        assert epoch_ids(evaluation) == list(range(IMAGES))  # streamed in order


def test_given_classes_do_not_mix_the_splits_of_a_url(tmp_path):
    """A loader given its classes and no split, reading a URL whose archive holds train/ and
    val/: its plan scans the URL for regions, and the sidecar that scan leaves in the cache
    refuses the two splits before the first batch; split=("train", "val") reads them all."""
    root = tmp_path / "www"
    root.mkdir()
    rng = random.Random(0)
    files = []
    for i in range(IMAGES):
        folder = f"t/{'val' if i % 4 == 0 else 'train'}/c{i % 3}"
        files += [(f"{folder}/{i:03d}.png", solid(10 + i, fmt="PNG", mode="L")),
                  (f"{folder}/{i:03d}.bin", rng.randbytes(64_000))]
    write_archive(root / "s.tgz", files)
    server = range_server(str(root))
    try:
        url = f"{server.url}/s.tgz"
        with numbered_loader(url, tmp_path, vocab=["c0", "c1", "c2"],
                             options={"readers": 2}) as loader:
            with pytest.raises(ValueError, match=r"2 splits found \(train: 90 images in .*"
                                                 r"s.tgz; val: 30 images in "):
                len(loader)
        with numbered_loader(url, tmp_path, options={"readers": 2,
                                                     "split": ("train", "val")}) as loader:
            assert len(loader.plan.parts) > 2 and sorted(epoch_ids(loader)) == \
                list(range(IMAGES))
    finally:
        server.close()


def noise_png(rng: random.Random, at_least: int) -> bytes:
    """A gray PNG of random pixels, which PNG cannot compress: more than at_least bytes."""
    side = int(at_least ** 0.5) + 16
    out = io.BytesIO()
    Image.frombytes("L", (side, side), rng.randbytes(side * side)).save(out, "PNG")
    return out.getvalue()


def test_given_classes_do_not_mix_url_shards_of_two_splits(tmp_path):
    """URL shards of one split each (train and val shards in one list), never scanned (one
    reader per shard: no regions, so no scan), given their classes and no split: the shards'
    first bytes (one small request each; a second, larger one for a shard that starts with a
    file of another kind) refuse the set before the first batch. A shard whose first image
    lies past both is left to its reader; shards of one split are read."""
    root = tmp_path / "www"
    root.mkdir()
    rng = random.Random(0)
    notes = {2: 3 * vocab.PEEK_BYTES, 3: vocab.PEEK_MORE_BYTES + vocab.PEEK_BYTES}
    for shard, split in enumerate(["train", "val", "train", "train"]):
        big = [(f"t/{split}/notes.bin", rng.randbytes(notes[shard]))] if shard in notes else []
        write_archive(root / f"s{shard}.tgz", big + [  # each image larger than the first bytes
            (f"t/{split}/c{i % 3}/{shard}-{i:02d}.png", noise_png(rng, vocab.PEEK_BYTES))
            for i in range(12)])
    server = range_server(str(root))
    s0, s1, s2, s3 = [f"{server.url}/s{shard}.tgz" for shard in range(4)]
    settings = dict(vocab=["c0", "c1", "c2"], options={"readers": 2})  # one per shard
    try:
        with numbered_loader([s0, s1], tmp_path, **settings) as loader:
            server.reset()
            with pytest.raises(ValueError, match=r"2 splits found \(train: member "
                                                 r"'t/train/c0/0-00.png' of .*s0.tgz; val: "
                                                 r"member 't/val/c0/1-00.png' of .*s1.tgz"):
                len(loader)
            assert server.counts["bytes"] <= 2 * vocab.PEEK_BYTES
        with numbered_loader([s1, s2], tmp_path, **settings) as loader:
            with pytest.raises(ValueError, match=r"2 splits found .* member "
                                                 r"'t/train/c0/2-00.png' of .*s2.tgz"):
                len(loader)
        assert not list((tmp_path / "cache").rglob("*.classes.json"))  # told without a scan
        with numbered_loader([s0, s2], tmp_path, **settings) as loader:
            assert len(loader.plan.parts) == 2 and sum(y.numel() for _, y in loader) == 24
        settings["options"] = {"readers": 1}  # s3 shows no image in its first bytes: its
        with numbered_loader([s1, s3], tmp_path, **settings) as loader:  # reader, s1's too,
            with pytest.raises(ValueError, match=r"2 splits found"):     # meets both
                list(loader)
    finally:
        server.close()


def test_a_plain_tar_url_shard_is_told_by_its_headers_past_a_large_first_file(tmp_path):
    """A plain .tar URL shard that starts with a file larger than both first requests (a
    3 MiB README) is told by walking its headers with ranged requests, its data stepped over
    (a few KiB more, not the file): beside a val shard it is refused before the first batch,
    naming its first image. One whose headers past those bytes are all non-images, more of
    them than PEEK_HEADERS, is left to its reader, as a compressed one is."""
    root = tmp_path / "www"
    root.mkdir()
    rng = random.Random(1)
    readme = [("t/train/README.bin", rng.randbytes(3 << 20))]
    images = [(f"t/train/c{i % 3}/p-{i:02d}.png", noise_png(rng, 1024)) for i in range(6)]
    notes = [(f"t/train/notes/{i:02d}.txt", b"n" * 600) for i in range(vocab.PEEK_HEADERS + 4)]
    write_archive(root / "plain.tar", readme + images, compress=False)
    write_archive(root / "deep.tar", readme + notes + images, compress=False)
    write_archive(root / "val.tgz", [(f"t/val/c{i % 3}/v-{i:02d}.png", noise_png(rng, 1024))
                                     for i in range(6)])
    server = range_server(str(root))
    plain, deep, val = (f"{server.url}/{name}" for name in ("plain.tar", "deep.tar", "val.tgz"))
    settings = dict(vocab=["c0", "c1", "c2"], options={"readers": 2})  # one per shard
    try:
        with numbered_loader([val, plain], tmp_path, **settings) as loader:
            server.reset()
            with pytest.raises(ValueError, match=r"2 splits found \(train: member "
                                                 r"'t/train/c0/p-00.png' of .*plain.tar; val"):
                len(loader)
            # each shard's size and first bytes; the plain one's first MiB, then one piece
            # of its headers past the README (2 KiB), not the README's 3 MiB
            assert server.counts["requests"] <= 6
            assert server.counts["bytes"] < 2 * vocab.PEEK_BYTES + vocab.PEEK_MORE_BYTES + 4096
        assert vocab._first_image_named(deep) is None  # past PEEK_HEADERS headers
        assert vocab._first_image_named(plain) == "t/train/c0/p-00.png"
    finally:
        server.close()


# --------------------------------------------------------------------------------------------
# Faults


@pytest.mark.parametrize("schedule", [("pass", "503", "pass", "cut", "pass"),
                                      ("pass", "pass", "pass", "pass", "stall")])
def test_faults_between_loader_and_server_lose_and_repeat_nothing(served, tmp_path, schedule):
    """A proxy answers 503 to a share of the requests, drops a share mid-body, or holds them
    past the timeout: every image exactly once per epoch, the scan included."""
    server, path = served
    proxy = fault_proxy(server.url, schedule, stall=1.0)
    o = options(tmp_path, block_size=512 << 10, timeout=0.3)
    try:
        with numbered_loader(f"{proxy.url}/a.tgz", tmp_path, o,
                             options={"readers": 2}) as loader:
            assert len(loader.plan.parts) > 2  # ranged requests of regions, side by side
            for epoch in range(2):
                assert sorted(epoch_ids(loader)) == list(range(IMAGES))
                assert loader.stats.retries > 0
        faults = proxy.counts["503"] + proxy.counts["cuts"] + proxy.counts["stalls"]
        assert faults >= 5
    finally:
        proxy.close()


def test_a_permanent_error_raises_at_once_naming_the_url(served, tmp_path):
    server, path = served
    slow = options(tmp_path, backoff=30.0)  # a retry would take 30 s: there is none
    started = time.monotonic()
    with pytest.raises(RemoteError, match=r"not found \(HTTP 404\): http://.*/nothere\.tgz"):
        numbered_loader(f"{server.url}/nothere.tgz", tmp_path, slow)
    shutil.copy(path, Path(server.root) / "private" / "b.tgz")
    Path(server.root, "forbidden").mkdir()
    shutil.copy(path, Path(server.root) / "forbidden" / "b.tgz")
    with pytest.raises(RemoteError, match=r"access denied \(HTTP 403\)"):
        numbered_loader(f"{server.url}/forbidden/b.tgz", tmp_path, slow)
    # Refused in the middle of an epoch (credentials that expired): the archive and where
    # the reader was.
    pieces = options(tmp_path, backoff=30.0, block_size=64 << 10)
    with numbered_loader(f"{server.url}/a.tgz", tmp_path, pieces, workers=0) as loader:
        server.deny_after = server.counts["requests"] + 3
        with pytest.raises(ArchiveError, match=r"access denied \(HTTP 403\): http://.*a\.tgz"
                                               r" \(archive 'http://.*/a\.tgz', member #"):
            epoch_ids(loader)
    assert time.monotonic() - started < 20


# --------------------------------------------------------------------------------------------
# S3 (moto's server) through s3fs


@pytest.fixture(scope="module")
def moto():
    pytest.importorskip("s3fs", reason="s3:// URLs need the 's3' extra (s3fs)")
    if importlib.util.find_spec("moto") is None:  # imported only by its server's process
        pytest.skip("the S3 tests need moto's server (test extra)")
    server = MotoServer()
    yield server
    server.close()


def test_s3_bucket_every_image_once_also_through_faults(moto, tmp_path):
    import s3fs
    fs = s3fs.S3FileSystem(**moto.storage_options(), skip_instance_cache=True)
    bucket = f"b{random.randrange(1 << 30)}"
    fs.mkdir(bucket)
    path = numbered_archive(tmp_path / "a.tgz")
    for shard in ("shard-0.tgz", "shard-1.tgz"):
        fs.put_file(path, f"{bucket}/{shard}")
    o = options(tmp_path, storage_options=moto.storage_options())
    with numbered_loader(f"s3://{bucket}/shard-*.tgz", tmp_path, o) as loader:
        assert [str(s) for s in loader.sources] == [f"s3://{bucket}/shard-0.tgz",
                                                     f"s3://{bucket}/shard-1.tgz"]
        assert sorted(epoch_ids(loader)) == sorted(list(range(IMAGES)) * 2)
        assert loader.stats.fetched <= 1.1 * 2 * os.path.getsize(path)
    sidecar = next((tmp_path / "cache").glob("*-shard-0.tgz.classes.json"))
    assert json.loads(sidecar.read_text())["archive"]["version"]  # the object's ETag
    proxy = fault_proxy(moto.url, ("pass", "503", "pass", "cut"))
    try:
        shutil.rmtree(tmp_path / "cache")
        faulty = options(tmp_path, storage_options=moto.storage_options(proxy.url, False),
                         block_size=512 << 10)
        retries = 0
        with numbered_loader(f"s3://{bucket}/shard-1.tgz", tmp_path, faulty) as loader:
            for _ in range(2):
                assert sorted(epoch_ids(loader)) == list(range(IMAGES))
                retries += loader.stats.retries
        assert retries > 0
        assert proxy.counts["cuts"] > 0 and proxy.counts["503"] > 0
    finally:
        proxy.close()


# --------------------------------------------------------------------------------------------
# Two nodes, four ranks, one URL


@pytest.mark.timeout(240)
def test_two_torchrun_nodes_fetch_the_archive_about_once_per_epoch(served, tmp_path):
    """Two torchrun "nodes" of two gloo ranks each, on this host, each node with a cache of
    its own: together every image exactly once per epoch, and the bytes the server sent in an
    epoch at most 1.1 x the archive (also for the scan, which rank 0 alone makes). Ranks
    split a .tgz by regions, which need rapidgzip's index: the ranks' processes must see it
    (on the GPU host it came through PYTHONPATH, which this test once replaced: 4 x)."""
    pytest.importorskip("rapidgzip")
    server, path = served
    size = os.path.getsize(path)
    port = str(free_port())
    runs = []
    for node in range(2):
        runs.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
             f"--node-rank={node}", "--nproc-per-node=2", "--master-addr=127.0.0.1",
             f"--master-port={port}", str(HERE / "remote_ranks.py"), f"{server.url}/a.tgz",
             str(tmp_path / f"cache-{node}"), str(tmp_path / "out")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
                p for p in (str(HERE.parent), os.environ.get("PYTHONPATH")) if p)}))
    for run in runs:
        output = run.communicate(timeout=220)[0]
        assert run.returncode == 0, output[-4000:]
    ranks = [json.loads(f.read_text()) for f in sorted((tmp_path / "out").iterdir())]
    marks = server.marks
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    for epoch in range(2):
        seen = [r["ids"][epoch] for r in ranks]
        assert sorted(sum(seen, [])) == list(range(IMAGES))  # exactly once over 4 ranks
        sent = marks[f"epoch{epoch}"]["bytes"] - marks[f"before{epoch}"]["bytes"]
        assert sent <= 1.1 * size
        assert sum(r["fetched"][epoch] for r in ranks) == sent  # the loaders' own count
    assert marks["built"]["bytes"] <= 1.1 * size  # one scan for both nodes


@pytest.mark.timeout(120)
def test_an_error_of_the_shared_scan_reaches_every_rank(served, tmp_path):
    """Rank 0 meets the 404 while the other rank waits for its scan: both raise it, and
    neither hangs in the collective."""
    import torch.multiprocessing as mp
    server, _ = served
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_shared_scan_rank, args=(2, free_port(), f"{server.url}/nothere.tgz",
                                          str(tmp_path), out), nprocs=2, join=True)
        errors = dict(out)
    assert sorted(errors) == [0, 1]
    assert all("not found (HTTP 404)" in text and "nothere.tgz" in text
               for text in errors.values())


def _shared_scan_rank(rank: int, world: int, port: int, url: str, tmp: str, out) -> None:
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        try:  # both ranks lack the sidecar; rank 0 scans and meets the 404
            ImageLoader(url, device="cpu", workers=0,
                        options=Options(remote=RemoteOptions(cache_dir=f"{tmp}/c{rank}")))
        except RemoteError as error:
            out[rank] = str(error)
    finally:
        dist.destroy_process_group()




def test_bench_remote_script_compares_http_with_the_file(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(HERE.parent / "scripts" / "bench"))
    import bench_remote
    path = numbered_archive(tmp_path / "a.tgz")
    args = bench_remote.get_args_parser().parse_args(
        ["--archive", path, "--seconds", "0.2", "--workers", "1", "--readers", "2",
         "--batch-size", "16", "--out", str(tmp_path / "bench.json")])
    rows = bench_remote.main(args)
    http = {r["what"]: r for r in rows if r["source"] == "http"}
    assert {r["source"] for r in rows} == {"local", "http"}
    assert http["reader alone, stream"]["img_per_s"] > 0 and http["loader alone"]["img_per_s"] > 0
    assert http["scan"]["fetched_per_byte"] <= 1.01
    assert http["reader alone, regions"]["fetched_per_byte"] <= 1.1
    assert json.loads((tmp_path / "bench.json").read_text())["rows"] == rows
