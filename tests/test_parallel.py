"""Tests for imageloader.parallel.Parallel: equality with sequential branches, CPU and CUDA."""

from __future__ import annotations

import copy
import functools
import pickle

import pytest
import torch
from torch import nn

from imageloader.parallel import Parallel

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def make_branches(width: int = 16, out: int = 8, seed: int = 0) -> list[nn.Module]:
    torch.manual_seed(seed)
    return [
        nn.Sequential(nn.Linear(width, 32), nn.ReLU(), nn.Linear(32, out)),
        nn.Linear(width, out),
        nn.Sequential(nn.Tanh(), nn.Linear(width, out)),
    ]


def sequential_outputs(par: Parallel, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(branch(x) for branch in par._branch_list())


def grads_of(module: nn.Module, x: torch.Tensor, run) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Gradients of a fixed scalar loss of run(x) w.r.t. module's params and x."""
    module.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    outs = run(x)
    # Weight each output differently so a mix-up of branches changes the grads.
    loss = sum((i + 1) * o.square().sum() for i, o in enumerate(outs))
    loss.backward()
    return [p.grad.detach().clone() for p in module.parameters()], x.grad.detach().clone()


def assert_all_close(a, b, **tol) -> None:
    assert len(a) == len(b)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, **tol)


# --------------------------------------------------------------------------- CPU


def test_forward_equals_sequential() -> None:
    par = Parallel(*make_branches())
    x = torch.randn(4, 16)
    outs = par(x)
    assert isinstance(outs, tuple) and len(outs) == 3
    assert_all_close(outs, sequential_outputs(par, x), rtol=0, atol=0)


def test_backward_grads_equal_sequential() -> None:
    par = Parallel(*make_branches())
    x = torch.randn(4, 16)
    got_p, got_x = grads_of(par, x, par)
    want_p, want_x = grads_of(par, x, lambda t: sequential_outputs(par, t))
    assert_all_close(got_p, want_p, rtol=0, atol=0)
    torch.testing.assert_close(got_x, want_x, rtol=0, atol=0)


def test_dict_form_keeps_order_and_names() -> None:
    a, b, c = make_branches()
    par = Parallel({"b": b, "a": a, "c": c})
    x = torch.randn(2, 16)
    outs = par(x)
    assert_all_close(outs, (b(x), a(x), c(x)), rtol=0, atol=0)
    assert list(par.branches.keys()) == ["b", "a", "c"]
    assert par.branches["a"] is a


def test_combine_cat_and_sum() -> None:
    branches = make_branches()
    x = torch.randn(3, 16)
    cat = Parallel(*branches, combine=functools.partial(torch.cat, dim=1))
    torch.testing.assert_close(cat(x), torch.cat([b(x) for b in branches], dim=1))
    summed = Parallel(*branches, combine=sum)
    torch.testing.assert_close(summed(x), sum(b(x) for b in branches))


def test_combine_module_is_registered() -> None:
    class Fuse(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(()))

        def forward(self, outs):
            return self.scale * torch.stack(outs).sum(0)

    par = Parallel(nn.Linear(4, 4), nn.Linear(4, 4), combine=Fuse())
    assert "combine.scale" in par.state_dict()
    par(torch.randn(2, 4)).sum().backward()
    assert par.combine.scale.grad is not None


def test_inside_sequential_with_backward() -> None:
    torch.manual_seed(0)
    par = Parallel(*make_branches(), combine=functools.partial(torch.cat, dim=1))
    model = nn.Sequential(nn.Linear(10, 16), par, nn.ReLU(), nn.Linear(24, 1))
    x = torch.randn(5, 10)
    y = model(x)
    assert y.shape == (5, 1)
    y.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    branches = par._branch_list()
    want = model[3](model[2](torch.cat([b(model[0](x)) for b in branches], dim=1)))
    torch.testing.assert_close(y, want, rtol=0, atol=0)


def test_state_dict_keys() -> None:
    par = Parallel(nn.Linear(4, 3), nn.Sequential(nn.Linear(4, 2), nn.BatchNorm1d(2)))
    keys = set(par.state_dict())
    assert keys == {
        "branches.0.weight",
        "branches.0.bias",
        "branches.1.0.weight",
        "branches.1.0.bias",
        "branches.1.1.weight",
        "branches.1.1.bias",
        "branches.1.1.running_mean",
        "branches.1.1.running_var",
        "branches.1.1.num_batches_tracked",
    }
    named = Parallel({"left": nn.Linear(4, 3), "right": nn.Linear(4, 3)})
    assert set(named.state_dict()) == {
        "branches.left.weight",
        "branches.left.bias",
        "branches.right.weight",
        "branches.right.bias",
    }
    twin = Parallel({"left": nn.Linear(4, 3), "right": nn.Linear(4, 3)})
    twin.load_state_dict(named.state_dict())
    x = torch.randn(2, 4)
    assert_all_close(twin(x), named(x), rtol=0, atol=0)


def test_under_no_grad() -> None:
    par = Parallel(*make_branches())
    x = torch.randn(4, 16)
    with torch.no_grad():
        outs = par(x)
    assert not any(o.requires_grad for o in outs)
    with torch.inference_mode():  # inference tensors have no version counter
        outs = par(torch.randn(4, 16))
    assert len(outs) == 3


def test_single_branch_and_len() -> None:
    lin = nn.Linear(4, 2)
    par = Parallel(lin)
    x = torch.randn(3, 4)
    (out,) = par(x)
    torch.testing.assert_close(out, lin(x), rtol=0, atol=0)
    assert len(par) == 1 and len(Parallel(*make_branches())) == 3


def test_non_tensor_input_runs_sequentially() -> None:
    class First(nn.Module):
        def forward(self, pair):
            return pair[0]

    class Second(nn.Module):
        def forward(self, pair):
            return pair[1]

    a, b = torch.randn(2), torch.randn(3)
    outs = Parallel(First(), Second())((a, b))
    assert outs[0] is a and outs[1] is b


def test_in_place_branch_is_rejected() -> None:
    par = Parallel(nn.ReLU(inplace=True), nn.Identity())
    with pytest.raises(RuntimeError, match="in place"):
        par(torch.randn(4))


@pytest.mark.parametrize(
    "args",
    [(), ({},), (nn.Linear(2, 2), "not a module"), ({"a": nn.Linear(2, 2), "b": 3},)],
)
def test_bad_branches_are_rejected(args) -> None:
    with pytest.raises((TypeError, ValueError)):
        Parallel(*args)


def test_bad_combine_is_rejected() -> None:
    with pytest.raises(TypeError):
        Parallel(nn.Identity(), combine=3)


def test_copy_and_pickle() -> None:
    par = Parallel(*make_branches(), combine=functools.partial(torch.cat, dim=1))
    x = torch.randn(2, 16)
    for twin in (copy.deepcopy(par), pickle.loads(pickle.dumps(par))):
        torch.testing.assert_close(twin(x), par(x), rtol=0, atol=0)
        assert twin._streams == {}


def test_repr_mentions_combine() -> None:
    par = Parallel(nn.Identity(), nn.Identity(), combine=functools.partial(torch.cat, dim=1))
    assert "combine=partial(cat" in repr(par)


# -------------------------------------------------------------------------- CUDA


class SlowMatmul(nn.Module):
    """Spins the GPU for ``cycles`` clock ticks, then multiplies: a branch that
    finishes long after the others, so a missing stream wait shows up as wrong
    numbers instead of passing by luck."""

    def __init__(self, width: int, out: int, cycles: int = int(1e7)) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width, out) / width**0.5)
        self.cycles = cycles

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:
            torch.cuda._sleep(self.cycles)
        return x @ self.weight


class _SlowGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        # Runs on the stream of the forward op (the side stream).
        torch.cuda._sleep(int(1e7))
        return grad * 1.0


class SlowBackward(nn.Module):
    """Identity whose backward spins first: catches missing syncs in backward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SlowGrad.apply(x)


@pytest.fixture
def exact_fp32():
    """Turn TF32 off so branch outputs are comparable with tight tolerances."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


TIGHT = {"rtol": 1e-5, "atol": 1e-6}


def cuda_branches(width: int = 64, out: int = 32) -> list[nn.Module]:
    torch.manual_seed(0)
    return [
        nn.Sequential(nn.Linear(width, 128), nn.ReLU(), nn.Linear(128, out)),
        SlowMatmul(width, out),
        nn.Sequential(SlowBackward(), nn.Linear(width, out)),
        nn.Sequential(nn.Tanh(), nn.Linear(width, out), nn.GELU()),
    ]


@pytest.mark.cuda
@requires_cuda
def test_cuda_forward_backward_equal_sequential(exact_fp32) -> None:
    par = Parallel(*cuda_branches()).cuda()
    for _ in range(3):  # fresh data each time: stale memory never looks right
        x = torch.randn(256, 64, device="cuda")
        assert_all_close(par(x), sequential_outputs(par, x), **TIGHT)
        got_p, got_x = grads_of(par, x, par)
        want_p, want_x = grads_of(par, x, lambda t: sequential_outputs(par, t))
        assert_all_close(got_p, want_p, **TIGHT)
        torch.testing.assert_close(got_x, want_x, **TIGHT)
    assert len(par._streams[torch.cuda.current_device()]) == 4  # created once


@pytest.mark.cuda
@requires_cuda
def test_cuda_outputs_ready_right_after_forward(exact_fp32) -> None:
    """The caller reads the slow branch's output at once: needs the final waits."""
    par = Parallel(*cuda_branches()).cuda()
    for _ in range(3):
        x = torch.randn(256, 64, device="cuda")
        with torch.no_grad():
            got = [o.clone() for o in par(x)]  # clone runs on the caller stream
            want = sequential_outputs(par, x)
        assert_all_close(got, want, **TIGHT)


@pytest.mark.cuda
@requires_cuda
def test_cuda_non_default_current_stream(exact_fp32) -> None:
    par = Parallel(*cuda_branches()).cuda()
    base = torch.randn(256, 64, device="cuda")
    want = [o.detach() for o in sequential_outputs(par, base)]
    want_p, want_x = grads_of(par, base, lambda t: sequential_outputs(par, t))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # base is ready for `stream`
    with torch.cuda.stream(stream):
        # x is written late on `stream` (after a spin): side streams that waited
        # on the default stream instead of the current one would read zeros.
        x = torch.zeros_like(base)
        torch.cuda._sleep(int(2e7))
        x.copy_(base)
        x.requires_grad_(True)
        outs = par(x)
        assert torch.cuda.current_stream() == stream
        loss = sum((i + 1) * o.square().sum() for i, o in enumerate(outs))
        par.zero_grad(set_to_none=True)
        loss.backward()
        got = [o.detach().clone() for o in outs]
        got_p = [p.grad.clone() for p in par.parameters()]
        got_x = x.grad.clone()
    torch.cuda.current_stream().wait_stream(stream)
    assert_all_close(got, want, **TIGHT)
    assert_all_close(got_p, want_p, **TIGHT)
    torch.testing.assert_close(got_x, want_x, **TIGHT)


@pytest.mark.cuda
@requires_cuda
def test_cuda_current_stream_unchanged() -> None:
    par = Parallel(*cuda_branches()).cuda()
    x = torch.randn(8, 64, device="cuda")
    before = torch.cuda.current_stream()
    par(x)
    assert torch.cuda.current_stream() == before
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        par(x)
        assert torch.cuda.current_stream() == stream
    assert torch.cuda.current_stream() == before
    assert all(s != before for s in par._streams[torch.cuda.current_device()])


@pytest.mark.cuda
@requires_cuda
def test_cuda_no_grad_and_sequential_container(exact_fp32) -> None:
    torch.manual_seed(0)
    par = Parallel(*cuda_branches(), combine=functools.partial(torch.cat, dim=1))
    model = nn.Sequential(nn.Linear(16, 64), par, nn.ReLU(), nn.Linear(128, 4)).cuda()
    x = torch.randn(32, 16, device="cuda")
    with torch.no_grad():
        got = model(x)
        par.use_streams = False
        want = model(x)
        par.use_streams = True
    torch.testing.assert_close(got, want, **TIGHT)
    got_p, got_x = grads_of(model, x, lambda t: (model(t),))
    par.use_streams = False
    want_p, want_x = grads_of(model, x, lambda t: (model(t),))
    assert_all_close(got_p, want_p, **TIGHT)
    torch.testing.assert_close(got_x, want_x, **TIGHT)


@pytest.mark.cuda
@requires_cuda
def test_cuda_input_freed_early_is_safe(exact_fp32) -> None:
    """x comes from a prefetch stream and is dropped right after the call.

    Its memory returns to the prefetch stream's pool; only Parallel's own
    record_stream on the side streams keeps a new tensor on that stream from
    taking it while the slow branch has yet to read x.
    """
    par = Parallel(*cuda_branches()).cuda()
    base = torch.randn(256, 64, device="cuda")
    prefetch = torch.cuda.Stream()
    with torch.no_grad():
        want = [o.clone() for o in sequential_outputs(par, base)]
        for _ in range(3):
            prefetch.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(prefetch):
                x = base.clone()
            torch.cuda.current_stream().wait_stream(prefetch)
            outs = par(x)
            del x
            with torch.cuda.stream(prefetch):
                scribble = torch.full_like(base, float("nan"))  # may take x's block
            assert_all_close(outs, want, **TIGHT)
            torch.cuda.current_stream().wait_stream(prefetch)
            del scribble
