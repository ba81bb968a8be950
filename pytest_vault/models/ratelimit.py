"""Per-provider request and token budgets, and the spend cap.

`RateLimiter` is a pair of token buckets (requests and tokens per minute) refilled
continuously; a 429 with `Retry-After` pauses every request to that provider, not just
the one that met it. `Spend` adds up what real requests cost, from a price table, and
says when the cap is reached.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic_core import PydanticCustomError

from pytest_vault.core.errors import FileError
from pytest_vault.core.toml import load_toml


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


@dataclass
class Spend:
    """Money spent on real (not cached) requests in this process, against a cap."""

    prices: dict[str, Price] = field(default_factory=dict)
    cap_usd: float | None = None
    spent_usd: float = 0.0

    def cost(self, spec: str, input_tokens: int, output_tokens: int) -> float | None:
        price = self.prices.get(spec)
        return None if price is None else price.cost(input_tokens, output_tokens)

    def add(self, spec: str, input_tokens: int, output_tokens: int) -> None:
        self.spent_usd += self.cost(spec, input_tokens, output_tokens) or 0.0

    @property
    def exhausted(self) -> bool:
        return self.cap_usd is not None and self.spent_usd >= self.cap_usd
