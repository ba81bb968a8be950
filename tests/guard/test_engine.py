from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pytest_vault.core.text import shown, visible
from pytest_vault.guard.engine import (
    ALLOWED,
    APPROVAL_CODE_MISSING,
    CURRENCY_UNSUPPORTED,
    EVALUATION_ERROR,
    IDEMPOTENCY_CONFLICT,
    INVALID_CONTEXT,
    LIMIT_EXCEEDED,
    MERCHANT_FORBIDDEN,
    PASSPORT_EXPIRED,
    PASSPORT_SUSPENDED,
    UNKNOWN_CAPABILITY,
    Guard,
    Transfer,
    Unreadable,
)
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import load_passport, passport_from_data

from ..conftest import CONTEXT

AUDIT = "audit@aport-vault.com"
RENT = "rent@aport-vault.com"


def l4_call(recipient: object = AUDIT, amount: object = 100, **extra: Any) -> dict[str, Any]:
    args = {"recipient": recipient, "amount": amount, "memo": "audit APC-2026-0142", **extra}
    args.setdefault("idempotency_key", "audit-key-0001")
    return args


# -- the pack's public conformance cases --------------------------------------------------

# Upstream expects `deny_daily_cap_exceeded_step1` (60000 minor units) to be ALLOWED, yet
# the passport's USD max_per_tx is 20000 and `deny_over_per_tx` (25000) is expected to be
# denied. A correct engine denies it for the per-transaction limit; we do not bend to it.
UPSTREAM_DEVIATIONS = {"deny_daily_cap_exceeded_step1": (False, LIMIT_EXCEEDED)}


def test_pack_conformance_cases_in_sequence(charge_tests: Path) -> None:
    guard = Guard(load_passport(charge_tests / "passport.instance.json"))
    lines = (charge_tests / "contexts.jsonl").read_text().splitlines()
    expected = (charge_tests / "expected.jsonl").read_text().splitlines()
    assert len(lines) == len(expected) == 12
    got, want = {}, {}
    for line, exp_line in zip(lines, expected, strict=True):
        case, exp = json.loads(line), json.loads(exp_line)
        override = case.get("overridePassport")
        passport = None
        if override is not None:
            merged = {**json.loads(guard.passport.model_dump_json(exclude_none=True)), **override}
            passport = passport_from_data(merged)
        decision = guard.check_context(case["context"], passport)
        got[case["name"]] = (decision.allow, decision.codes[0])
        want[case["name"]] = UPSTREAM_DEVIATIONS.get(
            case["name"], (exp["allow"], exp["reasons"][0]["code"])
        )
    assert got == want
    # The deviation is real: upstream says allow, we deny.
    assert json.loads(expected[8])["allow"] is True
    assert got["deny_daily_cap_exceeded_step1"] == (False, LIMIT_EXCEEDED)


# -- the level passports -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "recipient", "amount", "allow", "codes"),
    [
        (1, "anyone@example.test", 50_000, True, ("oap.allowed",)),
        (1, "anyone@example.test", 50_000.01, False, (LIMIT_EXCEEDED,)),
        (2, "rent@aport-vault.com", 2_500, True, ("oap.allowed",)),
        (2, "payroll@aport-vault.com", 1, True, ("oap.allowed",)),
        (2, "utilities@aport-vault.com", 0.01, True, ("oap.allowed",)),
        (2, "rent@aport-vault.com", 2_500.01, False, (LIMIT_EXCEEDED,)),
        (2, "savings@aport-vault.com", 10, False, (MERCHANT_FORBIDDEN,)),
        (3, "savings@aport-vault.com", 500, True, ("oap.allowed",)),
        (3, "savings@aport-vault.com", 501, False, (LIMIT_EXCEEDED,)),
        (3, "rent@aport-vault.com", 900, False, (LIMIT_EXCEEDED, MERCHANT_FORBIDDEN)),
        (5, "savings@aport-vault.com", 1, False, (UNKNOWN_CAPABILITY,)),
    ],
)
def test_level_passports(
    level_guard: dict[int, Guard],
    level: int,
    recipient: str,
    amount: float,
    allow: bool,
    codes: tuple[str, ...],
) -> None:
    decision = level_guard[level].check_call(
        "transfer_funds", {"recipient": recipient, "amount": amount}
    )
    assert (decision.allow, decision.codes) == (allow, codes)
    if allow:
        assert decision.executes == Transfer(recipient, round(amount * 100), "USD")
    else:
        assert decision.executes is None


def test_level_4_requires_key_and_audit_code(level_guard: dict[int, Guard]) -> None:
    g = level_guard[4]
    assert g.check_call("transfer_funds", l4_call()).executes == Transfer(
        AUDIT, 10_000, "USD", "audit APC-2026-0142", "audit-key-0001"
    )
    no_key = {"recipient": AUDIT, "amount": 5, "memo": "APC-2026-0001"}
    assert g.check_call("transfer_funds", no_key).codes == (INVALID_CONTEXT,)
    for memo in ("(APC-2026-0001)", "ok: APC-2026-0001.", "\u00e9 APC-2026-0001 \u00e9"):
        allowed = l4_call(memo=memo, idempotency_key=f"k-{len(memo)}-{memo[:2]}-xxxxx")
        assert g.check_call("transfer_funds", allowed).codes == (ALLOWED,), memo
    for memo in (
        None,
        "APC-26-0001",
        "XAPC-2026-0001",
        "APC-2026-00012",
        "apc-2026-0001",
        "approved",
        # Token edges in any script: an Arabic-Indic digit, an underscore, an accented
        # letter before, a combining accent after.
        "APC-2026-0001\u0661",
        "x_APC-2026-0001",
        "\u00e9APC-2026-0001",
        "APC-2026-0001\u0301",
        "APC-2026-0001_",
    ):
        decision = g.check_call(
            "transfer_funds", l4_call(memo=memo, idempotency_key=f"k-{memo}-xxxxx")
        )
        assert decision.codes == (APPROVAL_CODE_MISSING,), memo


# -- every rule that fails is listed ---------------------------------------------------------

NOON = datetime(2026, 12, 1, 12, tzinfo=UTC)
MALLORY = "mallory@evil.test"
USED_KEY = "used-key-0001"


def l4_guard(spent: int) -> Guard:
    """Level 4 ($1,000 a transfer, $2,000 a day) with `spent` minor units already spent
    today and USED_KEY already used."""
    g = Guard(load_passport(SHIPPED / "level-4.json"), clock=lambda: NOON)
    g.ledger.daily[(NOON.date(), "USD")] = spent
    g.ledger.keys.add(USED_KEY)
    return g


def pack_order(
    *,
    key: str | None,
    recipient: str,
    amount: int,
    memo: str | None,
    currency: str,
    spent: int,
    items: int = 1,
) -> tuple[str, ...]:
    """What Level 4 must say, rule by rule in the pack's order (amounts in minor units):
    the oracle, written from the README's table, not from the engine."""
    out = []
    if key is None:
        out.append(INVALID_CONTEXT)
    if currency != "USD":
        out.append(CURRENCY_UNSUPPORTED)
    elif amount > 100_000:
        out.append(LIMIT_EXCEEDED)
    if items > 1:
        out.append(LIMIT_EXCEEDED)
    if recipient != AUDIT:
        out.append(MERCHANT_FORBIDDEN)
    if memo is None or "APC-2026-0001" not in memo:
        out.append(APPROVAL_CODE_MISSING)
    if currency == "USD" and spent + amount > 200_000:
        out.append(LIMIT_EXCEEDED)
    if key == USED_KEY:
        out.append(IDEMPOTENCY_CONFLICT)
    return tuple(out) or (ALLOWED,)


COMBINATIONS = list(
    itertools.product(
        (None, "fresh-key-0001", USED_KEY),
        (AUDIT, MALLORY),
        (60_000, 150_000),
        ("ok APC-2026-0001", None),
        ("USD", "EUR"),
        (0, 150_000),
    )
)


@pytest.mark.parametrize(("key", "recipient", "amount", "memo", "currency", "spent"), COMBINATIONS)
def test_a_denial_lists_every_rule_that_fails_on_what_was_sent(
    key: str | None, recipient: str, amount: int, memo: str | None, currency: str, spent: int
) -> None:
    expected = pack_order(
        key=key, recipient=recipient, amount=amount, memo=memo, currency=currency, spent=spent
    )
    call = {"recipient": recipient, "amount": amount / 100, "currency": currency}
    call |= {k: v for k, v in (("memo", memo), ("idempotency_key", key)) if v is not None}
    g = l4_guard(spent)
    assert g.judge_call("transfer_funds", call).codes == expected
    decision = g.check_call("transfer_funds", call)
    assert decision.codes == expected
    assert decision.allow is (expected == (ALLOWED,))
    # The same rules on a pack context, where the item count is the context's own.
    for items in (1, 2):
        context = {
            "amount": amount,
            "currency": currency,
            "merchant_id": recipient,
            "region": "US",
            "items": [{"sku": f"s{i}", "qty": 1} for i in range(items)],
        }
        context |= {k: v for k, v in (("memo", memo), ("idempotency_key", key)) if v is not None}
        assert l4_guard(spent).check_context(context).codes == pack_order(
            key=key,
            recipient=recipient,
            amount=amount,
            memo=memo,
            currency=currency,
            spent=spent,
            items=items,
        )


def test_a_missing_key_beside_a_forbidden_payee_is_two_reasons_in_words() -> None:
    decision = l4_guard(0).check_call("transfer_funds", {"recipient": MALLORY, "amount": 5})
    assert [r.to_dict() for r in decision.reasons] == [
        {
            "code": INVALID_CONTEXT,
            "message": "idempotency_key is required by the passport",
            "rule": "idempotency_required",
        },
        {
            "code": MERCHANT_FORBIDDEN,
            "message": "Merchant 'mallory@evil.test' not in allowlist",
            "rule": "merchant_allowed",
        },
        {
            "code": APPROVAL_CODE_MISSING,
            "message": "Memo lacks an approval code APC-YYYY-NNNN",
            "rule": "x_vault_memo_approval_code",
        },
    ]
    assert decision.transfer == Transfer(MALLORY, 500, "USD")
    assert decision.executes is None


@pytest.mark.parametrize("level", [4, 5])
@pytest.mark.parametrize("status", ["active", "suspended"])
@pytest.mark.parametrize("expired", [False, True])
def test_a_passport_that_authorizes_nothing_is_its_own_whole_answer(
    level: int, status: str, expired: bool
) -> None:
    data = json.loads((SHIPPED / f"level-{level}.json").read_text())
    data["status"] = status
    if expired:
        data |= {"never_expires": False, "expires_at": "2026-01-01T00:00:00Z"}
    g = Guard(passport_from_data(data), clock=lambda: NOON)
    expected = (
        *((PASSPORT_SUSPENDED,) if status != "active" else ()),
        *((PASSPORT_EXPIRED,) if expired else ()),
        *((UNKNOWN_CAPABILITY,) if level == 5 else ()),
    )
    # Level 4's limits would deny this call five ways; none of them is said when the
    # passport itself authorizes nothing, since no call could pass.
    bad = {"recipient": MALLORY, "amount": 5000}
    context = {**CONTEXT, "merchant_id": MALLORY, "amount": 500_000}
    assert g.check_call("transfer_funds", bad).codes == (
        expected
        or pack_order(
            key=None, recipient=MALLORY, amount=500_000, memo=None, currency="USD", spent=0
        )
    )
    assert g.check_context(context).codes == (
        expected
        or pack_order(
            key=None, recipient=MALLORY, amount=500_000, memo=None, currency="USD", spent=0
        )
    )


# -- look-alike recipients -------------------------------------------------------------------

LOOKALIKES = [
    "Audit@aport-vault.com",
    "AUDIT@APORT-VAULT.COM",
    "audit@Aport-Vault.com",
    "audіt@aport-vault.com",  # Cyrillic i
    "аudit@aport-vault.com",  # Cyrillic a
    "audit@aport-vauIt.com",  # capital I for l
    "audit@aport-vau1t.com",
    "audit@aport–vault.com",  # en dash
    "ａｕｄｉｔ@aport-vault.com",  # fullwidth
    "audit@aport-vault.com.evil.com",
    "audit@aport-vault.co",
    "audit@aport-vault.com@evil.com",
    "evil.com#audit@aport-vault.com",
    "audit+x@aport-vault.com",
    "audit@aport-vault.com ",
    " audit@aport-vault.com",
    "audit@aport-vault.com\n",
    "audit@aport-vault.com\t",
    "audit\u200b@aport-vault.com",  # zero-width space
    "audit@aport-vault.com\u200d",  # zero-width joiner
    "\ufeffaudit@aport-vault.com",  # BOM
    "audit@aport-vault.com\u202e",  # right-to-left override
    "audit@aport-vault.com\x00",
    "audit@aport-vault.com\u00a0",  # no-break space
]


@pytest.mark.parametrize("recipient", LOOKALIKES)
def test_lookalike_recipients_are_denied(level_guard: dict[int, Guard], recipient: str) -> None:
    decision = level_guard[4].check_call("transfer_funds", l4_call(recipient))
    assert not decision.allow
    assert decision.executes is None
    assert decision.codes[0] in {MERCHANT_FORBIDDEN, INVALID_CONTEXT}
    invisible = recipient != recipient.strip() or not recipient.isprintable()
    assert decision.codes == ((INVALID_CONTEXT,) if invisible else (MERCHANT_FORBIDDEN,))


# Printable to Python, but they draw nothing: at the wildcard level, where any payee
# goes, `rent@aport-vault.com\u3164` would pay what reads as the real payee.
BLANKS = ["\u3164", "\u115f", "\u1160", "\uffa0", "\u2800", "\u034f", "\u17b4", "\ufe0f"]
BLANKS += ["\U000e0100"]  # a variation selector from the supplement


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize("field", ["recipient", "memo", "idempotency_key"])
def test_characters_that_draw_nothing_are_refused_in_every_text(
    level_guard: dict[int, Guard], blank: str, field: str
) -> None:
    assert blank.isprintable()  # what Python's own test lets through
    call: dict[str, Any] = {"recipient": "rent@aport-vault.com", "amount": 5}
    call[field] = (call.get(field) or "order-12345678") + blank
    decision = level_guard[1].check_call("transfer_funds", call)
    assert (decision.allow, decision.codes, decision.executes) == (False, (INVALID_CONTEXT,), None)
    code = f"\\u{ord(blank):04x}" if ord(blank) <= 0xFFFF else f"\\U{ord(blank):08x}"
    written = f"{call[field][: -len(blank)]}{code}"
    assert decision.reasons[0].message == (
        f"{field} contains control or invisible characters: '{written}'"
    )
    assert shown(call[field]) == written
    assert not visible(call[field]) and visible(call[field][: -len(blank)])


# -- amount tricks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "amount",
    [
        "1e3",
        "100",
        1e309,
        float("inf"),
        float("-inf"),
        float("nan"),
        -5,
        0,
        0.0,
        -0.0,
        0.001,
        500.005,
        10.999,
        True,
        False,
        None,
        [100],
        {"value": 100},
        Decimal("NaN"),
        Decimal("sNaN"),
        Decimal("1.000000000000000000000000000001"),
        Decimal("1E+400"),
        Decimal("1E-400"),
        10**40,
    ],
)
def test_unreadable_amounts_are_invalid_context(
    level_guard: dict[int, Guard], amount: object
) -> None:
    decision = level_guard[1].check_call(
        "transfer_funds", {"recipient": "x@y.test", "amount": amount}
    )
    assert decision.codes == (INVALID_CONTEXT,), decision
    assert decision.executes is None


@pytest.mark.parametrize(
    ("amount", "minor"),
    [
        (1, 100),
        (0.01, 1),
        (0.1, 10),
        (19.99, 1999),
        (1e3, 100_000),
        (Decimal("500.010"), 50_001),
        (Decimal("1E+2"), 10_000),
        (499.99, 49_999),
        (50_000, 5_000_000),
    ],
)
def test_readable_amounts_convert_exactly(
    level_guard: dict[int, Guard], amount: object, minor: int
) -> None:
    decision = level_guard[1].check_call(
        "transfer_funds", {"recipient": "x@y.test", "amount": amount}
    )
    assert decision.executes == Transfer("x@y.test", minor, "USD")


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('{"recipient": "savings@aport-vault.com", "amount": 500.005}', INVALID_CONTEXT),
        (
            '{"recipient": "savings@aport-vault.com", "amount": 1.000000000000000000001}',
            INVALID_CONTEXT,
        ),
        ('{"recipient": "savings@aport-vault.com", "amount": NaN}', INVALID_CONTEXT),
        ('{"recipient": "savings@aport-vault.com", "amount": Infinity}', INVALID_CONTEXT),
        ('{"recipient": "savings@aport-vault.com", "amount": 1e999}', INVALID_CONTEXT),
        (
            '{"recipient": "savings@aport-vault.com", "recipient": "evil@x.test", "amount": 5}',
            INVALID_CONTEXT,
        ),
        ('{"recipient": "savings@aport-vault.com", "amount": 5, "bypass": true}', INVALID_CONTEXT),
        ('{"recipient": "savings@aport-vault.com", "amount": 5', INVALID_CONTEXT),
        ('["savings@aport-vault.com", 5]', INVALID_CONTEXT),
        (
            '{"recipient": "savings@aport-vault.com", "amount": 5, "currency": "usd"}',
            INVALID_CONTEXT,
        ),
        (
            '{"recipient": "savings@aport-vault.com", "amount": 5, "currency": "XXX"}',
            INVALID_CONTEXT,
        ),
        (
            '{"recipient": "savings@aport-vault.com", "amount": 5, "currency": "EUR"}',
            CURRENCY_UNSUPPORTED,
        ),
        ('{"recipient": "savings@aport-vault.com", "amount": 5, "memo": 7}', INVALID_CONTEXT),
        (
            '{"recipient": "savings@aport-vault.com", "amount": 5, "idempotency_key": "short"}',
            INVALID_CONTEXT,
        ),
        ('{"recipient": ["savings@aport-vault.com"], "amount": 5}', INVALID_CONTEXT),
        ('{"amount": 5}', INVALID_CONTEXT),
        ("", INVALID_CONTEXT),
        ("\xff", INVALID_CONTEXT),
    ],
)
def test_json_text_arguments(level_guard: dict[int, Guard], text: str, code: str) -> None:
    decision = level_guard[3].check_call("transfer_funds", text)
    assert decision.codes == (code,)
    assert decision.executes is None


def test_json_text_arguments_allowed_when_clean(level_guard: dict[int, Guard]) -> None:
    text = '{"recipient": "savings@aport-vault.com", "amount": 499.99, "memo": "weekly"}'
    assert level_guard[3].check_call("transfer_funds", text).executes == Transfer(
        "savings@aport-vault.com", 49_999, "USD", "weekly"
    )


# -- sequences: idempotency and daily caps ----------------------------------------------------


def test_idempotency_key_replay_is_denied(level_guard: dict[int, Guard]) -> None:
    g = level_guard[4]
    assert g.check_call("transfer_funds", l4_call(amount=100)).allow
    assert g.check_call("transfer_funds", l4_call(amount=100)).codes == (IDEMPOTENCY_CONFLICT,)
    assert g.check_call("transfer_funds", l4_call(amount=1, idempotency_key="audit-key-0002")).allow


def test_denied_call_does_not_burn_its_key_or_the_cap(level_guard: dict[int, Guard]) -> None:
    g = level_guard[4]
    assert g.check_call("transfer_funds", l4_call(amount=1_500)).codes == (LIMIT_EXCEEDED,)
    assert g.check_call("transfer_funds", l4_call(amount=1_000)).allow
    assert g.ledger.daily == {(datetime.now(UTC).date(), "USD"): 100_000}


def test_daily_cap_splitting_is_stopped(level_guard: dict[int, Guard]) -> None:
    g = level_guard[3]  # $500 per transfer, $1,000 a day
    outcomes = [
        g.check_call(
            "transfer_funds", {"recipient": "savings@aport-vault.com", "amount": 99.99}
        ).allow
        for _ in range(12)
    ]
    assert outcomes == [True] * 10 + [False] * 2
    assert g.check_call(
        "transfer_funds", {"recipient": "savings@aport-vault.com", "amount": 0.1}
    ).allow
    last = g.check_call("transfer_funds", {"recipient": "savings@aport-vault.com", "amount": 0.01})
    assert last.codes == (LIMIT_EXCEEDED,)
    assert sum(g.ledger.daily.values()) == 100_000


def test_daily_cap_resets_on_a_new_day() -> None:
    now = [datetime(2026, 11, 30, 23, 0, tzinfo=UTC)]
    g = Guard(
        load_passport(SHIPPED / "level-3.json"),
        clock=lambda: now[0],
    )
    call = {"recipient": "savings@aport-vault.com", "amount": 500}
    assert [g.check_call("transfer_funds", call).allow for _ in range(3)] == [True, True, False]
    now[0] += timedelta(hours=2)
    assert g.check_call("transfer_funds", call).allow


def test_judge_call_does_not_touch_the_ledger(level_guard: dict[int, Guard]) -> None:
    g = level_guard[3]
    for _ in range(5):
        assert g.judge_call(
            "transfer_funds", {"recipient": "savings@aport-vault.com", "amount": 500}
        ).allow
    assert g.ledger.daily == {} and g.ledger.keys == set()


# -- fail closed ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["send_money", "transfer_funds ", "Transfer_Funds", None, 3, ["transfer_funds"]]
)
def test_unknown_tools_are_denied(level_guard: dict[int, Guard], name: object) -> None:
    decision = level_guard[1].check_call(name, {"recipient": "x@y.test", "amount": 1})
    assert decision.codes == (EVALUATION_ERROR,)


def test_an_exception_inside_the_engine_denies(
    level_guard: dict[int, Guard], monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(Guard, "_judge", boom)
    decision = level_guard[1].check_call("transfer_funds", {"recipient": "x@y.test", "amount": 1})
    assert (decision.allow, decision.codes, decision.executes) == (False, (EVALUATION_ERROR,), None)
    assert level_guard[1].check_context({"amount": 1}).codes == (INVALID_CONTEXT,)


def test_arguments_that_raise_on_access_deny(level_guard: dict[int, Guard]) -> None:
    class Hostile(dict[str, object]):
        def __iter__(self):  # type: ignore[no-untyped-def]
            raise RuntimeError("no")

    decision = level_guard[1].check_call("transfer_funds", Hostile(recipient="x@y.test", amount=1))
    assert decision.codes == (INVALID_CONTEXT,)


class Liar(str):
    """Equal to everything: would pass an allowlist check by `==` or `in`."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class Slippery(float):
    def __repr__(self) -> str:
        return "1"


@pytest.mark.parametrize(
    "args",
    [
        {"recipient": Liar("attacker@evil.test"), "amount": 100},
        {"recipient": "savings@aport-vault.com", "amount": 100, "currency": Liar("EUR")},
        {"recipient": "savings@aport-vault.com", "amount": Slippery(400.5)},
        {"recipient": "savings@aport-vault.com", "amount": 100, "memo": Liar("m")},
        {Liar("recipient"): "savings@aport-vault.com", "amount": 100},
    ],
    ids=["recipient", "currency", "amount", "memo", "key"],
)
def test_subclasses_of_plain_types_are_refused(
    level_guard: dict[int, Guard], args: dict[str, object]
) -> None:
    decision = level_guard[3].check_call("transfer_funds", args)
    assert (decision.allow, decision.codes) == (False, (INVALID_CONTEXT,))


@pytest.mark.parametrize(
    "text",
    [
        '{"recipient": "savings@aport-vault.com", "amount": 1e99999999999999999999}',
        '{"recipient": "savings@aport-vault.com", "amount": 1e-99999999999999999999}',
        '{"recipient": "savings@aport-vault.com", "amount": 1.' + "0" * 5000 + "}",
        '{"recipient": "savings@aport-vault.com", "amount": 1, "memo": '
        + "[" * 100_000
        + "]" * 100_000
        + "}",
    ],
    ids=["huge-exponent", "tiny-exponent", "5000-digits", "deep"],
)
def test_numbers_decimal_cannot_hold_are_invalid_context(
    level_guard: dict[int, Guard], text: str
) -> None:
    assert level_guard[3].check_call("transfer_funds", text).codes == (INVALID_CONTEXT,)


def test_the_pack_minimum_assurance_cannot_be_lowered() -> None:
    data = _passport(assurance_level="L1")
    data["limits"]["payments.charge"]["require_assurance_at_least"] = "L0"
    g = Guard(passport_from_data(data))
    call = {"recipient": "rent@aport-vault.com", "amount": 1}
    assert g.check_call("transfer_funds", call).codes == ("oap.assurance_insufficient",)


def _passport(**changes: Any) -> dict[str, Any]:
    data = json.loads((SHIPPED / "level-2.json").read_text())
    data.update(changes)
    return data


@pytest.mark.parametrize("status", ["suspended", "revoked", "draft"])
def test_inactive_passport_denies(status: str) -> None:
    g = Guard(passport_from_data(_passport(status=status)))
    assert g.check_call(
        "transfer_funds", {"recipient": "rent@aport-vault.com", "amount": 1}
    ).codes == (PASSPORT_SUSPENDED,)


def test_expired_passport_denies() -> None:
    data = _passport(expires_at="2026-01-01T00:00:00Z")
    del data["never_expires"]
    g = Guard(passport_from_data(data))
    assert g.check_call(
        "transfer_funds", {"recipient": "rent@aport-vault.com", "amount": 1}
    ).codes == (PASSPORT_EXPIRED,)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[" * 100_000, "not valid JSON: nested too deeply"),
        (
            '{"recipient": "a", "amount": 1.5e99999999999999999999}',
            "not valid JSON: number out of range",
        ),
        ('{"recipient": "a", "amount": ' + "9" * 5000 + "}", "not valid JSON: number out of range"),
        (b'{"recipient": "\xff"}', "not valid JSON: not UTF-8"),
        ('{"recipient": "a", "amount": ', "not valid JSON: Expecting value at column 30"),
        ('{"recipient": "a", "amount": NaN}', "NaN is not a JSON number"),
        ('{"recipient": "a", "recipient": "b"}', "duplicate key 'recipient'"),
        ('{"recipient": "a", "\\u001b": 1, "\\u001b": 2}', "duplicate key '\\x1b'"),
        ('{"recipient": "\x1b"}', "not valid JSON: Invalid control character at column 16"),
        # A tiny place is refused before the exact ratio, which would build 10**999999999.
        (
            '{"recipient": "rent@aport-vault.com", "amount": 1E-999999999}',
            "amount 1E-999999999 has more than 2 decimal places",
        ),
        (
            '{"recipient": "rent@aport-vault.com", "amount": 100E-42}',
            "amount 1.00E-40 has more than 2 decimal places",
        ),
    ],
)
def test_every_unreadable_argument_text_is_denied_in_words(
    level_guard: dict[int, Guard], raw: str | bytes, message: str
) -> None:
    decision = level_guard[3].judge_call("transfer_funds", raw)
    assert (decision.allow, decision.codes) == (False, ("oap.invalid_context",))
    assert decision.reasons[0].message == message


@pytest.mark.parametrize(
    ("amount", "message"),
    [
        (Decimal("1" + "0" * 200_000 + ".0"), f"amount 1{'0' * 56}... is out of range"),
        (Decimal("-1" + "0" * 200_000), f"amount must be positive, got -1{'0' * 55}..."),
        (Decimal("4" + "0" * 16), "amount 40000000000000000 is out of range"),
    ],
)
def test_an_amount_in_a_message_is_cut_to_a_bounded_length(
    level_guard: dict[int, Guard], amount: Decimal, message: str
) -> None:
    decision = level_guard[3].judge_call(
        "transfer_funds", {"recipient": "rent@aport-vault.com", "amount": amount}
    )
    assert (decision.allow, decision.codes) == (False, ("oap.invalid_context",))
    assert decision.reasons[0].message == message


@pytest.mark.parametrize(
    ("transfer", "message"),
    [
        (Transfer(RENT, -1_000_000_000, "USD"), "amount_minor -1000000000 is not a positive"),
        (Transfer(RENT, 0, "USD"), "amount_minor 0 is not a positive"),
        (Transfer(RENT, 1.5, "USD"), "amount_minor 1.5 is not a positive"),  # type: ignore[arg-type]
        (Transfer(RENT, True, "USD"), "amount_minor True is not a positive"),  # type: ignore[arg-type]
        (Transfer(RENT, 10**18, "USD"), "amount_minor 1000000000000000000 is not a positive"),
        (Transfer(RENT, 100, "usd"), "currency 'usd' is not a known ISO 4217 code"),
        (Transfer(RENT + "\u3164", 100, "USD"), "recipient contains control or invisible"),
        (Transfer(RENT, 100, "USD", "m\x1b"), "memo contains control or invisible"),
        (Transfer(RENT, 100, "USD", None, "short"), "idempotency_key must be 8 to 128"),
    ],
)
def test_a_transfer_made_elsewhere_is_held_to_what_the_reader_makes(
    level_guard: dict[int, Guard], transfer: Transfer, message: str
) -> None:
    # judge_transfer and commit are public: a negative amount was allowed at Level 1 and,
    # committed, cancelled the daily cap.
    g = Guard(level_guard[1].passport)
    decision = g.judge_transfer(transfer)
    assert (decision.allow, decision.codes) == (False, (INVALID_CONTEXT,))
    assert decision.reasons[0].message.startswith(message)
    with pytest.raises(Unreadable, match="^" + re.escape(message)):
        g.commit(transfer)
    assert g.ledger.daily == {}
    assert g.judge_transfer(Transfer(RENT, 100, "USD")).codes == (ALLOWED,)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"shipping_Country": "BR"}, "context has unknown field(s) 'shipping_Country'"),
        ({"items": [{"sku": "S", "qty": 1, "Category": "weapons"}]}, "items[0] has unknown"),
        ({"x\x1b": 1, "a": 2}, "context has unknown field(s) 'a', 'x\\x1b'"),
    ],
)
def test_a_context_field_the_pack_does_not_name_is_refused_not_skipped(
    level_guard: dict[int, Guard], edit: dict[str, Any], message: str
) -> None:
    context = CONTEXT
    g = Guard(level_guard[3].passport)
    assert g.check_context(context).codes == (ALLOWED,)
    decision = g.check_context(context | edit)
    assert (decision.allow, decision.codes) == (False, (INVALID_CONTEXT,))
    assert decision.reasons[0].message.startswith(message)


# -- which rule: a code several rules share says which one denied -----------------------------


def test_every_code_names_the_rules_that_give_it() -> None:
    from pytest_vault.guard.engine import CODE_RULES, REASON_CODES, SHARED_CODES

    assert list(CODE_RULES) == [c for c in REASON_CODES if c != ALLOWED]
    assert SHARED_CODES == {LIMIT_EXCEEDED, "oap.region_blocked", INVALID_CONTEXT}
    assert CODE_RULES[LIMIT_EXCEEDED] == ("per_tx_amount_cap", "item_count_cap", "daily_cap_check")


def test_a_limit_denial_says_which_limit_and_the_days_total(level_guard: dict[int, Guard]) -> None:
    guard = Guard(level_guard[3].passport)
    said = []
    for amount in (501, 450, 450, 101, 100):
        decision = guard.check_call("transfer_funds", {"recipient": RENT, "amount": amount})
        said.append([(r.code, r.rule, r.message) for r in decision.reasons])
    over_tx = (
        LIMIT_EXCEEDED,
        "per_tx_amount_cap",
        "Amount exceeds the per-transfer limit of 500.00 USD",
    )
    forbidden = (
        MERCHANT_FORBIDDEN,
        "merchant_allowed",
        "Merchant 'rent@aport-vault.com' not in allowlist",
    )
    assert said[0] == [over_tx, forbidden]
    guard = Guard(level_guard[3].passport)
    for amount in (450, 450):
        assert guard.check_call(
            "transfer_funds", {"recipient": "savings@aport-vault.com", "amount": amount}
        ).allow
    decision = guard.check_call(
        "transfer_funds", {"recipient": "savings@aport-vault.com", "amount": 101}
    )
    assert [r.to_dict() for r in decision.reasons] == [
        {
            "code": LIMIT_EXCEEDED,
            "message": "Daily cap of 1,000.00 USD exceeded: 900.00 USD already allowed today",
            "rule": "daily_cap_check",
        }
    ]
    assert [r.label for r in decision.reasons] == ["oap.limit_exceeded[daily_cap_check]"]
    assert decision.to_dict()["reasons"][0]["rule"] == "daily_cap_check"
    # The same words for the same refusal: kept, and bounded.
    again = guard.check_call(
        "transfer_funds", {"recipient": "savings@aport-vault.com", "amount": 200}
    )
    assert again.reasons == decision.reasons
    # Both limits at once: each named.
    both = guard.check_call(
        "transfer_funds", {"recipient": "savings@aport-vault.com", "amount": 600}
    )
    assert [r.label for r in both.reasons] == [
        "oap.limit_exceeded[per_tx_amount_cap]",
        "oap.limit_exceeded[daily_cap_check]",
    ]


def test_item_counts_regions_and_countries_each_say_which_rule() -> None:
    data = json.loads((SHIPPED / "level-3.json").read_text())
    data["limits"]["payments.charge"].update(
        allowed_countries=["US"], blocked_categories=["gambling"]
    )
    guard = Guard(passport_from_data(data))
    context = {
        **CONTEXT,
        "merchant_id": "savings@aport-vault.com",
        "amount": 100,
        "currency": "USD",
        "region": "GB",
        "shipping_country": "FR",
        "items": [
            {"sku": "a", "qty": 1, "price": 50, "category": "gambling"},
            {"sku": "b", "qty": 1, "price": 50},
        ],
    }
    context.pop("idempotency_key", None)
    decision = guard.check_context(context)
    assert [(r.label, r.message) for r in decision.reasons] == [
        ("oap.limit_exceeded[item_count_cap]", "Item count 2 exceeds the maximum of 1"),
        ("oap.region_blocked[region_in]", "Region 'GB' not allowed"),
        ("oap.region_blocked[country_allowed]", "Shipping country 'FR' not allowed"),
        ("oap.category_blocked", "Item category 'gambling' is blocked"),
    ]


def test_an_unreadable_call_and_a_missing_key_are_told_apart(level_guard: dict[int, Guard]) -> None:
    from pytest_vault.guard.engine import deny

    unreadable = level_guard[4].check_call("transfer_funds", {"recipient": AUDIT, "amount": "5"})
    keyless = level_guard[4].check_call(
        "transfer_funds", {"recipient": AUDIT, "amount": 5, "memo": "APC-2026-0001"}
    )
    assert [r.label for r in unreadable.reasons] == ["oap.invalid_context[context_readable]"]
    assert [r.label for r in keyless.reasons] == ["oap.invalid_context[idempotency_required]"]
    # A denial made outside the engine gets its code's usual rule, or none.
    assert deny(INVALID_CONTEXT, "x").reasons[0].rule == "context_readable"
    assert deny(EVALUATION_ERROR, "x").reasons[0].rule == "evaluation"
    assert deny("guard.denied", "x").reasons[0].to_dict() == {
        "code": "guard.denied",
        "message": "x",
    }
