"""The one verdict line a reviewer reads first, and the counts below it.

`vault-guard diff`, the decision snapshots' summary and `vault-report rescore` each start
with the same line: what is newly allowed (per level), what is newly denied, and how many
changes only change the reasons of a decision that stays the same:

    2 newly allowed (Level 2), 0 newly denied, 284 reason-only changes

Below it, newly allowed comes first, then newly denied, and last the reason-only changes,
collapsed into one count per change of reasons (`code_change`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence


def plural(n: int, one: str, many: str | None = None) -> str:
    """`1 call`, `2 calls`, `1,000 calls`."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"


def per_level(counts: Mapping[int | None, int]) -> str:
    """`(Level 2)` for one level, `(Level 2: 1, Level 3: 4)` for several, "" for none or
    for changes of no level (two passport files)."""
    levels = sorted((n, c) for n, c in counts.items() if n is not None and c)
    if not levels:
        return ""
    if len(levels) == 1:
        return f" (Level {levels[0][0]})"
    return " (" + ", ".join(f"Level {n}: {c:,}" for n, c in levels) + ")"


def verdict(
    allowed: Mapping[int | None, int],
    denied: Mapping[int | None, int],
    reasons: int,
    *,
    more: Sequence[str] = (),
) -> str:
    """`2 newly allowed (Level 2), 0 newly denied, 284 reason-only changes`, then any
    `more` counts a tool has (", 1 undecided")."""
    words = [
        f"{sum(allowed.values()):,} newly allowed{per_level(allowed)}",
        f"{sum(denied.values()):,} newly denied{per_level(denied)}",
        plural(reasons, "reason-only change"),
        *more,
    ]
    return ", ".join(words)


def code_change(old: Sequence[str], new: Sequence[str]) -> str:
    """`a, b -> b`: the reasons of a decision before and after ("none" for no reasons)."""
    return f"{', '.join(old) or 'none'} -> {', '.join(new) or 'none'}"


def collapsed(changes: Iterable[str]) -> list[tuple[str, int]]:
    """Each change of reasons once, with how many there are: most first, then by text."""
    counts = Counter(changes)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))
