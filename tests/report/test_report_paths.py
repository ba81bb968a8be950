"""`vault-report` and `vault-report rescore` given a path no file can be at (a name too long
for the file system, a path through a file, a loop of links), as a results file, an output
or the passports: one line naming it, before anything is read or written."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_vault.guard.folder import SHIPPED
from pytest_vault.report.__main__ import main

from ..unreachable import make_unreachable, unreachable

# Each path, and the system's words for it.
UNREACHABLE = unreachable("x.parquet")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    make_unreachable(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("bad", list(UNREACHABLE))
def test_an_unreachable_results_file_is_one_line(
    here: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, said = UNREACHABLE[bad]
    assert run(capsys, path) == (2, "", f"vault-report: error: {path}: cannot read: {said}\n")
    assert run(capsys, "rescore", path, "--passports", str(SHIPPED)) == (
        2,
        "",
        f"vault-report rescore: error: {path}: cannot read: {said}\n",
    )


@pytest.mark.parametrize("bad", list(UNREACHABLE))
@pytest.mark.parametrize(
    ("option", "more"), [("--html", ()), ("--merge-to", ()), ("--out", ("--format", "json"))]
)
def test_an_unreachable_output_is_one_line_before_anything_is_read(
    here: Path, bad: str, option: str, more: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    path, said = UNREACHABLE[bad]
    # The results file is missing too: the outputs are checked first.
    assert run(capsys, "missing.parquet", option, path, *more) == (
        2,
        "",
        f"vault-report: error: {option} {path}: cannot write: {said}\n",
    )


@pytest.mark.parametrize("bad", list(UNREACHABLE))
def test_rescore_of_an_unreachable_output_or_passports_folder_is_one_line(
    here: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, said = UNREACHABLE[bad]
    out = ("missing.parquet", "--passports", str(SHIPPED), "--out", path)
    assert run(capsys, "rescore", *out) == (
        2,
        "",
        f"vault-report rescore: error: --out {path}: cannot write: {said}\n",
    )
    folder = path.removesuffix(".parquet")
    assert run(capsys, "rescore", "missing.parquet", "--passports", folder) == (
        2,
        "",
        f"vault-report rescore: error: {folder}/levels.toml: cannot read: {said}\n",
    )
