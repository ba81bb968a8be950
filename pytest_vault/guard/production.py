"""Our guard in production: the suite's engine and decisions in front of a real payment.

    guard = Guard.load("passports/level-3.json", ledger="ledger.sqlite", audit="audit.jsonl")
    decision = guard.check("transfer_funds", arguments)   # the model's dict or JSON text

    @guard.protect
    def transfer_funds(recipient, amount, currency, memo, idempotency_key): ...

`check` is `engine.Guard.check_call` with the ledger read and recorded in one store
transaction, so its decisions are the CLI's and the suite's. `protect` runs the real
function only when allowed, and only with the normalized values: `amount` is an exact
`Decimal` in major units with the currency's minor digits (`Decimal("300.50")` USD,
`Decimal("500")` JPY), whatever the caller's decimal context. A call the wrapper cannot
pass on exactly as judged (an argument the tool lacks, one missing) is a denial like any
other, and a function that cannot take every judged value is refused when decorated.
The other packs (`guard.packs`: refunds, payouts, transaction execution) are judged with
`check_context(context, policy=ID)`; the facts their rules need come from the caller's
system of record through `facts=`, a `packs.Facts` callback (`facts(kind, id) -> Mapping
| None`), never from the context: without one those packs are denied.
Every decision writes one JSON Lines audit record (never the raw arguments). An allowed
transfer is recorded before the function runs, so one that then fails still counts
against the cap and its key stays used: the guard errs on less money. The ledger is a
durable SQLite file; a memory one (`in_memory_ledger=True`) is for tests only.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol, TypeVar, cast

from pytest_vault.core.errors import VaultError
from pytest_vault.core.json import EXACT
from pytest_vault.core.text import json_text, shown
from pytest_vault.guard.engine import (
    EVALUATION_ERROR,
    INVALID_CONTEXT,
    MINOR_DIGITS,
    POLICY_ID,
    TRANSFER_ARGS,
    TRANSFER_TOOL,
    ClockError,
    Decision,
    Ledger,
    Transfer,
    Unreadable,
    deny,
    read_context,
    read_transfer,
    utc_day,
)
from pytest_vault.guard.engine import Guard as Engine
from pytest_vault.guard.ledger import LedgerError, LedgerStore, MemoryLedger, SqliteLedger
from pytest_vault.guard.packs import Facts, Packs, policy_of
from pytest_vault.guard.passport import Passport, read_passport

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Payment(Protocol[R_co]):
    """A protected `transfer_funds`: takes the tool's arguments as the model gave them."""

    def __call__(
        self,
        recipient: object,
        amount: object,
        currency: object = ...,
        memo: object = ...,
        idempotency_key: object = ...,
    ) -> R_co: ...


def _utcnow() -> datetime:
    return datetime.now(UTC)


def major_units(transfer: Transfer) -> Decimal:
    """The normalized amount as an exact Decimal in major units: 30050 USD -> 300.50,
    made in the engine's exact context (the caller's `prec = 2` made it 3.0E+2)."""
    return EXACT.scaleb(Decimal(transfer.amount_minor), -MINOR_DIGITS[transfer.currency])


class PaymentDenied(VaultError):
    """A protected payment the guard did not allow; `decision` says why."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        why = "; ".join(f"{r.code}: {r.message}" for r in decision.reasons)
        super().__init__(f"transfer denied: {why}")


class Guard:
    """One passport, one ledger store, one audit sink. Thread-safe; one per process."""

    def __init__(
        self,
        passport: Passport,
        *,
        digest: str,
        ledger: LedgerStore,
        audit: str | os.PathLike[str] | logging.Logger | None = None,
        clock: Callable[[], datetime] = _utcnow,
        facts: Facts | None = None,
    ) -> None:
        self.passport = passport
        self.digest = digest
        self._store = ledger
        self._audit = audit if isinstance(audit, logging.Logger | None) else os.fspath(audit)
        self._clock = clock
        self._now = datetime.fromtimestamp(0, UTC)  # set under the lock for each decision
        # One engine, judging under one instant per decision: the day whose total the
        # store read is the day the engine checks and commits to, even across midnight.
        self._engine = Engine(passport, clock=lambda: self._now)
        # The other packs on the same engine; their facts from the caller's system only.
        self._packs = Packs(self._engine, facts=facts)
        self._lock = threading.Lock()

    @classmethod
    def load(
        cls,
        passport_path: str | os.PathLike[str],
        ledger: str | os.PathLike[str] | None = None,
        audit: str | os.PathLike[str] | logging.Logger | None = None,
        *,
        in_memory_ledger: bool = False,
        busy_timeout: float = 5.0,
        clock: Callable[[], datetime] = _utcnow,
        facts: Facts | None = None,
    ) -> Guard:
        """Read the passport (a bad one is a one-line `PassportError`) and check the ledger's
        path names a durable file (else a one-line `LedgerError`): the file is opened at
        the first check, and a ledger that cannot be used then denies every call.

        `in_memory_ledger=True`, instead of a path, is a ledger for tests: NOT durable, it
        is lost when the process ends, and with it every cap's total and used key.

        `facts` is the caller's system of record for the other packs (`packs.Facts`)."""
        if type(in_memory_ledger) is not bool:
            raise LedgerError(
                f"in_memory_ledger must be True or False, got {shown(repr(in_memory_ledger))}"
            )
        if in_memory_ledger and ledger is not None:
            raise LedgerError("give ledger=PATH or in_memory_ledger=True, not both")
        if not in_memory_ledger and ledger is None:
            raise LedgerError(
                "no ledger: give ledger=PATH, a durable SQLite file "
                "(in_memory_ledger=True is for tests: it forgets every total at exit)"
            )
        passport, digest = read_passport(os.fspath(passport_path))
        store: LedgerStore = (
            MemoryLedger()
            if ledger is None
            else SqliteLedger(ledger, passport_id=passport.passport_id, busy_timeout=busy_timeout)
        )
        return cls(passport, digest=digest, ledger=store, audit=audit, clock=clock, facts=facts)

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- decisions --------------------------------------------------------------------
    def check(self, tool: object, arguments: object) -> Decision:
        """Judge a tool call and, if allowed, record it: `engine.Guard.check_call`."""
        try:
            if tool != TRANSFER_TOOL:
                # Denied whatever the ledger holds, so the ledger is not touched.
                decision = self._engine.judge_call(tool, arguments)
                return self._audited(tool, decision)
            try:
                transfer = read_transfer(arguments)
            except Unreadable as exc:
                return self._audited(tool, deny(INVALID_CONTEXT, str(exc)))
        except Exception as exc:  # noqa: BLE001 - fail closed, as the engine does
            return self._audited(tool, _failed(exc))
        # The transfer read once is the one judged, recorded and executed.
        return self._judged(tool, transfer, lambda: self._commit(transfer))

    def check_context(
        self, context: object, passport: Passport | None = None, *, policy: str = POLICY_ID
    ) -> Decision:
        """Judge a context of the pack `policy` (optionally under another passport): the
        CLI's context lines; a pack of `guard.packs` reads its facts from `facts`."""
        if policy != POLICY_ID and policy_of(policy) != POLICY_ID:
            return self._pack(policy, context, passport)
        try:
            ctx = read_context(context)
        except Unreadable as exc:
            return self._audited("context", deny(INVALID_CONTEXT, str(exc)))
        except Exception as exc:  # noqa: BLE001 - fail closed, as the engine does
            return self._audited("context", _failed(exc))
        probe = Transfer(ctx.merchant_id, ctx.amount, ctx.currency, ctx.memo, ctx.idempotency_key)
        return self._judged(
            "context", probe, lambda: self._engine.check_context(context, passport), carry=False
        )

    def _pack(self, policy: str, context: object, passport: Passport | None) -> Decision:
        """A context of another pack: read, facts fetched and judged at one instant, its
        ledger tallies read and recorded in one store transaction."""
        name = policy_of(policy) or POLICY_ID  # what the audit names; unknown ones deny
        with self._lock:
            judged_at: datetime | None = None
            try:
                self._now = judged_at = self._clock()
                pending = self._packs.prepare(policy, context, passport, judged_at)
                if isinstance(pending, Decision):
                    decision = pending
                else:
                    with self._store.transaction(
                        pending.today, pending.currency, pending.key, pending.tallies
                    ) as state:
                        decision = self._packs.settle(pending, state)
            except LedgerError as exc:
                decision = deny(EVALUATION_ERROR, f"ledger unavailable: {exc}")
            except Exception as exc:  # noqa: BLE001 - a clock or store that breaks denies
                decision = deny(EVALUATION_ERROR, f"evaluation failed: {_kind(exc)}")
            return self._audited("context", decision, judged_at, policy=name)

    def _commit(self, transfer: Transfer) -> Decision:
        decision = self._engine.judge_transfer(transfer)
        if decision.allow:
            self._engine.commit(transfer)
        return decision

    def _judged(
        self, tool: object, probe: Transfer, judge: Callable[[], Decision], *, carry: bool = True
    ) -> Decision:
        """`judge` inside one store transaction holding `probe`'s day total and key."""
        shown_transfer = probe if carry else None  # context decisions carry no transfer
        with self._lock:
            judged_at: datetime | None = None
            try:
                self._now = judged_at = self._clock()
                day = utc_day(self._now)  # the day the engine judges on, from the same reading
                with self._store.transaction(day, probe.currency, probe.idempotency_key) as state:
                    self._engine.ledger = state
                    decision = judge()
            except ClockError as exc:
                decision = deny(EVALUATION_ERROR, str(exc), shown_transfer)
            except LedgerError as exc:
                decision = deny(EVALUATION_ERROR, f"ledger unavailable: {exc}", shown_transfer)
            except Exception as exc:  # noqa: BLE001 - a clock or store that breaks denies
                decision = deny(
                    EVALUATION_ERROR, f"evaluation failed: {_kind(exc)}", shown_transfer
                )
            finally:
                self._engine.ledger = Ledger()  # the engine keeps no state between calls
            # The record's time is the instant judged: a second reading could fall on the
            # next day, and the record would not say which day's total was checked.
            return self._audited(tool, decision, judged_at)

    # -- audit ------------------------------------------------------------------------
    def _audited(
        self,
        tool: object,
        decision: Decision,
        when: datetime | None = None,
        *,
        policy: str = POLICY_ID,
    ) -> Decision:
        """Write the decision's one audit record, timed `when` (the instant judged; a
        reading of the clock for a call refused before one); a decision that cannot be
        audited denies."""
        if self._audit is None:
            return decision
        try:
            moment = self._clock() if when is None else when
            self._write(_record(self, tool, decision, moment, policy))
        except Exception as exc:  # noqa: BLE001 - nothing executes unaudited
            return deny(EVALUATION_ERROR, f"audit log unavailable: {_kind(exc)}", decision.transfer)
        return decision

    def _write(self, line: str) -> None:
        if isinstance(self._audit, logging.Logger):
            self._audit.info(line)
        elif self._audit is not None:
            # One write(2) to an O_APPEND file: lines from many processes never interleave.
            fd = os.open(self._audit, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)

    # -- the production wrapper ---------------------------------------------------------
    def protect(self, fn: Callable[..., R]) -> Payment[R]:
        """Wrap a real `transfer_funds(recipient, amount, currency, memo, idempotency_key)`.

        The wrapper takes the tool's arguments as the model gave them, judges them, and
        calls `fn` with keywords holding the normalized values (amount: `major_units`),
        or raises `PaymentDenied`: also for a call it cannot pass on as judged (an
        argument the tool lacks, a missing one, too many positional ones), with its
        audit record, as `check` denies it. An async `fn` is judged in a worker thread,
        so a ledger waiting on its lock never blocks the event loop.

        `fn` must take all five by keyword (or `**kwargs`), and need nothing else: one
        that cannot would be called after its transfer was recorded only to fail, or be
        passed less than was judged, so it is refused here with a `TypeError`.
        """
        _takes_every_value(fn)
        if inspect.iscoroutinefunction(fn):
            async_fn = cast(Callable[..., Awaitable[Any]], fn)  # R is its coroutine

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                import asyncio

                transfer = await asyncio.to_thread(self._allowed, args, kwargs)
                return await async_fn(**_values(transfer))

            return cast(Payment[R], run_async)

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> R:
            return fn(**_values(self._allowed(args, kwargs)))

        return cast(Payment[R], run)

    def _allowed(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Transfer:
        try:
            arguments = _named(args, kwargs)
        except Unreadable as exc:
            decision = self._audited(TRANSFER_TOOL, deny(INVALID_CONTEXT, str(exc)))
        else:
            decision = self.check(TRANSFER_TOOL, arguments)
        if decision.executes is None:
            raise PaymentDenied(decision)
        return decision.executes


def _named(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A protected call's arguments by name, positional ones in the tool's order. Every
    name goes on to the reader, which denies one the tool lacks and a missing required
    one in its own words; what was not passed is left to its defaults."""
    if len(args) > len(TRANSFER_ARGS):
        raise Unreadable(
            f"{TRANSFER_TOOL} takes {len(TRANSFER_ARGS)} positional arguments, got {len(args)}"
        )
    named = dict(zip(TRANSFER_ARGS, args, strict=False))
    if twice := sorted(named.keys() & kwargs.keys()):
        raise Unreadable(f"argument(s) {', '.join(map(repr, twice))} given by position and name")
    return named | kwargs


def _takes_every_value(fn: Callable[..., object]) -> None:
    """`TypeError`, in words, unless `fn` can be called with the five judged values by
    keyword and nothing more."""
    name = shown(getattr(fn, "__qualname__", None) or repr(fn))
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:  # a builtin without one, or not a callable
        raise TypeError(f"protect: cannot read the signature of {name}: {_kind(exc)}") from None
    try:
        signature.bind(**dict.fromkeys(TRANSFER_ARGS))
    except TypeError as exc:
        raise TypeError(
            f"protect: {name} must take recipient, amount, currency, memo and "
            f"idempotency_key by keyword, and nothing else it needs: {shown(str(exc))}"
        ) from None


def _values(transfer: Transfer) -> dict[str, Any]:
    return {
        "recipient": transfer.recipient,
        "amount": major_units(transfer),
        "currency": transfer.currency,
        "memo": transfer.memo,
        "idempotency_key": transfer.idempotency_key,
    }


def _kind(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    return shown(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)


def _failed(exc: Exception) -> Decision:
    return deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}")


def _record(
    guard: Guard, tool: object, decision: Decision, when: datetime, policy: str = POLICY_ID
) -> str:
    """One audit line: what was decided and on what, never the raw arguments."""
    transfer = decision.transfer
    return json_text(
        {
            "time": when.isoformat(),
            "tool": tool if type(tool) is str else shown(repr(tool)),
            "allow": decision.allow,
            "codes": list(decision.codes),
            "reasons": [r.message for r in decision.reasons],
            "transfer": None if transfer is None else transfer.to_dict(),
            "policy_id": policy,
            "passport_id": guard.passport.passport_id,
            "passport_digest": guard.digest,
        },
        separators=(",", ":"),
    )
