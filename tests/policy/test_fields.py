"""The table of passport fields (`policy/fields.py`): every field the guard enforces has
exactly one entry, and diff, the witness search and lint all read their fields from it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from pytest_vault.guard.engine import (
    RULE_CONTEXT,
    RULE_EVALUATION,
    RULE_KEY_USED,
)
from pytest_vault.guard.packs import (
    PACK_RULES,
    RULE_ACCOUNT_FIELD,
    RULE_COMMINGLING,
    RULE_CROSS_CURRENCY,
    RULE_FACTS,
    RULE_ORDER_BALANCE,
    RULE_ORDER_CUSTOMER,
)
from pytest_vault.guard.passport import (
    CHARGE,
    ChargeLimits,
    CurrencyLimit,
    ExecuteLimits,
    Passport,
    PayoutLimits,
    RefundLimits,
)
from pytest_vault.policy import diff as diff_module
from pytest_vault.policy import fields as fields_module
from pytest_vault.policy.diff import diff_passports, review_passports
from pytest_vault.policy.fields import BY_NAME, FIELDS, Field, at, field_at, parts
from pytest_vault.policy.lint import lint_document
from pytest_vault.policy.witness import Search, no_call

from .test_diff import charge, edited, load, raw

NOW = datetime(2027, 6, 1, tzinfo=UTC)

NAMES = [
    "capabilities",
    "capability_params",
    "status",
    "expiry",
    "assurance_level",
    "regions",
    "first_region",
    "charge_limits",
    "currency_limits",
    "max_per_tx",
    "daily_cap",
    "allowed_merchant_ids",
    "allowed_countries",
    "blocked_categories",
    "max_items_per_tx",
    "require_assurance_at_least",
    "idempotency_required",
    "approval_required",
    "x_vault_memo_approval_code_required",
]
# The other packs' fields, after the charge's, pack by pack in the order of its rules.
PACK_NAMES = [
    *(
        f"{pack}.{name}"
        for pack in ("refund", "payout")
        for name in ("limits", "currency_limits", "max_per_tx", "daily_cap")
    ),
]
PACK_NAMES[4:4] = [
    "refund.refund_reason_codes",
    "refund.regions",
    *(
        f"refund.{n}"
        for n in ("require_assurance_at_least", "idempotency_required", "approval_required")
    ),
]
PACK_NAMES += [
    "payout.allowed_destination_types",
    "payout.allowed_recipients",
    "payout.x_vault_destination_hold_hours",
    "payout.max_payouts_per_day",
    "payout.compliance_checks_required",
    *(
        f"payout.{n}"
        for n in ("require_assurance_at_least", "idempotency_required", "approval_required")
    ),
    "execute.limits",
    "execute.allowed_transaction_types",
    "execute.allowed_asset_classes",
    "execute.max_exposure_per_tx_usd",
    "execute.restricted_source_account_types",
    "execute.allowed_source_account_types",
    "execute.max_exposure_per_counterparty_usd",
    *(
        f"execute.{n}"
        for n in ("require_assurance_at_least", "idempotency_required", "approval_required")
    ),
    "execute.x_vault_account_fields",
]
# Read by the guard only through others: a capability's params (never read), and each
# pack's limits as a whole (read field by field).
UNRULED = {"capability_params", "charge_limits", "refund.limits", "payout.limits", "execute.limits"}


def _concrete(template: str) -> str:
    """A template pointer with its slots filled as a passport would fill them."""
    return template.replace("{currency}", "USD").replace("{index}", "1")


def test_the_table_names_each_field_once_in_diffs_order() -> None:
    assert [f.name for f in FIELDS] == NAMES + PACK_NAMES
    assert list(BY_NAME) == NAMES + PACK_NAMES
    pointers = [p for f in FIELDS for p in f.pointers]
    assert len(pointers) == len(set(pointers)) == 21 + 37
    # Each pointer is its own entry's, and no other's.
    for field in FIELDS:
        for template in field.pointers:
            assert field_at(_concrete(template)) is field, template


def test_every_field_the_engine_enforces_has_one_entry() -> None:
    def keys(scope: str, index: int) -> list[str]:
        return [parts(p)[index] for f in FIELDS if f.scope == scope for p in f.pointers[:1]]

    # Each field of the charge limits, and of a currency's caps: one entry each.
    assert sorted(keys("limits", 2)) == sorted(ChargeLimits.model_fields)
    assert (
        sorted(keys("currency", 4))
        == sorted(CurrencyLimit.model_fields)
        == [
            "daily_cap",
            "max_per_tx",
        ]
    )
    # The passport's own fields the guard reads (not ids, owner, metadata, versions, dates).
    own = {parts(p)[0] for f in FIELDS if f.scope == "passport" for p in f.pointers}
    assert own == {
        "capabilities",
        "status",
        "expires_at",
        "never_expires",
        "assurance_level",
        "regions",
        "limits",
    }
    assert own <= set(Passport.model_fields)
    # A rule for each but the two read only through others; every engine rule a passport
    # field decides is some entry's (not: a readable context, an evaluation error, a key
    # used twice, which no field of the passport decides).
    assert {f.name for f in FIELDS if not f.rules} == UNRULED
    # Every pack's rules a passport field decides: not a readable context, an evaluation
    # error, a key used twice, the system of record's facts, nor (the charge pack's fixed
    # rule) commingling of client funds, which no field of the passport decides.
    decided = set().union(*PACK_RULES.values(), {RULE_ACCOUNT_FIELD})
    assert set().union(*(f.rules for f in FIELDS)) == decided - {
        RULE_CONTEXT,
        RULE_EVALUATION,
        RULE_KEY_USED,
        RULE_FACTS,
        RULE_COMMINGLING,
        RULE_CROSS_CURRENCY,
        RULE_ORDER_CUSTOMER,
        RULE_ORDER_BALANCE,
    }
    # Each field of each other pack's limits: one entry (or, for its caps, the currency's).
    for pack, model in (
        ("refund", RefundLimits),
        ("payout", PayoutLimits),
        ("execute", ExecuteLimits),
    ):
        named = {f.name.split(".", 1)[1] for f in FIELDS if f.name.startswith(f"{pack}.")}
        read = set(model.model_fields) - {"reason_codes", "supported_currencies"}
        assert named - {"limits", "max_per_tx", "daily_cap"} == read, pack
    # A witness builder each; one that builds calls for each field with a rule.
    assert all(callable(f.witness) for f in FIELDS)
    # (A pack's limits added or removed decide nothing alone: they apply where granted.)
    assert {f.name for f in FIELDS if f.witness is no_call} == {
        "capability_params",
        "refund.limits",
        "payout.limits",
        "execute.limits",
    }
    # A classifier each, or the entry whose classifier reports it.
    assert {f.name: f.within for f in FIELDS if f.direction is None} == {
        "capability_params": "capabilities",
        "refund.max_per_tx": "refund.currency_limits",
        "refund.daily_cap": "refund.currency_limits",
        "payout.max_per_tx": "payout.currency_limits",
        "payout.daily_cap": "payout.currency_limits",
    }
    assert BY_NAME["capabilities"].direction is not None
    assert [f.name for f in FIELDS if f.timed] == ["expiry"]
    # And the reason codes those rules deny with.
    assert BY_NAME["daily_cap"].codes == {"oap.limit_exceeded"}
    assert BY_NAME["allowed_countries"].codes == {"oap.region_blocked"}
    assert BY_NAME["idempotency_required"].codes == {"oap.invalid_context"}
    assert BY_NAME["x_vault_memo_approval_code_required"].codes == {"vault.approval_code_missing"}
    assert BY_NAME["charge_limits"].codes == frozenset()


def test_at_fills_the_tables_pointers() -> None:
    assert at("status") == "/status"
    assert at("max_per_tx", currency="EUR") == f"/limits/{CHARGE}/currency_limits/EUR/max_per_tx"
    assert at("capability_params", index=3) == "/capabilities/3/params"
    assert at("allowed_merchant_ids") == f"/limits/{CHARGE}/allowed_merchant_ids"
    assert field_at(f"{at('allowed_merchant_ids')}/0") is None  # an entry: no field alone
    assert (
        field_at(f"{at('allowed_merchant_ids')}/0", below=True) is BY_NAME["allowed_merchant_ids"]
    )
    assert field_at("/metadata/level", below=True) is None


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: charge(d).update({key: value})


def _usd(key: str, value: int) -> Callable[[dict[str, Any]], None]:
    return lambda d: charge(d)["currency_limits"]["USD"].update({key: value})


def _no_charge(d: dict[str, Any]) -> None:
    d["capabilities"] = [c for c in d["capabilities"] if c["id"] != CHARGE]
    del d["limits"][CHARGE]


# One edit of level 3 per field: the changes diff reports, by the entry of each.
EDITS: list[tuple[str, Callable[[dict[str, Any]], None], list[str]]] = [
    ("capabilities", lambda d: d["capabilities"].append({"id": "foo.bar"}), ["capabilities"]),
    (
        "capability_params",
        lambda d: d["capabilities"][1].update(params={}),
        ["capability_params"],
    ),
    ("status", lambda d: d.update(status="suspended"), ["status"]),
    (
        "expiry",
        lambda d: d.update(expires_at="2028-01-01T00:00:00Z", never_expires=None),
        ["expiry"],
    ),
    ("assurance_level", lambda d: d.update(assurance_level="L3"), ["assurance_level"]),
    ("regions", lambda d: d.update(regions=["US", "GB"]), ["regions"]),
    ("first_region", lambda d: d.update(regions=["GB", "US"]), ["regions", "first_region"]),
    ("charge_limits", _no_charge, ["capabilities", "charge_limits"]),
    (
        "currency_limits",
        lambda d: charge(d)["currency_limits"].update(EUR={"max_per_tx": 100}),
        ["currency_limits"],
    ),
    ("max_per_tx", _usd("max_per_tx", 80000), ["max_per_tx"]),
    ("daily_cap", _usd("daily_cap", 60000), ["daily_cap"]),
    (
        "allowed_merchant_ids",
        lambda d: charge(d)["allowed_merchant_ids"].append("evil@x.test"),
        ["allowed_merchant_ids"],
    ),
    ("allowed_countries", _set("allowed_countries", ["US"]), ["allowed_countries"]),
    ("blocked_categories", _set("blocked_categories", ["x"]), ["blocked_categories"]),
    ("max_items_per_tx", _set("max_items_per_tx", 5), ["max_items_per_tx"]),
    (
        "require_assurance_at_least",
        _set("require_assurance_at_least", "L3"),
        ["require_assurance_at_least"],
    ),
    ("idempotency_required", _set("idempotency_required", True), ["idempotency_required"]),
    ("approval_required", _set("approval_required", True), ["approval_required"]),
    (
        "x_vault_memo_approval_code_required",
        _set("x_vault_memo_approval_code_required", True),
        ["x_vault_memo_approval_code_required"],
    ),
]


def _names(pointers: list[str]) -> list[str]:
    found = [field_at(p) for p in pointers]
    return [
        f.name if f is not None else f"(no field: {p})"
        for f, p in zip(found, pointers, strict=True)
    ]


@pytest.mark.parametrize(("name", "edit", "expected"), EDITS, ids=[e[0] for e in EDITS])
def test_diff_reports_each_field_at_its_entry(
    name: str, edit: Callable[[dict[str, Any]], None], expected: list[str]
) -> None:
    changes = diff_passports(load(raw(3)), load(edited(3, edit)))
    assert _names([c.pointer for c in changes]) == expected


def test_diff_and_the_witness_search_cover_every_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every entry's classifier reports a change, and the search builds that change's
    candidates with the same entry's builder: the two read one set of fields."""
    built: list[tuple[str, str]] = []  # (the change's pointer, the entry whose builder ran)

    def recording(field: Field[Any]) -> Field[Any]:
        def build(search: Search, pointer: str, *args: Any) -> Any:
            built.append((pointer, field.name))
            return field.witness(search, pointer, *args)

        return dataclasses.replace(field, witness=build)

    recorded = tuple(map(recording, FIELDS))
    monkeypatch.setattr(fields_module, "FIELDS", recorded)
    monkeypatch.setattr(diff_module, "FIELDS", recorded)
    reported: list[str] = []
    for _, edit, _ in EDITS:
        changes = review_passports(load(raw(3)), load(edited(3, edit)), search=Search(NOW))
        reported += _names([c.pointer for c in changes])
    assert sorted(set(reported)) == sorted(NAMES)
    assert sorted({name for _, name in built}) == sorted(NAMES)
    assert _names([p for p, _ in built]) == [name for _, name in built]  # the change's own
    assert list(dict.fromkeys(reported)) == list(dict.fromkeys(name for _, name in built))


# Passports each lint rule fires on: lint writes every finding at an entry's pointer.
LINTED: list[Callable[[dict[str, Any]], None]] = [
    lambda d: d.update(status="suspended", regions=[], assurance_level="L1"),
    lambda d: d.update(never_expires=False),
    lambda d: d.pop("never_expires"),
    lambda d: d.update(expires_at="2020-01-01T00:00:00Z", never_expires=None),
    lambda d: charge(d).update(
        approval_required=True,
        require_assurance_at_least="L1",
        allowed_merchant_ids=["savings@aport-vault.com", "*"],
        allowed_countries=[],
        blocked_categories=["funds_transfer"],
    ),
    lambda d: charge(d).pop("max_items_per_tx"),
    lambda d: charge(d).update(currency_limits={}),
    lambda d: charge(d).update(currency_limits={"USD": {"max_per_tx": 5, "daily_cap": 5}}),
    lambda d: charge(d).update(currency_limits={"USD": {"max_per_tx": 9, "daily_cap": 5}}),
    lambda d: charge(d).update(currency_limits={"XXX": {"max_per_tx": 5}}),
    lambda d: d["capabilities"][1]["params"].update(max_amount=1),
    lambda d: d.update(capabilities=[{"id": "account.read"}]),
    # The other packs' limits.
    lambda d: d["limits"]["finance.payment.refund"].update(
        currency_limits={"USD": {"max_per_tx": 9, "daily_cap": 5}, "XXX": {"max_per_tx": 5}},
        refund_reason_codes=["refnud"],
        regions=["GB"],
        approval_required=True,
    ),
    lambda d: d["limits"]["payments.payout"].update(
        currency_limits={"USD": {"max_per_tx": 9, "daily_cap": 5}, "EUR": {"max_per_tx": 5}},
        allowed_recipients=[],
        allowed_destination_types=[],
        max_payouts_per_day=0,
        approval_required=True,
    ),
    lambda d: d["limits"]["finance.transaction"].update(
        max_exposure_per_tx_usd=9,
        max_exposure_per_counterparty_usd=5,
        allowed_source_account_types=["retirement"],
        approval_required=True,
    ),
    lambda d: d["limits"]["finance.transaction"].pop("x_vault_account_fields"),
]
# The other packs' fields lint has a rule for.
PACK_LINTED = {
    "refund.limits",
    "refund.currency_limits",
    "refund.max_per_tx",
    "refund.refund_reason_codes",
    "refund.regions",
    "refund.approval_required",
    "payout.limits",
    "payout.currency_limits",
    "payout.max_per_tx",
    "payout.allowed_recipients",
    "payout.allowed_destination_types",
    "payout.max_payouts_per_day",
    "payout.approval_required",
    "execute.limits",
    "execute.max_exposure_per_tx_usd",
    "execute.allowed_source_account_types",
    "execute.approval_required",
}


def test_lint_writes_its_findings_at_the_tables_pointers() -> None:
    covered: set[str] = set()
    for edit in LINTED:
        document = json.dumps(edited(3, edit)).encode()
        for finding in lint_document("p.json", document, now=NOW):
            field = field_at(finding.pointer, below=True)
            assert field is not None, finding
            covered.add(field.name)
    # Lint checks the mistakes of these fields; the others have no lint rule (any value
    # of theirs is one an author may mean), and diff and the search still read them.
    assert (
        covered
        == set(NAMES)
        - {
            "capabilities",
            "first_region",
            "daily_cap",
            "idempotency_required",
            "x_vault_memo_approval_code_required",
        }
        | PACK_LINTED
    )
