"""Property tests: whatever arrives, the guard never raises and never allows by accident."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_vault.guard.engine import APPROVAL_CODE, Guard
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import WILDCARD, load_passport

PASSPORTS = {n: load_passport(SHIPPED / f"level-{n}.json") for n in range(1, 6)}
PERMITTED = sorted(
    {
        r
        for p in PASSPORTS.values()
        for r in (p.charge_limits.allowed_merchant_ids if p.charge_limits else [])
    }
    - {WILDCARD}
)

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.decimals(), st.text(max_size=20)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)

recipient = st.one_of(
    st.sampled_from(PERMITTED),
    st.sampled_from(PERMITTED).map(str.upper),
    st.sampled_from(PERMITTED).map(lambda r: r + " "),
    st.sampled_from(PERMITTED).map(lambda r: r.replace("a", "\u0430", 1)),
    st.sampled_from(PERMITTED).map(lambda r: r + ".evil.test"),
    st.text(max_size=40),
    json_value,
)
amount = st.one_of(
    st.integers(min_value=-10, max_value=10**7),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.decimals(min_value=0, max_value=3000, places=3),
    st.text(max_size=10),
    json_value,
)
memo = st.one_of(
    st.none(),
    st.just("APC-2026-0142"),
    st.from_regex(r"APC-\d{4}-\d{4}", fullmatch=True),
    st.text(max_size=30),
    json_value,
)
key = st.one_of(
    st.none(),
    st.text(min_size=0, max_size=20),
    st.sampled_from(["audit-key-0001", "audit-key-0002"]),
    json_value,
)
currency = st.one_of(
    st.just("USD"), st.sampled_from(["EUR", "usd", "JPY", "US", "XXX"]), json_value
)


@st.composite
def transfer_args(draw: st.DrawFn) -> dict[str, Any]:
    args: dict[str, Any] = {"recipient": draw(recipient), "amount": draw(amount)}
    for name, strategy in (("currency", currency), ("memo", memo), ("idempotency_key", key)):
        if draw(st.booleans()):
            args[name] = draw(strategy)
    if draw(st.integers(0, 9)) == 0:
        args[draw(st.text(max_size=10))] = draw(json_value)
    return args


@st.composite
def plausible_args(draw: st.DrawFn) -> dict[str, Any]:
    """Calls a compliant agent might make, near the limits, so allows are common."""
    return {
        "recipient": draw(st.sampled_from(PERMITTED)),
        "amount": draw(
            st.decimals(min_value="0.01", max_value="3000", places=2) | st.integers(1, 3000)
        ),
        "memo": draw(st.sampled_from(["APC-2026-0142", "rent APC-2025-9999", "no code"])),
        "idempotency_key": draw(st.sampled_from(["key-00000001", "key-00000002", "key-00000003"])),
    }


@settings(max_examples=400, deadline=None)
@given(
    level=st.sampled_from(sorted(PASSPORTS)),
    calls=st.lists(
        st.one_of(plausible_args(), transfer_args(), json_value, st.text(max_size=80)),
        min_size=1,
        max_size=12,
    ),
)
def test_allowed_calls_always_respect_the_passport(level: int, calls: list[Any]) -> None:
    passport = PASSPORTS[level]
    limits = passport.charge_limits
    guard = Guard(passport)
    spent, keys = 0, set()
    for args in calls:
        decision = guard.check_call("transfer_funds", args)  # must not raise
        if not decision.allow:
            assert decision.executes is None
            continue
        t = decision.executes
        assert t is not None and limits is not None
        allowed = limits.allowed_merchant_ids
        assert WILDCARD in allowed or t.recipient in allowed
        cap = limits.currency_limits[t.currency]
        assert 1 <= t.amount_minor <= cap.max_per_tx
        spent += t.amount_minor
        assert cap.daily_cap is None or spent <= cap.daily_cap
        if limits.x_vault_memo_approval_code_required:
            assert t.memo is not None and APPROVAL_CODE.search(t.memo)
        if limits.idempotency_required:
            assert t.idempotency_key is not None and t.idempotency_key not in keys
        if t.idempotency_key is not None:
            keys.add(t.idempotency_key)
        # What executes is what the model said, exactly, nothing substituted.
        assert isinstance(args, dict) and t.recipient == args["recipient"]


@settings(max_examples=300, deadline=None)
@given(level=st.sampled_from(sorted(PASSPORTS)), args=transfer_args())
def test_json_text_and_object_forms_agree(level: int, args: dict[str, Any]) -> None:
    try:
        text = json.dumps(args, default=str)
    except ValueError:
        return
    by_text = Guard(PASSPORTS[level]).check_call("transfer_funds", text)
    if by_text.allow:
        by_object = Guard(PASSPORTS[level]).check_call("transfer_funds", json.loads(text))
        assert by_object.executes == by_text.executes


@settings(max_examples=300, deadline=None)
@given(name=st.one_of(st.text(max_size=20), json_value), args=json_value, context=json_value)
def test_nothing_raises(name: Any, args: Any, context: Any) -> None:
    guard = Guard(PASSPORTS[1])
    decision = guard.check_call(name, args)
    assert decision.allow is False or name == "transfer_funds"
    assert guard.check_context(context).allow is False or isinstance(context, dict)
