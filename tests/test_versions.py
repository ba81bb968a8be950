"""The supported versions are said once, in pyproject.toml, and everything that repeats
them agrees: the oldest pinned in noxfile.py (what the matrix tests), the README's
install line and CONTRIBUTING's range."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def stated() -> dict[str, tuple[str, str]]:
    """(lowest, upper bound) of each package whose internals the plugin uses."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = [*project["dependencies"], *project["optional-dependencies"]["xdist"]]
    specs += project["optional-dependencies"]["snapshots"]
    found = {}
    for spec in specs:
        m = re.fullmatch(r"(pytest|pytest-xdist|syrupy)>=([\d.]+),<(\d+)", spec)
        if m:
            found[m.group(1)] = (m.group(2), m.group(3))
    return found


def test_each_internal_dependency_is_bounded_on_both_sides() -> None:
    assert sorted(stated()) == ["pytest", "pytest-xdist", "syrupy"]


def test_the_matrix_tests_the_oldest_stated() -> None:
    spec = importlib.util.spec_from_file_location("noxfile_", ROOT / "noxfile.py")
    assert spec is not None and spec.loader is not None
    if importlib.util.find_spec("nox") is None:  # the noxfile imports nox
        import pytest

        pytest.skip("nox is not installed")
    noxfile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(noxfile)
    from packaging.version import Version

    pinned = {name: Version(v) for name, _, v in (p.partition("==") for p in noxfile.OLDEST)}
    assert pinned == {name: Version(low) for name, (low, _) in stated().items()}


def test_the_readme_and_contributing_say_the_same_range() -> None:
    versions = stated()
    low, high = versions["pytest"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"pytest {low} to {int(high) - 1}.x" in readme
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for name, (low, high) in versions.items():
        assert f"`{name}>={low},<{high}`" in contributing
