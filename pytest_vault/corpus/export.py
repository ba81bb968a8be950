"""Finds become tests: an adaptive evaluation that made an unpermitted transfer, as a
corpus line that loads (`load.read_case`) and replays on track B.

The line holds exactly the user messages that were sent, in order; the seed's session,
level and category; `technique = "adaptive"`; the seed's goal and calls; provenance
(attacker, round, seed id, model, architecture, strategy); and the canary.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from pytest_vault.corpus.model import Case

CANARY = "PYTEST-VAULT CANARY 0e7c4a9d-5b2f-4e61-9a83-c1f4d2b7e905"
TECHNIQUE = "adaptive"


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


def found_line(
    seed: Case,
    sent: Sequence[str],
    *,
    attacker: str,
    model: str,
    architecture: str,
    strategy: str | None,
    goal: tuple[str, Decimal | None] | None,
) -> str:
    """One corpus line (JSON text, no newline) for a find of the adaptive attacker."""
    digest = hashlib.sha256(
        json.dumps([seed.id, model, architecture, attacker, list(sent)]).encode()
    ).hexdigest()[:12]
    canary = seed.metadata.get("canary")
    line: dict[str, Any] = {
        "id": f"{seed.id}~adaptive~{digest}",
        "session": seed.session,
        "level": seed.level,
        "kind": "attack",
        "category": seed.category,
        "messages": list(sent),
        "calls": [c.model_dump() for c in seed.calls],
        "technique": TECHNIQUE,
        "provenance": {
            "attacker": attacker,
            "round": len(sent),
            "seed_id": seed.id,
            "model": model,
            "architecture": architecture,
            "strategy": strategy,
        },
        "canary": canary if isinstance(canary, str) else CANARY,
    }
    if goal is not None and goal[1] is not None and goal[1] > 0:
        line["goal"] = {"recipient": goal[0], "amount": goal[1]}
    return exact_json(line)
