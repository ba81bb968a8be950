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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pytest_vault.analysis import RESAMPLES, SEED, Analysis, Bootstrap, Table, plans
from pytest_vault.results import SCHEMA, SORT_KEY, write_results
from pytest_vault.summary import table as aligned

TITLES = {
    "requests_by_level": "Requests by level and architecture (attacks)",
    "stages": "The five stages (attacks): Levels 2-4, and Levels 1 and 5 apart",
    "model_rates": "Per-model request rates on identical inputs",
    "matched_pairs": "Matched pairs: same model, attack and track in both architectures",
    "guard_decisions": "Guard decisions by level (guarded)",
    "unpermitted_by_category": "Unpermitted transfers by category and track (Levels 2-4)",
    "concentration": "Concentration: sessions behind the unpermitted transfers (Levels 2-4)",
    "reach": "Reach: attacks that defeated exactly k models (model alone)",
    "benign": "Benign requests: completed behind the guard and model alone",
    "coverage": "Coverage: planned, completed, error and not-run evaluations per cell",
}


class ReportError(ValueError):
    """A results file that cannot be read; one line naming it."""


def load(paths: Sequence[Path]) -> tuple[pa.Table, list[dict[str, Any]]]:
    """Read and merge results files (shards, or runs of other models)."""
    tables, metadata = [], []
    for path in paths:
        try:
            table = pq.read_table(path)
        except (OSError, pa.ArrowException) as exc:
            raise ReportError(f"{path}: cannot read as Parquet: {exc}") from None
        missing = [n for n in SCHEMA.names if n not in table.column_names]
        if missing:
            raise ReportError(f"{path}: not a pytest-vault results file (no column {missing[0]!r})")
        raw = (table.schema.metadata or {}).get(b"pytest_vault", b"{}")
        try:
            metadata.append(json.loads(raw))
        except ValueError:
            raise ReportError(f"{path}: metadata is not valid JSON") from None
        tables.append(table.select(SCHEMA.names).cast(SCHEMA))
    merged = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    keys = pa.Table.from_arrays([merged[k] for k in SORT_KEY], names=list(SORT_KEY))
    if keys.group_by(list(SORT_KEY)).aggregate([]).num_rows != merged.num_rows:
        raise ReportError(
            "the files hold the same evaluation (attack, model, track, architecture) twice: "
            "merge shards of one run, or runs of different models"
        )
    return merged, metadata


def merged_metadata(metadata: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One metadata for merged files: planned counts added up, the rest from the first."""
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
    return out


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
    lines: list[str] = []
    for name, rows in result.items():
        lines += ["", TITLES.get(name, name)]
        if not rows:
            lines.append("  (no rows)")
            continue
        headers = list(dict.fromkeys(k for row in rows for k in row))
        lines += aligned(headers, [[_cell(row.get(h)) for h in headers] for row in rows])
    return "\n".join(lines).lstrip("\n") + "\n"


def write_csv(result: Mapping[str, Table], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in result.items():
        headers = list(dict.fromkeys(k for row in rows for k in row))
        with (folder / f"{name}.csv").open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=headers)
            writer.writeheader()
            for row in rows:
                writer.writerow(
                    {k: json.dumps(v) if isinstance(v, dict) else v for k, v in row.items()}
                )


def write_html(
    rows: Sequence[Mapping[str, Any]], metadata: Sequence[Mapping[str, Any]], path: Path
) -> None:
    """The HTML report of a run's rows (used at the end of a pytest run)."""
    from pytest_vault.htmlreport import render

    table = pa.Table.from_pylist(list(rows), schema=SCHEMA)
    analysis = Analysis(table, metadata)
    path.write_text(
        render(analysis.tables(), analysis.unpermitted_transfers(), merged_metadata(metadata)),
        encoding="utf-8",
    )


def missing_shards(metadata: Sequence[Mapping[str, Any]]) -> list[str]:
    """Shards K/N of a sharded run that are not among the files."""
    seen: dict[int, set[int]] = {}
    for meta in metadata:
        shard = meta.get("shard")
        if shard:
            k, n = (int(x) for x in str(shard).split("/"))
            seen.setdefault(n, set()).add(k)
    return [f"{k}/{n}" for n, ks in sorted(seen.items()) for k in range(1, n + 1) if k not in ks]


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
        type=int,
        default=RESAMPLES,
        help=f"bootstrap resamples (default {RESAMPLES})",
    )
    parser.add_argument("--seed", type=int, default=SEED, help=f"bootstrap seed (default {SEED})")
    args = parser.parse_args(argv)
    if args.format == "csv" and args.out is None:
        parser.error("--format csv needs --out FOLDER")
    try:
        table, metadata = load(args.files)
    except ReportError as exc:
        print(f"vault-report: error: {exc}", file=sys.stderr)
        return 2
    missing = missing_shards(metadata)
    if missing:
        print(
            f"vault-report: warning: shards {', '.join(missing)} are missing: "
            "coverage shows their tests as missing",
            file=sys.stderr,
        )
    if args.merge_to is not None:
        write_results(table.to_pylist(), args.merge_to, merged_metadata(metadata))
    analysis = Analysis(table, metadata, Bootstrap(args.resamples, args.seed))
    result = analysis.tables()
    if args.format == "json":
        text = json.dumps(result, indent=1, sort_keys=False) + "\n"
        if args.out is None:
            sys.stdout.write(text)
        else:
            args.out.write_text(text, encoding="utf-8")
    elif args.format == "csv":
        write_csv(result, args.out)
    else:
        sys.stdout.write(render_text(result))
    if args.html is not None:
        from pytest_vault.htmlreport import render

        args.html.write_text(
            render(result, analysis.unpermitted_transfers(), merged_metadata(metadata)),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
