"""The lower bounds of pyproject.toml as a pip constraints file, for CI's lowest-versions lane.

Every requirement of the project (the build system's, its dependencies and every optional extra)
must state a lower bound (`>=`, `~=` or `==`); each becomes an `==` pin, so the lane installs
exactly the versions the project promises to work with. Reading the bounds from pyproject.toml
means a new extra is covered without editing a second list.

    python .ci/lower_bounds.py              # the constraints, one `name==version` a line
    python .ci/lower_bounds.py --extras     # the extras' names, comma-separated, for `.[...]`
    python .ci/lower_bounds.py --check      # exit 1 unless what is installed matches the pins
"""
from __future__ import annotations

import argparse
import sys
import tomllib
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version
except ImportError:  # a fresh venv has no packaging yet, but pip carries one
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name
    from pip._vendor.packaging.version import Version

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def lower_bound(requirement: Requirement) -> str:
    """The one version a requirement promises to work from; ValueError if it states none."""
    bounds = [s.version for s in requirement.specifier if s.operator in (">=", "~=", "==")]
    if len(bounds) != 1:
        raise ValueError(f"{requirement}: state exactly one lower bound (>=, ~= or ==) in "
                         f"pyproject.toml, so CI's lowest-versions lane can test it")
    return bounds[0]


def requirements(project: dict) -> list[Requirement]:
    """Build system, dependencies and every extra; the project's own name (an extra that
    includes others) left out."""
    own = canonicalize_name(project["project"]["name"])
    found = list(project.get("build-system", {}).get("requires", []))
    found += project["project"].get("dependencies", [])
    for extra in project["project"].get("optional-dependencies", {}).values():
        found += extra
    parsed = [Requirement(r) for r in found]
    return [r for r in parsed if canonicalize_name(r.name) != own]


def pins(project: dict) -> dict[str, tuple[str, str]]:
    """{name: (lowest version, marker)}; a package named twice must state the same bound."""
    found: dict[str, tuple[str, str]] = {}
    for requirement in requirements(project):
        name, version = canonicalize_name(requirement.name), lower_bound(requirement)
        if name not in found:
            found[name] = (version, str(requirement.marker or ""))
        elif Version(found[name][0]) != Version(version):
            raise ValueError(f"{name} has two lower bounds: {found[name][0]} and {version}")
    return found


def mismatches(pinned: dict[str, tuple[str, str]]) -> list[str]:
    """Pinned packages that are missing or installed at another version (a local tag such as
    +cu130 does not count, as in pip's `==`)."""
    wrong = []
    for name, (version, marker) in sorted(pinned.items()):
        if marker and not Requirement(f"{name}; {marker}").marker.evaluate():
            continue
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            wrong.append(f"{name}: pinned {version}, not installed")
            continue
        if Version(Version(installed).public) != Version(version):
            wrong.append(f"{name}: pinned {version}, installed {installed}")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", action="store_true", help="print the extras' names")
    parser.add_argument("--check", action="store_true", help="compare installed versions")
    args = parser.parse_args(argv)
    project = tomllib.loads(PYPROJECT.read_text())
    if args.extras:
        print(",".join(project["project"].get("optional-dependencies", {})))
        return 0
    pinned = pins(project)
    if args.check:
        wrong = mismatches(pinned)
        for line in wrong:
            print(f"lowest-versions lane: {line}", file=sys.stderr)
        return 1 if wrong else 0
    for name, (version, marker) in sorted(pinned.items()):
        print(f"{name}=={version}" + (f"; {marker}" if marker else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
