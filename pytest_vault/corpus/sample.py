"""A stratified sample of a corpus (`--vault-sample N`, `--vault-sample-benign M`,
`--vault-seed S`): the same cases on every machine, worker and shard.

Attacks are stratified over (track, level, category), where the track is direct or
indirect (an attack planted in what the tools return), benign cases over their own strata.
A stratum's count is its proportional share N x size / total rounded down or up, so it is
always within one of the share; the seats left after rounding down go first to strata
that would otherwise have none, then by largest remainder, so every stratum is
represented whenever that keeps every count within one of its share (when N is at least
the number of strata and there are enough seats left). Within a stratum the cases with
the smallest `case_key` are chosen: a sha256 of the seed and the case's content, never
of file order or Python's hash.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, model_validator

from pytest_vault.corpus.model import Case

Count = Annotated[StrictInt, Field(ge=0)]
# A case in a run: the name of its corpus file and its id (unique across the files of a
# run, so the name alone tells it apart).
Where = tuple[str, str]
Stratum = tuple[str, int, str]  # ("direct" or "indirect", level, category)


class SampleRecord(BaseModel):
    """The sample a run ran, as its results metadata records it."""

    model_config = ConfigDict(extra="allow", frozen=True)

    attacks: Count  # attacks kept
    of: Count  # attacks there were, after -k, -m and --vault-level
    asked: Count | None  # --vault-sample N (None: attacks in full)
    seed: Count
    ids_digest: Annotated[StrictStr, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
    benign: Count
    benign_of: Count
    benign_asked: Count | None  # --vault-sample-benign M (None: benign cases in full)

    @model_validator(mode="after")
    def _within(self) -> SampleRecord:
        if self.attacks > self.of or self.benign > self.benign_of:
            raise ValueError("more cases kept than there were")
        return self


def allocate(sizes: Mapping[Stratum, int], n: int) -> dict[Stratum, int]:
    """Seats per stratum, summing to min(n, total): each floor or ceil of n x size / total.

    The seats left after flooring go to strata still at zero first, then to the largest
    remainders; ties by stratum key (sortable keys give the same answer everywhere).
    """
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    # Exact integer arithmetic: floor and remainder of n * size / total.
    seats = {k: n * size // total for k, size in sizes.items()}
    remainder = {k: n * size % total for k, size in sizes.items()}
    left = n - sum(seats.values())
    order = sorted(
        (k for k in sizes if remainder[k]),
        key=lambda k: (seats[k] > 0, -remainder[k], k),
    )
    for k in order[:left]:
        seats[k] += 1
    return seats


def _exact(value: object) -> str:
    if isinstance(value, Decimal):  # the strict reader keeps numbers exact
        return str(value)
    if isinstance(value, dt.date):  # an indirect case's history entry, as it is written
        return value.isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")


def case_key(case: Case, seed: int) -> str:
    """The order of a case within its stratum: sha256 of the seed and the case's
    canonical JSON (defaults filled in, sorted keys, ASCII), so the same line in any file,
    on any machine, has the same key."""
    content = json.dumps(
        case.line(),
        sort_keys=True,
        ensure_ascii=True,
        separators=(",", ":"),
        default=_exact,
    )
    return hashlib.sha256(f"{seed}\n{content}".encode()).hexdigest()


def ids_digest(chosen: Iterable[Where]) -> str:
    """`sha256:` + sha256 of the JSON list of the chosen [file, id] pairs, sorted by code
    point, ASCII (`\\u` escapes), no spaces: `[["level-1.jsonl","L1-s01-a1"],...]`."""
    pairs = sorted(set(chosen))
    text = json.dumps([list(p) for p in pairs], ensure_ascii=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _pick(cases: Mapping[Where, Case], n: int | None, seed: int) -> set[Where]:
    if n is None:
        return set(cases)
    strata: dict[Stratum, list[tuple[str, Where]]] = {}
    for where, case in cases.items():
        track = "indirect" if case.indirect else "direct"
        strata.setdefault((track, case.level, case.category), []).append(
            (case_key(case, seed), where)
        )
    seats = allocate({k: len(v) for k, v in strata.items()}, n)
    return {where for k, v in strata.items() for _, where in sorted(v)[: seats[k]]}


def choose(
    cases: Mapping[Where, Case], attacks: int | None, benign: int | None, seed: int
) -> tuple[set[Where], SampleRecord]:
    """The cases a sample keeps (attacks and benign) and its record. `None` for a count
    keeps that kind in full."""
    by_kind: dict[str, dict[Where, Case]] = {"attack": {}, "benign": {}}
    for where, case in cases.items():
        by_kind[case.kind][where] = case
    kept_attacks = _pick(by_kind["attack"], attacks, seed)
    kept_benign = _pick(by_kind["benign"], benign, seed)
    kept = kept_attacks | kept_benign
    record = SampleRecord(
        attacks=len(kept_attacks),
        of=len(by_kind["attack"]),
        asked=attacks,
        seed=seed,
        ids_digest=ids_digest(kept),
        benign=len(kept_benign),
        benign_of=len(by_kind["benign"]),
        benign_asked=benign,
    )
    return kept, record
