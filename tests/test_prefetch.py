"""Stage 4: the prefetcher. CPU behaviour here; CUDA tests run on a GPU host (skipped without)."""
from __future__ import annotations

import collections
import dataclasses
import importlib.util
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

from conftest import assert_labels_match_pixels, labeled_files, write_archive
from imageloader import ImageLoader, Normalize, Options
from imageloader.pool import BufferPool
from imageloader.prefetch import Prefetcher, map_tensors, release_batch, tensors_in

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
Pair = collections.namedtuple("Pair", "a b")


@dataclasses.dataclass
class Holder:
    x: torch.Tensor
    tag: str


def test_map_tensors_keeps_structure():
    tree = {"w": [torch.ones(2), (torch.zeros(1), 3)], "p": Pair(torch.ones(1), "s"),
            "h": Holder(torch.ones(3), "t")}
    out = map_tensors(lambda t: t + 1, tree)
    assert out["w"][0].tolist() == [2, 2] and out["w"][1][1] == 3
    assert isinstance(out["p"], Pair) and out["p"].b == "s"
    assert isinstance(out["h"], Holder) and out["h"].x.tolist() == [2, 2, 2]
    assert len(tensors_in(tree)) == 4


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_cpu_prefetcher_is_the_identity(depth):
    items = [{"x": torch.full((2, 3), float(i)), "y": [torch.tensor(i)]} for i in range(5)]
    out = list(Prefetcher(items, "cpu", prefetch=depth))
    assert [o["x"][0, 0].item() for o in out] == list(range(5))
    assert len(Prefetcher(items, "cpu")) == 5


def test_normalize_matches_formula():
    x = torch.randint(0, 256, (2, 3, 4, 5), dtype=torch.uint8)
    out = Normalize((0.1, 0.2, 0.3), (0.5, 0.6, 0.7))(x)
    mean = torch.tensor([0.1, 0.2, 0.3]).view(1, 3, 1, 1)
    std = torch.tensor([0.5, 0.6, 0.7]).view(1, 3, 1, 1)
    assert torch.allclose(out, (x / 255 - mean) / std, atol=1e-5)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert Normalize(channels_last=False)(x).is_contiguous()


def test_prefetch_must_be_non_negative():
    with pytest.raises(ValueError):
        Prefetcher([], "cpu", prefetch=-1)


# ---- CUDA ----------------------------------------------------------------------------------


def numbered_batches(pool: BufferPool, n: int):
    """Like the loader: batch k is written into a pooled pinned buffer, filled with k."""
    for k in range(n):
        buf = pool.lease()
        buf.images.fill_(k % 251)
        buf.labels.fill_(k)
        buf.count = pool.batch_size
        yield buf.views(), release_batch(pool, buf)


def read_all(prefetcher, batches, consumer_sleep=0):
    """Consume like a training step: optional long kernel first, then read the batch."""
    results = []
    for images, labels in prefetcher.run(batches):
        if consumer_sleep:
            torch.cuda._sleep(consumer_sleep)
        results.append(torch.stack([images.float().mean(), labels.float().mean()]))
    return torch.stack(results).cpu()


def expected(n):
    return torch.tensor([[k % 251, k] for k in range(n)], dtype=torch.float32)


def slow_side_stream(item):
    torch.cuda._sleep(20_000_000)  # runs on the side stream: the batch is ~10 ms late
    return item[0].float(), item[1]


@cuda
@pytest.mark.parametrize("threaded", [False, True])
@pytest.mark.parametrize("depth", [0, 1, 2, 4])
def test_integrity_with_a_slow_consumer(depth, threaded):
    # Threaded, the collecting thread holds up to 3 more leased buffers (2 queued, 1 waiting).
    pool = BufferPool(depth + 2 + 3 * threaded, 64, (32, 32, 3), pin_device=torch.device("cuda"))
    prefetcher = Prefetcher((), "cuda", prefetch=depth, threaded=threaded,
                            item_transform=lambda item: (item[0].float(), item[1]))
    got = read_all(prefetcher, numbered_batches(pool, 40), consumer_sleep=2_000_000)
    assert torch.equal(got, expected(40))
    assert pool.in_use() == 0
    pool.close()


def slow_first_lane(prefetcher):
    """Lane 0 sleeps ~20 ms on its side stream, the other lanes return at once."""
    def transform(item):
        if prefetcher._lane.index == 0:
            torch.cuda._sleep(40_000_000)
        return item[0].float(), item[1]
    return transform


@cuda
@pytest.mark.parametrize("lanes", [2, 3])
def test_lanes_on_their_own_streams_keep_every_batch_intact_and_in_order(lanes):
    """Each lane submits on a side stream of its own; a slow lane's batch is handed out at its
    turn, and the consumer's stream waits for that lane's stream, not another's."""
    pool = BufferPool(2 + lanes + 3, 64, (32, 32, 3), pin_device=torch.device("cuda"))
    prefetcher = Prefetcher((), "cuda", prefetch=2, threaded=True, lanes=[None] * lanes)
    prefetcher.lanes = [slow_first_lane(prefetcher)] * lanes
    assert torch.equal(read_all(prefetcher, numbered_batches(pool, 30)), expected(30))
    assert len({id(stream) for stream in prefetcher._sides.values()}) == lanes
    assert pool.in_use() == 0
    pool.close()


@cuda
@pytest.mark.parametrize("threaded", [False, True])
def test_integrity_with_a_slow_side_stream(threaded):
    pool = BufferPool(4 + 3 * threaded, 64, (32, 32, 3), pin_device=torch.device("cuda"))
    prefetcher = Prefetcher((), "cuda", prefetch=2, item_transform=slow_side_stream,
                            threaded=threaded)
    assert torch.equal(read_all(prefetcher, numbered_batches(pool, 12)), expected(12))
    pool.close()


@cuda
@pytest.mark.parametrize("stop_after", [1, 3])
def test_threaded_break_returns_every_buffer(stop_after):
    """Threaded mode collects batches ahead of submitting them: on a break, the collected but
    unsubmitted ones must go back to the pool too, and the source generator must be closed."""
    pool = BufferPool(7, 64, (32, 32, 3), pin_device=torch.device("cuda"))
    closed = []

    def source():
        try:
            yield from numbered_batches(pool, 50)
        finally:
            closed.append(True)
    prefetcher = Prefetcher((), "cuda", prefetch=2, item_transform=slow_side_stream,
                            threaded=True)
    it = prefetcher.run(source())
    for k, (images, labels) in zip(range(stop_after), it):
        assert labels.float().mean().item() == k
    it.close()
    torch.cuda.synchronize()
    assert closed == [True]
    assert pool.in_use() == 0
    pool.close()


@cuda
def test_without_the_event_wait_the_integrity_test_fails(monkeypatch):
    """Proves the test above can fail: remove the GPU-side wait and batches are read early."""
    monkeypatch.setattr(torch.cuda.Stream, "wait_event", lambda self, event: None)
    pool = BufferPool(4, 64, (32, 32, 3), pin_device=torch.device("cuda"))
    prefetcher = Prefetcher((), "cuda", prefetch=2, item_transform=slow_side_stream)
    got = read_all(prefetcher, numbered_batches(pool, 12))
    torch.cuda.synchronize()
    pool.close()
    assert not torch.equal(got, expected(12)), "corruption was expected without the wait"


@cuda
def test_consumer_stream_is_never_changed():
    model = torch.nn.Conv2d(3, 4, 3).cuda().to(memory_format=torch.channels_last)
    pool = BufferPool(4, 8, (16, 16, 3), pin_device=torch.device("cuda"))
    prefetcher = Prefetcher((), "cuda", prefetch=2, item_transform=slow_side_stream)
    mine = torch.cuda.Stream()
    outputs = []
    with torch.cuda.stream(mine):
        for images, labels in prefetcher.run(numbered_batches(pool, 6)):
            assert torch.cuda.current_stream() == mine  # the model's kernels go to `mine`
            outputs.append(model(images).float().mean())
        assert torch.cuda.current_stream() == mine
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    mine.synchronize()
    reference = [model(torch.full((8, 3, 16, 16), float(k), device="cuda")).float().mean()
                 for k in range(6)]
    assert torch.allclose(torch.stack(outputs), torch.stack(reference), rtol=1e-3, atol=1e-3)
    pool.close()


@cuda
def test_wraps_a_dataloader_pinned_or_not():
    from torch.utils.data import DataLoader, TensorDataset
    data = TensorDataset(torch.arange(4000.0).view(500, 8), torch.arange(500))
    for pin in (True, False):
        loader = DataLoader(data, batch_size=64, pin_memory=pin)
        prefetcher = Prefetcher(loader, "cuda", prefetch=2)
        out = [(x, y) for x, y in prefetcher]
        assert all(x.is_cuda and y.is_cuda for x, y in out)
        assert torch.equal(torch.cat([x for x, _ in out]).cpu(), data.tensors[0])
        assert torch.equal(torch.cat([y for _, y in out]).cpu(), data.tensors[1])
        assert bool(prefetcher._staging._pools) == (not pin)  # pageable -> pinned staging
        prefetcher.close()


@cuda
def test_offloaded_weights_arrive_ahead_of_use():
    weights = [{"w": torch.randn(256, 256), "b": [torch.randn(256), "layer%d" % i]}
               for i in range(6)]  # pageable, as offloaded weights usually are
    x = torch.randn(8, 256, device="cuda")
    for layer, weight in zip(weights, Prefetcher(weights, "cuda", prefetch=2)):
        assert weight["b"][1] == layer["b"][1]
        got = x @ weight["w"] + weight["b"][0]
        ref = x @ layer["w"].cuda() + layer["b"][0].cuda()
        assert torch.allclose(got, ref)


def loader_on_cuda(path, **kw):
    kw.setdefault("normalize", False)
    kw.setdefault("options", Options(lookahead=False))  # so that in_use() == 0 after an epoch
    return ImageLoader(path, batch_size=8, size=16, device="cuda", seed=3, **kw)


@cuda
@pytest.mark.parametrize("workers", [0, 2])
def test_loader_on_cuda_matches_the_synchronous_baseline(tmp_path, workers):
    path = write_archive(tmp_path / "a.tgz", labeled_files(5, 9))
    results = {}
    for depth in (0, 3):
        with loader_on_cuda(path, workers=workers, prefetch=depth) as loader:
            batches = []
            for images, labels in loader:
                torch.cuda._sleep(1_000_000)  # a slow consumer: buffers get reused under it
                batches.append((images.clone(), labels.clone()))
            results[depth] = batches
            assert loader._pool.in_use() == 0
    for (a, b), (c, d) in zip(results[0], results[3]):
        assert torch.equal(a, c) and torch.equal(b, d)
    images = torch.cat([x for x, _ in results[3]])
    assert_labels_match_pixels(images, torch.cat([y for _, y in results[3]]))


@cuda
@pytest.mark.parametrize("workers", [0, 2])
def test_memory_is_flat_over_20_epochs(tmp_path, workers):
    path = write_archive(tmp_path / "a.tgz", labeled_files(4, 12))
    with loader_on_cuda(path, workers=workers, normalize=Normalize()) as loader:
        readings = []
        for epoch in range(20):
            for images, labels in loader:
                images.sum()
            torch.cuda.synchronize()
            readings.append((torch.cuda.memory_reserved(), loader._pool.nbytes,
                             _host_pinned_bytes()))
        assert readings[4] == readings[-1], readings  # after warm-up, nothing grows


def _host_pinned_bytes() -> int:
    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is None:
        return 0
    return stats().get("allocated_bytes.all.current", stats().get("allocated_bytes", 0))


@cuda
def test_break_exception_and_second_iterator_return_buffers(tmp_path):
    path = write_archive(tmp_path / "a.tgz", labeled_files(4, 12))
    with loader_on_cuda(path, workers=2, prefetch=2) as loader:
        for i, _ in enumerate(loader):
            if i == 2:
                break
        with pytest.raises(KeyError):
            for _ in loader:
                raise KeyError("in the loop body")
        first = iter(loader)
        next(first)
        second = iter(loader)
        assert sum(len(y) for _, y in second) == 48
        torch.cuda.synchronize()
        assert loader._pool.in_use() == 0
        assert loader._pool.free == len(loader._pool.buffers)


@cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("decode, gpu_decoder", [
    ("cpu", "auto"), ("cuda", "nvimgcodec"), ("cuda", "torchvision"), ("cuda", "torchcodec"),
    ("auto", "auto")])
def test_second_gpu_creates_no_context_on_the_first(tmp_path, decode, gpu_decoder):
    """A loader on cuda:1 leaves nothing on cuda:0, whichever decoder. Two causes, both found
    on a 2-GPU H200 with a main thread that set no device (cuda:0 current): the side streams'
    priority range was asked of the current device, and importing nvImageCodec makes a
    context on the current device (results/2026-11-30-h200x2-suite, -second-gpu)."""
    pytest.importorskip("pynvml")
    if gpu_decoder in ("nvimgcodec", "torchcodec") and importlib.util.find_spec(
            {"nvimgcodec": "nvidia.nvimgcodec", "torchcodec": "torchcodec"}[gpu_decoder]) is None:
        pytest.skip(f"{gpu_decoder} is not installed")
    path = write_archive(tmp_path / "a.tgz", labeled_files(2, 4))
    code = f"""
import os, torch, pynvml
from imageloader import ImageLoader, Options
with ImageLoader({str(path)!r}, batch_size=4, size=16, device="cuda:1", workers=1,
                 decode={decode!r}, options=Options(gpu_decoder={gpu_decoder!r})) as loader:
    for x, y in loader:
        assert x.device == torch.device("cuda:1")
pynvml.nvmlInit()
pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(
    pynvml.nvmlDeviceGetHandleByIndex(0))]
print("ON_GPU0" if os.getpid() in pids else "CLEAN")
"""
    # The child imports what this process does (the decoders' wheels may lie on PYTHONPATH).
    paths = os.pathsep.join([os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": paths})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("CLEAN"), out.stdout


@cuda
def test_priority_sets_the_side_streams_priority(monkeypatch):
    import imageloader.prefetch
    least, greatest = torch.cuda.Stream.priority_range()
    assert greatest < least
    assert Prefetcher([], "cuda", priority=-1).side_stream.priority == max(-1, greatest)
    assert Prefetcher([], "cuda").side_stream.priority == greatest  # by default the most urgent
    monkeypatch.setattr(imageloader.prefetch, "SIDE_STREAM_PRIORITY", 0)  # bench --stream-priority
    assert Prefetcher([], "cuda").side_stream.priority == least


# ---- failures in the device step, staging memory, repeated batches (issue: explicit lifetimes)


def pool_batches(pool: BufferPool, n: int):
    for k in range(n):
        buf = pool.lease()
        buf.labels.fill_(k)
        buf.count = pool.batch_size
        yield buf.views(), release_batch(pool, buf)


def failing_on(calls_that_fail: set):
    calls = [0]

    def step(item):
        calls[0] += 1
        if calls[0] in calls_that_fail:
            raise RuntimeError("out of memory (a test double)")
        return item[0].float(), item[1]
    return step


def test_a_failing_device_step_on_the_cpu_gives_its_host_buffer_back():
    pool = BufferPool(2, 4, (2, 2, 3))
    prefetcher = Prefetcher((), "cpu", item_transform=failing_on({2}))
    got = []
    with pytest.raises(RuntimeError, match="out of memory"):
        for _images, labels in prefetcher.run(pool_batches(pool, 5)):
            got.append(int(labels[0]))
    assert got == [0] and pool.in_use() == 0


def test_staging_keeps_a_bounded_number_of_size_classes():
    """Pageable batches of many sizes once kept a page-locked pool per byte size, forever."""
    from imageloader.prefetch import _Staging
    staging = _Staging(torch.device("cpu"), slots=2)   # unpinned on the CPU, same bookkeeping
    for n in range(1000, 400_000, 7919):  # 51 sizes
        pinned, release = staging.stage(torch.ones(n, dtype=torch.uint8))
        assert pinned.numel() == n and bool(pinned.all())
        release(None)
    assert len(staging._pools) <= 4
    assert staging.nbytes <= 4 * 2 * (400_000 * 9 // 8 + (64 << 10))
    held = [staging.stage(torch.ones(n, dtype=torch.uint8))
            for n in (5_000, 90_000, 300_000, 1_000_000)]
    staging.stage(torch.ones(2_000_000, dtype=torch.uint8))[1](None)
    assert len(staging._pools) == 5  # every pool still in use: none could be freed
    for pinned, release in held:
        assert bool(pinned.all())  # and none was freed under its holder
        release(None)
    staging.close()


def test_size_classes_waste_at_most_an_eighth_or_a_page():
    from imageloader.prefetch import size_class
    for n in (1, 4096, 4097, 100_000, 38_535_168):
        assert n <= size_class(n) <= max(n + 4095, n * 9 // 8)
        assert size_class(size_class(n)) == size_class(n)


@cuda
@pytest.mark.parametrize("threaded", [False, True])
def test_a_failing_device_step_gives_its_host_buffer_back(threaded):
    """An out-of-memory error in the device step that the user catches: the host buffer goes
    back to its pool once the side stream's work queued before the failure has run."""
    pool = BufferPool(6, 8, (4, 4, 3), pin_device=torch.device("cuda"))
    prefetcher = Prefetcher((), "cuda", prefetch=2, threaded=threaded,
                            item_transform=failing_on({3}))
    for _ in range(4):  # more failures than the pool has buffers to lose
        with pytest.raises(RuntimeError, match="out of memory"):
            for _batch in prefetcher.run(pool_batches(pool, 6)):
                pass
        prefetcher.item_transform = failing_on({3})
    torch.cuda.synchronize()
    assert pool.in_use() == 0 and pool.free == 6
    pool.close()


@cuda
def test_a_repeated_batch_is_recorded_on_the_stream_it_is_used_on(tmp_path, monkeypatch):
    """A rank that runs short repeats its last batch; used on another stream than before,
    its memory must be recorded there too (and that stream must wait for the first)."""
    from conftest import numbered_files
    recorded = []
    original = torch.Tensor.record_stream

    def spy(tensor, stream):
        recorded.append((tensor.data_ptr(), stream))
        return original(tensor, stream)
    monkeypatch.setattr(torch.Tensor, "record_stream", spy)
    path = write_archive(tmp_path / "a.tgz", numbered_files(25))
    with ImageLoader(path, batch_size=4, size=8, mode="L", device="cuda", normalize=False,
                     workers=0, options=Options(rank=1, world_size=2)) as loader:
        it = iter(loader)
        batches = [next(it) for _ in range(3)]
        other = torch.cuda.Stream()
        with torch.cuda.stream(other):
            recorded.clear()
            images, labels = next(it)  # the repeat
            assert torch.equal(labels, batches[2][1])
            assert (images.data_ptr(), other) in recorded
        assert next(it, None) is None


def threaded_on_the_host(submit, stall_timeout: float | None, lanes: int = 1,
                         prefetch: int = 2, on_demand: bool = False) -> Prefetcher:
    """The threaded prefetch stage with its device work replaced: its threads and waits run
    on any machine (the CUDA tests above run the real device work)."""
    prefetcher = Prefetcher((), "cpu", threaded=True, stall_timeout=stall_timeout,
                            prefetch=prefetch, lanes=[None] * lanes,
                            lanes_on_demand=on_demand)
    prefetcher._submit = submit
    prefetcher._hand_over = lambda job: job
    return prefetcher


def test_markers_keep_their_place_and_the_lanes_go_on_past_them():
    """A Marker (epoch.py ends each epoch of its stream with one) goes through the threaded
    stage as it is, in its place; while the consumer has not asked past it, the lanes already
    work on what follows (the next epoch's first batches)."""
    from imageloader.prefetch import Marker, _InFlight
    taken = []

    def submit(item, release):
        if isinstance(item, Marker):
            return Prefetcher._submit(prefetcher, item, release)  # the real pass-through
        taken.append(item)
        return item

    prefetcher = threaded_on_the_host(submit, stall_timeout=None, lanes=2)
    prefetcher._hand_over = lambda job: (Prefetcher._hand_over(prefetcher, job)
                                         if isinstance(job, _InFlight) else job)
    end = Marker()
    it = prefetcher._run_threaded(iter([(0, None), (1, None), (end, None), (2, None),
                                        (3, None), (4, None)]))
    assert [next(it) for _ in range(3)] == [0, 1, end]
    deadline = time.monotonic() + 10
    while len(taken) < 5:  # room for prefetch + lanes items: 2, 3 and 4 are made meanwhile
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert list(it) == [2, 3, 4]


def test_a_batch_stuck_in_device_work_raises_instead_of_hanging():
    release = threading.Event()

    def submit(item, release_host):
        if item == 2:
            release.wait(60)  # a native call that never returns, as seen once on the GPU host
        return item

    prefetcher = threaded_on_the_host(submit, stall_timeout=1.0)
    got, started = [], time.monotonic()
    with pytest.raises(TimeoutError, match="one batch's device work"), \
            pytest.warns(RuntimeWarning, match="imageloader-prefetch did not end.*left behind"):
        for item in prefetcher._run_threaded((i, None) for i in range(5)):
            got.append(item)
    assert got == [0, 1] and time.monotonic() - started < 10
    release.set()  # the stuck thread, once it returns, ends: nothing is left running
    deadline = time.monotonic() + 10
    while any(t.name == "imageloader-prefetch" for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_slow_source_is_not_a_stall():
    """Waiting on the source (the loader's workers) is bounded by the loader's own timeout,
    not by stall_timeout: a source slower than it still delivers everything."""
    def slow_pairs():
        for i in range(3):
            time.sleep(1.3)
            yield i, None

    prefetcher = threaded_on_the_host(lambda item, release: item, stall_timeout=0.5)
    assert list(prefetcher._run_threaded(slow_pairs())) == [0, 1, 2]


def test_lanes_hand_items_out_in_order_and_each_does_its_share():
    """A slow lane beside fast ones: the fast ones take the items it cannot (so they add their
    rate), the consumer still gets 0, 1, 2, ... and never more than prefetch + lanes items are
    taken and not yet handed out."""
    lanes, prefetch, taken, given = 3, 2, [], []
    by_lane = collections.Counter()
    most = [0]

    def submit(item, release):
        lane = prefetcher._lane.index
        taken.append(item)
        most[0] = max(most[0], len(taken) - len(given))
        time.sleep(0.03 if lane == 0 else 0.002)
        by_lane[lane] += 1
        return item

    prefetcher = threaded_on_the_host(submit, stall_timeout=None, lanes=lanes,
                                      prefetch=prefetch)
    for item in prefetcher._run_threaded((i, None) for i in range(60)):
        given.append(item)
        time.sleep(0.005)  # a consumer slower than the fast lanes: they must not run away
    assert given == list(range(60))
    assert set(by_lane) == {0, 1, 2} and by_lane[0] < by_lane[1] + by_lane[2]
    # Room is given back as an item is handed out, a moment before `given` sees it: + 1.
    assert most[0] <= prefetch + lanes + 1


def test_no_lane_takes_the_next_item_before_the_hand_over_is_done():
    """A lane woken while the consumer hands a batch over runs its own Python (gathering JPEGs,
    the crop table) between the hand-over's CUDA calls: ResNet-50's hand-over took 0.9 ms
    so instead of 0.2 (results/2026-11-28-h200-handover). So room for item k + prefetch + lanes
    is given back only once item k's hand-over has returned."""
    prefetch, lanes, events = 2, 2, []

    def submit(item, release):
        events.append(("submit", item))
        return item

    def hand_over(job):
        time.sleep(0.02)  # long enough for a lane woken before it to take an item meanwhile
        events.append(("handed", job))
        return job

    prefetcher = threaded_on_the_host(submit, stall_timeout=None, lanes=lanes,
                                      prefetch=prefetch)
    prefetcher._hand_over = hand_over
    assert list(prefetcher._run_threaded((i, None) for i in range(12))) == list(range(12))
    room = prefetch + lanes
    for k in range(12 - room):
        assert events.index(("handed", k)) < events.index(("submit", k + room)), events


def run_two_lanes(consumer_s: float, lane_s: float, on_demand: bool, items: int = 40):
    """Items handed out, and how many each lane submitted, with lanes of equal speed."""
    by_lane = collections.Counter()

    def submit(item, release):
        time.sleep(lane_s)
        by_lane[prefetcher._lane.index] += 1
        return item

    prefetcher = threaded_on_the_host(submit, stall_timeout=None, lanes=2, on_demand=on_demand)
    given = []
    for item in prefetcher._run_threaded((i, None) for i in range(items)):
        given.append(item)
        time.sleep(consumer_s)
    return given, by_lane


def test_a_lane_on_demand_works_only_while_the_consumer_waits():
    """A consumer slower than one lane always has a batch to take: the second lane, on
    demand, stays (nearly) idle, where always on it does half the work; a consumer that
    waits for batches gets both lanes' work, in order either way."""
    given, always = run_two_lanes(consumer_s=0.02, lane_s=0.002, on_demand=False)
    assert given == list(range(40)) and always[1] >= 10
    given, slow_consumer = run_two_lanes(consumer_s=0.02, lane_s=0.002, on_demand=True)
    assert given == list(range(40))
    # The first batches, before any was finished (1 here; room for a loaded machine).
    assert slow_consumer[1] <= 5, slow_consumer
    given, waiting = run_two_lanes(consumer_s=0.0, lane_s=0.02, on_demand=True)
    assert given == list(range(40))
    assert waiting[1] >= 12, waiting  # about half: both lanes decode while the consumer waits


def test_a_lanes_error_is_raised_at_its_items_turn_and_unsubmitted_items_go_back():
    released, closed = [], []

    def submit(item, release):
        if item == 4:
            raise RuntimeError("device step failed on item 4")
        time.sleep(0.01 if prefetcher._lane.index == 0 else 0.001)
        return item

    def pairs():
        try:
            for i in range(50):
                yield i, (lambda event, i=i: released.append(i))
        finally:
            closed.append(True)

    prefetcher = threaded_on_the_host(submit, stall_timeout=None, lanes=2)
    got = []
    with pytest.raises(RuntimeError, match="item 4"):
        for item in prefetcher._run_threaded(pairs()):
            got.append(item)
    assert got == [0, 1, 2, 3]
    assert closed == [True]
    # Items collected but never submitted went back (the replaced submit releases nothing).
    assert released and min(released) > 4 and len(set(released)) == len(released)
    assert not any(t.name.startswith("imageloader-") for t in threading.enumerate())


def test_lanes_need_the_threaded_stage():
    with pytest.raises(ValueError, match="threaded"):
        Prefetcher((), "cpu", lanes=[None, None])
    with pytest.raises(ValueError, match="item_transform"):
        Prefetcher((), "cpu", threaded=True, lanes=[None], item_transform=lambda x: x)


def test_a_step_stream_on_the_cpu_changes_nothing(monkeypatch):
    """imageloader.step_stream without CUDA (or for a CPU device): no stream is made, the block
    runs as it would, and it yields None."""
    from imageloader import step_stream
    monkeypatch.setattr(torch.cuda, "Stream", None)  # not one made
    with step_stream(device="cpu") as stream:
        assert stream is None
    if not torch.cuda.is_available():
        with step_stream() as stream:
            assert stream is None


@pytest.mark.cuda
@cuda
def test_a_step_stream_runs_the_block_on_a_stream_of_that_priority_in_order():
    """Inside: a stream of higher priority than the default is current, and it starts only after
    what the caller's stream queued (a long kernel then a write there is seen inside); after:
    the caller's stream is current again and waits for the block's work (a long kernel then a
    write inside is seen there), also when the block raises."""
    from imageloader import step_stream
    caller = torch.cuda.current_stream()
    x = torch.zeros(1 << 20, device="cuda")
    torch.cuda._sleep(50_000_000)  # the caller's stream busy for ~25 ms, the host free
    x.fill_(1.0)
    with step_stream() as stream:
        assert torch.cuda.current_stream() == stream != caller
        assert stream.priority < caller.priority
        seen_inside = x.sum()  # queued on the new stream: after the fill, or 0
        torch.cuda._sleep(50_000_000)
        y = torch.full_like(x, 2.0)
    assert torch.cuda.current_stream() == caller
    assert seen_inside.item() == x.numel() and y.sum().item() == 2 * x.numel()
    with pytest.raises(ValueError), step_stream(priority=0) as side:
        torch.cuda._sleep(50_000_000)
        z = torch.full_like(x, 3.0)
        raise ValueError("the block fails")
    assert torch.cuda.current_stream() == caller and side.priority == caller.priority
    assert z.sum().item() == 3 * x.numel()


@cuda
def test_step_lag_measures_how_far_the_gpu_runs_behind_its_host_without_waiting():
    """StepLag (decode="auto"'s test for a GPU-bound model): a call made with ~100 ms of GPU
    work still queued before its point shows, once reached, a lag of ~100 ms; calls made
    with the GPU idle show ~0. It never waits for the GPU."""
    from imageloader.prefetch import StepLag
    lag, stream = StepLag(torch.device("cuda"), keep=2), torch.cuda.current_stream()
    lag.lag(stream)                         # the first call makes its stream and events
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e8))             # ~100 ms queued before the next call's point
    started = time.perf_counter()
    assert lag.lag(stream) < 0.01           # the first call's point: reached at once
    for _ in range(3):                      # the host runs on: two points wait, no more
        assert lag.lag(stream) is None      # its own point not reached yet
    assert time.perf_counter() - started < 0.05  # asked without waiting for the GPU
    assert len(lag._marks) == 2
    torch.cuda.synchronize()
    assert lag.lag(stream) > 0.05           # the points behind the sleep came ~100 ms late
    made = {id(event): event for pair in lag._marks for event in pair}  # held: ids stay theirs
    for _ in range(3):
        torch.cuda.synchronize()
        assert lag.lag(stream) < 0.01       # calls with nothing queued: kept up
        made.update({id(event): event for pair in lag._marks for event in pair})
    assert len(made) <= 2 * 3               # read pairs are recorded again, not made anew
