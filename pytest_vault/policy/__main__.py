"""`vault-guard`: the policy authors' commands on top of the guard's own.

* `vault-guard diff OLD NEW [--format text|json] [--fail-on-widen]`: what two passports
  (or two folders of `level-N.json`) permit differently;
* `vault-guard lint PATH... [--format text|json]`: passport mistakes, before anything runs;
* `vault-guard --passport FILE < lines.jsonl`: the guard's command line
  (`python -m pytest_vault.guard`), one JSON decision per stdin line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from decimal import Decimal

from pytest_vault.core.cli import quiet_on_closed_pipe, write_out
from pytest_vault.core.errors import FileError
from pytest_vault.guard.__main__ import main as guard_main


def _number(value: object) -> object:
    """A passport number (read as an exact Decimal) for JSON: exact, or its text."""
    if not isinstance(value, Decimal):
        raise TypeError(f"{type(value).__name__} is not JSON")
    # The exponent first: int() of 1E+5000 is past Python's digit limit (a traceback),
    # and of 1E+9999999 takes minutes. Beyond a double's range, the number's own text.
    if not value.is_finite() or not -30 <= value.adjusted() <= 30:
        return str(value)
    if value == value.to_integral_value():
        return int(value)
    return float(value) if Decimal(repr(float(value))) == value else str(value)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _diff(argv: Sequence[str]) -> int:
    import argparse

    from pytest_vault.policy.diff import any_widen, diff_paths

    parser = argparse.ArgumentParser(
        prog="vault-guard diff",
        description="What two passports, or two folders of level-N.json, permit differently: "
        "one change per line, each widens, narrows or neutral.",
    )
    parser.add_argument("old", metavar="OLD", help="passport file, or folder of level-N.json")
    parser.add_argument("new", metavar="NEW", help="the same kind as OLD")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--fail-on-widen", action="store_true", help="exit 1 when any change widens"
    )
    args = parser.parse_args(argv)
    try:
        changes = diff_paths(args.old, args.new)
    except FileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        doc = {"changes": [c.to_dict() for c in changes]}
        write_out(json.dumps(doc, indent=2, default=_number) + "\n")
    else:
        write_out("".join(c.line() + "\n" for c in changes))
    effects = [c.effect for c in changes]
    tally = ", ".join(f"{effects.count(e)} {e}" for e in ("widens", "narrows", "neutral"))
    print(f"vault-guard diff: {_count(len(changes), 'change')} ({tally})", file=sys.stderr)
    return 1 if args.fail_on_widen and any_widen(changes) else 0


def _lint(argv: Sequence[str]) -> int:
    import argparse

    from pytest_vault.policy.lint import has_errors, lint_paths

    parser = argparse.ArgumentParser(
        prog="vault-guard lint",
        description="Find passport mistakes (fail-open allowlists, expiry, assurance, "
        "unmatchable entries, caps): FILE:POINTER: error|warning: message. Exit 1 on an error.",
    )
    parser.add_argument("paths", metavar="PATH", nargs="+", help="passport files or folders")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    findings = lint_paths(args.paths)
    if args.format == "json":
        write_out(json.dumps({"findings": [f.to_dict() for f in findings]}, indent=2) + "\n")
    else:
        write_out("".join(f.line() + "\n" for f in findings))
    errors = sum(f.severity == "error" for f in findings)
    tally = f"{_count(errors, 'error')}, {_count(len(findings) - errors, 'warning')}"
    print(f"vault-guard lint: {tally}", file=sys.stderr)
    return 1 if has_errors(findings) else 0


_COMMANDS = {"diff": _diff, "lint": _lint}


USAGE = """vault-guard --passport FILE < lines.jsonl
       vault-guard diff OLD NEW [--format text|json] [--fail-on-widen]
       vault-guard lint PATH... [--format text|json]"""


def main(argv: Sequence[str] | None = None) -> int:
    """`vault-guard`; a closed stdout ends it quietly, with status 1."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in _COMMANDS:
        return quiet_on_closed_pipe(lambda: _COMMANDS[args[0]](args[1:]))
    return guard_main(args, prog="vault-guard", usage=USAGE)


if __name__ == "__main__":
    sys.exit(main())
