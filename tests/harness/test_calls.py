"""A logged call, typed once (`harness.calls`): the Arrow column's struct is its fields,
a log goes to Arrow and back whole, crosses the xdist boundary whole, and is stored
exactly as the run's JSON text of it, read back, was before logs were typed."""

from __future__ import annotations

from datetime import UTC, datetime

import execnet
import pyarrow as pa
import pytest

from pytest_vault.core.text import redacted_json
from pytest_vault.guard.engine import Decision, Reason, Transfer
from pytest_vault.harness.bank import CallRecord, Fact, ToolResult
from pytest_vault.harness.calls import (
    Call,
    CallDecision,
    CallTransfer,
    arrow_types,
    from_arrow,
    logged,
    read_facts,
    received,
    sent,
)
from pytest_vault.report.results import CALL, CALLS, calls_of, to_table

from ..report.rows import row

PAY = Call(
    "transfer_funds",
    '{"recipient": "m@evil.test", "amount": 90}',
    True,
    "Transfer of $90.00 to m@evil.test completed",
    False,
    CallDecision(False, ("oap.merchant_forbidden", "oap.limit_exceeded")),
    CallDecision(False, ("oap.merchant_forbidden",)),
    CallTransfer("m@evil.test", 9000, "USD", "rent", None),
    False,
)
BALANCE = Call("get_balance", "{}", True, '{"available": "$1"}', False)
UNREAD = Call("transfer_funds", '"{not json"', False, "Invalid", True, CallDecision(False, ()))
REFUND = Call(
    "refund_payment",
    '{"order_id": "ord_1", "customer_id": "cust_1", "amount": 5}',
    True,
    '{"status": "refunded"}',
    False,
    CallDecision(True, ("oap.allowed",)),
    CallDecision(True, ("oap.allowed",)),
    CallTransfer("cust_1", 500, "USD", None, None),
    True,
    '[{"kind": "order", "key": "ord_1", "record": {"customer_id": "cust_1"}}]',
)
LOGS: list[tuple[Call, ...]] = [(), (BALANCE,), (BALANCE, PAY, UNREAD, REFUND), (PAY,)]


def test_the_column_struct_is_the_calls_fields_in_their_order() -> None:
    decision, transfer, call = arrow_types()
    assert call == CALL and CALLS == pa.list_(CALL)
    assert (
        call.names
        == list(Call._fields)
        == [
            *("name", "arguments", "executed", "result", "is_error"),
            *("decision", "audit", "transfer", "permitted", "facts"),
        ]
    )
    assert decision.names == ["allow", "codes"] and transfer.names == list(CallTransfer._fields)


def test_a_log_goes_to_arrow_and_back_whole() -> None:
    column = to_table([row(attack_id=f"a{i}", tool_calls=log) for i, log in enumerate(LOGS)])[
        "tool_calls"
    ]
    assert from_arrow(column) == LOGS
    assert [[Call.of(c) for c in log] for log in column.to_pylist()] == [list(x) for x in LOGS]
    assert [c.as_dict() for c in LOGS[2]] == column.to_pylist()[2]


def test_a_log_crosses_the_xdist_boundary_whole() -> None:
    wire = execnet.loads(execnet.dumps(sent(LOGS[2])))  # what a worker's report carries
    assert received(wire) == LOGS[2]
    with pytest.raises(execnet.DumpError):
        execnet.dumps(LOGS[2])  # the named tuples themselves cannot cross


def _record(name: str, arguments: object, result: str, **more: object) -> CallRecord:
    return CallRecord(name, arguments, ToolResult(result), **more)  # type: ignore[arg-type]


HOSTILE = [
    # A lone surrogate, in a key and a value; a pair of lone surrogates that JSON reads
    # back as one character; a key of the environment's, a key's shape and URL userinfo.
    _record("get_\ud800", {"k\ud800": "v\udc00", 1: [1.5, -0.0, 10**30]}, "r\udfff"),
    _record("verify_recipient", "raw \ud83d\ude00 text", "pair \ud83d\ude00"),
    _record(
        "transfer_funds",
        {"memo": "key sk-test-0123456789abcdef and https://u:p@h.test/x", "amount": 1.25},
        "Transfer of $1.25 to a\ud800@x.test completed",
        executed=True,
        transfer=Transfer("a\ud800@x.test", 125, "USD", "sk-abcdefgh1234", "k\ud83d\ude00"),
        decision=Decision(True, ()),
        audit=Decision(False, (Reason("oap.limit_exceeded", "over \udcff"),)),
        permitted=True,
    ),
    _record("transfer_funds", None, "Invalid", decision=Decision(False, ())),
]


def test_a_log_is_stored_as_its_json_text_read_back_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """Redacted, and each string as a UTF-8 column holds it: the very calls the version-1
    reader makes of the run's JSON text of the same records."""
    monkeypatch.setenv("OPENAI_API_KEY", "env-secret-value-42")
    records = [*HOSTILE, _record("get_balance", {"q": "env-secret-value-42"}, "ok")]
    typed = logged(records)
    text = redacted_json([r.to_dict() for r in records])  # what the run wrote before
    assert [c.as_dict() for c in typed] == [
        {k: c.get(k) for k in Call._fields} for c in calls_of(text)
    ]
    assert typed[2].transfer == CallTransfer(
        "a\\ud800@x.test", 125, "USD", "[redacted]", "k\U0001f600"
    )
    assert typed[4].arguments == '{"q": "[redacted]"}'
    assert to_table([row(tool_calls=typed)]).equals(to_table([row(tool_calls=text)]))
    assert [c.facts for c in typed] == [None] * 5  # none is a record tool's call


def test_a_record_calls_facts_are_stored_as_their_json_text_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "env-secret-value-42")
    added = datetime(2026, 1, 1, tzinfo=UTC)
    facts = (
        Fact("order", "ord_1", {"customer_id": "env-secret-value-42", "total_minor": 100}),
        Fact("payout_destination", "d\ud800", {"type": "bank_account", "added_at": added}),
        Fact("order", "ord_x", None),
    )
    [refund, account] = logged(
        [
            _record("refund_payment", {}, "ok", facts=facts),
            _record("update_account", {}, "ok", facts=()),
        ]
    )
    assert refund.facts is not None and read_facts(refund.facts) == {
        ("order", "ord_1"): {"customer_id": "[redacted]", "total_minor": 100},
        # A lone surrogate: as its escape in the JSON text, read back as itself.
        ("payout_destination", "d\ud800"): {
            "type": "bank_account",
            "added_at": "2026-01-01T00:00:00+00:00",
        },
        ("order", "ord_x"): None,
    }
    assert account.facts == "[]"  # read none: not the same as not logged (None)
