"""The guard's other OAP packs, beside `finance.payment.charge.v1` (`engine`):
`finance.payment.refund.v1`, `finance.payment.payout.v1` and
`finance.transaction.execute.v1`, each as its published pack defines it (required
context fields, limits, `evaluation_rules` and their deny codes), judged on the same
`engine.Guard`: its passport, clock and ledger.

The guard trusts the system of record, not the model. A rule that needs what the
caller's system knows (an order's customer, total, currency and what was refunded of
it; a payout destination's type and when it was added; an account's type) reads it from
a `Facts` callback, `facts(kind, id) -> Mapping | None`, given by the caller:

    facts("order", order_id)                  -> {"customer_id": str, "total_minor": int,
                                                  "currency": str, "refunded_minor": int}
    facts("payout_destination", destination_id) -> {"type": str, "added_at": datetime}
    facts("account", account_id)              -> {"type": str}

What the context says of those facts (`order_total_minor`, `destination_type`, ...) is
then ignored: a context claiming `order_total_minor: 999999` is judged on the recorded
total. Without a callback, or when it does not know the id (returns None) or returns a
record it cannot read, the pack is not decided: one denial, `vault.facts_unavailable`.
`context_facts=True` is the explicit other mode, for the packs' reference contexts
(which carry the facts, as their tests were written) and the CLI's `--context-facts`:
never the default.

Every failing rule is listed, in the pack's order, as the charge pack does; a passport
that is not active, has expired or lacks the capability authorizes nothing, and its own
reasons are the whole answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from time import time as _now
from typing import Any, NamedTuple, cast

from pytest_vault.core.text import BLANK, visible
from pytest_vault.guard.engine import (
    ALLOWED,
    APPROVAL_REQUIRED,
    ASSURANCE_INSUFFICIENT,
    CHARGE_RULES,
    CURRENCY_UNSUPPORTED,
    EVALUATION_ERROR,
    IDEMPOTENCY_CONFLICT,
    INVALID_CONTEXT,
    LIMIT_EXCEEDED,
    PASSPORT_EXPIRED,
    PASSPORT_SUSPENDED,
    POLICY_ID,
    REGION_BLOCKED,
    RULE_APPROVAL,
    RULE_ASSURANCE,
    RULE_CAPABILITY,
    RULE_CONTEXT,
    RULE_CURRENCY,
    RULE_DAILY,
    RULE_EVALUATION,
    RULE_EXPIRY,
    RULE_KEY_REQUIRED,
    RULE_KEY_USED,
    RULE_PER_TX,
    RULE_STATUS,
    UNKNOWN_CAPABILITY,
    ClockError,
    Decision,
    Guard,
    Ledger,
    Reason,
    Unreadable,
    _object,
    _show,
    deny,
    utc_day,
)
from pytest_vault.guard.money import MINOR_DIGITS, Money
from pytest_vault.guard.passport import (
    ASSURANCE_RANK,
    CHARGE,
    EXECUTE,
    PAYOUT,
    REFUND,
    WILDCARD,
    ExecuteLimits,
    Passport,
    PayoutLimits,
    RefundLimits,
)

REFUND_POLICY = "finance.payment.refund.v1"
PAYOUT_POLICY = "finance.payment.payout.v1"
EXECUTE_POLICY = "finance.transaction.execute.v1"
# aport-spec's conformance cases (commit 33f74c2) name the refund pack by its id before
# the packs were renamed: accepted as the same pack, and answered under its new id.
POLICY_ALIASES = {"payments.refunds.v1": REFUND_POLICY}
# Each pack and the capability it requires.
CAPABILITY = {
    POLICY_ID: CHARGE,
    REFUND_POLICY: REFUND,
    PAYOUT_POLICY: PAYOUT,
    EXECUTE_POLICY: EXECUTE,
}
_MIN_ASSURANCE = {REFUND_POLICY: "L2", PAYOUT_POLICY: "L3", EXECUTE_POLICY: "L3"}
MIN_ASSURANCE = _MIN_ASSURANCE  # each pack's own minimum (a passport may only raise it)
# The refund reason codes the published examples and the shipped levels use: no pack
# enumerates them, so lint warns of another (a misspelt code denies every refund sent
# with the right one).
KNOWN_REFUND_REASONS = (
    "customer_request",
    "defective_product",
    "duplicate_charge",
    "not_received",
    "fraud",
    "other",
)

# The packs' own deny codes, beyond the charge pack's.
INVALID_REASON_CODE = "oap.invalid_reason_code"
CROSS_CURRENCY_DENIED = "oap.cross_currency_denied"
DESTINATION_TYPE_FORBIDDEN = "oap.destination_type_forbidden"
COMPLIANCE_CHECK_REQUIRED = "oap.compliance_check_required"
ACTION_FORBIDDEN = "oap.action_forbidden"
ASSET_CLASS_FORBIDDEN = "oap.asset_class_forbidden"
ACCOUNT_TYPE_RESTRICTED = "oap.account_type_restricted"
COMMINGLING_FORBIDDEN = "oap.commingling_of_funds_forbidden"
COUNTERPARTY_LIMIT_EXCEEDED = "oap.counterparty_limit_exceeded"
# pytest-vault extensions, not codes of the published packs.
FACTS_UNAVAILABLE = "vault.facts_unavailable"
CUSTOMER_MISMATCH = "vault.customer_mismatch"
RECIPIENT_FORBIDDEN = "vault.recipient_forbidden"
DESTINATION_TOO_NEW = "vault.destination_too_new"
ACCOUNT_FIELD_FORBIDDEN = "vault.account_field_forbidden"

# Rule names: the packs' `evaluation_rules` names; `x_vault_*` are ours.
RULE_FACTS = "x_vault_system_of_record"
RULE_REASON = "reason_code_valid"
RULE_CROSS_CURRENCY = "cross_currency_check"
RULE_ORDER_CUSTOMER = "x_vault_order_customer"
RULE_ORDER_BALANCE = "x_vault_order_balance"  # the pack's advice: "validate remaining balance"
RULE_REGION_AUTH = "region_authorization"
RULE_DESTINATION_TYPE = "destination_type_allowed"
RULE_RECIPIENT = "x_vault_recipient_allowed"  # the pack requires `allowed_recipients`
RULE_DESTINATION_HOLD = "x_vault_destination_hold"
RULE_PAYOUT_COUNT = "daily_cap_check"  # the payout pack's name for its daily count
RULE_COMPLIANCE = "compliance_check"
RULE_TX_TYPE = "transaction_type_allowed"
RULE_ASSET_CLASS = "asset_class_allowed"
RULE_EXPOSURE = "exposure_limit_check"
RULE_SEGREGATION = "account_segregation_check"
RULE_ACCOUNT_TYPE = "account_type_check"
RULE_COMMINGLING = "segregation_of_funds_check"
RULE_COUNTERPARTY = "counterparty_exposure_check"
RULE_ACCOUNT_FIELD = "x_vault_account_field_allowed"  # no pack limits an account's details

_COMMON = (RULE_CONTEXT, RULE_EVALUATION, RULE_FACTS, RULE_STATUS, RULE_EXPIRY, RULE_CAPABILITY)
# Each pack's rules, in the order it judges them.
PACK_RULES: dict[str, tuple[str, ...]] = {
    POLICY_ID: CHARGE_RULES,
    REFUND_POLICY: (
        *_COMMON,
        RULE_ASSURANCE,
        RULE_APPROVAL,
        RULE_CURRENCY,
        RULE_PER_TX,
        RULE_REASON,
        RULE_CROSS_CURRENCY,
        RULE_ORDER_CUSTOMER,
        RULE_ORDER_BALANCE,
        RULE_DAILY,
        RULE_KEY_USED,
        RULE_REGION_AUTH,
    ),
    PAYOUT_POLICY: (
        *_COMMON,
        RULE_KEY_REQUIRED,
        RULE_ASSURANCE,
        RULE_APPROVAL,
        RULE_CURRENCY,
        RULE_PER_TX,
        RULE_DESTINATION_TYPE,
        RULE_RECIPIENT,
        RULE_DESTINATION_HOLD,
        RULE_PAYOUT_COUNT,
        RULE_COMPLIANCE,
        RULE_KEY_USED,
    ),
    EXECUTE_POLICY: (
        *_COMMON,
        RULE_KEY_REQUIRED,
        RULE_ASSURANCE,
        RULE_APPROVAL,
        RULE_CURRENCY,
        RULE_TX_TYPE,
        RULE_ASSET_CLASS,
        RULE_EXPOSURE,
        RULE_SEGREGATION,
        RULE_ACCOUNT_TYPE,
        RULE_COMMINGLING,
        RULE_COUNTERPARTY,
        RULE_KEY_USED,
    ),
}

# The system of record, as the caller's own code answers it: `facts(kind, id)` is the
# record (a mapping) or None for an id it does not know. Called at decision time, once
# per record a decision needs; an exception it raises denies (fail closed).
Facts = Callable[[str, str], Mapping[str, object] | None]
ORDER = "order"
DESTINATION = "payout_destination"
ACCOUNT = "account"
# The facts each pack's rules need, by kind.
NEEDS_FACTS = {REFUND_POLICY: (ORDER,), PAYOUT_POLICY: (DESTINATION,), EXECUTE_POLICY: (ACCOUNT,)}


# Every code a pack beside the charge's can deny with, beyond the charge pack's
# (`engine.REASON_CODES`): the reason-codes reference lists them after those.
PACK_CODES = (
    INVALID_REASON_CODE,
    CROSS_CURRENCY_DENIED,
    DESTINATION_TYPE_FORBIDDEN,
    COMPLIANCE_CHECK_REQUIRED,
    ACTION_FORBIDDEN,
    ASSET_CLASS_FORBIDDEN,
    ACCOUNT_TYPE_RESTRICTED,
    COMMINGLING_FORBIDDEN,
    COUNTERPARTY_LIMIT_EXCEEDED,
    FACTS_UNAVAILABLE,
    CUSTOMER_MISMATCH,
    RECIPIENT_FORBIDDEN,
    DESTINATION_TOO_NEW,
    ACCOUNT_FIELD_FORBIDDEN,
)


def policy_of(name: object) -> str | None:
    """A pack id as a request may name it (its alias too), or None for one we lack."""
    if type(name) is not str:
        return None
    name = POLICY_ALIASES.get(name, name)
    return name if name in CAPABILITY else None


# -- contexts ---------------------------------------------------------------------------
_MCP = frozenset({"mcp_servers", "mcp_tools", "mcp_server", "mcp_tool", "mcp_session"})
_MAX_TEXT = 254
_MIN_KEY, _MAX_KEY = 8, 128


def _text(value: object, name: str, *, min_len: int = 1, max_len: int = _MAX_TEXT) -> str:
    # What the checks below accept, in one test (as `engine.read_transfer` inlines it): a
    # printable string has no whitespace but the ASCII space, so its ends are the test.
    if (
        type(value) is str
        and min_len <= len(value) <= max_len
        and value.isprintable()
        and (value.isascii() or BLANK.search(value) is None)
        and value[0] != " "
        and value[-1] != " "
    ):
        return value
    if type(value) is not str:
        raise Unreadable(f"{name} must be a string, got {type(value).__name__}")
    if not min_len <= len(value) <= max_len:
        raise Unreadable(f"{name} must be {min_len} to {max_len} characters long")
    if value != value.strip() or not visible(value):
        raise Unreadable(
            f"{name} has surrounding whitespace or invisible characters: {_show(value)}"
        )
    return value


def _minor(value: object, name: str, *, least: int = 1) -> int:
    if type(value) is not int or value < least:
        raise Unreadable(f"{name} must be an integer >= {least} (minor units), got {_show(value)}")
    return value


def _code(value: object, name: str) -> str:
    if type(value) is not str or value not in MINOR_DIGITS:
        raise Unreadable(f"{name} {_show(value)} is not a known ISO 4217 code")
    return value


def _fields(context: object, required: tuple[str, ...], optional: frozenset[str]) -> dict[str, Any]:
    # `optional` holds the required and mcp fields too: a dict whose keys are all in it
    # has only string keys, so the general reading is for the others.
    if type(context) is dict and context.keys() <= optional and context.keys() >= _SET[required]:
        return context
    raw = _object(context, "context")
    if not raw.keys() <= optional:
        unknown = raw.keys() - optional
        raise Unreadable(f"context has unknown field(s) {', '.join(sorted(map(_show, unknown)))}")
    missing = [f for f in required if raw.get(f) is None]
    if missing:
        raise Unreadable(f"Missing required fields: {', '.join(missing)}")
    return raw


class RefundContext(NamedTuple):
    order_id: str
    customer_id: str
    amount: int
    currency: str
    region: str
    reason_code: str
    idempotency_key: str
    # Facts the reference contexts carry; read only under `context_facts`.
    order_currency: str | None = None
    order_total_minor: int | None = None
    already_refunded_minor: int | None = None


_REFUND_REQUIRED = (
    "order_id",
    "customer_id",
    "amount",
    "currency",
    "region",
    "reason_code",
    "idempotency_key",
)
_REFUND_OPTIONAL = frozenset(
    {"note", "merchant_case_id", "order_currency", "order_total_minor", "already_refunded_minor"}
).union(_REFUND_REQUIRED, _MCP)


def read_refund(context: object) -> RefundContext:
    raw = _fields(context, _REFUND_REQUIRED, _REFUND_OPTIONAL)
    for name in ("note", "merchant_case_id"):
        if raw.get(name) is not None:
            _text(raw[name], name, max_len=1000)
    total, refunded = raw.get("order_total_minor"), raw.get("already_refunded_minor")
    order_currency = raw.get("order_currency")
    return RefundContext(
        _text(raw["order_id"], "order_id"),
        _text(raw["customer_id"], "customer_id"),
        _minor(raw["amount"], "amount"),
        _code(raw["currency"], "currency"),
        _text(raw["region"], "region", max_len=8),
        _text(raw["reason_code"], "reason_code"),
        _text(raw["idempotency_key"], "idempotency_key", min_len=_MIN_KEY, max_len=_MAX_KEY),
        None if order_currency is None else _code(order_currency, "order_currency"),
        None if total is None else _minor(total, "order_total_minor", least=0),
        None if refunded is None else _minor(refunded, "already_refunded_minor", least=0),
    )


class PayoutContext(NamedTuple):
    amount: int
    currency: str
    destination_type: str  # a fact: read only under `context_facts`
    destination_id: str
    payout_method: str
    idempotency_key: str | None
    compliance_notes: str | None = None


_DESTINATION_TYPES = frozenset({"bank_account", "digital_wallet", "crypto_address"})
_PAYOUT_METHODS = frozenset({"wire_transfer", "ach", "crypto_transfer", "digital_wallet"})
# `idempotency_key` is a required field of the pack; missing, it fails the passport's
# `idempotency_required` rule (listed with the others), as a charge without one does.
_PAYOUT_REQUIRED = ("amount", "currency", "destination_type", "destination_id", "payout_method")
_PAYOUT_OPTIONAL = frozenset(
    {"idempotency_key", "description", "compliance_notes", "approval_required"}
).union(_PAYOUT_REQUIRED, _MCP)


def _one_of(value: object, name: str, allowed: frozenset[str]) -> str:
    if type(value) is not str or value not in allowed:
        raise Unreadable(f"{name} {_show(value)} is not one of {', '.join(sorted(allowed))}")
    return value


def _key(raw: Mapping[str, Any]) -> str | None:
    key = raw.get("idempotency_key")
    return (
        None if key is None else _text(key, "idempotency_key", min_len=_MIN_KEY, max_len=_MAX_KEY)
    )


def read_payout(context: object) -> PayoutContext:
    raw = _fields(context, _PAYOUT_REQUIRED, _PAYOUT_OPTIONAL)
    notes = raw.get("compliance_notes")
    if raw.get("description") is not None:
        _text(raw["description"], "description", max_len=1000)
    # The context's `approval_required` is the caller's claim: the passport decides.
    if raw.get("approval_required") is not None and type(raw["approval_required"]) is not bool:
        raise Unreadable("approval_required must be true or false")
    return PayoutContext(
        _minor(raw["amount"], "amount"),
        _code(raw["currency"], "currency"),
        _one_of(raw["destination_type"], "destination_type", _DESTINATION_TYPES),
        _text(raw["destination_id"], "destination_id"),
        _one_of(raw["payout_method"], "payout_method", _PAYOUT_METHODS),
        _key(raw),
        None if notes is None else _text(notes, "compliance_notes", max_len=1000),
    )


class ExecuteContext(NamedTuple):
    transaction_type: str
    amount: int
    currency: str
    asset_class: str
    source_account_id: str
    destination_account_id: str
    idempotency_key: str | None
    counterparty_id: str | None
    # Facts: read only under `context_facts`.
    source_account_type: str | None = None
    destination_account_type: str | None = None


_TX_TYPES = frozenset({"buy", "sell", "transfer", "short_sell"})
_EXECUTE_REQUIRED = (
    "transaction_type",
    "amount",
    "currency",
    "asset_class",
    "source_account_id",
    "destination_account_id",
)
_EXECUTE_OPTIONAL = frozenset(
    {"source_account_type", "idempotency_key", "destination_account_type", "counterparty_id"}
).union(_EXECUTE_REQUIRED, _MCP)


def _optional(raw: Mapping[str, Any], name: str) -> str | None:
    value = raw.get(name)
    return None if value is None else _text(value, name)


def read_execute(context: object) -> ExecuteContext:
    raw = _fields(context, _EXECUTE_REQUIRED, _EXECUTE_OPTIONAL)
    return ExecuteContext(
        _one_of(raw["transaction_type"], "transaction_type", _TX_TYPES),
        _minor(raw["amount"], "amount"),
        _code(raw["currency"], "currency"),
        _text(raw["asset_class"], "asset_class"),
        _text(raw["source_account_id"], "source_account_id"),
        _text(raw["destination_account_id"], "destination_account_id"),
        _key(raw),
        _optional(raw, "counterparty_id"),
        _optional(raw, "source_account_type"),
        _optional(raw, "destination_account_type"),
    )


_SET: dict[tuple[str, ...], frozenset[str]] = {
    f: frozenset(f) for f in (_REFUND_REQUIRED, _PAYOUT_REQUIRED, _EXECUTE_REQUIRED)
}
_READERS: dict[str, Callable[[object], Any]] = {
    REFUND_POLICY: read_refund,
    PAYOUT_POLICY: read_payout,
    EXECUTE_POLICY: read_execute,
}


# -- facts ------------------------------------------------------------------------------
class Order(NamedTuple):
    customer_id: str | None  # None: the context carried no customer of record
    total_minor: int | None
    currency: str | None
    refunded_minor: int


class Destination(NamedTuple):
    type: str
    added_at: datetime | None


class Unknown(Exception):
    """A fact the system of record did not give (-> vault.facts_unavailable)."""


def _record(facts: Facts, kind: str, key: str) -> Mapping[str, object]:
    record = facts(kind, key)
    if record is None:
        raise Unknown(f"{kind} {_show(key)} is not known to the system of record")
    if type(record) is not dict and not isinstance(record, Mapping):
        raise Unknown(f"the record of {kind} {_show(key)} is not a mapping")
    return record


def _fact(record: Mapping[str, object], kind: str, key: str, name: str, check: Any) -> Any:
    value = record.get(name)
    try:
        return check(value, name)
    except Unreadable:
        raise Unknown(
            f"the record of {kind} {_show(key)} has no readable {name}: {_show(value)}"
        ) from None


def _aware(value: object, name: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise Unreadable(f"{name} must be an aware datetime")
    return value


def order_of(facts: Facts, order_id: str) -> Order:
    record = _record(facts, ORDER, order_id)
    get = record.get
    customer, total, currency, refunded = (
        get("customer_id"),
        get("total_minor"),
        get("currency"),
        get("refunded_minor"),
    )
    # The usual record, in one test; any other is read field by field, to say which.
    if (
        type(customer) is str
        and type(total) is int
        and type(refunded) is int
        and type(currency) is str
        and total >= 0
        and refunded >= 0
        and currency in MINOR_DIGITS
        and _text(customer, "customer_id")
    ):
        return Order(customer, total, currency, refunded)
    return Order(
        _fact(record, ORDER, order_id, "customer_id", _text),
        _fact(record, ORDER, order_id, "total_minor", lambda v, n: _minor(v, n, least=0)),
        _fact(record, ORDER, order_id, "currency", _code),
        _fact(record, ORDER, order_id, "refunded_minor", lambda v, n: _minor(v, n, least=0)),
    )


def destination_of(facts: Facts, destination_id: str) -> Destination:
    record = _record(facts, DESTINATION, destination_id)
    return Destination(
        _fact(
            record,
            DESTINATION,
            destination_id,
            "type",
            lambda v, n: _one_of(v, n, _DESTINATION_TYPES),
        ),
        _fact(record, DESTINATION, destination_id, "added_at", _aware),
    )


def account_type(facts: Facts, account_id: str) -> str:
    return str(_fact(_record(facts, ACCOUNT, account_id), ACCOUNT, account_id, "type", _text))


# -- compiled passports -------------------------------------------------------------------
class _PackPlan(NamedTuple):
    """One passport's limits for one pack, read once."""

    policy: str
    void: tuple[Reason, ...]  # status, then capability: what makes it authorize nothing
    void_at: int  # where an expiry goes among them
    expires_by: float  # the expiry as a timestamp (never: infinity)
    limits: Any  # RefundLimits | PayoutLimits | ExecuteLimits | None
    rank: int  # the passport's assurance rank
    floor: int  # the pack's and the passport's minimum rank
    regions: frozenset[str]
    currencies: frozenset[str]  # supported: in the limits and (if listed) in the list
    head: tuple[Reason, ...]  # approval required
    codes: frozenset[str]  # the refund reason codes allowed


def _plan(passport: Passport, policy: str) -> _PackPlan:
    capability = CAPABILITY[policy]
    status = passport.status
    refused: tuple[Reason, ...] = (
        ()
        if status == "active"
        else (Reason(PASSPORT_SUSPENDED, f"Passport status is {status}", RULE_STATUS),)
    )
    limits = cast(
        "RefundLimits | PayoutLimits | ExecuteLimits | None", passport.pack_limits(capability)
    )
    ungranted = (
        (Reason(UNKNOWN_CAPABILITY, f"Passport does not grant {capability}", RULE_CAPABILITY),)
        if limits is None
        else ()
    )
    rank = ASSURANCE_RANK[passport.assurance_level]
    floor = ASSURANCE_RANK[_MIN_ASSURANCE[policy]]
    head: tuple[Reason, ...] = ()
    currencies: frozenset[str] = frozenset()
    if limits is not None:
        floor = max(floor, ASSURANCE_RANK[limits.require_assurance_at_least])
        if limits.approval_required:
            head += (
                Reason(
                    APPROVAL_REQUIRED, "Needs a human approval the agent cannot give", RULE_APPROVAL
                ),
            )
        if isinstance(limits, RefundLimits | PayoutLimits):
            currencies = frozenset(limits.currency_limits)
            if limits.supported_currencies is not None:
                currencies &= frozenset(limits.supported_currencies)
        else:  # the execute pack's caps are in USD: no other currency can be capped
            currencies = frozenset({"USD"})
    regions = frozenset(passport.regions)
    if isinstance(limits, RefundLimits) and limits.regions is not None:
        regions &= frozenset(limits.regions)
    return _PackPlan(
        policy,
        refused + ungranted,
        len(refused),
        math.inf
        if passport.never_expires or passport.expires_at is None
        else passport.expires_at.timestamp(),
        limits,
        rank,
        floor,
        regions,
        currencies,
        head,
        limits.reasons if isinstance(limits, RefundLimits) else frozenset(),
    )


def _assurance(rank: int, floor: int) -> tuple[Reason, ...]:
    if rank >= floor:
        return ()
    return (Reason(ASSURANCE_INSUFFICIENT, "Assurance level too low", RULE_ASSURANCE),)


# The refund pack's `assurance_rules`: the level an amount needs. Above the last tier the
# pack does not say: we require L4KYC (fail closed), the next level up.
_REFUND_TIERS = ((10_000, "L2"), (50_000, "L3"))


def refund_floor(amount: int) -> int:
    for ceiling, level in _REFUND_TIERS:
        if amount <= ceiling:
            return ASSURANCE_RANK[level]
    return ASSURANCE_RANK["L4KYC"]


def _money(minor: int, currency: str) -> str:
    return str(Money(minor, currency))


# -- decisions --------------------------------------------------------------------------
class Pending(NamedTuple):
    """A context read and its facts fetched, not yet judged against a ledger: the names
    of the ledger's tallies it reads, its key and currency say what a store must hold."""

    plan: _PackPlan
    context: Any
    facts: Any  # Order | Destination | tuple[str | None, str | None] | None
    now: float  # the instant judged, as a timestamp
    today: date
    tallies: tuple[str, ...]
    currency: str
    key: str | None


def _tallies(policy: str, ctx: Any, today: date) -> tuple[str, ...]:
    day = str(today)
    if policy == REFUND_POLICY:
        return (f"{policy}|daily|{day}|{ctx.currency}", f"{policy}|order|{ctx.order_id}")
    if policy == PAYOUT_POLICY:
        return (f"{policy}|count|{day}", f"{policy}|daily|{day}|{ctx.currency}")
    if ctx.counterparty_id is None:
        return ()
    return (f"{policy}|counterparty|{day}|{ctx.counterparty_id}",)


_ALLOW = (Reason(ALLOWED, "Transaction within limits and policy requirements"),)
_ACCOUNT_ALLOWED = (Reason(ALLOWED, "Account change permitted by the passport"),)
_KEY_USED = (Reason(IDEMPOTENCY_CONFLICT, "Idempotency key already used", RULE_KEY_USED),)
_NO_KEY = (
    Reason(INVALID_CONTEXT, "idempotency_key is required by the passport", RULE_KEY_REQUIRED),
)


_DAY = 86_400  # seconds: Unix time has no leap seconds, so whole days are UTC days


class Packs:
    """The other packs on one `engine.Guard` (its passport, clock and ledger).

    `facts` is the caller's system of record; `context_facts=True` takes the facts from
    the contexts instead (the packs' reference tests; the CLI's `--context-facts`).
    With neither, a pack that needs facts is not decided.
    """

    def __init__(
        self, guard: Guard, *, facts: Facts | None = None, context_facts: bool = False
    ) -> None:
        if facts is not None and context_facts:
            raise ValueError("give facts or context_facts=True, not both")
        self.guard = guard
        self.facts = facts
        self.context_facts = context_facts
        self._plans: dict[str, _PackPlan] = {}
        self._day = (0.0, 0.0, date.min)  # [start, end) of `today` as timestamps, and it

    def plan(self, policy: str, passport: Passport | None) -> _PackPlan:
        if passport is None or passport is self.guard.passport:
            kept = self._plans.get(policy)
            if kept is None:
                kept = self._plans[policy] = _plan(self.guard.passport, policy)
            return kept
        return _plan(passport, policy)

    def check_account_change(self, field: str, passport: Passport | None = None) -> Decision:
        """Judge a change of the account's detail `field` (`update_account`). No OAP pack
        limits an account's details: acting on the account is the transaction-execute
        capability's, with its assurance and approval, and our `x_vault_account_fields`
        names the fields it may change (`"*"`: any). Fail closed: limits without the key
        permit no field. Records nothing (no tally counts account changes). Never raises."""
        try:
            plan = self.plan(EXECUTE_POLICY, passport)
            if plan.void:
                return Decision(False, plan.void)
            limits: ExecuteLimits = plan.limits
            out = _assurance(plan.rank, plan.floor) + plan.head
            fields = limits.x_vault_account_fields or ()
            if WILDCARD not in fields and field not in fields:
                listed = "none" if not fields else ", ".join(map(_show, fields))
                words = f"Account field {_show(field)} may not be changed (permitted: {listed})"
                out += (Reason(ACCOUNT_FIELD_FORBIDDEN, words, RULE_ACCOUNT_FIELD),)
            if out:
                return Decision(False, out)
            return Decision(True, _ACCOUNT_ALLOWED)
        except Exception as exc:  # noqa: BLE001 - fail closed on anything unexpected
            return deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}")

    def check_context(
        self, policy: str, context: object, passport: Passport | None = None
    ) -> Decision:
        """Judge a context of `policy` (an alias too) and, if allowed, record it. Never raises."""
        pending = self.prepare(policy, context, passport)
        if isinstance(pending, Decision):
            return pending
        return self.settle(pending, self.guard.ledger)

    def prepare(
        self,
        policy: str,
        context: object,
        passport: Passport | None = None,
        now: datetime | None = None,
    ) -> Pending | Decision:
        """Read the context, the clock (or `now`) and the facts; a Decision where that
        already decides (unreadable, a void passport, facts unavailable). Never raises."""
        try:
            name = policy_of(policy)
            if name is None or name == POLICY_ID:
                return deny(EVALUATION_ERROR, f"policy {_show(policy)} is not a pack this reads")
            try:
                ctx = _READERS[name](context)
            except Unreadable as exc:
                return deny(INVALID_CONTEXT, str(exc))
            plan = self.plan(name, passport)
            if now is None and self.guard._clock is not None:
                now = self.guard._clock()
            if now is None:  # the system clock, as a timestamp: one comparison a day
                t = _now()
            elif type(now) is datetime and now.utcoffset() is not None:
                t = now.timestamp()
            else:
                utc_day(now)  # raises ClockError, in words
                raise AssertionError("utc_day accepted what it refuses")
            start, end, today = self._day
            if not start <= t < end:
                number = int(t // _DAY)
                today = datetime.fromtimestamp(number * _DAY, UTC).date()
                self._day = (number * _DAY, (number + 1) * _DAY, today)
            void = plan.void
            if t >= plan.expires_by:
                expired = (Reason(PASSPORT_EXPIRED, "Passport has expired", RULE_EXPIRY),)
                void = void[: plan.void_at] + expired + void[plan.void_at :]
            if void:
                return Decision(False, void)
            try:
                facts = self._facts(name, ctx)
            except Unknown as exc:
                return deny(FACTS_UNAVAILABLE, str(exc), rule=RULE_FACTS)
            key = ctx.idempotency_key
            return Pending(
                plan, ctx, facts, t, today, _tallies(name, ctx, today), ctx.currency, key
            )
        except ClockError as exc:
            return deny(EVALUATION_ERROR, str(exc))
        except Exception as exc:  # noqa: BLE001 - fail closed on anything unexpected
            return deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}")

    def _facts(self, policy: str, ctx: Any) -> Any:
        facts = self.facts
        if self.context_facts:
            if policy == REFUND_POLICY:
                return Order(
                    None, ctx.order_total_minor, ctx.order_currency, ctx.already_refunded_minor or 0
                )
            if policy == PAYOUT_POLICY:
                return Destination(ctx.destination_type, None)
            return (ctx.source_account_type, ctx.destination_account_type)
        if facts is None:
            raise Unknown(
                f"{policy} needs the caller's system of record ({', '.join(NEEDS_FACTS[policy])}): "
                "the guard was given no facts callback"
            )
        try:
            if policy == REFUND_POLICY:
                return order_of(facts, ctx.order_id)
            if policy == PAYOUT_POLICY:
                return destination_of(facts, ctx.destination_id)
            return (
                account_type(facts, ctx.source_account_id),
                account_type(facts, ctx.destination_account_id),
            )
        except Unknown:
            raise
        except Exception as exc:  # noqa: BLE001 - a system of record that fails denies
            raise Unknown(f"the system of record failed: {type(exc).__name__}") from None

    def settle(self, pending: Pending, ledger: Ledger) -> Decision:
        """Judge `pending` against `ledger` and, if allowed, record it there. Never raises."""
        try:
            plan, ctx = pending.plan, pending.context
            reasons = plan.head
            if plan.policy == REFUND_POLICY:
                reasons = self._refund(plan, ctx, pending, ledger)
            elif plan.policy == PAYOUT_POLICY:
                reasons = self._payout(plan, ctx, pending, ledger)
            else:
                reasons = self._execute(plan, ctx, pending, ledger)
            if reasons:
                return Decision(False, reasons)
            tallies = ledger.tallies
            if plan.policy == REFUND_POLICY:
                steps: tuple[int, ...] = (ctx.amount, ctx.amount)
            elif plan.policy == PAYOUT_POLICY:
                steps = (1, ctx.amount)
            else:
                steps = () if ctx.counterparty_id is None else (ctx.amount,)
            for name, step in zip(pending.tallies, steps, strict=True):
                tallies[name] = tallies.get(name, 0) + step
            if pending.key is not None:
                ledger.keys.add(pending.key)
            return Decision(True, _ALLOW)
        except Exception as exc:  # noqa: BLE001 - fail closed on anything unexpected
            return deny(EVALUATION_ERROR, f"evaluation failed: {type(exc).__name__}")

    def _currency(self, plan: _PackPlan, currency: str) -> tuple[Reason, ...]:
        if currency in plan.currencies:
            return ()
        return (
            Reason(CURRENCY_UNSUPPORTED, f"Currency {currency} is not supported", RULE_CURRENCY),
        )

    def _refund(
        self, plan: _PackPlan, ctx: RefundContext, pending: Pending, ledger: Ledger
    ) -> tuple[Reason, ...]:
        limits: RefundLimits = plan.limits
        order: Order = pending.facts
        daily_name, order_name = pending.tallies
        out = _assurance(plan.rank, max(plan.floor, refund_floor(ctx.amount))) + plan.head
        cap = limits.currency_limits.get(ctx.currency) if ctx.currency in plan.currencies else None
        out += self._currency(plan, ctx.currency)
        if cap is not None and ctx.amount > cap.max_per_tx:
            words = f"Amount exceeds the per-refund limit of {_money(cap.max_per_tx, ctx.currency)}"
            out += (Reason(LIMIT_EXCEEDED, words, RULE_PER_TX),)
        if ctx.reason_code not in plan.codes:
            words = f"Reason code {_show(ctx.reason_code)} is not allowed"
            out += (Reason(INVALID_REASON_CODE, words, RULE_REASON),)
        if order.currency is not None and ctx.currency != order.currency:
            words = f"Refund in {ctx.currency} of an order in {order.currency}"
            out += (Reason(CROSS_CURRENCY_DENIED, words, RULE_CROSS_CURRENCY),)
        if order.customer_id is not None and ctx.customer_id != order.customer_id:
            words = f"Customer {_show(ctx.customer_id)} is not the order's customer"
            out += (Reason(CUSTOMER_MISMATCH, words, RULE_ORDER_CUSTOMER),)
        if order.total_minor is not None:
            # Both the record and our ledger only ever undercount what was refunded (a
            # refund allowed and not yet booked; one made elsewhere): the larger counts.
            refunded = max(order.refunded_minor, ledger.tallies.get(order_name, 0))
            if refunded + ctx.amount > order.total_minor:
                words = (
                    f"Refunds would exceed the order's total of {order.total_minor}: "
                    f"{refunded} already refunded (minor units)"
                )
                out += (Reason(LIMIT_EXCEEDED, words, RULE_ORDER_BALANCE),)
        if cap is not None and cap.daily_cap is not None:
            spent = ledger.tallies.get(daily_name, 0)
            if spent + ctx.amount > cap.daily_cap:
                words = (
                    f"Daily refund cap of {_money(cap.daily_cap, ctx.currency)} exceeded: "
                    f"{_money(spent, ctx.currency)} already allowed today"
                )
                out += (Reason(LIMIT_EXCEEDED, words, RULE_DAILY),)
        if ctx.idempotency_key in ledger.keys:
            out += _KEY_USED
        if ctx.region not in plan.regions:
            out += (
                Reason(REGION_BLOCKED, f"Region {_show(ctx.region)} not allowed", RULE_REGION_AUTH),
            )
        return out

    def _payout(
        self, plan: _PackPlan, ctx: PayoutContext, pending: Pending, ledger: Ledger
    ) -> tuple[Reason, ...]:
        limits: PayoutLimits = plan.limits
        destination: Destination = pending.facts
        count_name, daily_name = pending.tallies
        out: tuple[Reason, ...] = (
            _NO_KEY if ctx.idempotency_key is None and limits.idempotency_required else ()
        )
        out += _assurance(plan.rank, plan.floor) + plan.head
        cap = limits.currency_limits.get(ctx.currency) if ctx.currency in plan.currencies else None
        out += self._currency(plan, ctx.currency)
        if cap is not None and ctx.amount > cap.max_per_tx:
            words = f"Amount exceeds the per-payout limit of {_money(cap.max_per_tx, ctx.currency)}"
            out += (Reason(LIMIT_EXCEEDED, words, RULE_PER_TX),)
        if destination.type not in limits.allowed_destination_types:
            words = f"Destination type {destination.type} is not allowed"
            out += (Reason(DESTINATION_TYPE_FORBIDDEN, words, RULE_DESTINATION_TYPE),)
        allowed = limits.allowed_recipients
        if WILDCARD not in allowed and ctx.destination_id not in allowed:
            words = f"Destination {_show(ctx.destination_id)} not in allowed_recipients"
            out += (Reason(RECIPIENT_FORBIDDEN, words, RULE_RECIPIENT),)
        hold = limits.x_vault_destination_hold_hours
        if hold is not None and (
            destination.added_at is None
            or pending.now - destination.added_at.timestamp() < hold * 3600
        ):
            words = f"Destination added less than {hold} hours ago (or when is not recorded)"
            out += (Reason(DESTINATION_TOO_NEW, words, RULE_DESTINATION_HOLD),)
        made = ledger.tallies.get(count_name, 0)
        if made >= limits.max_payouts_per_day:
            words = f"Daily payout count of {limits.max_payouts_per_day} reached"
            out += (Reason(LIMIT_EXCEEDED, words, RULE_PAYOUT_COUNT),)
        if cap is not None and cap.daily_cap is not None:
            spent = ledger.tallies.get(daily_name, 0)
            if spent + ctx.amount > cap.daily_cap:
                words = f"Daily payout cap of {_money(cap.daily_cap, ctx.currency)} exceeded"
                out += (Reason(LIMIT_EXCEEDED, words, RULE_DAILY),)
        if limits.compliance_checks_required and not ctx.compliance_notes:
            words = "Compliance checks are required: no compliance_notes"
            out += (Reason(COMPLIANCE_CHECK_REQUIRED, words, RULE_COMPLIANCE),)
        if ctx.idempotency_key is not None and ctx.idempotency_key in ledger.keys:
            out += _KEY_USED
        return out

    def _execute(
        self, plan: _PackPlan, ctx: ExecuteContext, pending: Pending, ledger: Ledger
    ) -> tuple[Reason, ...]:
        limits: ExecuteLimits = plan.limits
        source, destination = pending.facts
        out: tuple[Reason, ...] = (
            _NO_KEY if ctx.idempotency_key is None and limits.idempotency_required else ()
        )
        out += _assurance(plan.rank, plan.floor) + plan.head
        out += self._currency(plan, ctx.currency)
        if ctx.transaction_type not in limits.allowed_transaction_types:
            words = f"Transaction type {ctx.transaction_type} is not allowed"
            out += (Reason(ACTION_FORBIDDEN, words, RULE_TX_TYPE),)
        if ctx.asset_class not in limits.allowed_asset_classes:
            words = f"Asset class {_show(ctx.asset_class)} is not allowed"
            out += (Reason(ASSET_CLASS_FORBIDDEN, words, RULE_ASSET_CLASS),)
        if ctx.amount > limits.max_exposure_per_tx_usd:
            cap_usd = limits.max_exposure_per_tx_usd
            words = f"Amount {ctx.amount} exceeds maximum exposure limit {cap_usd}"
            out += (Reason(LIMIT_EXCEEDED, words, RULE_EXPOSURE),)
        # The account rules judge a source type the record (or, in context mode, the
        # context) gives; without one there is nothing to judge, as upstream reads it.
        if source is not None and source in limits.restricted_source_account_types:
            words = f"Source account type {_show(source)} is restricted"
            out += (Reason(ACCOUNT_TYPE_RESTRICTED, words, RULE_SEGREGATION),)
        if source is not None and source not in limits.allowed_source_account_types:
            words = f"Source account type {_show(source)} is not allowed"
            out += (Reason(ACCOUNT_TYPE_RESTRICTED, words, RULE_ACCOUNT_TYPE),)
        if source == "client_funds" and destination == "proprietary":
            words = "Cannot transfer from client funds to proprietary accounts"
            out += (Reason(COMMINGLING_FORBIDDEN, words, RULE_COMMINGLING),)
        if ctx.counterparty_id is not None:
            (name,) = pending.tallies
            exposed = ledger.tallies.get(name, 0)
            if exposed + ctx.amount > limits.max_exposure_per_counterparty_usd:
                words = (
                    f"Amount {ctx.amount} exceeds counterparty exposure limit "
                    f"{limits.max_exposure_per_counterparty_usd} ({exposed} already today)"
                )
                out += (Reason(COUNTERPARTY_LIMIT_EXCEEDED, words, RULE_COUNTERPARTY),)
        if ctx.idempotency_key is not None and ctx.idempotency_key in ledger.keys:
            out += _KEY_USED
        return out
