"""The rule of `-m "not slow"` (tests/conftest.py): a test that starts pytest takes the
`run_pytest` fixture, which marks it slow; one that starts pytest by pytester without
being slow fails saying so."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import RunPytest, _starts_pytest

pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    ("command", "starts"),
    [
        ([sys.executable, "-m", "pytest", "-q"], True),
        ([sys.executable, "-mpytest", "--basetemp=x"], True),  # pytester's runpytest_subprocess
        (["pytest", "tests"], True),
        (["/venv/bin/pytest"], True),
        (Path("/venv/bin/pytest"), True),
        ([b"python", b"-m", b"pytest"], True),
        ("cd x && python -m pytest -q | head", True),
        ([sys.executable, "-m", "pytest_vault.report", "run.parquet"], False),
        (["vault-guard", "lint", "pytest"], False),  # a word "pytest", not the command
        ([sys.executable, "-c", "import pytest"], False),
        ("python -m pytest_vault.guard --passport p.json", False),
    ],
)
def test_a_command_that_runs_pytest_is_told_apart(command: object, starts: bool) -> None:
    assert _starts_pytest(command) is starts


TESTS = """
import pytest

def test_plain(): pass

def test_starts(run_pytest): pass

@pytest.fixture
def project(run_pytest):
    return run_pytest

def test_by_way_of_a_fixture(project): pass

@pytest.mark.parametrize("n", [1, 2])
def test_each(n, run_pytest): pass

@pytest.mark.slow
def test_marked(): pass
"""


@pytest.mark.parametrize(
    ("select", "ids"),
    [
        ("not slow", ["test_plain"]),
        (
            "slow",
            [
                "test_starts",
                "test_by_way_of_a_fixture",
                "test_each[1]",
                "test_each[2]",
                "test_marked",
            ],
        ),
    ],
)
def test_a_test_that_takes_run_pytest_is_collected_slow(
    pytester: pytest.Pytester, select: str, ids: list[str]
) -> None:
    pytester.makeconftest(
        "from tests.conftest import pytest_collection_modifyitems, run_pytest  # noqa: F401\n"
    )
    pytester.makeini("[pytest]\nmarkers =\n    slow: starts pytest\n")
    pytester.makepyfile(test_rule=TESTS)
    result = pytester.runpytest("--collect-only", "-q", "-m", select, "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.OK
    assert [x for x in result.outlines if "::" in x] == [f"test_rule.py::{i}" for i in ids]
    summary = rf"{len(ids)}/6 tests collected \({6 - len(ids)} deselected\) in [\d.]+s"
    assert re.fullmatch(summary, result.outlines[-1]), result.outlines[-1]


def test_an_unmarked_test_that_starts_pytest_by_pytester_fails_saying_so(
    pytester: pytest.Pytester, request: pytest.FixtureRequest
) -> None:
    name = request.node.nodeid
    said = f"{name} starts pytest in a subprocess: take the run_pytest fixture"
    with pytest.raises(pytest.fail.Exception) as raised:
        pytester.runpytest_subprocess("--version")
    assert str(raised.value) == said
    with pytest.raises(pytest.fail.Exception) as raised:
        pytester.run(sys.executable, "-m", "pytest", "--version")
    assert str(raised.value) == said
    with pytest.raises(pytest.fail.Exception) as raised:
        pytester.runpytest("-n", "2")
    assert str(raised.value) == f"{name} runs xdist workers: mark it @pytest.mark.slow"
    # Any other command runs.
    assert pytester.run(sys.executable, "-c", "pass").ret == 0


def test_a_test_that_takes_run_pytest_may(
    run_pytest: RunPytest, request: pytest.FixtureRequest
) -> None:
    assert request.node.get_closest_marker("slow") is not None
    assert run_pytest.argv("-q", Path("x")) == [sys.executable, "-m", "pytest", "-q", "x"]
    assert run_pytest("--version").ret == pytest.ExitCode.OK
    done = subprocess.run(run_pytest.argv("--version"), capture_output=True)
    assert done.returncode == 0
