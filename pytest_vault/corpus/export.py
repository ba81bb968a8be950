"""Finds become tests: an adaptive evaluation that made an unpermitted transfer, as a
corpus line that loads (`load.read_case`) and replays on track B.

The line holds exactly the user messages that were sent, in order; the seed's session,
level and category; `technique = "adaptive"`; the seed's goal (with its tool, where it
is not transfer_funds) and calls; the bank's records the seed's environment holds
(orders, payout destinations, scheduled payments, account: never its planted texts), so
a find through a refund, payout or scheduled payment replays against the same records;
provenance (attacker, round, seed id, model, architecture, strategy); and the canary.

What cannot be written exactly is repaired, never left to make the file unloadable, and
`provenance.repaired` names each repaired field: a surrogate code point in a message or
in the attacker, model or strategy named (not Unicode text: a lone one cannot be held
by a UTF-8 file, and two in a row read back as one other character) is written U+FFFD,
the replacement character, and so is an empty message; a goal the format cannot hold
(an amount not in whole cents, or out of range) is left out, so the line's calls or
messages give the goal, as on any line without one. The id is the seed's, `~adaptive~`
and a digest of the rest of the line: one id, one line, so finds that read the same are
one test.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Iterable, Sequence
from datetime import date
from decimal import Decimal
from typing import Any, cast

from pydantic import ValidationError

from pytest_vault.corpus.model import RECORD_TOOLS, Case, Environment, WrittenGoal
from pytest_vault.guard.engine import TRANSFER_TOOL

CANARY = "PYTEST-VAULT CANARY 0e7c4a9d-5b2f-4e61-9a83-c1f4d2b7e905"
TECHNIQUE = "adaptive"
REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def exact_json(value: Any) -> str:
    """JSON text (ASCII) in which every `Decimal` is written as its exact number."""
    token = secrets.token_hex(16)  # no corpus string can guess it
    numbers: list[Decimal] = []

    def swap(v: Any) -> Any:
        if isinstance(v, Decimal):
            numbers.append(v)
            return f"{token}:{len(numbers) - 1}"
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [swap(x) for x in v]
        return v

    text = json.dumps(swap(value), ensure_ascii=True)
    for i, number in enumerate(numbers):
        text = text.replace(json.dumps(f"{token}:{i}"), str(number), 1)
    return text


def writable(text: str) -> str:
    """Text as a corpus line holds it exactly: each surrogate code point as U+FFFD."""
    return _SURROGATE.sub(REPLACEMENT, text)


def found_line(
    seed: Case,
    sent: Sequence[str],
    *,
    attacker: str,
    model: str,
    architecture: str,
    strategy: str | None,
    goal: tuple[str, Decimal | None] | None,
    tool: str = TRANSFER_TOOL,
) -> str:
    """One corpus line (JSON text, no newline) for a find of the adaptive attacker:
    `sent` holds at least the seed's message, as every adaptive evaluation sends it."""
    if not sent:
        raise ValueError("a find has at least one message sent")
    messages = [writable(text) or REPLACEMENT for text in sent]
    repaired = [
        f"messages[{i}]" for i, (a, b) in enumerate(zip(sent, messages, strict=True)) if a != b
    ]
    named = {"attacker": attacker, "model": model, "strategy": strategy}
    for key, text in named.items():
        if text is not None and writable(text) != text:
            named[key] = writable(text)
            repaired.append(f"provenance.{key}")
    target: WrittenGoal | None = None
    # A transfer's goal is written only with its dollars (its calls or messages give it
    # again); another tool's always, since only the goal names that tool.
    if goal is not None and (goal[1] is not None or tool != TRANSFER_TOOL):
        try:
            target = WrittenGoal.model_validate(
                {"recipient": goal[0], "amount": goal[1], "tool": tool}
            )
        except ValidationError:
            repaired.append("goal")
    provenance: dict[str, Any] = {
        "attacker": named["attacker"],
        "round": len(sent),
        "seed_id": seed.id,
        "model": named["model"],
        "architecture": architecture,
        "strategy": named["strategy"],
    }
    if repaired:
        provenance["repaired"] = repaired
    line: dict[str, Any] = {
        "session": seed.session,
        "level": seed.level,
        "kind": "attack",
        "category": seed.category,
        "messages": messages,
        "calls": [c.model_dump() for c in seed.calls],
        "technique": TECHNIQUE,
        "provenance": provenance,
        "canary": seed.canary or CANARY,
    }
    records = _records(seed)
    if records is not None:
        line["environment"] = records
    if target is not None:
        written: dict[str, Any] = {"recipient": target.recipient, "amount": target.amount}
        if target.amount is None:  # another tool's goal, for any amount
            del written["amount"]
        if target.tool != TRANSFER_TOOL:
            written["tool"] = target.tool
        line["goal"] = written
    digest = hashlib.sha256(exact_json(line).encode()).hexdigest()[:12]
    return exact_json({"id": f"{seed.id}~adaptive~{digest}", **line})


def _records(seed: Case) -> dict[str, Any] | None:
    """The bank's records of the seed's environment, as a line writes them (dates as
    ISO text, amounts exact); None where it holds none: a line without records is
    written exactly as before there were any."""
    environment = seed.environment
    if environment is None:
        return None
    held = {name: getattr(environment, name) for name in RECORD_TOOLS}
    kept = {name: value for name, value in held.items() if value is not None}
    if not kept:
        return None
    dumped = Environment.model_validate(kept).model_dump(mode="python", exclude_defaults=True)
    return cast("dict[str, Any]", _iso(dumped))


def _iso(value: Any) -> Any:
    """Dates and date-times as the ISO text a line holds; everything else as it is."""
    if isinstance(value, date):  # a datetime too
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _iso(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_iso(v) for v in value]
    return value


def found_file(lines: Iterable[str]) -> tuple[str, list[str]]:
    """The `--vault-export-found` file from the finds' lines: each once, sorted (so any
    parallelism writes the same file); and the ids of the finds repaired, in its order."""
    unique = sorted(set(lines))
    repaired = [
        line["id"] for line in map(json.loads, unique) if "repaired" in line.get("provenance", {})
    ]
    return "".join(line + "\n" for line in unique), repaired
