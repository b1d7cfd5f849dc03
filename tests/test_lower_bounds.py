""".ci/lower_bounds.py: pyproject.toml's lower bounds as the pins of CI's lowest-versions lane;
.ci/optional.py: what its lane without the extras uninstalls."""
from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("lower_bounds", ROOT / ".ci" / "lower_bounds.py")
lower_bounds = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lower_bounds)


def project(dependencies, extras=None, build=("setuptools>=77.0.1",)):
    return {"build-system": {"requires": list(build)},
            "project": {"name": "imageloader", "dependencies": list(dependencies),
                        "optional-dependencies": extras or {}}}


def test_every_requirement_of_our_pyproject_states_a_lower_bound():
    """What the lane installs: a new extra without a bound fails here, in the main lane too."""
    ours = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = lower_bounds.pins(ours)
    assert pins["torch"][0] == "2.11" and pins["rapidgzip"][0] == "0.16.2"
    named = {lower_bounds.canonicalize_name(r.name) for r in lower_bounds.requirements(ours)}
    assert set(pins) == named and "setuptools" in pins


def test_pins_cover_the_build_system_dependencies_and_every_extra():
    pins = lower_bounds.pins(project(
        ["numpy>=1.24", "Pillow >= 10.1, <12"],
        {"fast": ["rapidgzip>=0.16.2"], "s3": ["s3fs~=2024.3"],
         "gpu": ["nvidia-nvimgcodec-cu13>=0.6; platform_system == 'Linux'"],
         "all": ["imageloader[fast,s3]"]}))
    assert pins == {"setuptools": ("77.0.1", ""), "numpy": ("1.24", ""), "pillow": ("10.1", ""),
                    "rapidgzip": ("0.16.2", ""), "s3fs": ("2024.3", ""),
                    "nvidia-nvimgcodec-cu13": ("0.6", 'platform_system == "Linux"')}


@pytest.mark.parametrize("requirement", ["tqdm", "tqdm<5", "tqdm>4.60", "tqdm>=4.60,>=4.61"])
def test_a_requirement_without_exactly_one_lower_bound_is_refused(requirement):
    with pytest.raises(ValueError, match="lower bound"):
        lower_bounds.pins(project([requirement]))


def test_a_package_with_two_different_bounds_is_refused():
    with pytest.raises(ValueError, match="two lower bounds"):
        lower_bounds.pins(project(["isal>=1.6"], {"test": ["isal>=1.7"]}))
    assert lower_bounds.pins(project(["isal>=1.6"], {"test": ["isal>=1.6.0"]}))["isal"][0] == "1.6"


def test_check_names_what_is_installed_at_another_version():
    installed = lower_bounds.metadata.version("pytest")
    assert lower_bounds.mismatches({"pytest": (installed, "")}) == []
    wrong = lower_bounds.mismatches({"pytest": ("1.0", ""), "no-such-package-here": ("1.0", ""),
                                     "other-os-only": ("1.0", 'sys_platform == "nonexistent"')})
    assert wrong == ["no-such-package-here: pinned 1.0, not installed",
                     f"pytest: pinned 1.0, installed {installed}"]


def test_constraints_and_extras_as_the_lane_reads_them(capsys):
    assert lower_bounds.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "torch==2.11" in lines and "rapidgzip==0.16.2" in lines
    assert lower_bounds.main(["--extras"]) == 0
    extras = capsys.readouterr().out.strip().split(",")
    assert {"fast", "test"} <= set(extras)


def test_the_lane_without_extras_removes_what_the_extras_add_and_nothing_torch_needs():
    """.ci/optional.py: the names CI's second lane uninstalls, read from pyproject.toml."""
    spec = importlib.util.spec_from_file_location("optional", ROOT / ".ci" / "optional.py")
    optional = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(optional)
    names = optional.optional()
    assert {"rapidgzip", "isal", "nvidia-nvimgcodec-cu13", "nvidia-nvjpeg", "aiohttp", "s3fs",
            "moto", "torchcodec"} <= set(names)
    assert "fsspec" in optional.required_by({"torch"})  # torch's own requirement: it stays
    assert not {"fsspec", "torch", "torchvision", "pillow", "numpy", "pytest"} & set(names)
