"""The converters of the options table (`options.py`): text in, a value out, or an
`OptionError` saying what is wrong after the option's flag or config key. A value is what
argparse and execnet can carry to an xdist worker (never a Path)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from pytest_vault.core.errors import VaultError
from pytest_vault.models.specs import valid_target


class OptionError(VaultError):
    """A value an option cannot take: said after the option's flag or config key."""


def _grouped(n: int) -> str:
    return f"{n:,}" if n >= 10_000 else str(n)  # 4096, but 10,000,000


# A number option reads ASCII digits only: `int` and `float` also read any script's digits
# ('\u0661', an Arabic-Indic one, is 1; so are the fullwidth and mathematical ones) and
# underscores ('1_000'), which no one means in a setting and a reviewer would not read as
# the number it runs with.
_WHOLE = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)",
    re.IGNORECASE,  # inf and nan are read, to be refused as not finite
)
_SPACE = " \t\n\r\v\f"  # what `int` strips around a number, in ASCII


def _digits(text: str, form: re.Pattern[str], expected: str) -> str:
    """`text` without surrounding ASCII blanks, if it is a number in ASCII digits."""
    digits = text.strip(_SPACE)
    if form.fullmatch(digits) is None:
        only = "" if text.isascii() and "_" not in text else " (digits 0-9 only)"
        raise OptionError(f"{text!r}: expected {expected}{only}")
    return digits


def count(low: int, high: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        digits = _digits(text, _WHOLE, "a whole number")
        try:
            value = int(digits)
        except ValueError:  # more digits than Python converts
            raise OptionError(f"{text!r}: expected a whole number") from None
        if not low <= value <= high:
            raise OptionError(f"{text!r}: must be from {low} to {_grouped(high)}")
        return value

    return convert


def number(least: float, *, above: bool) -> Callable[[str], float]:
    """A finite float: nan compares false with everything, so `x < 0` alone would let it
    (or inf) switch a cap off."""

    def convert(text: str) -> float:
        value = float(_digits(text, _DECIMAL, "a number"))
        if not (math.isfinite(value) and (value > least if above else value >= least)):
            bound = "above" if above else "at least"
            raise OptionError(f"{value!r}: must be a finite number {bound} {least:g}")
        return value

    return convert


def choice(*values: str) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in values:
            raise OptionError(f"{text!r}: expected {', '.join(values[:-1])} or {values[-1]}")
        return text

    return convert


def text(what: str) -> Callable[[str], str]:
    """Any text but none: an empty value would silently mean the default."""

    def convert(value: str) -> str:
        if not value.strip():
            raise OptionError(f"{value!r}: expected {what}")
        return value

    return convert


def path(suffix: str = "") -> Callable[[str], str]:
    """A file or folder name; what is there is checked once the options are all known."""

    def convert(value: str) -> str:
        if not value or "\0" in value:
            raise OptionError(f"{value!r}: expected a path")
        if not value.endswith(suffix):
            raise OptionError(f"{value!r}: expected a {suffix} file")
        return value

    convert.is_path = True  # type: ignore[attr-defined]
    return convert


def corpus(value: str) -> str:
    """`builtin`, `builtin:NAME`, or a corpus file or folder."""
    from pytest_vault.corpus import builtin

    if builtin.is_builtin(value):
        try:
            builtin.files(value)
        except builtin.BuiltinError as exc:
            raise OptionError(str(exc)) from None
        return value
    return path()(value)


corpus.is_path = True  # type: ignore[attr-defined]


def url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OptionError(f"{value!r}: expected an http:// or https:// URL")
    return value


def target(value: str) -> str:
    if not valid_target(value):
        raise OptionError(f"{value!r}: expected MODULE:FACTORY, e.g. my_guard:make")
    return value


_NATURAL = re.compile("[0-9]{1,18}")  # `isdigit` is true of '\u0661' and '\u00b2' too


def shard(value: str) -> tuple[int, int]:
    if value == "auto":  # from the CI engine's variables (`plugin.shards`)
        from pytest_vault.plugin.shard_engines import ShardError, auto

        try:
            return auto()
        except ShardError as exc:
            raise OptionError(f"auto: {exc}") from None
    k, sep, n = value.partition("/")
    if not (sep and _NATURAL.fullmatch(k) and _NATURAL.fullmatch(n) and 1 <= int(k) <= int(n)):
        raise OptionError(f"{value!r}: expected K/N with 1 <= K <= N, e.g. 2/3")
    return int(k), int(n)


# A spec is claimed by the plugins' hooks at configure time (plugin/specs.py): here, only
# that there is one.
spec = text("a spec, e.g. openai:MODEL")
