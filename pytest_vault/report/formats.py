"""The tables as text for a terminal and as CSV files: every cell shown escaped, and no
CSV cell a spreadsheet would run as a formula."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_vault.core.text import shown
from pytest_vault.report.summary import table as aligned
from pytest_vault.report.tables import TITLES, Table


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    return str(value)


def render_text(result: Mapping[str, Table]) -> str:
    """The tables as text for a terminal: every cell shown escaped (`summary.table`)."""
    lines: list[str] = []
    for name, rows in result.items():
        lines += ["", TITLES.get(name, name)]
        if not rows:
            lines.append("  (no rows)")
            continue
        headers = list(dict.fromkeys(k for row in rows for k in row))
        lines += aligned(headers, [[_cell(row.get(h)) for h in headers] for row in rows])
    return "\n".join(lines).lstrip("\n") + "\n"


# A cell a spreadsheet would read as a formula (or as one after a tab or CR).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """Numbers stay numbers; any text (dicts as JSON) is shown escaped and, when it
    starts like a formula (after any spaces, which some spreadsheets trim on import),
    prefixed with `'` so that a spreadsheet shows it as text."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    text = json.dumps(value) if isinstance(value, dict | list) else str(value)
    return ("'" if text.lstrip(" ").startswith(FORMULA_START) else "") + shown(text)


def write_csv(result: Mapping[str, Table], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in result.items():
        headers = list(dict.fromkeys(k for row in rows for k in row))
        with (folder / f"{name}.csv").open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=headers)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: csv_cell(v) for k, v in row.items()})
