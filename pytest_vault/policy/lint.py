"""Passport lint: the mistakes that make a passport fail open, or deny everything, and the
rules that have no effect or are broader than they look, found before anything runs.

A finding names the file, a JSON pointer, a severity and a code. Errors are what the
author cannot have meant (an allowlist the published pack reads as "anyone", an entry
the guard can never match, a passport that cannot be loaded); warnings are what they
might have (a suspended passport, no daily cap).

Where the engine reads "no limit", the line between the two is what the passport says:
a limit it states but gives the engine nothing to enforce (`never_expires: false` with no
`expires_at`, an allowlist written empty, which the pack reads as "any") is an error; a
cap it leaves out (no expiry at all, no `daily_cap`, no `max_items_per_tx`) is a warning,
since leaving it out may be meant. An optional allowlist left out (`allowed_countries`)
is no finding: that is how the pack says a passport has no such rule.

A rule of no effect or an over-broad one is a warning at its line, with a witness where
one exists: a call the engine itself decides, showing it (a transfer within max_per_tx that
the daily cap below it denies; a payee nobody listed that a "*" beside the names lets
through; a recipient an entry written like a pattern does not cover). So are a payee
that can pass for another (`look_alike`: mixed scripts, compatibility characters) and a
capability's `max_amount` the guard never reads, unlike the `max_per_tx` it does.
"""

from __future__ import annotations

import json
import unicodedata
import warnings
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import ValidationError

from pytest_vault.core.errors import FileError, reason, unreachable
from pytest_vault.core.json import DocumentError, Lines, read_json, utf8
from pytest_vault.core.text import shown
from pytest_vault.guard.engine import (
    MINOR_DIGITS,
    PACK_MIN_ASSURANCE,
    TRANSFER_CATEGORY,
    TRANSFER_TOOL,
    Decision,
    Guard,
)
from pytest_vault.guard.packs import (
    EXECUTE_POLICY,
    KNOWN_REFUND_REASONS,
    MIN_ASSURANCE,
    PAYOUT_POLICY,
    REFUND_POLICY,
)
from pytest_vault.guard.passport import (
    ASSURANCE_RANK,
    CHARGE,
    EXECUTE,
    PAYOUT,
    REFUND,
    WILDCARD,
    ChargeLimits,
    ExecuteLimits,
    Passport,
    PayoutLimits,
    RefundLimits,
    passport_from_data,
    problem_loc,
)
from pytest_vault.policy.diff import level_files
from pytest_vault.policy.fields import (
    ALLOWLIST,
    BY_NAME,
    CHARGE_LIMITS,
    at,
    pack_limits,
    parts,
    pointer,
    quoted,
)
from pytest_vault.policy.witness import (
    Side,
    bases,
    iso,
    jsonable,
    money,
    reasons_of,
    said,
    stranger,
    unreadable_recipient,
)

Severity = Literal["error", "warning"]
# Where each finding is written: the table's pointers (`fields.FIELDS`), as diff reports.
EXPIRES_AT, NEVER_EXPIRES = BY_NAME["expiry"].pointers


class Finding(NamedTuple):
    file: str
    pointer: str
    severity: Severity
    code: str
    message: str
    # The line the pointer's field is written on (of the deepest part the file holds), so
    # an editor or a CI annotation can go there; None when the file could not be read.
    lineno: int | None = None
    # A call the engine decides as the message says (the message quotes it too).
    witness: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = self._asdict()
        out["line"] = out.pop("lineno")
        out["witness"] = out.pop("witness")
        return out

    def line(self) -> str:
        where = self.file if self.lineno is None else f"{self.file}:{self.lineno}"
        return shown(f"{where}:{self.pointer}: {self.severity}: {self.message}")


def _failure_pointer(data: object) -> str:
    """Where the loader's first problem is, as a JSON pointer ("" when it cannot tell)."""
    if not isinstance(data, dict):
        return ""
    try:
        Passport.model_validate(data)
    except ValidationError as exc:
        return pointer(*problem_loc(data, exc))
    return ""


def _unloadable(file: str, data: object, error: FileError) -> Finding:
    where = _failure_pointer(data)
    if where.startswith(CHARGE_LIMITS):
        return Finding(file, where, "error", "charge-limits-unreadable", str(error))
    return Finding(file, where, "error", "unloadable", str(error))


def _expiry(file: str, passport: Passport, now: datetime) -> list[Finding]:
    if passport.expires_at is None:
        if passport.never_expires is False:
            words = (
                "never_expires is false but there is no expires_at: the guard reads it as "
                "never expiring; give expires_at, or write never_expires: true if that is meant"
            )
            return [Finding(file, NEVER_EXPIRES, "error", "expiry-missing", words)]
        if passport.never_expires is None:
            words = (
                "no expires_at and no never_expires: the passport never expires; write "
                "never_expires: true if that is meant, or give expires_at"
            )
            return [Finding(file, EXPIRES_AT, "warning", "no-expiry", words)]
        return []
    when = iso(passport.expires_at)
    if passport.never_expires:
        words = f"never_expires is true, so expires_at {when} is ignored"
        return [Finding(file, EXPIRES_AT, "warning", "expiry-ignored", words)]
    if now >= passport.expires_at:
        words = f"expired at {when}: every call is denied (oap.passport_expired)"
        return [Finding(file, EXPIRES_AT, "error", "expired", words)]
    return []


class _Probe:
    """Calls to one passport, judged by the engine at `now`: a lint finding's witness."""

    def __init__(self, passport: Passport, now: datetime) -> None:
        self.passport = passport
        self.now = now
        self.side = Side(passport, "passport")
        self.bases = bases(self.side, self.side)

    def call(self, **change: Any) -> tuple[dict[str, Any], Decision] | None:
        """The first base call with `change`, and its decision; None if there is none."""
        if not self.bases:
            return None
        args = self.bases[0].call(**change)
        guard = Guard(self.passport, clock=lambda: self.now)
        return args, guard.judge_call(TRANSFER_TOOL, args)

    def witness(self, finding: Finding, want: bool, **change: Any) -> Finding:
        """`finding`, with a call decided `want` (allowed or not) quoted as its witness;
        as it is where the engine decides otherwise (no witness then)."""
        probe = self.call(**change)
        if probe is None or probe[1].allow is not want:
            return finding
        args, decision = probe
        shown_args = json.dumps(jsonable(args), sort_keys=True)
        words = f"{finding.message}; e.g. {TRANSFER_TOOL} {shown_args} is {said(decision)}"
        data = {
            "tool": TRANSFER_TOOL,
            "arguments": jsonable(args),
            "allow": decision.allow,
            "reasons": reasons_of(decision),
        }
        return finding._replace(message=words, witness=data)


# -- look-alike payees ------------------------------------------------------------------------
#
# The guard matches a recipient exactly, so an allowlist entry that looks like a payee but
# is other text (`rent@\u0430port-vault.com`, its 'a' Cyrillic) permits whoever owns that
# other address. An entry is flagged when NFKC would change it (fullwidth, mathematical or
# other compatibility characters, a letter and its combining accent apart), or when its
# letters and digits are not of one script in the sense of Unicode's "Highly Restrictive"
# level (UTS #39, 5.2): one script, or Latin with Han, Hiragana and Katakana, with Han and
# Bopomofo, or with Han and Hangul. ASCII letters are Latin, ASCII digits any script's.
#
# Python's `unicodedata` has no Script property: a character's script is the first word of
# its Unicode name (`CYRILLIC SMALL LETTER A`), which is the script for the letters of
# every script with a one-word name; scripts of two words that share a first word (Old
# Italic, Old Persian) read as one, which only misses a mix of two such scripts. A payee
# written wholly in one other script (an all-Cyrillic label) or with a Latin letter that
# looks like another (U+0251 LATIN SMALL LETTER ALPHA for 'a') is not found: that needs
# Unicode's confusables table.
_HIGHLY_RESTRICTIVE = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)


def _script(char: str) -> str | None:
    """The script of a letter or digit, by its name's first word; None for ASCII digits
    and for what belongs to no one script (modifier letters, marks, punctuation)."""
    if char.isascii():
        return "LATIN" if char.isalpha() else None
    if not char.isalnum() or unicodedata.category(char) == "Lm":
        return None
    word = unicodedata.name(char, "UNNAMED").split()[0]
    return "HAN" if word == "CJK" else word


def _named(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, 'UNNAMED')}"


def look_alike(entry: str) -> str | None:
    """Why `entry` can pass for another payee, in words; None when it cannot (above)."""
    normal = unicodedata.normalize("NFKC", entry)
    if normal != entry:
        odd = next(
            (
                c
                for c in entry
                if unicodedata.normalize("NFKC", c) != c or unicodedata.category(c)[0] == "M"
            ),
            None,
        )
        which = "" if odd is None else f"; {_named(odd)}"
        return f"it reads as {quoted(normal)} once normalized (NFKC{which})"
    first: dict[str, str] = {}  # each script, and its first character
    for char in entry:
        script = _script(char)
        if script is not None:
            first.setdefault(script, char)
    scripts = frozenset(first)
    if len(scripts) <= 1 or any(scripts <= allowed for allowed in _HIGHLY_RESTRICTIVE):
        return None
    main, *others = first
    rest = " and ".join(f"{s.title()} ({_named(first[s])})" for s in others)
    return f"it mixes {main.title()} with {rest}"


def _allowlist(file: str, entries: Sequence[str], probe: _Probe) -> list[Finding]:
    if not entries:
        words = (
            "EMPTY allowlist: the published pack reads it as 'any recipient' (fail-open); "
            'write ["*"] if that is meant, or list the recipients'
        )
        return [Finding(file, ALLOWLIST, "error", "empty-allowlist", words)]
    out: list[Finding] = []
    first: dict[str, int] = {}
    for index, entry in enumerate(entries):
        where = f"{ALLOWLIST}/{index}"
        if entry in first:
            words = f"{quoted(entry)} repeats entry {first[entry]}"
            out.append(Finding(file, where, "warning", "duplicate-recipient", words))
            continue
        first[entry] = index
        if entry == WILDCARD:
            if len(set(entries)) > 1:
                words = "'*' permits anyone, so the named entries beside it restrict nothing"
                finding = Finding(file, where, "warning", "wildcard-beside-names", words)
                out.append(probe.witness(finding, True, recipient=stranger(probe.side)))
        elif (why := unreadable_recipient(entry)) is not None:
            words = f"{quoted(entry)} can never match: the guard denies such a recipient ({why})"
            out.append(Finding(file, where, "error", "unmatchable-recipient", words))
        elif WILDCARD in entry:
            words = (
                f"{quoted(entry)} is no pattern: the guard matches recipients exactly ('*' "
                "alone permits anyone), so it permits only a recipient of exactly that name"
            )
            finding = Finding(file, where, "error", "pattern-recipient", words)
            covered = entry.replace(WILDCARD, "payee")
            if covered not in entries:
                finding = probe.witness(finding, False, recipient=covered)
            out.append(finding)
        elif (why := look_alike(entry)) is not None:
            words = (
                f"{quoted(entry)} can pass for another payee: {why}; the guard pays "
                "exactly this text, whoever holds it"
            )
            finding = Finding(file, where, "warning", "look-alike-recipient", words)
            out.append(probe.witness(finding, True, recipient=entry))
    return out


def _currencies(file: str, limits: ChargeLimits, probe: _Probe) -> list[Finding]:
    if not limits.currency_limits:
        words = "no currency: every call is denied (oap.currency_unsupported)"
        where = BY_NAME["currency_limits"].pointers[1]  # the whole map
        return [Finding(file, where, "warning", "no-currencies", words)]
    out: list[Finding] = []
    for cur, cap in limits.currency_limits.items():
        where = at("currency_limits", currency=cur)
        if cur not in MINOR_DIGITS:
            words = f"the guard knows no currency {cur}: calls in it are always denied"
            out.append(Finding(file, where, "warning", "unknown-currency", words))
        if cap.daily_cap is None:
            words = f"{cur} has no daily_cap: any number of transfers a day"
            out.append(Finding(file, where, "warning", "no-daily-cap", words))
        elif cap.max_per_tx > cap.daily_cap:
            words = (
                f"max_per_tx {money(cap.max_per_tx, cur)} is above daily_cap "
                f"{money(cap.daily_cap, cur)}: the daily cap is the real limit, and "
                "max_per_tx can never bind"
            )
            where = at("max_per_tx", currency=cur)
            finding = Finding(file, where, "warning", "max-above-daily-cap", words)
            if cur in MINOR_DIGITS:  # an amount within max_per_tx, over the daily cap
                finding = probe.witness(finding, False, currency=cur, minor=cap.daily_cap + 1)
            out.append(finding)
        elif cap.max_per_tx == cap.daily_cap and cur in MINOR_DIGITS:
            words = (
                f"max_per_tx {money(cap.max_per_tx, cur)} equals daily_cap: every amount over "
                "it is over the daily cap too, so max_per_tx can never decide a call"
            )
            where = at("max_per_tx", currency=cur)
            out.append(Finding(file, where, "warning", "limit-never-binds", words))
    return out


def _capability_amounts(
    file: str, passport: Passport, limits: ChargeLimits, probe: _Probe
) -> list[Finding]:
    """A `payments.charge` capability's `params.max_amount` against `max_per_tx` in its
    `params.currency` (or the one currency the limits have): the guard reads the limits
    only, never a capability's params, so a `max_amount` that differs misleads whoever
    reads it. Above: transfers it seems to grant are denied. Below: it seems to cap what
    the guard allows."""
    out: list[Finding] = []
    for index, capability in enumerate(passport.capabilities):
        amount = capability.params.get("max_amount")
        if capability.id != CHARGE or type(amount) is not int or amount < 0:
            continue
        named = capability.params.get("currency")
        if named is None and len(limits.currency_limits) == 1:
            named = next(iter(limits.currency_limits))
        if not isinstance(named, str) or named not in limits.currency_limits:
            continue
        cur, cap = named, limits.currency_limits[named]
        if amount == cap.max_per_tx:
            continue
        where = at("capability_params", index=index) + "/max_amount"
        stated = f"max_amount {money(amount, cur)}"
        limit = f"{CHARGE} max_per_tx {money(cap.max_per_tx, cur)}"
        if amount > cap.max_per_tx:
            words = (
                f"{stated} is above {limit}: the guard reads only max_per_tx, so a transfer "
                f"over {money(cap.max_per_tx, cur)} is denied"
            )
            finding = Finding(file, where, "warning", "max-amount-above-limit", words)
            if cur in MINOR_DIGITS:  # an amount within max_amount, over max_per_tx
                finding = probe.witness(finding, False, currency=cur, minor=cap.max_per_tx + 1)
        else:
            words = (
                f"{stated} is below {limit}: the guard never reads max_amount, so transfers "
                f"up to {money(cap.max_per_tx, cur)} are allowed"
            )
            finding = Finding(file, where, "warning", "max-amount-not-enforced", words)
            if cur in MINOR_DIGITS:  # an amount over max_amount, within max_per_tx
                finding = probe.witness(finding, True, currency=cur, minor=amount + 1)
        out.append(finding)
    return out


def _context_limits(file: str, limits: ChargeLimits) -> list[Finding]:
    """The rules only a pack context meets (a transfer_funds call is one item and names no
    shipping country), where the engine reads a missing limit as none."""
    out: list[Finding] = []
    if limits.max_items_per_tx is None:
        where = at("max_items_per_tx")
        words = "no max_items_per_tx: a pack context may carry any number of items"
        out.append(Finding(file, where, "warning", "no-item-cap", words))
    # Left out, the list is the pack's "no country rule" (there is no "*" for countries);
    # written empty, it reads the same, which its author cannot have meant.
    if "allowed_countries" in limits.model_fields_set and not limits.allowed_countries:
        where = at("allowed_countries")
        words = (
            "EMPTY allowed_countries: the published pack reads it as 'any shipping country' "
            "(fail-open); list the countries, or leave the field out if any is meant"
        )
        out.append(Finding(file, where, "error", "empty-country-allowlist", words))
    return out


def _charge(file: str, passport: Passport, limits: ChargeLimits, now: datetime) -> list[Finding]:
    out: list[Finding] = []
    required = limits.require_assurance_at_least
    floor = max(ASSURANCE_RANK[PACK_MIN_ASSURANCE], ASSURANCE_RANK[required])
    if ASSURANCE_RANK[passport.assurance_level] < floor:
        needed = (
            f"the pack's minimum {PACK_MIN_ASSURANCE}"
            if ASSURANCE_RANK[required] <= ASSURANCE_RANK[PACK_MIN_ASSURANCE]
            else f"require_assurance_at_least {required}"
        )
        words = (
            f"assurance_level {passport.assurance_level} is below {needed}: every call is "
            "denied (oap.assurance_insufficient)"
        )
        out.append(Finding(file, at("assurance_level"), "error", "assurance-below-minimum", words))
    if not passport.regions:
        words = "no region: every transfer_funds call is denied (oap.region_blocked)"
        out.append(Finding(file, at("regions"), "warning", "no-regions", words))
    if limits.approval_required:
        words = "every call needs a human approval the agent cannot give (oap.approval_required)"
        where = at("approval_required")
        out.append(Finding(file, where, "warning", "approval-required", words))
    if (
        "require_assurance_at_least" in limits.model_fields_set
        and ASSURANCE_RANK[limits.require_assurance_at_least] < ASSURANCE_RANK[PACK_MIN_ASSURANCE]
    ):
        words = (
            f"require_assurance_at_least {limits.require_assurance_at_least} can never bind: "
            f"the pack's minimum {PACK_MIN_ASSURANCE} applies first"
        )
        where = at("require_assurance_at_least")
        out.append(Finding(file, where, "warning", "assurance-requirement-never-binds", words))
    probe = _Probe(passport, now)
    out += _allowlist(file, limits.allowed_merchant_ids, probe)
    out += _currencies(file, limits, probe)
    out += _capability_amounts(file, passport, limits, probe)
    out += _context_limits(file, limits)
    for index, category in enumerate(limits.blocked_categories):
        if category == TRANSFER_CATEGORY:
            words = f"{TRANSFER_CATEGORY} is blocked: every transfer_funds call is denied"
            where = f"{at('blocked_categories')}/{index}"
            out.append(Finding(file, where, "warning", "transfers-blocked", words))
    return out


# -- the other packs' limits: refund, payout, transaction execute ------------------------------

_PACKS = (
    (REFUND, REFUND_POLICY, "refund", "refund"),
    (PAYOUT, PAYOUT_POLICY, "payout", "payout"),
    (EXECUTE, EXECUTE_POLICY, "execute", "scheduled payment and account change"),
)


def _pack_currencies(file: str, short: str, what: str, limits: Any) -> list[Finding]:
    """A refund's or payout's currencies: each cap, and the list of supported ones."""
    out: list[Finding] = []
    listed = limits.supported_currencies
    usable = [c for c in limits.currency_limits if listed is None or c in listed]
    if not usable:
        words = (
            f"no currency with limits is supported: every {what} is denied "
            "(oap.currency_unsupported)"
        )
        where = BY_NAME[f"{short}.currency_limits"].pointers[1]
        out.append(Finding(file, where, "warning", "no-currencies", words))
    for cur, cap in limits.currency_limits.items():
        where = at(f"{short}.currency_limits", currency=cur)
        if cur not in MINOR_DIGITS:
            words = f"the guard knows no currency {cur}: {what}s in it are always denied"
            out.append(Finding(file, where, "warning", "unknown-currency", words))
        if listed is not None and cur not in listed:
            words = (
                f"{cur} has limits but is not in supported_currencies: {what}s in it are "
                "denied (oap.currency_unsupported)"
            )
            out.append(Finding(file, where, "warning", "currency-not-supported", words))
        if cap.daily_cap is None:
            words = f"{cur} has no daily_cap: any number of {what}s a day"
            out.append(Finding(file, where, "warning", "no-daily-cap", words))
        elif cap.max_per_tx > cap.daily_cap:
            words = (
                f"max_per_tx {money(cap.max_per_tx, cur)} is above daily_cap "
                f"{money(cap.daily_cap, cur)}: the daily cap is the real limit"
            )
            where = at(f"{short}.max_per_tx", currency=cur)
            out.append(Finding(file, where, "warning", "max-above-daily-cap", words))
    for index, cur in enumerate(listed or ()):
        if cur not in limits.currency_limits:
            words = f"{cur} is supported but has no currency_limits: {what}s in it are denied"
            where = f"{BY_NAME[f'{short}.currency_limits'].pointers[2]}/{index}"
            out.append(Finding(file, where, "warning", "currency-without-limits", words))
    return out


def _refund(file: str, passport: Passport, limits: RefundLimits) -> list[Finding]:
    out: list[Finding] = []
    written = "refund_reason_codes" if limits.refund_reason_codes is not None else "reason_codes"
    codes = limits.refund_reason_codes or limits.reason_codes or []
    where = pointer("limits", REFUND, written)
    if not codes:
        words = "no refund reason codes: every refund is denied (oap.invalid_reason_code)"
        out.append(Finding(file, where, "warning", "no-reason-codes", words))
    for index, code in enumerate(codes):
        if code not in KNOWN_REFUND_REASONS:
            words = (
                f"reason code {quoted(code)} is none of {', '.join(KNOWN_REFUND_REASONS)}: "
                "a misspelt code denies every refund sent with the right one"
            )
            out.append(Finding(file, f"{where}/{index}", "warning", "unknown-reason-code", words))
    if limits.regions is not None and not set(limits.regions) & set(passport.regions):
        words = "no region both here and in the passport's regions: every refund is denied"
        out.append(Finding(file, at("refund.regions"), "warning", "no-regions", words))
    return out


def _payout(file: str, limits: PayoutLimits) -> list[Finding]:
    out: list[Finding] = []
    if not limits.allowed_recipients:
        words = (
            "EMPTY allowed_recipients: the guard denies every payout "
            "(vault.recipient_forbidden), where an empty allowlist reads as 'anyone' under "
            'the charge pack; list the destinations, or write ["*"] if any is meant'
        )
        out.append(
            Finding(file, at("payout.allowed_recipients"), "error", "empty-recipients", words)
        )
    if not limits.allowed_destination_types:
        words = "no destination type: every payout is denied (oap.destination_type_forbidden)"
        where = at("payout.allowed_destination_types")
        out.append(Finding(file, where, "warning", "no-destination-types", words))
    if limits.max_payouts_per_day == 0:
        words = "max_payouts_per_day is 0: every payout is denied (oap.limit_exceeded)"
        out.append(Finding(file, at("payout.max_payouts_per_day"), "warning", "no-payouts", words))
    return out


def _execute(file: str, limits: ExecuteLimits) -> list[Finding]:
    out: list[Finding] = []
    if limits.x_vault_account_fields is None:
        words = (
            "no x_vault_account_fields: no account field may change (update_account is "
            'denied, fail closed); list the fields, or write [] if none is meant, ["*"] for any'
        )
        out.append(Finding(file, at("execute.limits"), "warning", "no-account-fields", words))
    per_tx, per_day = limits.max_exposure_per_tx_usd, limits.max_exposure_per_counterparty_usd
    if per_tx > per_day:
        words = (
            f"max_exposure_per_tx_usd {per_tx} is above max_exposure_per_counterparty_usd "
            f"{per_day} (USD cents): a payee's daily exposure is the real limit"
        )
        where = at("execute.max_exposure_per_tx_usd")
        out.append(Finding(file, where, "warning", "max-above-daily-cap", words))
    both = [
        t
        for t in limits.allowed_source_account_types
        if t in limits.restricted_source_account_types
    ]
    if both:
        words = (
            f"source account type(s) {', '.join(map(quoted, both))} allowed and restricted: "
            "restricted wins (oap.account_type_restricted)"
        )
        where = at("execute.allowed_source_account_types")
        out.append(Finding(file, where, "warning", "source-type-restricted", words))
    return out


def _other_packs(file: str, passport: Passport) -> list[Finding]:
    """Each other pack's limits the passport has: read where it grants the capability,
    dormant where it does not."""
    out: list[Finding] = []
    below: list[tuple[str, str]] = []  # the packs whose assurance the passport lacks
    for capability, policy, short, what in _PACKS:
        limits = pack_limits(passport, capability)
        if limits is None:
            continue
        if not passport.grants(capability):
            words = (
                f"limits.{capability} can never bind: the passport does not grant "
                f"{capability}, so every {what} is denied (oap.unknown_capability)"
            )
            out.append(Finding(file, at(f"{short}.limits"), "warning", "dormant-limits", words))
            continue
        required = getattr(limits, "require_assurance_at_least", "L0")
        floor = max(ASSURANCE_RANK[MIN_ASSURANCE[policy]], ASSURANCE_RANK[required])
        if ASSURANCE_RANK[passport.assurance_level] < floor:
            below.append((policy, what))
        if getattr(limits, "approval_required", False):
            words = (
                f"every {what} needs a human approval the agent cannot give (oap.approval_required)"
            )
            where = at(f"{short}.approval_required")
            out.append(Finding(file, where, "warning", "approval-required", words))
        if isinstance(limits, RefundLimits):
            out += _pack_currencies(file, short, what, limits) + _refund(file, passport, limits)
        elif isinstance(limits, PayoutLimits):
            out += _pack_currencies(file, short, what, limits) + _payout(file, limits)
        elif isinstance(limits, ExecuteLimits):
            out += _execute(file, limits)
    if below:  # one finding for them all, beside the charge pack's own
        words = (
            f"assurance_level {passport.assurance_level} is below what "
            f"{', '.join(p for p, _ in below)} require: every "
            f"{', '.join(w for _, w in below)} is denied (oap.assurance_insufficient)"
        )
        out.insert(
            0, Finding(file, at("assurance_level"), "error", "assurance-below-minimum", words)
        )
    return out


def lint_document(file: str, document: bytes, *, now: datetime) -> list[Finding]:
    """The findings for one passport's bytes, `file` naming it."""
    try:
        text = utf8(document)
        data = read_json(text)
    except DocumentError as exc:
        message = shown(f"{exc.where(file)}: {exc}")
        return [Finding(file, "", "error", "unloadable", message, exc.line)]
    try:
        # The empty allowlist's warning is an error finding here, with its pointer.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            passport = passport_from_data(data, file, text)
    except FileError as exc:
        out = [_unloadable(file, data, exc)]
    else:
        out = _findings(file, passport, now)
    lines = Lines(text)
    return [f._replace(lineno=lines(parts(f.pointer))) for f in out]


def _findings(file: str, passport: Passport, now: datetime) -> list[Finding]:
    out: list[Finding] = []
    if passport.status != "active":
        words = f"status is {passport.status}: every call is denied (oap.passport_suspended)"
        out.append(Finding(file, at("status"), "warning", "not-active", words))
    out += _expiry(file, passport, now)
    limits = passport.charge_limits
    if limits is not None:
        out += _charge(file, passport, limits, now)
    elif CHARGE in passport.limits:
        words = (
            f"limits.{CHARGE} can never bind: the passport does not grant {CHARGE}, so every "
            "call is denied (oap.unknown_capability) whatever they say"
        )
        out.append(Finding(file, at("charge_limits"), "warning", "dormant-limits", words))
    return out + _other_packs(file, passport)


def lint_file(path: Path, *, now: datetime) -> list[Finding]:
    try:
        document = path.read_bytes()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        message = shown(f"{path}: cannot read: {reason(exc)}")
        return [Finding(str(path), "", "error", "unloadable", message)]
    return lint_document(str(path), document, now=now)


def lint_paths(paths: Iterable[str | Path], *, now: datetime | None = None) -> list[Finding]:
    """Lint passport files, and every `*.json` of the folders given."""
    now = now or datetime.now(UTC)
    out: list[Finding] = []
    for path in map(Path, paths):
        problem = unreachable(path)  # else `is_dir` raises for a name too long
        if problem is not None:
            message = shown(f"{path}: cannot read: {problem}")
            out.append(Finding(str(path), "", "error", "unloadable", message))
            continue
        if not path.is_dir():
            out += lint_file(path, now=now)
            continue
        try:
            files = sorted(p for p in path.glob("*.json") if p.is_file())
        except OSError as exc:
            message = shown(f"{path}: cannot read: {reason(exc)}")
            out.append(Finding(str(path), "", "error", "unloadable", message))
            continue
        settings = path / "levels.toml"
        if settings.is_file():
            # What the suite enforces is what levels.toml points at, wherever it is.
            try:
                files += [f for f in level_files(path).values() if f not in files]
            except FileError as exc:
                out.append(Finding(str(settings), "", "error", "unloadable", str(exc)))
        if not files:
            message = shown(f"{path}: no *.json passports in this folder")
            out.append(Finding(str(path), "", "error", "no-passports", message))
        for file in files:
            out += lint_file(file, now=now)
    return out


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)
