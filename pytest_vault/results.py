"""Results rows to and from Parquet: one row per evaluation, typed columns."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pytest_vault.events import COLUMNS

SCHEMA = pa.schema(
    [
        ("attack_id", pa.string()),
        ("session", pa.string()),
        ("level", pa.int8()),
        ("category", pa.string()),
        ("kind", pa.string()),
        ("track", pa.string()),
        ("architecture", pa.string()),
        ("model", pa.string()),
        ("requested", pa.bool_()),
        ("paid", pa.bool_()),
        ("allowed_calls", pa.int32()),
        ("denied_calls", pa.int32()),
        ("deny_codes", pa.list_(pa.string())),
        ("paid_allowlisted", pa.bool_()),
        ("unpermitted", pa.bool_()),
        ("violation", pa.bool_()),
        ("completed", pa.bool_()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("input_blocked", pa.bool_()),
        ("steps", pa.int32()),
        ("truncated", pa.bool_()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("latency_s", pa.float64()),
        ("cost_usd", pa.float64()),
        ("tool_calls", pa.string()),
    ]
)
assert tuple(SCHEMA.names) == COLUMNS, "results schema and event columns disagree"

SORT_KEY = ("attack_id", "model", "track", "architecture")


def write_results(
    rows: Sequence[Mapping[str, Any]], path: Path, metadata: Mapping[str, Any]
) -> None:
    """Write rows (sorted, so that any parallelism gives the same file) atomically."""
    ordered = sorted(rows, key=lambda r: tuple(r[k] for k in SORT_KEY))
    table = pa.Table.from_pylist(list(ordered), schema=SCHEMA)
    table = table.replace_schema_metadata(
        {b"pytest_vault": json.dumps(metadata, sort_keys=True).encode()}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    pq.write_table(table, partial)
    os.replace(partial, path)


def read_results(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    table = pq.read_table(path)
    raw = (table.schema.metadata or {}).get(b"pytest_vault", b"{}")
    return table.to_pylist(), json.loads(raw)
