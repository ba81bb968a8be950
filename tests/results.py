"""Reading a results file, and a row's call log, in the tests."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_vault.core.text import json_text
from pytest_vault.harness.calls import Call
from pytest_vault.report.results import read_table


def read_rows(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A results file's checked rows (`tool_calls`: each call a dict of
    `harness.calls.Call`'s fields, its arguments their JSON text) and its metadata."""
    table, metadata = read_table(path)
    return table.to_pylist(), metadata


def as_logged(calls: Iterable[Call | Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """A log (a run's row's `Call`s, or a table's calls) with the keys the bank logs
    (`CallRecord.to_dict`): the arguments as their value, read from their JSON text; a
    decision, an audit, a transfer (with `permitted`) only where there is one."""
    out = []
    for call in calls or ():
        c = call.as_dict() if isinstance(call, Call) else call
        entry = {k: c[k] for k in ("name", "arguments", "executed", "result", "is_error")}
        if entry["arguments"] is not None:
            entry["arguments"] = json.loads(entry["arguments"])
        for k in ("decision", "audit"):
            if c[k] is not None:
                entry[k] = c[k]
        if c["transfer"] is not None:
            entry["transfer"] = c["transfer"]
            entry["permitted"] = c["permitted"]
        out.append(entry)
    return out


def v1_log(calls: Iterable[Call | Mapping[str, Any]] | None) -> str:
    """A log as a version-1 file holds it: the JSON text the run wrote (`as_logged`)."""
    return json_text(as_logged(calls))
