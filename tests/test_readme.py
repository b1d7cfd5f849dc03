"""README.md: its python snippets run verbatim, its commands exist with the flags it gives, the
test command is the one CI runs, and the files it links to are there."""
from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
DATASETS = (REPO / "docs" / "datasets.md").read_text(encoding="utf-8")  # linked from README


def blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)


def commands(program: str, text: str = README) -> list[list[str]]:
    """The README's (or text's) shell lines that run `program`, as argv lists (comments
    dropped)."""
    found = []
    for block in blocks("bash", text):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv[:1] == [program]:
                found.append(argv)
    return found


def test_the_readme_stays_short():
    assert len(README.encode()) <= 10_500


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_snippet_runs_verbatim(index):
    """On the CPU, from the repository root, as a user pastes it."""
    code = blocks("python")[index]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=280)
    assert done.returncode == 0, f"{code}\n--- stderr:\n{done.stderr[-3000:]}"


def test_the_test_command_is_what_ci_runs():
    ci = (REPO / ".ci" / "run").read_text()
    ci_tests = [line.strip() for line in ci.splitlines() if "pytest" in line
                and not line.lstrip().startswith("#")]
    readme_tests = [" ".join(argv) for argv in commands("python") if "pytest" in argv]
    assert readme_tests and set(readme_tests) <= set(ci_tests), (readme_tests, ci_tests)


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location(f"readme_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_script_and_subcommand_exists_with_its_flags():
    assert checked_commands(README) >= 4


def test_the_dataset_recipes_run_commands_that_take_their_flags():
    """docs/datasets.md: every pack and script line parses; unzip lines name the files the
    pack lines after them read."""
    assert checked_commands(DATASETS) >= 10
    for argv in commands("unzip", DATASETS):
        written = argv[argv.index(">") + 1]
        assert any(written in line for line in commands("python", DATASETS)), argv


def checked_commands(text: str) -> int:
    """How many of text's `python -m imageloader ...` and `python scripts/...` lines were
    checked: the subcommand or script exists and parses the flags given."""
    from imageloader.__main__ import COMMANDS
    checked = 0
    for argv in commands("python", text):
        if argv[1:3] == ["-m", "imageloader"]:
            assert argv[3] in COMMANDS, argv
            parser = importlib.import_module(f"imageloader.{argv[3]}").get_args_parser()
            parser.parse_args(argv[4:])
        elif argv[1].startswith("scripts/"):
            assert (REPO / argv[1]).is_file(), argv
            load_script(REPO / argv[1]).get_args_parser().parse_args(argv[2:])
        else:
            continue
        checked += 1
    return checked


def test_torchrun_lines_run_a_script_that_takes_their_flags():
    """The README's torchrun commands: their script exists and parses the flags after it."""
    lines = commands("torchrun")
    assert lines
    for argv in lines:
        at = next(i for i, arg in enumerate(argv) if arg.endswith(".py"))
        assert (REPO / argv[at]).is_file(), argv
        load_script(REPO / argv[at]).get_args_parser().parse_args(argv[at + 1:])


def test_install_lines_name_extras_that_exist():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    named = [re.search(r"\[(.*)\]", arg).group(1).split(",") for argv in commands("pip")
             for arg in argv if arg.startswith(".[")]
    assert named and all(extra in extras for names in named for extra in names), named


def test_linked_files_exist():
    links = re.findall(r"\]\(([^)#]+)\)", README)
    assert "docs/datasets.md" in links
    local = [link for link in links if "://" not in link]
    assert local and all((REPO / link).exists() for link in local), local
