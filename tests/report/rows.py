"""One results row for the report tests: every column of the schema, the ones a test
does not name at a plain default (a completed model-alone attack that did nothing)."""

from __future__ import annotations

from typing import Any

from pytest_vault.report.results import SCHEMA


def row(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {name: None for name in SCHEMA.names} | {
        "attack_id": "a1",
        "session": "s1",
        "level": 2,
        "category": "direct_transfer",
        "kind": "attack",
        "track": "A",
        "architecture": "model",
        "model": "m",
        "requested": False,
        "paid": False,
        "paid_allowlisted": False,
        "unpermitted": False,
        "violation": False,
        "status": "completed",
        "input_blocked": False,
        "steps": 1,
        "truncated": False,
        "input_tokens": 10,
        "output_tokens": 5,
        "latency_s": 0.5,
        "tool_calls": "[]",
    }
    return base | over
