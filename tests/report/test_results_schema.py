"""The results file's one row definition and its versions: version 1 (every file before
the schema version, `tool_calls` as JSON text) reads as the same tables as version 2
(typed calls); a newer major version, or a call that breaks a rule, is one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pytest_vault.core.errors import VaultError
from pytest_vault.harness.events import COLUMNS, ROW
from pytest_vault.report.__main__ import main
from pytest_vault.report.results import (
    CALLS,
    SCHEMA,
    VERSION_KEY,
    ReportError,
    ResultsError,
    load,
    to_table,
    write_results,
)
from pytest_vault.report.tables import Analysis, Bootstrap

from ..results import as_logged, read_rows, v1_log
from .rows import row, write_v1

PAY = {
    "name": "transfer_funds",
    # A model's own text, kept whole: spaces, key order and a lone surrogate's escape.
    "arguments": '{"amount":  "90.00", "recipient": "mallory@evil.test", "memo": "\\ud800"}',
    "executed": True,
    "result": "Transfer of $90.00 to mallory@evil.test completed",
    "is_error": False,
    "audit": {"allow": False, "codes": ["oap.merchant_forbidden"]},
    "transfer": {
        "recipient": "mallory@evil.test",
        "amount_minor": 9000,
        "currency": "USD",
        "memo": None,
        "idempotency_key": None,
    },
    "permitted": False,
}
DENIED = {
    "name": "transfer_funds",
    "arguments": {"recipient": "mallory@evil.test", "amount": 90},
    "executed": False,
    "result": "Transfer declined: not a permitted recipient",
    "is_error": True,
    "decision": {"allow": False, "codes": ["oap.merchant_forbidden"]},
    "transfer": PAY["transfer"],
    "permitted": False,
}
BALANCE = {
    "name": "get_balance",
    "arguments": {},
    "executed": False,
    "result": '{"available": "$1,200.00"}',
    "is_error": False,
}
BOOT = Bootstrap(resamples=20)


def _rows() -> list[dict[str, Any]]:
    """Rows as the harness makes them (logs as JSON text), of both architectures and
    several logs, one log shared by many rows; two sessions pay."""
    out = []
    for n in range(40):
        paid = n % 10 in (3, 4)
        log = [BALANCE, PAY] if paid and n % 4 != 1 else [BALANCE] if n % 3 else []
        arch = ("model", "guarded")[n % 2]
        if arch == "guarded" and paid:
            log = [BALANCE, DENIED]
        executed = any(c.get("executed") and c["name"] == "transfer_funds" for c in log)
        out.append(
            row(
                attack_id=f"a{n // 2:02d}",
                session=f"s{n // 8}",
                level=2 + n % 3,
                architecture=arch,
                guard="oap" if arch == "guarded" else None,
                requested=any(c["name"] == "transfer_funds" for c in log),
                paid=executed,
                unpermitted=executed,
                violation=executed,
                allowed_calls=0 if arch == "guarded" else None,
                denied_calls=int(paid) if arch == "guarded" else None,
                deny_codes=["oap.merchant_forbidden"] * paid if arch == "guarded" else None,
                tool_calls=json.dumps(log),
            )
        )
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same rows written as version 1 (with pyarrow, as that writer did) and as
    version 2."""
    folder = tmp_path_factory.mktemp("versions")
    meta = {"models": ["m"], "passports": {"2": {"file": "level-2.json", "sha256": "x"}}}
    write_v1(_rows(), folder / "v1.parquet", meta)
    write_results(_rows(), folder / "v2.parquet", meta)
    return folder / "v1.parquet", folder / "v2.parquet"


def test_the_one_row_definition_gives_the_names_types_and_order() -> None:
    assert tuple(SCHEMA.names) == COLUMNS == tuple(c.name for c in ROW)
    assert len(COLUMNS) == 49
    assert SCHEMA.field("tool_calls").type == CALLS
    assert CALLS.value_type.names == [
        *("name", "arguments", "executed", "result", "is_error"),
        *("decision", "audit", "transfer", "permitted", "facts"),
    ]
    assert CALLS.value_type.field("arguments").type == pa.string()
    assert CALLS.value_type.field("facts").type == pa.string()


def test_a_version_2_file_says_so_and_holds_typed_calls(files: tuple[Path, Path]) -> None:
    v1, v2 = files
    assert VERSION_KEY not in pq.read_schema(v1).metadata
    assert pq.read_schema(v2).metadata[VERSION_KEY] == b"2.1"  # 2.1: each call's facts
    assert pq.read_schema(v1).field("tool_calls").type == pa.string()
    stored = pq.read_table(v2)["tool_calls"]
    assert stored.type == CALLS
    calls = [c for log in stored.to_pylist() for c in log]
    assert len(calls) == sum(len(json.loads(r["tool_calls"])) for r in _rows())
    # The model's text as it sent it: never parsed and written again.
    [text] = {c["arguments"] for c in calls if c["executed"]}
    assert json.loads(text) == PAY["arguments"]


def test_version_1_reads_as_exactly_the_same_tables(files: tuple[Path, Path]) -> None:
    old, new = (load([path]) for path in files)
    assert old.table.schema == new.table.schema == SCHEMA
    assert old.table.equals(new.table)
    assert old.metadata == new.metadata
    analyses = [Analysis(t.table, t.metadata, BOOT) for t in (old, new)]
    assert analyses[0].tables() == analyses[1].tables()
    transfers = [a.unpermitted_transfers() for a in analyses]
    assert transfers[0] == transfers[1]
    assert [(t["recipient"], t["amount_minor"]) for t in transfers[0]] == [
        ("mallory@evil.test", 9000)
    ] * 4
    # The rows, their calls included.
    assert read_rows(files[0])[0] == read_rows(files[1])[0]
    logs = [as_logged(r["tool_calls"]) for r in read_rows(files[0])[0]]
    assert {json.dumps(log) for log in logs} == {
        json.dumps(log) for log in ([], [BALANCE], [BALANCE, PAY], [BALANCE, DENIED])
    }


def test_the_report_is_byte_identical_from_either_version(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = []
    for path in files:
        capsys.readouterr()
        html = tmp_path / f"{path.stem}.html"
        assert main([str(path), "--resamples", "20", "--html", str(html)]) == 0
        # The same but for the file's own name, which its commands to copy name.
        text = capsys.readouterr().out.replace(str(path), "FILE").replace(str(html), "PAGE")
        assert main([str(path), "--resamples", "20", "--format", "json"]) == 0
        outputs.append((text, capsys.readouterr().out, html.read_text()))
    assert outputs[0] == outputs[1]
    assert "mallory@evil.test" in outputs[0][2]


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (b"3", "results schema version 3 is newer than this pytest-vault reads (2); "),
        (b"3.1", "results schema version 3.1 is newer than this pytest-vault reads (2); "),
        (b"two", "results schema version 'two' is not a version"),
        (b"0", "results schema version '0' is not a version"),
    ],
)
def test_an_unknown_major_version_is_one_line(
    files: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    version: bytes,
    message: str,
) -> None:
    table = pq.read_table(files[1])
    path = tmp_path / "future.parquet"
    pq.write_table(
        table.replace_schema_metadata({**table.schema.metadata, VERSION_KEY: version}), path
    )
    with pytest.raises(ReportError) as caught:
        load([path])
    said = f"{path}: {message}" + ("upgrade pytest-vault" if message.endswith("; ") else "")
    assert str(caught.value) == said
    assert isinstance(caught.value, VaultError) and issubclass(ResultsError, VaultError)
    assert main([str(path)]) == 2
    assert capsys.readouterr().err == f"vault-report: error: {said}\n"


def test_a_minor_version_of_ours_reads(files: tuple[Path, Path], tmp_path: Path) -> None:
    table = pq.read_table(files[1])
    path = tmp_path / "minor.parquet"
    pq.write_table(
        table.replace_schema_metadata({**table.schema.metadata, VERSION_KEY: b"2.7"}), path
    )
    assert load([path]).table.equals(load([files[1]]).table)


def _calls(*calls: dict[str, Any]) -> list[dict[str, Any]]:
    base = dict.fromkeys(CALLS.value_type.names)
    return [{**base, "executed": False, **c} for c in calls]


TRANSFER = {"recipient": "a@x.test", "amount_minor": 5, "currency": "USD"}


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([None], "tool_calls: [0]: missing"),
        (_calls({"name": None}), "tool_calls: [0].name: missing"),
        (
            _calls({"name": "x"}, {"name": "x", "executed": None}),
            "tool_calls: [1].executed: missing",
        ),
        (
            _calls({"name": "x", "decision": {"allow": None, "codes": []}}),
            "tool_calls: [0].decision.allow: missing",
        ),
        (
            _calls({"name": "x", "audit": {"allow": True, "codes": None}}),
            "tool_calls: [0].audit.codes: missing",
        ),
        (
            _calls({"name": "x", "decision": {"allow": True, "codes": ["a", None]}}),
            "tool_calls: [0].decision.codes: a code is missing",
        ),
        (
            _calls({"name": "transfer_funds", "transfer": {**TRANSFER, "currency": None}}),
            "tool_calls: [0].transfer.currency: missing",
        ),
        (
            _calls({"name": "transfer_funds", "transfer": {**TRANSFER, "amount_minor": 0}}),
            "tool_calls: [0].transfer.amount_minor: below 1",
        ),
        (
            _calls({"name": "get_balance"}, {"name": "transfer_funds", "executed": True}),
            "tool_calls: [1]: a transfer that executed has no transfer",
        ),
        (
            _calls({"name": "transfer_funds", "facts": "[]"}),
            "tool_calls: [0].facts: on a call of no record tool",
        ),
        (
            _calls({"name": "get_balance"}, {"name": "refund_payment", "facts": "[{"}),
            "tool_calls: [1].facts: not JSON",
        ),
        (
            _calls(
                {"name": "create_payout", "facts": '[{"kind": "order", "key": 1, "record": null}]'}
            ),
            "tool_calls: [0].facts: [0]: kind and key must be strings",
        ),
    ],
)
def test_a_call_that_breaks_a_rule_is_one_line_naming_its_row(
    tmp_path: Path, calls: list[Any], message: str
) -> None:
    rows = [row(attack_id=f"a{n}", tool_calls=[]) for n in range(4)]
    rows[2]["tool_calls"] = calls
    rows[3]["tool_calls"] = calls  # a later row, also bad: the first is named
    path = tmp_path / "bad.parquet"
    write_results(rows, path, {})
    with pytest.raises(ReportError) as caught:
        load([path])
    assert str(caught.value) == f"{path}: row 3: {message}"


def test_a_log_as_json_text_and_as_its_calls_is_one_value() -> None:
    text = json.dumps([BALANCE, PAY, DENIED])
    table = to_table([row(tool_calls=text)])
    [calls] = table["tool_calls"].to_pylist()
    assert [c["name"] for c in calls] == ["get_balance", "transfer_funds", "transfer_funds"]
    assert v1_log(calls) == text  # back to the run's text, exactly
    assert to_table([row(tool_calls=calls)]).equals(table)


def test_typed_calls_with_no_version_read_as_this_layout(
    files: tuple[Path, Path], tmp_path: Path
) -> None:
    # Rows written in this layout by pyarrow itself (no version key): checked as such.
    table = pq.read_table(files[1])
    path = tmp_path / "bare.parquet"
    meta = dict(table.schema.metadata)
    del meta[VERSION_KEY]
    pq.write_table(table.replace_schema_metadata(meta), path)
    assert load([path]).table.equals(load([files[1]]).table)
