"""The optional libraries of pyproject.toml's extras, for CI's lane without them.

Every package an extra names (not `bench` and `data`, which serve scripts, nor `test`'s own
tools) unless the package's required dependencies need it too (fsspec: torch requires it),
plus `EXTRA_TEST_SERVERS`, which only the tests use to stand in for remote stores. Reading
them from pyproject.toml means a new optional dependency is uninstalled in that lane without
editing a second list.

    python .ci/optional.py     # the names, one a line, for `pip uninstall`
"""
from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # a fresh venv has no packaging yet, but pip carries one
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
OPTIONAL_EXTRAS = ("fast", "gpu", "remote", "s3", "imagenet")  # what the package uses when it is there
EXTRA_TEST_SERVERS = ("moto",)                     # tests/test_remote.py's S3 server
DETECTED_AT_RUN_TIME = ("torchcodec",)             # a decoder used where installed, in no extra


def named(requirements: list[str]) -> set[str]:
    """The package names of requirement strings (an extra of this project itself skipped)."""
    return {canonicalize_name(Requirement(r).name) for r in requirements
            if not r.startswith("imageloader")}


def required_by(names: set[str]) -> set[str]:
    """Every installed package that `names` need, however deep (their extras left out)."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [canonicalize_name(Requirement(r).name) for r in requires
                 if not re.search(r"extra\s*==", r)]
    return seen


def optional() -> list[str]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = set().union(*(named(extras[e]) for e in OPTIONAL_EXTRAS))
    needed = required_by(named(project["dependencies"]))
    return sorted((wanted - needed) | set(EXTRA_TEST_SERVERS) | set(DETECTED_AT_RUN_TIME))


if __name__ == "__main__":
    print("\n".join(optional()))
