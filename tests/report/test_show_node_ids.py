"""`vault-report --show` takes a test's pytest node id exactly as a FAILED line or JUnit
prints it, with or without its file (issue 40, point 2); the short forms still work, an id
that names several evaluations shows each, and bad input is one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_vault.report.__main__ import main
from pytest_vault.report.results import to_table, write_results
from pytest_vault.report.transcript import show

from .rows import row

SPEC = "agent:tests.vault_agent:make"


def evaluation(attack: str, **over: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {"source": "path/to/file.jsonl:7", **over}
    return row(
        attack_id=attack,
        session=f"s-{attack}",
        model=SPEC,
        tool_calls=[],
        **fields,
    )


ROWS = [
    evaluation("IND-L2-s03-a1"),
    evaluation("IND-L2-s03-a1", architecture="guarded"),
    evaluation("IND-L2-s03-a1", trial=2),
    # A case id that looks like a node id's parts, and one that would run in a shell.
    evaluation("x[y]-z", source="other.jsonl:1"),
    evaluation("'; touch PWNED", source="other.jsonl:2"),
    evaluation("\u00e9t\u00e9-\u0394", source="other.jsonl:3"),
]


def heads(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith(" ")]


def head(attack: str, arch: str = "model", trial: int = 1) -> str:
    return f"{attack} {SPEC} track A {arch} trial {trial} (level 2): completed"


@pytest.mark.parametrize(
    ("ident", "shown"),
    [
        # As the FAILED line and JUnit print it (one trial: no suffix, every trial's row).
        (
            f"IND-L2-s03-a1[{SPEC}-A-model]",
            [head("IND-L2-s03-a1"), head("IND-L2-s03-a1", trial=2)],
        ),
        (
            f"path/to/file.jsonl::IND-L2-s03-a1[{SPEC}-A-guarded]",
            [head("IND-L2-s03-a1", "guarded")],
        ),
        # With trials, each trial's test.
        (
            f"path/to/file.jsonl::IND-L2-s03-a1[{SPEC}-A-model-t2]",
            [head("IND-L2-s03-a1", trial=2)],
        ),
        (f"other.jsonl::x[y]-z[{SPEC}-A-model]", [head("x[y]-z")]),
        (f"'; touch PWNED[{SPEC}-A-model]", [head("'; touch PWNED")]),
        (f"\u00e9t\u00e9-\u0394[{SPEC}-A-model]", [head("\u00e9t\u00e9-\u0394")]),
        # The short forms of before.
        (
            "IND-L2-s03-a1",
            [
                head("IND-L2-s03-a1", "guarded"),
                head("IND-L2-s03-a1"),
                head("IND-L2-s03-a1", trial=2),
            ],
        ),
        (f"IND-L2-s03-a1:{SPEC}:A:model:2", [head("IND-L2-s03-a1", trial=2)]),
    ],
)
def test_show_takes_a_node_id(ident: str, shown: list[str]) -> None:
    for rows in (ROWS, ROWS[::-1]):
        text, status = show(to_table(rows), ident)
        assert (status, heads(text)) == (0, shown)


MODEL = f"IND-L2-s03-a1[{SPEC}-A-model]"
GUARDED = f"IND-L2-s03-a1[{SPEC}-A-guarded]"
UNICODE = f"\u00e9t\u00e9-\u0394[{SPEC}-A-model]"
FILE = "path/to/file.jsonl::"


@pytest.mark.parametrize(
    ("ident", "said"),
    [
        # Another file's, another model's, a trial that is not there: the nearest tests.
        (
            f"else.jsonl::{MODEL}",
            f"nearest: {FILE}{MODEL}, {FILE}{GUARDED}, other.jsonl::{UNICODE}",
        ),
        ("IND-L2-s03-a1[m-A-model]", f"nearest: {MODEL}, {GUARDED}"),
        (f"IND-L2-s03-a1[{SPEC}-A-model-t3]", f"nearest: {MODEL}, {GUARDED}, {UNICODE}"),
        # Pasted with its quotes: said, with the test meant.
        (f"'{MODEL}'", f"nearest: {MODEL}, {GUARDED}, {UNICODE}"),
        # Cut short, brackets alone, shell metacharacters.
        ("IND-L2-s03-a1[", "nearest: IND-L2-s03-a1"),
        ("[]", ""),
        ("$(rm -rf ~); `x` | y > z", ""),
    ],
)
def test_a_node_id_that_names_no_evaluation_is_one_line(ident: str, said: str) -> None:
    for rows in (ROWS, ROWS[::-1]):
        text, status = show(to_table(rows), ident)
        hint = f"; {said}" if said else ""
        assert (status, text) == (
            2,
            f"vault-report: error: --show {ident}: no such evaluation{hint}\n",
        )


def test_an_escape_in_the_id_is_shown_escaped() -> None:
    text, status = show(to_table(ROWS), "a\x1b[31m[b]")
    assert (status, text) == (2, "vault-report: error: --show a\\x1b[31m[b]: no such evaluation\n")


def test_the_command_shows_a_row_without_a_transcript(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "run.parquet"
    write_results(ROWS, results, {"corpus_digest": "sha256:abc", "corpus_files": {}})
    ident = f"path/to/file.jsonl::IND-L2-s03-a1[{SPEC}-A-guarded]"
    assert main([str(results), "--show", ident]) == 0
    out, err = capsys.readouterr()
    assert (heads(out), err) == ([head("IND-L2-s03-a1", "guarded")], "")
    assert "  (no transcript kept: it passed; --vault-transcripts all keeps every one)" in (
        out.splitlines()
    )
