"""`vault-guard lint --format sarif` and `vault-guard diff --format sarif`: a policy's
findings for GitHub's code scanning, each at its passport's line.

Lint: each finding under its rule's name (`empty-allowlist`, `limit-never-binds`, ...), an
error or a warning as lint says. Diff: each change that widens (`vault/widens`, a warning:
a reviewer must see it) or narrows (`vault/narrows`, a note), at the line of the changed
field in the new passport, its witness in the message.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_vault import __version__
from pytest_vault.core.json import Lines
from pytest_vault.core.sarif import Finding as Result
from pytest_vault.core.sarif import Rule, sarif_log
from pytest_vault.policy.diff import NARROWS, WIDENS, Change, Pair, parts
from pytest_vault.policy.lint import Finding

# What each lint rule finds, as code scanning shows it beside a finding.
LINT_HELP = {
    "unloadable": "The passport cannot be read or is not a valid OAP passport: every call "
    "under it is denied.",
    "no-passports": "The folder holds no passport to lint.",
    "not-active": "The passport's status is not active: every call is denied.",
    "expired": "The passport has expired: every call is denied.",
    "expiry-missing": "never_expires is false but no expires_at is given: the passport never "
    "expires, though its author said it would.",
    "expiry-ignored": "expires_at is given but never_expires is true: the date is ignored.",
    "no-expiry": "The passport says nothing of its expiry: it never expires.",
    "empty-allowlist": "An empty allowed_merchant_ids permits every recipient (the pack reads "
    "it as no limit): fail open.",
    "empty-country-allowlist": "An empty country allowlist permits every country.",
    "unmatchable-recipient": "An allowlist entry no recipient can match exactly (spaces, "
    "case, invisible characters): it permits no one.",
    "pattern-recipient": "An allowlist entry written like a pattern (`*@domain`): the engine "
    "matches exactly, so it permits no one but that text.",
    "wildcard-beside-names": "A wildcard beside named recipients: the names add nothing, and "
    "the wildcard permits everyone.",
    "duplicate-recipient": "A recipient listed twice.",
    "look-alike-recipient": "An allowlist entry that can pass for another payee: it mixes "
    "scripts (a Cyrillic letter among Latin ones) or holds compatibility characters "
    "(fullwidth, mathematical). The guard matches exactly, so it pays that other text.",
    "max-amount-above-limit": "A capability's max_amount above the max_per_tx of its "
    "currency: the guard reads only max_per_tx, so the larger transfers it seems to grant "
    "are denied.",
    "max-amount-not-enforced": "A capability's max_amount below the max_per_tx of its "
    "currency: the guard never reads max_amount, so transfers above it are allowed up to "
    "max_per_tx.",
    "no-currencies": "No currency limits: every charge is refused (currency unsupported).",
    "unknown-currency": "A currency code the engine does not know: its charges are refused.",
    "no-daily-cap": "No daily cap: transfers within the per-transfer limit add up without bound.",
    "max-above-daily-cap": "A per-transfer limit at or above the daily cap: the daily cap "
    "binds first, and the per-transfer limit never does.",
    "limit-never-binds": "A limit another limit always binds before: it has no effect.",
    "no-item-cap": "No item cap per transaction.",
    "no-regions": "No regions: the passport's region rule permits none.",
    "currency-not-supported": "A refund or payout currency with limits but not in "
    "supported_currencies: its refunds or payouts are denied.",
    "currency-without-limits": "A supported refund or payout currency without "
    "currency_limits: nothing caps it, so its refunds or payouts are denied.",
    "no-reason-codes": "No refund reason codes: every refund is denied.",
    "unknown-reason-code": "A refund reason code none of the known ones (customer_request, "
    "defective_product, ...): likely misspelt, so refunds sent with the right code are denied.",
    "empty-recipients": "An empty payout allowed_recipients: the guard denies every payout, "
    'where an empty allowlist reads as "anyone" under the charge pack.',
    "no-destination-types": "No payout destination type allowed: every payout is denied.",
    "no-payouts": "max_payouts_per_day is 0: every payout is denied.",
    "no-account-fields": "No x_vault_account_fields: no account field may change "
    "(update_account is denied, fail closed).",
    "source-type-restricted": "A source account type both allowed and restricted: "
    "restricted wins, so transactions from it are denied.",
    "approval-required": "The limits demand human approval, which an agent cannot give: every "
    "charge is denied.",
    "transfers-blocked": "A setting that denies every transfer.",
    "assurance-below-minimum": "An assurance requirement below the pack's minimum (L2).",
    "assurance-requirement-never-binds": "An assurance requirement the passport's own "
    "assurance always meets.",
    "dormant-limits": "Charge limits on a passport that does not grant payments: they never bind.",
    "charge-limits-unreadable": "Charge limits the engine cannot read: every charge is denied.",
}
DIFF_RULES = (
    Rule(
        "vault/widens",
        "PassportWidens",
        "A passport change permits a call the old passport denied",
        "The new passport allows a call the old one denied: a new payee, a higher cap, a "
        "looser rule. The finding quotes a witness, a call the guard itself decides "
        "differently under the two passports: review it before the change lands.",
    ),
    Rule(
        "vault/narrows",
        "PassportNarrows",
        "A passport change denies a call the old passport allowed",
        "The new passport denies a call the old one allowed (its witness quoted): check that "
        "the agent's legitimate work still passes.",
    ),
)


def lint_sarif(findings: Sequence[Finding]) -> dict[str, Any]:
    """The lint findings as a SARIF log, each at its passport's line."""
    codes = sorted({f.code for f in findings})
    rules = [
        Rule(code, _pascal(code), code.replace("-", " "), LINT_HELP.get(code, code))
        for code in codes
    ]
    results = [
        Result(f.code, f.severity, f"{f.pointer or '(passport)'}: {f.message}", f.file, f.lineno)
        for f in findings
    ]
    return sarif_log("vault-guard lint", __version__, rules, results)


def diff_sarif(changes: Sequence[Change], pairs: Sequence[Pair]) -> dict[str, Any]:
    """The widening and narrowing changes as a SARIF log, each at its field's line in the
    new passport (`pairs`: the passports diffed, by level)."""
    files = {p.level: p.new_file for p in pairs}
    lines: dict[Path, Lines] = {}
    results = []
    for c in changes:
        if c.effect not in (WIDENS, NARROWS):
            continue
        path = files.get(c.level)
        line = None
        if path is not None:
            if path not in lines:
                lines[path] = Lines(path.read_text(encoding="utf-8", errors="replace"))
            line = lines[path](parts(c.pointer))
        witness = "" if c.witness is None else f"; {c.witness.line()}"
        level = "" if c.level is None else f"level {c.level}: "
        rule = "vault/widens" if c.effect == WIDENS else "vault/narrows"
        results.append(
            Result(
                rule,
                "warning" if c.effect == WIDENS else "note",
                f"{level}{c.pointer}: {c.summary}{witness}",
                None if path is None else str(path),
                line,
            )
        )
    return sarif_log("vault-guard diff", __version__, DIFF_RULES, results)


def _pascal(code: str) -> str:
    return "".join(part.capitalize() for part in code.split("-"))
