"""The strict reader of TOML files (levels.toml, judges.toml, attacker.toml, price
tables, importer settings): `load_toml(path, Model)` reads a file into a pydantic model,
and every problem is one `FileError` naming the file, the line where tomllib gives one,
and the field by its dotted path."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from pytest_vault.core.errors import FileError, describe, reason
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


def parse_toml(data: bytes, source: str, model: type[M]) -> M:
    """`data`, a TOML document from `source`, read strictly into `model`; any problem is
    one `FileError`: `source:LINE: invalid TOML: problem` where tomllib gives the line, and
    `source: dotted.field: problem` for a valid document's bad field (its dotted path is
    how a person finds it in TOML)."""
    table = read_toml(data, source)
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        raise FileError(f"{source}: {describe(exc, model)}") from None


def load_toml(path: str | Path, model: type[M]) -> tuple[M, bytes]:
    """The TOML file at `path` read into `model`, with the very bytes read (for a
    digest); a file that cannot be read is one `FileError` too."""
    try:
        data = Path(path).read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise FileError(f"{path}: cannot read: {reason(exc)}") from None
    return parse_toml(data, str(path), model), data
