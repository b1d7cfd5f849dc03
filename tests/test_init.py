"""The package itself: importing it changes nothing process-wide; configure_cuda_queues() does,
when called. Fresh interpreters (subprocesses), since CUDA reads the variable once."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import imageloader
from imageloader import MAX_CONNECTIONS, configure_cuda_queues

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
SHOW = "import os; print(os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS'))\n"


def python(code: str, **env: str) -> str:
    """stdout then stderr of `code` run in a fresh interpreter, without the variable unless
    given."""
    environ = {k: v for k, v in os.environ.items() if k != MAX_CONNECTIONS}
    done = subprocess.run([sys.executable, "-c", code], env={**environ, **env},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip() + done.stderr


def test_import_changes_no_process_wide_setting():
    # The lazily imported loader (and torch with it) must not set it either.
    code = "import imageloader\nimageloader.ImageLoader, imageloader.Prefetcher\n" + SHOW
    assert python(code).startswith("None")
    assert python("import imageloader\n" + SHOW, CUDA_DEVICE_MAX_CONNECTIONS="1").startswith("1")


def test_configure_asks_for_32_queues_for_this_process_and_its_children():
    code = ("import subprocess, sys, imageloader\n"
            "print(imageloader.configure_cuda_queues())\n"
            "subprocess.run([sys.executable, '-c', " + repr(SHOW) + "])\n")
    assert python(code).split() == ["True", "32"]


def test_configure_keeps_the_users_value():
    code = "import imageloader\nprint(imageloader.configure_cuda_queues())\n" + SHOW
    assert python(code, CUDA_DEVICE_MAX_CONNECTIONS="1").split() == ["False", "1"]
    assert python(code, CUDA_DEVICE_MAX_CONNECTIONS="32").split() == ["True", "32"]


def test_configure_after_cuda_started_warns_and_changes_nothing(monkeypatch):
    monkeypatch.delenv(MAX_CONNECTIONS, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # as after a CUDA call
    with pytest.warns(UserWarning, match="before the first CUDA call"):
        assert configure_cuda_queues() is False
    assert MAX_CONNECTIONS not in os.environ


def test_configure_is_public():
    assert "configure_cuda_queues" in imageloader.__all__
    assert "configure_cuda_queues" in dir(imageloader)


@pytest.mark.cuda
@cuda
def test_on_a_gpu_too_late_a_call_warns_and_gpu_decode_without_it_says_so(labeled_archive):
    out = python(
        "import logging, torch, imageloader; logging.basicConfig(level=logging.WARNING)\n"
        "torch.zeros(1, device='cuda')\n"
        "print(imageloader.configure_cuda_queues())\n" + SHOW +
        f"imageloader.ImageLoader({str(labeled_archive)!r}, decode='cuda', workers=1)\n")
    assert out.startswith("False\nNone"), out
    assert "configure_cuda_queues() came after CUDA started" in out
    assert "decode='cuda' with CUDA's default 8 hardware queues" in out


@pytest.mark.cuda
@cuda
def test_on_a_gpu_configured_in_time_gpu_decode_is_quiet(labeled_archive):
    out = python(
        "import logging, torch, imageloader; logging.basicConfig(level=logging.WARNING)\n"
        "print(imageloader.configure_cuda_queues())\n"
        "torch.zeros(1, device='cuda')\n" + SHOW +
        f"imageloader.ImageLoader({str(labeled_archive)!r}, decode='cuda', workers=1)\n")
    assert out.startswith("True\n32") and "hardware queues" not in out, out
