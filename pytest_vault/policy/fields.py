"""The passport's fields, each known once: one table (`FIELDS`) shared by diff, lint and
the witness search.

An entry (`Field`) is one field the guard reads, or one part of it: the JSON pointer(s)
its changes and findings are reported at, the engine rules a change of it can flip (a
witness refused for these alone is the change's own), its direction-of-change classifier
(what `diff` reports of a change of it: `widens`, `narrows` or `neutral`, by the guard's
semantics) and its witness builder (the candidate calls the search judges, `witness.py`).
`diff_passports` runs the classifiers in the table's order, `Search.find` is given the
entry of each change, lint writes its findings at the entries' pointers. A new field the
engine enforces is one entry here.

A classifier compares the field in its `scope`: two passports, two readable
`limits.payments.charge`, or one currency's two caps (`Cap`; run by `currency_limits`'s
classifier, currency by currency, so each currency's changes stay together). An entry
without a classifier is reported by another's (`within`): a capability's params with the
capabilities, in their order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, ValidationError

from pytest_vault.guard.engine import (
    CODE_RULES,
    MINOR_DIGITS,
    PACK_MIN_ASSURANCE,
    RULE_APPROVAL,
    RULE_APPROVAL_CODE,
    RULE_ASSURANCE,
    RULE_CAPABILITY,
    RULE_CATEGORY,
    RULE_COUNTRY,
    RULE_CURRENCY,
    RULE_DAILY,
    RULE_EXPIRY,
    RULE_ITEMS,
    RULE_KEY_REQUIRED,
    RULE_MERCHANT,
    RULE_PER_TX,
    RULE_REGION,
    RULE_STATUS,
    TRANSFER_CATEGORY,
)
from pytest_vault.guard.packs import (
    EXECUTE_POLICY,
    MIN_ASSURANCE,
    PAYOUT_POLICY,
    REFUND_POLICY,
    RULE_ACCOUNT_FIELD,
    RULE_ACCOUNT_TYPE,
    RULE_ASSET_CLASS,
    RULE_COMPLIANCE,
    RULE_COUNTERPARTY,
    RULE_DESTINATION_HOLD,
    RULE_DESTINATION_TYPE,
    RULE_EXPOSURE,
    RULE_PAYOUT_COUNT,
    RULE_REASON,
    RULE_RECIPIENT,
    RULE_REGION_AUTH,
    RULE_SEGREGATION,
    RULE_TX_TYPE,
)
from pytest_vault.guard.passport import (
    ASSURANCE_RANK,
    CHARGE,
    EXECUTE,
    PACK_LIMITS,
    PAYOUT,
    REFUND,
    WILDCARD,
    Capability,
    ChargeLimits,
    CurrencyLimit,
    Passport,
)
from pytest_vault.policy.packwitness import (
    account_field_plan,
    capability_plan,
    hold_plan,
    pack_any_plan,
    pack_currency_plan,
    pack_daily_plan,
    pack_entry_plan,
    pack_per_tx_plan,
    pack_switch_plan,
    payout_count_plan,
)
from pytest_vault.policy.witness import (
    Effect,
    Plan,
    Search,
    Side,
    any_call,
    category_plan,
    code_plan,
    country_plan,
    currency_plan,
    daily_plan,
    expiry_of,
    expiry_plan,
    iso,
    items_plan,
    key_plan,
    money,
    no_call,
    per_tx_plan,
    recipient_plan,
    region_plan,
    unreadable_recipient,
)
from pytest_vault.policy.witness import parts as parts
from pytest_vault.policy.witness import pointer as pointer

WIDENS: Effect = "widens"
NARROWS: Effect = "narrows"
NEUTRAL: Effect = "neutral"

_FLOOR = ASSURANCE_RANK[PACK_MIN_ASSURANCE]
_INF = float("inf")


class Raw(NamedTuple):
    """A change before its level is known."""

    pointer: str
    old: Any
    new: Any
    effect: Effect
    summary: str


CHARGE_LIMITS = pointer("limits", CHARGE)
ALLOWLIST = pointer("limits", CHARGE, "allowed_merchant_ids")


def quoted(value: object) -> str:
    """A hostile value quoted for people: repr escapes what is not printable."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _direction(old: float, new: float) -> Effect:
    return WIDENS if new > old else NARROWS if new < old else NEUTRAL


def _gone(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """Entries of `old` missing from `new`, once each, in `old`'s order."""
    return list(dict.fromkeys(e for e in old if e not in new))


def readable_limits(passport: Passport) -> ChargeLimits | None:
    """The charge limits, validated even where the capability is not granted (they are
    dormant then); None when there are none or they cannot be read."""
    raw = passport.limits.get(CHARGE)
    if raw is None:
        return None
    try:
        return ChargeLimits.model_validate(raw)
    except ValidationError:
        return None


# -- lists: recipients, countries, categories, regions -----------------------------------------


def _anyone(entries: Sequence[str]) -> bool:
    return not entries or WILDCARD in entries


def _recipient(entry: str, *, added: bool, other_any: bool) -> Raw:
    """One entry added to or removed from the allowlist. `other_any`: whether the list on
    the other side (before an addition, after a removal) permits anyone anyway."""
    old, new = (None, entry) if added else (entry, None)
    if entry == WILDCARD:
        if other_any:  # the other side is the empty list
            if added:
                words = "'*' added; the EMPTY allowlist already permitted anyone"
            else:
                words = "'*' removed; the EMPTY allowlist still permits anyone (fail-open)"
            return Raw(ALLOWLIST, old, new, NEUTRAL, words)
        if added:
            return Raw(ALLOWLIST, old, new, WIDENS, "newly permitted: anyone ('*')")
        words = "no longer permitted: anyone ('*' removed); only the listed ones remain"
        return Raw(ALLOWLIST, old, new, NARROWS, words)
    verb = "added" if added else "removed"
    if (why := unreadable_recipient(entry)) is not None:
        words = f"{verb} {quoted(entry)}, which can never match ({why})"
        return Raw(ALLOWLIST, old, new, NEUTRAL, words)
    if other_any:
        words = f"{verb} {quoted(entry)}, permitted either way: the allowlist permits anyone"
        return Raw(ALLOWLIST, old, new, NEUTRAL, words)
    if added:
        return Raw(ALLOWLIST, old, new, WIDENS, f"newly permitted: {quoted(entry)}")
    return Raw(ALLOWLIST, old, new, NARROWS, f"no longer permitted: {quoted(entry)}")


def _recipients(old_limits: ChargeLimits, new_limits: ChargeLimits) -> list[Raw]:
    """One change per recipient entry, with the guard's reading of `"*"` and `[]`."""
    old, new = old_limits.allowed_merchant_ids, new_limits.allowed_merchant_ids
    old_any, new_any = _anyone(old), _anyone(new)
    out: list[Raw] = []
    # An empty list has no entry to carry the change: the whole list does.
    if not old and not new_any:
        words = "no longer permitted: anyone (the EMPTY allowlist permitted anyone, fail-open)"
        out.append(Raw(ALLOWLIST, [], new, NARROWS, words))
    if not new and not old_any:
        words = "newly permitted: anyone (an EMPTY allowlist permits anyone under the "
        out.append(Raw(ALLOWLIST, old, [], WIDENS, words + "published pack, fail-open)"))
    out += [_recipient(e, added=False, other_any=new_any) for e in _gone(old, new)]
    out += [_recipient(e, added=True, other_any=old_any) for e in _gone(new, old)]
    return out


_NO_SHIPPING = "; pack contexts only: a transfer_funds call carries no shipping country"


def _countries(old_limits: ChargeLimits, new_limits: ChargeLimits) -> list[Raw]:
    """`allowed_countries`: an empty list permits any shipping country."""
    old, new = old_limits.allowed_countries, new_limits.allowed_countries
    where = at("allowed_countries")
    if not old and new:
        words = f"shipping countries limited to {quoted(new)}{_NO_SHIPPING}"
        return [Raw(where, [], new, NARROWS, words)]
    if old and not new:
        return [Raw(where, old, [], WIDENS, f"any shipping country permitted{_NO_SHIPPING}")]
    out = [
        Raw(where, c, None, NARROWS, f"shipping country {quoted(c)} no longer permitted")
        for c in _gone(old, new)
    ]
    out += [
        Raw(where, None, c, WIDENS, f"shipping country {quoted(c)} newly permitted")
        for c in _gone(new, old)
    ]
    return [change._replace(summary=change.summary + _NO_SHIPPING) for change in out]


def _category_note(category: str) -> str:
    if category == TRANSFER_CATEGORY:
        return "every transfer_funds call is of this category"
    return f"pack contexts only: a transfer_funds call's category is {TRANSFER_CATEGORY}"


def _categories(old_limits: ChargeLimits, new_limits: ChargeLimits) -> list[Raw]:
    old, new = old_limits.blocked_categories, new_limits.blocked_categories
    where = at("blocked_categories")
    out = [
        Raw(where, c, None, WIDENS, f"category {quoted(c)} no longer blocked: {_category_note(c)}")
        for c in _gone(old, new)
    ]
    out += [
        Raw(where, None, c, NARROWS, f"category {quoted(c)} blocked: {_category_note(c)}")
        for c in _gone(new, old)
    ]
    return out


def _regions(old_passport: Passport, new_passport: Passport) -> list[Raw]:
    """Regions permitted. The guard judges a transfer in the passport's first region,
    which is then always listed: for transfer_funds calls only an empty list (every call
    denied) makes a difference."""
    old, new = old_passport.regions, new_passport.regions
    where = at("regions")
    out: list[Raw] = []
    for r in _gone(old, new):
        tail = ": no region left, every transfer_funds call is denied" if not new else ""
        out.append(Raw(where, r, None, NARROWS, f"region {quoted(r)} no longer permitted{tail}"))
    for r in _gone(new, old):
        tail = ": transfer_funds calls are judged again" if not old else ""
        out.append(Raw(where, None, r, WIDENS, f"region {quoted(r)} newly permitted{tail}"))
    return out


def _first_region(old_passport: Passport, new_passport: Passport) -> list[Raw]:
    """The region transfer_funds calls are judged in, always listed: no effect alone."""
    old, new = old_passport.regions, new_passport.regions
    if old and new and old[0] != new[0]:
        words = f"transfer_funds calls are now judged in region {quoted(new[0])}, always listed"
        return [Raw(at("first_region"), old[0], new[0], NEUTRAL, words)]
    return []


# -- currency limits -------------------------------------------------------------------------


class Cap(NamedTuple):
    """One currency's caps, as a `currency`-scope classifier compares them."""

    currency: str
    limit: CurrencyLimit


def _ceiling(cap: CurrencyLimit) -> int:
    """The largest single amount the cap permits (0: none, as amounts are at least 1)."""
    return cap.max_per_tx if cap.daily_cap is None else min(cap.max_per_tx, cap.daily_cap)


def _unknown(currency: str) -> str:
    return f"; the guard knows no currency {currency}: calls in it are denied whatever its caps"


def _currency_entry(where: str, cur: str, o: CurrencyLimit | None, n: CurrencyLimit | None) -> Raw:
    """A currency on one side only."""
    cap = n if o is None else o
    assert cap is not None
    per_tx, daily = money(cap.max_per_tx, cur), money(cap.daily_cap, cur)
    what = f"{cur}, up to {per_tx} a transfer, daily cap {daily}"
    note = ""
    if cur not in MINOR_DIGITS:
        note = _unknown(cur)
    elif _ceiling(cap) < 1:
        note = "; it permits no amount"
    effect = NEUTRAL if note else WIDENS if o is None else NARROWS
    verb = "newly permitted currency" if o is None else "no longer permitted currency"
    old = None if o is None else o.model_dump()
    new = None if n is None else n.model_dump()
    return Raw(where, old, new, effect, f"{verb}: {what}{note}")


def _currencies(old_limits: ChargeLimits, new_limits: ChargeLimits) -> list[Raw]:
    """A currency added or removed; for one on both sides, its caps' changes by the
    `currency`-scope entries, currency by currency."""
    old, new = old_limits.currency_limits, new_limits.currency_limits
    caps = [f for f in FIELDS if f.scope == "currency" and f.direction is not None]
    out: list[Raw] = []
    for cur in sorted(old.keys() | new.keys()):
        o, n = old.get(cur), new.get(cur)
        if o == n:
            continue
        if o is None or n is None:
            out.append(_currency_entry(at("currency_limits", currency=cur), cur, o, n))
            continue
        for field in caps:
            assert field.direction is not None
            out += field.direction(Cap(cur, o), Cap(cur, n))
    return out


def _per_tx(old: Cap, new: Cap) -> list[Raw]:
    cur, o, n = old.currency, old.limit.max_per_tx, new.limit.max_per_tx
    if o == n:
        return []
    known = cur in MINOR_DIGITS
    effect = _direction(o, n) if known else NEUTRAL
    verb = "raised" if n > o else "lowered"
    words = f"{cur} per-transfer limit {verb}: {money(o, cur)} -> {money(n, cur)}"
    return [Raw(at("max_per_tx", currency=cur), o, n, effect, words + _note(cur))]


def _daily(old: Cap, new: Cap) -> list[Raw]:
    cur, o, n = old.currency, old.limit.daily_cap, new.limit.daily_cap
    if o == n:
        return []
    od, nd = _INF if o is None else o, _INF if n is None else n
    effect = _direction(od, nd) if cur in MINOR_DIGITS else NEUTRAL
    if o is None:
        words = f"{cur} daily cap added: {money(n, cur)}"
    elif n is None:
        words = f"{cur} daily cap removed (was {money(o, cur)})"
    else:
        verb = "raised" if nd > od else "lowered"
        words = f"{cur} daily cap {verb}: {money(o, cur)} -> {money(n, cur)}"
    return [Raw(at("daily_cap", currency=cur), o, n, effect, words + _note(cur))]


def _note(cur: str) -> str:
    return "" if cur in MINOR_DIGITS else _unknown(cur)


# -- the charge limits -----------------------------------------------------------------------


def _switch(name: str, on: str, off: str) -> Callable[[ChargeLimits, ChargeLimits], list[Raw]]:
    """The classifier of a rule that denies when switched on: on narrows, off widens."""

    def classify(old_limits: ChargeLimits, new_limits: ChargeLimits) -> list[Raw]:
        old, new = getattr(old_limits, name), getattr(new_limits, name)
        if old == new:
            return []
        effect, words = (NARROWS, f"{name} on: {on}") if new else (WIDENS, f"{name} off: {off}")
        return [Raw(at(name), old, new, effect, words)]

    return classify


def _floor(required: str) -> int:
    return max(_FLOOR, ASSURANCE_RANK[required])


def _items(old: ChargeLimits, new: ChargeLimits) -> list[Raw]:
    o_items, n_items = old.max_items_per_tx, new.max_items_per_tx
    if o_items == n_items:
        return []
    effect = _direction(_INF if o_items is None else o_items, _INF if n_items is None else n_items)
    words = f"max_items_per_tx {o_items} -> {n_items}"
    words += "; pack contexts only: a transfer_funds call is one item"
    return [Raw(at("max_items_per_tx"), o_items, n_items, effect, words)]


def _required_assurance(old: ChargeLimits, new: ChargeLimits) -> list[Raw]:
    o_req, n_req = old.require_assurance_at_least, new.require_assurance_at_least
    if o_req == n_req:
        return []
    effect = _direction(_floor(n_req), _floor(o_req))  # a higher floor narrows
    words = f"required assurance {o_req} -> {n_req}"
    if effect == NEUTRAL:
        words += f" (the pack's minimum {PACK_MIN_ASSURANCE} applies either way)"
    return [Raw(at("require_assurance_at_least"), o_req, n_req, effect, words)]


def _charge_limits(old: Passport, new: Passport) -> list[Raw]:
    """Charge limits on one side only (their fields are compared where both have them)."""
    o_lim, n_lim = readable_limits(old), readable_limits(new)
    if (o_lim is None) == (n_lim is None):
        return []
    side = "added" if o_lim is None else "removed"
    words = f"charge limits {side}: they apply only where {CHARGE} is granted"
    o_dump = None if o_lim is None else o_lim.model_dump()
    n_dump = None if n_lim is None else n_lim.model_dump()
    return [Raw(CHARGE_LIMITS, o_dump, n_dump, NEUTRAL, words)]


# -- the passport ----------------------------------------------------------------------------


def _expiry_change(old: Passport, new: Passport) -> list[Raw]:
    """`expires_at` and `never_expires` make one rule: one change, judged by when it bites."""
    same_date = old.expires_at == new.expires_at
    if same_date and bool(old.never_expires) == bool(new.never_expires):
        return []
    oe, ne = expiry_of(old), expiry_of(new)
    effect = _direction(
        _INF if oe is None else oe.timestamp(), _INF if ne is None else ne.timestamp()
    )
    words = f"expiry {iso(oe) or 'never'} -> {iso(ne) or 'never'}"
    if effect == NEUTRAL:
        words += " (unchanged in effect" + (": never_expires is true)" if oe is None else ")")
    expires_at, never_expires = BY_NAME["expiry"].pointers
    if same_date:
        return [Raw(never_expires, old.never_expires, new.never_expires, effect, words)]
    return [Raw(expires_at, iso(old.expires_at), iso(new.expires_at), effect, words)]


def _assurance(old: Passport, new: Passport) -> list[Raw]:
    o, n = old.assurance_level, new.assurance_level
    if o == n:
        return []
    # Below the pack's minimum every call is denied: those ranks are all alike.
    below = _FLOOR - 1
    effect = _direction(max(ASSURANCE_RANK[o], below), max(ASSURANCE_RANK[n], below))
    words = f"passport assurance {o} -> {n}"
    if effect == NEUTRAL:
        words += (
            f" (both below the pack's minimum {PACK_MIN_ASSURANCE}: every call denied either way)"
        )
    return [Raw(at("assurance_level"), o, n, effect, words)]


def _status(old: Passport, new: Passport) -> list[Raw]:
    o, n = old.status, new.status
    where = at("status")
    if o == n:
        return []
    if n == "active":
        return [Raw(where, o, n, WIDENS, f"status {o} -> {n}: calls are judged again")]
    if o == "active":
        return [Raw(where, o, n, NARROWS, f"status {o} -> {n}: every call is denied")]
    return [Raw(where, o, n, NEUTRAL, f"status {o} -> {n}: every call is denied either way")]


def _first(passport: Passport) -> dict[str, Capability]:
    """Capabilities by id; a repeated id counts once, by its first occurrence."""
    out: dict[str, Capability] = {}
    for cap in passport.capabilities:
        out.setdefault(cap.id, cap)
    return out


def _capabilities(old: Passport, new: Passport) -> list[Raw]:
    """Capabilities granted and withdrawn, and (`capability_params`) their params changed,
    in the new passport's order."""
    o, n = _first(old), _first(new)
    ignored = "not judged by the guard, which judges " + ", ".join(JUDGED)
    where = at("capabilities")
    out: list[Raw] = []
    for cid in (cid for cid in o if cid not in n):
        if cid in JUDGED:
            words = f"{cid} no longer granted: every {JUDGED[cid]} is denied"
            out.append(Raw(where, cid, None, NARROWS, words))
        else:
            out.append(Raw(where, cid, None, NEUTRAL, f"{quoted(cid)} removed: {ignored}"))
    for index, cap in enumerate(new.capabilities):
        if n[cap.id] is not cap:
            continue
        if cap.id not in o:
            if cap.id in JUDGED:
                out.append(Raw(where, None, cap.id, WIDENS, f"{cap.id} granted"))
            else:
                out.append(Raw(where, None, cap.id, NEUTRAL, f"{quoted(cap.id)} added: {ignored}"))
        elif o[cap.id].params != cap.params:
            words = f"params of {quoted(cap.id)} changed: not read by the guard"
            if cap.id in JUDGED:
                words += f", which reads limits.{cap.id}"
            params = at("capability_params", index=index)
            out.append(Raw(params, o[cap.id].params, cap.params, NEUTRAL, words))
    return out


# -- the other packs' limits: refund, payout, transaction execute -----------------------------

# The capabilities the guard judges, and what a call of each is, for people.
JUDGED = {
    CHARGE: "call",
    REFUND: "refund",
    PAYOUT: "payout",
    EXECUTE: "scheduled payment and account change",
}


def pack_limits(passport: Passport, capability: str) -> BaseModel | None:
    """A pack's limits, validated even where the capability is not granted (dormant then);
    None when there are none or they cannot be read."""
    raw = passport.limits.get(capability)
    if raw is None:
        return None
    try:
        return PACK_LIMITS[capability].model_validate(raw)
    except ValidationError:
        return None


def _pack(capability: str, *names: object) -> str:
    return pointer("limits", capability, *names)


PackClassifier = Callable[[Passport, Passport], list[Raw]]


def _on_both(capability: str, compare: Callable[[Any, Any], list[Raw]]) -> PackClassifier:
    """A classifier of `capability`'s limits, run where both passports have readable ones
    (limits on one side only are reported by `_dormant_or_gone`)."""

    def classify(old: Passport, new: Passport) -> list[Raw]:
        o, n = pack_limits(old, capability), pack_limits(new, capability)
        return [] if o is None or n is None else compare(o, n)

    return classify


def _entries(
    capability: str, name: str, what: str, *, allows: bool = True, none: str = "none"
) -> PackClassifier:
    """A list of permitted (or, `allows=False`, restricted) entries, `"*"` permitting any;
    `none` says what a list left out means ("none": nothing; "any": no rule)."""

    def compare(o: Any, n: Any) -> list[Raw]:
        old, new = getattr(o, name), getattr(n, name)
        if name == "refund_reason_codes":  # or its pre-rename name: the guard reads either
            old, new = sorted(o.reasons), sorted(n.reasons)
        if old == new:
            return []
        where = _pack(capability, name)
        if old is None or new is None:
            if none == "any":  # left out: no rule; a list narrows
                effect = NARROWS if old is None else WIDENS
                words = f"{what} limited to {quoted(new)}" if old is None else f"any {what}"
                return [Raw(where, old, new, effect, words)]
            old, new = old or [], new or []
        o_any, n_any = WILDCARD in old, WILDCARD in new
        widen, narrow = (WIDENS, NARROWS) if allows else (NARROWS, WIDENS)
        out: list[Raw] = []
        for e in _gone(old, new):
            if e == WILDCARD:
                out.append(
                    Raw(where, e, None, narrow, f"no longer permitted: any {what} ('*' removed)")
                )
            elif n_any:
                out.append(
                    Raw(where, e, None, NEUTRAL, f"{what} {quoted(e)} removed; '*' permits it")
                )
            else:
                verb = "no longer permitted" if allows else "no longer restricted"
                out.append(Raw(where, e, None, narrow, f"{what} {quoted(e)} {verb}"))
        for e in _gone(new, old):
            if e == WILDCARD:
                out.append(Raw(where, None, e, widen, f"newly permitted: any {what} ('*')"))
            elif o_any:
                out.append(
                    Raw(where, None, e, NEUTRAL, f"{what} {quoted(e)} added; '*' permitted it")
                )
            else:
                verb = "newly permitted" if allows else "newly restricted"
                out.append(Raw(where, None, e, widen, f"{what} {quoted(e)} {verb}"))
        return out

    return _on_both(capability, compare)


def _number(capability: str, name: str, what: str, *, narrows_up: bool = False) -> PackClassifier:
    """A number whose rise widens (a cap, a count), or narrows (`narrows_up`: a hold);
    left out: no rule."""

    def compare(o: Any, n: Any) -> list[Raw]:
        old, new = getattr(o, name), getattr(n, name)
        if old == new:
            return []
        none = 0 if narrows_up else _INF
        od, nd = none if old is None else old, none if new is None else new
        effect = _direction(nd, od) if narrows_up else _direction(od, nd)
        verb = "raised" if nd > od else "lowered"
        return [Raw(_pack(capability, name), old, new, effect, f"{what} {verb}: {old} -> {new}")]

    return _on_both(capability, compare)


def _pack_switch(capability: str, name: str, on: str, off: str) -> PackClassifier:
    def compare(o: Any, n: Any) -> list[Raw]:
        old, new = getattr(o, name), getattr(n, name)
        if old == new:
            return []
        if capability == REFUND and name == "idempotency_required":
            words = f"{name} {old} -> {new}: the refund pack requires a key in every context"
            return [Raw(_pack(capability, name), old, new, NEUTRAL, words)]
        effect, words = (NARROWS, f"{name} on: {on}") if new else (WIDENS, f"{name} off: {off}")
        return [Raw(_pack(capability, name), old, new, effect, words)]

    return _on_both(capability, compare)


def _pack_assurance(capability: str, policy: str) -> PackClassifier:
    def compare(o: Any, n: Any) -> list[Raw]:
        old, new = o.require_assurance_at_least, n.require_assurance_at_least
        if old == new:
            return []
        least = ASSURANCE_RANK[MIN_ASSURANCE[policy]]
        o_floor, n_floor = max(least, ASSURANCE_RANK[old]), max(least, ASSURANCE_RANK[new])
        effect = _direction(n_floor, o_floor)  # a higher floor narrows
        words = f"required assurance {old} -> {new}"
        if effect == NEUTRAL:
            words += f" (the pack's minimum {MIN_ASSURANCE[policy]} applies either way)"
        where = _pack(capability, "require_assurance_at_least")
        return [Raw(where, old, new, effect, words)]

    return _on_both(capability, compare)


def _pack_currencies(capability: str, what: str) -> PackClassifier:
    """The currencies a refund or payout may be in (in `currency_limits` and, where it is
    listed, `supported_currencies`), and each one's caps."""

    def supported(limits: Any) -> dict[str, CurrencyLimit]:
        listed = limits.supported_currencies
        return {
            c: cap for c, cap in limits.currency_limits.items() if listed is None or c in listed
        }

    def compare(o: Any, n: Any) -> list[Raw]:
        old, new = supported(o), supported(n)
        out: list[Raw] = []
        for cur in sorted(old.keys() | new.keys()):
            oc, nc = old.get(cur), new.get(cur)
            if oc == nc:
                continue
            base = _pack(capability, "currency_limits", cur)
            if oc is None or nc is None:
                # In the map on both sides: `supported_currencies` is what changed.
                both = cur in o.currency_limits and cur in n.currency_limits
                where = _pack(capability, "supported_currencies") if both else base
                known = cur in MINOR_DIGITS
                effect = (WIDENS if oc is None else NARROWS) if known else NEUTRAL
                verb = "newly permitted" if oc is None else "no longer permitted"
                words = f"{what}s in {cur} {verb}" + ("" if known else _unknown(cur))
                out.append(
                    Raw(where, oc and oc.model_dump(), nc and nc.model_dump(), effect, words)
                )
                continue
            effect_of = _direction if cur in MINOR_DIGITS else (lambda a, b: NEUTRAL)
            if oc.max_per_tx != nc.max_per_tx:
                was, now = money(oc.max_per_tx, cur), money(nc.max_per_tx, cur)
                words = f"{cur} per-{what} limit: {was} -> {now}"
                effect = effect_of(oc.max_per_tx, nc.max_per_tx)
                out.append(Raw(base + "/max_per_tx", oc.max_per_tx, nc.max_per_tx, effect, words))
            if oc.daily_cap != nc.daily_cap:
                od = _INF if oc.daily_cap is None else oc.daily_cap
                nd = _INF if nc.daily_cap is None else nc.daily_cap
                was, now = money(oc.daily_cap, cur), money(nc.daily_cap, cur)
                words = f"{cur} daily {what} cap: {was} -> {now}"
                out.append(
                    Raw(base + "/daily_cap", oc.daily_cap, nc.daily_cap, effect_of(od, nd), words)
                )
        return out

    return _on_both(capability, compare)


def _dormant_or_gone(capability: str) -> PackClassifier:
    """A pack's limits on one side only (their fields are compared where both have them)."""

    def classify(old: Passport, new: Passport) -> list[Raw]:
        o, n = pack_limits(old, capability), pack_limits(new, capability)
        if (o is None) == (n is None):
            return []
        side = "added" if o is None else "removed"
        words = f"{capability} limits {side}: they apply only where {capability} is granted"
        o_dump = None if o is None else o.model_dump()
        n_dump = None if n is None else n.model_dump()
        return [Raw(_pack(capability), o_dump, n_dump, NEUTRAL, words)]

    return classify


_SHORT = {REFUND: "refund", PAYOUT: "payout", EXECUTE: "execute"}


def _pack_fields() -> list[Field[Any]]:
    """Each other pack's fields, in the pack's order of rules."""
    out: list[Field[Any]] = []

    def add(
        capability: str,
        name: str,
        rules: set[str],
        direction: PackClassifier | None,
        witness: Builder,
        *more: str,
        within: str | None = None,
    ) -> None:
        # Named by the pack's short name and the field (`refund.daily_cap`); its limits
        # as a whole `refund.limits`.
        short = _SHORT[capability]
        entry = f"{short}.{name.rsplit('/', 1)[-1] if name else 'limits'}"
        if name.endswith("{currency}"):
            entry = f"{short}.currency_limits"
        pointers = (_pack(capability, *name.split("/")) if name else _pack(capability), *more)
        out.append(
            Field(
                entry,
                pointers,
                frozenset(rules),
                "pack",
                direction,
                witness,
                within=within,
                pack=capability,
            )
        )

    for capability, policy, what in (
        (REFUND, REFUND_POLICY, "refund"),
        (PAYOUT, PAYOUT_POLICY, "payout"),
    ):
        add(capability, "", set(), _dormant_or_gone(capability), no_call)
        currency = "currency_limits/{currency}"
        add(
            capability,
            currency,
            {RULE_CURRENCY},
            _pack_currencies(capability, what),
            pack_currency_plan,
            _pack(capability, "currency_limits"),
            _pack(capability, "supported_currencies"),
        )
        add(
            capability,
            f"{currency}/max_per_tx",
            {RULE_PER_TX},
            None,
            pack_per_tx_plan,
            within=f"{_SHORT[capability]}.currency_limits",
        )
        add(
            capability,
            f"{currency}/daily_cap",
            {RULE_DAILY},
            None,
            pack_daily_plan,
            within=f"{_SHORT[capability]}.currency_limits",
        )
        if capability == REFUND:
            add(
                capability,
                "refund_reason_codes",
                {RULE_REASON},
                _entries(capability, "refund_reason_codes", "reason code"),
                pack_entry_plan,
                _pack(capability, "reason_codes"),
            )
            add(
                capability,
                "regions",
                {RULE_REGION_AUTH},
                _entries(capability, "regions", "region", none="any"),
                pack_entry_plan,
            )
        else:
            add(
                capability,
                "allowed_destination_types",
                {RULE_DESTINATION_TYPE},
                _entries(capability, "allowed_destination_types", "destination type"),
                pack_entry_plan,
            )
            add(
                capability,
                "allowed_recipients",
                {RULE_RECIPIENT},
                _entries(capability, "allowed_recipients", "destination"),
                pack_entry_plan,
            )
            add(
                capability,
                "x_vault_destination_hold_hours",
                {RULE_DESTINATION_HOLD},
                _number(
                    capability,
                    "x_vault_destination_hold_hours",
                    "destination hold (hours)",
                    narrows_up=True,
                ),
                hold_plan,
            )
            add(
                capability,
                "max_payouts_per_day",
                {RULE_PAYOUT_COUNT},
                _number(capability, "max_payouts_per_day", "payouts a day"),
                payout_count_plan,
            )
            add(
                capability,
                "compliance_checks_required",
                {RULE_COMPLIANCE},
                _pack_switch(
                    capability,
                    "compliance_checks_required",
                    "payouts without compliance notes are denied",
                    "no compliance notes needed",
                ),
                pack_switch_plan,
            )
        add(
            capability,
            "require_assurance_at_least",
            {RULE_ASSURANCE},
            _pack_assurance(capability, policy),
            pack_any_plan,
        )
        add(
            capability,
            "idempotency_required",
            {RULE_KEY_REQUIRED},
            _pack_switch(
                capability,
                "idempotency_required",
                f"{what}s without an idempotency_key are denied",
                f"{what}s need no idempotency_key",
            ),
            pack_switch_plan,
        )
        add(
            capability,
            "approval_required",
            {RULE_APPROVAL},
            _pack_switch(
                capability,
                "approval_required",
                f"every {what} needs a human approval the agent cannot give",
                "no human approval needed",
            ),
            pack_any_plan,
        )
    e = EXECUTE
    add(e, "", set(), _dormant_or_gone(e), no_call)
    add(
        e,
        "allowed_transaction_types",
        {RULE_TX_TYPE},
        _entries(e, "allowed_transaction_types", "transaction type"),
        pack_entry_plan,
    )
    add(
        e,
        "allowed_asset_classes",
        {RULE_ASSET_CLASS},
        _entries(e, "allowed_asset_classes", "asset class"),
        pack_entry_plan,
    )
    add(
        e,
        "max_exposure_per_tx_usd",
        {RULE_EXPOSURE},
        _number(e, "max_exposure_per_tx_usd", "per-transaction exposure (USD cents)"),
        pack_per_tx_plan,
    )
    add(
        e,
        "restricted_source_account_types",
        {RULE_SEGREGATION},
        _entries(e, "restricted_source_account_types", "source account type", allows=False),
        pack_entry_plan,
    )
    add(
        e,
        "allowed_source_account_types",
        {RULE_ACCOUNT_TYPE},
        _entries(e, "allowed_source_account_types", "source account type"),
        pack_entry_plan,
    )
    add(
        e,
        "max_exposure_per_counterparty_usd",
        {RULE_COUNTERPARTY},
        _number(e, "max_exposure_per_counterparty_usd", "daily exposure to one payee (USD cents)"),
        pack_daily_plan,
    )
    add(
        e,
        "require_assurance_at_least",
        {RULE_ASSURANCE},
        _pack_assurance(e, EXECUTE_POLICY),
        pack_any_plan,
    )
    add(
        e,
        "idempotency_required",
        {RULE_KEY_REQUIRED},
        _pack_switch(
            e,
            "idempotency_required",
            "transactions without an idempotency_key are denied",
            "transactions need no idempotency_key",
        ),
        pack_switch_plan,
    )
    add(
        e,
        "approval_required",
        {RULE_APPROVAL},
        _pack_switch(
            e,
            "approval_required",
            "every transaction and account change needs a human approval the agent cannot give",
            "no human approval needed",
        ),
        pack_any_plan,
    )
    add(
        e,
        "x_vault_account_fields",
        {RULE_ACCOUNT_FIELD},
        _entries(e, "x_vault_account_fields", "account field"),
        account_field_plan,
    )
    return out


# -- the table -------------------------------------------------------------------------------

Scope = Literal["passport", "limits", "currency", "pack"]
S = TypeVar("S")
Builder = Callable[[Search, str, Any, Side, Side], Plan]


@dataclass(frozen=True)
class Field(Generic[S]):
    """One field the guard reads (or one part of it), known once.

    `pointers`: where its changes and findings are reported, `{currency}` and `{index}`
    standing for one part each: the first is the one `at` fills; more where two fields
    make one rule (`expires_at` and `never_expires`) or a finding is about the whole
    (`currency_limits`, the map). `rules`: the engine rules a change
    of it can flip (none: the guard does not read it, or reads it only through others).
    `direction`: its classifier, over two values of its `scope`; None: reported by the
    classifier of `within`. `witness`: its witness builder. `timed`: a change of it bites
    at an instant, so the side that permits is read at that instant, not now."""

    name: str
    pointers: tuple[str, ...]
    rules: frozenset[str]
    scope: Scope
    direction: Callable[[S, S], list[Raw]] | None
    witness: Builder
    within: str | None = None
    timed: bool = False
    pack: str | None = None  # the capability of another pack whose limits it is in

    @property
    def pointer(self) -> str:
        return self.pointers[0]

    @property
    def codes(self) -> frozenset[str]:
        """The reason codes its rules deny with (the engine's `CODE_RULES`)."""
        return frozenset(code for code, rules in CODE_RULES.items() if self.rules & set(rules))

    def depth(self, where: str, *, below: bool = False) -> int:
        """The parts of the pointer of this field that `where` is (`below`: or is inside,
        as an allowlist's entry is inside the allowlist); 0 when it is none of them."""
        got = parts(where)
        out = 0
        for template in map(parts, self.pointers):
            if len(got) < len(template) or (len(got) > len(template) and not below):
                continue
            if all(t == g or _slot(t) for t, g in zip(template, got, strict=False)):
                out = max(out, len(template))
        return out


def _slot(part: str) -> bool:
    return part.startswith("{") and part.endswith("}")


def _limits(name: str) -> str:
    return pointer("limits", CHARGE, name)


_CURRENCY = pointer("limits", CHARGE, "currency_limits") + "/{currency}"

# In the order diff reports changes: the passport, then the charge limits.
FIELDS: tuple[Field[Any], ...] = (
    Field(
        "capabilities",
        ("/capabilities",),
        frozenset({RULE_CAPABILITY}),
        "passport",
        _capabilities,
        capability_plan,
    ),
    Field(
        "capability_params",
        ("/capabilities/{index}/params",),
        frozenset(),
        "passport",
        None,
        no_call,
        within="capabilities",
    ),
    Field("status", ("/status",), frozenset({RULE_STATUS}), "passport", _status, any_call),
    Field(
        "expiry",
        ("/expires_at", "/never_expires"),
        frozenset({RULE_EXPIRY}),
        "passport",
        _expiry_change,
        expiry_plan,
        timed=True,
    ),
    Field(
        "assurance_level",
        ("/assurance_level",),
        frozenset({RULE_ASSURANCE}),
        "passport",
        _assurance,
        any_call,
    ),
    Field("regions", ("/regions",), frozenset({RULE_REGION}), "passport", _regions, region_plan),
    Field(
        "first_region",
        ("/regions/0",),
        frozenset({RULE_REGION}),
        "passport",
        _first_region,
        any_call,
    ),
    Field("charge_limits", (CHARGE_LIMITS,), frozenset(), "passport", _charge_limits, any_call),
    Field(
        "currency_limits",
        (_CURRENCY, _limits("currency_limits")),
        frozenset({RULE_CURRENCY}),
        "limits",
        _currencies,
        currency_plan,
    ),
    Field(
        "max_per_tx",
        (f"{_CURRENCY}/max_per_tx",),
        frozenset({RULE_PER_TX}),
        "currency",
        _per_tx,
        per_tx_plan,
    ),
    Field(
        "daily_cap",
        (f"{_CURRENCY}/daily_cap",),
        frozenset({RULE_DAILY}),
        "currency",
        _daily,
        daily_plan,
    ),
    Field(
        "allowed_merchant_ids",
        (ALLOWLIST,),
        frozenset({RULE_MERCHANT}),
        "limits",
        _recipients,
        recipient_plan,
    ),
    Field(
        "allowed_countries",
        (_limits("allowed_countries"),),
        frozenset({RULE_COUNTRY}),
        "limits",
        _countries,
        country_plan,
    ),
    Field(
        "blocked_categories",
        (_limits("blocked_categories"),),
        frozenset({RULE_CATEGORY}),
        "limits",
        _categories,
        category_plan,
    ),
    Field(
        "max_items_per_tx",
        (_limits("max_items_per_tx"),),
        frozenset({RULE_ITEMS}),
        "limits",
        _items,
        items_plan,
    ),
    Field(
        "require_assurance_at_least",
        (_limits("require_assurance_at_least"),),
        frozenset({RULE_ASSURANCE}),
        "limits",
        _required_assurance,
        any_call,
    ),
    Field(
        "idempotency_required",
        (_limits("idempotency_required"),),
        frozenset({RULE_KEY_REQUIRED}),
        "limits",
        _switch(
            "idempotency_required",
            "calls without an idempotency_key are denied",
            "calls need no idempotency_key",
        ),
        key_plan,
    ),
    Field(
        "approval_required",
        (_limits("approval_required"),),
        frozenset({RULE_APPROVAL}),
        "limits",
        _switch(
            "approval_required",
            "every call needs a human approval the agent cannot give",
            "no human approval needed",
        ),
        any_call,
    ),
    Field(
        "x_vault_memo_approval_code_required",
        (_limits("x_vault_memo_approval_code_required"),),
        frozenset({RULE_APPROVAL_CODE}),
        "limits",
        _switch(
            "x_vault_memo_approval_code_required",
            "calls whose memo lacks an approval code APC-YYYY-NNNN are denied",
            "no approval code needed in the memo",
        ),
        code_plan,
    ),
    *_pack_fields(),
)
BY_NAME: dict[str, Field[Any]] = {f.name: f for f in FIELDS}


def at(name: str, **slots: object) -> str:
    """The pointer of field `name`, its `{slot}`s filled (`at("max_per_tx", currency="EUR")`)."""
    return pointer(*(slots[p[1:-1]] if _slot(p) else p for p in parts(BY_NAME[name].pointer)))


def field_at(where: str, *, below: bool = False) -> Field[Any] | None:
    """The entry `where` is a pointer of (`below`: or inside, the deepest such); None for a
    pointer of no field the guard reads."""
    depth, found = max(((f.depth(where, below=below), f) for f in FIELDS), key=lambda x: x[0])
    return found if depth else None
