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
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pytest_vault.guard.text import shown
from pytest_vault.report.formats import render_text, write_csv
from pytest_vault.report.html import render
from pytest_vault.report.results import (
    Loaded,
    ReportError,
    ResultsError,
    load,
    missing_shards,
    write_table,
)
from pytest_vault.report.tables import RESAMPLES, SEED, Analysis, Bootstrap, merged_metadata


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
