"""The files a run reads and writes: every file option is checked before anything runs
(one usage error, nothing created), and an output that fails anyway at the end is one
line, the other outputs still written."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from ..conftest import RunPytest
from ..results import read_rows
from .test_plugin import REPLAY, line, pay

pytest_plugins = ["pytester"]

# A test that runs says so: none may run when a file option is refused.
NOTHING_RUNS = "def pytest_runtest_setup(item):\n    raise AssertionError('a test ran')\n"
ESCALATE = ("--vault-attacker=scripted:escalate", "--vault-model=scripted:receipt-trusting")


def errors(result: pytest.RunResult) -> list[str]:
    return [x for x in result.errlines if x.strip()]


def tree(root: Path) -> set[Path]:
    return set(root.rglob("*"))


@pytest.fixture
def corpus(pytester: pytest.Pytester) -> Path:
    pytester.makefile(".txt", a_file="not a folder")
    pytester.mkdir("a_folder")
    pytester.mkdir("a_folder.jsonl")
    return pytester.makefile(".jsonl", attacks=line("c", 2, [pay("evil@x.test", 5)]))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # Was the whole run, then a 60-line traceback and no results. A path through a file
        # is refused once the options are settled, as written (`checks._reachable`).
        (
            ["--vault-results=a_file.txt/run.parquet"],
            "--vault-results a_file.txt/run.parquet: Not a directory",
        ),
        (
            ["--vault-results=a_file.txt/deeper/run.parquet"],
            "--vault-results a_file.txt/deeper/run.parquet: Not a directory",
        ),
        (
            ["--vault-results=a_folder"],
            "--vault-results {root}/a_folder: cannot write: Is a directory",
        ),
        (
            ["--vault-report=a_folder"],
            "--vault-report {root}/a_folder: cannot write: Is a directory",
        ),
        (
            ["--vault-report=a_file.txt/r.html"],
            "--vault-report a_file.txt/r.html: Not a directory",
        ),
        (
            [*ESCALATE, "--vault-export-found=a_file.txt/found.jsonl"],
            "--vault-export-found a_file.txt/found.jsonl: Not a directory",
        ),
        (
            [*ESCALATE, "--vault-export-found=a_folder.jsonl"],
            "--vault-export-found {root}/a_folder.jsonl: cannot write: Is a directory",
        ),
        (["--vault-passports=pasports"], "--vault-passports {root}/pasports: no such folder"),
        (["--vault-passports=a_file.txt"], "--vault-passports {root}/a_file.txt: not a folder"),
        (
            ["--vault-passports=a_folder"],
            "--vault-passports {root}/a_folder: levels.toml: cannot read: No such file or "
            "directory",
        ),
        (["--vault-prices=prices.toml"], "--vault-prices {root}/prices.toml: no such file"),
        (["--vault-prices=a_folder"], "--vault-prices {root}/a_folder: not a file"),
        (["--vault-baseline=last.parquet"], "--vault-baseline {root}/last.parquet: no such file"),
        (["--vault-baseline=a_folder"], "--vault-baseline {root}/a_folder: not a file"),
        # A plan writes nothing, but says so before the run it plans.
        (
            ["--vault-plan", "--vault-results=a_folder"],
            "--vault-results {root}/a_folder: cannot write: Is a directory",
        ),
    ],
    ids=[
        *("results-under-a-file", "results-deep-under-a-file", "results-a-folder"),
        *("report-a-folder", "report-under-a-file", "export-under-a-file", "export-a-folder"),
        *("passports-missing", "passports-a-file", "passports-empty-folder"),
        *("prices-missing", "prices-a-folder", "baseline-missing", "baseline-a-folder"),
        "plan",
    ],
)
def test_a_file_option_that_cannot_be_used_is_one_usage_error_before_anything_runs(
    pytester: pytest.Pytester, corpus: Path, args: list[str], message: str
) -> None:
    pytester.makeconftest(NOTHING_RUNS)
    before = tree(pytester.path)
    result = pytester.runpytest(*REPLAY, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: {message.format(root=pytester.path)}"]
    assert "a test ran" not in result.stdout.str()
    assert tree(pytester.path) == before  # the checks leave nothing behind


def test_a_wrong_passports_folder_is_one_line_not_one_per_corpus_file(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    from pytest_vault.guard.folder import SHIPPED

    folder = pytester.mkdir("passports")
    for f in SHIPPED.iterdir():
        (folder / f.name).write_text(f.read_text())
    (folder / "level-3.json").write_text(
        (SHIPPED / "level-3.json").read_text().replace('"active"', '"paused"')
    )
    for name in ("b", "c", "d"):
        pytester.makefile(".jsonl", **{name: line(name, 2, [pay("evil@x.test", 5)])})
    result = pytester.runpytest(*REPLAY, "--vault-passports=passports")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # The line of the field, as the shipped file is laid out: once, for four corpus files.
    assert errors(result) == [
        f"ERROR: --vault-passports {folder}: level-3.json:8: status: Input should be 'draft', "
        "'active', 'suspended' or 'revoked'"
    ]


def test_outputs_in_folders_to_be_made_are_fine_and_made_only_by_a_run(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    outputs = ("--vault-results=new/a/run.parquet", "--vault-report=new/b/run.html")
    for planning in (["--collect-only"], ["--vault-plan"]):
        assert pytester.runpytest(*REPLAY, *outputs, *planning).ret == pytest.ExitCode.OK
        assert not (pytester.path / "new").exists()
    pytester.runpytest(*REPLAY, *outputs).assert_outcomes(passed=4)
    assert len(read_rows(pytester.path / "new" / "a" / "run.parquet")[0]) == 4
    assert (pytester.path / "new" / "b" / "run.html").read_text().startswith("<!DOCTYPE html>")


def _full(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _half_a_page(rows: Any, metadata: Any, path: Path) -> None:
    path.write_text("<!DOCTYPE html><p>the start of a rep")
    _full()


@pytest.mark.parametrize("failing", ["--vault-results", "--vault-report", "--vault-export-found"])
def test_an_output_that_fails_at_the_end_is_one_line_and_the_others_are_written(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, corpus: Path, failing: str
) -> None:
    # Writable at the start; the disk fills during the run.
    import pyarrow.parquet as pq

    import pytest_vault.report.html as html

    if failing == "--vault-results":
        monkeypatch.setattr(pq.ParquetWriter, "write_table", _full)
    elif failing == "--vault-report":
        monkeypatch.setattr(html, "write_html", _half_a_page)
    else:
        written = Path.write_text

        def partial_full(path: Path, *args: Any, **kwargs: Any) -> int:
            if path.name.startswith(".found.jsonl."):  # its partial file
                _full()
            return written(path, *args, **kwargs)

        monkeypatch.setattr(Path, "write_text", partial_full)
    paths = {
        "--vault-results": pytester.path / "run.parquet",
        "--vault-report": pytester.path / "run.html",
        "--vault-export-found": pytester.path / "found.jsonl",
    }
    paths[failing].write_bytes(b"the last run's")
    result = pytester.runpytest(
        "attacks.jsonl",  # the corpus, not the finds of the last run
        "--vault-model=scripted:replay",
        *ESCALATE,
        "--vault-track=A",
        "--vault-track=adaptive",
        "--vault-arch=guarded",
        *(f"{option}={path}" for option, path in paths.items()),
    )
    result.assert_outcomes(passed=4)  # two models, tracks A and adaptive
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # every test passed: the run did not
    assert errors(result) == [
        f"ERROR: {failing} {paths[failing]}: cannot write: No space left on device"
    ]
    # Neither a partial output nor a changed one.
    assert paths[failing].read_bytes() == b"the last run's"
    assert [p.name for p in pytester.path.iterdir() if p.name.endswith(".partial")] == []
    for option, path in paths.items():
        if option != failing:
            assert path.is_file(), option
    out = result.stdout.str()
    # The summary names what was written, and only that.
    for label, option in (("results", "--vault-results"), ("report", "--vault-report")):
        assert (f"{label}: {paths[option]}" in out) == (option != failing)
    if failing != "--vault-results":
        assert len(read_rows(paths["--vault-results"])[0]) == 4


@pytest.mark.slow
def test_an_output_that_fails_at_the_end_is_said_on_a_line_of_its_own(
    pytester: pytest.Pytester, run_pytest: RunPytest, corpus: Path
) -> None:
    """On a terminal, stderr and stdout share the screen: the error line never starts in
    the middle of pytest's progress line (`....[100%]ERROR: ...`)."""
    import subprocess

    target = Path("/proc/no-such-file.parquet")  # writable-looking; any write fails
    args = ["attacks.jsonl", *REPLAY, "-q", "--vault-progress=0", f"--vault-results={target}"]
    done = subprocess.run(
        run_pytest.argv(*args),
        cwd=pytester.path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    lines = done.stdout.splitlines()
    said = [x for x in lines if "cannot write" in x]
    assert said == [f"ERROR: --vault-results {target}: cannot write: No such file or directory"]
    assert done.returncode == pytest.ExitCode.TESTS_FAILED
