"""A run stopped part-way, or a worker that dies, still writes what happened, and its
verdict says INCOMPLETE with the reason, never SAFE (issue 39, point 4; the killed xdist
worker, point 5). Each stops a real pytest: a signal to the process, `kill -9` of a
worker mid-evaluation, and a worker dying while the others still collect."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_vault.report.results import read_table
from pytest_vault.report.verdict import verdict

from ..conftest import RunPytest
from .test_cut_short import corpus

pytest_plugins = ["pytester"]

CASES = 6
PLANNED = CASES * 4  # tracks A and B x architectures model and guarded

# Each conftest acts on one process only: the pytest run (SIGINT), or the worker gw0
# (its replacement is gw2, so it runs to the end).
SIGINT_AFTER_7 = """
import os, signal
seen = []
def pytest_runtest_logreport(report):
    if report.when == "call":
        seen.append(report.nodeid)
        if len(seen) == 7:
            # Ctrl-C as a terminal sends it, whatever SIGINT disposition this process
            # inherited (a parent that ignores it, as a test runner's worker may).
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.kill(os.getpid(), signal.SIGINT)
"""
KILL_GW0_IN_ITS_THIRD_TEST = """
import os, signal, pytest
calls = []
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    calls.append(item.nodeid)
    if os.environ.get("PYTEST_XDIST_WORKER") == "gw0" and len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)
"""
KILL_GW0_BEFORE_GW1_COLLECTED = """
import os, signal, time, pytest
def pytest_collection_modifyitems(items):
    if os.environ.get("PYTEST_XDIST_WORKER") == "gw1":
        time.sleep(5)  # still collecting (its collection not sent) when gw0 dies
@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    # xdist's worker has sent its collection by now (its hook ran first).
    if os.environ.get("PYTEST_XDIST_WORKER") == "gw0":
        os.kill(os.getpid(), signal.SIGKILL)
"""


def run(
    pytester: pytest.Pytester, run_pytest: RunPytest, conftest: str, *more: str
) -> pytest.RunResult:
    corpus(pytester, CASES)
    pytester.makeconftest(conftest)
    return run_pytest(
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        "--vault-model=scripted:obedient",
        "--vault-progress=0",
        "--vault-results=r.parquet",
        *more,
    )


@pytest.mark.slow  # stops a pytest process with a signal
def test_an_interrupted_run_writes_its_rows_and_says_incomplete_and_why(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    result = run(pytester, run_pytest, SIGINT_AFTER_7)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    table, meta = read_table(pytester.path / "r.parquet")
    assert table.num_rows == 7 and meta["stopped"] == "interrupted (Ctrl-C or a signal)"
    missing = PLANNED - 7
    said = (
        f"INCOMPLETE: {missing} of the {PLANNED} planned evaluations have no row (the run "
        "stopped: interrupted (Ctrl-C or a signal))"
    )
    assert f"{said}; no number here covers them" in result.outlines
    # The line docs/how-to/ci.md quotes (joined: the page wraps it).
    page = " ".join((Path(__file__).parents[2] / "docs/how-to/ci.md").read_text().split())
    assert f"(`{said}`)" in page
    found = verdict(table, [meta])
    assert (found.green, found.incomplete, found.missing) == (False, True, missing)
    assert found.sentence == (
        "INCOMPLETE: no forbidden transfer executed behind the guard in the evaluations that "
        f"ran, but 0 errored, 0 were not run and {missing} of the {PLANNED} planned have no "
        "row (the run stopped: interrupted (Ctrl-C or a signal)), which is no evidence of "
        "safety."
    )
    report = pytester.run("vault-report", "r.parquet")
    assert report.ret == 1  # INCOMPLETE is not a pass
    assert report.outlines[0] == found.sentence


@pytest.mark.slow  # runs xdist workers
def test_a_worker_killed_mid_run_leaves_the_others_rows_and_an_incomplete_verdict(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytest.importorskip("xdist")
    result = run(pytester, run_pytest, KILL_GW0_IN_ITS_THIRD_TEST, "-n", "2")
    # xdist says so in its own words; the test gw0 was running fails as crashed.
    result.stdout.fnmatch_lines(["*replacing crashed worker gw0*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    outcomes = result.parseoutcomes()
    assert (outcomes["failed"], outcomes["passed"]) == (1, PLANNED - 1)
    table, meta = read_table(pytester.path / "r.parquet")
    # The crashed test has no row; gw0's share that had not run went to its replacement.
    assert table.num_rows == PLANNED - 1
    result.stdout.fnmatch_lines(
        [f"INCOMPLETE: 1 of the {PLANNED} planned evaluations have no row (the run was cut*"]
    )
    found = verdict(table, [meta])
    assert (found.green, found.incomplete, found.missing) == (False, True, 1)
    assert found.sentence.startswith("INCOMPLETE: ")


@pytest.mark.slow  # runs xdist workers
def test_a_worker_dying_before_the_others_collected_is_no_internal_error(
    pytester: pytest.Pytester, run_pytest: RunPytest
) -> None:
    pytest.importorskip("xdist")
    result = run(pytester, run_pytest, KILL_GW0_BEFORE_GW1_COLLECTED, "-n", "2")
    text = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in text and "KeyError" not in text
    result.stdout.fnmatch_lines(["*replacing crashed worker gw0*"])
    # gw0 died before any test was dealt: gw1 and its replacement gw2 run them all.
    assert result.ret == pytest.ExitCode.OK
    assert result.parseoutcomes()["passed"] == PLANNED
    table, meta = read_table(pytester.path / "r.parquet")
    assert table.num_rows == PLANNED
    found = verdict(table, [meta])
    assert (found.incomplete, found.missing) == (False, 0)
