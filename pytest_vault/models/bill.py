"""One evaluation's bill: what the answers of the model under test cost its row.

An answer is billed once, in the row whose request went to the provider. Evaluations
that ask the very same thing (both architectures' first step, say) share one answer:
the first to ask is billed for it, the others `reused` it at no cost; an answer read
from the response cache, asked before this run (or, under xdist, by another worker),
is `cached`, at no cost. An answer the provider stopped (its output filter, a cut at
the token limit) is an error row, but it was billed: its tokens and cost are the row's.

The evaluation's task holds its bill in a context variable (`billing`): the provider
model notes each answer it gives the model under test there (`ProviderModel.respond`),
and the single flight's asking runs in the task of the evaluation that asked. A
judge's or an attacker's answers are other models': never a row's (the run's ledger,
`ratelimit.Spend`, counts them). Standard library only: a run of the controls opens a
bill per evaluation and imports no provider code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pytest_vault.models.ratelimit import Spend

# How an evaluation came by an answer (the module's docstring).
Source = Literal["billed", "reused", "cached"]
# The results columns a bill fills, beside `input_tokens`, `output_tokens`, `cost_usd`.
COLUMNS: dict[Source, str] = {
    "billed": "answers_billed",
    "reused": "answers_reused",
    "cached": "answers_cached",
}


@dataclass
class Bill:
    """The answers `model` gave one evaluation: each answer's tokens (the row's token
    columns, stopped answers included), and the tokens of those billed to it (its cost).
    `ours`: the model is a provider model, which notes its answers here."""

    model: object
    ours: bool = False
    answers: dict[Source, int] = field(default_factory=lambda: dict.fromkeys(COLUMNS, 0))
    input_tokens: int = 0
    output_tokens: int = 0
    billed_input_tokens: int = 0
    billed_output_tokens: int = 0

    def note(self, source: Source, input_tokens: int, output_tokens: int) -> None:
        self.answers[source] += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        if source == "billed":
            self.billed_input_tokens += input_tokens
            self.billed_output_tokens += output_tokens

    def columns(self, spend: Spend, spec: str) -> dict[str, Any]:
        """The row's token, cost and answer columns (cost None: `spec` has no price)."""
        cost = spend.cost(spec, self.billed_input_tokens, self.billed_output_tokens)
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": cost,
            **{column: self.answers[source] for source, column in COLUMNS.items()},
        }


BILL: ContextVar[Bill | None] = ContextVar("pytest_vault_bill", default=None)


@contextmanager
def billing(model: object) -> Iterator[Bill]:
    """The bill of the evaluation run inside: `model`'s answers (the model under test)."""
    bill = Bill(model)
    token = BILL.set(bill)
    try:
        yield bill
    finally:
        BILL.reset(token)
