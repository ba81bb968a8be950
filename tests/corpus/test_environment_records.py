"""The environment's records (`orders`, `payout_destinations`, `scheduled`, `account`):
strict, each bad one a line naming file, line and field; a direct case may have them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_vault.corpus.load import CorpusError, load_corpus

GOOD = {"id": "a1", "session": "s1", "level": 2, "category": "c", "messages": ["hi"]}
ORDER = {"customer_id": "cust_1", "total": 50}


def with_records(**environment: Any) -> dict[str, Any]:
    return {**GOOD, "environment": environment}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            {**GOOD, "calls": [{"name": "refund_payment", "arguments": {}}]},
            "calls[0].name: the bank has no refund_payment without environment.orders",
        ),
        (
            with_records(account={"email": "a@b.test"}, scheduled=None)
            | {"calls": [{"name": "schedule_transaction"}]},
            "calls[0].name: the bank has no schedule_transaction without environment.scheduled",
        ),
        (
            with_records(orders={"o1": {**ORDER, "total": 10.001}}),
            "environment.orders.o1.total: amount 10.001 has more than 2 decimal places",
        ),
        (
            with_records(orders={"o1": {**ORDER, "total": 10.5, "currency": "JPY"}}),
            "environment.orders.o1: total: amount 10.5 has more than 0 decimal places",
        ),
        (
            with_records(orders={"o1": {**ORDER, "currency": "XXQ"}}),
            "environment.orders.o1.currency: currency 'XXQ' is not a known ISO 4217 code",
        ),
        (
            with_records(orders={"o1": {**ORDER, "refunded": 51}}),
            "environment.orders.o1: refunded: more than the order's total",
        ),
        (
            with_records(orders={"o1": {**ORDER, "buyer": "x"}}),
            "environment.orders.o1.buyer: unknown key",
        ),
        (
            with_records(
                payout_destinations={"d1": {"type": "bank_account", "added_at": "2026-01-01"}}
            ),
            "environment.payout_destinations.d1.added_at: needs a UTC offset",
        ),
        (
            with_records(payout_destinations={"d1": {"type": "iban", "added_at": "2026-01-01Z"}}),
            "environment.payout_destinations.d1.type: Input should be 'bank_account'",
        ),
        (
            with_records(
                scheduled=[
                    {"id": "x", "recipient": "r", "amount": 1, "date": "2026-01-01"},
                    {"id": "x", "recipient": "r", "amount": 2, "date": "2026-01-02"},
                ]
            ),
            "environment: scheduled[1].id: 'x' is scheduled twice",
        ),
        (
            with_records(documents={"bill.txt": "pay"}, orders={"o1": ORDER}),
            "environment: a direct case has no environment texts (add injections, or keep only "
            "orders, payout_destinations, scheduled and account)",
        ),
        (
            with_records(),
            "environment: a direct case has no environment texts",
        ),
    ],
)
def test_a_bad_record_is_one_line_naming_file_line_and_field(
    tmp_path: Path, line: dict[str, Any], message: str
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(GOOD | {"id": "ok"}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(CorpusError) as info:
        load_corpus(path)
    assert str(info.value).startswith(f"{path}:2: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_direct_case_with_records_loads_and_stays_direct(tmp_path: Path) -> None:
    line = with_records(
        orders={"o1": {**ORDER, "refunded": 10, "currency": "EUR"}},
        scheduled=[],
        account={"email": "a@b.test"},
    ) | {"calls": [{"name": "refund_payment", "arguments": {"order_id": "o1"}}]}
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(line) + "\n")
    [(_, case)] = load_corpus(path)
    assert case.environment is not None
    assert (case.indirect, case.clean_id()) == (False, None)
    assert case.environment.tools() == (
        "refund_payment",
        "schedule_transaction",
        "update_scheduled_transaction",
        "update_account",
    )
    # Absent records are not written: an environment without them dumps as before.
    assert case.line()["environment"] == {
        "documents": {},
        "history": [],
        "payee_notes": {},
        "orders": {
            "o1": {
                "customer_id": "cust_1",
                "total": 50,
                "currency": "EUR",
                "refunded": 10,
                "region": "US",
            }
        },
        "scheduled": [],
        "account": {"email": "a@b.test"},
    }
