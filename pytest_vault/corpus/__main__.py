"""Check corpus files from the command line.

python -m pytest_vault.corpus --schema     # the JSON schema of one line
python -m pytest_vault.corpus FILE... [--passports DIR]
                                           # check files, print counts
python -m pytest_vault.corpus import NAME [--out FILE] [--passports DIR] [--direct]
                                           # convert a public corpus
python -m pytest_vault.corpus copy DIR     # the built-in corpus, to extend
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from pytest_vault.core.cli import quiet_on_closed_pipe, write_all
from pytest_vault.core.errors import FileError
from pytest_vault.core.files import write_bytes
from pytest_vault.core.text import json_text, shown
from pytest_vault.corpus.importers import ImporterError, jsonl, run_import
from pytest_vault.corpus.load import CorpusError, load_corpus, read_case
from pytest_vault.corpus.model import Case, schema
from pytest_vault.guard.passport import Passport

IMPORT_USAGE = (
    "usage: python -m pytest_vault.corpus import NAME [--out FILE] [--passports DIR] [--direct]"
)
COPY_USAGE = "usage: python -m pytest_vault.corpus copy DIR"


def _counts(cases: Iterable[Case]) -> str:
    cases = list(cases)
    attacks = sum(c.kind == "attack" for c in cases)
    sessions = len({c.session for c in cases})
    return f"{attacks} attacks, {len(cases) - attacks} benign, {sessions} sessions"


def _import_args(args: list[str]) -> tuple[str, dict[str, str | bool]] | None:
    """NAME and its options (`out`, `passports`: a path; `direct`: a flag), each at most
    once; None when the words are not that."""
    if not args or args[0].startswith("-"):
        return None
    name, rest = args[0], args[1:]
    options: dict[str, str | bool] = {}
    while rest:
        word = rest.pop(0)
        key = word.removeprefix("--")
        if not word.startswith("--") or key in options:
            return None
        if key == "direct":
            options[key] = True
        elif key in ("out", "passports") and rest:
            options[key] = rest.pop(0)
        else:
            return None
    return name, options


def import_corpus(args: list[str]) -> int:
    """`import NAME [--out FILE] [--passports DIR] [--direct]`: the converted corpus to
    FILE, else to stdout; the passport folder it runs under to DIR (a new folder)."""
    parsed = _import_args(args)
    if parsed is None:
        print(IMPORT_USAGE, file=sys.stderr)
        return 2
    name, options = parsed
    out = options.pop("out", None)
    folder = options.get("passports")
    if isinstance(folder, str):
        try:
            there = Path(folder).exists()
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            print(f"error: {shown(folder)}: cannot write: {shown(exc)}", file=sys.stderr)
            return 1
        if there:  # never over a team's edited passports
            print(f"error: {shown(folder)}: is there already (give a new folder)", file=sys.stderr)
            return 1
        options["passports"] = True
    try:
        made = run_import(name, **options)
    except ImporterError as exc:
        print(f"error: {shown(exc)}", file=sys.stderr)
        return 2
    for note in made.notes:
        print(f"{shown(name)}: {shown(note)}", file=sys.stderr)
    if isinstance(folder, str):
        try:
            Path(folder).mkdir(parents=True)
            for file, data in made.passports.items():
                write_bytes(Path(folder) / file, data)
        except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
            print(f"error: {shown(folder)}: cannot write: {shown(exc)}", file=sys.stderr)
            return 1
        print(f"{shown(folder)}: {len(made.passports)} files (its passports)", file=sys.stderr)
    text = jsonl(made.lines).encode("utf-8")
    if not isinstance(out, str):
        sys.stdout.flush()
        write_all(sys.stdout.buffer, text)
        return 0
    try:
        write_bytes(Path(out), text)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        print(f"error: {shown(out)}: cannot write: {shown(exc)}", file=sys.stderr)
        return 1
    # As the suite reads them: exact numbers (a history's amounts are read as JSON numbers).
    cases = [read_case(json_text(line), shown(out)) for line in made.lines]
    print(f"{shown(out)}: {_counts(cases)} (from {shown(name)})", file=sys.stderr)
    return 0


def copy_corpus(args: list[str]) -> int:
    """`copy DIR`: the built-in corpus files and their schema, into DIR."""
    from pytest_vault.corpus import builtin

    if len(args) != 1 or args[0].startswith("-"):
        print(COPY_USAGE, file=sys.stderr)
        return 2
    try:
        written = builtin.copy(Path(args[0]))
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        print(f"error: {shown(args[0])}: cannot copy: {shown(exc)}", file=sys.stderr)
        return 1
    cases = [case for p in written if p.suffix == ".jsonl" for _, case in load_corpus(p)]
    print(f"{shown(args[0])}: {len(written)} files, {_counts(cases)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # A reader that goes away (`| head`) ends the command quietly, as every command does.
    return quiet_on_closed_pipe(lambda: _command(args))


def _passports(folder: Path | None) -> dict[int, Passport]:
    """Each level's passport, from `folder` (else the shipped ones): an indirect case's
    goal must be one its level forbids, as at collection."""
    from pytest_vault.guard.folder import SHIPPED, passport_files
    from pytest_vault.guard.passport import load_passport

    files = passport_files(folder or SHIPPED)
    return {level: load_passport(path) for level, path in files.items()}


def _command(args: list[str]) -> int:
    if args[:1] == ["import"]:
        return import_corpus(args[1:])
    if args[:1] == ["copy"]:
        return copy_corpus(args[1:])
    if args == ["--schema"]:
        print(json.dumps(schema(), indent=2))
        return 0
    if not args:
        print(
            "usage: python -m pytest_vault.corpus --schema | FILE... [--passports DIR]"
            " | import NAME [--out FILE]"
            " [--passports DIR] [--direct] | copy DIR",
            file=sys.stderr,
        )
        return 2
    folder: Path | None = None
    if "--passports" in args:  # whose levels judge the indirect cases' goals
        at = args.index("--passports")
        if at + 1 >= len(args):
            print("error: --passports needs a folder", file=sys.stderr)
            return 2
        folder = Path(args[at + 1])
        args = args[:at] + args[at + 2 :]
    try:
        passports = _passports(folder)
    except FileError as exc:
        print(f"error: --passports {shown(str(folder))}: {exc}", file=sys.stderr)
        return 2
    seen: dict[str, str] = {}
    status = 0
    for name in args:
        try:
            cases = load_corpus(name, seen, passports)
            print(f"{shown(name)}: {_counts(case for _, case in cases)}")
        except CorpusError as exc:
            for problem in exc.problems:  # every bad line, each its own error
                print(f"error: {problem}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
