"""Every day boundary is the UTC date of the instant: a clock in any zone counts towards the
same daily cap, and a clock that names no instant (a naive datetime) denies in words."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from pytest_vault.guard import Guard as Production
from pytest_vault.guard.engine import EVALUATION_ERROR, ClockError, Guard, Transfer, utc_day
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import load_passport

LEVEL3 = SHIPPED / "level-3.json"  # $500 a transfer, $1,000 a day
SAVINGS = "savings@aport-vault.com"
CALL = {"recipient": SAVINGS, "amount": 500}
CONTEXT = {
    "amount": 50_000,
    "currency": "USD",
    "merchant_id": SAVINGS,
    "region": "US",
    "items": [{"sku": "a", "qty": 1}],
}

ZONES = [
    timezone(timedelta(hours=14)),  # Kiritimati: the earliest local date on Earth
    timezone(timedelta(hours=-12)),  # the latest
    timezone(timedelta(hours=5, minutes=45)),  # Kathmandu
    timezone(timedelta(hours=-9, minutes=-30)),  # the Marquesas
    ZoneInfo("Pacific/Kiritimati"),
    ZoneInfo("America/St_Johns"),  # -03:30, with summer time
    UTC,
]


def in_zone(instant: datetime, zone: timezone | ZoneInfo) -> datetime:
    return instant.astimezone(zone)


@pytest.mark.parametrize("zone", ZONES, ids=str)
def test_utc_day_is_the_utc_date_in_any_zone(zone: timezone | ZoneInfo) -> None:
    for hour in range(0, 48, 1):
        instant = datetime(2026, 12, 1, tzinfo=UTC) + timedelta(hours=hour, minutes=59)
        assert utc_day(in_zone(instant, zone)) == instant.date()


@pytest.mark.parametrize(
    ("reading", "message"),
    [
        (
            datetime(2026, 12, 1, 12, 30),
            "the clock gave a naive datetime 2026-12-01T12:30:00 (no time zone), "
            "so its UTC day is unknown",
        ),
        (date(2026, 12, 1), "the clock gave date datetime.date(2026, 12, 1), not a datetime"),
        (1_780_000_000.0, "the clock gave float 1780000000.0, not a datetime"),
        ("2026-12-01T12:00:00Z", "the clock gave str '2026-12-01T12:00:00Z', not a datetime"),
        (None, "the clock gave NoneType None, not a datetime"),
    ],
)
def test_a_reading_that_names_no_instant_is_refused_in_words(reading: object, message: str) -> None:
    with pytest.raises(ClockError) as refused:
        utc_day(reading)
    assert str(refused.value) == message
    assert isinstance(refused.value, ValueError)


def _same_utc_day_other_local_days(zone: timezone | ZoneInfo) -> tuple[datetime, datetime]:
    """Two instants of one UTC day whose local dates differ in `zone` (or, in UTC, hours
    apart), as the zone writes them."""
    first = datetime(2026, 12, 1, 0, 30, tzinfo=UTC)
    for hour in range(1, 24):
        second = first + timedelta(hours=hour)
        if in_zone(first, zone).date() != in_zone(second, zone).date():
            return in_zone(first, zone), in_zone(second, zone)
    return first, first + timedelta(hours=23)


def _other_utc_days_same_local_day(zone: timezone | ZoneInfo) -> tuple[datetime, datetime] | None:
    """Two instants on consecutive UTC days, one local date in `zone` (none in UTC)."""
    first = datetime(2026, 12, 1, 23, 30, tzinfo=UTC)
    for hour in range(1, 24):
        second = first + timedelta(hours=hour)
        if in_zone(first, zone).date() == in_zone(second, zone).date():
            return in_zone(first, zone), in_zone(second, zone)
    return None


def engine_calls(readings: list[datetime]) -> list[bool]:
    """$500 then $500 at each reading, through the engine with that clock."""
    now: list[datetime] = []
    guard = Guard(load_passport(LEVEL3), clock=lambda: now[0])
    allowed = []
    for reading in readings:
        now[:] = [reading]
        allowed += [guard.check_call("transfer_funds", CALL).allow for _ in range(2)]
    return allowed


def production_calls(readings: list[datetime], ledger: Path) -> list[bool]:
    now: list[datetime] = []
    allowed = []
    with Production.load(LEVEL3, ledger=ledger, clock=lambda: now[0]) as guard:
        for reading in readings:
            now[:] = [reading]
            allowed += [guard.check("transfer_funds", CALL).allow for _ in range(2)]
    return allowed


def context_calls(readings: list[datetime]) -> list[bool]:
    now: list[datetime] = []
    guard = Guard(load_passport(LEVEL3), clock=lambda: now[0])
    allowed = []
    for reading in readings:
        now[:] = [reading]
        allowed += [guard.check_context(dict(CONTEXT)).allow for _ in range(2)]
    return allowed


@pytest.mark.parametrize("zone", ZONES, ids=str)
def test_one_utc_day_is_one_cap_whatever_the_clocks_zone(
    zone: timezone | ZoneInfo, tmp_path: Path
) -> None:
    # $2,000 asked within one UTC day, across two local dates: $1,000 of it passes.
    readings = list(_same_utc_day_other_local_days(zone))
    assert engine_calls(readings) == [True, True, False, False]
    assert context_calls(readings) == [True, True, False, False]
    assert production_calls(readings, tmp_path / "ledger.sqlite") == [True, True, False, False]
    db = sqlite3.connect(tmp_path / "ledger.sqlite")
    assert db.execute("SELECT day, spent_minor FROM vault_daily").fetchall() == [
        ("2026-12-01", "100000")
    ]
    db.close()


@pytest.mark.parametrize("zone", [z for z in ZONES if z is not UTC], ids=str)
def test_a_new_utc_day_is_a_new_cap_within_one_local_date(
    zone: timezone | ZoneInfo, tmp_path: Path
) -> None:
    pair = _other_utc_days_same_local_day(zone)
    assert pair is not None
    readings = list(pair)
    assert engine_calls(readings) == [True, True, True, True]
    assert production_calls(readings, tmp_path / "ledger.sqlite") == [True, True, True, True]
    db = sqlite3.connect(tmp_path / "ledger.sqlite")
    assert db.execute("SELECT day, spent_minor FROM vault_daily ORDER BY day").fetchall() == [
        ("2026-12-01", "100000"),
        ("2026-12-02", "100000"),
    ]
    db.close()


def test_a_transfer_committed_counts_towards_its_utc_day() -> None:
    plus14 = timezone(timedelta(hours=14))
    now = [datetime(2026, 12, 2, 9, 0, tzinfo=plus14)]  # 2026-12-01T19:00Z
    guard = Guard(load_passport(LEVEL3), clock=lambda: now[0])
    guard.commit(Transfer(SAVINGS, 100_000, "USD"))
    assert guard.ledger.daily == {(date(2026, 12, 1), "USD"): 100_000}
    assert guard.judge_call("transfer_funds", CALL).allow is False


NAIVE = (
    "the clock gave a naive datetime 2026-12-01T12:00:00 (no time zone), so its UTC day is unknown"
)


def _every_way_in(
    clock: Callable[[], object], tmp_path: Path
) -> list[tuple[bool, list[dict[str, str]]]]:
    guard = Guard(load_passport(LEVEL3), clock=clock)  # type: ignore[arg-type]
    said = [
        guard.check_call("transfer_funds", CALL),
        guard.judge_call("transfer_funds", CALL),
        guard.judge_transfer(Transfer(SAVINGS, 100, "USD")),
        guard.check_context(dict(CONTEXT)),
    ]
    with Production.load(LEVEL3, ledger=tmp_path / "l.sqlite", clock=clock) as production:  # type: ignore[arg-type]
        said += [production.check("transfer_funds", CALL), production.check_context(CONTEXT)]
    assert not guard.ledger.daily
    return [(d.allow, [r.to_dict() for r in d.reasons]) for d in said]


def test_a_naive_clock_denies_every_call_in_words(tmp_path: Path) -> None:
    # Never raised, never judged on a guessed day: the reading is refused where it is read.
    naive = datetime(2026, 12, 1, 12)
    assert (
        _every_way_in(lambda: naive, tmp_path)
        == [(False, [{"code": EVALUATION_ERROR, "message": NAIVE, "rule": "evaluation"}])] * 6
    )


def test_a_naive_clock_denies_even_a_passport_that_never_expires(tmp_path: Path) -> None:
    # Level 3 never expires, so no comparison with an aware expiry would have caught it.
    naive = datetime(2026, 12, 1, 12)
    guard = Guard(load_passport(LEVEL3), clock=lambda: naive)
    decision = guard.check_call("transfer_funds", CALL)
    assert (decision.allow, decision.codes, decision.reasons[0].message) == (
        False,
        (EVALUATION_ERROR,),
        NAIVE,
    )
    assert decision.transfer == Transfer(SAVINGS, 50_000, "USD")  # what was read, not run
    assert decision.executes is None


def test_a_clock_that_gives_no_datetime_denies_in_words(tmp_path: Path) -> None:
    message = "the clock gave float 1780000000.0, not a datetime"
    assert (
        _every_way_in(lambda: 1_780_000_000.0, tmp_path)
        == [(False, [{"code": EVALUATION_ERROR, "message": message, "rule": "evaluation"}])] * 6
    )


def test_commit_refuses_a_naive_reading() -> None:
    guard = Guard(load_passport(LEVEL3), clock=lambda: datetime(2026, 12, 1, 12))
    with pytest.raises(ClockError, match="naive datetime"):
        guard.commit(Transfer(SAVINGS, 100, "USD"))
    assert not guard.ledger.daily
