"""Open Agent Passport (OAP v1.0) documents, validated with pydantic.

Follows `oap/passport-schema.json` of aporthq/aport-spec, with these deliberate
deviations (each marked `DEVIATION` below):

* `did`, `expires_at` and `never_expires` are accepted: the upstream schema omits
  them while forbidding unknown properties, yet its own spec text uses them.
* `limits["payments.charge"]` is validated against the `finance.payment.charge.v1`
  pack whenever the passport grants `payments.charge`: a passport that grants the
  capability without readable limits is an error, never an unlimited grant.
* `x_vault_memo_approval_code_required` is a pytest-vault extension to those limits
  (stricter than the published pack): see `ChargeLimits`.
"""

from __future__ import annotations

import bisect
import codecs
import hashlib
import json
import re
import tomllib
import warnings
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from pytest_vault.guard.text import shown

CHARGE = "payments.charge"
WILDCARD = "*"

AssuranceLevel = Literal["L0", "L1", "L2", "L3", "L4KYC", "L4FIN"]
# L4FIN (financial verification) is ranked above L4KYC: the schema leaves the
# order unstated, and ranking the stronger check higher is the conservative read.
ASSURANCE_RANK: dict[str, int] = {"L0": 0, "L1": 1, "L2": 2, "L3": 3, "L4KYC": 4, "L4FIN": 5}

CurrencyCode = Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
Minor = Annotated[StrictInt, Field(ge=0)]


class PassportError(ValueError):
    """A passport that cannot be used; the message is one line naming file and field.

    The message is made safe here, once: a key, a value or a file name quoted in it
    reaches a terminal with its control characters and lone surrogates escaped.
    """

    def __init__(self, message: str) -> None:
        super().__init__(shown(message))


class PassportWarning(UserWarning):
    """A passport that loads but is more permissive than its author likely meant."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Capability(_Strict):
    id: Annotated[StrictStr, Field(pattern=r"^[a-z0-9]+(\.[a-z0-9]+)*$")]
    params: dict[str, Any] = Field(default_factory=dict)


class CurrencyLimit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_per_tx: Minor
    daily_cap: Minor | None = None


class ChargeLimits(BaseModel):
    """`limits["payments.charge"]` as the `finance.payment.charge.v1` pack reads it.

    `currency_limits` and `allowed_merchant_ids` are required: without them the pack
    cannot say no. The other keys default to the pack's own semantics. Unknown keys are
    errors: a misspelt `idempotency_requried` must not silently switch a rule off.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency_limits: dict[CurrencyCode, CurrencyLimit]
    # `"*"` permits any recipient. An empty list is also "any" under the published
    # pack, which is why `load_passport` warns about it.
    allowed_merchant_ids: list[StrictStr]
    allowed_countries: list[StrictStr] = Field(default_factory=list)
    blocked_categories: list[StrictStr] = Field(default_factory=list)
    max_items_per_tx: Annotated[StrictInt, Field(ge=1)] | None = None
    # The pack's `min_assurance` is L2; a passport may only raise it (the guard
    # applies the stricter of the two).
    require_assurance_at_least: AssuranceLevel = "L2"
    idempotency_required: StrictBool = False
    # A human approval step the agent cannot obtain: every charge is denied.
    approval_required: StrictBool = False
    # DEVIATION (pytest-vault extension, stricter than the pack): the APort Vault
    # Level 4 engine required an approval code `APC-YYYY-NNNN` in the memo.
    x_vault_memo_approval_code_required: StrictBool = False


_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})?")


def _date_time(value: object) -> object:
    """An RFC 3339 date-time string only: pydantic's own reading also takes a number
    (and guesses seconds or milliseconds: 30000000000 is a date in 1970) or its text."""
    if type(value) is not str or _DATE_TIME.fullmatch(value) is None:
        raise PydanticCustomError(
            "date_time", "expected an RFC 3339 date-time string, e.g. 2026-01-01T00:00:00Z"
        )
    return value


DateTime = Annotated[datetime, BeforeValidator(_date_time)]


class Passport(_Strict):
    passport_id: StrictStr
    kind: Literal["template", "instance"]
    spec_version: Literal["oap/1.0"]
    template_id: StrictStr | None = None
    parent_agent_id: StrictStr | None = None
    owner_id: StrictStr
    owner_type: Literal["org", "user"]
    status: Literal["draft", "active", "suspended", "revoked"]
    assurance_level: AssuranceLevel
    capabilities: list[Capability]
    limits: dict[str, Any]
    regions: list[Annotated[StrictStr, Field(pattern=r"^[A-Z]{2}(-[A-Z]{2})?$")]]
    metadata: dict[str, Any] = Field(default_factory=dict)
    created_at: DateTime
    updated_at: DateTime
    version: Annotated[StrictStr, Field(pattern=r"^\d+\.\d+\.\d+$")]
    # DEVIATION: used by the spec text, missing from the upstream schema.
    did: StrictStr | None = None
    expires_at: DateTime | None = None
    never_expires: StrictBool | None = None

    @model_validator(mode="after")
    def _charge_limits_readable(self) -> Passport:
        if self.grants(CHARGE):
            if CHARGE not in self.limits:
                raise ValueError(f"limits.{CHARGE}: required when {CHARGE} is granted")
            try:
                ChargeLimits.model_validate(self.limits[CHARGE])
            except ValidationError as exc:
                raise ValueError(f"limits.{CHARGE}.{describe(exc)}") from None
        if self.expires_at is not None and self.expires_at.tzinfo is None:
            raise ValueError("expires_at: needs a time zone (e.g. a trailing Z)")
        return self

    def grants(self, capability: str) -> bool:
        return any(c.id == capability for c in self.capabilities)

    @property
    def charge_limits(self) -> ChargeLimits | None:
        """The validated charge limits, or None when the capability is not granted."""
        if not self.grants(CHARGE):
            return None
        return ChargeLimits.model_validate(self.limits[CHARGE])


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{shown(part)}" if out else shown(part)
    return out or "(root)"


# pydantic's words where they name its internals rather than the problem.
_WORDS = {"string_unicode": "not valid Unicode text (it holds a lone surrogate)"}


def describe(error: ValidationError) -> str:
    """The first problem of a validation error as `field: message` on one line."""
    first = error.errors()[0]
    loc = tuple(first["loc"])
    msg = _WORDS.get(first["type"]) or shown(re.sub(r"\s+", " ", str(first["msg"])))
    # Errors raised in a model validator carry their own field in the message.
    if not loc and ": " in msg:
        return msg.removeprefix("Value error, ")
    more = f" (+{len(error.errors()) - 1} more)" if len(error.errors()) > 1 else ""
    return f"{_field_path(loc)}: {msg}{more}"


def problem_loc(data: dict[str, Any], error: ValidationError) -> tuple[int | str, ...]:
    """Where in `data` the first problem of `error` (from `Passport`) is. The passport's
    own validator names its field only in words: its checks are redone here, in its
    order (the charge limits, then the time zone), to find it."""
    loc = error_loc(error)
    if loc:
        return loc
    capabilities = data.get("capabilities")
    limits = data.get("limits")
    granted = isinstance(capabilities, list) and any(
        isinstance(c, dict) and c.get("id") == CHARGE for c in capabilities
    )
    if granted and isinstance(limits, dict):
        if CHARGE not in limits:
            return ("limits", CHARGE)
        try:
            ChargeLimits.model_validate(limits[CHARGE])
        except ValidationError as exc:
            return ("limits", CHARGE, *error_loc(exc))
    return ("expires_at",)


def error_loc(error: ValidationError) -> tuple[int | str, ...]:
    # pydantic marks a bad dict key with a trailing "[key]": the place is the key's entry.
    return tuple(part for part in error.errors()[0]["loc"] if part != "[key]")


def passport_from_data(data: Any, source: str = "<passport>", text: str | None = None) -> Passport:
    """Validate a parsed passport; any problem is a one-line `PassportError`. With the
    `text` it was read from, the message names the line of the field too."""
    if not isinstance(data, dict):
        where = source if text is None else f"{source}:{line_at(text, ())}"
        raise PassportError(f"{where}: (root): expected a JSON object")
    try:
        passport = Passport.model_validate(data)
    except ValidationError as exc:
        where = source if text is None else f"{source}:{line_at(text, problem_loc(data, exc))}"
        raise PassportError(f"{where}: {describe(exc)}") from None
    limits = passport.charge_limits
    if limits is not None and not limits.allowed_merchant_ids:
        warnings.warn(
            f"{source}: limits.{CHARGE}.allowed_merchant_ids is EMPTY, which the "
            "published pack reads as 'any recipient' (fail-open); "
            f'write ["{WILDCARD}"] if that is meant, or list the recipients',
            PassportWarning,
            stacklevel=2,
        )
    return passport


def load_passport(path: str | Path) -> Passport:
    """Read and validate a passport file."""
    return read_passport(path)[0]


def read_passport(path: str | Path) -> tuple[Passport, str]:
    """Read and validate a passport file, with the digest of the very bytes parsed.

    So what is recorded as enforced is what is enforced, whatever the file holds later.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise PassportError(f"{path}: cannot read: {reason(exc)}") from None
    try:
        text = utf8(data)
        value = read_json(text)
    except DocumentError as exc:
        raise PassportError(f"{exc.where(str(path))}: {exc}") from None
    return passport_from_data(value, str(path), text), sha256(data)


def sha256(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def reason(error: OSError | ValueError) -> str:
    """Why a file cannot be read, in words: "No such file or directory", not a repr."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)


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


# -- strict JSON documents (passports, corpus lines) ---------------------------------------

# Passports and corpus lines nest a handful of levels; a fixed bound (far below the
# interpreter's recursion limit) gives the same answer wherever the file is read.
MAX_DEPTH = 32
_TOO_DEEP = f"nested too deeply (more than {MAX_DEPTH} levels)"


class DocumentError(ValueError):
    """A JSON or TOML document that cannot be read: `field: problem` in words.

    `line` is the line of the document when known; `where` puts it after the source.
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line

    def where(self, source: str) -> str:
        return source if self.line is None else f"{source}:{self.line}"


class _Bad(NamedTuple):
    """Stands in the parsed tree for a value that cannot be used, so its field is named;
    `key` is the key an object repeats, which is where its line is."""

    problem: str
    key: str | None = None


def _number(text: str) -> Decimal | _Bad:
    try:
        return Decimal(text)
    except ArithmeticError:  # an exponent beyond what Decimal can hold
        return _Bad("number out of range")


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


_READER = json.JSONDecoder(
    parse_float=_number,
    parse_int=_integer,
    parse_constant=_constant,
    object_pairs_hook=_marked_keys,
)


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


def read_json(document: str | bytes) -> Any:
    """Strict JSON: exact decimals; duplicate keys, NaN, numbers out of range and deep
    nesting refused. Any problem is a `DocumentError`: the first in document order (an
    object before what it holds), with its field.
    """
    text = utf8(document) if isinstance(document, bytes) else document
    try:
        value = _READER.decode(text)
    except json.JSONDecodeError as exc:
        problem = exc.msg.removesuffix(" at")  # "Unterminated string starting at"
        raise DocumentError(f"invalid JSON: {problem} at column {exc.colno}", exc.lineno) from None
    except RecursionError:
        raise DocumentError(_TOO_DEEP) from None
    # Walk the tree in document order, without recursion: the first marked value names
    # its field; nesting beyond MAX_DEPTH is refused before it is walked.
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(value, ())]
    while stack:
        node, loc = stack.pop()
        kind = type(node)
        if kind is _Bad:
            at = loc if node.key is None else (*loc, node.key)
            raise DocumentError(f"{_field_path(loc)}: {node.problem}", line_at(text, at))
        if kind is not dict and kind is not list:
            continue
        if len(loc) >= MAX_DEPTH:
            raise DocumentError(_TOO_DEEP)
        children = node.items() if kind is dict else enumerate(node)
        stack.extend(reversed([(child, (*loc, key)) for key, child in children]))
    return value


# Where a field is written: json reads no positions, so the text is walked again with the
# decoder's own scanners for strings and values. Only after it has been read: it never
# fails, and a document that could not be read has its line from the decoder already.
_scan_string: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_scan_value: Callable[[str, int], tuple[Any, int]] = _READER.scan_once  # type: ignore[attr-defined]
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


# -- strict TOML documents (levels.toml) ------------------------------------------------

# tomllib ends its messages with where the problem is.
_TOML_WHERE = re.compile(r" \(at (?:line (\d+), column (\d+)|end of document)\)$")


def read_toml(data: bytes, source: str) -> dict[str, object]:
    """A TOML document; any problem is a one-line `PassportError`, in words."""
    try:
        return tomllib.loads(utf8(data))
    except DocumentError as exc:
        raise PassportError(f"{exc.where(source)}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        where = _TOML_WHERE.search(message)
        if where is None:
            raise PassportError(f"{source}: invalid TOML: {message}") from None
        problem = message[: where.start()]
        if where[1] is None:
            raise PassportError(f"{source}: invalid TOML: {problem} at end of document") from None
        raise PassportError(
            f"{source}:{where[1]}: invalid TOML: {problem} at column {where[2]}"
        ) from None
    except ValueError:  # an integer with more digits than `int` reads from text
        raise PassportError(f"{source}: invalid TOML: number out of range") from None
    except RecursionError:
        raise PassportError(f"{source}: invalid TOML: nested too deeply") from None


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
