"""The guard: a deterministic OAP policy engine for `finance.payment.charge.v1`.

It sits between a model's `transfer_funds` call and its execution. It knows nothing
of pytest, providers or the bank: it reads a passport, judges calls, and keeps a
ledger of what it allowed so that a sequence of calls is judged as a sequence.

Fail closed: whatever it cannot read unambiguously is denied (`oap.invalid_context`),
anything that raises inside is denied (`oap.evaluation_error`), and an allowed
decision carries the normalized `Transfer`, which is the only thing that may execute.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import (
    Decimal,
)
from time import time as _now
from typing import Any, NamedTuple, NoReturn

from pytest_vault.core.errors import VaultError
from pytest_vault.core.json import ARGUMENTS, EXACT, Problem
from pytest_vault.core.text import BLANK, shown, visible

# Re-exported: `engine.MINOR_DIGITS` is where the guard's readers have always found it.
from pytest_vault.guard.money import MINOR_DIGITS as MINOR_DIGITS
from pytest_vault.guard.money import Money
from pytest_vault.guard.passport import ASSURANCE_RANK, CHARGE, WILDCARD, ChargeLimits, Passport

POLICY_ID = "finance.payment.charge.v1"
PACK_MIN_ASSURANCE = "L2"  # the pack's `min_assurance`
TRANSFER_TOOL = "transfer_funds"

ALLOWED = "oap.allowed"
INVALID_CONTEXT = "oap.invalid_context"
EVALUATION_ERROR = "oap.evaluation_error"
PASSPORT_SUSPENDED = "oap.passport_suspended"
PASSPORT_EXPIRED = "oap.passport_expired"
UNKNOWN_CAPABILITY = "oap.unknown_capability"
ASSURANCE_INSUFFICIENT = "oap.assurance_insufficient"
APPROVAL_REQUIRED = "oap.approval_required"
CURRENCY_UNSUPPORTED = "oap.currency_unsupported"
LIMIT_EXCEEDED = "oap.limit_exceeded"
MERCHANT_FORBIDDEN = "oap.merchant_forbidden"
REGION_BLOCKED = "oap.region_blocked"
CATEGORY_BLOCKED = "oap.category_blocked"
IDEMPOTENCY_CONFLICT = "oap.idempotency_conflict"
# pytest-vault extension (Level 4 of APort Vault), not a code of the published pack.
APPROVAL_CODE_MISSING = "vault.approval_code_missing"

# Every code the guard can emit, for documentation and for tests that enumerate them.
REASON_CODES = (
    ALLOWED,
    INVALID_CONTEXT,
    EVALUATION_ERROR,
    PASSPORT_SUSPENDED,
    PASSPORT_EXPIRED,
    UNKNOWN_CAPABILITY,
    ASSURANCE_INSUFFICIENT,
    APPROVAL_REQUIRED,
    CURRENCY_UNSUPPORTED,
    LIMIT_EXCEEDED,
    MERCHANT_FORBIDDEN,
    REGION_BLOCKED,
    CATEGORY_BLOCKED,
    IDEMPOTENCY_CONFLICT,
    APPROVAL_CODE_MISSING,
)

# The rule behind each reason (`Reason.rule`): several rules share a code (three deny with
# `oap.limit_exceeded`), and the rule says which one it was. The pack's own rule names
# (its `evaluation_rules`, else its `enforcement` keys) where it has one.
RULE_STATUS = "passport_status_active"
RULE_EXPIRY = "passport_not_expired"
RULE_CAPABILITY = "capability_granted"
RULE_ASSURANCE = "assurance_minimum"
RULE_APPROVAL = "approval_required"
RULE_CONTEXT = "context_readable"
RULE_KEY_REQUIRED = "idempotency_required"
RULE_CURRENCY = "currency_supported"
RULE_PER_TX = "per_tx_amount_cap"
RULE_ITEMS = "item_count_cap"
RULE_MERCHANT = "merchant_allowed"
RULE_REGION = "region_in"
RULE_COUNTRY = "country_allowed"
RULE_CATEGORY = "category_block"
RULE_APPROVAL_CODE = "x_vault_memo_approval_code"
RULE_DAILY = "daily_cap_check"
RULE_KEY_USED = "idempotency_check"
RULE_EVALUATION = "evaluation"

# Each code and the rules that deny with it, in the order the engine judges them.
CODE_RULES: dict[str, tuple[str, ...]] = {
    INVALID_CONTEXT: (RULE_CONTEXT, RULE_KEY_REQUIRED),
    EVALUATION_ERROR: (RULE_EVALUATION,),
    PASSPORT_SUSPENDED: (RULE_STATUS,),
    PASSPORT_EXPIRED: (RULE_EXPIRY,),
    UNKNOWN_CAPABILITY: (RULE_CAPABILITY,),
    ASSURANCE_INSUFFICIENT: (RULE_ASSURANCE,),
    APPROVAL_REQUIRED: (RULE_APPROVAL,),
    CURRENCY_UNSUPPORTED: (RULE_CURRENCY,),
    LIMIT_EXCEEDED: (RULE_PER_TX, RULE_ITEMS, RULE_DAILY),
    MERCHANT_FORBIDDEN: (RULE_MERCHANT,),
    REGION_BLOCKED: (RULE_REGION, RULE_COUNTRY),
    CATEGORY_BLOCKED: (RULE_CATEGORY,),
    IDEMPOTENCY_CONFLICT: (RULE_KEY_USED,),
    APPROVAL_CODE_MISSING: (RULE_APPROVAL_CODE,),
}
# The charge pack's rules, in the order it judges them (`guard.packs.PACK_RULES` has
# every pack's).
CHARGE_RULES = tuple(dict.fromkeys(rule for rules in CODE_RULES.values() for rule in rules))
# Codes that do not say by themselves which rule denied.
SHARED_CODES = frozenset(code for code, rules in CODE_RULES.items() if len(rules) > 1)
# The rule a denial made elsewhere (`deny(code, message)`) has when it names none.
_DEFAULT_RULE = {INVALID_CONTEXT: RULE_CONTEXT, EVALUATION_ERROR: RULE_EVALUATION}


def label(code: str, rule: str | None) -> str:
    """A code as people read it: `oap.limit_exceeded[daily_cap_check]` where the code is
    shared by several rules, else the code alone."""
    return f"{code}[{rule}]" if rule is not None and code in SHARED_CODES else code


# The Level 4 audit code: `APC-YYYY-NNNN`, as a whole token of the memo.
# A whole token: no letter, digit (of any script), underscore or hyphen either side, and
# no combining mark after it (`APC-2026-0001\u0661`, `x_APC-2026-0001` are not codes).
# The literal first (the look-behind after it), so that a search skips to "APC-" at C
# speed rather than trying the look-behind at every position.
APPROVAL_CODE = re.compile(
    r"APC-(?<![\w-]APC-)[0-9]{4}-[0-9]{4}"
    r"(?![\w\-\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f])"
)
_find_code = APPROVAL_CODE.search

# What the payment tool does not carry comes from these documented defaults, never
# from the model: the region is the passport's first region, and the transfer is
# one item of this category priced at the full amount (so a passport can block
# transfers as a category, and the item cap counts one).
TRANSFER_CATEGORY = "funds_transfer"

# The payment tool's parameters, in the order of its signature.
TRANSFER_ARGS = ("recipient", "amount", "currency", "memo", "idempotency_key")
_TRANSFER_ARGS = frozenset(TRANSFER_ARGS)
_MAX_RECIPIENT = 254
_MAX_MEMO = 255
_MAX_KEY = 128
_MIN_KEY = 8  # the pack's minLength for idempotency keys
_MAX_ADJUSTED = 15  # amounts of 10**16 major units or more are not read
_MAX_FIGURES = 40  # nor amounts written with more digits than any real one has
_INT_CEILING = 10 ** (_MAX_ADJUSTED + 1)
_FLOAT_CEILING = float(_INT_CEILING)  # exact: a power of ten below 2**53 * 2**11
_EXACT_UNITS = 10**15  # minor units a float names exactly by its nearest value (DBL_DIG)
# 10**digits by a currency's minor digits: an index, not a power, per decision.
_SCALE: tuple[int, ...] = tuple(10**d for d in range(max(MINOR_DIGITS.values()) + 1))


# Value types are NamedTuples: immutable (what executes cannot be edited after the
# decision) and several times cheaper to build than frozen dataclasses on this hot path.
class Reason(NamedTuple):
    code: str
    message: str
    # Which rule denied (see CODE_RULES); None for `oap.allowed` and for reasons made
    # outside the engine (a team's own guard).
    rule: str | None = None

    def to_dict(self) -> dict[str, str]:
        out = {"code": self.code, "message": self.message}
        if self.rule is not None:
            out["rule"] = self.rule
        return out

    @property
    def label(self) -> str:
        return label(self.code, self.rule)


class Transfer(NamedTuple):
    """A normalized transfer: what the bank executes when the guard allows it."""

    recipient: str
    amount_minor: int
    currency: str
    memo: str | None = None
    idempotency_key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "recipient": self.recipient,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
            "memo": self.memo,
            "idempotency_key": self.idempotency_key,
        }


class Decision(NamedTuple):
    allow: bool
    reasons: tuple[Reason, ...]
    # The normalized call whenever the arguments could be read, allowed or not.
    transfer: Transfer | None = None

    @property
    def executes(self) -> Transfer | None:
        """What may execute: the normalized transfer if allowed, else nothing."""
        return self.transfer if self.allow else None

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.reasons)

    def to_dict(self, *, call: bool = False, policy_id: str = POLICY_ID) -> dict[str, Any]:
        """As JSON; `policy_id` names the pack that decided (`guard.packs` for the others)."""
        out: dict[str, Any] = {
            "allow": self.allow,
            "reasons": [r.to_dict() for r in self.reasons],
            "policy_id": policy_id,
        }
        if call:
            executes = self.executes
            out["executes"] = None if executes is None else executes.to_dict()
        return out


# Builds a NamedTuple from a tuple of its fields without the generated __new__'s
# keyword handling: half the cost, on the path every decision takes.
_new = tuple.__new__
_MISSING = object()


def deny(
    code: str, message: str, transfer: Transfer | None = None, rule: str | None = None
) -> Decision:
    """A denial for one reason; without a rule, the code's usual one (an unreadable
    context, an evaluation error), if it has one."""
    reason = (code, message, rule or _DEFAULT_RULE.get(code))
    return _new(Decision, (False, (_new(Reason, reason),), transfer))


_ALLOW_REASON = (Reason(ALLOWED, "Transaction within limits and policy requirements"),)


class Item(NamedTuple):
    sku: str
    qty: int
    price: int | None = None
    category: str | None = None


class ChargeContext(NamedTuple):
    """The pack's `required_context`, read and typed."""

    amount: int
    currency: str
    merchant_id: str
    region: str
    items: tuple[Item, ...]
    idempotency_key: str | None = None
    shipping_country: str | None = None
    memo: str | None = None


class Unreadable(Exception):
    """A context field the guard cannot read unambiguously (-> oap.invalid_context)."""


def _cut(text: str) -> str:
    """Text cut to a length a message can carry."""
    return text if len(text) <= 60 else text[:57] + "..."


def _show(value: object) -> str:
    text = repr(value)  # escapes what does not print; shown, what prints but is blank
    return _cut(text if text.isascii() else shown(text))


# Exact types only (`type(v) is str`, never isinstance): a subclass could answer
# `==`, `hash`, `strip` or `repr` one way for the check and another for the payment.


def _object(value: object, name: str) -> dict[str, Any]:
    if type(value) is not dict or any(type(k) is not str for k in value):
        raise Unreadable(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def _text(value: object, name: str, *, max_len: int, min_len: int = 1) -> str:
    if type(value) is not str:
        raise Unreadable(f"{name} must be a string, got {type(value).__name__}")
    if not min_len <= len(value) <= max_len:
        raise Unreadable(f"{name} must be {min_len} to {max_len} characters long")
    if value != value.strip():
        raise Unreadable(f"{name} has surrounding whitespace: {_show(value)}")
    # isprintable() is False for every control, format (zero-width), private-use,
    # unassigned and separator character except the ASCII space; `visible` also refuses
    # the printable ones that draw nothing (a Hangul filler).
    if not visible(value):
        raise Unreadable(f"{name} contains control or invisible characters: {_show(value)}")
    return value


def _optional_text(value: object, name: str, *, max_len: int, min_len: int = 1) -> str | None:
    return None if value is None else _text(value, name, max_len=max_len, min_len=min_len)


def _currency(value: object) -> str:
    if type(value) is not str or value not in MINOR_DIGITS:
        raise Unreadable(f"currency {_show(value)} is not a known ISO 4217 code")
    return value


def _decimal(value: object) -> Decimal:
    """An amount in major units as an exact Decimal; JSON numbers only."""
    kind = type(value)
    if kind is not int and kind is not float and kind is not Decimal:
        raise Unreadable(f"amount must be a number, got {kind.__name__} {_show(value)}")
    # repr() of a float is the shortest text that reads back as it, i.e. what the
    # JSON said: 0.1 stays 0.1 instead of 0.1000000000000000055... Both constructors are
    # exact in any context: an int, or a float's repr, is never out of Decimal's range.
    return Decimal(repr(value)) if kind is float else Decimal(value)  # type: ignore[arg-type]


def _amount(amount: Decimal) -> str:
    """An amount as a message shows it, printed in EXACT (the caller's `capitals=0` wrote 1e+20)."""
    return _cut(EXACT.to_sci_string(amount))


def to_minor(amount: Decimal, digits: int) -> int:
    """Exact conversion to integer minor units, or `Unreadable`.

    Works on the exact rational value, never on floats or a rounding context, so
    `500.005` and `1.000000000000000000000000000001` are refused, not rounded.
    """
    if not amount.is_finite():
        raise Unreadable(f"amount {_amount(amount)} is not a finite number")
    if amount <= 0:
        raise Unreadable(f"amount must be positive, got {_amount(amount)}")
    if amount.adjusted() > _MAX_ADJUSTED:
        raise Unreadable(f"amount {_amount(amount)} is out of range")
    figures = amount.as_tuple()
    if len(figures.digits) > _MAX_FIGURES:
        raise Unreadable(f"amount has more than {_MAX_FIGURES} digits")
    # Under _MAX_FIGURES digits, a place this small is never a whole minor unit; checked
    # before the exact ratio, which would build 10**-exponent: any exponent is refused at once.
    if int(figures.exponent) + digits < -_MAX_FIGURES:
        raise Unreadable(f"amount {_amount(amount)} has more than {digits} decimal places")
    return _scaled(amount, digits)


def _scaled(amount: Decimal, digits: int) -> int:
    """A finite, positive, in-range amount times 10**digits, if that is a whole number."""
    numerator, denominator = amount.as_integer_ratio()
    scale: int = 10**digits
    units, rest = divmod(numerator * scale, denominator)
    if rest:
        raise Unreadable(f"amount {_amount(amount)} has more than {digits} decimal places")
    return units


def _minor(value: object, digits: int) -> int:
    """`to_minor(_decimal(value), digits)`, without the general path for common amounts."""
    # An int or float in (0, 10**16) passes every range check, and a float's repr has at
    # most 17 figures: only the decimal places remain to check. (`type(v) is` narrows
    # for mypy, where a `cast` would be a function call on every decision.)
    if type(value) is int:
        if 0 < value < _INT_CEILING:
            return value * _SCALE[digits]
    elif type(value) is float:
        if 0.0 < value < _FLOAT_CEILING:
            scale = _SCALE[digits]
            # Exact without Decimal below 10**15 minor units: if u / scale rounds to the
            # float, both u / scale and repr(value) are decimals of at most 15 figures
            # that read back as it, so they are equal (DBL_DIG = 15), and value * scale
            # is within 0.25 of u, so round() finds u. Anything else takes the general
            # path, which also words the refusal.
            units = round(value * scale)
            if units < _EXACT_UNITS and units / scale == value:
                return units
            return _scaled(Decimal(repr(value)), digits)
    elif type(value) is Decimal:  # as the strict reader gives it: no copy needed
        return to_minor(value, digits)
    return to_minor(_decimal(value), digits)


def _refuse_keys(arguments: dict[Any, Any]) -> NoReturn:
    """Raise for the first problem with the keys: one that is not a string, else the
    unknown ones."""
    _object(arguments, "arguments")
    unknown = set(arguments) - _TRANSFER_ARGS
    raise Unreadable(f"unknown argument(s) {', '.join(sorted(map(_show, unknown)))}")


def memo_read(memo: str) -> str | None:
    """A memo as the transfer holds it. A memo is a reference, not a name or a key: an
    empty one is no memo, and a tab between its words is a space (a bill tabulates its
    lines: `Car Rental\\t\\t\\t98.70`). Anything else is kept for `_text` to judge: a tab at
    an end is surrounding whitespace, and every other control is refused."""
    if not memo:
        return None
    return memo.replace("\t", " ") if memo == memo.strip() else memo


def read_transfer(arguments: object) -> Transfer:
    """Read `transfer_funds` arguments (a dict, or its JSON text) into a `Transfer`."""
    if type(arguments) is not dict:
        if type(arguments) is str or type(arguments) is bytes:
            arguments = parse_json_object(arguments)
        else:
            arguments = _object(arguments, "arguments")  # raises, naming the type
    for name in arguments:
        if type(name) is not str or name not in _TRANSFER_ARGS:
            _refuse_keys(arguments)
    get = arguments.get
    recipient = get("recipient", _MISSING)
    if recipient is _MISSING:
        raise Unreadable("recipient is required")
    amount = get("amount", _MISSING)
    if amount is _MISSING:
        raise Unreadable("amount is required")
    currency = get("currency", "USD")
    digits = MINOR_DIGITS.get(currency) if type(currency) is str else None
    if digits is None:
        raise Unreadable(f"currency {_show(currency)} is not a known ISO 4217 code")
    key, memo = get("idempotency_key"), get("memo")
    if type(memo) is str and (not memo or "\t" in memo):
        memo = memo_read(memo)
    # What `_text` accepts, inline for the three texts (a call apiece costs more than
    # the tests). A printable string has no whitespace but the ASCII space, so strip()
    # only ever removes spaces: comparing the ends is the same test, without a copy.
    if not (
        type(recipient) is str
        and 0 < len(recipient) <= _MAX_RECIPIENT
        and recipient.isprintable()
        and (recipient.isascii() or BLANK.search(recipient) is None)
        and recipient[0] != " "
        and recipient[-1] != " "
        and (
            key is None
            or (
                type(key) is str
                and _MIN_KEY <= len(key) <= _MAX_KEY
                and key.isprintable()
                and (key.isascii() or BLANK.search(key) is None)
                and key[0] != " "
                and key[-1] != " "
            )
        )
        and (
            memo is None
            or (
                type(memo) is str
                and 0 < len(memo) <= _MAX_MEMO
                and memo.isprintable()
                and (memo.isascii() or BLANK.search(memo) is None)
                and memo[0] != " "
                and memo[-1] != " "
            )
        )
    ):
        _refuse_text(recipient, amount, digits, memo, key)
    return _new(Transfer, (recipient, _minor(amount, digits), currency, memo, key))


def checked(transfer: Transfer) -> Transfer:
    """A `Transfer` made elsewhere (a caller's, one rebuilt from a results file) held to
    what `read_transfer` makes, or `Unreadable`."""
    if type(transfer) is not Transfer:
        raise Unreadable(f"expected a Transfer, got {type(transfer).__name__}")
    recipient, amount, currency, memo, key = transfer
    digits = MINOR_DIGITS.get(currency) if type(currency) is str else None
    if digits is None:
        raise Unreadable(f"currency {_show(currency)} is not a known ISO 4217 code")
    if type(amount) is not int or not 0 < amount < _INT_CEILING * 10**digits:
        raise Unreadable(f"amount_minor {_show(amount)} is not a positive whole number in range")
    _text(recipient, "recipient", max_len=_MAX_RECIPIENT)
    _optional_text(memo, "memo", max_len=_MAX_MEMO)
    _optional_text(key, "idempotency_key", max_len=_MAX_KEY, min_len=_MIN_KEY)
    return transfer


def _refuse_text(
    recipient: object, amount: object, digits: int, memo: object, key: object
) -> NoReturn:
    """Raise for the first problem, in this order, so that a call with several problems
    is refused for the same one whichever path reads it."""
    if key is not None:
        _text(key, "idempotency_key", max_len=_MAX_KEY, min_len=_MIN_KEY)
    _text(recipient, "recipient", max_len=_MAX_RECIPIENT)
    _minor(amount, digits)
    if memo is not None:
        _text(memo, "memo", max_len=_MAX_MEMO)
    raise AssertionError("the inline tests refused texts that _text accepts")


# The guard's words for what the strict reader found (they reach the model in a declined
# call's result, and so its provider's cache key: they stay as they were).
_SAID = {
    "duplicate": "{}",  # {"recipient": "ok", "recipient": "evil"}: which was meant?
    "constant": "{} is not a JSON number",
    "syntax": "not valid JSON: {}",
    "range": "not valid JSON: number out of range",
    "depth": "not valid JSON: nested too deeply",
    "utf8": "not valid JSON: not UTF-8",
}


def parse_json_object(text: str | bytes) -> dict[str, Any]:
    """Strict JSON for arguments: decimals stay exact, NaN/Infinity and duplicate keys fail."""
    try:
        value = ARGUMENTS.loads(text)
    except Problem as exc:
        problem = exc.problem
        if exc.kind == "constant":
            problem = problem.removesuffix(" is not valid JSON")
        elif exc.kind == "syntax":
            problem = f"{problem} at column {exc.column}"
        raise Unreadable(_SAID[exc.kind].format(problem)) from None
    if not isinstance(value, dict):
        raise Unreadable(f"expected a JSON object, got {type(value).__name__}")
    return value


# The fields the pack's context schema names: any other (`shipping_Country`, an item's
# `Category`) is a misspelling or a field the guard does not judge, so it is refused
# rather than skipped (a skipped `shipping_Country: "BR"` was allowed).
_CONTEXT_FIELDS = frozenset(
    "amount currency idempotency_key items mcp_server mcp_servers mcp_session mcp_tool "
    "mcp_tools merchant_id region risk_score shipping_country memo".split()
)
_ITEM_FIELDS = frozenset({"category", "name", "price", "qty", "sku"})


def _known(raw: dict[str, Any], fields: frozenset[str], where: str) -> None:
    unknown = raw.keys() - fields
    if unknown:
        raise Unreadable(f"{where} has unknown field(s) {', '.join(sorted(map(_show, unknown)))}")


def _items(value: object) -> tuple[Item, ...]:
    if type(value) is not list or not value:
        raise Unreadable("items must be a non-empty list")
    items = []
    for i, entry in enumerate(value):
        raw = _object(entry, f"items[{i}]")
        _known(raw, _ITEM_FIELDS, f"items[{i}]")
        qty, price = raw.get("qty"), raw.get("price")
        if type(qty) is not int or qty < 1:
            raise Unreadable(f"items[{i}].qty must be an integer >= 1")
        if price is not None and (type(price) is not int or price < 1):
            raise Unreadable(f"items[{i}].price must be an integer >= 1")
        items.append(
            Item(
                sku=_text(raw.get("sku"), f"items[{i}].sku", max_len=200),
                qty=qty,
                price=price,
                category=_optional_text(raw.get("category"), f"items[{i}].category", max_len=200),
            )
        )
    return tuple(items)


def read_context(context: object) -> ChargeContext:
    """Read a pack context (`amount` already in integer minor units)."""
    context = _object(context, "context")
    _known(context, _CONTEXT_FIELDS, "context")
    amount = context.get("amount")
    if type(amount) is not int or amount < 1:
        raise Unreadable(f"amount must be an integer >= 1 (minor units), got {_show(amount)}")
    key = _optional_text(
        context.get("idempotency_key"), "idempotency_key", max_len=_MAX_KEY, min_len=_MIN_KEY
    )
    return ChargeContext(
        amount=amount,
        currency=_currency(context.get("currency")),
        merchant_id=_text(context.get("merchant_id"), "merchant_id", max_len=_MAX_RECIPIENT),
        region=_text(context.get("region"), "region", max_len=8),
        items=_items(context.get("items")),
        idempotency_key=key,
        shipping_country=_optional_text(
            context.get("shipping_country"), "shipping_country", max_len=8
        ),
        memo=_optional_text(context.get("memo"), "memo", max_len=_MAX_MEMO),
    )


def permits_recipient(limits: ChargeLimits | None, recipient: str) -> bool:
    """Whether the passport's allowlist permits this recipient: exact match only.

    No case folding or Unicode normalization: a look-alike is a different payee.
    An empty list permits everyone, as the published pack reads it.
    """
    if limits is None:
        return False
    allowed = limits.allowed_merchant_ids
    return not allowed or WILDCARD in allowed or recipient in allowed


@dataclass
class Ledger:
    """What the guard has let through: daily totals per currency, and used keys; the
    other packs' running counts and totals by name (`guard.packs`: a payout count per
    day, what was refunded of an order), kept by the same stores."""

    daily: dict[tuple[date, str], int] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    tallies: dict[str, int] = field(default_factory=dict)


_DAY = 86_400  # seconds: Unix time has no leap seconds, so whole days are UTC days


class ClockError(VaultError):
    """A clock reading that names no instant: a naive datetime, or not a datetime at all."""


def utc_day(instant: object) -> date:
    """The UTC date of an aware datetime, in whatever zone it is written: every day
    boundary (a daily cap's) is a UTC one. `ClockError`, in words, for a naive datetime,
    whose zone and so whose day nobody can tell, and for anything else."""
    if not isinstance(instant, datetime):
        raise ClockError(
            f"the clock gave {type(instant).__name__} {_show(instant)}, not a datetime"
        )
    if instant.utcoffset() is None:  # `astimezone` would take it as the machine's local time
        raise ClockError(
            f"the clock gave a naive datetime {_cut(shown(instant.isoformat()))} (no time zone), "
            "so its UTC day is unknown"
        )
    return instant.astimezone(UTC).date()


_NO_CODE = (
    Reason(APPROVAL_CODE_MISSING, "Memo lacks an approval code APC-YYYY-NNNN", RULE_APPROVAL_CODE),
)
_KEY_USED = (Reason(IDEMPOTENCY_CONFLICT, "Idempotency key already used", RULE_KEY_USED),)
_NO_KEY = (
    Reason(INVALID_CONTEXT, "idempotency_key is required by the passport", RULE_KEY_REQUIRED),
)
_EXPIRED = (Reason(PASSPORT_EXPIRED, "Passport has expired", RULE_EXPIRY),)
_REFUSALS_KEPT = 1024


# Amounts worded as `str(Money)` (`1,000.00 USD`): made once a plan, or once a day's total
# (`_Plan.over_day`), never per decision.
def _over_tx(cap: int, currency: str) -> tuple[Reason, ...]:
    words = f"Amount exceeds the per-transfer limit of {Money(cap, currency)}"
    return (Reason(LIMIT_EXCEEDED, words, RULE_PER_TX),)


def _over_day(cap: int, spent: int, currency: str) -> tuple[Reason, ...]:
    words = f"Daily cap of {Money(cap, currency)} exceeded: "
    words += f"{Money(spent, currency)} already allowed today"
    return (Reason(LIMIT_EXCEEDED, words, RULE_DAILY),)


class _Plan:
    """One passport compiled once: each of the pack's rules as a flag, a set or a
    ready reason, so a decision does lookups and comparisons, never re-reads."""

    __slots__ = (
        "anyone",
        "blocked",
        "caps",
        "countries",
        "daily_refusals",
        "expires_at",
        "expires_by",
        "head",
        "key_required",
        "keyless",
        "max_items",
        "memo_code",
        "payees",
        "refusals",
        "regions",
        "transfer_items",
        "transfer_place",
        "void",
        "void_at",
    )

    def __init__(self, passport: Passport, limits: ChargeLimits | None) -> None:
        status = passport.status
        refused = (
            ()
            if status == "active"
            else (Reason(PASSPORT_SUSPENDED, f"Passport status is {status}", RULE_STATUS),)
        )
        ungranted = (
            (Reason(UNKNOWN_CAPABILITY, f"Passport does not grant {CHARGE}", RULE_CAPABILITY),)
            if limits is None
            else ()
        )
        # The reasons a passport authorizes nothing, known once; an expiry goes between
        # them, at `void_at`, in the order status, expiry, capability.
        self.void = (refused + ungranted) or None
        self.void_at = len(refused)
        self.expires_at = None if passport.never_expires else passport.expires_at
        # The expiry as a timestamp (never: infinity), so the system clock is one comparison.
        self.expires_by = math.inf if self.expires_at is None else self.expires_at.timestamp()
        self.regions = frozenset(passport.regions)
        self.refusals: dict[str, tuple[Reason, ...]] = {}
        self.daily_refusals: dict[tuple[str, int], tuple[Reason, ...]] = {}
        head: list[Reason] = []
        if limits is None:  # every decision stops at `void`
            self.key_required = self.anyone = self.memo_code = False
            self.caps: dict[str, tuple[int, int | None, tuple[Reason, ...]]] = {}
            self.payees = self.countries = self.blocked = frozenset[str]()
            self.max_items: int | None = None
        else:
            floor = max(
                ASSURANCE_RANK[PACK_MIN_ASSURANCE],
                ASSURANCE_RANK[limits.require_assurance_at_least],
            )
            if ASSURANCE_RANK[passport.assurance_level] < floor:
                head.append(
                    Reason(ASSURANCE_INSUFFICIENT, "Assurance level too low", RULE_ASSURANCE)
                )
            if limits.approval_required:
                head.append(
                    Reason(
                        APPROVAL_REQUIRED,
                        "Charges need a human approval the agent cannot give",
                        RULE_APPROVAL,
                    )
                )
            self.key_required = limits.idempotency_required
            # Each currency's caps, and the reason a call over the per-transfer one gets.
            self.caps = {
                code: (cap.max_per_tx, cap.daily_cap, _over_tx(cap.max_per_tx, code))
                for code, cap in limits.currency_limits.items()
            }
            allowed = limits.allowed_merchant_ids
            self.anyone = not allowed or WILDCARD in allowed
            self.payees = frozenset(allowed)
            self.countries = frozenset(limits.allowed_countries)
            self.blocked = frozenset(limits.blocked_categories)
            self.max_items = limits.max_items_per_tx
            self.memo_code = limits.x_vault_memo_approval_code_required
        self.head = tuple(head)
        # A call without the key the passport requires fails that rule first (a required
        # context field, read before the pack's rules), then the others as any call does.
        self.keyless = _NO_KEY + self.head
        # What a transfer does not carry is the same for every transfer (see
        # TRANSFER_CATEGORY), so its rules are decided here, once.
        transfer = (Item(TRANSFER_TOOL, 1, None, TRANSFER_CATEGORY),)
        region = passport.regions[0] if passport.regions else ""
        self.transfer_items = self.item_count(transfer)
        self.transfer_place = self.place(region, None, transfer)

    def forbidden(self, payee: str) -> tuple[Reason, ...]:
        """The reason a payee outside the allowlist is refused; an attack repeats its
        payee, so the words are kept (a bounded number of them, so that a flood of
        distinct payees cannot grow the guard)."""
        said = self.refusals.get(payee)
        if said is None:
            if len(self.refusals) >= _REFUSALS_KEPT:
                self.refusals.clear()
            said = (
                _new(
                    Reason,
                    (
                        MERCHANT_FORBIDDEN,
                        f"Merchant {_show(payee)} not in allowlist",
                        RULE_MERCHANT,
                    ),
                ),
            )
            self.refusals[payee] = said
        return said

    def item_count(self, items: tuple[Item, ...]) -> tuple[Reason, ...]:
        if self.max_items is None or len(items) <= self.max_items:
            return ()
        words = f"Item count {len(items)} exceeds the maximum of {self.max_items}"
        return (Reason(LIMIT_EXCEEDED, words, RULE_ITEMS),)

    def over_day(self, cap: int, spent: int, currency: str) -> tuple[Reason, ...]:
        """The reason a call over the daily cap is refused, with the day's total so far;
        kept (a bounded number of them), as an attack repeats its call."""
        key = (currency, spent)
        said = self.daily_refusals.get(key)
        if said is None:
            if len(self.daily_refusals) >= _REFUSALS_KEPT:
                self.daily_refusals.clear()
            said = self.daily_refusals[key] = _over_day(cap, spent, currency)
        return said

    def place(
        self, region: str, country: str | None, items: tuple[Item, ...]
    ) -> tuple[Reason, ...]:
        """The region, shipping-country and category rules, in the pack's order."""
        out: tuple[Reason, ...] = ()
        if region not in self.regions:
            out += (Reason(REGION_BLOCKED, f"Region {_show(region)} not allowed", RULE_REGION),)
        if country is not None and self.countries and country not in self.countries:
            words = f"Shipping country {_show(country)} not allowed"
            out += (Reason(REGION_BLOCKED, words, RULE_COUNTRY),)
        blocked = next(
            (i.category for i in items if i.category is not None and i.category in self.blocked),
            None,
        )
        if blocked is not None:
            words = f"Item category {_show(blocked)} is blocked"
            out += (Reason(CATEGORY_BLOCKED, words, RULE_CATEGORY),)
        return out


class Guard:
    """One passport and its ledger. Judge with `check_call` / `check_context`."""

    def __init__(self, passport: Passport, *, clock: Callable[[], datetime] | None = None) -> None:
        self.passport = passport
        self.limits = passport.charge_limits
        self.ledger = Ledger()
        # None: the system clock, read as `time.time()` (an aware datetime costs more to
        # make than the rest of a decision's arithmetic).
        self._clock = clock
        self._plan = _Plan(passport, self.limits)
        # (start, end, date) of the last day seen: one tuple, so threads agree.
        self._day_cache: tuple[float, float, date] = (0.0, 0.0, date.min)

    def _today(self, plan: _Plan) -> tuple[date, bool]:
        """One clock reading: the UTC day, and whether `plan`'s passport has expired;
        `ClockError` for a reading that is not an aware datetime."""
        if self._clock is not None:
            now = self._clock()
            return utc_day(now), plan.expires_at is not None and now >= plan.expires_at
        t = _now()
        start, end, day = self._day_cache
        if not start <= t < end:
            day = self._new_day(t)
        return day, t >= plan.expires_by

    def _new_day(self, t: float) -> date:
        """The UTC date of timestamp `t`, kept: Unix time has whole days of `_DAY` seconds."""
        number = int(t // _DAY)
        day = datetime.fromtimestamp(number * _DAY, UTC).date()
        self._day_cache = (number * _DAY, (number + 1) * _DAY, day)
        return day

    # -- tool calls -------------------------------------------------------------
    def judge_call(self, name: object, arguments: object) -> Decision:
        """Judge a tool call without touching the ledger. Never raises."""
        return self._call(name, arguments, False)

    def check_call(self, name: object, arguments: object) -> Decision:
        """Judge a tool call and, if allowed, record it in the ledger. Never raises."""
        return self._call(name, arguments, True)

    def _call(self, name: object, arguments: object, record: bool) -> Decision:
        try:
            if name != TRANSFER_TOOL:
                return deny(
                    EVALUATION_ERROR, f"tool {_show(name)} is not a payment tool the guard knows"
                )
            try:
                transfer = read_transfer(arguments)
            except Unreadable as exc:
                return deny(INVALID_CONTEXT, str(exc))
            plan = self._plan
            if self._clock is None:  # `_today`, inline on the path every decision takes
                t = _now()
                start, end, today = self._day_cache
                if not start <= t < end:
                    today = self._new_day(t)
                expired = t >= plan.expires_by
            else:
                try:
                    today, expired = self._today(plan)
                except ClockError as exc:
                    return deny(EVALUATION_ERROR, str(exc), transfer)
            items, place = plan.transfer_items, plan.transfer_place
            decision = self._judge(plan, transfer, items, place, transfer, today, expired)
            if record and decision.allow:
                # Recorded under the day it was judged on: one clock reading, so the day
                # whose total was checked is the day it counts towards, even at midnight.
                self._record(transfer, today)
            return decision
        except Exception as exc:  # noqa: BLE001 - fail closed on anything unexpected
            return deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}")

    def judge_transfer(self, transfer: Transfer) -> Decision:
        """Judge an already normalized transfer without touching the ledger. Never raises."""
        try:
            checked(transfer)
        except Unreadable as exc:
            return deny(INVALID_CONTEXT, str(exc))
        try:
            plan = self._plan
            items, place = plan.transfer_items, plan.transfer_place
            return self._judge(plan, transfer, items, place, transfer, *self._today(plan))
        except ClockError as exc:
            return deny(EVALUATION_ERROR, str(exc), transfer)
        except Exception as exc:  # noqa: BLE001 - fail closed on anything unexpected
            return deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}")

    def commit(self, transfer: Transfer) -> None:
        """Record a transfer that executed (allowed, or executed unguarded); `Unreadable`
        for one no reader makes (a negative amount would cancel the daily cap), and
        `ClockError` when the clock cannot say which UTC day it counts towards."""
        self._record(checked(transfer), self._today(self._plan)[0])

    def _record(self, transfer: Transfer, today: date) -> None:
        day = (today, transfer.currency)
        daily = self.ledger.daily
        daily[day] = daily.get(day, 0) + transfer.amount_minor
        if transfer.idempotency_key is not None:
            self.ledger.keys.add(transfer.idempotency_key)

    # -- pack contexts ----------------------------------------------------------
    def check_context(self, context: object, passport: Passport | None = None) -> Decision:
        """Judge a pack context (optionally under an override passport); commit if allowed."""
        try:
            passport = passport or self.passport
            plan = (
                self._plan if passport is self.passport else _Plan(passport, passport.charge_limits)
            )
            try:
                ctx = read_context(context)
            except Unreadable as exc:
                return deny(INVALID_CONTEXT, str(exc))
            call = _new(
                Transfer, (ctx.merchant_id, ctx.amount, ctx.currency, ctx.memo, ctx.idempotency_key)
            )
            items = ctx.items
            count, place = (
                plan.item_count(items),
                plan.place(ctx.region, ctx.shipping_country, items),
            )
            today, expired = self._today(plan)
            decision = self._judge(plan, call, count, place, None, today, expired)
            if decision.allow:
                self._record(call, today)
            return decision
        except ClockError as exc:
            return deny(EVALUATION_ERROR, str(exc))
        except Exception as exc:  # noqa: BLE001 - fail closed on anything unexpected
            return deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}")

    # -- the rules, in the pack's order -------------------------------------------
    def _judge(
        self,
        plan: _Plan,
        call: Transfer,
        items: tuple[Reason, ...],
        place: tuple[Reason, ...],
        transfer: Transfer | None,
        today: date,
        expired: bool,
    ) -> Decision:
        """`call` under `plan` on `today`; `items` and `place` are its already decided
        item-count and region/country/category reasons; the decision carries `transfer`."""
        if expired or plan.void is not None:
            # A passport that is not active, has expired or grants no payments authorizes
            # nothing, whatever was sent: its limits are not the agent's to meet, so its
            # own reasons are the whole answer (a call "also over the cap" would suggest
            # that one within it could pass).
            void = plan.void or ()
            if expired:
                void = void[: plan.void_at] + _EXPIRED + void[plan.void_at :]
            return _new(Decision, (False, void, transfer))
        payee, amount, currency, memo, key = call
        # From here every rule is judged on what was sent, and each that fails is listed:
        # a missing required key is one of them, not the end of the judging.
        reasons = plan.keyless if key is None and plan.key_required else plan.head
        cap = plan.caps.get(currency)
        if cap is None:
            reasons += (
                _new(
                    Reason,
                    (CURRENCY_UNSUPPORTED, f"Currency {currency} is not supported", RULE_CURRENCY),
                ),
            )
        elif amount > cap[0]:
            reasons += cap[2]
        if items:  # mostly empty: a test is cheaper than the concatenation
            reasons += items
        if not (plan.anyone or payee in plan.payees):
            reasons += plan.forbidden(payee)
        if place:
            reasons += place
        if plan.memo_code and (memo is None or _find_code(memo) is None):
            reasons += _NO_CODE
        if cap is not None and cap[1] is not None:
            spent = self.ledger.daily.get((today, currency), 0)
            if spent + amount > cap[1]:
                reasons += plan.over_day(cap[1], spent, currency)
        if key is not None and key in self.ledger.keys:
            reasons += _KEY_USED
        if reasons:
            return _new(Decision, (False, reasons, transfer))
        return _new(Decision, (True, _ALLOW_REASON, transfer))
