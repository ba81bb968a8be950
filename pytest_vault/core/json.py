"""The one strict JSON reader, and where in a document a field is written.

`Reader` is the strict reader, in the few ways callers need it (`DOCUMENTS` for what a
person writes: passports and corpus lines; `DATA` for what pytest-vault writes and reads
back: results and cache entries; `ARGUMENTS` for a tool call's arguments, on the guard's
hot path): UTF-8 only (a leading byte order mark is no part of a document), numbers exact,
`NaN`/`Infinity`, duplicate keys and numbers out of range refused. `read_lossless` keeps
what even a strict reading would refuse (each number's text, a key given twice), for text
another program wrote that must be passed on exactly. `EXACT` is the one decimal context.

The one way out for an exact decimal: `number` is a `Decimal`'s JSON number, `dumps` the
JSON text of a value holding decimals, and `plain` a value's tree of plain JSON values
(for a log that `json` writes later), each by `number`'s one rule. A whole amount that our
code makes is an `int`, never a Decimal: JSON writes it `1000`.
"""

from __future__ import annotations

import bisect
import codecs
import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence
from decimal import (
    MAX_EMAX,
    MAX_PREC,
    MIN_EMIN,
    Clamped,
    Context,
    Decimal,
    DivisionByZero,
    FloatOperation,
    Inexact,
    InvalidOperation,
    Overflow,
    Rounded,
    Subnormal,
    Underflow,
)
from json.encoder import encode_basestring, encode_basestring_ascii
from pathlib import Path
from typing import Any, NamedTuple

from pytest_vault.core.errors import VaultError, field_path, reason


def sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


class DuplicateKey(ValueError):
    """A JSON object with one key twice: which value was meant cannot be known."""


def _repeated(pairs: list[tuple[str, Any]]) -> str:
    """The first key that `pairs`, which hold a key twice, repeat."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    raise AssertionError("no duplicate key")  # pragma: no cover - called with one


def _duplicate(key: str) -> str:
    # repr escapes what is not printable in the key: ESC, a lone surrogate.
    return f"duplicate key {key!r}"


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` refusing duplicate keys, which `json` would let the last win."""
    out = dict(pairs)
    if len(out) != len(pairs):
        raise DuplicateKey(_duplicate(_repeated(pairs)))
    return out


# The one context every Decimal the readers and the guard make or print goes through,
# never the caller's (whose `getcontext().prec = 2` turned a judged 499 into a paid
# 5.0E+2): precise enough to hold any number a text can write, and trapping every signal,
# so that nothing is rounded, clamped or made NaN, and what cannot be held exactly raises
# instead. A constant: only its flags change (as a trap raises), and nothing reads them.
EXACT = Context(
    prec=MAX_PREC,
    Emax=MAX_EMAX,
    Emin=MIN_EMIN,
    capitals=1,
    clamp=0,
    traps=[
        Clamped,
        DivisionByZero,
        FloatOperation,
        Inexact,
        InvalidOperation,
        Overflow,
        Rounded,
        Subnormal,
        Underflow,
    ],
)


# -- exact decimals out ------------------------------------------------------------------------


def number(value: Decimal) -> str:
    """The JSON number that is `value` exactly, never through a float: its fewest digits
    laid out as Python writes a float (`500.0`, `275.5`, `1e+16`, `1.5e-05`), so a decimal
    that a float holds is written as that float always was, and any other keeps all its
    digits (`1e+5000`). ValueError for NaN and Infinity, which JSON cannot say."""
    if not value.is_finite():
        raise ValueError(f"{value} is not a JSON number")
    sign, digits, _ = value.as_tuple()
    minus = "-" if sign else ""
    figures = "".join(map(str, digits)).rstrip("0")
    if not figures:  # zero, written as a float's zero
        return f"{minus}0.0"
    point = value.adjusted() + 1  # where the point falls among `figures`
    if -4 < point <= 16:
        if point <= 0:
            return f"{minus}0.{'0' * -point}{figures}"
        if point >= len(figures):
            return f"{minus}{figures}{'0' * (point - len(figures))}.0"
        return f"{minus}{figures[:point]}.{figures[point:]}"
    mantissa = figures[0] + (f".{figures[1:]}" if len(figures) > 1 else "")
    return f"{minus}{mantissa}e{'-' if point < 1 else '+'}{abs(point - 1):02d}"


def dumps(
    value: Any,
    *,
    sort_keys: bool = False,
    ascii: bool = False,
    indent: int | None = None,
    decimal: Callable[[Decimal], str] = number,
    quote: Callable[[str], str] | None = None,
) -> str:
    """`json.dumps(value, sort_keys=..., ensure_ascii=ascii, indent=...)` with each Decimal
    as its exact `number`; a tuple is a list. On one line (`indent` None) the separators
    are `, ` and `: `, as `json.dumps` writes. `decimal` and `quote`: another exact
    spelling of a decimal (`str`: as it was read, `500.00`) or of a string."""
    if quote is None:
        quote = encode_basestring_ascii if ascii else encode_basestring

    def key(k: Any) -> str:
        return quote(k if type(k) is str else json.dumps(k))

    def out(v: Any, depth: int) -> str:
        kind = type(v)
        if kind is Decimal:
            return decimal(v)
        if kind is str:
            return quote(v)
        if kind is not dict and kind is not list and kind is not tuple:
            return json.dumps(v, ensure_ascii=ascii)
        if not v:
            return "{}" if kind is dict else "[]"
        if indent is None:
            sep, head, tail = ", ", "", ""
        else:
            sep = ",\n" + " " * (indent * (depth + 1))
            head, tail = sep[1:], "\n" + " " * (indent * depth)
        if kind is dict:
            pairs = sorted(v.items()) if sort_keys else v.items()
            inner = sep.join(f"{key(k)}: {out(x, depth + 1)}" for k, x in pairs)
            return f"{{{head}{inner}{tail}}}"
        return f"[{head}{sep.join(out(x, depth + 1) for x in v)}{tail}]"

    return out(value, 0)


# A log's arguments nest no deeper than this; beyond, a marker stands for the rest.
PLAIN_DEPTH = 32


def plain(value: Any, depth: int = 0) -> Any:
    """`value` as plain JSON values for a log that `json` writes: each Decimal as the
    float whose JSON text is its `number`, or, past what a float holds, its own text as a
    string (a reader of the log would round a number); keys as text; lists for tuples;
    anything JSON has no value for as `<type>`; nesting past `PLAIN_DEPTH` as
    `<nested too deep>`."""
    if depth > PLAIN_DEPTH:
        return "<nested too deep>"
    kind = type(value)
    if kind is Decimal:
        if not value.is_finite():
            return str(value)
        text = number(value)
        as_float = float(text)
        return as_float if repr(as_float) == text else str(value)
    if kind is dict:
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [plain(v, depth + 1) for v in value]
    if value is None or kind in (str, int, float, bool):
        return value
    return f"<{kind.__name__}>"


# -- the strict reader ----------------------------------------------------------------------

# Passports and corpus lines nest a handful of levels; a fixed bound (far below the
# interpreter's recursion limit) gives the same answer wherever the file is read.
MAX_DEPTH = 32


class DocumentError(VaultError):
    """A JSON or TOML document that cannot be read: `field: problem` in words.

    `line` is the line of the document when known; `where` puts it after the source.
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line

    def where(self, source: str) -> str:
        return source if self.line is None else f"{source}:{self.line}"


class Problem(ValueError):
    """What `Reader.loads` found first, in words (`problem`) and as a kind, so each caller
    can say it as its own messages do: `syntax` (with the decoder's `column`),
    `duplicate`, `constant`, `range`, `depth` or `utf8`."""

    def __init__(self, kind: str, problem: str, column: int = 0) -> None:
        super().__init__(problem)
        self.kind, self.problem, self.column = kind, problem, column


class _Bad(NamedTuple):
    """Stands in the parsed tree for a value that cannot be used, so its field is named;
    `key` is the key an object repeats, which is where its line is."""

    problem: str
    key: str | None = None


def _integer(text: str) -> int | _Bad:
    try:
        return int(text)
    except ValueError:  # more digits than `int` reads from text
        return _Bad("number out of range")


def _constant(name: str) -> _Bad:
    return _Bad(f"{name} is not valid JSON")


def _marked_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any] | _Bad:
    out = dict(pairs)
    if len(out) != len(pairs):
        key = _repeated(pairs)
        return _Bad(_duplicate(key), key)
    return out


def _raise_constant(name: str) -> Any:
    raise Problem("constant", f"{name} is not valid JSON")


class Reader:
    """The strict JSON reader, in one of the few ways callers need it: what a JSON float
    becomes (`Decimal`, exact, or `float`), and how deep a document may nest (`depth`;
    None: only the interpreter's bound). Numbers `int` cannot read, `NaN`/`Infinity`
    and duplicate keys are refused, and text is UTF-8.

    `read` is for documents: the first problem in document order (an object before what
    it holds), with its field and line, as a `DocumentError`. `loads` is for the hot
    path: it stops at the first problem it meets, a `Problem`, and says nothing of where.
    """

    def __init__(self, *, floats: Callable[[str], Any], depth: int | None) -> None:
        self.depth = depth

        def marked(text: str) -> Any:
            try:
                return floats(text)
            except ArithmeticError:  # an exponent beyond what Decimal can hold
                return _Bad("number out of range")

        self._marking = json.JSONDecoder(
            parse_float=marked,
            parse_int=_integer,
            parse_constant=_constant,
            object_pairs_hook=_marked_keys,
        )
        self._fast = json.JSONDecoder(
            parse_float=floats, parse_constant=_raise_constant, object_pairs_hook=unique_keys
        )
        # The decoder's own scanner (the very one `decode` calls); typeshed leaves it out.
        self._scan: Callable[[str, int], tuple[Any, int]] = self._fast.scan_once  # type: ignore[attr-defined]
        self._too_deep = f"nested too deeply (more than {depth} levels)"

    def loads(self, text: str | bytes) -> Any:
        """The value of `text`, or the first `Problem` met."""
        try:
            value = self._decode(text.decode() if isinstance(text, bytes) else text)
        except Problem:
            raise
        except DuplicateKey as exc:
            raise Problem("duplicate", str(exc)) from None
        except ArithmeticError:  # a number Decimal cannot hold (an exponent out of range)
            raise Problem("range", "number out of range") from None
        except RecursionError:
            raise Problem("depth", "nested too deeply") from None
        except json.JSONDecodeError as exc:
            problem = exc.msg.removesuffix(" at")  # "Invalid control character at"
            raise Problem("syntax", problem, exc.colno) from None
        except ValueError as exc:  # bytes that are not UTF-8; an integer of too many digits
            if isinstance(exc, UnicodeDecodeError):
                raise Problem("utf8", "not UTF-8") from None
            raise Problem("range", "number out of range") from None
        if self.depth is not None and _depth(value) > self.depth:
            raise Problem("depth", self._too_deep)
        return value

    def _decode(self, text: str) -> Any:
        """`decode(text)`, with the scanner alone when the value starts the text and only
        JSON whitespace follows it (a line's `\r`), which skips two regex matches; else
        the decoder again, for its rules on leading whitespace and its words for what is
        wrong (all else the scanner raises as the decoder would, since it calls it)."""
        try:
            value, end = self._scan(text, 0)
        except StopIteration:  # no value at the very start: leading whitespace, or none
            return self._fast.decode(text)
        if end != len(text) and text[end:].strip(" \t\n\r"):
            return self._fast.decode(text)  # "Extra data", in the decoder's words
        return value

    def read(self, document: str | bytes) -> Any:
        """The value of a document, or a `DocumentError` naming the first problem in
        document order, its field, and its line."""
        text = utf8(document) if isinstance(document, bytes) else document
        try:
            value = self._marking.decode(text)
        except json.JSONDecodeError as exc:
            problem = exc.msg.removesuffix(" at")  # "Unterminated string starting at"
            raise DocumentError(
                f"invalid JSON: {problem} at column {exc.colno}", exc.lineno
            ) from None
        except RecursionError:
            raise DocumentError(self._too_deep) from None
        # Walk the tree in document order, without recursion: the first marked value
        # names its field; nesting beyond the bound is refused before it is walked.
        stack: list[tuple[Any, tuple[int | str, ...]]] = [(value, ())]
        while stack:
            node, loc = stack.pop()
            kind = type(node)
            if kind is _Bad:
                at = loc if node.key is None else (*loc, node.key)
                raise DocumentError(f"{field_path(loc)}: {node.problem}", line_at(text, at))
            if kind is not dict and kind is not list:
                continue
            if self.depth is not None and len(loc) >= self.depth:
                raise DocumentError(self._too_deep)
            children = node.items() if kind is dict else enumerate(node)
            stack.extend(reversed([(child, (*loc, key)) for key, child in children]))
        return value


def _depth(value: Any) -> int:
    """How deep `value` nests (a scalar 0, `[]` 1), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if type(node) is dict or type(node) is list:
            deepest = max(deepest, depth)
            stack.extend(
                (child, depth + 1) for child in (node.values() if type(node) is dict else node)
            )
    return deepest


# Documents a person writes (passports, corpus lines): exact decimals, a shallow bound.
DOCUMENTS = Reader(floats=EXACT.create_decimal, depth=MAX_DEPTH)
# What pytest-vault writes and reads back (results metadata and columns, cache entries):
# floats as floats; a model's nested arguments are kept whole, so no bound of ours.
DATA = Reader(floats=float, depth=None)
# A tool call's arguments, as the guard reads them: exact decimals, on the hot path.
ARGUMENTS = Reader(floats=EXACT.create_decimal, depth=None)


def utf8(data: bytes) -> str:
    """Strict UTF-8 text, or a `DocumentError` naming the line and column of the bad byte.

    A leading byte order mark (some editors write one) is not part of the text.
    """
    start = 3 if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = start + exc.start
        line_start = data.rfind(b"\n", 0, bad) + 1
        raise DocumentError(
            f"not valid UTF-8: byte 0x{data[bad]:02x} at column {bad - line_start + 1}",
            data.count(b"\n", 0, bad) + 1,
        ) from None


def read_json_file(path: Path, error: Callable[[str], Exception]) -> tuple[Any, str, bytes]:
    """A JSON file's value, its text and its bytes (for a digest of what was parsed), or
    `error` of one line naming the file (and the line, where the text is at fault)."""
    try:
        data = path.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise error(f"{path}: cannot read: {reason(exc)}") from None
    try:
        text = utf8(data)
        return read_json(text), text, data
    except DocumentError as exc:
        raise error(f"{exc.where(str(path))}: {exc}") from None


def read_json(document: str | bytes) -> Any:
    """A document read strictly (`DOCUMENTS.read`): exact decimals; duplicate keys, NaN,
    numbers out of range and deep nesting refused, each a `DocumentError` with its field."""
    return DOCUMENTS.read(document)


# -- the lossless reader ---------------------------------------------------------------------
#
# For text another program wrote that must be told exactly (a provider's response body): the
# tree keeps what a plain `json.loads` would lose, a number's text (`500.0000000000000001` is
# not 500.0) and an object's keys when one appears twice (which value was meant cannot be
# known), so a caller can refuse the ambiguity where it matters, or pass the text on.

LOSSLESS_DEPTH = 64  # a fixed bound: the same answer however deep the caller's stack is
_LOSSLESS_TOO_DEEP = f"nested too deeply (more than {LOSSLESS_DEPTH} levels)"


class _Ambiguous(Exception):
    """A tool input that a dict of Python values would not say exactly."""


class Number:
    """A JSON number that is not a plain integer, as written."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def exact(self) -> float:
        """The float, when the guard would read it (by its repr) as the text says."""
        value = float(self.text)  # NaN, Infinity and overflow come out not finite
        try:
            if math.isfinite(value) and EXACT.create_decimal(repr(value)) == EXACT.create_decimal(
                self.text
            ):
                return value
        except ArithmeticError:  # an exponent beyond what Decimal holds
            pass
        raise _Ambiguous


class Pairs:
    """A JSON object with a key twice: its pairs, in order."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs

    def duplicate(self) -> str:
        seen: set[str] = set()
        for key, _ in self.pairs:
            if key in seen:
                break
            seen.add(key)
        return key


def _lossless_object(pairs: list[tuple[str, Any]]) -> dict[str, Any] | Pairs:
    out = dict(pairs)
    return out if len(out) == len(pairs) else Pairs(pairs)


def _lossless_integer(text: str) -> int | Number:
    try:
        return int(text)
    except ValueError:  # more digits than int() reads from text: kept as written
        return Number(text)


_LOSSLESS = json.JSONDecoder(
    object_pairs_hook=_lossless_object,
    parse_float=Number,
    parse_int=_lossless_integer,
    parse_constant=Number,
)


def _exact_value(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind is dict or kind is list:
        if depth >= LOSSLESS_DEPTH:
            raise ValueError(_LOSSLESS_TOO_DEEP)
        if kind is list:
            return [_exact_value(v, depth + 1) for v in value]
        return {k: _exact_value(v, depth + 1) for k, v in value.items()}
    if kind is Number:
        return value.exact()
    if kind is Pairs:
        raise _Ambiguous
    return value


def _lossless_text(value: Any, depth: int) -> str:
    """JSON text from the tree with every pair, duplicates too, and each number's digits
    as the model sent them (spacing and string escapes are `json.dumps`')."""
    kind = type(value)
    if kind is dict or kind is Pairs or kind is list:
        if depth >= LOSSLESS_DEPTH:
            raise ValueError(_LOSSLESS_TOO_DEEP)
        if kind is list:
            return "[" + ", ".join(_lossless_text(v, depth + 1) for v in value) + "]"
        pairs = value.items() if kind is dict else value.pairs
        return (
            "{" + ", ".join(f"{_string(k)}: {_lossless_text(v, depth + 1)}" for k, v in pairs) + "}"
        )
    if kind is Number:
        return str(value.text)
    return _string(value)


def _string(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def exact_or_text(value: Any) -> dict[str, Any] | str:
    """A JSON object from `read_lossless`: a dict of plain values when it says exactly one
    thing, else its JSON text (with every pair, and each number as written)."""
    if type(value) is not dict and type(value) is not Pairs:
        raise ValueError("must be a JSON object")
    try:
        return _exact_value(value, 0)  # type: ignore[no-any-return]
    except _Ambiguous:
        return _lossless_text(value, 0)


def read_lossless(text: str) -> Any:
    """`text` read keeping each number's text (`Number`, but for plain integers) and every
    pair of an object that repeats a key (`Pairs`)."""
    return _LOSSLESS.decode(text)


# Where a field is written: json reads no positions, so the text is walked again with the
# decoder's own scanners for strings and values. Only after it has been read: it never
# fails, and a document that could not be read has its line from the decoder already.
_scan_string: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_scan_value: Callable[[str, int], tuple[Any, int]] = DOCUMENTS._marking.scan_once  # type: ignore[attr-defined]
_INDEX = re.compile(r"0|[1-9][0-9]*")  # an array index in a JSON pointer


def line_at(text: str, loc: Sequence[int | str]) -> int:
    """The line of `text`, a JSON document already read, where the value at `loc` is
    written: a key by its last occurrence (the one a reader keeps), an item by its index
    (an int, or a JSON pointer's digits). Where `loc` goes past what the text holds (a
    field that is missing), the line of the deepest value it reaches."""
    return Lines(text)(loc)


class Lines:
    """`line_at` for many places of one document: each container's entries are found
    once, and lines are counted by a search, so a lint of 20,000 payees is not quadratic
    (every finding walked the list from its start, and counted lines from the top)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._entries: dict[int, dict[int | str, tuple[int, int]]] = {}
        self._newlines: list[int] | None = None

    def __call__(self, loc: Sequence[int | str]) -> int:
        at = mark = _blank(self.text, 0)
        for part in loc:
            found = self._entry(at, part)
            if found is None:
                break
            mark, at = found
        if self._newlines is None:
            self._newlines = [m.start() for m in re.finditer("\n", self.text)]
        return bisect.bisect_left(self._newlines, mark) + 1

    def _entry(self, at: int, part: int | str) -> tuple[int, int] | None:
        """Where the entry `part` of the container at `at` starts and where its value
        does, or None when it holds no such entry."""
        kind = self.text[at : at + 1]
        key: int | str | None
        if kind == "{":
            key = part if isinstance(part, str) else None
        elif kind == "[":
            key = part if isinstance(part, int) else int(part) if _INDEX.fullmatch(part) else None
        else:
            return None
        if key is None:
            return None
        table = self._entries.get(at)
        if table is None:
            table = self._entries[at] = _entries(self.text, at)
        return table.get(key)


def _entries(text: str, at: int) -> dict[int | str, tuple[int, int]]:
    """Every entry of the container at `at`: a key (its last occurrence) or an index, to
    where the entry starts and where its value does."""
    out: dict[int | str, tuple[int, int]] = {}
    pos = _blank(text, at + 1)
    if text[at] == "{":
        while text[pos] == '"':
            key, end = _scan_string(text, pos + 1)
            value = _blank(text, _blank(text, end) + 1)  # past the colon
            out[key] = (pos, value)
            pos = _after(text, value)
        return out
    index = 0
    while text[pos] != "]":
        out[index] = (pos, pos)
        index += 1
        pos = _after(text, pos)
    return out


def _after(text: str, value: int) -> int:
    """Past the value at `value` and a comma after it: the next entry, or the bracket."""
    pos = _blank(text, _scan_value(text, value)[1])
    return _blank(text, pos + 1) if text[pos] == "," else pos


def _blank(text: str, pos: int) -> int:
    """Past JSON's whitespace (only its four characters) at `pos`."""
    while pos < len(text) and text[pos] in " \t\n\r":
        pos += 1
    return pos
