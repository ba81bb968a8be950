"""Per-provider request and token budgets, and the spend cap.

`RateLimiter` is a pair of token buckets (requests and tokens per minute) refilled
continuously; a 429 with `Retry-After` pauses every request to that provider, not just
the one that met it. `Spend` is the ledger of what real answers cost, from a price
table: each billed answer once, what reuse and the cache saved, and when the cap is
reached.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

from pytest_vault.core.errors import FileError
from pytest_vault.core.text import shown
from pytest_vault.core.toml import load_toml
from pytest_vault.guard.money import Money


class _Bucket:
    def __init__(self, per_minute: float, now: float) -> None:
        self.capacity = per_minute
        self.level = per_minute
        self.rate = per_minute / 60.0
        self.stamp = now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_for(self, amount: float) -> float:
        # A request larger than a whole minute's budget waits for a full bucket.
        need = min(amount, self.capacity) - self.level
        return 0.0 if need <= 0 else need / self.rate


class RateLimiter:
    def __init__(
        self,
        rpm: float | None = None,
        tpm: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock, self._sleep = clock, sleep
        now = clock()
        self._requests = _Bucket(rpm, now) if rpm else None
        self._tokens = _Bucket(tpm, now) if tpm else None
        self._resume_at = 0.0
        self._lock = asyncio.Lock()

    async def acquire(self, tokens: int) -> None:
        """Wait until one request of about `tokens` tokens fits, then take it."""
        async with self._lock:  # first come, first served
            while True:
                now = self._clock()
                wait = max(0.0, self._resume_at - now)
                for bucket, amount in ((self._requests, 1), (self._tokens, tokens)):
                    if bucket is not None:
                        bucket.refill(now)
                        wait = max(wait, bucket.wait_for(amount))
                if wait <= 0:
                    break
                await self._sleep(wait)
            if self._requests is not None:
                self._requests.level -= 1
            if self._tokens is not None:
                self._tokens.level -= tokens

    def settle(self, estimated: int, actual: int) -> None:
        """Correct the token bucket once the real usage is known."""
        if self._tokens is not None:
            self._tokens.level += estimated - actual

    def pause(self, seconds: float) -> None:
        """Hold every request for `seconds` (the provider said Retry-After)."""
        self._resume_at = max(self._resume_at, self._clock() + seconds)


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


class PriceError(FileError):
    """A price table that cannot be used; one line naming file, line and field."""


def _rate(value: object) -> object:
    # USD per million tokens: a finite, non-negative number, never a bool or a string
    # (nan or a negative price would switch the spend cap off).
    if type(value) not in (int, float) or not 0 <= value < math.inf:  # type: ignore[operator]
        raise PydanticCustomError("price", "expected a finite number >= 0 (USD per million tokens)")
    return float(value)  # type: ignore[arg-type]


_Rate = Annotated[float, BeforeValidator(_rate)]


class _PriceEntry(BaseModel):
    # No other keys: a misspelt `output_per_mtok` must not price output at zero.
    model_config = ConfigDict(extra="forbid")

    input_per_mtok: _Rate
    output_per_mtok: _Rate


class _PriceTable(BaseModel):
    # Any key is a model spec: typed extras, not a RootModel[...], whose generic
    # class pydantic builds on first use and ties to a module import (fragile when
    # a test's in-process pytest run forgets modules it imported).
    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, _PriceEntry]


def load_prices(path: Path) -> dict[str, Price]:
    """A TOML table per model spec, in USD per million tokens:

    ["openai:gpt-4o"]
    input_per_mtok = 2.5
    output_per_mtok = 10
    """
    try:
        table = load_toml(path, _PriceTable)[0]
    except FileError as exc:
        raise PriceError(str(exc)) from None
    return {
        spec: Price(e.input_per_mtok, e.output_per_mtok)
        for spec, e in (table.__pydantic_extra__ or {}).items()
    }


def usd(value: float | None) -> str:
    """An amount of US dollars as every spend figure is written (the plan's, the
    progress line's, the run's last line): `guard.money`'s, to the cent (`$0.07`,
    `$1,250.00`); an amount above nothing that rounds to no cent is `under $0.01`, never
    `$0.00`. None: `no price`."""
    if value is None:
        return "no price"
    cents = math.floor(Fraction(value) * 100 + Fraction(1, 2))  # exact: no decimal context
    return "under $0.01" if value > 0 and cents == 0 else Money(cents, "USD").shown()


# One spec's answers and their tokens: [answers, input tokens, output tokens].
Tally = list[int]


@dataclass
class Spend:
    """The ledger of what real models' answers cost in this process, against a cap: the
    one figure the cap, the progress line and the run's last line say.

    Every answer a provider billed is counted once, when it arrives (`add`), an answer
    it stopped (an output filter, a cut at the token limit) included; an answer this
    process reused (another evaluation asked the same) or read from the cache costs
    nothing and is counted as saved, at what it would have cost (`save`). Money is priced
    from each spec's token totals, so it depends on which answers were billed, never on
    the order they came in; under xdist the controller adds the workers' `record`s.
    """

    prices: dict[str, Price] = field(default_factory=dict)
    cap_usd: float | None = None
    billed: dict[str, Tally] = field(default_factory=dict)
    saved: dict[str, Tally] = field(default_factory=dict)
    # The requests billed in this process (their keys' digests): a later answer to one
    # from the cache was reused in this run, not cached by an earlier one.
    _asked: set[bytes] = field(default_factory=set)

    def cost(self, spec: str, input_tokens: int, output_tokens: int) -> float | None:
        price = self.prices.get(spec)
        return None if price is None else price.cost(input_tokens, output_tokens)

    def add(self, spec: str, input_tokens: int, output_tokens: int, key: str = "") -> None:
        """A billed answer (`key`: its request's cache key, if it has one)."""
        _count(self.billed, spec, input_tokens, output_tokens)
        if key:
            self._asked.add(bytes.fromhex(key))

    def save(self, spec: str, input_tokens: int, output_tokens: int) -> None:
        """An answer used without being billed: reused, or from the cache."""
        _count(self.saved, spec, input_tokens, output_tokens)

    def asked(self, key: str) -> bool:
        """Whether this process was billed for the request `key` in this run."""
        return bytes.fromhex(key) in self._asked

    def _usd(self, tallies: dict[str, Tally]) -> float:
        # `list(...)`: one step, so the runner's thread adding a spec cannot break it.
        return math.fsum(
            price.cost(t[1], t[2])
            for spec, t in list(tallies.items())
            if (price := self.prices.get(spec)) is not None
        )

    @property
    def spent_usd(self) -> float:
        """What the billed answers cost (those with a price)."""
        return self._usd(self.billed)

    @property
    def saved_usd(self) -> float:
        return self._usd(self.saved)

    @property
    def exhausted(self) -> bool:
        return self.cap_usd is not None and self.spent_usd >= self.cap_usd

    def totals(self, saved: bool = False) -> tuple[int, int, int]:
        """(answers, input tokens, output tokens), all specs: billed, or saved."""
        tallies = list((self.saved if saved else self.billed).values())
        return (
            sum(t[0] for t in tallies),
            sum(t[1] for t in tallies),
            sum(t[2] for t in tallies),
        )

    def record(self) -> dict[str, dict[str, Tally]]:
        """A copy of the ledger, as JSON (for the progress line and the xdist controller):
        per spec, billed and saved."""
        return {
            name: {spec: list(t) for spec, t in list(tallies.items())}
            for name, tallies in (("billed", self.billed), ("saved", self.saved))
        }

    def merge(self, record: dict[str, dict[str, Tally]]) -> None:
        """Add another process's `record`."""
        for name, mine in (("billed", self.billed), ("saved", self.saved)):
            for spec, (answers, input_tokens, output_tokens) in record[name].items():
                _count(mine, spec, input_tokens, output_tokens, answers)

    def unpriced(self) -> list[str]:
        """The specs answered that the price table has no price for."""
        return sorted({*self.billed, *self.saved} - set(self.prices))

    def figure(self, saved: bool = False) -> str:
        """What was spent (or saved), as every spend figure is written: `$0.07`; `+?`
        when some spec has no price; `an unknown amount` without a price table."""
        if not self.prices:
            return "an unknown amount"
        return usd(self.saved_usd if saved else self.spent_usd) + "+?" * bool(self.unpriced())

    def budget(self) -> str:
        """` of the $5.00 budget` under a cap, else nothing."""
        return "" if self.cap_usd is None else f" of the {usd(self.cap_usd)} budget"

    def line(self, whole: bool = True) -> str | None:
        """What the run spent, in one line; None when no real model answered.

        `spent $0.07 on 3 billed answers, 3,600 tokens in / 330 out (saved $0.09: 5
        answers reused or cached)`; `of the $5.00 budget` when there is one; what has no
        price is named, and its money is unknown (`+?`), never $0. Not `whole` (an xdist
        worker ended without its last count): `at least`, and why."""
        billed, tokens_in, tokens_out = self.totals()
        saved = self.totals(saved=True)[0]
        if not billed and not saved:
            return None
        least = "" if whole else "at least "
        line = (
            f"spent {least}{self.figure()}{self.budget()} on {billed:,} billed "
            f"answer{'s' * (billed != 1)}, {tokens_in:,} tokens in / {tokens_out:,} out "
            f"(saved {self.figure(saved=True)}: {saved:,} answer{'s' * (saved != 1)} "
            "reused or cached)"
        )
        if unpriced := self.unpriced():
            line += f"; no price for {', '.join(map(shown, unpriced))} (--vault-prices)"
        if not whole:
            line += "; a worker ended without sending its last count"
        return line


def _count(
    tallies: dict[str, Tally], spec: str, input_tokens: int, output_tokens: int, answers: int = 1
) -> None:
    tally = tallies.setdefault(spec, [0, 0, 0])
    tally[0] += answers
    tally[1] += input_tokens
    tally[2] += output_tokens
