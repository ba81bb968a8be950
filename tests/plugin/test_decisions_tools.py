"""Decision snapshots of the other tools (refunds, payouts, scheduled payments, account
changes): `decide` replays a case's calls through a bank holding the case's records, and
the witnesses `vault-guard diff --witnesses` writes for the other packs' fields are such
cases, decided by the two passports as the diff said."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_vault.corpus.load import read_case
from pytest_vault.corpus.model import ACCOUNT_TOOL, PAYOUT_TOOL, REFUND_TOOL, Case
from pytest_vault.guard.passport import passport_from_data
from pytest_vault.harness.levels import load_levels
from pytest_vault.plugin.decisions import decide
from pytest_vault.policy.__main__ import main
from pytest_vault.policy.witness import ACCOUNT_TOOL as WITNESS_ACCOUNT_TOOL
from pytest_vault.policy.witness import REPLAYED_AS

from ..policy.test_diff import raw

LEVELS = load_levels()


def test_the_witness_tools_are_the_banks() -> None:
    assert sorted(REPLAYED_AS.values()) == sorted([REFUND_TOOL, PAYOUT_TOOL])
    assert WITNESS_ACCOUNT_TOOL == ACCOUNT_TOOL


def test_decide_replays_the_other_tools_on_the_cases_records() -> None:
    case = Case.model_validate(
        {
            "id": "t",
            "session": "s",
            "level": 3,
            "category": "c",
            "messages": ["m"],
            "environment": {
                "orders": {"ord_1": {"customer_id": "cust_1", "total": 50}},
                "account": {"email": "jordan@example.com"},
            },
            "calls": [
                {
                    "name": "refund_payment",
                    "arguments": {
                        "order_id": "ord_1",
                        "customer_id": "cust_2",
                        "amount": 60,
                        "reason": "customer_request",
                        "idempotency_key": "refund-key-1",
                    },
                },
                {"name": "update_account", "arguments": {"field": "email", "value": "x@e.test"}},
            ],
        }
    )
    got = decide(case, LEVELS[3].passport)
    assert [(c["tool"], c["allow"], [r["code"] for r in c["reasons"]]) for c in got] == [
        # Judged on the bank's record: another customer, past the order's $50.
        ("refund_payment", False, ["vault.customer_mismatch", "oap.limit_exceeded"]),
        ("update_account", False, ["vault.account_field_forbidden"]),
    ]
    assert [c["executes"] for c in got] == [None, None]


def test_the_other_packs_witness_cases_decide_as_the_diff_said(tmp_path: Path) -> None:
    new = raw(3)
    new["limits"]["finance.payment.refund"]["refund_reason_codes"].append("fraud")
    new["limits"]["payments.payout"]["allowed_recipients"].append("dest_new")
    new["limits"]["finance.transaction"]["x_vault_account_fields"].append("email")
    new["limits"]["payments.payout"]["x_vault_destination_hold_hours"] = 24  # timed
    old_file, new_file, out = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "w.jsonl"
    old_file.write_text(json.dumps(raw(3)))
    new_file.write_text(json.dumps(new))
    assert main(["diff", str(old_file), str(new_file), "--witnesses", str(out)]) == 0
    lines = out.read_text().splitlines()
    cases = [read_case(line, f"w.jsonl:{n}") for n, line in enumerate(lines, 1)]
    assert [c.calls[-1].name for c in cases] == [
        "refund_payment",
        "create_payout",
        "update_account",
    ]
    old, wide = LEVELS[3].passport, passport_from_data(new)
    for case, line in zip(cases, lines, strict=True):
        said: dict[str, Any] = json.loads(line)["metadata"]
        for passport, side in ((old, "old"), (wide, "new")):
            last = decide(case, passport)[-1]
            assert (last["allow"], last["reasons"]) == (
                said[side]["allow"],
                said[side]["reasons"],
            ), (case.id, side)
        assert (said["old"]["allow"], said["new"]["allow"]) == (False, True)
