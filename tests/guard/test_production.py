"""The production guard: the CLI's decisions, a durable ledger, audit lines, `protect`."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import pytest_vault.guard
from pytest_vault.guard import Guard, PaymentDenied
from pytest_vault.guard.__main__ import _override
from pytest_vault.guard.engine import TRANSFER_ARGS, Decision, parse_json_object
from pytest_vault.guard.engine import Guard as Engine
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.ledger import LedgerError, SqliteLedger
from pytest_vault.guard.passport import Passport, load_passport

LEVEL3 = SHIPPED / "level-3.json"  # savings@aport-vault.com, $500 a transfer, $1,000 a day
SAVINGS = "savings@aport-vault.com"
NOON = datetime(2026, 12, 1, 12, tzinfo=UTC)


def transfer(amount: object, **more: object) -> dict[str, object]:
    return {"recipient": SAVINGS, "amount": amount, **more}


def codes(guard: Guard, arguments: object) -> tuple[bool, tuple[str, ...]]:
    decision = guard.check("transfer_funds", arguments)
    return decision.allow, decision.codes


# -- the same decisions as the CLI ----------------------------------------------------
def battery(level: int, seed: int, n: int) -> list[str]:
    """Tool-call lines, hostile and ordinary, in an order that fills caps and reuses keys."""
    allowed = {2: "rent@aport-vault.com", 4: "audit@aport-vault.com"}.get(level, SAVINGS)
    recipients = [allowed, allowed.upper(), f" {allowed}", "attacker@evil.test", "sаvings@x.com"]
    amounts: list[object] = [1, 5, 100, 300, 300.5, 499.99, 500, 2500.001, "250", "1e2", 0, -1]
    amounts += [True, None, 1e3, 10**17, 0.1]
    currencies: list[object] = ["USD", "USD", "EUR", "JPY", "usd", None]
    memos: list[object] = [None, "rent", "Q3 APC-2026-0142", "APC-2026-01423", "a\u202eb"]
    keys: list[object] = [None, "short", *(f"key-{i:08d}" for i in range(6))]
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        if rng.random() < 0.4:  # a clean call, one of those a passport is written for
            clean = {"recipient": allowed, "amount": rng.choice([1, 5, 100, 300.5])}
            clean |= {"memo": "Q3 APC-2026-0142", "idempotency_key": f"clean-{i % 300:08d}"}
            lines.append(json.dumps({"tool": "transfer_funds", "arguments": clean}))
            continue
        args: dict[str, object] = {"recipient": rng.choice(recipients)}
        amount = rng.choice(amounts)
        if amount is not None:
            args["amount"] = amount
        for name, pool in (("currency", currencies), ("memo", memos), ("idempotency_key", keys)):
            if (value := rng.choice(pool)) is not None:
                args[name] = value
        if rng.random() < 0.1:
            args["extra"] = "sk-do-not-log"
        tool = rng.choice(["transfer_funds"] * 9 + ["wire_money"])
        as_text = rng.random() < 0.3
        lines.append(json.dumps({"tool": tool, "arguments": json.dumps(args) if as_text else args}))
    raw = '{"recipient": "savings@aport-vault.com", "amount": 5, "amount": 500}'
    lines += [
        json.dumps({"tool": "transfer_funds", "arguments": raw}),
        json.dumps({"tool": "transfer_funds", "arguments": '{"recipient": "x", "amount": NaN}'}),
        json.dumps({"tool": "transfer_funds", "arguments": "[1]"}),
        json.dumps({"tool": "transfer_funds"}),
        json.dumps({"tool": 7, "arguments": {}}),
    ]
    return lines


def cli(passport: Path, lines: list[str]) -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "pytest_vault.guard", "--passport", str(passport)],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def in_process(guard: Guard, lines: list[str]) -> list[dict[str, Any]]:
    """The CLI's reading of each line, with `Guard.check` / `check_context` deciding."""
    overrides: dict[str, Passport] = {}
    out = []
    for line in lines:
        request = parse_json_object(line)
        if "tool" in request:
            out.append(guard.check(request["tool"], request.get("arguments")).to_dict(call=True))
            continue
        override = request.get("overridePassport")
        passport = None if override is None else _override(guard.passport, override, overrides)
        if isinstance(passport, Decision):  # an override the CLI cannot read: its denial
            out.append(passport.to_dict())
        else:
            out.append(guard.check_context(request["context"], passport).to_dict())
    return out


@pytest.fixture(params=["memory", "sqlite"])
def make_guard(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[Path], Guard]]:
    made: list[Guard] = []

    def make(passport: Path) -> Guard:
        ledger = None if request.param == "memory" else tmp_path / f"ledger-{len(made)}.sqlite"
        made.append(Guard.load(passport, ledger=ledger, in_memory_ledger=ledger is None))
        return made[-1]

    yield make
    for guard in made:
        guard.close()


@pytest.mark.parametrize("level", [1, 2, 3, 4, 5])
def test_check_decides_as_the_cli_on_tool_calls(
    level: int, make_guard: Callable[[Path], Guard]
) -> None:
    passport = SHIPPED / f"level-{level}.json"
    lines = battery(level, seed=level, n=400)
    expected = cli(passport, lines)
    got = in_process(make_guard(passport), lines)
    assert len(got) == len(expected) == 405
    assert got == expected
    allowed = sum(d["allow"] for d in got)
    # Both outcomes on every level; Level 5 does not grant payments at all.
    assert allowed == 0 if level == 5 else 0 < allowed < len(got)


def test_check_context_decides_as_the_cli_on_the_conformance_tests(
    charge_tests: Path, make_guard: Callable[[Path], Guard]
) -> None:
    passport = charge_tests / "passport.instance.json"
    lines = (charge_tests / "contexts.jsonl").read_text().splitlines()
    expected = cli(passport, lines)
    got = in_process(make_guard(passport), lines)
    assert len(got) == len(expected) == 12
    assert got == expected
    assert [d["allow"] for d in got].count(True) == 2


# -- the durable ledger ---------------------------------------------------------------
def test_ledger_survives_a_restart(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.sqlite"
    with Guard.load(LEVEL3, ledger=ledger, clock=lambda: NOON) as guard:
        assert codes(guard, transfer(400, idempotency_key="rent-2026-12")) == (
            True,
            ("oap.allowed",),
        )
        assert codes(guard, transfer(400)) == (True, ("oap.allowed",))
    with Guard.load(LEVEL3, ledger=ledger, clock=lambda: NOON) as guard:
        assert codes(guard, transfer(200.01)) == (False, ("oap.limit_exceeded",))
        assert codes(guard, transfer(1, idempotency_key="rent-2026-12")) == (
            False,
            ("oap.idempotency_conflict",),
        )
        assert codes(guard, transfer(200)) == (True, ("oap.allowed",))
        assert codes(guard, transfer(0.01)) == (False, ("oap.limit_exceeded",))
    # A new UTC day starts from zero; used keys stay used.
    with Guard.load(LEVEL3, ledger=ledger, clock=lambda: NOON + timedelta(days=1)) as guard:
        assert codes(guard, transfer(500)) == (True, ("oap.allowed",))
        assert codes(guard, transfer(1, idempotency_key="rent-2026-12")) == (
            False,
            ("oap.idempotency_conflict",),
        )
    db = sqlite3.connect(ledger)
    assert db.execute(
        "SELECT day, currency, spent_minor FROM vault_daily ORDER BY day"
    ).fetchall() == [
        ("2026-12-01", "USD", "100000"),
        ("2026-12-02", "USD", "50000"),
    ]
    assert db.execute("SELECT key, day FROM vault_keys").fetchall() == [
        ("rent-2026-12", "2026-12-01")
    ]
    db.close()


@pytest.mark.parametrize(
    ("ledger", "problem"),
    [
        ("", "ledger '': SQLite makes it a private database, lost at close"),
        (":memory:", "ledger ':memory:': SQLite makes it a private database, lost at close"),
        *(
            (uri, f"ledger {uri!r}: a file: URI, which SQLite may keep in memory; give a path")
            for uri in ("file::memory:", "file:ledger.sqlite?mode=memory", "FILE:ledger.sqlite")
        ),
        ("/dev/null", "ledger '/dev/null': not a regular file"),
        ("a\0b.sqlite", "ledger 'a\\x00b.sqlite': embedded null byte"),
        (b"ledger.sqlite", "ledger b'ledger.sqlite': not a file path"),
    ],
)
def test_a_ledger_that_names_no_durable_file_is_refused_at_load(
    ledger: object, problem: str
) -> None:
    with pytest.raises(LedgerError) as refused:
        Guard.load(LEVEL3, ledger=ledger)  # type: ignore[arg-type]
    assert str(refused.value) == problem
    with pytest.raises(LedgerError) as again:  # the store itself never opens one either
        SqliteLedger(ledger, passport_id="p")  # type: ignore[arg-type]
    assert str(again.value) == problem


def test_a_ledger_path_that_is_a_folder_or_in_no_folder_is_refused_at_load(tmp_path: Path) -> None:
    for ledger, problem in (
        (tmp_path, f"ledger {str(tmp_path)!r}: a folder, not a file"),
        (
            tmp_path / "gone" / "ledger.sqlite",
            f"ledger {str(tmp_path / 'gone' / 'ledger.sqlite')!r}: "
            f"the folder {str(tmp_path / 'gone')!r} does not exist",
        ),
    ):
        with pytest.raises(LedgerError) as refused:
            Guard.load(LEVEL3, ledger=ledger)
        assert str(refused.value) == problem


def test_a_guard_without_a_durable_ledger_must_say_it_is_in_memory(tmp_path: Path) -> None:
    with pytest.raises(LedgerError) as refused:
        Guard.load(LEVEL3)
    assert str(refused.value) == (
        "no ledger: give ledger=PATH, a durable SQLite file "
        "(in_memory_ledger=True is for tests: it forgets every total at exit)"
    )
    with pytest.raises(LedgerError) as both:
        Guard.load(LEVEL3, ledger=tmp_path / "ledger.sqlite", in_memory_ledger=True)
    assert str(both.value) == "give ledger=PATH or in_memory_ledger=True, not both"
    with pytest.raises(LedgerError) as odd:
        Guard.load(LEVEL3, in_memory_ledger="yes")  # type: ignore[arg-type]
    assert str(odd.value) == "in_memory_ledger must be True or False, got 'yes'"
    with pytest.raises(TypeError):  # the constructor has no default store either
        Guard(load_passport(LEVEL3), digest="sha256:0")  # type: ignore[call-arg]


def test_restarts_never_reopen_the_daily_cap(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A ledger named by an unset variable is refused, not a fresh database per restart.
    monkeypatch.delenv("VAULT_LEDGER", raising=False)
    with pytest.raises(LedgerError):
        Guard.load(LEVEL3, ledger=os.environ.get("VAULT_LEDGER", ""))
    monkeypatch.chdir(tmp_path)
    allowed = []
    for _ in range(3):  # a relative path, a file not there yet: durable from the first check
        with Guard.load(LEVEL3, ledger="vault-ledger.sqlite", clock=lambda: NOON) as guard:
            allowed += [guard.check("transfer_funds", transfer(500)).allow for _ in range(2)]
    assert allowed == [True, True, False, False, False, False]


RACER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from pytest_vault.guard import Guard
    passport, ledger, go = sys.argv[1:]
    guard = Guard.load(passport, ledger=ledger, busy_timeout=60)
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.001)
    d = guard.check("transfer_funds", {"recipient": "savings@aport-vault.com", "amount": 100})
    print(json.dumps([d.allow, list(d.codes)]), flush=True)
    """
)


def test_twenty_processes_race_for_a_daily_cap(tmp_path: Path) -> None:
    ledger, go = tmp_path / "ledger.sqlite", tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(LEVEL3), str(ledger), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(20)
    ]
    try:
        for proc in procs:  # every racer is loaded and waiting before the start
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        go.touch()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            allow, reasons = json.loads(out)
            results.append((allow, tuple(reasons)))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert results.count((True, ("oap.allowed",))) == 10
    assert results.count((False, ("oap.limit_exceeded",))) == 10
    db = sqlite3.connect(ledger)
    assert db.execute("SELECT spent_minor FROM vault_daily").fetchall() == [("100000",)]
    db.close()


PAYOUT_RACER = textwrap.dedent(
    """
    import json, os, sys, time
    from datetime import UTC, datetime
    from pathlib import Path
    from pytest_vault.guard import Guard
    passport, ledger, go = sys.argv[1:]
    added = datetime(2020, 1, 1, tzinfo=UTC)
    facts = lambda kind, key: {"type": "bank_account", "added_at": added}
    guard = Guard.load(passport, ledger=ledger, busy_timeout=60, facts=facts)
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.001)
    context = {"amount": 100, "currency": "USD", "destination_type": "bank_account",
               "destination_id": "dest_1", "payout_method": "ach",
               "idempotency_key": f"payout-{os.getpid()}"}
    d = guard.check_context(context, policy="finance.payment.payout.v1")
    print(json.dumps([d.allow, list(d.codes)]), flush=True)
    """
)


def test_twenty_processes_race_for_a_payout_count(tmp_path: Path) -> None:
    """The daily cap's race, for the payout pack's `max_payouts_per_day` (2 here): its
    count is in the same durable ledger, checked and recorded in one transaction."""
    from .test_packs import passport

    card, ledger, go = tmp_path / "payout.json", tmp_path / "ledger.sqlite", tmp_path / "go"
    card.write_text(json.dumps(passport(payout=True)))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PAYOUT_RACER, str(card), str(ledger), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(20)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        go.touch()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            allow, reasons = json.loads(out)
            results.append((allow, tuple(reasons)))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert results.count((True, ("oap.allowed",))) == 2
    assert results.count((False, ("oap.limit_exceeded",))) == 18
    db = sqlite3.connect(ledger)
    rows = dict(db.execute("SELECT name, value FROM vault_tallies").fetchall())
    assert len(db.execute("SELECT key FROM vault_keys").fetchall()) == 2
    db.close()
    day = datetime.now(UTC).date().isoformat()
    assert rows == {
        f"finance.payment.payout.v1|count|{day}": "2",
        f"finance.payment.payout.v1|daily|{day}|USD": "200",
    }


def test_other_packs_take_their_facts_from_the_caller_and_keep_counts_across_restarts(
    tmp_path: Path,
) -> None:
    from .test_packs import Bank, passport, refund

    card, ledger, audit = tmp_path / "p.json", tmp_path / "ledger.sqlite", tmp_path / "a.jsonl"
    card.write_text(json.dumps(passport(refund=True)))
    policy = "finance.payment.refund.v1"
    with Guard.load(card, ledger=ledger, audit=audit, clock=lambda: NOON) as guard:
        blind = guard.check_context(refund(1), policy=policy)
    assert blind.codes == ("vault.facts_unavailable",)
    bank = Bank()
    bank.records[("order", "ord_1")]["refunded_minor"] = 0  # it never books ours
    for key in ("restart-key-1", "restart-key-2"):
        with Guard.load(card, ledger=ledger, clock=lambda: NOON, facts=bank) as guard:
            last = guard.check_context(refund(3_000, key=key), policy=policy)
    assert last.codes == ("oap.limit_exceeded",)  # the first 3,000 survived the restart
    with Guard.load(card, ledger=ledger, clock=lambda: NOON, facts=bank) as guard:
        replay = guard.check_context(refund(1, key="restart-key-1"), policy="payments.refunds.v1")
    assert replay.codes == ("oap.idempotency_conflict",)
    record = json.loads(audit.read_text())
    assert (record["policy_id"], record["tool"], record["codes"]) == (
        policy,
        "context",
        ["vault.facts_unavailable"],
    )


def _locked(path: Path) -> sqlite3.Connection:
    with Guard.load(LEVEL3, ledger=path) as guard:  # a real ledger, then held
        guard.check("transfer_funds", transfer(1))
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    return holder


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("locked", "ledger unavailable: database is locked"),
        ("garbage", "ledger unavailable: file is not a database"),
        ("schema", "ledger unavailable: the file holds another schema, not a pytest-vault ledger"),
        ("owner", "ledger unavailable: the ledger belongs to passport someone-else"),
        ("version", "ledger unavailable: unknown ledger schema 0"),
        ("row", "ledger unavailable: ledger row 2026-12-01 USD does not hold an amount"),
    ],
)
def test_an_unusable_ledger_fails_closed(tmp_path: Path, setup: str, reason: str) -> None:
    path = tmp_path / "ledger.sqlite"
    holder = None
    if setup == "locked":
        holder = _locked(path)
    elif setup == "garbage":
        path.write_bytes(b"this is not sqlite, it is a note\n" * 200)
    else:
        with Guard.load(LEVEL3, ledger=path, clock=lambda: NOON) as guard:
            guard.check("transfer_funds", transfer(1))
        db = sqlite3.connect(path, isolation_level=None)
        db.execute(
            {
                "schema": "CREATE TABLE payments (id INTEGER)",
                "owner": "UPDATE vault_meta SET value = 'someone-else' WHERE name = 'passport_id'",
                "version": "UPDATE vault_meta SET value = '0' WHERE name = 'schema'",
                "row": "UPDATE vault_daily SET spent_minor = '-5'",
            }[setup]
        )
        db.close()
    guard = Guard.load(LEVEL3, ledger=path, busy_timeout=0.05, clock=lambda: NOON)
    assert guard.check("wire_money", {}).codes == ("oap.evaluation_error",)  # no ledger needed
    decision = guard.check("transfer_funds", transfer(5))
    assert decision.allow is False and decision.executes is None
    assert [r.to_dict() for r in decision.reasons] == [
        {"code": "oap.evaluation_error", "message": reason, "rule": "evaluation"}
    ]
    assert decision.transfer is not None and decision.transfer.amount_minor == 500
    if holder is not None:  # the lock released, the same guard works again
        holder.execute("ROLLBACK")
        holder.close()
        assert codes(guard, transfer(5)) == (True, ("oap.allowed",))
    guard.close()


# -- protect --------------------------------------------------------------------------
def test_protect_pays_only_allowed_normalized_transfers() -> None:
    guard = Guard.load(LEVEL3, in_memory_ledger=True)
    paid: list[tuple[Any, ...]] = []

    @guard.protect
    def transfer_funds(
        recipient: str,
        amount: Decimal,
        currency: str = "USD",
        memo: str | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        paid.append((recipient, amount, currency, memo, idempotency_key))
        return f"paid {amount}"

    assert transfer_funds(SAVINGS, 300.5) == "paid 300.50"
    assert transfer_funds(recipient=SAVINGS, amount=Decimal("1e2"), memo="rent") == "paid 100.00"
    denied = []
    for args in (
        (SAVINGS, "250"),  # a string amount is never read as money
        (SAVINGS.upper(), 1),  # no case folding: another payee
        (SAVINGS, 0.001),  # not a whole number of cents
        (SAVINGS, 500.01),  # over $500 a transfer
        (SAVINGS, 500),  # paid: $900.50 today
        (SAVINGS, 99.51),  # over $1,000 a day
    ):
        try:
            transfer_funds(*args)
        except PaymentDenied as exc:
            denied.append(exc.decision.codes)
            last = exc
    assert denied == [
        ("oap.invalid_context",),
        ("oap.merchant_forbidden",),
        ("oap.invalid_context",),
        ("oap.limit_exceeded",),
        ("oap.limit_exceeded",),
    ]
    assert paid == [
        (SAVINGS, Decimal("300.50"), "USD", None, None),
        (SAVINGS, Decimal("100.00"), "USD", "rent", None),
        (SAVINGS, Decimal("500.00"), "USD", None, None),
    ]
    assert all(type(p[1]) is Decimal for p in paid)
    assert str(last) == (
        "transfer denied: oap.limit_exceeded: Daily cap of 1,000.00 USD exceeded: "
        "900.50 USD already allowed today"
    )
    assert len(paid) == 3


# Calls the wrapper cannot pass on exactly as judged: each is denied, with its audit record,
# in the words `check` gives the same arguments (where `check` can be given them).
UNPASSABLE: list[tuple[tuple[object, ...], dict[str, object], str]] = [
    ((), {"recipient": SAVINGS, "amount": 10, "note": "rent"}, "unknown argument(s) 'note'"),
    ((SAVINGS, 10), {"extra": 1}, "unknown argument(s) 'extra'"),
    ((SAVINGS, 1), {"payee": "x", "Amount": 2}, "unknown argument(s) 'Amount', 'payee'"),
    ((), {"recipient": SAVINGS}, "amount is required"),
    ((), {"amount": 10}, "recipient is required"),
    ((), {}, "recipient is required"),
    (
        (SAVINGS, 1, "USD", None, "key-00000001", "sixth"),
        {},
        "transfer_funds takes 5 positional arguments, got 6",
    ),
    ((SAVINGS, 1), {"amount": 2}, "argument(s) 'amount' given by position and name"),
    (
        (SAVINGS, 1, "USD"),
        {"currency": "EUR", "recipient": SAVINGS},
        "argument(s) 'currency', 'recipient' given by position and name",
    ),
]


@pytest.mark.parametrize(("args", "kwargs", "message"), UNPASSABLE)
def test_a_call_protect_cannot_pass_on_as_judged_is_denied_and_audited(
    tmp_path: Path, args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    log = tmp_path / "audit.jsonl"
    guard = Guard.load(LEVEL3, audit=log, in_memory_ledger=True, clock=lambda: NOON)
    paid: list[object] = []

    @guard.protect
    def transfer_funds(**values: object) -> None:
        paid.append(values)

    with pytest.raises(PaymentDenied) as denied:
        transfer_funds(*args, **kwargs)
    assert [r.to_dict() for r in denied.value.decision.reasons] == [
        {"code": "oap.invalid_context", "message": message, "rule": "context_readable"}
    ]
    assert paid == []
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert (record["tool"], record["allow"], record["codes"], record["reasons"]) == (
        "transfer_funds",
        False,
        ["oap.invalid_context"],
        [message],
    )
    if "position" not in message:  # arguments `check` can be given: its very decision
        as_object = dict(zip(TRANSFER_ARGS, args, strict=False)) | kwargs
        assert guard.check("transfer_funds", as_object) == denied.value.decision
    # Nothing was spent: the whole day's cap is still there.
    transfer_funds(SAVINGS, 500)
    transfer_funds(SAVINGS, 500)
    assert len(paid) == 2


def _exec_recipe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """The docs' production recipe (docs/how-to/production.md), run as written, against a
    recording bank."""
    page = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "production.md"
    (code,) = [
        block
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)
        if "def on_tool_call" in block
    ]
    (tmp_path / "passports").mkdir()
    shutil.copy(LEVEL3, tmp_path / "passports" / "level-3.json")
    monkeypatch.chdir(tmp_path)
    paid: list[tuple[object, ...]] = []

    class Bank:
        def pay(self, recipient: str, amount: Decimal, currency: str, **more: object) -> str:
            paid.append((recipient, amount, currency, more))
            return f"paid {amount} {currency}"

    namespace: dict[str, Any] = {"bank_api": Bank(), "paid": paid}
    exec(compile(code, "production.md", "exec"), namespace)
    return namespace


def test_the_readme_recipe_denies_what_it_cannot_pass_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    recipe = _exec_recipe(monkeypatch, tmp_path)
    on_tool_call = recipe["on_tool_call"]
    assert on_tool_call({"recipient": SAVINGS, "amount": 10, "extra": 1}) == (
        "denied: oap.invalid_context"
    )
    assert on_tool_call({"recipient": SAVINGS, "note": "no amount"}) == (
        "denied: oap.invalid_context"
    )
    assert on_tool_call({"recipient": SAVINGS}) == "denied: oap.invalid_context"
    assert on_tool_call('{"recipient": "savings@aport-vault.com", "amount": 300.5}') == (
        "paid 300.50 USD"
    )
    assert on_tool_call({"recipient": SAVINGS, "amount": 600}) == "denied: oap.limit_exceeded"
    assert on_tool_call('{"amount": 1, "amount": 2}') == "denied: duplicate key 'amount'"
    assert recipe["paid"] == [(SAVINGS, Decimal("300.50"), "USD", {"memo": None, "key": None})]
    records = [json.loads(line) for line in Path("vault-audit.jsonl").read_text().splitlines()]
    assert [(r["allow"], r["codes"]) for r in records] == [
        (False, ["oap.invalid_context"]),
        (False, ["oap.invalid_context"]),
        (False, ["oap.invalid_context"]),
        (True, ["oap.allowed"]),
        (False, ["oap.limit_exceeded"]),
    ]
    recipe["guard"].close()


def _lacks_memo(recipient: str, amount: Decimal, currency: str, idempotency_key: str) -> None: ...
def _lacks_currency(
    recipient: str, amount: Decimal, memo: object, idempotency_key: object
) -> None: ...
def _two_only(recipient: str, amount: Decimal) -> None: ...
def _needs_account(
    recipient: str,
    amount: Decimal,
    currency: str,
    memo: object,
    idempotency_key: object,
    account: str,
) -> None: ...
def _positional_only(
    recipient: str, amount: Decimal, /, currency: str, memo: object, idempotency_key: object
) -> None: ...
async def _async_lacks_key(
    recipient: str, amount: Decimal, currency: str, memo: object
) -> None: ...


@pytest.mark.parametrize(
    ("fn", "problem"),
    [
        (_lacks_memo, "got an unexpected keyword argument 'memo'"),
        (_lacks_currency, "got an unexpected keyword argument 'currency'"),
        (_two_only, "got an unexpected keyword argument 'currency'"),
        (_needs_account, "missing a required argument: 'account'"),
        (
            _positional_only,
            "'recipient' parameter is positional only, but was passed as a keyword",
        ),
        (_async_lacks_key, "got an unexpected keyword argument 'idempotency_key'"),
    ],
)
def test_a_function_that_cannot_take_every_judged_value_is_refused_when_decorated(
    tmp_path: Path, fn: Callable[..., object], problem: str
) -> None:
    log = tmp_path / "audit.jsonl"
    guard = Guard.load(LEVEL3, audit=log, in_memory_ledger=True)
    with pytest.raises(TypeError) as refused:
        guard.protect(fn)
    assert str(refused.value) == (
        f"protect: {fn.__qualname__} must take recipient, amount, currency, memo and "
        f"idempotency_key by keyword, and nothing else it needs: {problem}"
    )
    assert not log.exists()  # nothing judged, nothing recorded


def test_protect_takes_a_function_with_defaults_and_keyword_catchalls() -> None:
    guard = Guard.load(LEVEL3, in_memory_ledger=True)
    got: list[dict[str, object]] = []

    def with_extra(
        recipient: str, amount: Decimal, *, account: str = "main", **rest: object
    ) -> None:
        got.append({"recipient": recipient, "amount": amount, "account": account, **rest})

    guard.protect(with_extra)(SAVINGS, 5, memo="rent")
    assert got == [
        {
            "recipient": SAVINGS,
            "amount": Decimal("5.00"),
            "account": "main",
            "currency": "USD",
            "memo": "rent",
            "idempotency_key": None,
        }
    ]
    with pytest.raises(TypeError, match=r"^protect: cannot read the signature of "):
        guard.protect(7)  # type: ignore[arg-type]


def test_protect_async() -> None:
    guard = Guard.load(SHIPPED / "level-2.json", in_memory_ledger=True)
    paid: list[Decimal] = []

    @guard.protect
    async def transfer_funds(
        recipient: str, amount: Decimal, currency: str, memo: object, idempotency_key: object
    ) -> Decimal:
        await asyncio.sleep(0)
        paid.append(amount)
        return amount

    async def main() -> list[object]:
        return await asyncio.gather(
            *(transfer_funds("rent@aport-vault.com", 1000, "USD", None, None) for _ in range(12)),
            return_exceptions=True,
        )

    results = asyncio.run(main())
    # Level 2: $2,500 a transfer, $10,000 a day: exactly ten $1,000 transfers pass.
    assert [type(r).__name__ for r in results].count("Decimal") == 10
    assert [type(r).__name__ for r in results].count("PaymentDenied") == 2
    assert paid == [Decimal("1000.00")] * 10


# -- audit ----------------------------------------------------------------------------
def test_one_audit_line_per_decision_without_raw_arguments(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    guard = Guard.load(LEVEL3, audit=log, in_memory_ledger=True, clock=lambda: NOON)
    guard.check("transfer_funds", transfer(300.5, memo="rent", idempotency_key="key-00000001"))
    guard.check("transfer_funds", transfer(1, api_key="sk-secret-123"))
    guard.check("transfer_funds", '{"recipient": "\\ud800", "amount": 1}')
    guard.check("wire_money", {"token": "sk-secret-456"})
    text = log.read_bytes().decode("utf-8")  # valid UTF-8, whatever came in
    records = [json.loads(line) for line in text.splitlines()]
    assert len(records) == 4
    assert "sk-secret" not in text
    digest = guard.digest
    assert digest.startswith("sha256:")
    assert records[0] == {
        "time": "2026-12-01T12:00:00+00:00",
        "tool": "transfer_funds",
        "allow": True,
        "codes": ["oap.allowed"],
        "reasons": ["Transaction within limits and policy requirements"],
        "transfer": {
            "recipient": SAVINGS,
            "amount_minor": 30050,
            "currency": "USD",
            "memo": "rent",
            "idempotency_key": "key-00000001",
        },
        "policy_id": "finance.payment.charge.v1",
        "passport_id": "7a0c5e2d-4b1f-4c3a-9d8e-000000000003",
        "passport_digest": digest,
    }
    assert [(r["allow"], r["codes"], r["transfer"]) for r in records[1:]] == [
        (False, ["oap.invalid_context"], None),
        (False, ["oap.invalid_context"], None),
        (False, ["oap.evaluation_error"], None),
    ]
    assert records[1]["reasons"] == ["unknown argument(s) 'api_key'"]


def test_an_audit_record_is_timed_at_the_instant_judged(tmp_path: Path) -> None:
    # A clock read again for the record fell on the next day: the record said another
    # day than the one whose total was checked.
    readings = iter(
        [
            datetime(2026, 12, 1, 23, 59, 59, 999999, tzinfo=UTC) + timedelta(seconds=i)
            for i in range(9)
        ]
    )
    log = tmp_path / "audit.jsonl"
    guard = Guard.load(LEVEL3, audit=log, in_memory_ledger=True, clock=lambda: next(readings))
    guard.check("transfer_funds", transfer(5))
    guard.check("transfer_funds", transfer(6))
    times = [json.loads(line)["time"] for line in log.read_text().splitlines()]
    assert times == ["2026-12-01T23:59:59.999999+00:00", "2026-12-02T00:00:00.999999+00:00"]


def test_audit_to_a_logger(caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard.load(LEVEL3, audit=logging.getLogger("vault.audit"), in_memory_ledger=True)
    with caplog.at_level(logging.INFO, logger="vault.audit"):
        guard.check("transfer_funds", transfer(5))
        guard.check("transfer_funds", transfer(5000))
    assert [
        (json.loads(r.message)["allow"], json.loads(r.message)["codes"])
        for r in caplog.records
        if r.name == "vault.audit"  # not another library's log from garbage collection
    ] == [
        (True, ["oap.allowed"]),
        (False, ["oap.limit_exceeded", "oap.limit_exceeded"]),  # per transfer, and daily
    ]


def test_a_decision_that_cannot_be_audited_is_denied(tmp_path: Path) -> None:
    guard = Guard.load(LEVEL3, audit=tmp_path, in_memory_ledger=True)  # a folder: no appending
    decision = guard.check("transfer_funds", transfer(5))
    assert decision.allow is False
    assert decision.codes == ("oap.evaluation_error",)
    assert decision.reasons[0].message.startswith("audit log unavailable: IsADirectoryError")


# -- the names -------------------------------------------------------------------------
def test_the_package_guard_is_the_production_guard() -> None:
    # The suite's bank keeps the engine's Guard; the package name is the production one.
    assert pytest_vault.guard.Guard is Guard
    assert (Guard.__module__, Engine.__module__) == (
        "pytest_vault.guard.production",
        "pytest_vault.guard.engine",
    )


def test_a_payment_that_fails_after_the_allow_still_counts() -> None:
    guard = Guard.load(LEVEL3, in_memory_ledger=True)

    @guard.protect
    def transfer_funds(**values: object) -> None:
        raise ConnectionError("bank down")

    with pytest.raises(ConnectionError):
        transfer_funds(SAVINGS, 500, idempotency_key="pay-00000001")
    # Recorded at the decision: the cap is spent and the key used, so a retry cannot double-pay.
    assert codes(guard, transfer(500, idempotency_key="pay-00000001")) == (
        False,
        ("oap.idempotency_conflict",),
    )
    assert codes(guard, transfer(500.01)) == (False, ("oap.limit_exceeded",) * 2)


def test_a_broken_clock_fails_closed() -> None:
    def clock() -> datetime:
        raise OSError("no time")

    guard = Guard.load(LEVEL3, in_memory_ledger=True, clock=clock)
    decision = guard.check("transfer_funds", transfer(5))
    assert (decision.allow, decision.codes) == (False, ("oap.evaluation_error",))
    assert decision.reasons[0].message == "evaluation failed: OSError: no time"
