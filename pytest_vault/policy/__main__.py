"""`vault-guard`: the policy authors' commands on top of the guard's own.

* `vault-guard diff OLD NEW [--format text|json|sarif] [--fail-on-widen] [-v] [--witnesses FILE]`:
  what two passports (or two folders of `level-N.json`) permit differently, each change with
  a witness the guard decides differently under them (`--witnesses`: as corpus cases);
* `vault-guard lint PATH... [--format text|json|sarif]`: passport mistakes, before anything runs;
* `vault-guard --passport FILE < lines.jsonl`: the guard's command line
  (`python -m pytest_vault.guard`), one JSON decision per stdin line.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_vault.core.cli import quiet_on_closed_pipe, write_out
from pytest_vault.core.errors import FileError, reason, unreachable
from pytest_vault.core.files import write_text
from pytest_vault.core.json import dumps
from pytest_vault.core.text import shown
from pytest_vault.guard.__main__ import main as guard_main
from pytest_vault.policy.verdict import code_change, collapsed, verdict

if TYPE_CHECKING:
    from pytest_vault.policy.diff import Change, Pair
    from pytest_vault.policy.witness import Witness


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _order(change: Change) -> int:
    """Newly allowed first, then newly denied, then undecided, then no effect."""
    if change.undecided:
        return 2
    return {"widens": 0, "narrows": 1}.get(change.effect, 3)


def reason_only(change: Change) -> bool:
    """A change of no effect on any decision whose witness shows the reasons change."""
    w = change.witness
    return change.effect == "neutral" and w is not None and w.effect == "neutral"


def diff_verdict(changes: Sequence[Change]) -> str:
    """The verdict line: witnessed widenings and narrowings by level, reason-only
    changes, and the undecided (which count for --fail-on-widen when they widen)."""
    allowed: Counter[int | None] = Counter()
    denied: Counter[int | None] = Counter()
    for c in changes:
        if not c.undecided and c.effect == "widens":
            allowed[c.level] += 1
        elif not c.undecided and c.effect == "narrows":
            denied[c.level] += 1
    undecided = sum(c.undecided for c in changes)
    more = [f"{undecided} undecided"] if undecided else []
    return verdict(allowed, denied, sum(map(reason_only, changes)), more=more)


def render_diff(changes: Sequence[Change], *, verbose: bool = False) -> str:
    """The verdict, then each change (newly allowed, newly denied, undecided, no effect),
    a witness under each; reason-only changes counted by change of reasons, their
    witnesses listed with `verbose`."""
    lines = [diff_verdict(changes)]
    ordered = sorted(changes, key=_order)  # stable: by level and field within a group
    reasons = [c for c in ordered if reason_only(c)]
    for change in ordered:
        lines.append(change.line())
        w = change.witness
        if w is not None and (w.effect != "neutral" or verbose):
            lines.append(f"  {w.line()}")
    if reasons:
        counts = collapsed(
            f"{'' if c.level is None else f'level {c.level}: '}{code_change(*_labels(c.witness))}"
            for c in reasons
            if c.witness is not None
        )
        hint = "" if verbose else "; -v shows each"
        lines.append(f"reason-only changes, by change of reasons{hint}:")
        lines += [shown(f"  {change}: {n}") for change, n in counts]
    return "".join(line + "\n" for line in lines)


def _labels(w: Witness) -> tuple[list[str], list[str]]:
    return [r.label for r in w.old.reasons], [r.label for r in w.new.reasons]


def _witness_cases(
    changes: Sequence[Change], level: int | None, old: str, new: str
) -> tuple[list[dict[str, Any]], int]:
    """Each witness of a widening or narrowing that is a corpus case; and how many are
    not (a pack context, or judged at a later instant)."""
    from pytest_vault.policy.witness import case_line

    cases, skipped = [], 0
    for c in changes:
        w = c.witness
        if w is None or w.effect == "neutral":
            continue
        if not w.writable:
            skipped += 1
            continue
        at = c.level if c.level is not None else level
        assert at is not None
        source = {"source": "vault-guard diff", "old": old, "new": new}
        cases.append(
            case_line(
                w, level=at, pointer=c.pointer, effect=c.effect, summary=c.summary, source=source
            )
        )
    return cases, skipped


def _level_of(pairs: Sequence[Pair]) -> int | None:
    """Two passport files' level, from the new one's `metadata.level` (as the shipped ones
    say); None for folders, whose changes each have their level."""
    if len(pairs) != 1 or pairs[0].level is not None:
        return None
    level = pairs[0].new.metadata.get("level")
    return level if type(level) is int and 1 <= level <= 5 else None


def _whole(text: str) -> int:
    """A whole number in ASCII digits: `int` also reads '\u0661' (Arabic-Indic) as 1."""
    if not (text.isascii() and text.isdigit()):
        import argparse

        raise argparse.ArgumentTypeError(f"expected a whole number, got {shown(repr(text))}")
    return int(text)


def _diff(argv: Sequence[str]) -> int:
    import argparse

    from pytest_vault.policy.diff import any_widen, load_pairs, review_pairs
    from pytest_vault.policy.witness import case_text

    parser = argparse.ArgumentParser(
        prog="vault-guard diff",
        description="What two passports, or two folders of level-N.json, permit differently: "
        "a verdict line, then one change per line, each with a witness (a call the old and "
        "new passports decide differently, checked by the guard itself).",
    )
    parser.add_argument("old", metavar="OLD", help="passport file, or folder of level-N.json")
    parser.add_argument("new", metavar="NEW", help="the same kind as OLD")
    parser.add_argument("--format", choices=("text", "json", "sarif"), default="text")
    parser.add_argument(
        "--fail-on-widen", action="store_true", help="exit 1 when any change widens"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also list each reason-only change"
    )
    parser.add_argument(
        "--witnesses",
        metavar="FILE.jsonl",
        help="write the witnesses as corpus cases (replayed calls) for --vault-decisions",
    )
    parser.add_argument(
        "--level",
        type=_whole,
        choices=range(1, 6),
        metavar="N",
        help="the level of two passport files' witness cases (default: the new "
        "passport's metadata.level)",
    )
    args = parser.parse_args(argv)
    for given in (args.old, args.new):
        problem = unreachable(given)
        if problem is not None:
            print(f"error: {shown(given)}: cannot read: {problem}", file=sys.stderr)
            return 2
    try:
        pairs = load_pairs(args.old, args.new)
        changes = review_pairs(pairs)
    except FileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    written = ""
    if args.witnesses is not None:
        level = args.level or _level_of(pairs)
        if level is None and any(c.level is None for c in changes):
            print(
                "error: --witnesses: give --level N: the witness cases of two passport files "
                "need the level they are judged at",
                file=sys.stderr,
            )
            return 2
        cases, skipped = _witness_cases(changes, level, args.old, args.new)
        text = "".join(case_text(case) + "\n" for case in cases)
        try:
            write_text(Path(args.witnesses), text)
        except OSError as exc:
            print(f"error: --witnesses {shown(args.witnesses)}: {reason(exc)}", file=sys.stderr)
            return 2
        written = f"; {_count(len(cases), 'witness case')} written to {shown(args.witnesses)}"
        if skipped:
            written += f" ({skipped} more: pack contexts or later instants, not corpus cases)"
    if args.format == "json":
        doc = {
            "verdict": diff_verdict(changes),
            "changes": [c.to_dict() for c in changes],
        }
        write_out(dumps(doc, indent=2, ascii=True) + "\n")
    elif args.format == "sarif":
        from pytest_vault.policy.sarif import diff_sarif

        log = diff_sarif(changes, pairs)
        write_out(dumps(log, indent=1, ascii=True) + "\n")
    else:
        write_out(render_diff(changes, verbose=args.verbose))
    effects = [c.effect for c in changes]
    tally = ", ".join(f"{effects.count(e)} {e}" for e in ("widens", "narrows", "neutral"))
    print(f"vault-guard diff: {_count(len(changes), 'change')} ({tally}){written}", file=sys.stderr)
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
    parser.add_argument("--format", choices=("text", "json", "sarif"), default="text")
    args = parser.parse_args(argv)
    findings = lint_paths(args.paths)
    if args.format == "json":
        write_out(json.dumps({"findings": [f.to_dict() for f in findings]}, indent=2) + "\n")
    elif args.format == "sarif":
        from pytest_vault.policy.sarif import lint_sarif

        write_out(json.dumps(lint_sarif(findings), indent=1) + "\n")
    else:
        write_out("".join(f.line() + "\n" for f in findings))
    errors = sum(f.severity == "error" for f in findings)
    tally = f"{_count(errors, 'error')}, {_count(len(findings) - errors, 'warning')}"
    print(f"vault-guard lint: {tally}", file=sys.stderr)
    return 1 if has_errors(findings) else 0


_COMMANDS = {"diff": _diff, "lint": _lint}


USAGE = """vault-guard --passport FILE < lines.jsonl
       vault-guard diff OLD NEW [--format text|json|sarif] [--fail-on-widen] [-v]
                        [--witnesses FILE.jsonl [--level N]]
       vault-guard lint PATH... [--format text|json|sarif]"""


def main(argv: Sequence[str] | None = None) -> int:
    """`vault-guard`; a closed stdout ends it quietly, with status 1."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args and args[0] in _COMMANDS:
        return quiet_on_closed_pipe(lambda: _COMMANDS[args[0]](args[1:]))
    return guard_main(args, prog="vault-guard", usage=USAGE)


if __name__ == "__main__":
    sys.exit(main())
