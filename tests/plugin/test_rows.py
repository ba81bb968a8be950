"""The run's rows held columnar: every test's last row, and outputs byte-identical to
a run that holds them in one batch, across batch boundaries, serial and under xdist."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_vault.harness.calls import Call, CallDecision
from pytest_vault.harness.events import FOUND
from pytest_vault.plugin.rows import RowStore
from pytest_vault.report.results import SCHEMA, to_table
from pytest_vault.report.summary import render

from ..report.rows import row
from .test_plugin import CORPUS, REPLAY

pytest_plugins = ["pytester"]


def _rows() -> list[tuple[str, dict[str, Any]]]:
    """(node id, row) as tests report them: node 3 and 7 run twice, with other rows."""
    out = []
    for n in range(11):
        r = row(
            attack_id=f"a{n % 4}",
            session=f"s{n % 3}",
            level=1 + n % 5,
            model=f"m{n % 2}",
            architecture=("model", "guarded")[n % 2],
            guard=None if n % 2 == 0 else "oap",
            denied_calls=None if n % 2 == 0 else n,
            unpermitted=n % 3 == 0,
            paid=n % 3 == 0,
            status=("completed", "error", "not_run")[n % 7 % 3],
            error=None if n % 7 % 3 == 0 else f"bad \udcff {n}",  # a lone surrogate
            deny_codes=None if n % 2 == 0 else ["oap.limit_exceeded"] * (n % 3),
            input_tokens=n * 1000,
        )
        if n % 4 == 1:
            r[FOUND] = f'{{"id": "found-{n}"}}'
        out.append((f"node{n}", r))
    out.append(("node3", row(attack_id="again3", input_tokens=33)))
    out.append(("node7", row(attack_id="again7", status="error", error="late")))
    return out


def test_store_keeps_each_tests_last_row_as_a_dict_by_node_id_would() -> None:
    store, by_test = RowStore(), {}
    for key, r in _rows():
        store.add(key, r)
        n = by_test[key]["attempts"] + 1 if key in by_test else 1  # the store numbers them
        by_test[key] = r | {"attempts": n, "attempt": n}
    assert len(store) == 11
    expected = to_table(list(by_test.values()))
    assert store.results().equals(expected)
    assert store.results().schema == SCHEMA
    assert store.results()["attack_id"].to_pylist() == [
        *("a0", "a1", "a2", "again3", "a0", "a1", "a2", "again7", "a0", "a1", "a2")
    ]
    assert [dict(r) for r in store.rows()] == [
        {k: r.get(k) for k in (*SCHEMA.names, FOUND)} for r in by_test.values()
    ]
    assert render(store.rows()) == render(list(by_test.values()))
    assert sorted(store.found()) == ['{"id": "found-1"}', '{"id": "found-5"}', '{"id": "found-9"}']


def test_store_rows_read_as_mappings() -> None:
    store = RowStore()
    for key, r in _rows():
        store.add(key + r["attack_id"], r)  # every row its own test
    rows = [r for _, r in _rows()]
    views = store.rows()
    assert len(views) == 13 and len(views[-1]) == len(SCHEMA.names) + 1
    assert views[3]["attack_id"] == "a3" and views[-2]["attack_id"] == "again3"
    assert views[1]["error"] == "bad \udcff 1"  # as the row held it: the summary's text
    assert views[1].get("no such column", "none") == "none"
    with pytest.raises(KeyError):
        views[1]["no such column"]
    with pytest.raises(IndexError):
        views[13]
    assert [v["attack_id"] for v in views[2:4]] == ["a2", "a3"]
    assert render(views) == render(rows)
    assert render(views)[0] == (
        "13 evaluations: 13 of attacks, 0 of benign requests; 4 errors and 3 not run "
        "(kept out of every rate)"
    )
    assert store.results().equals(to_table(rows))


def test_store_keeps_one_copy_of_equal_texts_and_every_value_as_it_was() -> None:
    """Equal texts from different rows are one object; nothing else is merged: not
    0, 0.0, -0.0 and False (equal as dict keys), nor lists."""
    store = RowStore()
    calls = ['[{"recipient": "a@x.test", "amount": ', "100}]"]
    for n, (number, codes) in enumerate([(0, ["x"]), (0.0, ["x"]), (-0.0, []), (False, [])]):
        store.add(
            f"node{n}",
            row(
                attack_id=f"a{n}",
                tool_calls="".join(calls),  # a new, equal text each time
                error="".join(["bad \udcff", " 1"]),
                cost_usd=number,
                deny_codes=codes,
            ),
        )
    views = list(store.rows())
    assert len({id(v["tool_calls"]) for v in views}) == 1
    assert len({id(v["error"]) for v in views}) == 1
    assert views[0]["tool_calls"] == '[{"recipient": "a@x.test", "amount": 100}]'
    assert views[0]["error"] == "bad \udcff 1"
    assert [v["attack_id"] for v in views] == ["a0", "a1", "a2", "a3"]
    numbers = [v["cost_usd"] for v in views]
    assert [(type(x), str(x)) for x in numbers] == [
        (int, "0"),
        (float, "0.0"),
        (float, "-0.0"),
        (bool, "False"),
    ]
    assert [v["deny_codes"] for v in views] == [["x"], ["x"], [], []]
    assert views[0]["deny_codes"] is not views[1]["deny_codes"]


def test_store_keeps_one_copy_of_equal_call_logs() -> None:
    """A log (`harness.calls.Call`s) made afresh for each row, equal to another, is kept
    once; a different one apart; and the table holds each row's own."""
    store = RowStore()

    def log(amount: int) -> tuple[Call, ...]:
        text = "".join(["{", f'"amount": {amount}', "}"])  # a new string each time
        return (Call("transfer_funds", text, False, "Invalid", True, CallDecision(False, ())),)

    for n, amount in enumerate([1, 1, 2, 1]):
        store.add(f"node{n}", row(attack_id=f"a{n}", tool_calls=log(amount)))
    kept = [v["tool_calls"] for v in store.rows()]
    assert kept == [log(1), log(1), log(2), log(1)]
    assert [id(k) for k in kept].count(id(kept[0])) == 3 and kept[2] is not kept[0]
    assert store.results()["tool_calls"].to_pylist() == [[c.as_dict() for c in k] for k in kept]


def test_store_with_no_row() -> None:
    store = RowStore()
    assert not store and store.results().num_rows == 0 and store.found() == []
    assert store.results().schema == SCHEMA and list(store.rows()) == []


RUN = (
    "attacks.jsonl",  # alone: the finds written beside it are .jsonl files too
    *REPLAY,
    "--vault-attacker=scripted:escalate",
    "--vault-progress=0",
)


def _summary(lines: list[str]) -> list[str]:
    start = next(i for i, x in enumerate(lines) if "pytest-vault summary" in x)
    end = next(i for i, x in enumerate(lines) if x.startswith("results:"))
    return [x for x in lines[start:end] if x.strip()]


# Today's way, beside the store: every row a dict by node id (the controller's copy
# under xdist, as each report brings it), written and summarized from the dicts.
REFERENCE = """
import pytest
from pytest_vault.plugin.record import metadata
from pytest_vault.plugin.session import VAULT

ROWS = {}

def pytest_runtest_logreport(report):
    info = getattr(report, "vault", None)
    if report.when == "call" and isinstance(info, dict):
        ROWS[report.nodeid] = info["row"]

@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    config = session.config
    if hasattr(config, "workerinput"):
        return
    from pytest_vault.report.html import write_html
    from pytest_vault.report.results import write_results
    from pytest_vault.report.summary import render

    rows, meta = list(ROWS.values()), metadata(config.stash[VAULT])
    write_results(rows, config.rootpath / "reference.parquet", meta)
    write_html(rows, [meta], config.rootpath / "reference.html")
    text = "\\n".join(render(rows, sample=config.stash[VAULT].sample))
    (config.rootpath / "reference.txt").write_text(text, encoding="utf-8", errors="surrogateescape")
"""


def test_every_row_kept_and_written_as_from_dicts(pytester: pytest.Pytester) -> None:
    pytester.makefile(".jsonl", attacks=CORPUS)
    pytester.makeconftest(REFERENCE)
    result = pytester.runpytest(
        *RUN,
        "--vault-results=run.parquet",
        "--vault-report=run.html",
        "--vault-export-found=found.jsonl",
    )
    result.assert_outcomes(passed=34)  # 5 attacks x 3 tracks x 2, 1 benign x 2 x 2
    import pyarrow.parquet as pq

    path = pytester.path
    ours, theirs = pq.read_table(path / "run.parquet"), pq.read_table(path / "reference.parquet")
    assert ours.num_rows == 34
    assert ours.equals(theirs, check_metadata=True)
    assert (path / "run.parquet").read_bytes() == (path / "reference.parquet").read_bytes()
    assert (path / "run.html").read_bytes() == (path / "reference.html").read_bytes()
    summary = (path / "reference.txt").read_text().splitlines()
    assert summary[0].startswith("24 evaluations: 20 of attacks, 4 of benign requests")
    assert _summary(result.outlines)[1:] == [x for x in summary if x.strip()]
    found = (path / "found.jsonl").read_text().splitlines()
    assert len(found) == 3 and found == sorted(found)  # the escalating attacker's finds
