"""`vault-report --show` takes any case id, a colon included (`JIRA:PAY-1`), and a row's
`attack:model:track:architecture[:trial]` whose model spec holds colons: matched against
the evaluations in the file, never split on ':'."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_vault.report.__main__ import main
from pytest_vault.report.results import to_table, write_results
from pytest_vault.report.transcript import show

from .rows import row


def evaluation(attack: str, model: str, **over: Any) -> dict[str, Any]:
    return row(attack_id=attack, session=f"s-{attack}", model=model, tool_calls=[], **over)


ROWS = [
    evaluation("JIRA:PAY-1", "scripted:obedient"),
    evaluation("JIRA:PAY-1", "openai:gpt-4o"),
    evaluation("JIRA:PAY-1", "openai:gpt-4o", architecture="guarded"),
    evaluation("JIRA:PAY-1", "openai:gpt-4o", trial=2),
    # Another attack whose row's parts, joined, start as the id above does.
    evaluation("JIRA", "PAY-1"),
    evaluation("plain", "m"),
]


def heads(text: str) -> list[str]:
    """The first line of each evaluation shown."""
    return [line for line in text.splitlines() if line and not line.startswith(" ")]


def head(attack: str, model: str, arch: str = "model", trial: int = 1) -> str:
    return f"{attack} {model} track A {arch} trial {trial} (level 2): completed"


@pytest.mark.parametrize(
    ("ident", "shown"),
    [
        # Was "no such evaluation": split at its first colon, the id read as "JIRA".
        (
            "JIRA:PAY-1",
            [
                head("JIRA:PAY-1", "openai:gpt-4o", "guarded"),
                head("JIRA:PAY-1", "openai:gpt-4o"),
                head("JIRA:PAY-1", "openai:gpt-4o", trial=2),
                head("JIRA:PAY-1", "scripted:obedient"),
            ],
        ),
        (
            "JIRA:PAY-1:openai:gpt-4o:A:model",
            [
                head("JIRA:PAY-1", "openai:gpt-4o"),
                head("JIRA:PAY-1", "openai:gpt-4o", trial=2),
            ],
        ),
        ("JIRA:PAY-1:openai:gpt-4o:A:model:2", [head("JIRA:PAY-1", "openai:gpt-4o", trial=2)]),
        ("JIRA:PAY-1:openai:gpt-4o:A:guarded:1", [head("JIRA:PAY-1", "openai:gpt-4o", "guarded")]),
        ("JIRA:PAY-1:scripted:obedient:A:model", [head("JIRA:PAY-1", "scripted:obedient")]),
        # The other attack: by its id, and by its row, which no attack id reads as.
        ("JIRA", [head("JIRA", "PAY-1")]),
        ("JIRA:PAY-1:A:model", [head("JIRA", "PAY-1")]),
        ("plain:m:A:model:1", [head("plain", "m")]),
    ],
)
def test_show_names_the_evaluations_the_file_holds(ident: str, shown: list[str]) -> None:
    for rows in (ROWS, ROWS[::-1]):  # whatever the order of the rows
        text, status = show(to_table(rows), ident)
        assert (status, heads(text)) == (0, shown)


@pytest.mark.parametrize(
    ("ident", "said"),
    [
        ("JIRA:PAY-2", "no such evaluation; nearest: JIRA:PAY-1, JIRA"),
        ("JIRA:PAY-1:openai:gpt-4o:B:model", "no such evaluation; nearest: JIRA:PAY-1, JIRA"),
        ("JIRA:PAY-1:openai:gpt-4o:A:model:3", "no such evaluation; nearest: JIRA:PAY-1, JIRA"),
        ("JIRA:", "no such evaluation; nearest: JIRA, JIRA:PAY-1"),
        ("plan", "no such evaluation; nearest: plain"),
        ("zzz", "no such evaluation"),
    ],
)
def test_an_ident_that_names_no_evaluation_is_one_line(ident: str, said: str) -> None:
    text, status = show(to_table(ROWS), ident)
    assert (status, text) == (2, f"vault-report: error: --show {ident}: {said}\n")


def test_the_command_shows_a_colon_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "run.parquet"
    write_results(ROWS, results, {"corpus_digest": "sha256:abc", "corpus_files": {}})
    assert main([str(results), "--show", "JIRA:PAY-1:scripted:obedient:A:model"]) == 0
    out, err = capsys.readouterr()
    assert (heads(out), err) == ([head("JIRA:PAY-1", "scripted:obedient")], "")
