"""The guard: a deterministic OAP policy engine for `finance.payment.charge.v1`.

It sits between a model's `transfer_funds` call and its execution. It knows nothing
of pytest, providers or the bank: it reads a passport, judges calls, and keeps a
ledger of what it allowed so that a sequence of calls is judged as a sequence.

Fail closed: whatever it cannot read unambiguously is denied (`oap.invalid_context`),
anything that raises inside is denied (`oap.evaluation_error`), and an allowed
decision carries the normalized `Transfer`, which is the only thing that may execute.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, NamedTuple

from pytest_vault.guard.passport import (
    ASSURANCE_RANK,
    CHARGE,
    WILDCARD,
    ChargeLimits,
    DuplicateKey,
    Passport,
    unique_keys,
)

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

# ISO 4217 codes the guard can convert to minor units, with their exponent. A code
# outside this table is unknown: the guard cannot say what "1" of it is in minor
# units, so it denies rather than guess.
MINOR_DIGITS: dict[str, int] = {
    **dict.fromkeys(
        "USD EUR GBP CHF CAD AUD NZD SEK NOK DKK PLN CZK HUF RON BGN MXN BRL ZAR "
        "INR CNY HKD SGD THB MYR PHP IDR TRY ILS AED SAR EGP NGN KES".split(),
        2,
    ),
    **dict.fromkeys("JPY KRW CLP ISK VND UGX XAF XOF".split(), 0),
    **dict.fromkeys("BHD KWD OMR JOD TND".split(), 3),
}

# The Level 4 audit code: `APC-YYYY-NNNN`, as a whole token of the memo.
APPROVAL_CODE = re.compile(r"(?<![A-Za-z0-9-])APC-[0-9]{4}-[0-9]{4}(?![A-Za-z0-9-])")

# What the payment tool does not carry comes from these documented defaults, never
# from the model: the region is the passport's first region, and the transfer is
# one item of this category priced at the full amount (so a passport can block
# transfers as a category, and the item cap counts one).
TRANSFER_CATEGORY = "funds_transfer"

_TRANSFER_ARGS = frozenset({"recipient", "amount", "currency", "memo", "idempotency_key"})
_MAX_RECIPIENT = 254
_MAX_MEMO = 255
_MAX_KEY = 128
_MIN_KEY = 8  # the pack's minLength for idempotency keys
_MAX_ADJUSTED = 15  # amounts of 10**16 major units or more are not read
_MAX_FIGURES = 40  # nor amounts written with more digits than any real one has


# Value types are NamedTuples: immutable (what executes cannot be edited after the
# decision) and several times cheaper to build than frozen dataclasses on this hot path.
class Reason(NamedTuple):
    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


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

    def to_dict(self, *, call: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "allow": self.allow,
            "reasons": [r.to_dict() for r in self.reasons],
            "policy_id": POLICY_ID,
        }
        if call:
            executes = self.executes
            out["executes"] = None if executes is None else executes.to_dict()
        return out


def deny(code: str, message: str, transfer: Transfer | None = None) -> Decision:
    return Decision(False, (Reason(code, message),), transfer)


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


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
    # unassigned and separator character except the ASCII space.
    if not value.isprintable():
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
    # JSON said: 0.1 stays 0.1 instead of 0.1000000000000000055...
    return Decimal(repr(value)) if kind is float else Decimal(value)  # type: ignore[arg-type]


def to_minor(amount: Decimal, digits: int) -> int:
    """Exact conversion to integer minor units, or `Unreadable`.

    Works on the decimal digits, never on floats or a rounding context, so
    `500.005` and `1.000000000000000000000000000001` are refused, not rounded.
    """
    if not amount.is_finite():
        raise Unreadable(f"amount {amount} is not a finite number")
    if amount <= 0:
        raise Unreadable(f"amount must be positive, got {amount}")
    if amount.adjusted() > _MAX_ADJUSTED:
        raise Unreadable(f"amount {amount} is out of range")
    _, figures, exponent = amount.as_tuple()
    if not isinstance(exponent, int):  # only NaN/Infinity have a letter here
        raise Unreadable(f"amount {amount} is not a finite number")
    if len(figures) > _MAX_FIGURES:
        raise Unreadable(f"amount has more than {_MAX_FIGURES} digits")
    shift = exponent + digits
    units = int("".join(map(str, figures)))
    if shift >= 0:
        return int(units * 10**shift)
    if -shift > len(figures) or units % 10**-shift:
        raise Unreadable(f"amount {amount} has more than {digits} decimal places")
    return int(units // 10**-shift)


def read_transfer(arguments: object) -> Transfer:
    """Read `transfer_funds` arguments (a dict, or its JSON text) into a `Transfer`."""
    if type(arguments) is str or type(arguments) is bytes:
        arguments = parse_json_object(arguments)
    arguments = _object(arguments, "arguments")
    if not _TRANSFER_ARGS.issuperset(arguments):
        unknown = set(arguments) - _TRANSFER_ARGS
        raise Unreadable(f"unknown argument(s) {', '.join(sorted(map(_show, unknown)))}")
    for required in ("recipient", "amount"):
        if required not in arguments:
            raise Unreadable(f"{required} is required")
    currency = _currency(arguments.get("currency", "USD"))
    key = _optional_text(
        arguments.get("idempotency_key"), "idempotency_key", max_len=_MAX_KEY, min_len=_MIN_KEY
    )
    return Transfer(
        recipient=_text(arguments["recipient"], "recipient", max_len=_MAX_RECIPIENT),
        amount_minor=to_minor(_decimal(arguments["amount"]), MINOR_DIGITS[currency]),
        currency=currency,
        memo=_optional_text(arguments.get("memo"), "memo", max_len=_MAX_MEMO),
        idempotency_key=key,
    )


def _reject_constant(name: str) -> Any:
    raise Unreadable(f"{name} is not a JSON number")


_STRICT_JSON = json.JSONDecoder(
    parse_float=Decimal, parse_constant=_reject_constant, object_pairs_hook=unique_keys
)


def parse_json_object(text: str | bytes) -> dict[str, Any]:
    """Strict JSON for arguments: decimals stay exact, NaN/Infinity and duplicate keys fail."""
    try:
        # JSON text is UTF-8 (RFC 8259); one decoder, built once, for the hot path.
        value = _STRICT_JSON.decode(text.decode() if isinstance(text, bytes) else text)
    except Unreadable:
        raise
    except DuplicateKey as exc:
        # {"recipient": "ok", "recipient": "evil"}: which one did the model mean?
        raise Unreadable(str(exc)) from None
    # ArithmeticError: a number Decimal cannot hold (an exponent out of range).
    except ArithmeticError:
        raise Unreadable("not valid JSON: number out of range") from None
    except RecursionError:
        raise Unreadable("not valid JSON: nested too deeply") from None
    except json.JSONDecodeError as exc:
        problem = exc.msg.removesuffix(" at")  # "Invalid control character at"
        raise Unreadable(f"not valid JSON: {problem} at column {exc.colno}") from None
    except ValueError as exc:  # bytes that are not UTF-8; an integer of too many digits
        problem = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "number out of range"
        raise Unreadable(f"not valid JSON: {problem}") from None
    if not isinstance(value, dict):
        raise Unreadable(f"expected a JSON object, got {type(value).__name__}")
    return value


def _items(value: object) -> tuple[Item, ...]:
    if type(value) is not list or not value:
        raise Unreadable("items must be a non-empty list")
    items = []
    for i, entry in enumerate(value):
        raw = _object(entry, f"items[{i}]")
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
    """What the guard has let through: daily totals per currency, and used keys."""

    daily: dict[tuple[date, str], int] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Guard:
    """One passport and its ledger. Judge with `check_call` / `check_context`."""

    def __init__(self, passport: Passport, *, clock: Callable[[], datetime] = _utcnow) -> None:
        self.passport = passport
        self.limits = passport.charge_limits
        self.ledger = Ledger()
        self._clock = clock

    # -- tool calls -------------------------------------------------------------
    def judge_call(self, name: object, arguments: object) -> Decision:
        """Judge a tool call without touching the ledger. Never raises."""
        try:
            if name != TRANSFER_TOOL:
                return deny(
                    EVALUATION_ERROR, f"tool {_show(name)} is not a payment tool the guard knows"
                )
            try:
                transfer = read_transfer(arguments)
            except Unreadable as exc:
                return deny(INVALID_CONTEXT, str(exc))
            return self._judge(self._context_for(transfer), self.passport, self.limits, transfer)
        except Exception as exc:  # noqa: BLE001 - fail closed on anything unexpected
            return deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}")

    def judge_transfer(self, transfer: Transfer) -> Decision:
        """Judge an already normalized transfer without touching the ledger. Never raises."""
        try:
            return self._judge(self._context_for(transfer), self.passport, self.limits, transfer)
        except Exception as exc:  # noqa: BLE001 - fail closed on anything unexpected
            return deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}")

    def check_call(self, name: object, arguments: object) -> Decision:
        """Judge a tool call and, if allowed, record it in the ledger."""
        decision = self.judge_call(name, arguments)
        if decision.allow and decision.transfer is not None:
            self.commit(decision.transfer)
        return decision

    def commit(self, transfer: Transfer) -> None:
        """Record a transfer that executed (allowed, or executed unguarded)."""
        day = (self._clock().date(), transfer.currency)
        self.ledger.daily[day] = self.ledger.daily.get(day, 0) + transfer.amount_minor
        if transfer.idempotency_key is not None:
            self.ledger.keys.add(transfer.idempotency_key)

    def _context_for(self, transfer: Transfer) -> ChargeContext:
        return ChargeContext(
            amount=transfer.amount_minor,
            currency=transfer.currency,
            merchant_id=transfer.recipient,
            region=self.passport.regions[0] if self.passport.regions else "",
            items=(Item("transfer_funds", 1, transfer.amount_minor, TRANSFER_CATEGORY),),
            idempotency_key=transfer.idempotency_key,
            memo=transfer.memo,
        )

    # -- pack contexts ----------------------------------------------------------
    def check_context(self, context: object, passport: Passport | None = None) -> Decision:
        """Judge a pack context (optionally under an override passport); commit if allowed."""
        try:
            passport = passport or self.passport
            limits = self.limits if passport is self.passport else passport.charge_limits
            try:
                ctx = read_context(context)
            except Unreadable as exc:
                return deny(INVALID_CONTEXT, str(exc))
            decision = self._judge(ctx, passport, limits, None)
            if decision.allow:
                self.commit(
                    Transfer(
                        ctx.merchant_id, ctx.amount, ctx.currency, ctx.memo, ctx.idempotency_key
                    )
                )
            return decision
        except Exception as exc:  # noqa: BLE001 - fail closed on anything unexpected
            return deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}")

    # -- the rules, in the pack's order -------------------------------------------
    def _judge(
        self,
        ctx: ChargeContext,
        passport: Passport,
        limits: ChargeLimits | None,
        transfer: Transfer | None,
    ) -> Decision:
        now = self._clock()
        if passport.status != "active":
            return deny(PASSPORT_SUSPENDED, f"Passport status is {passport.status}", transfer)
        if (
            passport.expires_at is not None
            and not passport.never_expires
            and now >= passport.expires_at
        ):
            return deny(PASSPORT_EXPIRED, "Passport has expired", transfer)
        if limits is None:
            return deny(UNKNOWN_CAPABILITY, f"Passport does not grant {CHARGE}", transfer)
        if limits.idempotency_required and ctx.idempotency_key is None:
            return deny(INVALID_CONTEXT, "idempotency_key is required by the passport", transfer)

        reasons: list[Reason] = []
        floor = max(
            ASSURANCE_RANK[PACK_MIN_ASSURANCE], ASSURANCE_RANK[limits.require_assurance_at_least]
        )
        if ASSURANCE_RANK[passport.assurance_level] < floor:
            reasons.append(Reason(ASSURANCE_INSUFFICIENT, "Assurance level too low"))
        if limits.approval_required:
            reasons.append(
                Reason(APPROVAL_REQUIRED, "Charges need a human approval the agent cannot give")
            )
        cap = limits.currency_limits.get(ctx.currency)
        if cap is None:
            reasons.append(
                Reason(CURRENCY_UNSUPPORTED, f"Currency {ctx.currency} is not supported")
            )
        elif ctx.amount > cap.max_per_tx:
            reasons.append(Reason(LIMIT_EXCEEDED, "Amount exceeds per-transaction limit"))
        if limits.max_items_per_tx is not None and len(ctx.items) > limits.max_items_per_tx:
            reasons.append(Reason(LIMIT_EXCEEDED, "Item count exceeds maximum allowed"))
        if not permits_recipient(limits, ctx.merchant_id):
            reasons.append(
                Reason(MERCHANT_FORBIDDEN, f"Merchant {_show(ctx.merchant_id)} not in allowlist")
            )
        if ctx.region not in passport.regions:
            reasons.append(Reason(REGION_BLOCKED, f"Region {_show(ctx.region)} not allowed"))
        if (
            ctx.shipping_country is not None
            and limits.allowed_countries
            and ctx.shipping_country not in limits.allowed_countries
        ):
            reasons.append(Reason(REGION_BLOCKED, "Shipping country not allowed"))
        if any(
            i.category is not None and i.category in limits.blocked_categories for i in ctx.items
        ):
            reasons.append(Reason(CATEGORY_BLOCKED, "Item category is blocked"))
        if limits.x_vault_memo_approval_code_required and not APPROVAL_CODE.search(ctx.memo or ""):
            reasons.append(
                Reason(APPROVAL_CODE_MISSING, "Memo lacks an approval code APC-YYYY-NNNN")
            )
        if cap is not None and cap.daily_cap is not None:
            spent = self.ledger.daily.get((now.date(), ctx.currency), 0)
            if spent + ctx.amount > cap.daily_cap:
                reasons.append(Reason(LIMIT_EXCEEDED, "Daily cap exceeded"))
        if ctx.idempotency_key is not None and ctx.idempotency_key in self.ledger.keys:
            reasons.append(Reason(IDEMPOTENCY_CONFLICT, "Idempotency key already used"))
        if reasons:
            return Decision(False, tuple(reasons), transfer)
        return Decision(True, _ALLOW_REASON, transfer)
