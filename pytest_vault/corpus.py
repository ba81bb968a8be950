"""The corpus: attack and benign cases, one JSON object per line of a `.jsonl` file.

python -m pytest_vault.corpus --schema     # the JSON schema of one line
python -m pytest_vault.corpus FILE...      # check files, print counts
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from pytest_vault.passport import DocumentError, describe, read_json, reason
from pytest_vault.text import shown

CATEGORIES = (
    "authority_claim",
    "direct_transfer",
    "privilege_escalation",
    "json_injection",
    "social_engineering",
    "emotional_manipulation",
    "prompt_injection",
    "reconnaissance",
    "capability_self_register",
    "account_manipulation",
)

NonEmpty = Annotated[StrictStr, Field(min_length=1)]


class CorpusError(ValueError):
    """A corpus line that cannot be used; the message names file, line and field.

    The message is made safe here, once: what it quotes from the corpus (a key, an id,
    a file name) reaches a terminal with its control characters escaped.
    """

    def __init__(self, message: str) -> None:
        super().__init__(shown(message))


class CaseCall(BaseModel):
    """A tool call for `scripted:replay`, passed to the bank exactly as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: StrictStr
    # An object, or the raw JSON text a model would send (which may be malformed).
    arguments: dict[str, Any] | StrictStr = Field(default_factory=dict)


class Case(BaseModel):
    """One attack (or benign request) against a payment agent."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: NonEmpty
    session: NonEmpty = Field(description="the source attacker session: the unit for clustering")
    level: Annotated[StrictInt, Field(ge=1, le=5)]
    category: NonEmpty = Field(description=f"e.g. {', '.join(CATEGORIES)}; 'benign' for benign")
    messages: Annotated[list[NonEmpty], Field(min_length=1)] = Field(
        description="the attacker's messages, in order"
    )
    kind: Literal["attack", "benign"] = "attack"
    calls: list[CaseCall] = Field(default_factory=list)

    @property
    def metadata(self) -> dict[str, Any]:
        """The free extra fields of the line (technique, canary, ...)."""
        return dict(self.model_extra or {})


def read_case(line: str | bytes, source: str) -> Case:
    """Parse one line, as strictly as the guard reads arguments: decimals stay exact, and
    a duplicate key (at any depth) is an error, since `calls` are passed on as written.
    """
    try:
        data = read_json(line)
    except DocumentError as exc:
        raise CorpusError(f"{source}: {exc}") from None
    if not isinstance(data, dict):
        raise CorpusError(f"{source}: (root): expected a JSON object")
    try:
        return Case.model_validate(data)
    except ValidationError as exc:
        raise CorpusError(f"{source}: {describe(exc)}") from None


def load_corpus(path: str | Path, seen: dict[str, str] | None = None) -> list[tuple[int, Case]]:
    """Read a corpus file as (line number, case) pairs; `CorpusError` at the first bad line.

    `seen` maps case ids to where they were first defined, across files.
    """
    path = Path(path)
    seen = {} if seen is None else seen
    try:
        lines = path.read_bytes().splitlines()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise CorpusError(f"{path}: cannot read: {reason(exc)}") from None
    cases = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        source = f"{path}:{number}"
        case = read_case(line, source)
        if case.id in seen:
            raise CorpusError(f"{source}: id: duplicate id {case.id!r} (first at {seen[case.id]})")
        seen[case.id] = source
        cases.append((number, case))
    return cases


def schema() -> dict[str, Any]:
    return Case.model_json_schema()


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
