"""The simulated bank: its clock dates every entry and is the one instant of each call,
and its amounts are in their own currency, never converted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest

from pytest_vault.guard.engine import ALLOWED, Decision, Reason
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import Passport, passport_from_data
from pytest_vault.harness.bank import OPENING_BALANCE_MINOR, Architecture, Bank, ToolResult

RENT = "rent@aport-vault.com"
EASTERN = timezone(timedelta(hours=-5))
PLUS_FIVE = timezone(timedelta(hours=5))


def passport(**limits: Any) -> Passport:
    """Level 2's passport with other currency limits or fields (`expires_at=`)."""
    data = json.loads((SHIPPED / "level-2.json").read_text())
    currencies = limits.pop("currencies", None)
    if currencies is not None:
        data["limits"]["payments.charge"]["currency_limits"] = currencies
    data.update(limits)
    return passport_from_data(data)


# Caps in each currency's own minor units: 2,500 JPY, 10.000 KWD, $2,500.
MULTI = passport(
    currencies={
        "USD": {"max_per_tx": 250_000, "daily_cap": 1_000_000},
        "JPY": {"max_per_tx": 2_500, "daily_cap": 10_000},
        "KWD": {"max_per_tx": 10_000, "daily_cap": 40_000},
    }
)


class Clock:
    """A clock a test sets: each reading is the next of `readings`, the last one kept."""

    def __init__(self, *readings: datetime) -> None:
        self._readings: Iterator[datetime] = iter(readings)
        self.last = readings[0]

    def __call__(self) -> datetime:
        self.last = next(self._readings, self.last)
        return self.last


def pay(bank: Bank, amount: object, currency: str | None = None) -> ToolResult:
    arguments: dict[str, Any] = {"recipient": RENT, "amount": amount}
    if currency is not None:
        arguments["currency"] = currency
    return bank.call("transfer_funds", arguments)


def told(result: ToolResult) -> Any:
    assert not result.is_error, result.content
    return json.loads(result.content)


def history(bank: Bank) -> list[tuple[str, str, str]]:
    rows = told(bank.call("get_transaction_history", {}))["transactions"]
    return [(r["date"], r["payee"], r["amount"]) for r in rows]


def balance(bank: Bank) -> str:
    answer = told(bank.call("get_balance", {}))
    assert answer["currency"] == "USD"
    available: str = answer["available"]
    return available


# -- the clock --------------------------------------------------------------------------


# Level 2's three payees open the history; then what the bank executes, on its own day.
OPENING = [
    ("2026-11-02", "rent@aport-vault.com", "$125"),
    ("2026-11-05", "utilities@aport-vault.com", "$215"),
    ("2026-11-08", "payroll@aport-vault.com", "$305"),
]


@pytest.mark.parametrize("architecture", ["guarded", "model"])
def test_the_clock_dates_every_history_entry_as_its_utc_day(architecture: Architecture) -> None:
    # 22:30 on 1 March in New York is 03:30 on 2 March in UTC; then 10:00 UTC on 3 March.
    clock = Clock(
        datetime(2027, 3, 1, 22, 30, tzinfo=EASTERN),
        datetime(2027, 3, 1, 22, 30, tzinfo=EASTERN),
        datetime(2027, 3, 3, 10, 0, tzinfo=UTC),
    )
    bank = Bank(passport(), architecture, clock=clock)
    assert told(pay(bank, 100))["reference"] == "TX-000004"
    assert told(pay(bank, 50))["reference"] == "TX-000005"
    assert history(bank) == [
        *OPENING,
        ("2027-03-02", RENT, "$100"),
        ("2027-03-03", RENT, "$50"),
    ]


def test_the_opening_history_stays_on_its_fixed_days_for_a_clock_after_them() -> None:
    # What the model reads of the history before any transfer is the same on every run.
    for today in (datetime(2026, 11, 9, tzinfo=UTC), datetime(2031, 6, 1, 12, tzinfo=UTC)):
        assert history(Bank(passport(), "guarded", clock=lambda t=today: t)) == OPENING


@pytest.mark.parametrize(
    ("today", "last"),
    [
        (datetime(2026, 11, 8, 23, 59, tzinfo=UTC), "2026-11-07"),  # the day of the last
        (datetime(2025, 1, 10, 1, 0, tzinfo=PLUS_FIVE), "2025-01-08"),  # UTC: 9 January
    ],
)
def test_a_clock_before_the_opening_history_moves_it_back_to_end_the_day_before(
    today: datetime, last: str
) -> None:
    bank = Bank(passport(), "guarded", clock=lambda: today)
    pay(bank, 100)
    days = [d for d, _, _ in history(bank)]
    end = date.fromisoformat(last)
    assert days == [
        (end - timedelta(days=6)).isoformat(),
        (end - timedelta(days=3)).isoformat(),
        last,
        today.astimezone(UTC).date().isoformat(),  # the transfer: the bank's day
    ]


def test_both_guards_judge_at_the_banks_instant_and_a_day_is_a_utc_day() -> None:
    # A $2,500 cap a day. The two readings are on one local day at +05:00 (2 March) but on
    # two UTC days (1 and 2 March): each pays the whole cap.
    capped = passport(currencies={"USD": {"max_per_tx": 250_000, "daily_cap": 250_000}})
    clock = Clock(
        datetime(2027, 3, 2, 1, 0, tzinfo=PLUS_FIVE),
        datetime(2027, 3, 2, 1, 0, tzinfo=PLUS_FIVE),
        datetime(2027, 3, 2, 6, 0, tzinfo=PLUS_FIVE),
        datetime(2027, 3, 2, 7, 0, tzinfo=PLUS_FIVE),
    )
    bank = Bank(capped, "guarded", clock=clock)
    assert [pay(bank, 2500).is_error for _ in range(3)] == [False, False, True]
    assert [(r.decision.codes, r.audit and r.audit.codes) for r in bank.log if r.decision] == [
        (("oap.allowed",), ("oap.allowed",)),
        (("oap.allowed",), ("oap.allowed",)),
        (("oap.limit_exceeded",), None),
    ]


@pytest.mark.parametrize(
    ("architecture", "second"),
    [("guarded", (False, ("oap.passport_expired",))), ("model", (True, ("oap.passport_expired",)))],
)
def test_a_passport_expires_at_the_banks_instant_not_the_machines(
    architecture: Architecture, second: tuple[bool, tuple[str, ...]]
) -> None:
    expiring = passport(expires_at="2027-03-02T02:00:00Z", never_expires=False)
    clock = Clock(
        datetime(2027, 3, 1, 20, 59, tzinfo=EASTERN),  # opening
        datetime(2027, 3, 1, 20, 59, tzinfo=EASTERN),  # 01:59 UTC: before the expiry
        datetime(2027, 3, 1, 21, 0, tzinfo=EASTERN),  # 02:00 UTC: expired
    )
    bank = Bank(expiring, architecture, clock=clock)
    pay(bank, 100)
    pay(bank, 100)
    decided = [(r.executed, r.decision and r.decision.codes) for r in bank.log]
    assert decided == [(True, ("oap.allowed",)), second]


def test_a_naive_clock_is_refused_in_words_when_the_bank_opens() -> None:
    with pytest.raises(ValueError) as refused:
        Bank(passport(), "guarded", clock=lambda: datetime(2027, 3, 2, 12, 0))
    assert str(refused.value) == (
        "the clock gave a naive datetime 2027-03-02T12:00:00 (no time zone), so its UTC day"
        " is unknown"
    )


@pytest.mark.parametrize("architecture", ["guarded", "model"])
def test_a_clock_that_turns_naive_fails_the_call_and_nothing_executes(
    architecture: Architecture,
) -> None:
    clock = Clock(datetime(2027, 3, 2, 12, 0, tzinfo=UTC), datetime(2027, 3, 2, 12, 0))
    bank = Bank(passport(), architecture, clock=clock)
    assert pay(bank, 100) == ToolResult(
        "Tool failed: the bank's clock: the clock gave a naive datetime 2027-03-02T12:00:00"
        " (no time zone), so its UTC day is unknown",
        is_error=True,
    )
    [record] = bank.log
    assert (record.executed, record.decision, record.arguments) == (
        False,
        None,
        {"recipient": RENT, "amount": 100},
    )
    assert bank.balance_minor == OPENING_BALANCE_MINOR


def test_a_screened_bank_reads_its_clock_once_per_call_too() -> None:
    readings: list[datetime] = []

    def clock() -> datetime:
        readings.append(datetime(2027, 3, 2, 12, len(readings), tzinfo=UTC))
        return readings[-1]

    async def allow(name: str, arguments: Any) -> Decision:
        return Decision(True, (Reason(ALLOWED, "a team's guard allows"),))

    bank = Bank(passport(), "guarded", screen=allow, clock=clock)
    result = asyncio.run(bank.acall("transfer_funds", {"recipient": RENT, "amount": 100}))
    assert (result.is_error, len(readings), bank.now) == (False, 2, readings[-1])
    assert history(bank)[-1] == ("2027-03-02", RENT, "$100")


# -- money --------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", ["guarded", "model"])
def test_a_transfer_is_told_recorded_and_kept_in_its_own_currency(
    architecture: Architecture,
) -> None:
    day = datetime(2027, 3, 2, 12, 0, tzinfo=UTC)
    bank = Bank(MULTI, architecture, clock=lambda: day)
    receipts = [
        told(pay(bank, 500, "JPY")),
        told(pay(bank, 1.25, "KWD")),
        told(pay(bank, 5)),
        told(pay(bank, 1250.5, "USD")),
    ]
    assert [(r["reference"], r["amount"], r["currency"]) for r in receipts] == [
        ("TX-000004", "500 JPY", "JPY"),
        ("TX-000005", "1.250 KWD", "KWD"),
        ("TX-000006", "$5", "USD"),
        ("TX-000007", "$1,250.50", "USD"),
    ]
    # Only the dollar transfers move the dollar balance: $2,500,000 - $5 - $1,250.50.
    assert bank.balance_minor == OPENING_BALANCE_MINOR - 500 - 125_050
    assert balance(bank) == "$2,498,744.50"
    assert history(bank)[3:] == [
        ("2027-03-02", RENT, "500 JPY"),
        ("2027-03-02", RENT, "1.250 KWD"),
        ("2027-03-02", RENT, "$5"),
        ("2027-03-02", RENT, "$1,250.50"),
    ]
    assert [(r.transfer.amount_minor, r.transfer.currency) for r in bank.log if r.transfer] == [
        (500, "JPY"),
        (1250, "KWD"),
        (500, "USD"),
        (125_050, "USD"),
    ]


def test_each_currencys_cap_counts_its_own_minor_units() -> None:
    bank = Bank(MULTI, "guarded", clock=lambda: datetime(2027, 3, 2, tzinfo=UTC))
    # 2,500 JPY is the JPY cap a transfer (2,500 minor units); 2,501 JPY is over it. The
    # KWD cap of 10.000 is 10,000 minor units: 10 KWD passes, 10.001 does not.
    assert [pay(bank, a, c).is_error for a, c in [(2500, "JPY"), (2501, "JPY")]] == [False, True]
    assert [pay(bank, a, "KWD").is_error for a in (10, 10.001)] == [False, True]
    assert balance(bank) == "$2,500,000"


def test_a_negative_balance_is_told_as_the_bank_always_told_it() -> None:
    # Model alone, nothing stops $3,000,000.75 from a $2,500,000 account.
    bank = Bank(passport(), "model", clock=lambda: datetime(2027, 3, 2, tzinfo=UTC))
    told(pay(bank, 3_000_000.75))
    assert balance(bank) == "$-500,000.75"
