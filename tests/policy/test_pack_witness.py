"""`vault-guard diff` on the other packs' fields (refund, payout, transaction execute and
the account's fields): each change widens or narrows with a witness, a pack context on
the facts it carries (or an account change), which fresh guards decide differently when
re-judged here from the JSON the diff prints; and lint's findings on those fields."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_vault.guard.engine import Guard
from pytest_vault.guard.packs import Packs
from pytest_vault.guard.passport import Passport
from pytest_vault.policy.__main__ import main
from pytest_vault.policy.diff import Change, review_passports
from pytest_vault.policy.lint import lint_document
from pytest_vault.policy.witness import Search

from .test_diff import NOW, load, raw

REFUND = "/limits/finance.payment.refund"
PAYOUT = "/limits/payments.payout"
EXECUTE = "/limits/finance.transaction"


def pack(capability: str, **fields: Any) -> Any:
    def edit(d: dict[str, Any]) -> None:
        for key, value in fields.items():
            if value is None:
                d["limits"][capability].pop(key, None)
            else:
                d["limits"][capability][key] = value

    return edit


def usd(capability: str, **caps: int) -> Any:
    return lambda d: d["limits"][capability]["currency_limits"]["USD"].update(caps)


def ungrant(capability: str) -> Any:
    def edit(d: dict[str, Any]) -> None:
        d["capabilities"] = [c for c in d["capabilities"] if c["id"] != capability]

    return edit


def data(level: int, *edits: Any) -> dict[str, Any]:
    out = raw(level)
    for edit in edits:
        edit(out)
    return out


R, P, X = "finance.payment.refund", "payments.payout", "finance.transaction"
# (level, the narrower passport's edits, the wider's, the change's pointer, witness kind,
# the refusing side's one reason code).
KINDS: dict[str, tuple[int, list[Any], list[Any], str, str, str]] = {
    "refund capability": (2, [ungrant(R)], [], "/capabilities", "pack", "oap.unknown_capability"),
    "refund per-tx": (
        2,
        [],
        [usd(R, max_per_tx=300000)],
        f"{REFUND}/currency_limits/USD/max_per_tx",
        "pack",
        "oap.limit_exceeded",
    ),
    "refund daily": (
        3,
        [],
        [usd(R, daily_cap=150000)],
        f"{REFUND}/currency_limits/USD/daily_cap",
        "pack",
        "oap.limit_exceeded",
    ),
    "refund reason": (
        3,
        [],
        [lambda d: d["limits"][R]["refund_reason_codes"].append("fraud")],
        f"{REFUND}/refund_reason_codes",
        "pack",
        "oap.invalid_reason_code",
    ),
    "refund currency": (
        2,
        [],
        [
            lambda d: d["limits"][R]["currency_limits"].update(
                {"EUR": {"max_per_tx": 1000, "daily_cap": 2000}}
            ),
            pack(R, supported_currencies=["USD", "EUR"]),
        ],
        f"{REFUND}/currency_limits/EUR",
        "pack",
        "oap.currency_unsupported",
    ),
    "refund approval": (
        2,
        [pack(R, approval_required=True)],
        [],
        f"{REFUND}/approval_required",
        "pack",
        "oap.approval_required",
    ),
    "payout recipient": (
        2,
        [],
        [pack(P, allowed_recipients=["dest_payroll", "dest_rent", "dest_utilities", "dest_new"])],
        f"{PAYOUT}/allowed_recipients",
        "pack",
        "vault.recipient_forbidden",
    ),
    "payout type": (
        3,
        [],
        [pack(P, allowed_destination_types=["bank_account", "digital_wallet"])],
        f"{PAYOUT}/allowed_destination_types",
        "pack",
        "oap.destination_type_forbidden",
    ),
    "payout hold": (
        2,
        [pack(P, x_vault_destination_hold_hours=72)],
        [],
        f"{PAYOUT}/x_vault_destination_hold_hours",
        "pack",
        "vault.destination_too_new",
    ),
    "payout count": (
        3,
        [],
        [pack(P, max_payouts_per_day=3)],
        f"{PAYOUT}/max_payouts_per_day",
        "pack",
        "oap.limit_exceeded",
    ),
    "payout compliance": (
        2,
        [pack(P, compliance_checks_required=True)],
        [],
        f"{PAYOUT}/compliance_checks_required",
        "pack",
        "oap.compliance_check_required",
    ),
    "payout key": (
        2,
        [pack(P, idempotency_required=True)],
        [],
        f"{PAYOUT}/idempotency_required",
        "pack",
        "oap.invalid_context",
    ),
    "execute exposure": (
        3,
        [],
        [pack(X, max_exposure_per_tx_usd=60000)],
        f"{EXECUTE}/max_exposure_per_tx_usd",
        "pack",
        "oap.limit_exceeded",
    ),
    "execute counterparty": (
        3,
        [],
        [pack(X, max_exposure_per_counterparty_usd=150000)],
        f"{EXECUTE}/max_exposure_per_counterparty_usd",
        "pack",
        "oap.counterparty_limit_exceeded",
    ),
    "execute source type": (
        3,
        [],
        [pack(X, allowed_source_account_types=["individual", "joint"])],
        f"{EXECUTE}/allowed_source_account_types",
        "pack",
        "oap.account_type_restricted",
    ),
    "execute asset": (
        3,
        [],
        [pack(X, allowed_asset_classes=["cash", "bonds"])],
        f"{EXECUTE}/allowed_asset_classes",
        "pack",
        "oap.asset_class_forbidden",
    ),
    "account field": (
        3,
        [],
        [pack(X, x_vault_account_fields=["nickname", "language", "email"])],
        f"{EXECUTE}/x_vault_account_fields",
        "account",
        "vault.account_field_forbidden",
    ),
}


def settled(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    return review_passports(load(old), load(new), search=Search(NOW))


def rejudged(w: dict[str, Any], old: Passport, new: Passport) -> tuple[bool, bool]:
    """The printed witness judged again by fresh guards on the facts it carries."""

    def last(passport: Passport) -> bool:
        records: dict[str, Any] = {}

        def facts(kind: str, key: str) -> Any:
            record = records.get(kind, {}).get(key)
            if record is not None and "added_at" in record:
                record = {**record, "added_at": datetime.fromisoformat(record["added_at"])}
            return record

        packs = Packs(Guard(passport, clock=lambda: NOW), facts=facts)

        def check(step: dict[str, Any]) -> bool:
            if w["kind"] == "account":
                return packs.check_account_change(step["field"]).allow
            records.clear()
            records.update(step["facts"])
            return packs.check_context(step["policy"], step["context"]).allow

        for step in w["earlier"]:
            assert check(step), "an earlier step was denied"
        return check(w["arguments"])

    return last(old), last(new)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_pack_field_change_has_a_witness_both_ways(kind: str) -> None:
    level, narrow, wide, pointer, shape, code = KINDS[kind]
    narrower, wider = data(level, *narrow), data(level, *wide)
    for old, new, effect in ((narrower, wider, "widens"), (wider, narrower, "narrows")):
        changes = [c for c in settled(old, new) if c.pointer == pointer and c.effect != "neutral"]
        assert [(c.effect, c.undecided, c.note) for c in changes] == [(effect, False, None)]
        w = changes[0].to_dict()["witness"]
        assert (w["kind"], w["effect"]) == (shape, effect)
        assert rejudged(w, load(old), load(new)) == (
            (False, True) if effect == "widens" else (True, False)
        )
        # Refused for the changed rule alone.
        refused = w["old"] if effect == "widens" else w["new"]
        assert [r["code"] for r in refused["reasons"]] == [code]


def test_the_diff_cli_gates_on_a_widened_account_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(raw(4)))
    new.write_text(json.dumps(data(4, pack(X, x_vault_account_fields=["email"]))))
    assert main(["diff", str(old), str(new), "--fail-on-widen"]) == 1
    out = capsys.readouterr().out
    assert (
        "/limits/finance.transaction/x_vault_account_fields: widens: "
        "account field 'email' newly permitted" in out
    )
    assert (
        'witness: account change {"field": "email"}: denied (vault.account_field_forbidden) '
        "-> allowed" in out
    )


def test_a_change_of_the_refund_key_switch_has_no_effect() -> None:
    changes = settled(raw(2), data(2, pack(R, idempotency_required=False)))
    assert [(c.pointer, c.effect, c.witness) for c in changes] == [
        (f"{REFUND}/idempotency_required", "neutral", None)
    ]


def test_the_shipped_levels_diff_pack_by_pack_with_witnesses() -> None:
    """Level 2 -> Level 3: every change of the other packs narrows, each witnessed."""
    changes = [
        c
        for c in settled(raw(2), raw(3))
        if c.pointer.startswith(("/limits/f", "/limits/payments.p"))
    ]
    assert {(c.pointer, c.effect) for c in changes} == {
        (f"{REFUND}/currency_limits/USD/max_per_tx", "narrows"),
        (f"{REFUND}/currency_limits/USD/daily_cap", "narrows"),
        (f"{REFUND}/refund_reason_codes", "narrows"),
        (f"{PAYOUT}/currency_limits/USD/max_per_tx", "narrows"),
        (f"{PAYOUT}/currency_limits/USD/daily_cap", "narrows"),
        (f"{PAYOUT}/allowed_destination_types", "narrows"),
        (f"{PAYOUT}/allowed_recipients", "narrows"),
        (f"{PAYOUT}/allowed_recipients", "widens"),
        (f"{PAYOUT}/x_vault_destination_hold_hours", "narrows"),
        (f"{PAYOUT}/max_payouts_per_day", "narrows"),
        (f"{EXECUTE}/max_exposure_per_tx_usd", "narrows"),
        (f"{EXECUTE}/max_exposure_per_counterparty_usd", "narrows"),
        (f"{EXECUTE}/x_vault_account_fields", "narrows"),
    }
    # No destination is on both payout lists: the earlier payouts a daily cap or count
    # needs are refused by one side, so those two say so (undecided), never "no effect".
    entangled = {f"{PAYOUT}/currency_limits/USD/daily_cap", f"{PAYOUT}/max_payouts_per_day"}
    for c in changes:
        if c.pointer in entangled:
            assert (c.undecided, c.witness) == (True, None)
            assert c.note is not None and "refused by one of the passports" in c.note
        else:
            assert c.witness is not None and not c.undecided, c.pointer


# -- lint ---------------------------------------------------------------------------------------


def findings(d: dict[str, Any]) -> list[tuple[str, str, str]]:
    now = datetime(2027, 6, 1, tzinfo=UTC)
    out = lint_document("p.json", json.dumps(d, indent=2).encode(), now=now)
    return [(f.pointer, f.severity, f.code) for f in out]


def test_the_shipped_passports_lint_clean_on_the_other_packs() -> None:
    for level in (1, 2, 3, 4, 5):
        pack_findings = [
            f for f in findings(raw(level)) if f[0].startswith(("/limits/f", "/limits/payments.p"))
        ]
        assert pack_findings == [], level


@pytest.mark.parametrize(
    ("edits", "expected"),
    [
        (
            [pack(P, allowed_recipients=[])],
            [(f"{PAYOUT}/allowed_recipients", "error", "empty-recipients")],
        ),
        (
            [usd(R, max_per_tx=2_000_000)],
            [(f"{REFUND}/currency_limits/USD/max_per_tx", "warning", "max-above-daily-cap")],
        ),
        (
            [pack(R, refund_reason_codes=["customer_request", "defective_prodcut"])],
            [(f"{REFUND}/refund_reason_codes/1", "warning", "unknown-reason-code")],
        ),
        (
            [
                lambda d: d["limits"][P]["currency_limits"].update(
                    {"EUR": {"max_per_tx": 100, "daily_cap": 200}}
                )
            ],
            [(f"{PAYOUT}/currency_limits/EUR", "warning", "currency-not-supported")],
        ),
        (
            [usd(P, daily_cap=None)],
            [(f"{PAYOUT}/currency_limits/USD", "warning", "no-daily-cap")],
        ),
        (
            [pack(P, max_payouts_per_day=0)],
            [(f"{PAYOUT}/max_payouts_per_day", "warning", "no-payouts")],
        ),
        (
            [pack(X, x_vault_account_fields=None)],
            [(f"{EXECUTE}", "warning", "no-account-fields")],
        ),
        (
            [pack(X, allowed_source_account_types=["individual", "retirement"])],
            [
                (
                    f"{EXECUTE}/allowed_source_account_types",
                    "warning",
                    "source-type-restricted",
                )
            ],
        ),
        (
            [pack(X, max_exposure_per_tx_usd=2_000_000)],
            [(f"{EXECUTE}/max_exposure_per_tx_usd", "warning", "max-above-daily-cap")],
        ),
        (
            [ungrant(R)],
            [(REFUND, "warning", "dormant-limits")],
        ),
        (
            [lambda d: d.update(assurance_level="L2")],
            [("/assurance_level", "error", "assurance-below-minimum")],  # payout, execute
        ),
    ],
    ids=[
        "empty-recipients",
        "refund-max-above-daily",
        "unknown-reason",
        "currency-not-supported",
        "no-daily-cap",
        "no-payouts",
        "no-account-fields",
        "source-type-restricted",
        "execute-max-above-daily",
        "dormant",
        "assurance",
    ],
)
def test_lint_finds_the_other_packs_mistakes(
    edits: list[Any], expected: list[tuple[str, str, str]]
) -> None:
    got = [f for f in findings(data(2, *edits)) if f not in findings(raw(2))]
    assert got == expected
