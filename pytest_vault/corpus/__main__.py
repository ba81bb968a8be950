"""Check corpus files from the command line.

python -m pytest_vault.corpus --schema     # the JSON schema of one line
python -m pytest_vault.corpus FILE...      # check files, print counts
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence

from pytest_vault.corpus.load import CorpusError, load_corpus
from pytest_vault.corpus.model import Case, schema
from pytest_vault.guard.text import shown


def _counts(cases: Iterable[Case]) -> str:
    cases = list(cases)
    attacks = sum(c.kind == "attack" for c in cases)
    sessions = len({c.session for c in cases})
    return f"{attacks} attacks, {len(cases) - attacks} benign, {sessions} sessions"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--schema"]:
        print(json.dumps(schema(), indent=2))
        return 0
    if not args:
        print("usage: python -m pytest_vault.corpus --schema | FILE...", file=sys.stderr)
        return 2
    seen: dict[str, str] = {}
    status = 0
    for name in args:
        try:
            print(f"{shown(name)}: {_counts(case for _, case in load_corpus(name, seen))}")
        except CorpusError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
