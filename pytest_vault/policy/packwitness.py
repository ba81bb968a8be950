"""Witness builders for the other packs' fields (`fields.FIELDS`): refund, payout and
transaction execute, and the account's fields.

A candidate is a pack context (`witness.PACK`) with the facts it is judged on as the
step's own system of record (an order whose customer is the refund's, whose total is
far above any cap and nothing refunded of it; a payout destination of a type the
permitting side allows, added ten years before; accounts of a type it allows), or an
account change (`witness.ACCOUNT_CHANGE`). So only the changed dimension decides: the
facts are chosen to pass every rule they feed, on both sides where they can. The base
context is one the permitting side `a` allows (a currency, reason code, region,
destination, transaction type and asset class it permits, the other side's first where
they agree; an amount within both sides' caps), and the builder varies one dimension
of it, as the charge pack's builders vary a transfer (`witness.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from pytest_vault.guard.money import MINOR_DIGITS
from pytest_vault.guard.packs import (
    EXECUTE_POLICY,
    PAYOUT_POLICY,
    REFUND_POLICY,
)
from pytest_vault.guard.passport import (
    EXECUTE,
    PAYOUT,
    REFUND,
    WILDCARD,
    ExecuteLimits,
    PayoutLimits,
    RefundLimits,
)
from pytest_vault.policy.witness import (
    ACCOUNT_CHANGE,
    PACK,
    Candidate,
    Plan,
    Search,
    Side,
    any_call,
    money,
    parts,
)

# Each capability with another pack, and its pack.
POLICY = {REFUND: REFUND_POLICY, PAYOUT: PAYOUT_POLICY, EXECUTE: EXECUTE_POLICY}
ORDER_ID, CUSTOMER = "witness-order", "witness-customer"
SOURCE, PAYEE = "witness-account", "witness-payee"
# A payee's account type: neither client funds nor proprietary (no commingling).
PAYEE_TYPE = "external"
_TOTAL = 10**15  # an order's total no cap reaches
_METHOD = {
    "bank_account": "ach",
    "digital_wallet": "digital_wallet",
    "crypto_address": "crypto_transfer",
}
_INF = float("inf")


def _second(search: Search) -> datetime:
    """The search's instant to the second: a witness's `added_at` reads plainly."""
    return search.now.replace(microsecond=0)


def capability_of(pointer: str) -> str:
    """The capability a `/limits/<capability>/...` pointer is under."""
    return parts(pointer)[1]


def granted(side: Side, capability: str) -> Any:
    """The side's limits of `capability` where it grants it, else None."""
    return side.passport.pack_limits(capability)


def _prefer(mine: Sequence[str], theirs: Sequence[str] | None) -> list[str]:
    """`mine`, those also in `theirs` first (once each)."""
    listed = list(dict.fromkeys(mine))
    if theirs is None:
        return listed
    return [x for x in listed if x in theirs] + [x for x in listed if x not in theirs]


# -- currencies and amounts ---------------------------------------------------------------------


def currencies(limits: RefundLimits | PayoutLimits) -> dict[str, tuple[int, float]]:
    """The currencies the limits permit (in the map and, if listed, supported, and known
    to the guard), with each one's per-call and daily caps."""
    supported = limits.supported_currencies
    return {
        cur: (cap.max_per_tx, _INF if cap.daily_cap is None else cap.daily_cap)
        for cur, cap in limits.currency_limits.items()
        if (supported is None or cur in supported) and cur in MINOR_DIGITS
    }


def caps(limits: BaseModel | None, currency: str) -> tuple[int, float]:
    """(per call, per day) in `currency`; (0, 0) where it permits none."""
    if isinstance(limits, RefundLimits | PayoutLimits):
        return currencies(limits).get(currency, (0, 0))
    if isinstance(limits, ExecuteLimits) and currency == "USD":
        return limits.max_exposure_per_tx_usd, limits.max_exposure_per_counterparty_usd
    return 0, 0


def _amount(currency: str, *ceilings: float) -> int:
    """One major unit, or less where a ceiling is lower (never below one minor unit);
    refunds stay within the pack's L2 tier ($100)."""
    return int(max(1, min(10 ** MINOR_DIGITS[currency], *ceilings)))


# -- base contexts ---------------------------------------------------------------------------


class Base:
    """The dimensions of a context `a` allows, for one pack; `step` varies one of them."""

    def __init__(self, policy: str, dims: dict[str, Any]) -> None:
        self.policy = policy
        self.dims = dims

    def step(self, n: int = 1, **change: Any) -> dict[str, Any]:
        d = {**self.dims, **change}
        key = f"witness-{n:04d}"
        if self.policy == REFUND_POLICY:
            context = {
                "order_id": ORDER_ID,
                "customer_id": CUSTOMER,
                "amount": d["amount"],
                "currency": d["currency"],
                "region": d["region"],
                "reason_code": d["reason"],
                "idempotency_key": key,
            }
            order = {
                "customer_id": CUSTOMER,
                "total_minor": _TOTAL,
                "currency": d["currency"],
                "refunded_minor": 0,
            }
            return {
                "policy": self.policy,
                "context": context,
                "facts": {"order": {ORDER_ID: order}},
            }
        if self.policy == PAYOUT_POLICY:
            context = {
                "amount": d["amount"],
                "currency": d["currency"],
                "destination_type": d["type"],
                "destination_id": d["destination"],
                "payout_method": _METHOD[d["type"]],
            }
            if d["key"]:
                context["idempotency_key"] = key
            if d["notes"]:
                context["compliance_notes"] = "witness: checks done"
            record = {"type": d["type"], "added_at": d["added_at"]}
            facts = {"payout_destination": {d["destination"]: record}}
            return {"policy": self.policy, "context": context, "facts": facts}
        context = {
            "transaction_type": d["type"],
            "amount": d["amount"],
            "currency": "USD",
            "asset_class": d["asset"],
            "source_account_id": SOURCE,
            "destination_account_id": PAYEE,
            "counterparty_id": PAYEE,
        }
        if d["key"]:
            context["idempotency_key"] = key
        accounts = {SOURCE: {"type": d["source"]}, PAYEE: {"type": PAYEE_TYPE}}
        return {"policy": self.policy, "context": context, "facts": {"account": accounts}}


def _first(values: Sequence[str]) -> str | None:
    return values[0] if values else None


def _usable(limits: ExecuteLimits) -> list[str]:
    """The source account types the limits allow and do not restrict."""
    restricted = limits.restricted_source_account_types
    return [t for t in limits.allowed_source_account_types if t not in restricted]


def bases(search: Search, capability: str, a: Side, d: Side, **fixed: Any) -> list[Base]:
    """Contexts `a` allows (`fixed` dimensions as given), the likeliest to be allowed by
    `d` too first; none where `a` does not grant the capability."""
    al, dl = granted(a, capability), granted(d, capability)
    if isinstance(al, RefundLimits):
        return _refund_bases(al, dl if isinstance(dl, RefundLimits) else None, a, d, fixed)
    if isinstance(al, PayoutLimits):
        theirs = dl if isinstance(dl, PayoutLimits) else None
        return _payout_bases(search, al, theirs, fixed)
    if isinstance(al, ExecuteLimits):
        return _execute_bases(al, dl if isinstance(dl, ExecuteLimits) else None, fixed)
    return []


def _refund_bases(
    al: RefundLimits, theirs: RefundLimits | None, a: Side, d: Side, fixed: dict[str, Any]
) -> list[Base]:
    regions = [r for r in a.passport.regions if al.regions is None or r in al.regions]
    d_regions = None
    if theirs is not None:
        d_regions = [r for r in d.passport.regions if theirs.regions is None or r in theirs.regions]
    mine = currencies(al)
    d_curs = None if theirs is None else list(currencies(theirs))
    d_reasons = None if theirs is None else sorted(theirs.reasons)
    out: list[Base] = []
    for cur in [fixed["currency"]] if "currency" in fixed else _prefer(sorted(mine), d_curs)[:2]:
        if cur not in mine:
            continue
        ceilings = [c for c in (*mine[cur], *caps(theirs, cur)) if c >= 1]
        dims = {
            "amount": _amount(cur, *ceilings, 10_000),
            "currency": cur,
            "region": _first(_prefer(regions, d_regions)),
            "reason": _first(_prefer(sorted(al.reasons), d_reasons)),
        } | fixed
        if dims["region"] is not None and dims["reason"] is not None:
            out.append(Base(REFUND_POLICY, dims))
    return out


def _payout_bases(
    search: Search, al: PayoutLimits, theirs: PayoutLimits | None, fixed: dict[str, Any]
) -> list[Base]:
    mine = currencies(al)
    d_curs = None if theirs is None else list(currencies(theirs))
    anyone = WILDCARD in al.allowed_recipients
    d_named = [] if theirs is None else theirs.allowed_recipients
    # Those `a` permits, those `d` permits too first (with `"*"`, `d`'s own names).
    named = [r for r in (*al.allowed_recipients, *(d_named if anyone else ())) if r != WILDCARD]
    destinations = _prefer(named, d_named)[:1]
    if anyone:
        destinations.append("witness-destination")
    d_types = None if theirs is None else list(theirs.allowed_destination_types)
    types = _prefer(sorted(al.allowed_destination_types), d_types)
    notes = al.compliance_checks_required or (
        theirs is not None and theirs.compliance_checks_required
    )
    key = al.idempotency_required or (theirs is not None and theirs.idempotency_required)
    out: list[Base] = []
    for cur in [fixed["currency"]] if "currency" in fixed else _prefer(sorted(mine), d_curs)[:1]:
        if cur not in mine or not types:
            continue
        ceilings = [c for c in (*mine[cur], *caps(theirs, cur)) if c >= 1]
        for destination in [fixed["destination"]] if "destination" in fixed else destinations[:2]:
            dims = {
                "amount": _amount(cur, *ceilings),
                "currency": cur,
                "destination": destination,
                "type": types[0],
                "added_at": (_second(search) - timedelta(days=3650)).isoformat(),
                "notes": notes,
                "key": key,
            } | fixed
            out.append(Base(PAYOUT_POLICY, dims))
    return out


def _execute_bases(
    al: ExecuteLimits, theirs: ExecuteLimits | None, fixed: dict[str, Any]
) -> list[Base]:
    if caps(al, "USD")[0] < 1:
        return []
    ceilings = [c for c in (*caps(al, "USD"), *caps(theirs, "USD")) if c >= 1]
    d_types = None if theirs is None else list(theirs.allowed_transaction_types)
    d_assets = None if theirs is None else theirs.allowed_asset_classes
    dims = {
        "amount": _amount("USD", *ceilings),
        "type": _first(_prefer(sorted(al.allowed_transaction_types), d_types)),
        "asset": _first(_prefer(al.allowed_asset_classes, d_assets)),
        "source": _first(_prefer(_usable(al), None if theirs is None else _usable(theirs))),
        "key": al.idempotency_required or (theirs is not None and theirs.idempotency_required),
    } | fixed
    if None in (dims["type"], dims["asset"], dims["source"]):
        return []
    return [Base(EXECUTE_POLICY, dims)]


def _candidates(found: Sequence[Base], **change: Any) -> list[Candidate]:
    return [Candidate(PACK, (b.step(**change),)) for b in found]


# -- the builders ----------------------------------------------------------------------------


def pack_any_plan(search: Search, pointer: str, value: Any, a: Side, d: Side) -> Plan:
    """Any context `a` allows: a field that decides every context of its pack alike
    (approval, assurance, the capability)."""
    capability = value if pointer == "/capabilities" else capability_of(pointer)
    if capability not in POLICY:
        return Plan([])
    return Plan(_candidates(bases(search, capability, a, d)))


def pack_switch_plan(search: Search, pointer: str, value: Any, a: Side, d: Side) -> Plan:
    """The base contexts without what a switch demands (an idempotency key, compliance
    notes)."""
    capability = capability_of(pointer)
    name = parts(pointer)[-1]
    dimension = {"idempotency_required": "key", "compliance_checks_required": "notes"}[name]
    return Plan(_candidates(bases(search, capability, a, d, **{dimension: False})))


# The dimension a listed entry sets, by field name.
_DIMENSION = {
    "refund_reason_codes": "reason",
    "reason_codes": "reason",
    "regions": "region",
    "allowed_destination_types": "type",
    "allowed_recipients": "destination",
    "allowed_transaction_types": "type",
    "allowed_asset_classes": "asset",
    "allowed_source_account_types": "source",
    "restricted_source_account_types": "source",
}


def pack_entry_plan(search: Search, pointer: str, value: Any, a: Side, d: Side) -> Plan:
    """The base contexts with the entry added or removed as their dimension (for `"*"`
    or a whole list, an entry only `a` permits)."""
    capability = capability_of(pointer)
    name = parts(pointer)[2]
    dimension = _DIMENSION[name]
    if isinstance(value, str) and value != WILDCARD:
        entries = [value]
    else:
        entries = _only_a(capability, name, a, d)
    out: list[Candidate] = []
    for entry in entries[:2]:
        fixed = {dimension: entry}
        if name == "allowed_destination_types":
            fixed["type"] = entry
        out += _candidates(bases(search, capability, a, d, **fixed))
    return Plan(out)


def _only_a(capability: str, name: str, a: Side, d: Side) -> list[str]:
    """Entries `a`'s list has and `d`'s lacks; a stranger where `a`'s has `"*"`."""
    al, dl = granted(a, capability), granted(d, capability)
    mine = list(getattr(al, name, None) or [])
    theirs = list(getattr(dl, name, None) or [])
    out = [e for e in mine if e != WILDCARD and e not in theirs]
    if WILDCARD in mine:
        out.append("witness-destination" if name == "allowed_recipients" else "witness-entry")
    return out


def pack_currency_plan(search: Search, pointer: str, value: Any, a: Side, d: Side) -> Plan:
    """Contexts in the currency whose support changed."""
    capability = capability_of(pointer)
    rest = parts(pointer)[2:]
    if rest[0] == "supported_currencies":
        cur = value if isinstance(value, str) else None
    else:
        cur = rest[1] if len(rest) > 1 else None
    if cur is None:
        return Plan(_candidates(bases(search, capability, a, d)))
    if cur not in MINOR_DIGITS:
        return Plan([], f"the guard knows no currency {cur}")
    return Plan(_candidates(bases(search, capability, a, d, currency=cur)))


def _currency_at(pointer: str) -> str:
    rest = parts(pointer)
    return rest[3] if len(rest) > 3 and rest[2] == "currency_limits" else "USD"


def pack_per_tx_plan(search: Search, pointer: str, value: Any, a: Side, d: Side) -> Plan:
    """An amount above `d`'s per-call cap and within `a`'s caps (the execute pack: its
    `max_exposure_per_tx_usd`, in USD cents)."""
    capability = capability_of(pointer)
    cur = _currency_at(pointer)
    (high, a_day), (low, d_day) = (
        caps(granted(a, capability), cur),
        caps(granted(d, capability), cur),
    )
    if high <= low:
        return Plan([])
    top = int(min(high, a_day))
    amounts = [x for x in dict.fromkeys((int(min(top, d_day)), top)) if x > low]
    if not amounts:
        return Plan([], f"the {a.name} passport's daily cap {money(int(a_day), cur)} binds first")
    out: list[Candidate] = []
    for x in amounts:
        for b in bases(search, capability, a, d, **_money(capability, cur)):
            out += _candidates([b], amount=x)
    return Plan(out)


def _money(capability: str, cur: str) -> dict[str, Any]:
    return {} if capability == EXECUTE else {"currency": cur}


def pack_daily_plan(search: Search, pointer: str, value: Any, a: Side, d: Side) -> Plan:
    """Earlier contexts up to `d`'s daily cap (the execute pack: its exposure to one
    counterparty a day), each within both per-call caps, then one past it within `a`'s."""
    capability = capability_of(pointer)
    cur = _currency_at(pointer)
    (a_per, high), (d_per, low) = (
        caps(granted(a, capability), cur),
        caps(granted(d, capability), cur),
    )
    if a_per < 1:
        return Plan([], f"the {a.name} passport permits no amount in {cur}")
    if high <= low:
        return Plan([])
    step = int(min(a_per, d_per)) if d_per >= 1 else 0
    plans: list[tuple[int, int, int]] = []  # (earlier contexts, each, the last)
    low_i = int(low)
    if step >= 1:
        n = low_i // step
        rest = low_i - n * step
        if (n + 1) * step <= high:
            plans.append((n, step, step))
        if n * step + rest + 1 <= high and rest + 1 <= a_per:
            plans.append((n, step, rest + 1))
    elif low_i < min(a_per, high):
        plans.append((0, 0, int(min(a_per, high))))
    out: list[Candidate] = []
    bound = None
    for n, each, last in plans:
        if n > search.bounds.earlier:
            bound = bound or (
                f"a witness needs {n:,} earlier contexts to reach the daily cap "
                f"{money(low_i, cur)} (the bound is {search.bounds.earlier})"
            )
            continue
        for b in bases(search, capability, a, d, **_money(capability, cur)):
            steps = tuple(b.step(i + 1, amount=each) for i in range(n))
            out.append(Candidate(PACK, (*steps, b.step(n + 1, amount=last))))
    return Plan(out, None, bound)


def payout_count_plan(search: Search, pointer: str, value: Any, a: Side, d: Side) -> Plan:
    """One payout more than `d`'s daily count, each of the least amount."""
    al, dl = granted(a, PAYOUT), granted(d, PAYOUT)
    if not isinstance(al, PayoutLimits) or not isinstance(dl, PayoutLimits):
        return Plan([])
    k = dl.max_payouts_per_day
    if al.max_payouts_per_day <= k:
        return Plan([])
    if k > search.bounds.earlier:
        return Plan(
            [],
            None,
            f"a witness needs {k:,} earlier payouts (the bound is {search.bounds.earlier})",
        )
    out = []
    for b in bases(search, PAYOUT, a, d):
        out.append(Candidate(PACK, tuple(b.step(i + 1, amount=1) for i in range(k + 1))))
    return Plan(out)


def hold_plan(search: Search, pointer: str, value: Any, a: Side, d: Side) -> Plan:
    """A destination added as long ago as `a`'s hold, which `d`'s longer hold refuses."""
    al, dl = granted(a, PAYOUT), granted(d, PAYOUT)
    if not isinstance(al, PayoutLimits) or not isinstance(dl, PayoutLimits):
        return Plan([])
    mine, theirs = al.x_vault_destination_hold_hours or 0, dl.x_vault_destination_hold_hours
    if theirs is None or theirs <= mine:
        return Plan([])
    added = (_second(search) - timedelta(hours=mine)).isoformat()
    # Judged at the search's instant: later, the destination is older (never a case).
    steps = [b.step() for b in bases(search, PAYOUT, a, d, added_at=added)]
    return Plan([Candidate(PACK, (step,), search.now) for step in steps])


def account_field_plan(search: Search, pointer: str, value: Any, a: Side, d: Side) -> Plan:
    """A change of the account field only `a` permits (a stranger field for `"*"`)."""
    if isinstance(value, str) and value != WILDCARD:
        fields = [value]
    else:
        al, dl = granted(a, EXECUTE), granted(d, EXECUTE)
        mine = list(getattr(al, "x_vault_account_fields", None) or [])
        theirs = list(getattr(dl, "x_vault_account_fields", None) or [])
        fields = [f for f in mine if f != WILDCARD and f not in theirs]
        if WILDCARD in mine:
            fields.append("email" if "email" not in theirs else "witness_field")
    return Plan([Candidate(ACCOUNT_CHANGE, ({"field": f},)) for f in fields[:2]])


def capability_plan(search: Search, pointer: str, value: Any, a: Side, d: Side) -> Plan:
    """A capability granted or withdrawn: a context of its pack, or any transfer_funds
    call for the charge's (and for capabilities no pack reads, which decide nothing)."""
    if value in POLICY:
        return pack_any_plan(search, pointer, value, a, d)
    return any_call(search, pointer, value, a, d)
