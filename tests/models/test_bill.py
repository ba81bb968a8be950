"""What an answer costs, and whom (`models/bill.py`, `ratelimit.Spend`): an answer is
billed once, to the evaluation whose request went to the provider; the evaluations that
share it reused it; one from the cache was cached; an answer the provider stopped is
billed, kept and replayed; a judge's answers are never a row's. Real SDK clients over
HTTP against the local server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_vault.harness.agent import Evaluation, Message, ModelRequest
from pytest_vault.harness.events import row
from pytest_vault.models.bill import Bill, billing
from pytest_vault.models.providers import ProviderModel
from pytest_vault.models.ratelimit import Price, Spend, usd

from ..evaluations import evaluate
from ..fakeprovider import FakeProvider
from .test_hostile_answers import answer
from .test_providers import ATTACK, LEVELS, case, model

SPEC = "openai:test-model"


async def billed(m: ProviderModel, arch: str) -> tuple[Evaluation, Bill]:
    """One evaluation of ATTACK on track A, under its own bill."""
    c = case(ATTACK)
    with billing(m) as bill:
        ev = await evaluate(c, LEVELS[c.level], m, "A", arch)  # type: ignore[arg-type]
    return ev, bill


def run(m: ProviderModel, *archs: str) -> list[tuple[Evaluation, Bill]]:
    """Evaluations at once, each in its own task (as the runner's), then the client closed."""

    async def go() -> list[tuple[Evaluation, Bill]]:
        try:
            return list(await asyncio.gather(*(billed(m, a) for a in archs)))
        finally:
            await m.close()

    return asyncio.run(go())


def columns(bill: Bill, spend: Spend) -> dict[str, Any]:
    return bill.columns(spend, SPEC)


def test_a_stopped_answer_is_billed_once_kept_and_replayed(
    fake: FakeProvider, tmp_path: Path
) -> None:
    fake.reply(answer("openai", text='"I will send"', end='"length"'))
    spend = Spend({SPEC: Price(1e6, 1e6)})  # $1 a token: 30 + 12 tokens cost $42
    [(ev, bill)] = run(model("openai", cache=tmp_path, spend=spend), "model")
    assert (ev.status, ev.error) == (
        "error",
        "openai: the answer was stopped (finish_reason 'length')",
    )
    # The evaluation never saw the answer's usage; its bill did.
    assert (ev.usage.input_tokens, ev.usage.output_tokens) == (0, 0)
    assert columns(bill, spend) == {
        "input_tokens": 30,
        "output_tokens": 12,
        "cost_usd": 42.0,
        "answers_billed": 1,
        "answers_reused": 0,
        "answers_cached": 0,
    }
    assert (spend.totals(), spend.spent_usd) == ((1, 30, 12), 42.0)
    # Kept: a rerun replays the same error row and pays nothing.
    again = Spend({SPEC: Price(1e6, 1e6)})
    [(ev2, bill2)] = run(model("openai", cache=tmp_path, spend=again), "model")
    assert (ev2.status, ev2.error) == (ev.status, ev.error)
    assert len(fake.requests) == 1
    assert columns(bill2, again) == {
        "input_tokens": 30,
        "output_tokens": 12,
        "cost_usd": 0.0,
        "answers_billed": 0,
        "answers_reused": 0,
        "answers_cached": 1,
    }
    assert (again.totals(), again.totals(saved=True), again.saved_usd) == (
        (0, 0, 0),
        (1, 30, 12),
        42.0,
    )
    assert again.line() == (
        "spent $0.00 on 0 billed answers, 0 tokens in / 0 out "
        "(saved $42.00: 1 answer reused or cached)"
    )


@pytest.mark.parametrize("cached", [False, True], ids=["no-cache", "cache"])
def test_a_shared_answer_is_billed_to_the_evaluation_that_asked(
    fake: FakeProvider, tmp_path: Path, cached: bool
) -> None:
    # Both architectures ask the same first request at once: one asks (the single
    # flight), the other reuses its answer; their second requests differ.
    fake.script.latency = 0.1
    spend = Spend({SPEC: Price(1e6, 1e6)})
    m = model("openai", cache=tmp_path if cached else None, spend=spend)
    results = run(m, "model", "guarded")
    assert len(fake.requests) == 3
    bills = sorted(
        (b.answers["billed"], b.answers["reused"], b.answers["cached"]) for _, b in results
    )
    assert bills == [(1, 1, 0), (2, 0, 0)]
    # The server's own count: each request's messages / 4 in, 12 out.
    used = [len(json.dumps(q["body"]["messages"])) // 4 for q in fake.requests]
    assert spend.billed == {SPEC: [3, sum(used), 36]}
    assert spend.saved == {SPEC: [1, used[0], 12]}  # the shared first answer, once more
    assert sum(b.billed_input_tokens for _, b in results) == sum(used)
    # The rows add up to the bill; each row's tokens are every answer it used.
    costs = [columns(b, spend)["cost_usd"] for _, b in results]
    assert sum(costs) == pytest.approx(spend.spent_usd, rel=1e-12) == sum(used) + 36
    assert [columns(b, spend)["input_tokens"] for _, b in results] == [
        ev.usage.input_tokens for ev, _ in results
    ]


def test_a_judges_answers_are_never_the_rows(fake: FakeProvider) -> None:
    spend = Spend({SPEC: Price(1.0, 1.0)})
    agent, judge = model("openai", spend=spend), model("openai", spend=spend)
    c = case(ATTACK)
    request = ModelRequest("audit", (Message("user", "audit"),), (), 0.0, 10, c, LEVELS[c.level])

    async def go() -> Bill:
        with billing(agent) as bill:
            await judge.respond(request)  # the same spec, another model: a judge's
        await judge.close()
        await agent.close()
        return bill

    bill = asyncio.run(go())
    assert (bill.ours, bill.answers, bill.input_tokens) == (
        False,
        {"billed": 0, "reused": 0, "cached": 0},
        0,
    )
    assert spend.totals()[0] == 1  # the run's ledger counts it


def test_a_row_carries_the_bill(fake: FakeProvider) -> None:
    spend = Spend({SPEC: Price(2.5, 10.0)})
    [(ev, bill)] = run(model("openai", spend=spend), "guarded")
    r = row(ev) | bill.columns(spend, SPEC)
    assert (r["answers_billed"], r["answers_reused"], r["answers_cached"]) == (2, 0, 0)
    assert (r["input_tokens"], r["output_tokens"]) == (
        ev.usage.input_tokens,
        ev.usage.output_tokens,
    )
    assert r["cost_usd"] == pytest.approx(spend.spent_usd, rel=1e-12)


# -- the ledger and its line ---------------------------------------------------------------


def test_usd_is_money_to_the_cent() -> None:
    assert [usd(v) for v in (0, 0.004, 0.005, 0.0695, 1250, None)] == [
        "$0.00",
        "under $0.01",
        "$0.01",
        "$0.07",
        "$1,250.00",
        "no price",
    ]


def test_the_line_of_a_ledger() -> None:
    spend = Spend({SPEC: Price(2.5, 10.0)}, cap_usd=5.0)
    assert spend.line() is None  # nothing answered: nothing said
    spend.add(SPEC, 20_000, 1_000)
    spend.add(SPEC, 8_000, 500, "ab" * 32)
    spend.save(SPEC, 4_000, 100)
    spend.save("anthropic:unpriced", 1_000, 10)
    spend.add("anthropic:unpriced", 1_000, 10)
    assert spend.asked("ab" * 32) and not spend.asked("cd" * 32)
    # 28,000 x $2.5 + 1,500 x $10 a million: $0.085; saved 4,000 x 2.5 + 100 x 10: $0.011.
    assert spend.line() == (
        "spent $0.09+? of the $5.00 budget on 3 billed answers, 29,000 tokens in / 1,510 out "
        "(saved $0.01+?: 2 answers reused or cached); no price for "
        "anthropic:unpriced (--vault-prices)"
    )
    # Under xdist the controller adds the workers' ledgers: the same line, whatever order.
    total = Spend({SPEC: Price(2.5, 10.0)}, cap_usd=5.0)
    half = Spend()
    half.add(SPEC, 20_000, 1_000)
    rest = Spend()
    rest.add(SPEC, 8_000, 500)
    rest.save(SPEC, 4_000, 100)
    rest.save("anthropic:unpriced", 1_000, 10)
    rest.add("anthropic:unpriced", 1_000, 10)
    for record in (rest.record(), half.record()):
        total.merge(record)
    assert total.line() == spend.line()
    assert total.line(whole=False) == (
        "spent at least $0.09+? of the $5.00 budget on 3 billed answers, 29,000 tokens in / "
        "1,510 out (saved $0.01+?: 2 answers reused or cached); no price for "
        "anthropic:unpriced (--vault-prices); a worker ended without sending its last count"
    )
    unpriced = Spend()
    unpriced.add(SPEC, 10, 1)
    assert unpriced.line() == (
        "spent an unknown amount on 1 billed answer, 10 tokens in / 1 out (saved an unknown "
        "amount: 0 answers reused or cached); no price for openai:test-model (--vault-prices)"
    )
