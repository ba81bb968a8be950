"""The tables as text for a terminal and as CSV files: every cell shown escaped, and no
CSV cell a spreadsheet would run as a formula."""

from __future__ import annotations

import csv
import json
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_vault.core.files import replacing
from pytest_vault.core.text import shown
from pytest_vault.guard.money import Money
from pytest_vault.report.summary import table as aligned
from pytest_vault.report.tables import TITLES, Table

# How a number is shown, by its column's name: a share as a percentage with one decimal,
# an interval's end or a bound with two, a p or q value or a kappa in three figures.
RATES = ("rate", "share", "dgf_score")
BOUNDS = ("ci_low", "ci_high", "upper_bound")
FIGURES = ("p_value", "q_value", "kappa", "mcnemar_p")
# Tables as text fit this many columns unless `wide`; a wider one is cut into parts, each
# repeating the columns that name its rows.
WIDTH = 100


# Columns that name a table's rows: repeated in every part of a table cut to fit.
NAMES = frozenset(
    (
        *("levels", "level", "tool", "model", "architecture", "track", "kind", "category"),
        "judge",
        *("judge_a", "judge_b", "placement", "style", "attack_id", "measure", "models_defeated"),
    )
)


def _kind(name: str) -> str:
    if name in ("clean_completed", "attacked_completed", "difference", "over_blocking"):
        return "rate"
    if any(name.startswith(b) or name.endswith(b) for b in BOUNDS):
        return "bound"
    if name == "dgf_score":
        return "score"
    if name.endswith(RATES[:2]):
        return "rate"
    if any(f in name for f in FIGURES):
        return "figure"
    return ""


def cell(name: str, value: Any) -> str:
    """A table's value as a person reads it (not escaped: the writer escapes)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    if isinstance(value, int | float):
        kind = _kind(name)
        sign = "+" if name in ("difference", "over_blocking") else ""
        if kind == "rate":
            return f"{100 * value:{sign}.1f}%"
        if kind == "bound":
            return f"{100 * value:.2f}%"
        if kind == "score":
            return f"{value:.1f}"
        if kind == "figure" or isinstance(value, float):
            return f"{value:.3g}"
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    return str(value)


def for_reading(name: str, rows: Table) -> Table:
    """A table as a person reads it: an amount as money (`$2,150.00`, `¥500`), never its
    minor units; the coverage table only its incomplete cells (none: it says so)."""
    if name == "coverage":
        rows = [r for r in rows if r.get("complete") is False] or [{"coverage": "complete"}]
    out = []
    for row in rows:
        if "amount_minor" in row and "currency" in row:
            amount = Money(int(row["amount_minor"]), str(row["currency"])).shown()
            row = {k: v for k, v in row.items() if k not in ("amount_minor", "currency")}
            row = {**row, "amount": amount}
        out.append(_joined(row))
    return out


def _joined(row: Mapping[str, Any]) -> dict[str, Any]:
    """A rate and its interval as one cell (`10.2% [6.22%, 14.26%]`), a zero's two bounds
    as one (`0.53%, 3/S 4.76%`): one column each, so that a table fits a terminal."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        prefix = key.removesuffix("rate") if key.endswith("rate") else None
        prefix = "" if key == "difference" else prefix
        low, high = f"{prefix}ci_low", f"{prefix}ci_high"
        if prefix is not None and low in row and high in row:
            text = cell(key, value)
            if row[low] is not None and row[high] is not None:
                text += f" [{cell(low, row[low])}, {cell(high, row[high])}]"
            out[key] = text
        elif key.endswith("upper_bound_eval") and f"{key[:-4]}session" in row:
            # `PREFIXupper_bound_eval` and `_session` (the OWASP table's per architecture).
            session = row[f"{key[:-4]}session"]
            out[f"{key.removesuffix('upper_bound_eval')}zero_bound"] = (
                None
                if value is None
                else f"{cell('upper_bound_eval', value)}, 3/S "
                f"{cell('upper_bound_session', session)}"
            )
        elif key.endswith(("ci_low", "ci_high")) and (
            f"{key.rpartition('ci_')[0]}rate" in row or (key[:3] == "ci_" and "difference" in row)
        ):
            continue
        elif not key.endswith("upper_bound_session") or f"{key[:-7]}eval" not in row:
            out[key] = value
    return out


def parts(headers: Sequence[str], widths: Sequence[int], width: int) -> list[list[int]]:
    """Column indices per part of a table cut to fit `width` (`widths`: each column's,
    its gap included): the leading columns that name the rows (`NAMES`) in every part,
    the others packed in order. The text and the HTML report cut a table alike."""
    keys = 0
    while keys < min(len(headers) - 1, 3) and headers[keys] in NAMES:
        keys += 1
    base = sum(widths[:keys])
    out: list[list[int]] = []
    current: list[int] = []
    used = base
    for i in range(keys, len(headers)):
        if current and used + widths[i] > width:
            out.append(current)
            current, used = [], base
        current.append(i)
        used += widths[i]
    out.append(current)
    return [list(range(keys)) + p for p in out]


def render_text(result: Mapping[str, Table], *, wide: bool = False) -> str:
    """The tables as text for a terminal: every cell shown escaped (`summary.table`); a
    table wider than 100 columns is cut into parts unless `wide`."""
    lines: list[str] = []
    for name, rows in result.items():
        title = TITLES.get(name, name)
        lines += [
            "",
            *(textwrap.wrap(title, WIDTH, subsequent_indent="  ") if not wide else [title]),
        ]
        rows = for_reading(name, rows)
        if not rows:
            lines.append("  (no rows)")
            continue
        headers = list(dict.fromkeys(k for row in rows for k in row))
        body = [[cell(h, row.get(h)) for h in headers] for row in rows]
        cut = [list(range(len(headers)))]
        if not wide:
            # Each column as wide as its widest text, two spaces apart.
            widths = [
                2 + max(len(shown(x)) for x in column)
                for column in zip(headers, *body, strict=True)
            ]
            cut = parts(headers, widths, WIDTH)
        for n, part in enumerate(cut):
            if n:
                lines.append("  (continued)")
            lines += aligned([headers[i] for i in part], [[b[i] for i in part] for b in body])
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
        with (
            replacing(folder / f"{name}.csv") as partial,
            partial.open("w", newline="", encoding="utf-8") as f,
        ):
            writer = csv.DictWriter(f, fieldnames=headers)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: csv_cell(v) for k, v in row.items()})
