"""Parallel: run independent branches of a network on the same input, each on its own CUDA stream.

``Parallel(a, b, c)(x)`` returns ``(a(x), b(x), c(x))`` (or ``combine`` of that
tuple).  On CUDA every branch is launched on a side stream of its own, so the
GPU may run kernels of different branches at the same time; on CPU, or when
``x`` is not a CUDA tensor, the branches simply run one after the other.

When it helps
    Branches whose kernels each leave most of the GPU idle: small batches,
    small images or channel counts, latency-bound kernels, and the "tail" of a
    kernel whose last wave of blocks occupies only a few SMs.  Kernels of
    another branch fill the idle SMs.  The backward pass benefits too, since
    autograd runs each backward op on the stream of its forward op.

When it does not
    * Kernels that already fill the GPU (big matmuls, big-batch convolutions):
      they serialise on the hardware anyway, and concurrent branches compete
      for cache and memory bandwidth, so the gain is nil or slightly negative.
    * Launch-bound code: if Python/PyTorch takes longer to launch a kernel than
      the GPU takes to run it, the GPU is idle waiting for the CPU and no number
      of streams helps; CUDA graphs or ``torch.compile`` address that instead.
    * Eager mode with tiny kernels: the stream bookkeeping costs CPU time on
      every call, so branches that are already launch-bound can get *slower*.
      Capture the model into a CUDA graph (``torch.cuda.graph``; the stream
      fork/join is captured as parallel graph branches) to get the overlap
      without the launch cost.
    * Memory: the caching allocator keeps a pool per stream (a block freed on
      one stream is not reused by another) and cuBLAS keeps a workspace per
      stream, so peak memory grows a little with the number of branches.

A parameter shared by several branches has its gradient summed across
streams; that is correct, but PyTorch may warn once about an "AccumulateGrad
node's stream" mismatch.

Contract: branches must not modify their input in place (they read it at the
same time); a ``RuntimeError`` is raised when the input's version counter
changed during the call.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

__all__ = ["Parallel"]

logger = logging.getLogger(__name__)


class Parallel(nn.Module):
    """Run every branch on the same input and return the tuple of outputs.

    Args:
        *branches: the branch modules, or a single mapping ``name -> module``
            (kept as an ``nn.ModuleDict``, outputs in the mapping's order).
        combine: optional callable applied to the tuple of outputs, e.g.
            ``functools.partial(torch.cat, dim=1)`` or ``sum``.  If it is an
            ``nn.Module`` it is registered as a submodule (its parameters are
            trained and saved).
        use_streams: set to ``False`` to always run the branches one after the
            other on the caller's stream (for A/B comparisons and debugging).

    CUDA stream protocol of one call (caller = the current stream at the call):

    1. every side stream waits for the caller, so ``x`` is ready;
    2. branch ``i`` is launched inside ``with torch.cuda.stream(side_i)``; ``x``
       is ``record_stream``-ed on each side stream that reads it;
    3. the caller waits for every side stream, and every output is
       ``record_stream``-ed on the caller, which is where it will be used.

    None of these blocks the host.  Under autograd the backward ops of branch
    ``i`` run on ``side_i`` as well; the autograd engine inserts the syncs
    between streams itself and, at the end of ``backward()``, makes the stream
    that called ``backward()`` wait for them.  Side streams are created lazily,
    once per module and device, and are never part of ``state_dict``.
    """

    def __init__(
        self,
        *branches: nn.Module | Mapping[str, nn.Module],
        combine: Callable[[tuple[Any, ...]], Any] | None = None,
        use_streams: bool = True,
    ) -> None:
        super().__init__()
        self.branches: nn.ModuleList | nn.ModuleDict = _as_module_container(branches)
        if combine is not None and not callable(combine):
            raise TypeError(f"combine must be callable, got {type(combine).__name__}")
        self.combine = combine
        self.use_streams = use_streams
        # device index -> one stream per branch.  Not a buffer: streams are
        # runtime handles, neither state nor picklable.
        self._streams: dict[int, list[torch.cuda.Stream]] = {}

    def __len__(self) -> int:
        return len(self.branches)

    def _branch_list(self) -> list[nn.Module]:
        if isinstance(self.branches, nn.ModuleDict):
            return list(self.branches.values())
        return list(self.branches)

    def forward(self, x: Any) -> Any:
        version = _version_of(x)
        if self._should_use_streams(x):
            outputs = self._forward_streams(x)
        else:
            outputs = tuple(branch(x) for branch in self._branch_list())
        _check_not_modified(x, version)
        return outputs if self.combine is None else self.combine(outputs)

    def _should_use_streams(self, x: Any) -> bool:
        if not (self.use_streams and isinstance(x, torch.Tensor) and x.is_cuda):
            return False
        if len(self.branches) < 2:
            return False  # nothing to overlap; a stream hop would only add syncs
        # Under torch.compile the compiler schedules kernels itself; eager
        # stream juggling would only cause graph breaks.
        return not _is_compiling()

    def _forward_streams(self, x: torch.Tensor) -> tuple[Any, ...]:
        # The device guard makes current_stream() and the stream contexts below
        # refer to x's device even if another device is current.
        with torch.cuda.device(x.device):
            caller = torch.cuda.current_stream()
            sides = self._side_streams(x.device)
            if x.is_leaf and x.requires_grad and torch.is_grad_enabled():
                # A leaf's gradient accumulator takes the stream of its first
                # use; without this view that would be the first side stream,
                # and the other branches' gradients would be summed there
                # (autograd warns of an AccumulateGrad stream mismatch).  The
                # view, made here on the caller stream, keeps x's gradient on
                # the caller's stream.  No kernel, no copy.
                x = x.view_as(x)
            # SYNC (device-side only, host does not block): one event on the
            # caller marks "x and everything before it is written"; every side
            # stream waits for it before its branch reads x.
            ready = caller.record_event()
            outputs = []
            for branch, side in zip(self._branch_list(), sides):
                side.wait_event(ready)
                with torch.cuda.stream(side):
                    # x was allocated on another stream (the caller's, or a
                    # prefetch stream).  Once x is freed, the allocator reuses
                    # its memory for work on *that* stream, which is not
                    # ordered after this side stream's reads of x (forward, or
                    # backward through saved tensors) unless we record them.
                    x.record_stream(side)
                    outputs.append(branch(x))
            for side, out in zip(sides, outputs):
                # SYNC (device-side only): the caller must not read an output
                # before the side stream that writes it is done.
                caller.wait_stream(side)
                # Outputs were allocated on the side stream but are used (and
                # eventually freed) on the caller stream.
                _record_on(out, caller)
        return tuple(outputs)

    def _side_streams(self, device: torch.device) -> list[torch.cuda.Stream]:
        """The branches' side streams on ``device``, created on first use only."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        streams = self._streams.get(index, [])
        missing = len(self.branches) - len(streams)
        if missing > 0:  # first call on this device, or branches were added since
            streams = streams + [torch.cuda.Stream(device=index) for _ in range(missing)]
            self._streams[index] = streams
            logger.debug("Parallel: %d side streams on cuda:%d", len(streams), index)
        return streams

    def __getstate__(self) -> dict[str, Any]:
        # Streams cannot be pickled or deep-copied; a copy makes its own lazily.
        state = self.__dict__.copy()
        state["_streams"] = {}
        return state

    def extra_repr(self) -> str:
        parts = []
        if self.combine is not None and not isinstance(self.combine, nn.Module):
            parts.append(f"combine={_callable_name(self.combine)}")
        if not self.use_streams:
            parts.append("use_streams=False")
        return ", ".join(parts)


def _as_module_container(
    branches: tuple[nn.Module | Mapping[str, nn.Module], ...],
) -> nn.ModuleList | nn.ModuleDict:
    if len(branches) == 1 and isinstance(branches[0], Mapping):
        named = OrderedDict(branches[0])
        if not named:
            raise ValueError("Parallel needs at least one branch")
        for name, module in named.items():
            if not isinstance(module, nn.Module):
                raise TypeError(f"branch {name!r} is a {type(module).__name__}, not an nn.Module")
        return nn.ModuleDict(named)
    if not branches:
        raise ValueError("Parallel needs at least one branch")
    for i, module in enumerate(branches):
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"branch {i} is a {type(module).__name__}, not an nn.Module "
                "(pass either modules or a single dict of modules)"
            )
    return nn.ModuleList(branches)


def _record_on(obj: Any, stream: torch.cuda.Stream) -> None:
    """record_stream every CUDA tensor inside a (nested) tuple/list/dict output."""
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            obj.record_stream(stream)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _record_on(item, stream)
    elif isinstance(obj, Mapping):
        for item in obj.values():
            _record_on(item, stream)


def _version_of(x: Any) -> int | None:
    if not isinstance(x, torch.Tensor):
        return None
    try:
        return x._version
    except RuntimeError:  # inference-mode tensors have no version counter
        return None


def _check_not_modified(x: Any, version: int | None) -> None:
    if version is not None and x._version != version:
        raise RuntimeError(
            "a Parallel branch modified its input in place; branches share the "
            "input and may run concurrently, so they must not write to it "
            "(e.g. use nn.ReLU(inplace=False) as a branch's first layer)"
        )


def _is_compiling() -> bool:
    is_compiling = getattr(torch.compiler, "is_compiling", None)
    return bool(is_compiling and is_compiling())


def _callable_name(fn: Callable[..., Any]) -> str:
    func = getattr(fn, "func", fn)  # functools.partial
    name = getattr(func, "__name__", None) or type(func).__name__
    return name if func is fn else f"partial({name}, ...)"
