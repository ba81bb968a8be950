"""One results row for the report tests: every column of the schema, the ones a test
does not name at a plain default (a completed model-alone attack that did nothing)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pytest_vault.report.results import SCHEMA


def row(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {name: None for name in SCHEMA.names} | {
        "attack_id": "a1",
        "session": "s1",
        "level": 2,
        "category": "direct_transfer",
        "tool": "transfer_funds",
        "kind": "attack",
        "track": "A",
        "architecture": "model",
        "model": "m",
        "trial": 1,
        "attempts": 1,
        "attempt": 1,
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


# Version 1 of the file (every results file before the schema version): `tool_calls`
# the log's JSON text, and no version in the metadata. Written here with pyarrow itself,
# as that version's writer wrote it, for the readers that convert it.
V1_SCHEMA = SCHEMA.set(SCHEMA.get_field_index("tool_calls"), pa.field("tool_calls", pa.string()))
SORT_KEY = ("attack_id", "model", "track", "architecture")


def v1_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Rows (each log as its JSON text) as version 1 held them: sorted, as it wrote them."""
    table = pa.Table.from_pylist([dict(r) for r in rows], schema=V1_SCHEMA)
    return table.take(pc.sort_indices(table, [(k, "ascending") for k in SORT_KEY]))


def write_v1(rows: Sequence[Mapping[str, Any]], path: Path, metadata: Mapping[str, Any]) -> None:
    meta = {b"pytest_vault": json.dumps(metadata, sort_keys=True).encode()}
    pq.write_table(v1_table(rows).replace_schema_metadata(meta), path)
