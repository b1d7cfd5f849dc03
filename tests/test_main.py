"""__main__.py: `python -m imageloader COMMAND` dispatches to pack and summary."""
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from PIL import Image

from imageloader.__main__ import main

REPO = Path(__file__).resolve().parents[1]


def python_m(*argv, cwd):
    """Run `python -m ...` as a user would, with this checkout's package first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", *map(str, argv)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def folder(root):
    for k, name in enumerate(["cat", "dog"]):
        for i in range(3):
            (root / name).mkdir(parents=True, exist_ok=True)
            Image.new("L", (4, 4), 50 * k + i).save(root / name / f"{i}.png")
    return root


def test_pack_then_summary_from_the_command_line(tmp_path):
    folder(tmp_path / "photos" / "train")
    packed = python_m("imageloader", "pack", "photos/train", "train.tgz", cwd=tmp_path)
    assert packed.returncode == 0, packed.stderr
    assert "train.tgz: 6 images" in packed.stderr  # logged
    with tarfile.open(tmp_path / "train.tgz") as tar:
        assert sorted(tar.getnames())[0] == "train/cat/0.png"
    for module in (["imageloader", "summary"], ["imageloader.summary"]):
        done = python_m(*module, "train.tgz", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert "train.tgz: 6 images in 2 classes" in done.stdout


def test_wrong_input_is_one_line_of_error_not_a_traceback(tmp_path, capsys):
    (tmp_path / "flat").mkdir()
    Image.new("L", (4, 4)).save(tmp_path / "flat" / "a.png")
    with pytest.raises(SystemExit) as done:
        main(["pack", str(tmp_path / "flat"), str(tmp_path / "x.tgz")])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "python -m imageloader pack: error:" in err and "not in a class folder" in err
    assert "Traceback" not in err


def test_usage_and_unknown_commands(capsys):
    assert main([]) == 2
    assert "pack" in capsys.readouterr().out
    assert main(["unpack"]) == 2
    assert "unknown command 'unpack'" in capsys.readouterr().err
