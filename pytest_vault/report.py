"""`vault-report`: the benchmark's tables from one or more results files.

    vault-report run.parquet                          # tables as text
    vault-report shard-*.parquet --merge-to all.parquet
    vault-report run.parquet --format json [--out tables.json]
    vault-report run.parquet --format csv --out tables/   # one CSV per table
    vault-report run.parquet --html report.html       # one self-contained page

Also `python -m pytest_vault.report`.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from pytest_vault.analysis import RESAMPLES, SEED, TITLES, Analysis, Bootstrap, Table, plans
from pytest_vault.htmlreport import render
from pytest_vault.results import (
    SCHEMA,
    SORT_KEY,
    ResultsError,
    read_table,
    scrubbed,
    to_table,
    write_table,
)
from pytest_vault.summary import table as aligned
from pytest_vault.text import shown


class ReportError(ValueError):
    """A results file that cannot be read; one line naming it."""


class Loaded(NamedTuple):
    """Results files read and merged: the rows, each file's metadata, rows per file."""

    table: pa.Table
    metadata: list[dict[str, Any]]
    sources: list[tuple[str, int]]

    def where(self, row: int) -> str:
        """`FILE: row N` for a row of the merged table (rows count from 1 in each file)."""
        for name, rows in self.sources:
            if row < rows:
                return f"{name}: row {row + 1}"
            row -= rows
        return f"row {row + 1}"


def load(paths: Sequence[Path]) -> Loaded:
    """Read and merge results files (shards, or runs of other models)."""
    tables, metadata, sources = [], [], []
    for path in paths:
        try:
            table, meta = read_table(path)
        except ResultsError as exc:
            raise ReportError(f"{shown(path)}: {exc}") from None
        tables.append(table)
        metadata.append(meta)
        sources.append((shown(path), table.num_rows))
    merged = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    keys = pa.Table.from_arrays([merged[k] for k in SORT_KEY], names=list(SORT_KEY))
    if keys.group_by(list(SORT_KEY)).aggregate([]).num_rows != merged.num_rows:
        raise ReportError(
            "the files hold the same evaluation (attack, model, track, architecture) twice: "
            "merge shards of one run, or runs of different models"
        )
    return Loaded(merged, metadata, sources)


def merged_metadata(metadata: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One metadata for merged files: planned counts added up, the rest from the first.

    URLs lose their userinfo, query and fragment: a merged file or a report never
    copies a secret that a file's metadata may hold.
    """
    if not metadata:
        return {}
    out = dict(metadata[0])
    planned: dict[str, int] = {}
    for cells in plans(metadata) or []:
        for key, count in cells.items():
            planned[key] = planned.get(key, 0) + int(count)
    out["planned"] = dict(sorted(planned.items()))
    out["planned_run"] = {}
    out["shard"] = None
    out["models"] = sorted({m for meta in metadata for m in meta.get("models", [])})
    out["merged_from"] = len(metadata)
    return dict(scrubbed(out))


def tables(
    table: pa.Table,
    metadata: Sequence[Mapping[str, Any]],
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> dict[str, Table]:
    return Analysis(table, metadata, Bootstrap(resamples, seed)).tables()


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
    starts like a formula, prefixed with `'` so that a spreadsheet shows it as text."""
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        return value
    text = json.dumps(value) if isinstance(value, dict | list) else str(value)
    return ("'" if text.startswith(FORMULA_START) else "") + shown(text)


def write_csv(result: Mapping[str, Table], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in result.items():
        headers = list(dict.fromkeys(k for row in rows for k in row))
        with (folder / f"{name}.csv").open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=headers)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: csv_cell(v) for k, v in row.items()})


def write_html(
    rows: Sequence[Mapping[str, Any]], metadata: Sequence[Mapping[str, Any]], path: Path
) -> None:
    """The HTML report of a run's rows (used at the end of a pytest run)."""
    analysis = Analysis(to_table(rows), metadata)
    page = render(analysis.tables(), analysis.unpermitted_transfers(), merged_metadata(metadata))
    path.write_text(page, encoding="utf-8")


def missing_shards(metadata: Sequence[Mapping[str, Any]], most: int = 10) -> list[str]:
    """Shards K/N of a sharded run that are not among the files (the first `most`, then
    how many more: N comes from a file, and may be large)."""
    seen: dict[int, set[int]] = {}
    for meta in metadata:
        shard = meta.get("shard")
        if shard:
            k, n = (int(x) for x in str(shard).split("/"))
            seen.setdefault(n, set()).add(k)
    out: list[str] = []
    for n, ks in sorted(seen.items()):
        first = [k for k in range(1, min(n, len(ks) + most) + 1) if k not in ks][:most]
        out += [f"{k}/{n}" for k in first]
        if n - len(ks) > len(first):
            out.append(f"{n - len(ks) - len(first):,} more of {n}")
    return out


def _whole(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit() and low <= int(text) <= high):
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {low:,} to {high:,}, got {shown(repr(text))}"
            )
        return int(text)

    return parse


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise ReportError(f"{shown(path)}: cannot write: {shown(exc.strerror or exc)}") from None


def _write(path: Path, text: str) -> None:
    with _writing(path):
        path.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vault-report", description="Tables from pytest-vault results files."
    )
    parser.add_argument(
        "files", nargs="+", type=Path, help="results files (.parquet); shards merge"
    )
    parser.add_argument("--format", choices=("text", "json", "csv"), default="text")
    parser.add_argument("--out", type=Path, help="where to write json (a file) or csv (a folder)")
    parser.add_argument("--html", type=Path, help="also write a self-contained HTML report")
    parser.add_argument(
        "--merge-to", type=Path, help="also write the merged rows to this results file"
    )
    parser.add_argument(
        "--resamples",
        type=_whole(1, 100_000),
        default=RESAMPLES,
        help=f"bootstrap resamples (default {RESAMPLES})",
    )
    parser.add_argument(
        "--seed", type=_whole(0, 2**64 - 1), default=SEED, help=f"bootstrap seed (default {SEED})"
    )
    args = parser.parse_args(argv)
    if args.format == "csv" and args.out is None:
        parser.error("--format csv needs --out FOLDER")
    loaded: Loaded | None = None
    try:
        loaded = load(args.files)
        _run(loaded, args)
    except ReportError as exc:
        print(f"vault-report: error: {exc}", file=sys.stderr)
        return 2
    except ResultsError as exc:  # a row that only the tables read
        where = "" if loaded is None or exc.row is None else f"{loaded.where(exc.row)}: "
        print(f"vault-report: error: {where}{exc}", file=sys.stderr)
        return 2
    return 0


def _run(loaded: Loaded, args: argparse.Namespace) -> None:
    """Every table (and transfer) first, then the outputs: a bad row writes nothing."""
    missing = missing_shards(loaded.metadata)
    if missing:
        print(
            f"vault-report: warning: shards {', '.join(missing)} are missing: "
            "coverage shows their tests as missing",
            file=sys.stderr,
        )
    analysis = Analysis(loaded.table, loaded.metadata, Bootstrap(args.resamples, args.seed))
    result = analysis.tables()
    metadata = merged_metadata(loaded.metadata)
    page = None if args.html is None else render(result, analysis.unpermitted_transfers(), metadata)
    if args.merge_to is not None:
        with _writing(args.merge_to):
            write_table(loaded.table, args.merge_to, metadata)
    if args.format == "json":
        # ensure_ascii: exact, and ASCII (controls and lone surrogates as \u escapes).
        text = json.dumps(result, indent=1, sort_keys=False) + "\n"
        if args.out is None:
            sys.stdout.write(text)
        else:
            _write(args.out, text)
    elif args.format == "csv":
        with _writing(args.out):
            write_csv(result, args.out)
    else:
        sys.stdout.write(render_text(result))
    if page is not None:
        _write(args.html, page)


if __name__ == "__main__":
    sys.exit(main())
