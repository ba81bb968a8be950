"""The strict reader of TOML files (levels.toml, judges.toml, attacker.toml, price
tables, importer settings): `load_toml(path, Model)` reads a file into a pydantic model,
and every problem is one `FileError` naming the file, the line where it is known, and the
field."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from pytest_vault.core.errors import FileError, describe, error_loc, reason
from pytest_vault.core.json import DocumentError, utf8

M = TypeVar("M", bound=BaseModel)


# tomllib ends its messages with where the problem is.
_TOML_WHERE = re.compile(r" \(at (?:line (\d+), column (\d+)|end of document)\)$")


def read_toml(data: bytes, source: str) -> dict[str, object]:
    """A TOML document; any problem is a one-line `FileError`, in words."""
    try:
        return tomllib.loads(utf8(data))
    except DocumentError as exc:
        raise FileError(f"{exc.where(source)}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = _TOML_WHERE.search(message)
        if where is None:
            raise FileError(f"{source}: invalid TOML: {message}") from None
        problem = message[: where.start()]
        if where[1] is None:
            raise FileError(f"{source}: invalid TOML: {problem} at end of document") from None
        raise FileError(
            f"{source}:{where[1]}: invalid TOML: {problem} at column {where[2]}"
        ) from None
    except ValueError:  # an integer with more digits than `int` reads from text
        raise FileError(f"{source}: invalid TOML: number out of range") from None
    except RecursionError:
        raise FileError(f"{source}: invalid TOML: nested too deeply") from None


# A TOML line is found by tomllib itself, not by a tokenizer of ours: TOML's quoting,
# dotted keys and multi-line values stay tomllib's to read. A prefix of the document is
# read again (in a binary search) until it holds the field. Bounded, so that a hostile
# document's error comes at once: at most 64 reads, of documents up to 256 KiB (a
# levels.toml is a few KiB); past either, the message names the field without a line.
_TOML_READS, _TOML_LOCATED = 64, 256 * 1024


def toml_line(data: bytes, loc: Sequence[int | str]) -> int | None:
    """The line where the value at `loc` of a TOML document (already read by `read_toml`)
    starts to be defined (for a field the document lacks, the deepest part it holds), or
    None when that is the root, or when finding it is past the bounds above."""
    if len(data) > _TOML_LOCATED:
        return None
    text = utf8(data)
    lines = text.split("\n")
    reads = [0]

    def holds(count: int) -> bool | None:
        """Whether the first `count` lines hold the field (read to the first point at or
        after them where they parse); None past the budget."""
        while True:
            reads[0] += 1
            if reads[0] > _TOML_READS:
                return None
            try:
                return _deepest(tomllib.loads("\n".join(lines[:count])), target) == target
            except (tomllib.TOMLDecodeError, ValueError, RecursionError):
                count += 1  # inside a multi-line value: its end is where it is read

    target = _deepest(tomllib.loads(text), loc)
    if not target:
        return None
    low, high = 1, len(lines)  # the whole document holds it
    while low < high:
        middle = (low + high) // 2
        found = holds(middle)
        if found is None:
            return None
        low, high = (low, middle) if found else (middle + 1, high)
    return low


def toml_at(source: str, data: bytes, loc: Sequence[int | str]) -> str:
    """`source`, with the line of the field at `loc` when the document gives one."""
    line = toml_line(data, loc)
    return source if line is None else f"{source}:{line}"


def _deepest(node: Any, loc: Sequence[int | str]) -> tuple[int | str, ...]:
    """The longest start of `loc` that `node` holds."""
    held: list[int | str] = []
    for part in loc:
        if isinstance(node, dict) and isinstance(part, str) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            break
        held.append(part)
    return tuple(held)


def parse_toml(data: bytes, source: str, model: type[M]) -> M:
    """`data`, a TOML document from `source`, read strictly into `model`; any problem is
    one `FileError`: `source:LINE: field: problem` (the line where it can be found)."""
    table = read_toml(data, source)
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        raise FileError(
            f"{toml_at(source, data, error_loc(exc))}: {describe(exc, model)}"
        ) from None


def load_toml(path: str | Path, model: type[M]) -> tuple[M, bytes]:
    """The TOML file at `path` read into `model`, with the very bytes read (for a
    digest); a file that cannot be read is one `FileError` too."""
    try:
        data = Path(path).read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise FileError(f"{path}: cannot read: {reason(exc)}") from None
    return parse_toml(data, str(path), model), data
