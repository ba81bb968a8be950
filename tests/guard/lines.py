"""Where `json.dumps(data, indent=2)` writes a field: the line numbers a test expects.

An oracle that shares nothing with the guard's locator: it marks the entry in a copy of
the data, writes it, and finds the line holding the mark.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

MARK = "@@the-entry-looked-for@@"


def dumped(data: object) -> str:
    return json.dumps(data, indent=2)


def written_line(data: object, loc: Sequence[int | str]) -> int:
    """The line of `dumped(data)` where the entry at `loc` starts: a key's line, an item's;
    where `loc` goes past what `data` holds, the deepest entry it reaches (line 1: root)."""
    marked: Any = copy.deepcopy(data)
    node, parent, last = marked, None, None
    for part in loc:
        if isinstance(node, dict) and part in node:
            parent, last, node = node, part, node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            parent, last, node = node, part, node[part]
        else:
            break
    if parent is None:
        return 1
    if isinstance(parent, list):
        parent[last] = MARK  # type: ignore[index]
    else:
        # Renamed in place, so the entries around it keep their order (and their lines).
        entries = list(parent.items())
        parent.clear()
        parent.update((MARK if k == last else k, v) for k, v in entries)
    lines = dumped(marked).splitlines()
    return next(n for n, line in enumerate(lines, 1) if MARK in line)
