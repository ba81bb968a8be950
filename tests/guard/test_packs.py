"""The other OAP packs (`guard/packs.py`): refund, payout and transaction execute, through
the CLI on their reference data, and judged on the system of record's facts."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pytest_vault.guard.engine import Guard
from pytest_vault.guard.packs import (
    EXECUTE_POLICY,
    PAYOUT_POLICY,
    REFUND_POLICY,
    Packs,
)
from pytest_vault.guard.passport import PassportError, passport_from_data

from ..conftest import OAP_REFERENCE, ON_CI

ALLOWED = "oap.allowed"
LIMIT = "oap.limit_exceeded"
FACTS = "vault.facts_unavailable"
RESTRICTED = "oap.account_type_restricted"
NOON = datetime(2026, 12, 1, 12, tzinfo=UTC)
REFUND_CASES = OAP_REFERENCE / "aport-spec" / "conformance" / "cases" / "payments.refunds.v1"
EXECUTE_TESTS = OAP_REFERENCE / "aport-policies" / "finance.transaction.execute.v1" / "tests"


def _reference(folder: Path) -> Path:
    if not folder.is_dir():
        if ON_CI:
            pytest.fail(f"OAP reference data missing at {folder}")
        pytest.skip(f"OAP reference data not found at {folder}")
    return folder


def run(passport: Path, stdin: str, *options: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest_vault.guard", "--passport", str(passport), *options],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def codes(decision: Mapping[str, Any]) -> tuple[bool, tuple[str, ...]]:
    return decision["allow"], tuple(r["code"] for r in decision["reasons"])


# -- the reference data through the CLI -----------------------------------------------

# Upstream expects `deny_150usd` to be denied for the per-refund cap alone; the pack's own
# `assurance_rules` require L3 above 10,000 minor units and the case's passport is L2, so
# its `assurance_minimum` rule fails too, and is listed first (the pack's order).
REFUND_DEVIATIONS = {"deny_150usd": (False, ("oap.assurance_insufficient", LIMIT))}


def test_refund_conformance_cases_pass_through_the_cli() -> None:
    cases = _reference(REFUND_CASES)
    names = ["allow_50usd", "deny_150usd", "deny_currency"]
    lines = [
        # The cases name the pack by its pre-rename id: accepted as an alias.
        {
            "name": n,
            "policy_id": "payments.refunds.v1",
            "context": _json(cases / "contexts" / f"{n}.json"),
        }
        for n in names
    ]
    out = run(
        cases / "passports" / "template.json",
        "".join(json.dumps(line) + "\n" for line in lines),
        "--context-facts",
    )
    expected = {n: _json(cases / "expected" / f"{n}.decision.json") for n in names}
    got = {n: codes(d) for n, d in zip(names, out, strict=True)}
    want = {n: REFUND_DEVIATIONS.get(n, codes(expected[n])) for n in names}
    assert (
        got
        == want
        == {
            "allow_50usd": (True, (ALLOWED,)),
            "deny_150usd": (False, ("oap.assurance_insufficient", LIMIT)),
            "deny_currency": (False, ("oap.currency_unsupported",)),
        }
    )
    # The deviation is real: upstream lists the cap alone.
    assert codes(expected["deny_150usd"]) == (False, (LIMIT,))
    assert (
        {d["policy_id"] for d in out}
        == {REFUND_POLICY}
        == {e["policy_id"] for e in expected.values()}
    )


# Where the pack's rules fail more than upstream lists: `trust_funds` and `retirement` are
# both in the restricted list and outside the allowed list, so `account_segregation_check`
# and `account_type_check` both fail; 250,000 is over the per-transaction exposure of
# 50,000 (`exposure_limit_check`) as well as over the counterparty's 200,000 for the day.
EXECUTE_DEVIATIONS = {
    "deny_restricted_account_type": (False, (RESTRICTED, RESTRICTED)),
    "deny_account_type_not_allowed": (False, (RESTRICTED, RESTRICTED)),
    "deny_counterparty_exposure_exceeded": (False, (LIMIT, "oap.counterparty_limit_exceeded")),
}


def test_transaction_execute_pack_tests_pass_through_the_cli() -> None:
    tests = _reference(EXECUTE_TESTS)
    lines = (tests / "contexts.jsonl").read_text()
    out = run(
        tests / "passport.instance.json", lines, "--policy", EXECUTE_POLICY, "--context-facts"
    )
    expected = [json.loads(x) for x in (tests / "expected.jsonl").read_text().splitlines()]
    names = [json.loads(x)["name"] for x in lines.splitlines()]
    assert len(out) == len(expected) == 12
    assert names == [e["name"] for e in expected]
    got = {n: codes(d) for n, d in zip(names, out, strict=True)}
    want = {e["name"]: EXECUTE_DEVIATIONS.get(e["name"], codes(e["expected"])) for e in expected}
    assert got == want
    for name, (allow, ours) in EXECUTE_DEVIATIONS.items():  # each deviation is real:
        upstream = codes(next(e["expected"] for e in expected if e["name"] == name))
        assert upstream[0] is allow and len(upstream[1]) == 1  # one reason upstream,
        assert upstream[1][0] in ours and len(ours) == 2  # which is one of our two
    assert {d["policy_id"] for d in out} == {EXECUTE_POLICY}
    # Without the conformance mode the CLI has no system of record: every readable
    # context is refused for that one reason; the unreadable one stays unreadable.
    plain = run(tests / "passport.instance.json", lines, "--policy", EXECUTE_POLICY)
    assert [codes(d) for d in plain] == [(False, (FACTS,))] * 10 + [
        (False, ("oap.invalid_context",)),
        (False, (FACTS,)),
    ]


def test_a_passport_with_several_capabilities_and_one_without(tmp_path: Path) -> None:
    both = tmp_path / "both.json"
    both.write_text(json.dumps(passport(charge=True, refund=True, payout=True)))
    charge_only = tmp_path / "charge.json"
    charge_only.write_text(json.dumps(passport(charge=True)))
    lines = [
        {"tool": "transfer_funds", "arguments": {"recipient": "rent@x.test", "amount": 10}},
        {"policy_id": REFUND_POLICY, "context": refund(2_000)},
        {"policy_id": PAYOUT_POLICY, "context": payout("dest_1")},
        {"policy_id": EXECUTE_POLICY, "context": {}},
        {"policy_id": "finance.payment.refund.v9", "context": refund(1)},
    ]
    stdin = "".join(json.dumps(x) + "\n" for x in lines)
    assert [codes(d) for d in run(both, stdin, "--context-facts")] == [
        (True, (ALLOWED,)),
        (True, (ALLOWED,)),
        (True, (ALLOWED,)),
        (False, ("oap.invalid_context",)),  # unreadable before the passport is asked
        (False, ("oap.invalid_context",)),  # a pack the guard does not know
    ]
    lines[3]["context"] = execute()
    stdin = "".join(json.dumps(x) + "\n" for x in lines)
    out = run(charge_only, stdin, "--context-facts")
    assert [codes(d) for d in out] == [
        (True, (ALLOWED,)),
        (False, ("oap.unknown_capability",)),
        (False, ("oap.unknown_capability",)),
        (False, ("oap.unknown_capability",)),
        (False, ("oap.invalid_context",)),
    ]
    assert [d["policy_id"] for d in out[:4]] == [
        "finance.payment.charge.v1",
        REFUND_POLICY,
        PAYOUT_POLICY,
        EXECUTE_POLICY,
    ]
    assert out[1]["reasons"][0]["message"] == "Passport does not grant finance.payment.refund"


def test_unreadable_pack_limits_are_a_one_line_error() -> None:
    data = passport(refund=True)
    data["limits"]["finance.payment.refund"]["reason_codes"] = ["customer_request"]
    with pytest.raises(PassportError) as raised:
        passport_from_data(data, "p.json")
    assert str(raised.value) == (
        "p.json: limits.finance.payment.refund.refund_reason_codes: "
        "give it or its pre-rename name reason_codes, not both"
    )
    # Without reason codes, none is valid.
    del data["limits"]["finance.payment.refund"]["reason_codes"]
    del data["limits"]["finance.payment.refund"]["refund_reason_codes"]
    guard = Guard(passport_from_data(data), clock=lambda: NOON)
    decision = Packs(guard, facts=Bank()).check_context(REFUND_POLICY, refund(1))
    assert decision.codes == ("oap.invalid_reason_code",)
    data = passport(payout=True)
    del data["limits"]["payments.payout"]["max_payouts_per_day"]
    with pytest.raises(
        PassportError, match=r"^p\.json: limits\.payments\.payout\.max_payouts_per_day"
    ):
        passport_from_data(data, "p.json")


# -- the system of record -------------------------------------------------------------
class Bank:
    """A caller's system of record, as `packs.Facts` reads it."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], dict[str, object]] = {
            ("order", "ord_1"): {
                "customer_id": "cust_1",
                "total_minor": 5_000,
                "currency": "USD",
                "refunded_minor": 3_000,
            },
            ("payout_destination", "dest_1"): {
                "type": "bank_account",
                "added_at": NOON - timedelta(days=30),
            },
            ("payout_destination", "dest_new"): {
                "type": "bank_account",
                "added_at": NOON - timedelta(hours=1),
            },
            ("payout_destination", "dest_crypto"): {
                "type": "crypto_address",
                "added_at": NOON - timedelta(days=30),
            },
        }
        self.asked: list[tuple[str, str]] = []

    def __call__(self, kind: str, key: str) -> Mapping[str, object] | None:
        self.asked.append((kind, key))
        return self.records.get((kind, key))


def packs(bank: Bank | None = None, **limits: Any) -> Packs:
    guard = Guard(
        passport_from_data(passport(refund=True, payout=True, **limits)), clock=lambda: NOON
    )
    return Packs(guard, facts=bank)


def test_a_refund_is_judged_on_the_orders_record_not_the_models_claims() -> None:
    bank = Bank()
    judge = packs(bank)
    # The model claims a huge order, nothing refunded yet, and the order in EUR.
    lie = {"order_total_minor": 999_999, "already_refunded_minor": 0, "order_currency": "EUR"}
    over = judge.check_context(REFUND_POLICY, refund(2_001, key="refund-key-1", **lie))
    assert (over.allow, over.codes, over.reasons[0].rule) == (
        False,
        (LIMIT,),
        "x_vault_order_balance",
    )
    assert over.reasons[0].message == (
        "Refunds would exceed the order's total of 5000: 3000 already refunded (minor units)"
    )
    ok = judge.check_context(REFUND_POLICY, refund(2_000, key="refund-key-2", **lie))
    assert (ok.allow, ok.codes) == (True, (ALLOWED,))
    assert bank.asked == [("order", "ord_1")] * 2
    bank.records[("order", "ord_1")]["refunded_minor"] = 5_000  # the bank booked it
    last = judge.check_context(REFUND_POLICY, refund(1, key="refund-key-4"))
    assert (last.allow, last.codes) == (False, (LIMIT,))
    # Another customer, another currency: the record's customer and currency decide.
    wrong = judge.check_context(
        REFUND_POLICY, refund(100, key="refund-key-5", customer_id="cust_2", currency="EUR")
    )
    assert wrong.codes == (
        "oap.cross_currency_denied",
        "vault.customer_mismatch",
        LIMIT,
    )


def test_refunds_of_an_order_add_up_in_the_ledger_before_the_bank_books_them() -> None:
    bank = Bank()
    bank.records[("order", "ord_1")]["refunded_minor"] = 0  # and it never books ours
    judge = packs(bank)
    first = judge.check_context(REFUND_POLICY, refund(3_000, key="split-key-1"))
    second = judge.check_context(REFUND_POLICY, refund(3_000, key="split-key-2"))
    assert [first.codes, second.codes] == [(ALLOWED,), (LIMIT,)]  # 3,000 + 3,000 > 5,000
    assert second.reasons[0].rule == "x_vault_order_balance"
    assert judge.guard.ledger.tallies == {
        "finance.payment.refund.v1|daily|2026-12-01|USD": 3_000,
        "finance.payment.refund.v1|order|ord_1": 3_000,
    }


@pytest.mark.parametrize(
    ("bank", "order", "message"),
    [
        (
            None,
            "ord_1",
            "finance.payment.refund.v1 needs the caller's system of record (order): "
            "the guard was given no facts callback",
        ),
        (Bank(), "ord_unknown", "order 'ord_unknown' is not known to the system of record"),
    ],
)
def test_a_pack_that_needs_facts_it_cannot_get_is_not_decided(
    bank: Bank | None, order: str, message: str
) -> None:
    decision = packs(bank).check_context(REFUND_POLICY, refund(1, order_id=order))
    assert [(r.code, r.message, r.rule) for r in decision.reasons] == [
        (FACTS, message, "x_vault_system_of_record")
    ]
    assert decision.allow is False


def test_a_broken_or_unreadable_record_is_not_decided() -> None:
    def broken(kind: str, key: str) -> Mapping[str, object] | None:
        raise OSError("database down")

    bank = Bank()
    bank.records[("order", "ord_1")]["total_minor"] = -5
    assert [r.message for r in packs(bank).check_context(REFUND_POLICY, refund(1)).reasons] == [
        "the record of order 'ord_1' has no readable total_minor: -5"
    ]
    guard = Guard(passport_from_data(passport(refund=True)), clock=lambda: NOON)
    decision = Packs(guard, facts=broken).check_context(REFUND_POLICY, refund(1))
    assert [(r.code, r.message) for r in decision.reasons] == [
        (FACTS, "the system of record failed: OSError")
    ]


def test_a_payout_is_judged_on_the_destinations_record() -> None:
    bank = Bank()
    judge = packs(bank, hold_hours=24)
    # The model says bank_account; the bank knows a crypto address.
    swapped = judge.check_context(PAYOUT_POLICY, payout("dest_crypto", key="payout-key-1"))
    assert (swapped.allow, swapped.codes) == (False, ("oap.destination_type_forbidden",))
    new = judge.check_context(PAYOUT_POLICY, payout("dest_new", key="payout-key-2"))
    assert (new.allow, new.codes) == (False, ("vault.destination_too_new",))
    assert [
        judge.check_context(PAYOUT_POLICY, payout("dest_1", key=f"payout-key-{i}")).codes
        for i in (3, 4, 5)
    ] == [
        (ALLOWED,),
        (ALLOWED,),
        (LIMIT,),  # max_payouts_per_day: 2
    ]
    replay = judge.check_context(PAYOUT_POLICY, payout("dest_1", key="payout-key-3"))
    assert replay.codes == (LIMIT, "oap.idempotency_conflict")


# -- builders -----------------------------------------------------------------------------
def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def refund(amount: int, *, key: str = "refund-key-0", **more: Any) -> dict[str, Any]:
    return {
        "order_id": "ord_1",
        "customer_id": "cust_1",
        "amount": amount,
        "currency": "USD",
        "region": "US",
        "reason_code": "customer_request",
        "idempotency_key": key,
        **more,
    }


def payout(destination: str, *, key: str = "payout-key-0") -> dict[str, Any]:
    return {
        "amount": 1_000,
        "currency": "USD",
        "destination_type": "bank_account",
        "destination_id": destination,
        "payout_method": "ach",
        "idempotency_key": key,
    }


def execute() -> dict[str, Any]:
    return {
        "transaction_type": "buy",
        "amount": 100,
        "currency": "USD",
        "asset_class": "equity",
        "source_account_id": "acc_1",
        "destination_account_id": "acc_2",
    }


def passport(
    *,
    charge: bool = False,
    refund: bool = False,
    payout: bool = False,
    hold_hours: int | None = None,
) -> dict[str, Any]:
    capabilities, limits = [], {}
    if charge:
        capabilities.append({"id": "payments.charge"})
        limits["payments.charge"] = {
            "currency_limits": {"USD": {"max_per_tx": 100_000}},
            "allowed_merchant_ids": ["*"],
        }
    if refund:
        capabilities.append({"id": "finance.payment.refund"})
        limits["finance.payment.refund"] = {
            "currency_limits": {
                "USD": {"max_per_tx": 5_000, "daily_cap": 50_000},
                "EUR": {"max_per_tx": 5_000},
            },
            "refund_reason_codes": ["customer_request", "defective_product"],
        }
    if payout:
        capabilities.append({"id": "payments.payout"})
        limits["payments.payout"] = {
            "currency_limits": {"USD": {"max_per_tx": 100_000}},
            "allowed_destination_types": ["bank_account"],
            "allowed_recipients": ["*"],
            "max_payouts_per_day": 2,
        }
        if hold_hours is not None:
            limits["payments.payout"]["x_vault_destination_hold_hours"] = hold_hours
    return {
        "passport_id": "multi-capability",
        "kind": "instance",
        "spec_version": "oap/1.0",
        "owner_id": "org_1",
        "owner_type": "org",
        "status": "active",
        "assurance_level": "L3",
        "capabilities": capabilities,
        "limits": limits,
        "regions": ["US"],
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
        "version": "1.0.0",
    }


def test_the_cli_refuses_a_pack_it_does_not_know(tmp_path: Path) -> None:
    card = tmp_path / "p.json"
    card.write_text(json.dumps(passport(refund=True)))
    result = subprocess.run(
        [sys.executable, "-m", "pytest_vault.guard", "--passport", str(card), "--policy", "v2"],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].endswith(
        "error: --policy: 'v2' is not a pack the guard knows"
    )


def test_an_expired_or_suspended_passport_decides_no_pack() -> None:
    data = passport(refund=True)
    data["expires_at"] = "2026-06-01T00:00:00Z"
    data["status"] = "suspended"
    guard = Guard(passport_from_data(data), clock=lambda: NOON)
    decision = Packs(guard, facts=Bank()).check_context(REFUND_POLICY, refund(1))
    assert decision.codes == ("oap.passport_suspended", "oap.passport_expired")
    naive = Guard(
        passport_from_data(passport(refund=True)), clock=lambda: NOON.replace(tzinfo=None)
    )
    decision = Packs(naive, facts=Bank()).check_context(REFUND_POLICY, refund(1))
    assert decision.codes == ("oap.evaluation_error",)
    assert decision.reasons[0].message.startswith("the clock gave a naive datetime")
