"""The one base class of pytest-vault's errors, and the words for what went wrong.

Every error a person reads derives from `VaultError`, which makes its message safe to
print once, here: a key, a value or a file name quoted in it reaches a terminal, a log or
a report with its control characters, bidi overrides and lone surrogates escaped
(`core.text.shown`), so no wing escapes a message again. A message may have several
lines (a corpus file's bad lines); each is made safe on its own.
"""

from __future__ import annotations

import difflib
import errno
import os
import re
from typing import TYPE_CHECKING, Annotated, Any, get_args, get_origin

from pytest_vault.core.text import shown

if TYPE_CHECKING:  # pydantic is imported where it is used: `import pytest_vault.plugin` is light
    from pydantic import BaseModel, ValidationError


class VaultError(ValueError):
    """An error of ours: one line (or a few) naming the file, the line where known, and
    the field, in words."""

    def __init__(self, message: str) -> None:
        super().__init__("\n".join(map(shown, str(message).split("\n"))))


class FileError(VaultError):
    """A file of ours (a passport, a TOML setting, a price table) that cannot be used."""


def reason(error: OSError | ValueError) -> str:
    """Why a file cannot be read, in words: "No such file or directory", not a repr."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)


# What the system says of a path before any file is looked at: a name too long for the file
# system, a file where the path needs a folder (`a/file.txt/x`), a loop of symbolic links.
_UNREACHABLE = frozenset({errno.ENAMETOOLONG, errno.ENOTDIR, errno.ELOOP})


def unreachable(path: str | os.PathLike[str]) -> str | None:
    """Why nothing can be read or written at `path`, in the system's words ("File name
    too long", "Not a directory", "Too many levels of symbolic links", a NUL in it), or
    None. A path that merely does not exist yet, or that this process may not enter, is
    None: those are for its reader or writer to say. The one check of every path the
    plugin's options and the commands take, before `pathlib` (whose `exists` and
    `is_dir` raise some of these and hide others) or `resolve` (a loop: RuntimeError)."""
    try:
        os.stat(path)
    except OSError as exc:
        return reason(exc) if exc.errno in _UNREACHABLE else None
    except ValueError as exc:  # a NUL in the path
        return reason(exc)
    return None


# A place in a document, as pydantic gives it: keys and list indices.
Loc = tuple[int | str, ...]


def field_path(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{shown(part)}" if out else shown(part)
    return out or "(root)"


# pydantic's words where they name its internals rather than the problem.
_WORDS = {
    "string_unicode": "not valid Unicode text (it holds a lone surrogate)",
    "extra_forbidden": "unknown key",
}


def describe(error: ValidationError, model: type[BaseModel] | None = None) -> str:
    """The first problem of a validation error as `field: message` on one line. With the
    `model` validated, an unknown key names the nearest key it knows there."""
    first = error.errors()[0]
    loc = error_loc(error)
    kind = first["type"]
    msg = _WORDS.get(kind) or shown(re.sub(r"\s+", " ", str(first["msg"])))
    # "a valid dictionary or instance of LevelSettings": the class is ours, not the file's.
    msg = re.sub(r" or instance of \w+$", "", msg)
    if first["loc"] and first["loc"][-1] == "[key]":  # a dict's key, not its value
        msg = f"unknown key ({msg})"
    # Errors raised in a model validator carry their own field in the message.
    if not loc and ": " in msg:
        return msg.removeprefix("Value error, ")
    if kind == "extra_forbidden" and model is not None and loc and isinstance(loc[-1], str):
        near = difflib.get_close_matches(loc[-1], _keys_at(model, loc[:-1]), n=1)
        msg += f"; did you mean {near[0]!r}?" if near else ""
    more = f" (+{len(error.errors()) - 1} more)" if len(error.errors()) > 1 else ""
    return f"{field_path(loc)}: {msg}{more}"


def _keys_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The keys the model takes at `loc` (through nested models, dicts and lists)."""
    from pydantic import BaseModel

    kind: Any = model
    for part in (*loc, None):
        while get_origin(kind) is Annotated:
            kind = get_args(kind)[0]
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            if part is None:
                return list(kind.model_fields)
            field = kind.model_fields.get(str(part))
            if field is None:
                return []
            kind = field.annotation
        elif get_origin(kind) in (dict, list) and part is not None:
            kind = get_args(kind)[-1]
        else:
            return []
    return []


def error_loc(error: ValidationError) -> tuple[int | str, ...]:
    # pydantic marks a bad dict key with a trailing "[key]": the place is the key's entry.
    return tuple(part for part in error.errors()[0]["loc"] if part != "[key]")
