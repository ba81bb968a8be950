"""A semantic diff of two passports: what they permit differently, not how their text differs.

Each `Change` names a level, a JSON pointer into the passport, the old and new value and
an `effect`: `widens` (a call is newly allowed), `narrows` (newly denied), or `neutral`.

Two steps. `diff_passports` reads each field's own direction with the guard's semantics
(`"*"` and an empty allowlist both permit anyone; an entry the guard can never match
permits no one; a currency the guard does not know pays nothing) and the pack's fixed
rules (the L2 minimum; a transfer is one `funds_transfer` item judged in the passport's
first region). `review_passports` then settles each change on the engine itself: it
searches a witness (`witness.py`), a call OLD decides one way and NEW the other, checked
by running both through a `Guard`. A change with a witness has the witness's effect; one
that can change no decision, whatever the field's direction (a raised cap above a daily
cap that binds first, anything in a passport that permits nothing), is `neutral` with the
reason in `note`; one the search could not decide within its bounds keeps the field's
direction, `undecided`, and says why. A neutral change is searched too, both ways: a
witness for it would be a defect of the field rules, and is reported as what it shows.

Fields the guard never reads (ids, owner, metadata, version, creation dates) are not
part of what a passport permits, so they are not reported.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError

from pytest_vault.core.errors import reason
from pytest_vault.core.json import DocumentError, read_json, utf8
from pytest_vault.core.text import shown
from pytest_vault.guard.engine import (
    MINOR_DIGITS,
    PACK_MIN_ASSURANCE,
    TRANSFER_CATEGORY,
    Guard,
)
from pytest_vault.guard.folder import passport_files
from pytest_vault.guard.passport import (
    ASSURANCE_RANK,
    CHARGE,
    WILDCARD,
    Capability,
    ChargeLimits,
    CurrencyLimit,
    Passport,
    PassportError,
    read_passport,
)
from pytest_vault.policy.witness import (
    Bounds,
    Effect,
    Search,
    Witness,
    expiry_of,
    iso,
    money,
    unreadable_recipient,
)

WIDENS: Effect = "widens"
NARROWS: Effect = "narrows"
NEUTRAL: Effect = "neutral"

LEVEL_FILE = re.compile(r"level-([1-9][0-9]*)\.json")
_FLOOR = ASSURANCE_RANK[PACK_MIN_ASSURANCE]
_INF = float("inf")


class Change(NamedTuple):
    level: int | None
    pointer: str
    old: Any
    new: Any
    effect: Effect
    summary: str
    # Settled by `review_passports`: the call OLD and NEW decide differently (for a change
    # of no effect, one whose reasons alone change, where there is one).
    witness: Witness | None = None
    # Why a change has no effect on any decision, or why it is undecided.
    note: str | None = None
    # The search stopped at its bounds: the effect is the field's own direction.
    undecided: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = self._asdict()
        out["witness"] = None if self.witness is None else self.witness.to_dict()
        return out

    def line(self) -> str:
        where = "" if self.level is None else f"level {self.level}: "
        effect: str = "no effect" if self.effect == NEUTRAL else self.effect
        if self.undecided:
            effect += " (undecided)"
        note = "" if self.note is None else f"; {self.note}"
        return shown(f"{where}{self.pointer or '(passport)'}: {effect}: {self.summary}{note}")


class _Raw(NamedTuple):
    """A change before its level is known."""

    pointer: str
    old: Any
    new: Any
    effect: Effect
    summary: str


def pointer(*parts: object) -> str:
    """An RFC 6901 JSON pointer: `~` and `/` inside a part are escaped."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def parts(pointer: str) -> list[str]:
    """The parts of an RFC 6901 JSON pointer, unescaped: `pointer`'s inverse."""
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]


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


# -- lists: recipients, countries, categories, regions -----------------------------------------


def _anyone(entries: Sequence[str]) -> bool:
    return not entries or WILDCARD in entries


def _recipient(entry: str, *, added: bool, other_any: bool) -> _Raw:
    """One entry added to or removed from the allowlist. `other_any`: whether the list on
    the other side (before an addition, after a removal) permits anyone anyway."""
    old, new = (None, entry) if added else (entry, None)
    if entry == WILDCARD:
        if other_any:  # the other side is the empty list
            if added:
                words = "'*' added; the EMPTY allowlist already permitted anyone"
            else:
                words = "'*' removed; the EMPTY allowlist still permits anyone (fail-open)"
            return _Raw(ALLOWLIST, old, new, NEUTRAL, words)
        if added:
            return _Raw(ALLOWLIST, old, new, WIDENS, "newly permitted: anyone ('*')")
        words = "no longer permitted: anyone ('*' removed); only the listed ones remain"
        return _Raw(ALLOWLIST, old, new, NARROWS, words)
    verb = "added" if added else "removed"
    if (why := unreadable_recipient(entry)) is not None:
        words = f"{verb} {quoted(entry)}, which can never match ({why})"
        return _Raw(ALLOWLIST, old, new, NEUTRAL, words)
    if other_any:
        words = f"{verb} {quoted(entry)}, permitted either way: the allowlist permits anyone"
        return _Raw(ALLOWLIST, old, new, NEUTRAL, words)
    if added:
        return _Raw(ALLOWLIST, old, new, WIDENS, f"newly permitted: {quoted(entry)}")
    return _Raw(ALLOWLIST, old, new, NARROWS, f"no longer permitted: {quoted(entry)}")


def _recipients(old: list[str], new: list[str]) -> list[_Raw]:
    """One change per recipient entry, with the guard's reading of `"*"` and `[]`."""
    old_any, new_any = _anyone(old), _anyone(new)
    out: list[_Raw] = []
    # An empty list has no entry to carry the change: the whole list does.
    if not old and not new_any:
        words = "no longer permitted: anyone (the EMPTY allowlist permitted anyone, fail-open)"
        out.append(_Raw(ALLOWLIST, [], new, NARROWS, words))
    if not new and not old_any:
        words = "newly permitted: anyone (an EMPTY allowlist permits anyone under the "
        out.append(_Raw(ALLOWLIST, old, [], WIDENS, words + "published pack, fail-open)"))
    out += [_recipient(e, added=False, other_any=new_any) for e in _gone(old, new)]
    out += [_recipient(e, added=True, other_any=old_any) for e in _gone(new, old)]
    return out


_NO_SHIPPING = "; pack contexts only: a transfer_funds call carries no shipping country"


def _countries(old: list[str], new: list[str]) -> list[_Raw]:
    """`allowed_countries`: an empty list permits any shipping country."""
    where = f"{CHARGE_LIMITS}/allowed_countries"
    if not old and new:
        words = f"shipping countries limited to {quoted(new)}{_NO_SHIPPING}"
        return [_Raw(where, [], new, NARROWS, words)]
    if old and not new:
        return [_Raw(where, old, [], WIDENS, f"any shipping country permitted{_NO_SHIPPING}")]
    out = [
        _Raw(where, c, None, NARROWS, f"shipping country {quoted(c)} no longer permitted")
        for c in _gone(old, new)
    ]
    out += [
        _Raw(where, None, c, WIDENS, f"shipping country {quoted(c)} newly permitted")
        for c in _gone(new, old)
    ]
    return [change._replace(summary=change.summary + _NO_SHIPPING) for change in out]


def _category_note(category: str) -> str:
    if category == TRANSFER_CATEGORY:
        return "every transfer_funds call is of this category"
    return f"pack contexts only: a transfer_funds call's category is {TRANSFER_CATEGORY}"


def _categories(old: list[str], new: list[str]) -> list[_Raw]:
    where = f"{CHARGE_LIMITS}/blocked_categories"
    out = [
        _Raw(where, c, None, WIDENS, f"category {quoted(c)} no longer blocked: {_category_note(c)}")
        for c in _gone(old, new)
    ]
    out += [
        _Raw(where, None, c, NARROWS, f"category {quoted(c)} blocked: {_category_note(c)}")
        for c in _gone(new, old)
    ]
    return out


def _regions(old: list[str], new: list[str]) -> list[_Raw]:
    """Regions permitted. The guard judges a transfer in the passport's first region,
    which is then always listed: for transfer_funds calls only an empty list (every call
    denied) makes a difference."""
    out: list[_Raw] = []
    for r in _gone(old, new):
        tail = ": no region left, every transfer_funds call is denied" if not new else ""
        out.append(
            _Raw("/regions", r, None, NARROWS, f"region {quoted(r)} no longer permitted{tail}")
        )
    for r in _gone(new, old):
        tail = ": transfer_funds calls are judged again" if not old else ""
        out.append(_Raw("/regions", None, r, WIDENS, f"region {quoted(r)} newly permitted{tail}"))
    if old and new and old[0] != new[0]:
        words = f"transfer_funds calls are now judged in region {quoted(new[0])}, always listed"
        out.append(_Raw("/regions/0", old[0], new[0], NEUTRAL, words))
    return out


# -- currency limits -------------------------------------------------------------------------


def _ceiling(cap: CurrencyLimit) -> int:
    """The largest single amount the cap permits (0: none, as amounts are at least 1)."""
    return cap.max_per_tx if cap.daily_cap is None else min(cap.max_per_tx, cap.daily_cap)


def _unknown(currency: str) -> str:
    return f"; the guard knows no currency {currency}: calls in it are denied whatever its caps"


def _currency_entry(where: str, cur: str, o: CurrencyLimit | None, n: CurrencyLimit | None) -> _Raw:
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
    return _Raw(where, old, new, effect, f"{verb}: {what}{note}")


def _currencies(old: dict[str, CurrencyLimit], new: dict[str, CurrencyLimit]) -> list[_Raw]:
    out: list[_Raw] = []
    for cur in sorted(old.keys() | new.keys()):
        where = pointer("limits", CHARGE, "currency_limits", cur)
        o, n = old.get(cur), new.get(cur)
        if o == n:
            continue
        if o is None or n is None:
            out.append(_currency_entry(where, cur, o, n))
            continue
        known = cur in MINOR_DIGITS
        note = "" if known else _unknown(cur)
        if o.max_per_tx != n.max_per_tx:
            effect = _direction(o.max_per_tx, n.max_per_tx) if known else NEUTRAL
            verb = "raised" if n.max_per_tx > o.max_per_tx else "lowered"
            was, now = money(o.max_per_tx, cur), money(n.max_per_tx, cur)
            words = f"{cur} per-transfer limit {verb}: {was} -> {now}"
            out.append(
                _Raw(f"{where}/max_per_tx", o.max_per_tx, n.max_per_tx, effect, words + note)
            )
        if o.daily_cap != n.daily_cap:
            od = _INF if o.daily_cap is None else o.daily_cap
            nd = _INF if n.daily_cap is None else n.daily_cap
            effect = _direction(od, nd) if known else NEUTRAL
            if o.daily_cap is None:
                words = f"{cur} daily cap added: {money(n.daily_cap, cur)}"
            elif n.daily_cap is None:
                words = f"{cur} daily cap removed (was {money(o.daily_cap, cur)})"
            else:
                verb = "raised" if nd > od else "lowered"
                was, now = money(o.daily_cap, cur), money(n.daily_cap, cur)
                words = f"{cur} daily cap {verb}: {was} -> {now}"
            out.append(_Raw(f"{where}/daily_cap", o.daily_cap, n.daily_cap, effect, words + note))
    return out


# -- the charge limits -----------------------------------------------------------------------


def _rule(field: str, old: bool, new: bool, on: str, off: str) -> list[_Raw]:
    """A rule that denies when switched on: on narrows, off widens."""
    if old == new:
        return []
    effect, words = (NARROWS, f"{field} on: {on}") if new else (WIDENS, f"{field} off: {off}")
    return [_Raw(f"{CHARGE_LIMITS}/{field}", old, new, effect, words)]


def _floor(required: str) -> int:
    return max(_FLOOR, ASSURANCE_RANK[required])


def _limits(old: ChargeLimits, new: ChargeLimits) -> list[_Raw]:
    out = _currencies(old.currency_limits, new.currency_limits)
    out += _recipients(old.allowed_merchant_ids, new.allowed_merchant_ids)
    out += _countries(old.allowed_countries, new.allowed_countries)
    out += _categories(old.blocked_categories, new.blocked_categories)
    o_items, n_items = old.max_items_per_tx, new.max_items_per_tx
    if o_items != n_items:
        effect = _direction(
            _INF if o_items is None else o_items, _INF if n_items is None else n_items
        )
        words = f"max_items_per_tx {o_items} -> {n_items}"
        words += "; pack contexts only: a transfer_funds call is one item"
        out.append(_Raw(f"{CHARGE_LIMITS}/max_items_per_tx", o_items, n_items, effect, words))
    o_req, n_req = old.require_assurance_at_least, new.require_assurance_at_least
    if o_req != n_req:
        effect = _direction(_floor(n_req), _floor(o_req))  # a higher floor narrows
        words = f"required assurance {o_req} -> {n_req}"
        if effect == NEUTRAL:
            words += f" (the pack's minimum {PACK_MIN_ASSURANCE} applies either way)"
        out.append(_Raw(f"{CHARGE_LIMITS}/require_assurance_at_least", o_req, n_req, effect, words))
    out += _rule(
        "idempotency_required",
        old.idempotency_required,
        new.idempotency_required,
        "calls without an idempotency_key are denied",
        "calls need no idempotency_key",
    )
    out += _rule(
        "approval_required",
        old.approval_required,
        new.approval_required,
        "every call needs a human approval the agent cannot give",
        "no human approval needed",
    )
    out += _rule(
        "x_vault_memo_approval_code_required",
        old.x_vault_memo_approval_code_required,
        new.x_vault_memo_approval_code_required,
        "calls whose memo lacks an approval code APC-YYYY-NNNN are denied",
        "no approval code needed in the memo",
    )
    return out


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


# -- the passport ----------------------------------------------------------------------------


def _expiry_change(old: Passport, new: Passport) -> list[_Raw]:
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
    if same_date:
        return [_Raw("/never_expires", old.never_expires, new.never_expires, effect, words)]
    return [_Raw("/expires_at", iso(old.expires_at), iso(new.expires_at), effect, words)]


def _assurance(old: Passport, new: Passport) -> list[_Raw]:
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
    return [_Raw("/assurance_level", o, n, effect, words)]


def _status(old: Passport, new: Passport) -> list[_Raw]:
    o, n = old.status, new.status
    if o == n:
        return []
    if n == "active":
        return [_Raw("/status", o, n, WIDENS, f"status {o} -> {n}: calls are judged again")]
    if o == "active":
        return [_Raw("/status", o, n, NARROWS, f"status {o} -> {n}: every call is denied")]
    return [_Raw("/status", o, n, NEUTRAL, f"status {o} -> {n}: every call is denied either way")]


def _first(passport: Passport) -> dict[str, Capability]:
    """Capabilities by id; a repeated id counts once, by its first occurrence."""
    out: dict[str, Capability] = {}
    for cap in passport.capabilities:
        out.setdefault(cap.id, cap)
    return out


def _capabilities(old: Passport, new: Passport) -> list[_Raw]:
    o, n = _first(old), _first(new)
    ignored = f"not judged by the guard, which judges {CHARGE} only"
    out: list[_Raw] = []
    for cid in (cid for cid in o if cid not in n):
        if cid == CHARGE:
            words = f"{CHARGE} no longer granted: every call is denied"
            out.append(_Raw("/capabilities", cid, None, NARROWS, words))
        else:
            out.append(
                _Raw("/capabilities", cid, None, NEUTRAL, f"{quoted(cid)} removed: {ignored}")
            )
    for index, cap in enumerate(new.capabilities):
        if n[cap.id] is not cap:
            continue
        if cap.id not in o:
            if cap.id == CHARGE:
                out.append(_Raw("/capabilities", None, cap.id, WIDENS, f"{CHARGE} granted"))
            else:
                out.append(
                    _Raw(
                        "/capabilities", None, cap.id, NEUTRAL, f"{quoted(cap.id)} added: {ignored}"
                    )
                )
        elif o[cap.id].params != cap.params:
            words = f"params of {quoted(cap.id)} changed: not read by the guard"
            if cap.id == CHARGE:
                words += f", which reads limits.{CHARGE}"
            where = pointer("capabilities", index, "params")
            out.append(_Raw(where, o[cap.id].params, cap.params, NEUTRAL, words))
    return out


def diff_passports(old: Passport, new: Passport, *, level: int | None = None) -> list[Change]:
    """Every change of a field the guard reads, with the field's own direction, in a
    fixed order (`review_passports` settles each on the engine)."""
    rules = _status(old, new) + _expiry_change(old, new) + _assurance(old, new)
    rules += _regions(old.regions, new.regions)
    o_lim, n_lim = readable_limits(old), readable_limits(new)
    if o_lim is not None and n_lim is not None:
        rules += _limits(o_lim, n_lim)
    elif o_lim is not None or n_lim is not None:
        side = "added" if o_lim is None else "removed"
        words = f"charge limits {side}: they apply only where {CHARGE} is granted"
        o_dump = None if o_lim is None else o_lim.model_dump()
        n_dump = None if n_lim is None else n_lim.model_dump()
        rules.append(_Raw(CHARGE_LIMITS, o_dump, n_dump, NEUTRAL, words))
    return [Change(level, *change) for change in _capabilities(old, new) + rules]


def review_passports(
    old: Passport, new: Passport, *, level: int | None = None, search: Search | None = None
) -> list[Change]:
    """`diff_passports`, each change settled by a witness search on the engine: its
    witness and effect, or why it has none (see the module docstring)."""
    search = search or Search(datetime.now(UTC))
    out = []
    for change in diff_passports(old, new, level=level):
        found = search.find(change.pointer, change.old, change.new, change.effect, old, new)
        w = found.witness
        if w is not None and w.effect != NEUTRAL:
            out.append(change._replace(effect=w.effect, witness=w))
        elif found.no_effect is not None:
            out.append(change._replace(effect=NEUTRAL, witness=w, note=found.no_effect))
        elif found.undecided is not None:
            note = f"no witness: {found.undecided}"
            out.append(change._replace(witness=w, note=note, undecided=True))
        else:
            out.append(change._replace(witness=w))
    return out


# -- files and folders -----------------------------------------------------------------------


def _load(path: Path) -> Passport:
    # An empty allowlist loads with a warning; the diff says "anyone" itself.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_passport(path)[0]


def level_files(folder: Path) -> dict[int, Path]:
    """The passports of a folder, by level: as its `levels.toml` points them (what the
    suite enforces), else its `level-N.json` files."""
    if (folder / "levels.toml").is_file():
        return passport_files(folder)  # the suite's own reading
    try:
        names = sorted(p.name for p in folder.iterdir())
    except OSError as exc:
        raise PassportError(f"{folder}: cannot read: {reason(exc)}") from None
    found = {int(m[1]): folder / name for name in names if (m := LEVEL_FILE.fullmatch(name))}
    if not found:
        raise PassportError(f"{folder}: no level-N.json passports in this folder")
    return dict(sorted(found.items()))


class Pair(NamedTuple):
    """One level's two passports, loaded and checked comparable."""

    level: int | None
    old_file: Path
    new_file: Path
    old: Passport
    new: Passport


def _spec_version(path: Path) -> object:
    """The `spec_version` a file states, read before validation; None if it cannot tell."""
    try:
        data = read_json(utf8(path.read_bytes()))
    except (OSError, ValueError, DocumentError):
        return None
    return data.get("spec_version") if isinstance(data, dict) else None


def _packs(passport: Passport) -> set[str]:
    """The capabilities the passport configures limits for (each governed by its pack),
    and payments.charge where it is granted."""
    return set(passport.limits) | ({CHARGE} if passport.grants(CHARGE) else set())


def _pair(level: int | None, old_file: Path, new_file: Path) -> Pair:
    """Both passports loaded, of one spec version and one pack, and usable by the guard;
    else a one-line `PassportError` naming the file."""
    loaded: list[Passport] = []
    refused: list[PassportError] = []
    for path in (old_file, new_file):
        try:
            loaded.append(_load(path))
        except PassportError as exc:
            refused.append(exc)
    old_version, new_version = _spec_version(old_file), _spec_version(new_file)
    if old_version is not None and new_version is not None and old_version != new_version:
        raise PassportError(
            f"{new_file}: spec_version {shown(repr(new_version))} is not "
            f"{shown(repr(old_version))} as in {old_file}: compare passports of one spec version"
        )
    if refused:
        raise refused[0]
    old, new = loaded
    old_packs, new_packs = _packs(old), _packs(new)
    if old_packs and new_packs and not old_packs & new_packs:
        raise PassportError(
            f"{new_file}: configures {', '.join(map(quoted, sorted(new_packs)))}, not "
            f"{', '.join(map(quoted, sorted(old_packs)))} as {old_file} does: "
            "compare passports of one pack"
        )
    for path, passport in ((old_file, old), (new_file, new)):
        try:
            Guard(passport)
        except Exception as exc:  # noqa: BLE001 - whatever the engine refuses, in one line
            raise PassportError(
                f"{path}: the guard cannot use this passport: {type(exc).__name__}: {exc}"
            ) from None
    return Pair(level, old_file, new_file, old, new)


def load_pairs(old: str | Path, new: str | Path) -> list[Pair]:
    """Two passport files, or two folders of passports paired by level, loaded and checked
    before anything is compared: each problem is a one-line `PassportError` naming the
    file (a folder's level the other lacks, a passport of another spec version or pack,
    one the guard cannot use)."""
    old, new = Path(old), Path(new)
    if old.is_dir() != new.is_dir():
        folder, other = (old, new) if old.is_dir() else (new, old)
        if not other.exists():  # a misspelt folder, most likely
            raise PassportError(f"{other}: no such folder")
        raise PassportError(
            f"{other}: not a folder like {folder}: compare two files or two folders"
        )
    if not old.is_dir():
        return [_pair(None, old, new)]
    olds, news = level_files(old), level_files(new)
    for number in sorted(olds.keys() | news.keys()):
        if number not in olds:
            raise PassportError(
                f"{news[number]}: level {number} is not in {old}: the folders' levels must match"
            )
        if number not in news:
            raise PassportError(
                f"{olds[number]}: level {number} is not in {new}: the folders' levels must match"
            )
    return [_pair(n, olds[n], news[n]) for n in sorted(olds)]


def review_pairs(
    pairs: Sequence[Pair], *, now: datetime | None = None, bounds: Bounds | None = None
) -> list[Change]:
    """Each pair's changes settled by its witness (`review_passports`), in one search;
    `now`: the instant calls are judged at."""
    search = Search(now or datetime.now(UTC), bounds)
    changes: list[Change] = []
    for pair in pairs:
        changes += review_passports(pair.old, pair.new, level=pair.level, search=search)
    return changes


def diff_paths(
    old: str | Path,
    new: str | Path,
    *,
    now: datetime | None = None,
    bounds: Bounds | None = None,
) -> list[Change]:
    """Diff two passport files, or two folders of passports paired by level, each change
    settled by its witness (`review_pairs`). Any problem with the input is a one-line
    `PassportError`, before any search."""
    return review_pairs(load_pairs(old, new), now=now, bounds=bounds)


def any_widen(changes: Iterable[Change]) -> bool:
    """Whether a change widens: witnessed, or undecided and widening by its field."""
    return any(c.effect == WIDENS for c in changes)
