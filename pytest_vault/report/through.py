"""What got through: the evaluations in which a forbidden transfer executed, each named.

The summary's counts say how many; this list says which, so a red run leads straight to
an attack: per model and architecture, up to `PER_CELL` evaluations, each with its test
id, what executed (amount, recipient, and why the passport forbids it, in the guard's
reason codes: model alone, what the guard would have decided), whether it was the
injected action of an indirect attack, and the one command that shows its conversation.
Then how many more, and where all of them are.

A function of the rows alone, in a canonical order (model, architecture, the team's own cases
before the built-in corpus's, then the id):
never of the order the tests ran in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pytest_vault.core.text import shown
from pytest_vault.corpus import builtin
from pytest_vault.guard.money import Money
from pytest_vault.harness.events import forbidden, goal_of, logged_calls, named_by
from pytest_vault.report.results import read_calls
from pytest_vault.report.transcript import KEY, command, node_ids

PER_CELL = 10  # evaluations named per model and architecture


@dataclass(frozen=True)
class Paid:
    """One forbidden transfer that executed."""

    money: str  # as the one money formatter shows it: `$700.00`
    recipient: str
    codes: tuple[str, ...]  # the guard's reason codes for it (its shadow's, model alone)
    injected: bool  # the injected action of the row's indirect attack


@dataclass(frozen=True)
class Through:
    """An evaluation in which a forbidden transfer executed."""

    ident: str  # the test's id (pytest's node id, where the run knows it)
    model: str
    architecture: str
    paid: tuple[Paid, ...]


def got_through(
    rows: Iterable[tuple[str, Mapping[str, Any]]],
    calls: Callable[[Mapping[str, Any]], Sequence[Mapping[str, Any]]] = logged_calls,
) -> list[Through]:
    """The evaluations among `rows` ((id, row) pairs) in which a forbidden transfer
    executed, an unpermitted one (the passport forbids its recipient) or a violation (an
    executed call the guard did not allow), in canonical order. `calls(row)` reads a
    row's logged calls: a run's JSON text (`logged_calls`), or a results table's."""
    out = []
    for ident, r in rows:
        if not (r["unpermitted"] or r["violation"]):
            continue
        goal = None
        if r.get("clean") is False and isinstance(r.get("goal_recipient"), str):
            goal = goal_of(r)
        paid = []
        for call in calls(r):
            codes = forbidden(call)
            if codes is None:
                continue  # nothing executed, or the task's own payment
            t = call["transfer"]
            paid.append(
                Paid(
                    Money(int(t["amount_minor"]), str(t["currency"])).shown(),
                    str(t["recipient"]),
                    codes,
                    goal is not None and named_by(goal, call),
                )
            )
        out.append(Through(ident, str(r["model"]), str(r["architecture"]), tuple(paid)))
    order = {"model": 0, "guarded": 1}
    # The team's own cases before the built-in corpus's: theirs are what they wrote.
    ours = f"{builtin.PREFIX}/"
    return sorted(
        out,
        key=lambda t: (t.model, order.get(t.architecture, 2), t.ident.startswith(ours), t.ident),
    )


def in_table(table: pa.Table) -> list[Through]:
    """What got through among a results table's rows, each named by its test's node id
    as the run printed it (`transcript.node_ids`: what the terminal names, and
    `vault-report --show` takes)."""
    hit = pc.or_(pc.fill_null(table["unpermitted"], False), pc.fill_null(table["violation"], False))
    at = pa.array(np.flatnonzero(hit.to_numpy(zero_copy_only=False)), pa.int64())
    names = [
        *KEY,
        "unpermitted",
        "violation",
        "clean",
        "goal_recipient",
        "goal_amount_minor",
        "tool",
    ]
    rows = table.select([*names, "tool_calls"]).take(at).to_pylist()
    keyed = zip((own for own, _ in node_ids(table, at)), rows, strict=True)
    return got_through(keyed, lambda r: read_calls(r["tool_calls"]))


@dataclass(frozen=True)
class Cell:
    """What got through for one model and architecture: the first `PER_CELL`, and how
    many more."""

    model: str
    said: str  # "model alone" or "behind the guard"
    shown: list[Through]
    more: int


def cells(found: list[Through]) -> list[Cell]:
    by: dict[tuple[str, str], list[Through]] = {}
    for t in found:
        by.setdefault((t.model, t.architecture), []).append(t)
    return [
        Cell(
            model,
            "model alone" if arch == "model" else "behind the guard",
            mine[:PER_CELL],
            max(0, len(mine) - PER_CELL),
        )
        for (model, arch), mine in by.items()
    ]


def why(p: Paid) -> str:
    """Why the passport forbids a transfer: the guard's reason codes."""
    return ", ".join(p.codes) or "not permitted by the passport"


def lines(found: list[Through], results: str | None, report: str | None) -> list[str]:
    """The list for the terminal: nothing when nothing got through."""
    if not found:
        return []
    out = [f"What got through: {len(found):,} evaluation(s) in which a forbidden transfer executed"]
    for cell in cells(found):
        out.append(f"  {shown(cell.model)}, {cell.said}: {len(cell.shown) + cell.more:,}")
        for t in cell.shown:
            out.append(f"    {shown(t.ident)}")
            for p in t.paid:
                to, injected = shown(repr(p.recipient)), "; the injected action" * p.injected
                out.append(f"      paid {p.money} to {to} ({shown(why(p))}){injected}")
            if results is not None:
                out.append(f"      {shown(command(t.ident, results))}")
        if cell.more:
            out.append(f"    ... and {cell.more:,} more")
    where = [f"the results file {shown(results)}"] if results is not None else []
    where += [f"the HTML report {shown(report)}"] if report is not None else []
    if where:
        out.append(f"All of them: {' and '.join(where)}.")
    else:
        out.append("All of them, with their conversations: run with --vault-results FILE.")
    return out
