"""scripts/bench/: the data generators (make_imagenet_like, make_digits) and bench_inflate.

scripts/bench/ is not a package, so each script is loaded from its file; every test
calls the script's main() in-process on tiny inputs.
"""

import gzip
import importlib.util
import io
import json
import random
import re
import sys
import tarfile
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from conftest import (encode, gzip_header_mtime, noisy_jpeg, photo, read_members, solid,
                      write_archive)

REPO_ROOT = Path(__file__).resolve().parents[1]
SCRIPTS_DIR = REPO_ROOT / "scripts" / "bench"
DATA_DIR = REPO_ROOT / "data"


def load_script(name, monkeypatch):
    """Import scripts/bench/<name>.py as module <name>.

    It is registered in sys.modules and scripts/bench/ is put on sys.path so that
    multiprocessing workers can find its functions by name, whatever the start method.
    """
    monkeypatch.syspath_prepend(str(SCRIPTS_DIR))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def script_args(module, *argv):
    """Parse argv with the script's own parser, so defaults are the documented ones."""
    return module.get_args_parser().parse_args([str(a) for a in argv])


# --- make_imagenet_like --------------------------------------------------------


@pytest.fixture
def make_imagenet_like(monkeypatch):
    return load_script("make_imagenet_like", monkeypatch)


MEMBER_PATTERN = re.compile(r"train/(n\d{8})/(n\d{8})_(\d+)\.JPEG")


def test_make_imagenet_like_batch_pixels_spreads_only_for_varied_sizes(make_imagenet_like,
                                                                      tmp_path):
    """--batch-pixels writes nothing and reports megapixels per batch of the member order:
    uniform images give every batch the same; photos (a tail of large ones) spread, and the
    batches' mean is the images' mean times the batch."""
    out = tmp_path / "never.tgz"
    fixed = make_imagenet_like.main(script_args(make_imagenet_like, "--out", out, "--images", 100,
                                                "--batch-pixels", 32))
    assert fixed["batches"] == 3 and fixed["p10"] == fixed["max"] == 32 * 500 * 375 / 1e6
    assert fixed["p90_over_p50"] == 1.0
    photos = make_imagenet_like.main(script_args(make_imagenet_like, "--out", out, "--images",
                                                 2048, "--sizes", "photos", "--batch-pixels", 64))
    assert photos["batches"] == 32
    assert photos["p10"] < photos["p50"] < photos["p90"] <= photos["max"]
    assert photos["p90_over_p50"] > 1.02
    assert 0.85 < photos["p50"] / (64 * photos["mean_mp_per_image"]) < 1.15
    assert not out.exists()
    with pytest.raises(ValueError, match="--batch-pixels 200"):
        make_imagenet_like.main(script_args(make_imagenet_like, "--out", out, "--images", 100,
                                            "--batch-pixels", 200))


def test_make_imagenet_like_small_archive(make_imagenet_like, tmp_path):
    out = tmp_path / "bench" / "tiny.tgz"
    stats = make_imagenet_like.main(
        script_args(make_imagenet_like, "--out", out, "--images", 20, "--classes", 4, "--jobs", 1)
    )

    members = read_members(out)
    assert len(members) == 20 and stats["images"] == 20
    parsed = [MEMBER_PATTERN.fullmatch(name) for name in members]
    assert all(parsed)
    assert all(m.group(1) == m.group(2) for m in parsed)
    assert sorted(int(m.group(3)) for m in parsed) == list(range(20))
    classes = [m.group(1) for m in parsed]
    assert sorted(set(classes)) == sorted(make_imagenet_like.wnid(k) for k in range(4))
    assert all(classes.count(c) == 5 for c in set(classes))
    assert list(members) != sorted(members)  # shuffled member order

    for data in members.values():
        image = Image.open(io.BytesIO(data))
        assert image.format == "JPEG" and image.mode == "RGB" and image.size == (500, 375)
        image.load()
    # Photo-like: far larger than a flat synthetic image would be (a few KB).
    assert 40_000 < stats["mean_jpeg_bytes"] < 90_000
    assert gzip_header_mtime(out) == 0
    # The hand-assembled gzip stream passes the standard CRC/length check.
    assert len(gzip.decompress(out.read_bytes())) % tarfile.RECORDSIZE == 0


def test_make_imagenet_like_shards_hold_the_same_images(make_imagenet_like, tmp_path):
    out = tmp_path / "tiny.tgz"
    make_imagenet_like.main(
        script_args(make_imagenet_like, "--out", out, "--images", 12, "--classes", 3, "--shards", 3, "--jobs", 1)
    )
    members = read_members(out)
    shard_members = [read_members(tmp_path / f"tiny-shard-{k:05d}.tgz") for k in range(3)]
    assert [len(s) for s in shard_members] == [4, 4, 4]
    # Shards are contiguous runs of the single archive's order, with identical bytes.
    assert [name for s in shard_members for name in s] == list(members)
    assert all(members[name] == data for s in shard_members for name, data in s.items())


def test_make_imagenet_like_is_reproducible_whatever_the_jobs(make_imagenet_like, tmp_path):
    common = ["--images", 8, "--classes", 2, "--width", 64, "--height", 48, "--seed", 3]
    make_imagenet_like.main(script_args(make_imagenet_like, "--out", tmp_path / "a.tgz", "--jobs", 1, *common))
    make_imagenet_like.main(script_args(make_imagenet_like, "--out", tmp_path / "b.tgz", "--jobs", 2, *common))
    assert (tmp_path / "a.tgz").read_bytes() == (tmp_path / "b.tgz").read_bytes()


def test_make_imagenet_like_exif_share_tags_that_share_and_changes_nothing_else(
        make_imagenet_like, tmp_path):
    """--exif-share: about that share of the photos carry a camera's EXIF orientation (6, 8
    or 3), with the same pixels and sizes as without it; without it the bytes are unchanged."""
    common = ["--images", 200, "--classes", 2, "--sizes", "photos", "--jobs", 1]
    for name, extra in (("plain", []), ("zero", ["--exif-share", 0]),
                        ("tagged", ["--exif-share", 0.3])):
        make_imagenet_like.main(script_args(make_imagenet_like, "--out", tmp_path / f"{name}.tgz",
                                            *common, *extra))
    assert (tmp_path / "plain.tgz").read_bytes() == (tmp_path / "zero.tgz").read_bytes()
    plain, tagged = read_members(tmp_path / "plain.tgz"), read_members(tmp_path / "tagged.tgz")
    assert list(plain) == list(tagged)
    orientations = []
    for name, data in tagged.items():
        with Image.open(io.BytesIO(data)) as image, Image.open(io.BytesIO(plain[name])) as bare:
            orientations.append(image.getexif().get(0x0112, 1))
            assert image.size == bare.size and bare.getexif().get(0x0112, 1) == 1
            assert np.array_equal(np.asarray(image), np.asarray(bare))
    assert set(orientations) <= {1, 3, 6, 8} and 6 in orientations
    assert 40 <= sum(o != 1 for o in orientations) <= 80  # 30% of 200, give or take
    with pytest.raises(ValueError, match="--exif-share"):
        make_imagenet_like.main(script_args(make_imagenet_like, "--out", tmp_path / "x.tgz",
                                            "--exif-share", 1.5))


def test_make_imagenet_like_progressive_share_makes_that_share_progressive(make_imagenet_like,
                                                                          tmp_path):
    """--progressive-share: about that share of the photos progressive, the others the same
    bytes as without it; the default is the archive's 1%; photos only."""
    common = ["--images", 200, "--classes", 2, "--sizes", "photos", "--jobs", 1]
    for name, extra in (("plain", []), ("default", ["--progressive-share", 0.01]),
                        ("many", ["--progressive-share", 0.4]),
                        ("none", ["--progressive-share", 0])):
        make_imagenet_like.main(script_args(make_imagenet_like, "--out", tmp_path / f"{name}.tgz",
                                            *common, *extra))
    assert (tmp_path / "plain.tgz").read_bytes() == (tmp_path / "default.tgz").read_bytes()
    plain = read_members(tmp_path / "plain.tgz")

    def progressive(members):
        return {name for name, data in members.items()
                if Image.open(io.BytesIO(data)).info.get("progressive")}

    for name, low, high in (("many", 50, 110), ("none", 0, 0)):
        members = read_members(tmp_path / f"{name}.tgz")
        changed = progressive(members) ^ progressive(plain)
        assert low <= len(progressive(members)) <= high
        assert all(members[m] == data for m, data in plain.items() if m not in changed)
    with pytest.raises(ValueError, match="--progressive-share"):
        make_imagenet_like.main(script_args(make_imagenet_like, "--out", tmp_path / "x.tgz",
                                            "--progressive-share", 0.5))  # --sizes fixed


def test_crc32_combine_matches_crc_of_concatenation(make_imagenet_like):
    rng = random.Random(0)
    for length_a, length_b in [(0, 0), (1, 0), (0, 7), (513, 4096), (3, (1 << 20) + 5)]:
        a, b = rng.randbytes(length_a), rng.randbytes(length_b)
        combined = make_imagenet_like.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b))
        assert combined == zlib.crc32(a + b)


# --- the committed digits archives ------------------------------------------------


DIGITS_COUNTS = {"train": 1437, "val": 360}
DIGIT_MEMBER_PATTERN = re.compile(r"(train|val)/(\d)/(\d{4})\.png")


def digits_members(split):
    return read_members(DATA_DIR / f"digits-{split}.tgz")


def test_committed_digits_archives_have_expected_counts_and_decode():
    row_indices = []
    for split, expected_count in DIGITS_COUNTS.items():
        members = digits_members(split)
        assert len(members) == expected_count
        labels = []
        for name, data in members.items():
            match = DIGIT_MEMBER_PATTERN.fullmatch(name)
            assert match and match.group(1) == split
            labels.append(match.group(2))
            row_indices.append(int(match.group(3)))
            image = Image.open(io.BytesIO(data))
            assert image.format == "PNG" and image.mode == "L" and image.size == (8, 8)
        assert sorted(set(labels)) == [str(d) for d in range(10)]
        assert list(members) == sorted(members)
    # Every load_digits row is in exactly one split.
    assert sorted(row_indices) == list(range(1797))


def test_make_digits_rebuilds_the_committed_archives(monkeypatch, tmp_path):
    pytest.importorskip("sklearn")
    make_digits = load_script("make_digits", monkeypatch)
    make_digits.main(script_args(make_digits, "--out-dir", tmp_path / "a"))
    make_digits.main(script_args(make_digits, "--out-dir", tmp_path / "b"))

    for split in DIGITS_COUNTS:
        first = (tmp_path / "a" / f"digits-{split}.tgz").read_bytes()
        assert first == (tmp_path / "b" / f"digits-{split}.tgz").read_bytes()
        assert gzip_header_mtime(tmp_path / "a" / f"digits-{split}.tgz") == 0
        # Compare decoded pixels, not bytes: PNG/zlib output may differ across library versions.
        rebuilt, committed = read_members(tmp_path / "a" / f"digits-{split}.tgz"), digits_members(split)
        assert list(rebuilt) == list(committed)
        for name in committed:
            assert np.array_equal(
                np.asarray(Image.open(io.BytesIO(rebuilt[name]))), np.asarray(Image.open(io.BytesIO(committed[name])))
            )


# --- bench_inflate -----------------------------------------------------------


def test_bench_inflate_measures_every_inflater_and_the_copy(monkeypatch, tmp_path):
    from conftest import labeled_files, write_archive
    from imageloader.read import available_inflaters

    bench = load_script("bench_inflate", monkeypatch)
    archive = write_archive(tmp_path / "a.tgz", labeled_files(3, 20))
    result = bench.main(script_args(bench, "--archive", archive, "--cores", 16))
    assert set(result["inflate"]) == set(available_inflaters())
    assert result["images"] == 60 and result["copy_write"]["mb"] > 0
    assert result["copy_read"]["whole"]["mb"] == result["copy_write"]["mb"]
    assert result["walk"]["copy"]["img_per_s"] > 0
    ceiling = result["ceiling"]
    assert ceiling["first_epoch_img_per_s_on_16_cores"] == pytest.approx(
        16 * ceiling["inflate_img_per_s_per_core"], rel=0.01)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tgz", "a.tgz.classes.json"]


def test_bench_dali_runs_dalis_recipe_on_the_extracted_archive(monkeypatch, tmp_path):
    """The DALI peer (scripts/bench/bench_dali.py) on the CPU: the .tgz is extracted once
    beside it, DALI reads the class folders, and batches come out at the recipe's shape with
    labels of the archive's classes. Skipped where DALI is not installed (CI: it is ~200 MB)."""
    pytest.importorskip("nvidia.dali")
    archive = tmp_path / "digits-train.tgz"
    archive.write_bytes((DATA_DIR / "digits-train.tgz").read_bytes())
    bench_dali = load_script("bench_dali", monkeypatch)
    args = bench_dali.get_args_parser().parse_args(
        ["--archive", str(archive), "--device", "cpu", "--models", "", "--batch-size", "8",
         "--threads", "1", "--warmup", "2", "--max-seconds", "0.5"])
    root = bench_dali.extracted(str(archive))
    images, labels = next(bench_dali.dali_batches(root, args, None))
    assert tuple(images.shape) == (8, 3, 224, 224) and labels.dtype.is_floating_point is False
    classes = sorted(p.name for p in root.iterdir())
    assert 0 <= int(labels.min()) and int(labels.max()) < len(classes) == 10
    results = bench_dali.main(args)
    assert results["classes"] == 10 and results["loader"][0]["img_per_s"] > 0


@pytest.mark.parametrize("prefix, root", [("train/", "train"), ("", ""), ("photos/", "photos"),
                                          ("data/val/", "data/val")])
def test_bench_dali_gives_dali_the_class_folders_of_any_layout_the_loader_reads(
        monkeypatch, tmp_path, prefix, root):
    """A photo archive of another layout than train/<class>/ (a re-measure on someone's own
    archive, gpu_host.sh ARCHIVE=... dali) hands DALI its class folders, not a missing train/
    or one folder above them; hidden entries beside them do not count."""
    files = [(f"{prefix}{name}/{i}.jpg", solid(40 * k)) for k, name in enumerate("abc")
             for i in range(2)] + [(f"{prefix}.DS_Store", b"x")]
    archive = write_archive(tmp_path / "mine.tgz", files)
    bench_dali = load_script("bench_dali", monkeypatch)
    classes = bench_dali.extracted(archive)
    assert classes == Path(archive + ".files", root)
    assert sorted(p.name for p in classes.iterdir() if p.is_dir()) == ["a", "b", "c"]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_traced_steps_are_marked_so_that_plot_timeline_reads_their_host_time(
        monkeypatch, tmp_path, device):
    """bench.trace_steps (bench.py --trace, bench_dali.py --trace): `warmup` batches untimed,
    then each traced step a ProfilerStep# range in order, which plot_timeline.host_summary
    reads as train_resnet.py's traces, with the step's own ops inside (on CUDA, the GPU's
    kernels too)."""
    import torch
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    bench = load_script("bench", monkeypatch)
    timeline = load_script("plot_timeline", monkeypatch)
    weights = torch.randn(64, 64, device=device)
    stepped = []

    class Trainer:
        def step(self, images, labels):
            stepped.append(int(labels[0]))
            (images @ weights).relu_().sum()

    batches = ((torch.randn(32, 64, device=device), torch.tensor([i])) for i in range(100))
    path = tmp_path / "trace.json"
    bench.trace_steps(Trainer(), batches, str(path), steps=3, warmup=2)
    assert stepped == [0, 1, 2, 3, 4]
    trace = json.loads(path.read_text())
    summary = timeline.host_summary(trace, 20)
    assert [name for name, _ in summary["steps_ms"]] == [f"ProfilerStep#{i}" for i in range(3)]
    assert all(ms > 0 for _, ms in summary["steps_ms"])
    assert ("aten::mm", 3) in {(name, count) for name, _, count in summary["top_ops"]}
    if device == "cuda":
        assert any(e.get("cat") == "kernel" for e in timeline.trace_events(trace))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_probe_counts_cpu_by_python_thread_name_and_nices_its_busy_threads(monkeypatch):
    """probe_host_threads: a busy Python thread's CPU is found under its own name (the kernel
    calls every Python thread "python3"), and the busy threads run at the niceness asked."""
    import os
    import threading
    import time
    probe = load_script("probe_host_threads", monkeypatch)
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    def busy_seconds(snapshot) -> float:
        return sum(seconds for name, seconds in snapshot.values() if name == "probe-busy")

    before, process0 = probe.thread_cpu(), time.process_time()
    assert busy_seconds(before) == 0.0
    thread = threading.Thread(target=spin, name="probe-busy", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while busy_seconds(probe.thread_cpu()) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert busy_seconds(probe.thread_cpu()) >= 0.3
    finally:
        stop.set()
        thread.join()
    # Ended before the second snapshot: gone from /proc, its time is found only in the
    # process's total; or still there for a moment after join(), under the kernel's name.
    # Either way counted once, and the names add up to the process's time.
    process = time.process_time() - process0
    by_name = probe.cpu_by_name(before, probe.thread_cpu(), process)
    assert "probe-busy" not in by_name
    assert sum(v for k, v in by_name.items() if k != "MainThread") >= 0.25
    assert sum(by_name.values()) == pytest.approx(process, abs=0.05)
    if os.getpriority(os.PRIO_PROCESS, 0) > 10:
        pytest.skip("this process is niced past 10 already")
    with probe.Interference(busy=2, nice=10) as busy:
        deadline = time.monotonic() + 10  # each sets its own niceness as it starts
        while True:
            nices = [os.getpriority(os.PRIO_PROCESS, t.native_id) for t in busy.threads]
            if nices == [10, 10] or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert nices == [10, 10]


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity")
                    or len(__import__("os").sched_getaffinity(0)) < 2,
                    reason="needs Linux's affinity calls and two cores")
def test_probe_keeps_the_first_cores_free_of_other_threads_and_children(monkeypatch):
    """probe_host_threads.KeepCoresFree: a thread of this process and a child process (and
    its thread) are moved off the kept cores within a tick, the main thread is not, and all
    get every core back at the end; host_busy and descendants read /proc."""
    import os
    import subprocess
    import sys
    import threading
    import time
    probe = load_script("probe_host_threads", monkeypatch)
    cores = os.cpu_count()
    if os.sched_getaffinity(0) != set(range(cores)):
        pytest.skip("this process may not run on every core")
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    child = subprocess.Popen([sys.executable, "-c", "import threading, time; "
                              "threading.Thread(target=time.sleep, args=(30,)).start(); "
                              "time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{child.pid}/task")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in probe.descendants(os.getpid())
        child_tasks = [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]
        with probe.KeepCoresFree(1):
            time.sleep(0.6)
            assert os.sched_getaffinity(other.native_id) == set(range(1, cores))
            assert all(os.sched_getaffinity(t) == set(range(1, cores)) for t in child_tasks)
            assert os.sched_getaffinity(0) == set(range(cores))  # the main thread
        assert os.sched_getaffinity(other.native_id) == set(range(cores))
        assert all(os.sched_getaffinity(t) == set(range(cores)) for t in child_tasks)
        with pytest.raises(ValueError, match="leaves none"):
            probe.KeepCoresFree(cores)
    finally:
        stop.set()
        child.kill()
        child.wait()
    busy, total = probe.host_busy()
    assert 0 < busy <= total


def test_probe_decoding_lanes_decode_whole_batches_until_stopped_and_raise_a_failure(
        monkeypatch):
    """probe_host_threads.DecodingLanes: each lane (gpujpeg.lanes of the spec) decodes the
    whole batches in a thread of its own, counts what it decoded, stops with the block, and
    a lane's failure is raised at the end (a row without its neighbour would pass for one)."""
    import threading
    import time
    import torch
    from imageloader import gpujpeg
    probe = load_script("probe_host_threads", monkeypatch)
    seen, specs = [], []

    class Lane:
        def __init__(self, fail=False):
            self.fail = fail

        def decode(self, datas):
            if self.fail:
                raise RuntimeError("engine gone")
            seen.append((threading.get_ident(), len(datas)))
            time.sleep(0.001)
            return [object()] * (len(datas) - 1) + [None]  # one JPEG it could not decode

    made = [Lane(), Lane()]
    monkeypatch.setattr(gpujpeg, "available", lambda *a, **k: ["preferred"])
    monkeypatch.setattr(gpujpeg, "lanes", lambda preferred, spec: specs.append(spec) or made)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: __import__("contextlib").nullcontext())
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: None)
    # Stand-in JPEGs (numbers) stay as they are: on a CUDA host the probe copies real ones
    # into page-locked memory (this failed there, and only there)
    monkeypatch.setattr(probe, "page_locked", lambda arrays: arrays)
    jpegs = list(range(10))  # two whole batches of 4, two left over
    with probe.DecodingLanes(jpegs, "hw+hw", torch.device("cuda"), batch=4) as lanes:
        deadline = time.monotonic() + 10
        while lanes.images < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert specs == ["hw+hw"] and not any(t.is_alive() for t in lanes.threads)
    assert {n for _, n in seen} == {4} and len({t for t, _ in seen}) == 2
    assert lanes.images == 3 * len(seen)  # the None is not counted
    assert all(count > 0 for count in lanes.decoded)  # each lane counts its own
    made[:] = [Lane(fail=True)]
    with pytest.raises(RuntimeError, match="a decoding lane failed") as raised:
        with probe.DecodingLanes(jpegs, None, torch.device("cuda"), batch=4):
            time.sleep(0.1)
    assert "engine gone" in str(raised.value.__cause__)
    with pytest.raises(ValueError, match="at least 4 JPEGs"):
        probe.DecodingLanes(jpegs[:3], None, torch.device("cuda"), batch=4)


def test_probe_sets_the_cuda_schedule_keeping_the_other_flags_and_checks_it(monkeypatch):
    """probe_host_threads.set_schedule: the schedule bits replaced, the other device flags
    kept, and a driver that keeps another schedule is an error (the row would lie)."""
    import ctypes
    probe = load_script("probe_host_threads", monkeypatch)

    class Runtime:
        def __init__(self, flags, keeps=False):
            self.flags, self.keeps, self.set = flags, keeps, []

        def cudaGetDeviceFlags(self, ref):
            ctypes.cast(ref, ctypes.POINTER(ctypes.c_uint)).contents.value = self.flags
            return 0

        def cudaSetDeviceFlags(self, value):
            self.set.append(value.value)
            if not self.keeps:
                self.flags = value.value
            return 0

    runtime = Runtime(0x8 | 0x1)  # map host memory, spin
    assert probe.set_schedule("blocking", runtime) == "blocking"
    assert runtime.set == [0x8 | 0x4] and runtime.flags == 0xC
    with pytest.raises(RuntimeError, match="kept schedule spin where yield was asked"):
        probe.set_schedule("yield", Runtime(0x1, keeps=True))


def test_probe_stream_threads_copy_memory_and_count_it(monkeypatch):
    """probe_host_threads' memory streams: each thread moves whole 64 MB buffers and counts them."""
    import time
    probe = load_script("probe_host_threads", monkeypatch)
    with probe.Interference(stream=2) as busy:
        deadline = time.monotonic() + 20
        while busy.copied < 4 * busy.STREAM_BYTES and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(busy.threads) == 2 and not any(t.is_alive() for t in busy.threads)
    assert busy.copied >= 4 * busy.STREAM_BYTES and busy.copied % busy.STREAM_BYTES == 0


@pytest.mark.parametrize("where", ["thread", "process"])
def test_probe_runs_a_loader_beside_the_steps_until_told_and_counts_its_batches(
        monkeypatch, tmp_path, where):
    """probe_host_threads.LoaderBeside: our loader drops its batches in a thread or a spawned
    process, says it is ready past `warm` batches, goes on counting while the steps run, and
    ends with the block."""
    import time
    from conftest import photo, write_archive
    probe = load_script("probe_host_threads", monkeypatch)
    files = [(f"train/c{k % 3}/{k}.jpg", photo(k)) for k in range(24)]
    archive = write_archive(tmp_path / "a.tgz", files)
    kwargs = dict(batch_size=4, train=True, size=16, device="cpu", workers=1, prefetch=2,
                  drop_last=True, decode="cpu")
    with probe.LoaderBeside(archive, kwargs, where, warm=8, timeout=120) as beside:
        assert beside.batches.value >= 8  # 6 batches an epoch: into the second
        seen = beside.batches.value
        deadline = time.monotonic() + 60
        while beside.batches.value < seen + 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert beside.batches.value >= seen + 6
    assert not beside.worker.is_alive()
    if where == "process":
        assert beside.worker.exitcode == 0
    with pytest.raises(ValueError, match="thread' or 'process"):
        probe.LoaderBeside(archive, kwargs, "rank")
    broken = dict(kwargs, batch_size=0)  # the loader refuses it: never warm, said so
    with pytest.raises(RuntimeError, match=f"beside \\({where}\\) never warmed up") as raised:
        with probe.LoaderBeside(archive, broken, where, warm=8, timeout=60):
            pass
    if where == "thread":  # its cause with it (a process prints its own traceback)
        assert "batch_size" in str(raised.value.__cause__)


def test_probe_cuda_calls_make_the_decoders_pattern_per_image_and_keep_the_pace(monkeypatch):
    """probe_host_threads.CudaCalls: per image a copy to the device, a memset, an event
    recorded and waited for, on its own stream; a batch takes at least images / rate seconds;
    a failed call raises (a silent row would pass for one with interference)."""
    import time
    import types
    probe = load_script("probe_host_threads", monkeypatch)
    calls = []

    class Runtime:
        def __getattr__(self, name):
            return lambda *args: calls.append(name) or 0
    calls_obj = probe.CudaCalls.__new__(probe.CudaCalls)
    calls_obj.rt = Runtime()
    calls_obj.host = calls_obj.source = calls_obj.target = __import__("torch").zeros(4)
    calls_obj.stream = types.SimpleNamespace(cuda_stream=7)
    calls_obj.event = __import__("ctypes").c_void_p(1)
    start = time.perf_counter()
    assert calls_obj.batch(images_per_s=100, images=5) == 5
    assert time.perf_counter() - start >= 0.05 * 0.9
    assert calls == ["cudaMemcpyAsync", "cudaMemsetAsync", "cudaEventRecord",
                     "cudaEventSynchronize"] * 5
    calls_obj.rt = types.SimpleNamespace(cudaMemcpyAsync=lambda *args: 2)
    with pytest.raises(RuntimeError, match="status 2"):
        calls_obj.batch(images_per_s=100, images=1)


PROC_INTERRUPTS = """           CPU0       CPU1       CPU2
 24:          1          0          0  IO-APIC   5-edge      ACPI:Ged
 90:        100         10          0  PCI-MSI 1048576-edge      nvidia
 91:          0          0          5  PCI-MSI 2097152-edge      nvidia
LOC:       1000       1000       1000   Local timer interrupts
ERR:          0
"""


def test_probe_interrupts_rates_the_matching_lines_by_cpu(monkeypatch):
    """probe_interrupts: per-second rates of the lines that match, busiest CPUs first."""
    probe = load_script("probe_interrupts", monkeypatch)
    before = probe.parse(PROC_INTERRUPTS)
    assert before["90: PCI-MSI 1048576-edge nvidia"] == [100, 10, 0]
    assert before["ERR:"] == [0, 0, 0]
    after = dict(before)
    after["90: PCI-MSI 1048576-edge nvidia"] = [2100, 410, 0]
    after["LOC: Local timer interrupts"] = [3000, 1000, 1000]
    rows = probe.rates(before, after, 2.0, "NVIDIA")
    assert rows == [{"irq": "90: PCI-MSI 1048576-edge nvidia", "per_s": 1200.0,
                     "cpus": {"CPU0": 1000, "CPU1": 200}}]  # 91 did not move
    assert [r["irq"] for r in probe.rates(before, after, 2.0, "")] == [
        "90: PCI-MSI 1048576-edge nvidia", "LOC: Local timer interrupts"]


@pytest.mark.skipif(not Path("/proc/interrupts").is_file(), reason="reads /proc (Linux)")
def test_probe_interrupts_runs_the_command_and_passes_its_exit_code(monkeypatch, tmp_path):
    probe = load_script("probe_interrupts", monkeypatch)
    out = tmp_path / "irq.json"
    result = probe.main(script_args(probe, "--out", out, sys.executable, "-c",
                                    "raise SystemExit(3)"))
    assert result["exit"] == 3 and result["seconds"] > 0
    assert json.loads(out.read_text())["exit"] == 3


def test_probe_progressive_times_one_photo_as_baseline_and_progressive(monkeypatch, tmp_path):
    """probe_progressive: the same pixels encoded both ways (only the second progressive),
    each decoded whole and at 1/8 scale; a row per size in the JSON lines."""
    probe = load_script("probe_progressive", monkeypatch)
    both = probe.encode_both(96, 64, 90)
    opened = {kind: Image.open(io.BytesIO(data)) for kind, data in both.items()}
    assert [bool(img.info.get("progressive")) for img in opened.values()] == [False, True]
    assert {img.size for img in opened.values()} == {(96, 64)}
    out = tmp_path / "p.json"
    rows = probe.main(script_args(probe, "--sizes", "96x64,160x120", "--repeats", 1,
                                  "--out", out))
    assert [json.loads(line) for line in out.read_text().splitlines()] == rows
    assert [r["pixels"] for r in rows] == [96 * 64, 160 * 120]
    for row in rows:
        for kind in ("baseline", "progressive"):
            assert row[kind]["kb"] > 0 and row[kind]["whole_ms"] > 0
            assert row[kind]["eighth_ms"] > 0


def test_probe_cpu_siblings_names_the_cpu_that_halves_the_probes_loop(monkeypatch, tmp_path):
    """probe_cpu_siblings on a pretend 8-CPU machine where CPU 5 is CPU 0's hyperthread: CPU 0's
    loop runs at half speed beside it and at full speed beside any other."""
    probe = load_script("probe_cpu_siblings", monkeypatch)
    monkeypatch.setattr(probe.os, "sched_getaffinity", lambda pid: set(range(8)))

    def rates(cpus, seconds):
        return {c: 50.0 if set(cpus) >= {0, 5} else 100.0 for c in cpus}

    monkeypatch.setattr(probe, "rates", rates)
    out = tmp_path / "siblings.json"
    result = probe.main(script_args(probe, "--out", out))
    assert result["siblings_of_probe_cpu"] == [5]
    assert result["beside"]["5"] == 0.5 and result["beside"]["4"] == 1.0
    assert result["all_busy_per_cpu"] == 0.5 and result["first_half_busy_per_cpu"] == 1.0
    assert json.loads(out.read_text()) == result


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_probe_cpu_siblings_really_spins_on_the_cpus_it_names(monkeypatch):
    """Its loop runs pinned, one process per CPU, and each reports a rate."""
    import os
    probe = load_script("probe_cpu_siblings", monkeypatch)
    cpus = sorted(os.sched_getaffinity(0))[:2]
    measured = probe.rates(cpus, 0.1)
    assert sorted(measured) == cpus and all(rate > 0 for rate in measured.values())


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_probe_gpu_share_graphed_step_trains_as_the_eager_one(monkeypatch):
    """probe_gpu_share's CUDA graph of the training step (forward, backward, SGD) moves the
    weights as bench.Trainer's eager step does from the same weights and batch; a replay
    reads the batch copied into its static input, not the one it was captured with."""
    import torch
    probe = load_script("probe_gpu_share", monkeypatch)
    bench = sys.modules["bench"]
    torch.manual_seed(0)
    eager = bench.Trainer("resnet18", 10)
    graphed_trainer = bench.Trainer("resnet18", 10)
    graphed_trainer.model.load_state_dict(eager.model.state_dict())
    capture = (torch.rand(8, 3, 64, 64, device="cuda").contiguous(
        memory_format=torch.channels_last), torch.randint(0, 10, (8,), device="cuda"))
    graphed = probe.GraphedStep(graphed_trainer, *capture)  # 3 warm-up steps on `capture`
    for _ in range(3):
        eager.step(*capture)
    batch = (torch.rand(8, 3, 64, 64, device="cuda").contiguous(
        memory_format=torch.channels_last), torch.randint(0, 10, (8,), device="cuda"))
    before = [p.detach().clone() for p in graphed_trainer.model.parameters()]
    eager.step(*batch)
    graphed.step(*batch)
    torch.cuda.synchronize()
    moved = sum((p - b).abs().sum().item() for p, b in
                zip(graphed_trainer.model.parameters(), before))
    assert moved > 0
    for p, q in zip(eager.model.parameters(), graphed_trainer.model.parameters()):
        assert torch.allclose(p, q, atol=2e-3, rtol=1e-2)


# --- summarize_stacks ------------------------------------------------------------

MAIN = 'process 100:"python3 bench.py --x a;b"'  # a command line may hold ';'
CHILD = 'process 100:"python3 bench.py --x a;b";process {pid}:"python3 -c from m import f;f()"'
RAW_STACKS = "\n".join([
    # the profiled process: a lane thread (its id named on one line only, py-spy's way)...
    f"{MAIN};thread (7): imageloader-prefetch;run (threading.py:1);_submit_all (prefetch.py:9);"
    "decode (gpujpeg.py:5) 6",
    f"{MAIN};thread (7);run (threading.py:1);_submit_all (prefetch.py:9);get (queue.py:3);"
    "wait (threading.py:2) 3",
    f"{MAIN};thread (7);run (threading.py:1);_submit_all (prefetch.py:9);decode (gpujpeg.py:5);"
    "take_gil (libpython3.12.so.1.0);pthread_cond_timedwait (libc.so.6) 1",
    # ...and the collecting thread of a later epoch under the same id, still named as the lane
    f"{MAIN};thread (7): imageloader-prefetch;run (threading.py:1);_collect_all (prefetch.py:2);"
    "_put_unless (prefetch.py:3);put (queue.py:4);wait (threading.py:2) 5",
    f"{MAIN};thread (1): MainThread;<module> (bench.py:1);_next_job (prefetch.py:4);"
    "decode (gpujpeg.py:5);nvimgcodecDecoderDecode (libnvimgcodec.so.0) 4",
    # two reader processes, each its main thread and a feeder thread
    CHILD.format(pid=201) + ";thread (11): MainThread;<module> (<string>:1);"
    "spawn_main (spawn.py:1);reader_main (workers.py:1);put (workers.py:2) 8",
    CHILD.format(pid=201) + ";thread (12): feeder;run (threading.py:1);_feed (queues.py:1);"
    "wait (threading.py:2) 2",
    CHILD.format(pid=202) + ";thread (13): MainThread;<module> (<string>:1);"
    "spawn_main (spawn.py:1);reader_main (workers.py:1);get (queues.py:3);"
    "select (selectors.py:4) 8",
    CHILD.format(pid=202) + ";thread (14): feeder;run (threading.py:1);_feed (queues.py:1);"
    "0x7f00 (libc.so.6) 2",
    # a stack caught half-built (--nonblocking): a row of its own, too small to be shown
    f"{MAIN};thread (9);_read (read.py:1) 1",
    "not a stack line",
])


def test_summarize_stacks_splits_each_threads_samples_by_state(monkeypatch):
    """summarize_stacks on py-spy raw lines: threads by the function they run, not by the
    name py-spy kept for their id (threads made each epoch reuse ids); children grouped by
    their main function; a sample is waiting in a lock or queue, for the GIL, in a native
    library, or in Python."""
    summarize = load_script("summarize_stacks", monkeypatch)
    rows = {(r["process"], r["thread"]): r for r in summarize.summarize(
        RAW_STACKS.splitlines(), top=3)}
    lane = rows["main", "_submit_all (prefetch.py)"]
    assert lane["samples"] == 10 and lane["processes"] == 1
    assert lane["states"] == {"python": 0.6, "wait": 0.3, "gil": 0.1}
    # a wait names the code that waited and, after ">", the function it waited in
    assert lane["doing"][1] == {"state": "wait", "in": "_submit_all (prefetch.py) > "
                                "wait (threading.py)", "share": 0.3}
    collect = rows["main", "_collect_all (prefetch.py)"]
    assert collect["samples"] == 5 and collect["states"] == {"wait": 1.0}
    assert rows["main", "<module> (bench.py)"]["states"] == {"native libnvimgcodec": 1.0}
    readers = rows["reader_main", "reader_main (workers.py)"]
    assert readers["processes"] == 2 and readers["samples"] == 16
    assert readers["states"] == {"python": 0.5, "wait": 0.5}
    feeders = rows["reader_main", "_feed (queues.py)"]
    assert feeders["samples"] == 4 and feeders["states"] == {"wait": 1.0}
    assert list(rows)[0] == ("main", "_submit_all (prefetch.py)")
    text = summarize.format_rows(list(rows.values()), min_share=0.2)
    assert "reader_main x2 / reader_main (workers.py): 16 samples: python 50%, wait 50%" in text
    assert "60% python             in decode (gpujpeg.py)" in text
    assert "_read (read.py)" not in text and "(1 rows of 1 samples in all not shown" in text
    # py-spy --gil: one holder a tick, so a row's samples over the ticks is its time holding it
    held = summarize.format_rows(list(rows.values()), min_share=0.2, ticks=40)
    assert "reader_main x2 / reader_main (workers.py): 16 samples (held the GIL 40.0% of the " \
        "window): python 50%, wait 50%" in held


def test_summarize_stacks_reads_native_leaves(monkeypatch):
    """With py-spy --native: a blocking libc call is a wait whatever glibc's internal name,
    a busy one counts for its library, the interpreter's own frames are Python."""
    summarize = load_script("summarize_stacks", monkeypatch)
    inside = ["_submit_all (prefetch.py:9)", "decode (gpujpeg.py:5)"]
    assert summarize.state_of(inside + ["__GI___poll (libc.so.6)"])[0] == "wait"
    assert summarize.state_of(inside + ["memcpy (libc.so.6)"])[0] == "native libc"
    assert summarize.state_of(inside + ["thread_run (libpython3.12.so.1.0)"])[0] == "python"
    assert summarize.state_of(inside + ["0x7f00 (libc.so.6)"]) == ("wait", "decode (gpujpeg.py)")


# --- probe_nvjpeg ----------------------------------------------------------------


def test_probe_nvjpeg_lays_out_planar_rgb_as_nvjpeg_reads_it(monkeypatch):
    """probe_nvjpeg: each image's three planes one after another in one buffer, and an
    nvjpegImage_t per image (channel[0..3], pitch[0..3]) pointing at them."""
    probe = load_script("probe_nvjpeg", monkeypatch)
    heights, widths = np.array([2, 3, 1]), np.array([4, 5, 7])
    offsets, total = probe.plane_offsets(heights, widths)
    assert offsets.tolist() == [0, 24, 69] and total == 90
    images = probe.planar_destinations(offsets + 1000, heights, widths)
    assert images.dtype == np.uint64 and images.shape == (3, 8)  # 64 bytes each, as in C
    assert images[1].tolist() == [1024, 1039, 1054, 0, 5, 5, 5, 0]
    assert images[2, :3].tolist() == [1069, 1076, 1083]  # the last plane ends at the total
    assert images[2, 2] + 7 == 1000 + total
    assert probe.plane_offsets(np.array([], np.int64), np.array([], np.int64))[1] == 0


def test_probe_nvjpeg_says_what_it_needs_without_a_gpu(monkeypatch, tmp_path, capsys):
    import torch
    probe = load_script("probe_nvjpeg", monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert probe.main(script_args(probe, "--archive", tmp_path / "x.tar")) == {}
    assert "needs a CUDA device" in capsys.readouterr().out


def test_probe_nvjpeg_pixel_diffs_counts_and_names_the_images_that_differ(monkeypatch):
    import torch
    probe = load_script("probe_nvjpeg", monkeypatch)
    reference = [np.full((3, 4, 5), 100, np.uint8) for _ in range(4)]
    images = [r.copy() for r in reference]
    images[1][0, 1, 2] = 101  # off by 1: not "over 2"
    images[2][:, 3, :] = 160  # its last row off by 60
    images[3] = np.zeros((3, 5, 4), np.uint8)  # another shape: counts 255
    result = probe.pixel_diffs(images + [None], reference + [reference[0]], torch,
                               labels=["a", "b", "c", "d", "e"])
    assert result["compared"] == 4 and result["identical"] == 1 and result["over_2"] == 2
    assert result["max_abs_diff"] == 255 and result["median_max_diff"] == 30.5
    assert result["mean_abs_diff"] == round((1 + 15 * 60) / 180, 3)  # over the same shapes
    assert result["most_differing"] == [
        "d: max 255, 100.00% over 8, shape (3, 5, 4), not (3, 4, 5)",
        "c: max 60, 25.00% over 8, rows 3-3"]


def test_probe_nvjpeg_direct_lane_leaves_out_what_the_engines_refuse(monkeypatch):
    """DirectLane's bookkeeping, with a stand-in for nvJPEG that fills each image's planes
    with its JPEG's first byte: refused JPEGs are reported False and get no image, the others
    their own pixels, group after group into one buffer."""
    import ctypes
    import torch
    probe = load_script("probe_nvjpeg", monkeypatch)

    class FakeNvjpeg:
        def __init__(self, *args, **kwargs):
            self.closed = False

        def describe(self, data):  # height, width, subsampling, taken
            return 2 + data[0] % 3, 3, 2, data[0] != 0

        def decode(self, pointers, lengths, destinations, stream):
            for pointer, image in zip(pointers, destinations):
                first = ctypes.c_uint8.from_address(int(pointer)).value
                for c in range(3):
                    ctypes.memset(int(image[c]), first, int(image[4 + c]) * (2 + first % 3))

        def close(self):
            self.closed = True

    class Stream:
        cuda_stream = 0

        def synchronize(self):
            pass
    monkeypatch.setattr(probe, "HardwareDecoder", FakeNvjpeg)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(probe.Batch, "__init__", _batch_in_pageable_memory(probe.Batch.__init__))
    groups = [[np.array([v, 1, 2], np.uint8) for v in values] for values in ([4, 0, 5], [0, 0])]
    lane = probe.DirectLane(groups, torch.device("cpu"), lib=object())
    for _ in range(2):
        assert lane.decode(groups[0]) == [True, False, True]
        images = lane.images(groups[0])
        assert images[1] is None
        assert images[0].shape == (3, 3, 3) and bool((images[0] == 4).all())
        assert images[2].shape == (3, 4, 3) and bool((images[2] == 5).all())
        assert lane.decode(groups[1]) == [False, False] and lane.images(groups[1]) == [None] * 2
    lane.close()
    assert lane.decoder.closed


def _batch_in_pageable_memory(init):
    """probe_nvjpeg.Batch without pinned memory (a machine without CUDA cannot pin)."""
    def wrapped(self, datas, shapes, torch_module):
        class Unpinned:
            def __getattr__(self, name):
                return getattr(torch_module, name)

            @staticmethod
            def empty(*args, pin_memory=False, **kwargs):
                return torch_module.empty(*args, **kwargs)
        init(self, datas, shapes, Unpinned())
    return wrapped


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_probe_nvjpeg_decodes_what_nvimagecodec_decodes(monkeypatch, tmp_path):
    """On a GPU with JPEG engines: every row decodes the archive's JPEGs, and the engines
    called directly give nvImageCodec's pixels (chroma replicated, as the loader decodes) and,
    with chroma interpolated, PIL's."""
    import torch
    pytest.importorskip("nvidia.nvimgcodec")
    probe = load_script("probe_nvjpeg", monkeypatch)
    if probe.load_library() is None:
        pytest.skip("no libnvjpeg")
    archive = tmp_path / "photos.tar"
    sizes = [(64 + 24 * (i % 9), 48 + 40 * (i % 4)) for i in range(48)]
    write_archive(archive, [(f"train/c{i % 3}/{i}.jpg", photo(i, size))
                            for i, size in enumerate(sizes)], compress=False)
    try:
        result = probe.main(script_args(probe, "--archive", archive, "--images", 48,
                                        "--batch", 16, "--passes", 1))
    except RuntimeError as error:
        if "architecture mismatch" in str(error):
            pytest.skip("this GPU has no JPEG engines")
        raise
    assert result["images"] + result["refused_by_engines"] == 48
    assert len(result["rows"]) == 1 + len(probe.ROWS)
    assert all(row.get("img_per_s", 0) > 0 for row in result["rows"]), result["rows"]
    assert result["call_cost"]["batches"] >= 1 and "us_per_kb" in result["call_cost"]
    pixels = result["pixels"]  # within 1, as test_gpujpeg asks of nvImageCodec and PIL
    for pair in ("nvjpeg_vs_nvimgcodec", "nvjpeg_interpolated_vs_pil"):
        assert pixels[pair]["compared"] == 16 and pixels[pair]["max_abs_diff"] <= 1, pixels
    both = probe.main(script_args(probe, "--archive", archive, "--images", 48, "--batch", 16,
                                  "--passes", 1, "--processes", 2))
    assert len(both["img_per_s_each"]) == 2 and min(both["img_per_s_each"]) > 0, both
    # A lane of it, as probe_host_threads --lanes-beside nvjpeg drives one: the same pixels
    # as the loader's nvImageCodec lane, group after group, into its one output buffer.
    from imageloader.gpujpeg import NvImageCodecJpeg
    groups = [[np.frombuffer(photo(k, (64 + 16 * (k % 3), 48)), np.uint8)
               for k in range(j, j + 6)] for j in (0, 6)]
    lane = probe.DirectLane(groups, torch.device("cuda"))
    theirs = NvImageCodecJpeg(torch.device("cuda"), "RGB", engine="hw", one_call=True)
    try:
        for group in groups * 2:
            assert lane.decode(group) == [True] * 6
            ours = [image.clone() for image in lane.images(group)]
            for mine, image in zip(ours, theirs.decode(group, fresh=True)):
                other = torch.as_tensor(image, device="cuda")
                assert mine.shape == other.shape
                assert (mine.int() - other.int()).abs().max() <= 1
    finally:
        lane.close()


# --- bench_batch_call ------------------------------------------------------------


@pytest.mark.skipif(not any(map(__import__("shutil").which, ("cc", "gcc"))),
                    reason="needs a C compiler")
def test_bench_batch_call_times_both_ways_on_the_same_pixels(monkeypatch, tmp_path):
    """bench_batch_call drives nvImageCodec's Python API and one C call per batch (nvbatch)
    as a lane does (its CPU backend here): the same pixels on sizes of every kind."""
    pytest.importorskip("nvidia.nvimgcodec")
    bench = load_script("bench_batch_call", monkeypatch)
    archive = tmp_path / "jpegs.tar"
    with tarfile.open(archive, "w") as tar:
        for i in range(40):
            buffer = io.BytesIO()
            size = (17 + 13 * (i % 7), 11 + 9 * (i % 5))
            pixels = np.random.default_rng(i).integers(0, 256, (*size[::-1], 3), np.uint8)
            Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
            data = buffer.getvalue() if i != 7 else b"not a jpeg at all" * 8
            info = tarfile.TarInfo(f"train/c{i % 3}/{i}.jpg")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out = tmp_path / "call.json"
    result = bench.main(script_args(bench, "--archive", archive, "--images", 40, "--batch", 16,
                                    "--passes", 1, "--device", "cpu", "--regions-from", 1000, 1,
                                    "--out", out))
    assert result["same_pixels"] is True and result["decoded_by_one_only"] == 0
    assert result["images"] == 39  # the member that is not a JPEG screened out, as packers do
    assert [row["row"].split(" (")[0] for row in result["rows"]] == [
        "Python API", "one C call per batch", "one C call, crops of >= 1000 pixels as regions",
        "one C call, crops of >= 1 pixels as regions"]
    assert all(row["img_per_s"] > 0 for row in result["rows"])
    assert json.loads(out.read_text())["same_pixels"] is True


@pytest.mark.skipif(not any(map(__import__("shutil").which, ("cc", "gcc"))),
                    reason="needs a C compiler")
def test_bench_lane_python_times_both_ways_to_the_same_crop_table(monkeypatch, tmp_path):
    """bench_lane_python drives GpuDecode both ways (a list of JPEGs, one DecodedBatch) on the
    same packed batch: the same crop table, the one call's straight from its geometry rows;
    the crop kernel is itself again afterwards."""
    pytest.importorskip("nvidia.nvimgcodec")
    from imageloader import gpucrop
    kernel = gpucrop.crop_resize_flip
    bench = load_script("bench_lane_python", monkeypatch)
    result = bench.main(script_args(bench, "--images", 64, "--batches", 20,
                                    "--out", tmp_path / "lane.json"))
    assert result["same_crop_tables"] is True
    assert [row["row"] for row in result["rows"]] == ["image by image", "one call"]
    by_list, by_table = result["rows"]
    assert by_table["crops_from_table"] and not by_list["crops_from_table"]
    assert by_list["python_ms"] > 0 and by_table["python_ms"] > 0 and by_table["c_ms"] > 0
    assert gpucrop.crop_resize_flip is kernel
    assert json.loads((tmp_path / "lane.json").read_text())["images"] == 64


def test_bench_refuses_to_build_an_archive_whose_name_says_the_other_kind(monkeypatch, tmp_path):
    bench = load_script("bench", monkeypatch)
    with pytest.raises(SystemExit, match="--sizes photos"):
        bench.check_sizes_match_name(tmp_path / "photos-16000.tgz", "fixed")
    with pytest.raises(SystemExit, match="--sizes fixed"):
        bench.check_sizes_match_name(tmp_path / "fixed-16000.tgz", "photos")
    bench.check_sizes_match_name(tmp_path / "photos-16000.tgz", "photos")
    bench.check_sizes_match_name(tmp_path / "imagenet-like.tgz", "fixed")
    with pytest.raises(SystemExit, match=r"named \*\.tgz"):  # a kind, not a path
        bench.check_sizes_match_name(tmp_path / "fixed", "fixed")


def test_bench_cpu_share_reaches_the_gpu_rows_options_and_labels(monkeypatch, tmp_path):
    """bench.py --cpu-share sets Options.cpu_share for ours with GPU decoding (not for the CPU
    path, where it means nothing) and names it in the row."""
    bench = load_script("bench", monkeypatch)
    made = []
    monkeypatch.setattr(bench, "ImageLoader", lambda *a, **kw: made.append(kw["options"]))
    args = script_args(bench, "--archive", tmp_path / "x.tgz", "--cpu-share", 0.2)
    bench.our_loader(tmp_path / "x.tgz", args, 2, decode="cuda")
    bench.our_loader(tmp_path / "x.tgz", args, 2, decode="cpu")
    assert [options.cpu_share for options in made] == [0.2, None]
    assert bench.variant_label("cuda", "auto", "none", 0.2) == ", cpu_share 0.2"
    assert bench.variant_label("cpu", "auto", "none", 0.2) == ""


def test_bench_split_reads_one_split_of_an_archive_that_holds_two(monkeypatch, tmp_path):
    """bench.py --split train on an archive of train/ and val/ (make_imagenet_like.py
    --val-every, or someone's own): ours and the scanning first loader read that split, where
    without it the loader refuses two splits in one set."""
    from imageloader import ImageLoader
    files = [(f"{split}/{name}/{i}.jpg", solid(40 * k)) for split in ("train", "val")
             for k, name in enumerate("ab") for i in range(3 if split == "train" else 1)]
    archive = write_archive(tmp_path / "two.tgz", files)
    with pytest.raises(ValueError, match="split"):
        ImageLoader(archive, workers=0, device="cpu")
    bench = load_script("bench", monkeypatch)
    args = script_args(bench, "--archive", archive, "--split", "train")
    kwargs = bench.our_loader_kwargs(args, 2, decode="cpu")
    assert kwargs["options"].split == "train"
    with ImageLoader(archive, batch_size=2, workers=0, device="cpu",
                     options=kwargs["options"]) as loader:
        assert loader.images_per_epoch() == 6 and loader.vocab.classes == ("a", "b")
    assert bench.variant_label("cuda", "hw+hw", "none", None) == ", lanes hw+hw"


def test_bench_decode_calls_records_each_lane_call_and_restores_the_decoder(monkeypatch):
    """bench.py --decode-calls: inside the block every NvImageCodecJpeg.decode_at is recorded
    with its thread, bytes and the decoded images' pixels (undecoded ones left out); after
    it the decoder's own method is back."""
    import numpy as np
    from imageloader.gpujpeg import NvImageCodecJpeg
    from imageloader.nvbatch import DecodedBatch
    bench = load_script("bench", monkeypatch)
    geometry = np.zeros((3, 6), np.int64)
    geometry[:, 1:3] = [(1000, 1000), (100, 200), (2000, 3000)]
    batch = DecodedBatch(None, 3, geometry, np.array([True, True, False]), np.zeros((3, 2)))
    monkeypatch.setattr(NvImageCodecJpeg, "decode_at",
                        lambda self, starts, lengths, boxes=None: batch)
    fake = object.__new__(NvImageCodecJpeg)
    with bench.decode_calls(True) as records:
        assert NvImageCodecJpeg.decode_at(fake, np.zeros(3), np.array([10, 20, 30])) is batch
    assert NvImageCodecJpeg.decode_at(fake, np.zeros(3), np.array([1, 1, 1])) is batch
    assert len(records) == 1  # the call after the block is not recorded
    (record,) = records
    assert record["thread"] == threading.current_thread().name
    assert (record["jpegs"], record["bytes"]) == (3, 60)
    assert (record["pixels"], record["large"]) == (1000 * 1000 + 100 * 200, 1)
    assert record["end"] >= record["start"]
    with bench.decode_calls(False) as none:
        NvImageCodecJpeg.decode_at(fake, np.zeros(3), np.array([1, 1, 1]))
    assert none == []


def test_bench_decode_call_summary_tells_heavy_batches_and_shared_engines_apart(monkeypatch):
    """decode_call_summary: the slowest tenth of the calls against the rest, in pixels, large
    images and time beside another thread's call; each thread's first three calls left out."""
    bench = load_script("bench", monkeypatch)

    def call(thread, start, mp):
        seconds = 0.02 + 0.01 * mp  # a call's time grows with its pixels
        return dict(thread=thread, start=start, end=start + seconds, jpegs=256, bytes=1,
                    pixels=int(mp * 1e6), large=int(mp > 1))
    lane_a = [call("a", t, 5 if t in (10, 20) else 1) for t in range(23)]
    lane_b = [call("b", t, 1) for t in (-10, -9, -8)] + [call("b", 10.0, 5)]
    summary = bench.decode_call_summary(lane_a + lane_b)
    assert summary["calls"] == 21  # 20 of a, 1 of b
    slow, rest = summary["slowest_tenth"], summary["rest"]
    assert (slow["calls"], rest["calls"]) == (3, 18)
    assert slow["ms"] == pytest.approx(70) and rest["ms"] == pytest.approx(30)
    assert (slow["mp"], rest["mp"], slow["large"], rest["large"]) == (5, 1, 1, 0)
    # a's call at 10 and b's ran together; a's at 20 alone
    assert slow["beside_pct"] == pytest.approx(200 / 3) and rest["beside_pct"] == 0
    assert summary["corr_mp_seconds"] == pytest.approx(1)
    assert "slowest tenth 70.0 ms, 5.0 MP" in bench.decode_calls_text(summary)
    assert bench.decode_call_summary(lane_a[:12]) == {}  # too few to tell
    assert bench.decode_calls_text({}) == ""


def jpeg_files(sizes, extra=()):
    """(name, bytes): one photo-like JPEG per (width, height) in `sizes`, then `extra`."""
    return [(f"train/c{i % 2}/{i}.jpg", photo(i, size)) for i, size in enumerate(sizes)] + [
        *extra]


def test_model_split_lane_replays_the_helpers_choice_on_the_archives_jpegs(monkeypatch, tmp_path):
    """model_split_lane: images of one size give the CUDA helper nothing (the bytes gate), so
    every split row is the engines alone, at the cost model's rate; with a tail of large
    JPEGs the helper takes part and a split beats the engines alone, and no replayed
    steering beats the best split of each batch. Members the packers keep on the CPU
    (progressive, not JPEG) are left out."""
    model = load_script("model_split_lane", monkeypatch)
    progressive = io.BytesIO()
    Image.new("RGB", (64, 48), (9, 9, 9)).save(progressive, "JPEG", progressive=True)
    uniform = tmp_path / "uniform.tar"
    write_archive(uniform, jpeg_files([(64, 48)] * 40, [("train/c0/p.jpg", progressive.getvalue()),
                                                        ("train/c1/x.jpg", b"not a jpeg" * 9)]),
                  compress=False)
    result = model.main(script_args(model, "--archive", uniform, "--batch", 16, "--batches", 60))
    assert result["jpegs"] == 40
    per_image_s = (12 + 160 * 64 * 48 / 1e6) * 1e-6
    assert result["engines_alone"] == pytest.approx(1 / per_image_s)
    for by in ("jpegs", "bytes"):
        assert result[f"share_in_{by}"]["img_s"] == pytest.approx(1 / per_image_s)
        assert result[f"share_in_{by}"]["engines_wait"] == 0.0
    tail = tmp_path / "tail.tar"
    write_archive(tail, jpeg_files([(64, 48)] * 36 + [(640, 480)] * 4), compress=False)
    result = model.main(script_args(model, "--archive", tail, "--batch", 16, "--batches", 60))
    for by in ("jpegs", "bytes"):
        row = result[f"share_in_{by}"]
        assert result["engines_alone"] < row["img_s"] <= result["best_split"] * 1.000001, by


def test_timed_training_counts_the_waits_at_epoch_starts_apart(monkeypatch):
    """bench.forever marks the first batch of each epoch; timed_training adds the waits for
    those batches up apart from the rest: a loader whose epochs start slowly shows it."""
    import argparse
    import time
    import torch
    bench = load_script("bench", monkeypatch)
    monkeypatch.setattr(bench.torch.cuda, "synchronize", lambda *a: None)

    class SlowStarts:  # 3 batches an epoch: the first waited for 50 ms, the others 10 ms
        def __iter__(self):
            for k in range(3):
                time.sleep(0.05 if k == 0 else 0.01)
                yield torch.zeros(2), torch.zeros(2)

    it = bench.forever(SlowStarts())
    starts = [(next(it), it.starts_epoch)[1] for _ in range(7)]
    assert starts == [True, False, False, True, False, False, True]

    class Trainer:
        def step(self, images, labels):
            pass

    args = argparse.Namespace(warmup=1, steps=8, max_seconds=60)
    row = bench.timed_training(Trainer(), bench.forever(SlowStarts()), args, "slow starts")
    assert row["images"] == 16 and row["epoch_starts"] == 2  # batches 3 and 6 of 0..8 (0 untimed)
    at_starts = row["data_wait_at_epoch_starts_pct"] * row["seconds"] / 100
    elsewhere = row["data_wait_pct"] * row["seconds"] / 100 - at_starts
    assert at_starts >= 2 * 0.05 and elsewhere >= 6 * 0.01  # sleeps last at least so long
    assert bench.at_epoch_starts_text(row).endswith(" at 2 epoch starts)")  # both tables say it
    assert bench.at_epoch_starts_text({"data_wait_pct": 1.0}) == ""  # rows without epochs
    # the 6 mid-epoch steps each waited 10 ms or more: all over 5 ms, all of that wait
    assert row["long_waits_pct_of_steps"] == 100 and row["long_waits_pct_of_wait"] == 100
    assert 10 <= row["wait_p50_ms"] <= row["wait_p90_ms"] <= row["wait_max_ms"]
    # --sync-steps: the GPU waited for after every step (here: counted)
    synced = []
    monkeypatch.setattr(bench.torch.cuda, "synchronize", lambda *a: synced.append(1))
    args.sync_steps = True
    bench.timed_training(Trainer(), bench.forever(SlowStarts()), args, "synced")
    assert len(synced) == 9 + 1 + 1  # each of the 9 steps, the warm-up's end, the region's end
    args.sync_steps = False
    # --time-calls: every call of the named functions timed in the row, then unwrapped
    args.time_calls = "time:sleep"
    sleep = time.sleep
    row = bench.timed_training(Trainer(), bench.forever(SlowStarts()), args, "timed calls")
    assert time.sleep is sleep
    (timed,) = row["calls"]
    assert timed["what"] == "sleep" and timed["calls"] >= 9  # the untimed first batch's too
    assert 10 <= 1e3 * timed["median_rest_s"] <= 1e3 * timed["p90_rest_s"] < 60
    args.time_calls = None
    # --spy (--spy-gil): py-spy over the timed window only, started after the warm-up
    spied = []
    monkeypatch.setattr(bench, "spy_on_this_process",
                        lambda folder, seconds, tag, gil=False: spied.append(
                            (folder, seconds, tag, gil, len(synced))) or "spy")
    monkeypatch.setattr(bench, "end_spy", lambda spy: spied.append((spy, len(synced))))
    args.spy, args.spy_gil, synced[:] = "stacks", True, []
    bench.timed_training(Trainer(), bench.forever(SlowStarts()), args, "spied")
    assert spied == [("stacks", 60, "train-spied", True, 1), ("spy", 2)]
    spread = bench.wait_spread([0.0001] * 9 + [0.0099])
    assert spread["long_waits_pct_of_steps"] == 10 and round(spread["long_waits_pct_of_wait"]) == 92
    assert spread["wait_p50_ms"] == 0.1 and spread["wait_max_ms"] == 9.9


def test_without_a_step_priority_the_steps_stay_on_the_callers_stream(monkeypatch):
    bench = load_script("bench", monkeypatch)
    monkeypatch.setattr(bench.torch.cuda, "Stream", None)  # not one made
    with bench.step_stream(None) as stream:
        assert stream is None
    assert script_args(bench).step_priority is None
    assert script_args(bench, "--step-priority", -1).step_priority == -1
    bench_dali = load_script("bench_dali", monkeypatch)  # DALI's rows take it too
    assert bench_dali.get_args_parser().parse_args(
        ["--archive", "a.tgz", "--step-priority", "-1"]).step_priority == -1


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_a_step_priority_puts_the_batches_and_steps_on_a_stream_of_that_priority(monkeypatch,
                                                                                  tmp_path):
    """--step-priority: every training step runs on one new stream of higher priority than the
    default; the loader hands its batches over to that stream (pixels as on the caller's),
    and after the row the caller's stream is current again and ordered after its work."""
    import argparse
    import torch
    bench = load_script("bench", monkeypatch)
    from imageloader import ImageLoader
    archive = tmp_path / "a.tgz"
    write_archive(archive, jpeg_files([(64, 48), (80, 60), (50, 70)] * 4))
    caller = torch.cuda.current_stream()

    def batches():
        return ImageLoader(archive, batch_size=4, size=32, train=False, device="cuda",
                           decode="cuda", workers=1, normalize=False)

    expected = [images.cpu() for images, _ in batches()]

    class Trainer:
        def __init__(self):
            self.streams, self.images = [], []

        def step(self, images, labels):
            self.streams.append(torch.cuda.current_stream())
            self.images.append((images.float() + 0).to(torch.uint8))  # a kernel on it

    trainer = Trainer()
    args = argparse.Namespace(warmup=1, steps=2, max_seconds=60, step_priority=-1)
    bench.timed_training(trainer, batches(), args, "high priority")
    assert len(trainer.streams) == 3 and len(set(trainer.streams)) == 1
    stream = trainer.streams[0]
    assert stream != caller and stream.priority < caller.priority
    assert torch.cuda.current_stream() == caller
    for got, want in zip(trainer.images, expected):
        assert torch.equal(got.cpu(), want)


def test_probe_start_times_each_step_of_a_start_in_order(monkeypatch, tmp_path):
    """probe_start: the first calls of the start's steps, in the order a start takes them,
    the whole epoch counted; the package's functions are its own again afterwards."""
    from imageloader import loader as loader_module

    probe = load_script("probe_start", monkeypatch)
    archive = write_archive(tmp_path / "a.tgz", [(f"train/c{k % 3}/{k}.jpg", photo(k, (40, 30)))
                                                 for k in range(24)])
    make_pool = loader_module.ImageLoader._make_pool
    result = probe.main(script_args(probe, "--archive", archive, "--decode", "cpu",
                                    "--workers", 1, "--batch-size", 8, "--epochs", 2))
    assert result["images"] == 24 and result["decode"] == "cpu (Pillow)"
    assert len(result["epochs"]) == 2
    for epoch in result["epochs"]:  # three batches: three tenths that hold a batch
        assert len(epoch["img_per_s_by_tenths"]) == 3 and min(epoch["img_per_s_by_tenths"]) > 0
    nexts = [c for c in result["calls"] if c["what"] == "EpochIterator.__next__"]
    assert sum(c["calls"] for c in nexts) == 2 * 4  # each epoch: 3 batches, then its end
    steps = [e["what"] for e in result["events"]]
    first = {what: steps.index(what) for what in reversed(steps)}
    assert first["ImageLoader._make_pool"] < first["ImageLoader._make_producer"] \
        < first["EpochIterator.__next__"]
    assert steps.count("EpochIterator.__next__") == 3  # the first calls only
    assert loader_module.ImageLoader._make_pool is make_pool
    assert result["iter_to_first_batch_s"] > 0 and result["first_epoch_img_per_s"] > 0


def _touch_shared(name: str, size: int, attached, touch, touched, done) -> None:
    from multiprocessing import shared_memory
    segment = shared_memory.SharedMemory(name=name)
    attached.set()
    touch.wait(60)
    segment.buf[:size] = b"\1" * size  # every page resident in this process too
    touched.set()
    done.wait(60)
    segment.close()


def test_host_memory_counts_shared_pages_once_in_pss_and_per_process_in_rss(monkeypatch):
    """bench.host_memory_gb: the loader's shared buffers, mapped by the training process and
    its children, count once per process in RSS (an upper bound) and once in all in PSS."""
    pytest.importorskip("psutil")
    import multiprocessing as mp
    from multiprocessing import shared_memory
    bench = load_script("bench", monkeypatch)
    size = 256 << 20
    segment = shared_memory.SharedMemory(create=True, size=size)
    segment.buf[:size] = b"\1" * size  # resident here first
    ctx = mp.get_context("spawn")
    attached, touch, touched, done = (ctx.Event() for _ in range(4))
    child = ctx.Process(target=_touch_shared,
                        args=(segment.name, size, attached, touch, touched, done))
    try:
        child.start()
        assert attached.wait(60)
        before = bench.host_memory_gb()
        if "host_pss_gb" not in before:
            pytest.skip("no PSS on this system")
        touch.set()  # the child maps the same pages into its own memory
        assert touched.wait(60)
        after = bench.host_memory_gb()
        shared = size / 1e9
        assert after["host_rss_gb"] - before["host_rss_gb"] >= 0.9 * shared  # counted again
        assert abs(after["host_pss_gb"] - before["host_pss_gb"]) <= 0.1 * shared  # not again
    finally:
        done.set()
        child.join(30)
        segment.close()
        segment.unlink()


# --- lockstep ---------------------------------------------------------------------------


def test_lockstep_is_the_mean_of_the_longer_of_every_pair_of_steps(monkeypatch, tmp_path, capsys):
    lockstep = load_script("lockstep", monkeypatch)
    steps = [20.0, 20.0, 20.0, 40.0]
    brute = [max(a, b) for a in steps for b in steps]
    assert lockstep.mean_of_pairwise_max(steps) == pytest.approx(sum(brute) / len(brute))
    assert lockstep.mean_of_pairwise_max([5.0, 5.0]) == 5.0  # no spread, no lockstep cost
    rows = [{"row": "1 GPU", "steady_step_ms_per_rank": [steps],
             "steady_wait_ms_per_rank": [[0.0, 0.0, 0.0, 4.0]],
             "steady_forward_ms_per_rank": [[5.0, 5.0, 5.0, 5.0]],
             "steady_backward_ms_per_rank": [[10.0, 10.0, 10.0, 26.0]]},
            {"row": "2 GPUs", "steady_step_ms_per_rank": [[30.0, 32.0], [31.0, 31.0]],
             "steady_wait_ms_per_rank": [[1.0, 1.0], [0.0, 2.0]]},
            {"row": "older metrics, no step times"}]
    metrics = tmp_path / "ddp.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(sys, "argv", ["lockstep.py", str(metrics)])
    lockstep.main()
    lines = capsys.readouterr().out.splitlines()
    # Without the waits the steps are 20, 20, 20, 36: mean 24, in lockstep (7 x 36 + 9 x 20) / 16.
    assert lines == ["1 GPU: mean step 25.00 ms (waits 1.00 ms); two such ranks in lockstep: "
                     "28.75 ms; without the waits 24.00 ms, in lockstep 27.00 ms",
                     # where the steps vary: the backward pass (and the one wait)
                     "  rank 0, mean ± sd ms: wait 1.00 ± 1.73, forward 5.00 ± 0.00, "
                     "backward 14.00 ± 6.93, other 5.00 ± 0.00",
                     "2 GPUs: mean step 31.00 31.00 ms (waits 1.00 1.00 ms)"]


# --- probe_blocking -----------------------------------------------------------------------

# The main thread of `py-spy dump --native` stacks caught in a fed ResNet-18 run on an H200
# (results/2026-11-28-h200-blocking), shortened; the loader's thread is made up.
DUMP_DRIVER_LOCK = '''Process 22242: python3 scripts/train_resnet.py
Thread 22250 (idle): "lane-0"
    pthread_cond_wait (libc.so.6)
    next (imageloader/gpujpeg.py:300)
Thread 22242 (idle): "MainThread"
    0x7f4bc0a98d17 (libc.so.6)
    pthread_rwlock_wrlock (libc.so.6)
    0x7f4b94952bb4 (libcuda.so.580.159.04)
    0x7f4b93b89f2b (libcuda.so.580.159.04)
    cuLaunchKernel (libcuda.so.580.159.04)
    cudaLaunchKernel (libcudart.so.13)
    at::native::foreach_tensor_add_list_kernel_cuda (libtorch_cuda.so)
'''
DUMP_GIL = '''Thread 22242 (idle): "MainThread"
    0x7f4bc0a98e51 (libc.so.6)
    pthread_cond_timedwait (libc.so.6)
    torch::autograd::THPVariable_max_pool2d (libtorch_python.so)
    _max_pool2d (torch/nn/functional.py:835)
'''
DUMP_AUTOGRAD = '''Thread 22242 (idle): "MainThread"
    0x7f4bc0a98e51 (libc.so.6)
    pthread_cond_wait (libc.so.6)
    std::condition_variable::wait (libstdc++.so.6.0.33)
    torch::autograd::ReadyQueue::pop (libtorch_cpu.so)
    torch::autograd::Engine::thread_main (libtorch_cpu.so)
'''
DUMP_SYNC = '''Thread 22242 (idle): "MainThread"
    cuStreamSynchronize (libcuda.so.580.159.04)
    0x7f4bbfa12003 (libcudart.so.13)
    cudaStreamSynchronize (libcudart.so.13)
    at::native::copy_kernel_cuda (libtorch_cuda.so)
'''
DUMP_LOADER = '''Thread 22242 (idle): "MainThread"
    pthread_cond_timedwait (libc.so.6)
    0x7f00 (libpython3.12.so)
    wait (threading.py:359)
    __next__ (imageloader/prefetch.py:560)
    train_one_epoch (train_resnet.py:312)
'''
DUMP_RUNNING = '''Thread 22242 (active+gil): "MainThread"
    train_one_epoch (train_resnet.py:325)
    fit (train_resnet.py:561)
'''
DUMP_DECODER = '''Thread 22242 (idle): "MainThread"
    0x7f4bc0a98e51 (libc.so.6)
    0x7f4bc0a9e883 (libc.so.6)
    0x7f48984ce170 (libnvcuvid.so.580.159.04)
    nvjpegJpegStateDestroy (libnvjpeg.36e11081.so.13)
'''


def test_probe_blocking_classifies_each_kind_of_wait(monkeypatch):
    probe = load_script("probe_blocking", monkeypatch)
    state, frames = probe.main_thread_frames(DUMP_DRIVER_LOCK)
    assert state == "idle" and frames[1] == "pthread_rwlock_wrlock (libc.so.6)"
    got = [probe.classify(*reversed(probe.main_thread_frames(d))) for d in
           (DUMP_DRIVER_LOCK, DUMP_GIL, DUMP_AUTOGRAD, DUMP_SYNC, DUMP_LOADER, DUMP_RUNNING,
            DUMP_DECODER)]
    # The loader's wait is for its condition (threading), not the GIL, though its next frame
    # is CPython's C code, as the GIL's is: the stack holds the loader's __next__.
    assert got == ["CUDA driver lock", "GIL", "autograd engine", "CUDA synchronize", "loader",
                   "running", "waiting, elsewhere"]
    with pytest.raises(ValueError, match="no thread"):
        probe.main_thread_frames("py-spy: permission denied")
    # Only the stacks inside the training loop count as its steps.
    frames = probe.main_thread_frames(DUMP_RUNNING)[1]
    assert probe.classify(frames, "active", "train_one_epoch") == "running"
    assert probe.classify(frames, "active", "evaluate") == "outside the steps"


def test_probe_blocking_counts_a_sleeping_threads_voluntary_switches(monkeypatch, tmp_path,
                                                                     capsys):
    """A command that sleeps 1 ms at a time gives up its core hundreds of times a second;
    one that only computes, almost never."""
    probe = load_script("probe_blocking", monkeypatch)
    sleeper = [sys.executable, "-c", "import time\nfor _ in range(4000): time.sleep(0.001)"]
    out = tmp_path / "blocking.jsonl"
    result = probe.main(script_args(probe, "--after", "0.5", "--seconds", "1", "--dumps", "0",
                                    "--label", "sleeper", "--log", tmp_path / "log",
                                    "--out", out, "--", *sleeper))
    assert result["voluntary_per_s"] > 200, result
    assert result["stacks"] == [] and json.loads(out.read_text())["label"] == "sleeper"
    assert "sleeper: main thread" in capsys.readouterr().out
    spinner = [sys.executable, "-c", "import time\nend = time.time() + 3\nwhile time.time() < end: pass"]
    result = probe.main(script_args(probe, "--after", "0.5", "--seconds", "1", "--dumps", "0",
                                    "--log", tmp_path / "log", "--", *spinner))
    assert result["voluntary_per_s"] < 50, result
    with pytest.raises(SystemExit, match="before the window"):
        probe.main(script_args(probe, "--after", "1", "--dumps", "0", "--log", tmp_path / "log",
                               "--", sys.executable, "-c", "pass"))


def test_bench_loader_cpu_reports_the_trials_bound_beside_the_rate_it_bounds(monkeypatch,
                                                                            tmp_path, capsys):
    """--bound: N JPEGs timed as the packers' probe times them (the first is a warm-up), and
    the CPU rate that `workers` processes at that pace could reach, beside the rate measured."""
    files = [(f"train/c{k % 3}/{k}.jpg", photo(k, (96 + 8 * k, 64))) for k in range(12)]
    archive = write_archive(tmp_path / "a.tgz", files)
    script = load_script("bench_loader_cpu", monkeypatch)
    bound = script.probe_bound(str(archive), 5, 32, workers=3)
    assert bound["images"] == 5 and bound["cpu_ms_per_image"] > 0
    assert bound["img_per_s"] == pytest.approx(3 * 1000 / bound["cpu_ms_per_image"], rel=0.01)
    args = script.get_args_parser().parse_args(
        ["--archive", str(archive), "--workers", "0", "--batch-size", "4", "--size", "32",
         "--epochs", "1", "--bound", "6"])
    result = script.main(args)
    assert result["probe_bound"]["images"] == 6 and result["img_per_s"] > 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == result
    # JPEGs the packers never send to the GPU (progressive) are never probed: no bound
    files = [(f"train/c{k % 3}/{k}.jpg", encode(Image.open(io.BytesIO(photo(k, (96, 64)))),
                                                 "JPEG", progressive=True)) for k in range(6)]
    archive = write_archive(tmp_path / "progressive.tgz", files)
    assert script.probe_bound(str(archive), 4, 32, workers=3) == \
        {"images": 0, "cpu_ms_per_image": None, "img_per_s": None}


def test_probe_arena_counts_what_a_fixed_room_turns_away_and_a_sized_one_keeps(monkeypatch,
                                                                               tmp_path):
    """probe_arena: JPEGs above 192 KiB, packed in batches of 4 as a packer fills them: the
    fixed room sends some to the CPU, the room sized from the archive none; the mean is the
    archive's bytes over its images with --archive-images, as the loader takes it."""
    files = [(f"train/c{k % 2}/{k}.jpg", noisy_jpeg(60, k)) for k in range(9)]
    archive = write_archive(tmp_path / "a.tgz", files)
    script = load_script("probe_arena", monkeypatch)
    args = ["--archive", str(archive), "--images", "9", "--batch-size", "4", "--size", "32"]
    result = script.main(script.get_args_parser().parse_args(args))
    assert result["images"] == 8  # two whole batches
    assert result["mean_member_kb"] == round(sum(len(d) for _, d in files) / 9 / 1000, 1)
    fixed, sized = result["fixed"], result["sized"]
    assert fixed["per_image_kib"] == 192.0 and fixed["fallbacks"]["arena_full"] >= 1
    assert fixed["arena_full_share"] == fixed["fallbacks"]["arena_full"] / 8
    assert sized["per_image_kib"] > 192.0 and sized["fallbacks"] == {}
    assert result["here"] == sized  # below 1 MiB a slot this host's room changes nothing
    assert result["room_here_kib"] > 0
    from imageloader.loader import buffer_count, default_workers, gpu_packers
    assert result["packers"] == gpu_packers(default_workers(), decodes_too=False)
    # decode="auto"'s 16 packers: more buffers share the same memory, each slot gets less
    auto = script.main(script.get_args_parser().parse_args(args + ["--packers", "16"]))
    assert auto["packers"] == 16
    ratio = buffer_count(2, result["packers"], 2) / buffer_count(2, 16, 2)
    assert auto["room_here_kib"] == pytest.approx(result["room_here_kib"] * ratio, abs=2)
    from_size = script.main(script.get_args_parser().parse_args(
        args + ["--archive-images", "9"]))
    assert from_size["mean_member_kb"] == round(Path(archive).stat().st_size / 9 / 1000, 1)


# --- scaling ----------------------------------------------------------------------------


def test_scaling_rates_each_fed_epoch_against_its_own_ceiling(monkeypatch, tmp_path):
    """Runs in gpu_host.sh ranks' order: ceilings (1 epoch) then fed (2 here), 1 GPU then 2,
    per step kind; a second file without ceilings takes the first file's."""
    scaling = load_script("scaling", monkeypatch)

    def run(rates, ranks, on_gpu, graph):
        return [{"epoch": e, "arch": "resnet18", "ranks": ranks, "data_on_gpu": on_gpu,
                 "cuda_graph": graph, "steady_img_per_s": r} for e, r in enumerate(rates)]

    lines = (run([10000], 1, True, False) + run([19000], 2, True, False)
             + run([8000, 9000], 1, False, False) + run([14000, 15200], 2, False, False)
             + run([12000], 1, True, True) + run([24000], 2, True, True)
             + run([6000, 9600], 1, False, True) + run([12000, 18000], 2, False, True)
             + [{**row, "graph_ahead": 1} for row in run([9000], 1, False, True)
                + run([16200], 2, False, True)])
    first, second = tmp_path / "a" / "train-fixed.jsonl", tmp_path / "b" / "train-fixed.jsonl"
    for path, rows in ((first, lines), (second, run([5000], 1, False, False)
                                        + run([9500], 2, False, False))):
        path.parent.mkdir()
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    rows = scaling.main([str(first), str(second)])
    assert rows[2:] == [
        "| a/train-fixed.jsonl | resnet18 | eager | 0 | 8,000 (80.0%) | 7,000 (73.7%) | -6.3 | 1.75x |",
        "| a/train-fixed.jsonl | resnet18 | eager | 1 | 9,000 (90.0%) | 7,600 (80.0%) | -10.0 | 1.69x |",
        "| a/train-fixed.jsonl | resnet18 | graph | 0 | 6,000 (50.0%) | 6,000 (50.0%) | +0.0 | 2.00x |",
        "| a/train-fixed.jsonl | resnet18 | graph | 1 | 9,600 (80.0%) | 9,000 (75.0%) | -5.0 | 1.88x |",
        "| a/train-fixed.jsonl | resnet18 | graph ahead 1 | 0 | 9,000 (75.0%) | 8,100 (67.5%) | -7.5 | 1.80x |",
        "| b/train-fixed.jsonl | resnet18 | eager | 0 | 5,000 (50.0%) | 4,750 (50.0%) | +0.0 | 1.90x |"]


def test_scaling_defaults_pair_each_model_whatever_its_steps(monkeypatch, tmp_path):
    """STEPS_AS=default: eager on 1 GPU, the graph on 2 (train_resnet.py's defaults); each
    rate against its own steps' ceiling, and the other model stays apart."""
    scaling = load_script("scaling", monkeypatch)

    def run(arch, rates, ranks, on_gpu, graph):
        return [{"epoch": e, "arch": arch, "ranks": ranks, "data_on_gpu": on_gpu,
                 "cuda_graph": graph, **({"graph_ahead": 0} if graph else {}),
                 "steady_img_per_s": r} for e, r in enumerate(rates)]

    lines = (run("resnet18", [10000], 1, True, False) + run("resnet18", [24000], 2, True, True)
             + run("resnet18", [8000, 9000], 1, False, False)
             + run("resnet18", [18000, 21600], 2, False, True)
             + run("resnet50", [4000], 1, True, False) + run("resnet50", [8000], 2, True, True)
             + run("resnet50", [3600], 1, False, False) + run("resnet50", [7600], 2, False, True))
    path = tmp_path / "d" / "train-photos.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(row) + "\n" for row in lines))
    steps = "eager / graph ahead 0"
    assert scaling.main(["--defaults", str(path)])[2:] == [
        f"| d/train-photos.jsonl | resnet18 | {steps} | 0 | 8,000 (80.0%) | 9,000 (75.0%) | -5.0 | 2.25x |",
        f"| d/train-photos.jsonl | resnet18 | {steps} | 1 | 9,000 (90.0%) | 10,800 (90.0%) | +0.0 | 2.40x |",
        f"| d/train-photos.jsonl | resnet50 | {steps} | 0 | 3,600 (90.0%) | 3,800 (95.0%) | +5.0 | 2.11x |"]
    assert scaling.main([str(path)])[2:] == []  # by steps, nothing pairs


def test_scaling_trial_shows_each_fed_epoch_with_the_trial_so_far(monkeypatch, tmp_path):
    scaling = load_script("scaling", monkeypatch)

    def line(epoch, ranks, on_gpu, rate, stats=None):
        return {"epoch": epoch, "arch": "resnet50", "ranks": ranks, "data_on_gpu": on_gpu,
                "cuda_graph": True, "graph_ahead": 0, "steady_img_per_s": rate,
                **({"loader": stats} if stats else {})}

    rows = [line(0, 1, True, 4700),
            line(0, 2, False, 6400, {"cpu_share": 1.0, "share_rates": {"0.0": 11.97},
                                     "cpu_bound": 10.9}),
            line(1, 2, False, 5400, {"cpu_share": 0.0, "cpu_bound": 11.1,
                                     "share_rates": {"0.0": 11.97, "1.0": 10.125}})]
    path = tmp_path / "c" / "train-photos.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert scaling.main(["--trial", str(path)])[2:] == [
        "| c/train-photos.jsonl | resnet50 | graph ahead 0 | 2 | 0 | 3,200 | 1 | 0: 11.97 | 10.90 |",
        "| c/train-photos.jsonl | resnet50 | graph ahead 0 | 2 | 1 | 2,700 | 0 | 0: 11.97, 1: 10.12 "
        "| 11.10 |"]


def test_probe_engines_makes_every_kind_and_names_each_from_its_header(monkeypatch):
    """probe_engines.py's JPEGs of each kind (subsampling, grayscale) at each size, and the
    kind and size it reads back from their headers: what its table of refusals is keyed by."""
    probe = load_script("probe_engines", monkeypatch)
    made = probe.made_classes()
    assert len(made) == len(probe.SIZES) * (len(probe.SUBSAMPLINGS) + 1)
    for label, data in made:
        kind, size = label.split()
        assert probe.kind_and_size(data)[0] == kind, label
        width, height = map(int, size.split("x"))
        assert Image.open(io.BytesIO(data.tobytes())).size == (width, height)
    sizes = {label.split()[1]: probe.kind_and_size(data)[1] for label, data in made}
    assert (sizes["64x48"], sizes["333x251"], sizes["500x375"], sizes["2600x1950"]) == \
        ("<0.1 MP", "<0.1 MP", "0.1-1 MP", ">=1 MP")


FAKE_NVML = '''
import os
calls = 0
def nvmlInit(): pass
def nvmlDeviceGetHandleByIndex(index): return index
def nvmlDeviceGetComputeRunningProcesses(handle):
    global calls
    calls += 1
    class Process: pid = os.getpid()
    return [Process()] if calls >= 3 else []  # on "GPU 0" from the third step on
'''


def test_probe_second_gpu_names_the_first_step_on_gpu0(tmp_path, monkeypatch):
    """probe_second_gpu.py runs each case in a fresh process and reports the first step after
    which nvml lists the process on GPU 0: with a stand-in for nvml that lists it from the
    third call on, a loader case (on the CPU here) reports "made", after "start" and
    "imported", and every later step."""
    (tmp_path / "pynvml.py").write_text(FAKE_NVML)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    out = tmp_path / "probe.jsonl"
    probe = load_script("probe_second_gpu", monkeypatch)
    probe.main(script_args(probe, "--device", "cpu", "--cases", "loader-cpu", "--out",
                           str(out)))
    line, = [json.loads(x) for x in out.read_text().splitlines()]
    assert "error" not in line and line["first_on_gpu0"] == "made"
    assert line["steps"] == {"start": False, "imported": False, "made": True,
                             "first batch": True, "epoch": True, "closed": True,
                             "dropped": True}


# --- check_decode (scripts/, the CPU side; its CUDA run is in test_gpudecode.py) -----------


@pytest.fixture
def check_decode():
    spec = importlib.util.spec_from_file_location("check_decode",
                                                  REPO_ROOT / "scripts" / "check_decode.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_check_decode_flags_a_wrong_image_by_member_and_different_labels(check_decode):
    """compare(): decoders' small differences pass; an image that is another one's (a
    swapped or stale slot) fails, named by member; labels out of step fail as such."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    cpu = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8, generator=gen)
    near = (cpu.int() + torch.randint(-2, 3, cpu.shape, generator=gen)).clamp(0, 255)
    gpu = near.to(torch.uint8)
    gpu[4] = cpu[1]
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    names = [{"member": f"a.tgz: t/c/{i}.jpg", "kind": "JPEG L" if i == 4 else "JPEG RGB 4:2:0"}
             for i in range(6)]
    said = {"decode": "x"}
    report = check_decode.compare((cpu, labels, said), (gpu, labels, said), names, 12.0, 3)
    assert report["over_tolerance"] == 1 and "1 image(s) differ" in report["failure"]
    assert report["worst"][0]["member"] == "a.tgz: t/c/4.jpg" and report["worst"][0]["diff"] > 40
    assert report["worst"][0]["kind"] == "JPEG L"
    assert report["over_tolerance_by_kind"] == {"JPEG L": 1}
    assert all(w["diff"] <= 2 for w in report["worst"][1:])
    gpu[4] = near[4].to(torch.uint8)
    assert "failure" not in check_decode.compare((cpu, labels, said), (gpu, labels, said),
                                                 names, 12.0, 3)
    shifted = check_decode.compare((cpu, labels, said), (gpu, labels.roll(1), said), names,
                                   12.0, 3)
    assert "different images" in shifted["failure"]
    for cut, skipped in ((5, {}), (6, {"undecodable": 1})):  # a skipped image: indices only
        other = {"decode": "x", "skipped": skipped}
        unnamed = check_decode.compare((cpu, labels, said), (gpu, labels, other), names[:cut],
                                       12.0, 3)
        assert "member" not in unnamed["worst"][0]


def test_check_decode_names_each_images_kind_from_its_header(check_decode, tmp_path):
    """members(): every image member in stream order with what it is; the split's only."""
    files = [("train/a/0.jpg", encode(Image.new("L", (43, 30)), "JPEG")),
             ("train/a/00.jpg", encode(Image.new("L", (43, 30)), "JPEG", subsampling=1)),
             ("train/a/1.jpg", encode(Image.new("RGB", (40, 30)), "JPEG", subsampling=2)),
             ("train/b/2.jpg", encode(Image.new("RGB", (40, 30)), "JPEG", subsampling=0,
                                      progressive=True)),
             ("train/b/3.png", encode(Image.new("RGBA", (8, 9)), "PNG")),
             ("train/b/4.jpg", b"\xff\xd8\xffnot really"), ("val/a/5.jpg", solid(1))]
    path = write_archive(tmp_path / "k.tgz", files)
    args = check_decode.get_args_parser().parse_args(["--data", str(path), "--split", "train"])
    found = check_decode.members(args, 10)
    assert [m["member"] for m in found] == [f"{path}: {name}" for name, _ in files[:6]]
    assert [m["kind"] for m in found] == ["JPEG L", "JPEG L factors 2x1", "JPEG RGB 4:2:0",
                                          "JPEG RGB 4:4:4 progressive", "PNG RGBA", "unreadable"]
    assert found[0]["size"] == [43, 30] and "size" not in found[5]
    assert len(check_decode.members(args, 2)) == 2


def test_check_decode_says_it_needs_cuda_without_one(check_decode, tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is here: test_gpudecode.py runs the script")
    args = check_decode.get_args_parser().parse_args(["--data", str(tmp_path / "a.tgz")])
    assert check_decode.main(args) == 2 and "needs CUDA" in capsys.readouterr().err


# --- make_photo_sample -----------------------------------------------------------------------


def test_make_photo_sample_takes_each_kind_then_large_jpegs_within_the_budget(monkeypatch,
                                                                             tmp_path):
    """Every kind of image in the folder (baseline, progressive and gray JPEG, RGBA PNG,
    WebP), the smallest --per-kind of each, then large JPEGs, smallest first, while they fit;
    a file behind a link once; a .jpg that is not an image left out; the loader reads every
    member, the first folder being its class."""
    script = load_script("make_photo_sample", monkeypatch)
    src = tmp_path / "photos"
    rng = np.random.default_rng(0)

    def save(path, mode, size=(64, 48), **kwargs):
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        Image.fromarray(pixels).convert(mode).save(path, **kwargs)
        return path

    small = [save(src / "beach" / f"b{i}.jpg", "RGB", (64 + 8 * i, 48)) for i in range(4)]
    progressive = [save(src / "city" / f"p{i}.jpg", "RGB", (64 + 8 * i, 48), progressive=True)
                   for i in range(4)]
    others = [save(src / "city" / "gray.jpg", "L"), save(src / "beach" / "alpha.png", "RGBA"),
              save(src / "beach" / "w.webp", "RGB")]
    large = [save(src / "big" / f"l{i}.jpg", "RGB", (640 + 64 * i, 480), quality=95)
             for i in range(3)]  # 330-400 KB of noise
    (src / "city" / "notes.jpg").write_text("not an image")
    (src / "zlink").mkdir()
    (src / "zlink" / "same.jpg").symlink_to(small[0])
    expected = small[:3] + progressive[:3] + others + large[:2]
    budget = sum(p.stat().st_size for p in expected) + 1000  # short of the third large one
    out = tmp_path / "sample.tgz"
    taken = script.main(script_args(script, "--src", src, "--out", out, "--max-mb",
                                    budget / 1e6, "--per-kind", 3, "--large-kb", 200))
    assert sorted(taken) == sorted(str(p) for p in expected)
    members = read_members(out)
    assert sorted(members.values()) == sorted(p.read_bytes() for p in expected)
    assert {name.split("/")[1] for name in members} == {"beach", "big", "city"}
    from imageloader import ImageLoader
    with ImageLoader(str(out), batch_size=4, size=16, train=False, workers=0,
                     device="cpu") as loader:
        assert sum(len(y) for _, y in loader) == 11 and not loader.stats.skipped


def test_bench_pack_times_listing_and_each_pack_of_a_tar_of_class_tars(monkeypatch, tmp_path,
                                                                       capsys):
    script = load_script("bench_pack", monkeypatch)
    rows = script.main(script_args(script, "--classes", 3, "--per-class", 4, "--kb", 2,
                                   "--shards", 2, "--jobs", "1,2", "--work", tmp_path))
    assert [row["run"] for row in rows] == ["list", "tar, 1 shard", "tgz, 2 shards, 1 jobs",
                                            "tgz, 2 shards, 2 jobs"]
    assert all(row["seconds"] >= 0 and row["img_per_s"] > 0 and row["self_mb"] > 0
               for row in rows)
    made = json.loads(capsys.readouterr().out.splitlines()[0])
    assert made["images"] == 12 and made["payload_mb"] == 0
    with tarfile.open(tmp_path / "tar-1shard" / "out.tar") as tar:
        names = tar.getnames()
    assert len(names) == 12 and names[0].startswith("train/n000000") and \
        names != sorted(names)  # shuffled
    shards = sorted((tmp_path / "tgz-2shards-2jobs").glob("*.tgz"))
    assert [len(read_members(path)) for path in shards] == [6, 6]
