"""Each fast path of the guard gives exactly what its general path gives."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pytest_vault.core.json import ARGUMENTS
from pytest_vault.guard.__main__ import _SAID_KEPT, _Session, decision_json
from pytest_vault.guard.engine import (
    MERCHANT_FORBIDDEN,
    Decision,
    Guard,
    Reason,
    Transfer,
    Unreadable,
    _decimal,
    _minor,
    read_transfer,
    to_minor,
)
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import load_passport


def general(value: object, digits: int) -> int | str:
    try:
        return to_minor(_decimal(value), digits)
    except Unreadable as exc:
        return f"refused: {exc}"


def fast(value: object, digits: int) -> int | str:
    try:
        return _minor(value, digits)
    except Unreadable as exc:
        return f"refused: {exc}"


cents = st.integers(1, 10**17).map(lambda n: n / 100)  # amounts as a model writes them
any_float = st.floats(min_value=1e-6, max_value=1e17, allow_nan=False)


@given(
    st.one_of(cents, any_float, st.integers(1, 10**18).map(lambda n: n / 1000)),
    st.sampled_from([0, 2, 3]),
)
@example(0.29, 2)  # 0.29 * 100 is 28.999999999999996 in floats
@example(1234567890123.45, 2)  # just under 10**15 minor units
@example(12345678901234.56, 2)  # at 10**15: the general path
@example(9999999999999998.0, 2)
@example(0.005, 2)
@example(5e-324, 2)
def test_float_amounts_read_as_the_decimal_path_reads_them(value: float, digits: int) -> None:
    assert fast(value, digits) == general(value, digits)


def test_the_float_cases_that_matter_have_exact_values() -> None:
    assert fast(0.29, 2) == 29
    assert fast(250.5, 2) == 25_050
    assert fast(1234567890123.45, 2) == 123_456_789_012_345
    assert fast(0.005, 2) == "refused: amount 0.005 has more than 2 decimal places"
    assert (
        fast(12.345, 3) == 12_345
        and fast(9.0, 0) == 9
        and fast(9.5, 0) == ("refused: amount 9.5 has more than 0 decimal places")
    )


text = st.text(st.characters(exclude_categories=()), max_size=12) | st.sampled_from(
    ["\ud800", "é\u202e", ""]
)
reasons = st.lists(st.builds(Reason, text, text), min_size=1, max_size=3).map(tuple)
transfers = st.none() | st.builds(
    Transfer, text, st.integers(0, 10**20), text, st.none() | text, st.none() | text
)


@given(st.booleans(), reasons, transfers, st.booleans())
def test_the_cli_writes_each_decision_as_json_dumps_would(
    allow: bool, why: tuple[Reason, ...], transfer: Transfer | None, call: bool
) -> None:
    decision = Decision(allow, why, transfer)
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    said: dict[tuple[Reason, ...], str] = {}
    expected = dumps(decision.to_dict(call=call))
    assert decision_json(decision, call=call) == expected
    # Kept reasons: the first answer fills the memo, the second reads it.
    assert decision_json(decision, call=call, said=said) == expected
    assert decision_json(decision, call=call, said=said) == expected
    assert list(said) == [why]


def test_the_reasons_said_are_kept_per_run_and_bounded() -> None:
    session = _Session(Guard(load_passport(SHIPPED / "level-3.json")))
    line = '{"tool": "transfer_funds", "arguments": {"recipient": "evil%d@x.test", "amount": 1}}'
    answers = [json.loads(session.answer((line % n).encode())) for n in range(2500)]
    assert [a["reasons"][0]["message"] for a in answers[::1000]] == [
        "Merchant 'evil0@x.test' not in allowlist",
        "Merchant 'evil1000@x.test' not in allowlist",
        "Merchant 'evil2000@x.test' not in allowlist",
    ]
    assert len(session.said) == 2500 % _SAID_KEPT


def _decoded(text: str) -> object:
    """What reading `text` gives: its value, or the exception's type and words."""
    try:
        return ("value", ARGUMENTS._decode(text))
    except Exception as exc:  # noqa: BLE001 - the comparison is the point
        return (type(exc).__name__, str(exc))


def _by_decoder(text: str) -> object:
    try:
        return ("value", ARGUMENTS._fast.decode(text))
    except Exception as exc:  # noqa: BLE001
        return (type(exc).__name__, str(exc))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)
space = st.sampled_from(["", " ", "\n", "\t", "\r\n", "  "])


# After the value: JSON's own whitespace is allowed; other blanks are "Extra data".
tails = st.sampled_from(["", "x", "]", "{}", ",", '"', "\r", "\u2028", "\x0c", "\xa0", "\u3000"])


@given(space, json_values, space, tails)
@example("", {"a": 1}, "", "")
@example(" ", {"a": 1}, "", "")
@example("", {"a": 1}, " ", "")
@example("", {"a": 1}, "", "x")
@example("", {"a": 1}, "", "\x0c")
@example("", {"a": 1}, "\r\n", "\u2028")
def test_the_strict_reader_reads_every_text_as_the_decoder_does(
    before: str, value: object, after: str, tail: str
) -> None:
    text = before + json.dumps(value) + after + tail
    assert _decoded(text) == _by_decoder(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "{",
        '{"a": 1, "a": 2}',
        '{"a": NaN}',
        '{"a": 1} {"b": 2}',
        '{"a": "\x01"}',
        "[1, 2,]",
        '"text"',
        "1e99999999999999999999",
        "[" * 100_000 + "]" * 100_000,
        '{"a": 1}\ufeff',
    ],
)
def test_the_strict_reader_refuses_in_the_decoders_words(text: str) -> None:
    assert _decoded(text) == _by_decoder(text)


def test_a_refused_payee_is_worded_the_same_every_time_and_the_words_kept_are_bounded() -> None:
    guard = Guard(load_passport(SHIPPED / "level-3.json"))
    first = guard.check_call("transfer_funds", {"recipient": "o'neil@x.test", "amount": 1})
    for n in range(3000):
        guard.check_call("transfer_funds", {"recipient": f"evil{n}@x.test", "amount": 1})
    again = guard.check_call("transfer_funds", {"recipient": "o'neil@x.test", "amount": 1})
    assert (
        first.reasons
        == again.reasons
        == (
            Reason(
                MERCHANT_FORBIDDEN, 'Merchant "o\'neil@x.test" not in allowlist', "merchant_allowed"
            ),
        )
    )
    assert len(guard._plan.refusals) == 3002 % 1024  # 3,002 refusals, kept 1,024 at most


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"recipient": "a@b.c", 1: 2, "zzz": 3}, "arguments must be a JSON object, got dict"),
        (
            {"zzz": 3, "recipient": "a@b.c", "amount": 1, "aaa": 1},
            "unknown argument(s) 'aaa', 'zzz'",
        ),
        ({"amount": Decimal("1.5")}, "recipient is required"),
    ],
)
def test_keys_are_refused_in_the_order_the_general_path_gave(
    arguments: dict[object, object], message: str
) -> None:
    with pytest.raises(Unreadable) as exc:
        read_transfer(arguments)
    assert str(exc.value) == message


def test_the_system_clock_reads_the_same_day_and_expiry_as_an_aware_datetime() -> None:
    from datetime import UTC, datetime, timedelta

    base = load_passport(SHIPPED / "level-2.json")
    now = datetime.now(UTC)
    call = {"recipient": "rent@aport-vault.com", "amount": 10, "idempotency_key": "k-00000001"}

    def under(expires: datetime | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        changes = {"never_expires": None, "expires_at": expires} if expires else {}
        passport = base.model_copy(update=changes)
        system, given = Guard(passport), Guard(passport, clock=lambda: datetime.now(UTC))
        return system.judge_call("transfer_funds", call).codes, given.judge_call(
            "transfer_funds", call
        ).codes

    assert under(now - timedelta(seconds=1)) == (("oap.passport_expired",),) * 2
    assert under(now + timedelta(hours=1)) == (("oap.allowed",),) * 2
    guard = Guard(base)
    guard.check_call("transfer_funds", call)
    # The ledger's day is the UTC date, as `datetime.now(UTC).date()` names it.
    assert guard.ledger.daily == {(datetime.now(UTC).date(), "USD"): 1000}


def general_transfer(arguments: dict[str, object]) -> Transfer | str:
    """`read_transfer` after the key checks, the general way: `_text` for each text."""
    from pytest_vault.guard.engine import MINOR_DIGITS, _text, memo_read

    try:
        key, memo = arguments.get("idempotency_key"), arguments.get("memo")
        memo = memo_read(memo) if isinstance(memo, str) else memo  # "" none, inner tab a space
        if key is not None:
            _text(key, "idempotency_key", max_len=128, min_len=8)
        recipient = _text(arguments["recipient"], "recipient", max_len=254)
        minor = to_minor(_decimal(arguments["amount"]), MINOR_DIGITS["USD"])
        if memo is not None:
            _text(memo, "memo", max_len=255)
        return Transfer(recipient, minor, "USD", memo, key)  # type: ignore[arg-type]
    except Unreadable as exc:
        return f"refused: {exc}"


def fast_transfer(arguments: dict[str, object]) -> Transfer | str:
    try:
        return read_transfer(arguments)
    except Unreadable as exc:
        return f"refused: {exc}"


edge_text = st.one_of(
    text,
    st.sampled_from([" a", "a ", "a" * 7, "a" * 8, "a" * 128, "a" * 129, "a" * 255, "a" * 256]),
    st.sampled_from(["a\u00a0", "\u2028x", "x\t", "x\ty", "", "ok@x.test", "APC-2026-0001"]),
    st.integers(),
    st.none(),
)


@given(edge_text, edge_text, edge_text, st.sampled_from([1, 0, 1.005, "1", 2.5]))
def test_the_three_texts_are_read_and_refused_as_text_reads_them(
    recipient: object, key: object, memo: object, amount: object
) -> None:
    arguments = {"recipient": recipient, "amount": amount, "memo": memo, "idempotency_key": key}
    assert fast_transfer(arguments) == general_transfer(arguments)


def test_a_call_with_every_text_wrong_is_refused_for_its_key_first() -> None:
    arguments = {"recipient": " a", "amount": 0, "memo": "\t", "idempotency_key": "short"}
    assert fast_transfer(arguments) == "refused: idempotency_key must be 8 to 128 characters long"
    del arguments["idempotency_key"]
    assert fast_transfer(arguments) == "refused: recipient has surrounding whitespace: ' a'"
    arguments["recipient"] = "a"
    assert fast_transfer(arguments) == "refused: amount must be positive, got 0"
    arguments["amount"] = 1
    assert fast_transfer(arguments) == "refused: memo has surrounding whitespace: '\\t'"


def test_the_day_cache_turns_over_at_utc_midnight() -> None:
    from datetime import date

    guard = Guard(load_passport(SHIPPED / "level-2.json"))
    assert guard._new_day(86_400 * 20_000 - 0.5) == date(2024, 10, 3)
    assert guard._day_cache == (86_400 * 19_999, 86_400 * 20_000, date(2024, 10, 3))
    assert guard._new_day(86_400 * 20_000) == date(2024, 10, 4)
