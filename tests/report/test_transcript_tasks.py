"""A clean run's node id names its task, found over the whole table once for a table: a
report asks for the node ids of one table twice (what got through, the failures)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from pytest_vault.report import transcript
from pytest_vault.report.results import to_table
from pytest_vault.report.transcript import node_ids

from .rows import row


def _table() -> pa.Table:
    pair = {"track": "indirect", "pair": "p1", "source": "suite.jsonl:4"}
    rows = [
        row(attack_id="clean-p1", clean=True, **pair),
        row(attack_id="inj-1", clean=False, unpermitted=True, **pair),
    ]
    table: pa.Table = to_table(rows)
    return table


def test_the_tasks_are_found_once_a_table_and_name_its_clean_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    filtered: list[int] = []
    keys = transcript._keys

    def counted(table: pa.Table) -> list[dict[str, Any]]:
        filtered.append(table.num_rows)
        return keys(table)

    monkeypatch.setattr(transcript, "_keys", counted)
    table = _table()
    clean, attacked = (
        "suite.jsonl::clean-of-inj-1[m-indirect-model]",
        "suite.jsonl::inj-1[m-indirect-model]",
    )
    named = [(clean, clean), (attacked, attacked)]
    assert node_ids(table, pa.array([0, 1], pa.int64())) == named
    assert filtered == [2, 1]  # the rows named, then the attacked runs for the tasks
    assert node_ids(table, pa.array([1], pa.int64())) == named[1:]
    assert filtered == [2, 1, 1]  # the same table: its tasks are not found again
    # An equal table is another table: never a stale answer for a changed one.
    assert node_ids(_table(), pa.array([0], pa.int64())) == named[:1]
    assert filtered == [2, 1, 1, 1, 1]
