"""The rule of `-m "not slow"`: a test that starts pytest in a subprocess is marked slow,
or it fails saying so (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import _starts_pytest


@pytest.mark.parametrize(
    ("command", "starts"),
    [
        ([sys.executable, "-m", "pytest", "-q"], True),
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


def test_an_unmarked_test_that_starts_pytest_fails_saying_so() -> None:
    with pytest.raises(pytest.fail.Exception, match="starts pytest in a subprocess: mark it"):
        subprocess.run([sys.executable, "-m", "pytest", "--version"], capture_output=True)
    # Any other command runs.
    assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0


@pytest.mark.slow
def test_a_marked_test_may() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "--version"], capture_output=True)
    assert done.returncode == 0
