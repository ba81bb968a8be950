"""The amount judged is the amount paid, whatever the caller's `decimal` context: precision,
rounding, traps or exponent range never reach what the guard reads, judges, records,
says or hands to the protected function."""

from __future__ import annotations

import decimal
import json
import threading
from collections.abc import Iterator
from decimal import Context, Decimal, localcontext
from pathlib import Path
from typing import Any

import pytest

from pytest_vault.guard import Guard, PaymentDenied
from pytest_vault.guard.engine import Guard as Engine
from pytest_vault.guard.engine import Transfer, Unreadable, parse_json_object, read_transfer
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import load_passport
from pytest_vault.guard.production import major_units

LEVEL3 = SHIPPED / "level-3.json"  # $500 a transfer, $1,000 a day
SAVINGS = "savings@aport-vault.com"
EVERY_SIGNAL = [
    decimal.Clamped,
    decimal.DivisionByZero,
    decimal.FloatOperation,
    decimal.Inexact,
    decimal.InvalidOperation,
    decimal.Overflow,
    decimal.Rounded,
    decimal.Subnormal,
    decimal.Underflow,
]

# Contexts a caller may have set, each a mistake someone makes or a setting someone needs.
CONTEXTS = {
    "prec=1": Context(prec=1),
    "prec=2": Context(prec=2),  # "two decimal places"
    "prec=3 floor": Context(prec=3, rounding=decimal.ROUND_FLOOR),
    "prec=4 up": Context(prec=4, rounding=decimal.ROUND_UP),
    "prec=2 ceiling": Context(prec=2, rounding=decimal.ROUND_CEILING),
    "prec=5 half-down": Context(prec=5, rounding=decimal.ROUND_HALF_DOWN),
    "prec=2 05up": Context(prec=2, rounding=decimal.ROUND_05UP),
    "Inexact and Rounded trapped": Context(traps=[decimal.Inexact, decimal.Rounded]),
    "prec=2, every signal trapped": Context(prec=2, traps=EVERY_SIGNAL),
    "nothing trapped": Context(traps=[]),  # an out-of-range number reads as NaN
    "capitals=0": Context(capitals=0),  # 1E+20 printed 1e+20
    "small exponents, trapped": Context(prec=3, Emax=3, Emin=-3, clamp=1, traps=EVERY_SIGNAL),
}


@pytest.fixture(params=list(CONTEXTS), ids=list(CONTEXTS))
def caller_context(request: pytest.FixtureRequest) -> Iterator[Context]:
    with localcontext(CONTEXTS[request.param]) as context:
        yield context


def exactly(amounts: list[object]) -> list[tuple[str, tuple[Any, ...]]]:
    """Amounts by value and by their digits: Decimal("5.0E+2") == 500 but is not 500.00."""
    return [(type(a).__name__, a.as_tuple() if isinstance(a, Decimal) else ()) for a in amounts]


def _protected(guard: Guard) -> tuple[Any, list[Decimal]]:
    paid: list[Decimal] = []

    @guard.protect
    def transfer_funds(
        recipient: str, amount: Decimal, currency: str, memo: object, idempotency_key: object
    ) -> Decimal:
        paid.append(amount)
        return amount

    return transfer_funds, paid


def test_protect_pays_the_amount_judged_in_the_callers_context(caller_context: Context) -> None:
    guard = Guard.load(LEVEL3, in_memory_ledger=True)
    transfer_funds, paid = _protected(guard)
    for amount in (499, 499, 2):  # $1,000 to the cent: the whole daily cap
        transfer_funds(SAVINGS, amount)
    with pytest.raises(PaymentDenied):  # and not a cent more
        transfer_funds(SAVINGS, 0.01)
    expected = [Decimal("499.00"), Decimal("499.00"), Decimal("2.00")]
    assert paid == expected
    assert exactly(list(paid)) == exactly(list(expected))
    assert [str(a) for a in paid] == ["499.00", "499.00", "2.00"]


def _multi_currency(folder: Path) -> Guard:
    """Level 1 (anyone), with JPY and KWD limits beside its USD ones."""
    data = json.loads((SHIPPED / "level-1.json").read_text())
    data["limits"]["payments.charge"]["currency_limits"] |= {
        "JPY": {"max_per_tx": 10**12, "daily_cap": 10**13},
        "KWD": {"max_per_tx": 10**12, "daily_cap": 10**13},
    }
    path = folder / "multi.json"
    path.write_text(json.dumps(data))
    return Guard.load(path, in_memory_ledger=True)


# (amount as the model wrote it, currency, what the function must receive, as text)
AMOUNTS = [
    (300.5, "USD", "300.50"),
    ("49999.99", "USD", "49999.99"),
    (12345.67, "USD", "12345.67"),
    (500, "JPY", "500"),
    (9876543210, "JPY", "9876543210"),
    (1.234, "KWD", "1.234"),
    ("98765.432", "KWD", "98765.432"),
]


def test_protect_pays_every_currency_exactly_in_the_callers_context(
    caller_context: Context, tmp_path: Path
) -> None:
    transfer_funds, paid = _protected(_multi_currency(tmp_path))
    for amount, currency, _ in AMOUNTS:
        written = Decimal(amount) if type(amount) is str else amount
        transfer_funds("anyone@example.com", written, currency)
    assert [(str(a), a.as_tuple()) for a in paid] == [
        (text, Decimal(text).as_tuple()) for _, _, text in AMOUNTS
    ]


@pytest.mark.parametrize("name", list(CONTEXTS))
def test_major_units_is_exact_in_any_context(name: str) -> None:
    cases = [(30050, "USD", "300.50"), (500, "JPY", "500"), (1234, "KWD", "1.234")]
    cases += [(10**17 + 1, "USD", "1000000000000000.01"), (1, "KWD", "0.001")]
    with localcontext(CONTEXTS[name]):
        got = [major_units(Transfer(SAVINGS, units, cur)) for units, cur, _ in cases]
    assert [(str(a), a.as_tuple()) for a in got] == [
        (text, Decimal(text).as_tuple()) for _, _, text in cases
    ]


def test_threads_with_different_contexts_are_each_paid_what_was_judged() -> None:
    guard = Guard.load(SHIPPED / "level-1.json", in_memory_ledger=True)  # $50,000 a transfer
    paid: dict[str, Decimal] = {}
    lock = threading.Lock()

    @guard.protect
    def transfer_funds(**values: Any) -> None:
        with lock:
            paid[values["memo"]] = values["amount"]

    start = threading.Barrier(len(CONTEXTS))
    errors: list[BaseException] = []

    def pay(name: str, dollars: int) -> None:
        try:
            with localcontext(CONTEXTS[name]):
                start.wait()
                for i in range(20):  # as floats, the way a model's JSON gives them
                    transfer_funds(SAVINGS, float(f"{dollars}.{i:02d}"), memo=f"{name} {i}")
        except Exception as exc:  # noqa: BLE001 - reported below, not lost in the thread
            errors.append(exc)

    amounts = {name: 12 + 37 * n for n, name in enumerate(CONTEXTS)}  # about $52,000 in all
    threads = [threading.Thread(target=pay, args=item) for item in amounts.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    expected = {
        f"{name} {i}": Decimal(f"{dollars}.{i:02d}")
        for name, dollars in amounts.items()
        for i in range(20)
    }
    assert {k: (str(v), v.as_tuple()) for k, v in paid.items()} == {
        k: (str(v), v.as_tuple()) for k, v in expected.items()
    }


# What the judging path reads: amounts of every shape, as objects and as the model's JSON.
ARGUMENTS: list[object] = [
    {"recipient": SAVINGS, "amount": amount}
    for amount in (
        499,
        499.99,
        0.1,
        300.5,
        Decimal("300.50"),
        Decimal("1E+2"),
        Decimal("500.005"),
        Decimal("1E+20"),
        Decimal("-0"),
        Decimal("sNaN"),
        Decimal("1.000000000000000000000000000001"),
        10**17,
        1e300,
        2**-1074,
    )
] + [
    f'{{"recipient": "savings@aport-vault.com", "amount": {text}}}'
    for text in (
        "499.99",
        "500.00",
        "500.001",
        "1e2",
        "1E+20",
        "1e-30",
        "123456789.123456789",
        "0.0000000000000000000000000000000001",
        "1e9999999999999999999999",
        "1e-9999999999999999999999",
        "1" + "0" * 30 + ".5",
        "0." + "0" * 50 + "1",
    )
]


def _decisions() -> list[dict[str, Any]]:
    """Each argument judged by a fresh engine and a fresh production guard."""
    passport = load_passport(LEVEL3)
    out = []
    for arguments in ARGUMENTS:
        out.append(Engine(passport).check_call("transfer_funds", arguments).to_dict(call=True))
        with Guard.load(LEVEL3, in_memory_ledger=True) as guard:
            out.append(guard.check("transfer_funds", arguments).to_dict(call=True))
    return out


def _read(text: str) -> str:
    try:
        return repr(read_transfer(parse_json_object(text)))
    except Unreadable as exc:
        return f"Unreadable: {exc}"


def test_decisions_and_their_words_do_not_depend_on_the_callers_context(
    caller_context: Context,
) -> None:
    with localcontext(Context()):  # the default context
        expected = _decisions()
        readings = [_read(a) for a in ARGUMENTS if isinstance(a, str)]
    assert _decisions() == expected
    assert [_read(a) for a in ARGUMENTS if isinstance(a, str)] == readings
    # The reference itself: $499, $499.99, $0.1, $300.5 (twice), $100 (twice), $500.00
    # allowed; what has too many places, is out of range or not positive, denied.
    assert [d["allow"] for d in expected[::2]] == [d["allow"] for d in expected[1::2]]
    assert [d["allow"] for d in expected[::2]].count(True) == 9


def test_the_strict_reader_is_exact_and_refuses_the_same_numbers_in_any_context(
    caller_context: Context,
) -> None:
    value = parse_json_object('{"a": 123456789.123456789, "b": 1E+20, "c": 5e-30}')
    assert [v.as_tuple() for v in value.values()] == [
        Decimal("123456789.123456789").as_tuple(),
        Decimal("1E+20").as_tuple(),
        Decimal("5E-30").as_tuple(),
    ]
    # Past what a Decimal holds: refused in words, never read as NaN (Decimal() did so
    # wherever InvalidOperation was not trapped).
    for number in ("1e9999999999999999999999", "1e-9999999999999999999999"):
        with pytest.raises(Unreadable) as refused:
            parse_json_object(f'{{"recipient": "{SAVINGS}", "amount": {number}}}')
        assert str(refused.value) == "not valid JSON: number out of range"
