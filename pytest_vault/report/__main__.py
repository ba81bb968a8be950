"""`vault-report`: the benchmark's tables from one or more results files.

    vault-report run.parquet                          # tables as text
    vault-report shard-*.parquet --merge-to all.parquet
    vault-report run.parquet --format json [--out tables.json]
    vault-report run.parquet --format csv --out tables/   # one CSV per table
    vault-report run.parquet --html report.html       # one self-contained page
    vault-report run.parquet --judged-only            # only what every judge answered
    vault-report rescore run.parquet --passports DIR [--format json] [--out rescored.parquet]

Also `python -m pytest_vault.report`. `rescore` re-judges the recorded calls under other
passports (counterfactual: see `rescore.py`); a results file named `rescore` is read
as `./rescore`.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from pytest_vault.core.cli import quiet_on_closed_pipe, write_out
from pytest_vault.core.errors import FileError, reason
from pytest_vault.core.files import write_text
from pytest_vault.core.text import shown
from pytest_vault.harness.levels import Level, load_levels
from pytest_vault.report.formats import render_text, write_csv
from pytest_vault.report.html import render
from pytest_vault.report.judges import for_people, judged_only
from pytest_vault.report.outputs import cannot_write
from pytest_vault.report.results import (
    Loaded,
    ReportError,
    ResultsError,
    load,
    missing_shards,
    write_table,
)
from pytest_vault.report.summary import sample_line
from pytest_vault.report.tables import RESAMPLES, SEED, Analysis, Bootstrap, merged_metadata
from pytest_vault.report.through import in_table, lines
from pytest_vault.report.verdict import verdict

PLAN_KEYS = ("planned", "planned_run")


def _bootstrap_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--resamples",
        type=_whole(1, 100_000),
        default=RESAMPLES,
        help=f"bootstrap resamples (default {RESAMPLES})",
    )
    parser.add_argument(
        "--seed", type=_whole(0, 2**64 - 1), default=SEED, help=f"bootstrap seed (default {SEED})"
    )


def _whole(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not (text.isascii() and text.isdigit() and low <= int(text) <= high):
            raise argparse.ArgumentTypeError(
                f"expected a whole number from {low:,} to {high:,}, got {shown(repr(text))}"
            )
        return int(text)

    return parse


class _Outputs:
    """The files a command writes: each checked before anything is read, and each tried
    at the end, so one that fails (a full disk) is one line and the others are written."""

    def __init__(self, prog: str) -> None:
        self.prog = prog
        self.failed: list[str] = []

    def unwritable(self, *outputs: tuple[str, Path | None, bool]) -> bool:
        """(option, path, a folder?) each: says the first that cannot be written."""
        for option, path, folder in outputs:
            problem = None if path is None else cannot_write(path, folder=folder)
            if problem is not None:
                print(
                    f"{self.prog}: error: {option} {shown(path)}: cannot write: {problem}",
                    file=sys.stderr,
                )
                return True
        return False

    def write(self, option: str, path: Path, write: Callable[[], None]) -> None:
        try:
            write()  # each writer makes the output's missing folders
        except OSError as exc:
            said = f"{option} {shown(path)}: cannot write: {shown(reason(exc))}"
            print(f"{self.prog}: error: {said}", file=sys.stderr)
            self.failed.append(said)


def _missing_shards(loaded: Loaded, allowed: bool, prog: str) -> bool:
    """Says which shards of a sharded run are missing; True when that fails the command
    (a nightly merge of a partial run must not look complete)."""
    missing = missing_shards(loaded.metadata)
    if not missing:
        return False
    said = f"shards {', '.join(missing)} are missing: coverage shows their tests as missing"
    if allowed:
        print(f"{prog}: warning: {said}", file=sys.stderr)
        return False
    print(f"{prog}: error: {said} (--allow-missing-shards to accept it)", file=sys.stderr)
    return True


def _allow_missing_shards(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-missing-shards",
        action="store_true",
        help="exit 0 though shards of a sharded run are missing (else exit 1, once every "
        "table and output is written)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """`vault-report`: 0, or 1 when shards are missing (or stdout was closed first), 2
    on an error; one line each."""
    return quiet_on_closed_pipe(lambda: _main(sys.argv[1:] if argv is None else list(argv)))


def _main(argv: list[str]) -> int:
    if argv[:1] == ["rescore"]:
        return main_rescore(argv[1:])
    parser = argparse.ArgumentParser(
        prog="vault-report",
        description="Tables from pytest-vault results files.",
        epilog="vault-report rescore FILES... --passports DIR: re-judge the recorded calls "
        "under other passports (vault-report rescore --help)",
    )
    parser.add_argument(
        "files", nargs="+", type=Path, help="results files (.parquet); shards merge"
    )
    parser.add_argument("--format", choices=("text", "json", "csv", "sarif"), default="text")
    parser.add_argument(
        "--out", type=Path, help="where to write json or sarif (a file) or csv (a folder)"
    )
    parser.add_argument(
        "--wide", action="store_true", help="text tables whole (else cut to fit 100 columns)"
    )
    parser.add_argument(
        "--show",
        metavar="ID",
        help="print an evaluation's transcript: its test's id as pytest prints it "
        "(FILE::CASE[MODEL-TRACK-ARCH]), its attack id (every row of it), or "
        "attack:model:track:architecture[:trial]",
    )
    parser.add_argument("--html", type=Path, help="also write a self-contained HTML report")
    parser.add_argument(
        "--merge-to", type=Path, help="also write the merged rows to this results file"
    )
    parser.add_argument(
        "--judged-only",
        action="store_true",
        help="every table over the evaluations that all judges answered yes or no",
    )
    parser.add_argument(
        "--atif",
        type=Path,
        metavar="DIR",
        help="also write each evaluation as an ATIF v1.7 trajectory into this folder "
        "(vault-report rescore reads them back)",
    )
    parser.add_argument(
        "--inspect-log",
        type=Path,
        metavar="DIR",
        help="also write one Inspect .eval log per model and architecture into this folder "
        "(inspect view opens them; needs pytest-vault[inspect])",
    )
    _allow_missing_shards(parser)
    _bootstrap_options(parser)
    args = parser.parse_args(argv)
    if args.inspect_log is not None:
        from pytest_vault.report.inspect_log import missing

        if (problem := missing()) is not None:
            print(f"vault-report: error: {problem}", file=sys.stderr)
            return 2
    if args.format == "csv" and args.out is None:
        parser.error("--format csv needs --out FOLDER")
    if args.format == "text" and args.out is not None:
        # Else the tables go to the terminal and --out is silently not written.
        parser.error("--out goes with --format json, csv or sarif (the text tables go to stdout)")
    outputs = _Outputs("vault-report")
    if outputs.unwritable(
        ("--merge-to", args.merge_to, False),
        ("--html", args.html, False),
        ("--out", args.out if args.format != "text" else None, args.format == "csv"),
        ("--atif", args.atif, True),
        ("--inspect-log", args.inspect_log, True),
    ):
        return 2
    loaded: Loaded | None = None
    try:
        loaded = load(args.files)
        return _run(loaded, args, outputs)
    except ReportError as exc:
        print(f"vault-report: error: {exc}", file=sys.stderr)
        return 2
    except ResultsError as exc:  # a row that only the tables read
        where = "" if loaded is None or exc.row is None else f"{loaded.where(exc.row)}: "
        print(f"vault-report: error: {where}{exc}", file=sys.stderr)
        return 2


def _warnings(loaded: Loaded, prog: str = "vault-report") -> None:
    """Files that hold re-scored rows, not a run."""
    for (name, _rows), meta in zip(loaded.sources, loaded.metadata, strict=True):
        if meta.get("counterfactual") is True:
            print(
                f"{prog}: warning: {name}: counterfactual rows (re-scored under other "
                "passports by vault-report rescore), not a run",
                file=sys.stderr,
            )


def _run(loaded: Loaded, args: argparse.Namespace, outputs: _Outputs) -> int:
    """Every table (and transfer) first, then the outputs: a bad row writes nothing."""
    incomplete = _missing_shards(loaded, args.allow_missing_shards, "vault-report")
    _warnings(loaded)
    table, plans, note = loaded.table, loaded.metadata, ""
    if args.judged_only:
        # A subset of the rows: coverage against the plan would call the rest missing.
        table, note = judged_only(loaded.table)
        plans = [{k: v for k, v in m.items() if k not in PLAN_KEYS} for m in loaded.metadata]
        if args.format != "text":
            print(f"vault-report: {note}", file=sys.stderr)
    if args.show is not None:
        from pytest_vault.report.transcript import show

        said, status = show(table, args.show)
        (write_out if status == 0 else _err)(said)
        return status
    analysis = Analysis(table, plans, Bootstrap(args.resamples, args.seed))
    result = analysis.tables()
    metadata = merged_metadata(loaded.metadata)
    gate = metadata.get("gate")
    found = verdict(table, loaded.metadata, gate if isinstance(gate, str) else None)
    page = (
        None
        if args.html is None
        else render(
            result, analysis.unpermitted_transfers(), metadata, note=note, table=table, found=found
        )
    )
    if args.merge_to is not None:
        outputs.write(
            "--merge-to", args.merge_to, lambda: write_table(loaded.table, args.merge_to, metadata)
        )
    if args.format in ("json", "sarif"):
        # ensure_ascii: exact, and ASCII (controls and lone surrogates as \u escapes).
        if args.format == "json":
            text = json.dumps({"verdict": found.record(), **result}, indent=1) + "\n"
        else:
            from pytest_vault.report.sarif import report_sarif

            regressed = metadata.get("gate_regressed") or []
            text = json.dumps(report_sarif(table, regressed), indent=1) + "\n"
        if args.out is None:
            write_out(text)
        else:
            outputs.write("--out", args.out, lambda: write_text(args.out, text))
    elif args.format == "csv":
        outputs.write("--out", args.out, lambda: write_csv(result, args.out))
    else:
        sample = metadata.get("sample")  # a sampled run says so above its tables
        head = "\n".join(found.lines) + "\n\n"
        head += f"{shown(sample_line(sample))}\n\n" if sample else ""
        head += f"{note}\n\n" if note else ""
        # What got through, as the run's summary ended: the tables below only count it.
        results = str(args.files[0]) if len(args.files) == 1 else "RESULTS"
        through = lines(in_table(table), results, None if args.html is None else str(args.html))
        head += "\n".join(through) + "\n\n" if through else ""
        write_out(head + render_text(for_people(result), wide=args.wide))
    if page is not None:
        outputs.write("--html", args.html, lambda: write_text(args.html, page))
    if args.atif is not None:
        from pytest_vault.report.atif import write_atif

        outputs.write("--atif", args.atif, lambda: write_atif(loaded, args.atif))
    if args.inspect_log is not None:
        from pytest_vault.report.inspect_log import write_logs

        outputs.write(
            "--inspect-log",
            args.inspect_log,
            lambda: _said(write_logs(table, result, metadata, args.inspect_log), "Inspect log"),
        )
    # An INCOMPLETE verdict is not a pass: 1, as for a missing shard (which
    # --allow-missing-shards accepts, with the rows it leaves missing; never an error).
    unmeasured = found.errors or found.not_run or (found.missing and not args.allow_missing_shards)
    return 2 if outputs.failed else 1 if incomplete or unmeasured else 0


def _said(paths: Sequence[Path], what: str) -> None:
    """On stderr (stdout holds the tables): how many files of `what` went where."""
    where = shown(paths[0].parent) if paths else "nowhere (no rows)"
    print(
        f"vault-report: wrote {len(paths)} {what}{'s' * (len(paths) != 1)} to {where}",
        file=sys.stderr,
    )


def _err(text: str) -> None:
    print(text, end="", file=sys.stderr)


class _OneLine(argparse.ArgumentParser):
    """Usage problems as one line, like every other error of this command."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {shown(message)}\n")


def main_rescore(argv: Sequence[str]) -> int:
    parser = _OneLine(
        prog="vault-report rescore",
        description="Judge every recorded transfer_funds call again under other passports. "
        "The output is counterfactual: in guarded rows a different decision could have "
        "changed what the model did next.",
    )
    parser.add_argument(
        "files",
        nargs="+",
        type=Path,
        help="results files (.parquet; shards merge), ATIF trajectories (.json, .jsonl, or a "
        "folder of them), Inspect logs (.eval; needs pytest-vault[inspect])",
    )
    parser.add_argument(
        "--passports",
        type=Path,
        metavar="DIR",
        help="folder with levels.toml and level-N.json, as --vault-passports (required)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also list each flip that only changes the reason codes",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="FILE.parquet",
        help="also write the re-scored rows (a results file marked counterfactual)",
    )
    parser.add_argument(
        "--level",
        type=_whole(1, 5),
        metavar="N",
        help="the level another tool's trajectories are judged at (required for them)",
    )
    parser.add_argument(
        "--was",
        type=Path,
        metavar="DIR",
        help="the passports in force when another tool's trajectories ran: their old "
        "decisions (required for them)",
    )
    parser.add_argument(
        "--map",
        metavar="FILE",
        help="another tool's tool and argument names as ours: a TOML file, or built in: "
        "agentdojo, openai-agents (required for its trajectories)",
    )
    _allow_missing_shards(parser)
    _bootstrap_options(parser)
    args = parser.parse_args(argv)
    # Only here: the tables alone never load the re-scoring.
    from pytest_vault.report.rescore import render as render_rescore
    from pytest_vault.report.rescore import rescore, rescored_metadata
    from pytest_vault.report.rescore import result as rescore_result
    from pytest_vault.report.rescore import to_json as rescore_json

    if args.passports is None:
        parser.error("--passports DIR is required: the passports to judge the calls under")
    outputs = _Outputs("vault-report rescore")
    if outputs.unwritable(("--out", args.out, False)):
        return 2
    now = datetime.now(UTC)  # the guard's one fixed instant
    loaded: Loaded | None = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            levels = load_levels(args.passports)
        for warning in caught:
            print(f"vault-report rescore: warning: {shown(warning.message)}", file=sys.stderr)
        loaded, was = _rescore_inputs(args)
        incomplete = _missing_shards(loaded, args.allow_missing_shards, "vault-report rescore")
        _warnings(loaded, "vault-report rescore")
        rescored = rescore(loaded.table, levels, now, logs=args.out is not None, was=was)
        out = rescore_result(
            rescored, loaded.metadata, levels, now, Bootstrap(args.resamples, args.seed)
        )
        if args.out is not None:
            out_meta = rescored_metadata(loaded.metadata, levels, now)
            outputs.write(
                "--out", args.out, lambda: write_table(rescored.table, args.out, out_meta)
            )
    except (FileError, ReportError) as exc:
        print(f"vault-report rescore: error: {exc}", file=sys.stderr)
        return 2
    except ResultsError as exc:
        where = "" if loaded is None or exc.row is None else f"{loaded.where(exc.row)}: "
        print(f"vault-report rescore: error: {where}{exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        write_out(rescore_json(out))
    else:
        write_out(render_rescore(out, verbose=args.verbose))
    return 2 if outputs.failed else 1 if incomplete else 0


def _rescore_inputs(args: argparse.Namespace) -> tuple[Loaded, dict[int, Level] | None]:
    """The rows to re-score (results files as `load` reads them; ATIF trajectories,
    `atif.py`, beside them), and the passports another tool's calls are judged under
    first (`--was`)."""
    from pytest_vault.report.atif import Options, is_parquet, load_any, load_map

    if all(is_parquet(p) for p in args.files):
        given = [
            o for o, v in (("--level", args.level), ("--was", args.was), ("--map", args.map)) if v
        ]
        if given:
            raise ReportError(
                f"{', '.join(given)}: for another tool's ATIF trajectories, and the inputs are "
                "results files (their levels and decisions are recorded)"
            )
        return load(args.files), None
    was = None
    if args.was is not None:
        with warnings.catch_warnings(record=True) as caught:
            was = load_levels(args.was)
        for warning in caught:
            print(
                f"vault-report rescore: warning: --was: {shown(warning.message)}", file=sys.stderr
            )
    tool_map = None if args.map is None else load_map(args.map)
    return load_any(args.files, Options(args.level, was, tool_map)), was


if __name__ == "__main__":
    sys.exit(main())
