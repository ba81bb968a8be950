"""The one atomic writer (`core/files.py`): a write cut short, by the disk or by whatever
makes the content, leaves the previous file as it was and no partial file; and the
commands that write a file of the user's write it through it."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from pytest_vault.core.files import replacing, write_bytes, write_text
from pytest_vault.corpus.__main__ import main as corpus_main
from pytest_vault.corpus.builtin import FOLDER
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.policy.__main__ import main as guard_main


def left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_write_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "new" / "out.txt"  # its missing folder made
    write_text(path, "one\n")
    write_bytes(path, b"two\n", fsync=True)
    assert path.read_bytes() == b"two\n"
    write_text(path, "a\nb\n", newline="\r\n")
    assert path.read_bytes() == b"a\r\nb\r\n"
    assert left(tmp_path / "new") == ["out.txt"]


def test_an_error_while_the_content_is_made_leaves_the_previous_file(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    path.write_text("the last run's")

    def content() -> str:
        raise RuntimeError("the producer failed")

    with pytest.raises(RuntimeError, match="the producer failed"), replacing(path) as partial:
        partial.write_text("half of the new ")  # part of it made it
        partial.write_text(content())
    assert path.read_text() == "the last run's"
    assert left(tmp_path) == ["out.txt"]

    # Ctrl-C too.
    with pytest.raises(KeyboardInterrupt), replacing(path, fsync=True) as partial:
        partial.write_bytes(b"half")
        raise KeyboardInterrupt
    assert path.read_text() == "the last run's"
    assert left(tmp_path) == ["out.txt"]


def test_two_writes_of_one_path_at_once_each_have_their_own_partial(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    with replacing(path) as first, replacing(path) as second:
        assert first != second and first.parent == second.parent == tmp_path
        assert first.name.startswith(".out.txt.") and first.name.endswith(".partial")
        first.write_text("first")
        second.write_text("second")
    assert path.read_text() == "first"  # the outer block ends last: its replace wins
    assert left(tmp_path) == ["out.txt"]


def test_witnesses_cut_short_leave_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`vault-guard diff --witnesses`: the disk fills halfway through the file."""
    witnesses = tmp_path / "w.jsonl"
    witnesses.write_text("the last witnesses\n")
    written = Path.write_text

    def half_then_full(path: Path, text: str, *args: Any, **kwargs: Any) -> int:
        if path.name.startswith(".w.jsonl."):  # its partial file
            written(path, text[: len(text) // 2], *args, **kwargs)
            raise OSError(errno.ENOSPC, "No space left on device")
        return written(path, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", half_then_full)
    old, new = SHIPPED / "level-2.json", SHIPPED / "level-3.json"
    argv = ["diff", str(old), str(new), "--witnesses", str(witnesses), "--level", "2"]
    assert guard_main(argv) == 2
    assert capsys.readouterr().err == (f"error: --witnesses {witnesses}: No space left on device\n")
    assert witnesses.read_text() == "the last witnesses\n"
    assert left(tmp_path) == ["w.jsonl"]

    monkeypatch.setattr(Path, "write_text", written)
    assert guard_main(argv) == 0
    # The six charge witnesses and the ten of the other packs' changes, whole.
    assert witnesses.read_text().count("\n") == 16
    assert left(tmp_path) == ["w.jsonl"]


def test_a_corpus_copy_cut_short_leaves_no_half_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m pytest_vault.corpus copy DIR`: the disk fills halfway through a file."""
    written = Path.write_bytes

    def half_then_full(path: Path, data: bytes) -> int:
        if path.name.startswith(".level-3.jsonl."):
            written(path, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return written(path, data)

    monkeypatch.setattr(Path, "write_bytes", half_then_full)
    folder = tmp_path / "cases"
    assert corpus_main(["copy", str(folder)]) == 1
    assert capsys.readouterr().err == (
        f"error: {folder}: cannot copy: [Errno 28] No space left on device\n"
    )
    # The files before it whole, none after it, and no half file to edit.
    assert left(folder) == ["indirect.jsonl", "level-1.jsonl", "level-2.jsonl"]
    assert all((folder / n).read_bytes() == (FOLDER / n).read_bytes() for n in left(folder))


def test_an_error_names_the_users_file_never_the_partial_one(tmp_path: Path) -> None:
    folder = tmp_path / "out.txt"
    folder.mkdir()  # a folder where the file should go
    with pytest.raises(IsADirectoryError) as info:
        write_text(folder, "text")
    assert str(info.value) == f"[Errno 21] Is a directory: '{folder}'"
    assert left(tmp_path) == ["out.txt"] and left(folder) == []
