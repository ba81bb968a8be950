"""`vault-guard lint` and `vault-guard diff` given a path no file can be at (a name too long
for the file system, a path through a file, a loop of links): one line naming it, never a
traceback; and `diff --level` reads ASCII digits only."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_vault.guard.folder import SHIPPED
from pytest_vault.policy.__main__ import main

from ..unreachable import make_unreachable, unreachable

# Each path, and the system's words for it.
UNREACHABLE = unreachable("level-2.json")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    make_unreachable(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


# Was a 24-28 line traceback for a name too long (`Path.is_dir` raises it).
@pytest.mark.parametrize("bad", list(UNREACHABLE))
def test_lint_of_an_unreachable_path_is_one_finding(
    here: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, said = UNREACHABLE[bad]
    assert main(["lint", path, str(SHIPPED / "level-2.json")]) == 1
    assert capsys.readouterr() == (
        f"{path}:: error: {path}: cannot read: {said}\n",
        "vault-guard lint: 1 error, 0 warnings\n",
    )


@pytest.mark.parametrize("bad", list(UNREACHABLE))
@pytest.mark.parametrize("side", ["old", "new"])
@pytest.mark.parametrize("other", ["file", "folder"])
def test_diff_of_an_unreachable_path_is_one_line(
    here: Path, bad: str, side: str, other: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, said = UNREACHABLE[bad]
    good = str(SHIPPED / "level-2.json" if other == "file" else SHIPPED)
    argv = [path, good] if side == "old" else [good, path]
    assert main(["diff", *argv]) == 2
    assert capsys.readouterr() == ("", f"error: {path}: cannot read: {said}\n")


@pytest.mark.parametrize("level", ["\u0662", "\uff12", "2_0"])  # Arabic-Indic 2, fullwidth 2
def test_diff_level_reads_ascii_digits_only(
    tmp_path: Path, level: str, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = SHIPPED / "level-2.json", SHIPPED / "level-3.json"
    witnesses = tmp_path / "w.jsonl"
    with pytest.raises(SystemExit) as exit:
        main(["diff", str(old), str(new), "--witnesses", str(witnesses), "--level", level])
    assert exit.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"vault-guard diff: error: argument --level: expected a whole number, got {level!r}"
    )
    assert not witnesses.exists()
