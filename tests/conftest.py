from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy  # noqa: F401 - see below
import pyarrow  # noqa: F401
import pytest

from pytest_vault.guard.engine import Guard
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import load_passport

from .fakeprovider import FakeProvider

# numpy and pyarrow load once per process, before any test: pytester's in-process runs
# drop the modules a run imported, and these two cannot load a second time.

ROOT = Path(__file__).resolve().parents[1]
OAP_REFERENCE = Path(
    os.environ.get("VAULT_OAP_REFERENCE", ROOT.parent / "shared" / "reference" / "oap")
)
CHARGE_TESTS = OAP_REFERENCE / "aport-policies" / "finance.payment.charge.v1" / "tests"
# Read once, before the fixture below hides it from the pytest runs the tests start.
ON_CI = bool(os.environ.get("CI"))


@pytest.fixture(autouse=True)
def _a_run_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pytest runs a test starts (pytester) are runs of their own, never workers of
    this one: under `-n`, plugins that read these variables (syrupy, pytest-benchmark)
    would otherwise act as workers inside them. Nor do they see CI's variables, with
    which pytest prints each failure twice, whole, in its short summary."""
    for name in (
        "PYTEST_XDIST_WORKER",
        "PYTEST_XDIST_WORKER_COUNT",
        "PYTEST_XDIST_TESTRUNUID",
        "CI",
        "BUILD_NUMBER",
    ):
        monkeypatch.delenv(name, raising=False)


def _spreads(args: tuple[object, ...]) -> bool:
    """Whether pytest arguments run xdist workers (`-n 2`, `-n2`, `--numprocesses=2`)."""
    return any(
        a == "-n" or (a.startswith("-n") and a[2:].isdigit()) or a.startswith("--numprocesses")
        for a in map(str, args)
    )


def _starts_pytest(args: Any) -> bool:
    """Whether a command (as `subprocess.Popen` takes it) runs pytest: `pytest ...`,
    `.../pytest ...`, `python -m pytest` or `python -mpytest` (pytester's), as a program
    or, in a shell line, after `&&`, `||`, `;` or `|`."""
    if isinstance(args, (str, bytes, os.PathLike)):
        words = os.fsdecode(args).split()
    else:
        words = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]
    return any(
        w == "-mpytest"
        or (w == "pytest" and i > 0 and words[i - 1] == "-m")
        or (Path(w).name == "pytest" and (i == 0 or words[i - 1] in ("&&", "||", ";", "|")))
        for i, w in enumerate(words)
    )


STARTS_PYTEST = "run_pytest"


class RunPytest:
    """Starts pytest in a subprocess, as the tests do: `run_pytest(*args)` in the test's
    pytester folder (pytester's `runpytest_subprocess`), or `run_pytest.argv(*args)` for a
    test that runs the command itself (one it kills, or whose output it merges)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request

    def __call__(
        self, *args: str | os.PathLike[str], timeout: float | None = None
    ) -> pytest.RunResult:
        pytester: pytest.Pytester = self._request.getfixturevalue("pytester")
        return pytester.runpytest_subprocess(*args, timeout=timeout)

    @staticmethod
    def argv(*args: str | os.PathLike[str]) -> list[str]:
        """`python -m pytest ARGS`, with this interpreter."""
        return [sys.executable, "-m", "pytest", *(os.fspath(a) for a in args)]


@pytest.fixture
def run_pytest(request: pytest.FixtureRequest) -> RunPytest:
    """The way a test starts pytest in a subprocess: a test that takes this fixture,
    itself or through another fixture, is marked `slow` (below)."""
    return RunPytest(request)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The rule of `-m "not slow"`: a test that starts pytest (it takes `run_pytest`) is
    `slow`, marked here before `-m` deselects, so that no one has to remember it."""
    for item in items:
        if STARTS_PYTEST in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def pytester(pytester: pytest.Pytester, request: pytest.FixtureRequest) -> pytest.Pytester:
    """A test that starts pytest by pytester, in a subprocess or with xdist workers, is
    `slow` (it takes `run_pytest`, or is marked), or it fails saying so.

    Each test project names its folder as its corpus, as a team's config does
    (`vault_corpus`): a test that makes its own config file says so again, or names its
    corpus files."""
    pytester.makeini("[pytest]\nvault_corpus = .\n")
    if request.node.get_closest_marker("slow") is not None:
        return pytester
    name = request.node.nodeid
    inprocess, popen = pytester.runpytest, pytester.popen

    def runpytest(*args: Any, **kwargs: Any) -> pytest.RunResult:
        if _spreads(args):
            pytest.fail(f"{name} runs xdist workers: mark it @pytest.mark.slow")
        return inprocess(*args, **kwargs)

    def started(cmdargs: Any, *args: Any, **kwargs: Any) -> Any:
        if _starts_pytest(cmdargs):
            pytest.fail(f"{name} starts pytest in a subprocess: take the run_pytest fixture")
        return popen(cmdargs, *args, **kwargs)

    pytester.runpytest = runpytest  # type: ignore[method-assign]
    pytester.popen = started  # type: ignore[method-assign]
    return pytester


@pytest.fixture
def charge_tests() -> Path:
    if not CHARGE_TESTS.is_dir():
        if ON_CI:
            pytest.fail(f"OAP reference data missing at {CHARGE_TESTS}")
        pytest.skip(f"OAP reference data not found at {CHARGE_TESTS}")
    return CHARGE_TESTS


@pytest.fixture
def level_guard() -> dict[int, Guard]:
    """A fresh guard (empty ledger) per shipped level passport."""
    return {n: Guard(load_passport(SHIPPED / f"level-{n}.json")) for n in range(1, 6)}


# The five events as the tests expect to read them from a row, in this order. Written
# out here, not imported from the package, so that the tests state them independently.
# A pack context that Level 3 allows: $1 to its permitted payee.
CONTEXT = {
    "amount": 100,
    "currency": "USD",
    "merchant_id": "savings@aport-vault.com",
    "region": "US",
    "items": [{"sku": "a", "qty": 1}],
}

EVENTS = (
    "requested",
    "paid",
    "allowed_calls",
    "denied_calls",
    "deny_codes",
    "paid_allowlisted",
    "unpermitted",
    "violation",
)

# Keys the local server sees; tests check that they never reach a file.
KEYS = {
    "OPENAI_API_KEY": "sk-test-0123456789abcdef",
    "ANTHROPIC_API_KEY": "sk-ant-test-fedcba9876543210",
}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    """A local two-protocol model server, with both SDKs pointed at it."""
    with FakeProvider() as server:
        for name, value in KEYS.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        yield server
