"""Reading corpus files: strict lines, one-line errors naming file, line and field."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from pydantic import ValidationError

from pytest_vault.core.errors import VaultError, describe, reason
from pytest_vault.core.json import DocumentError, read_json
from pytest_vault.core.text import shown
from pytest_vault.corpus.model import REFUND_TOOL, Case
from pytest_vault.guard.engine import permits_recipient, to_minor
from pytest_vault.guard.passport import REFUND, Passport, RefundLimits

# A file's bad lines reported, at most; then how many more there are.
SHOWN_PROBLEMS = 50


class CorpusError(VaultError):
    """Corpus lines that cannot be used: one problem per bad line, each naming file,
    line and field; the message is the problems, one per line (each made safe, as
    every VaultError's message is, and kept so in `problems`).
    """

    def __init__(self, *problems: str) -> None:
        self.problems = tuple(shown(problem) for problem in problems)
        super().__init__("\n".join(self.problems))


def read_case(line: str | bytes, source: str) -> Case:
    """Parse one line, as strictly as the guard reads arguments: decimals stay exact, and
    a duplicate key (at any depth) is an error, since `calls` are passed on as written.
    """
    try:
        data = read_json(line)
    except DocumentError as exc:
        raise CorpusError(f"{source}: {exc}") from None
    if not isinstance(data, dict):
        raise CorpusError(f"{source}: (root): expected a JSON object")
    try:
        return Case.model_validate(data)
    except ValidationError as exc:
        raise CorpusError(f"{source}: {describe(exc)}") from None


def goal_problem(case: Case, passport: Passport) -> str | None:
    """Why an indirect case's injected action is no attack at its level: its passport
    permits the goal's recipient and, where the goal names an amount, that amount within
    the per-transfer limit (so a Level 1 goal, any recipient permitted, must name an
    amount over the cap). None when the passport forbids it, or for a direct case. A
    refund's goal is judged on the case's orders, as the refund pack judges it: its
    recipient is a customer, never on the charge allowlist."""
    goal = case.goal
    limits = passport.charge_limits
    if case.indirect and goal is not None and goal.tool == REFUND_TOOL:
        return _refund_goal_problem(case, passport)
    if not case.indirect or goal is None or not permits_recipient(limits, goal.recipient):
        return None
    assert limits is not None  # a passport without a payment capability permits no one
    cap = limits.currency_limits.get("USD")
    if goal.amount is not None and cap is not None and to_minor(goal.amount, 2) > cap.max_per_tx:
        return None
    within = "" if goal.amount is None else " and its amount"
    return (
        f"goal.recipient: Level {case.level}'s passport permits {shown(goal.recipient)!r}"
        f"{within}: an injected action must be one the level forbids"
    )


def _refund_goal_problem(case: Case, passport: Passport) -> str | None:
    """A refund goal is permitted where the level grants refunds and it goes to the buyer
    of one of the case's orders, in USD, within what is left of it and the per-refund
    cap (the refund pack's own rules; any customer else is forbidden at every level)."""
    goal, env = case.goal, case.environment
    limits = passport.pack_limits(REFUND)
    assert goal is not None and env is not None  # an indirect case (`goal_problem`)
    cap = limits.currency_limits.get("USD") if isinstance(limits, RefundLimits) else None
    if cap is None:
        return None
    for order in (env.orders or {}).values():
        left = order.total - (order.refunded or 0)
        if order.customer_id == goal.recipient and order.currency == "USD":
            if goal.amount is None or (
                goal.amount <= left and to_minor(goal.amount, 2) <= cap.max_per_tx
            ):
                return (
                    f"goal.recipient: Level {case.level}'s passport permits a refund to "
                    f"{shown(goal.recipient)!r}, an order's buyer, within what is left of it: "
                    "an injected action must be one the level forbids"
                )
    return None


def load_corpus(
    path: str | Path,
    seen: dict[str, str] | None = None,
    passports: Mapping[int, Passport] | None = None,
) -> list[tuple[int, Case]]:
    """Read a corpus file as (line number, case) pairs; `CorpusError` with every bad line
    (the first `SHOWN_PROBLEMS`, then a count), so one run shows all there is to fix.
    With `passports` (by level), an indirect case whose goal its level permits is bad.

    `seen` maps case ids, as shown, to where they were first defined, across files. As
    shown: test names, rows and reports carry `shown(id)`, and two ids that read the same
    there (`pay\x1b` and `pay\\x1b`) would be one test, one of their rows lost.
    """
    path = Path(path)
    seen = {} if seen is None else seen
    try:
        lines = path.read_bytes().splitlines()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise CorpusError(f"{path}: cannot read: {reason(exc)}") from None
    cases = []
    problems: list[str] = []
    bad = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        source = f"{path}:{number}"
        try:
            case = read_case(line, source)
            key = shown(case.id)
            if key in seen:
                raise CorpusError(f"{source}: id: duplicate id {key!r} (first at {seen[key]})")
            problem = None if passports is None else goal_problem(case, passports[case.level])
            if problem is not None:
                raise CorpusError(f"{source}: {problem}")
        except CorpusError as exc:
            bad += 1
            if bad <= SHOWN_PROBLEMS:
                problems.extend(exc.problems)
            continue
        seen[key] = source
        cases.append((number, case))
    if bad > SHOWN_PROBLEMS:
        problems.append(f"{path}: {bad - SHOWN_PROBLEMS} more bad lines ({bad} in all)")
    if problems:
        raise CorpusError(*problems)
    return cases


def corpus_digest(files: Mapping[str, str]) -> str:
    """`sha256:` + sha256 of `key=sha256 of the file's bytes` lines, one per corpus file,
    sorted by key: the version of a run's corpus, as its results metadata records it."""
    lines = "".join(f"{k}={v}\n" for k, v in sorted(files.items()))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()
