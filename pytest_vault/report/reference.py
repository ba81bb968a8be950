"""The documentation's generated reference: Markdown tables made from the definitions
themselves (the case model, the results row, the guard's reason codes), so the docs
cannot drift from the code. `pytest_vault.plugin.docs` writes them into the pages (and the
MkDocs hook renders them the same way); the option table is
`pytest_vault.plugin.options.reference()`.

Each table that needs words the definition does not carry (a column's meaning, a code's
cause) keeps them here, keyed by name, and refuses to render when a name is missing or
left over: a new column or code fails the docs build until it is described.
"""

from __future__ import annotations

from typing import Any

from pytest_vault.corpus.model import schema
from pytest_vault.guard.engine import REASON_CODES
from pytest_vault.guard.packs import PACK_CODES
from pytest_vault.harness.events import ROW


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- the corpus format ----------------------------------------------------------------------


def _json_type(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    if "$ref" in prop:
        return f"object ({prop['$ref'].rsplit('/', 1)[-1]})"
    if "anyOf" in prop:
        kinds = [_json_type(p, defs) for p in prop["anyOf"] if p.get("type") != "null"]
        nullable = any(p.get("type") == "null" for p in prop["anyOf"])
        return " or ".join(kinds) + (" or null" if nullable else "")
    if "enum" in prop:
        return " or ".join(f"`{v!r}`".replace("'", '"') for v in prop["enum"])
    kind = prop.get("type", "any")
    if kind == "array":
        return f"list of {_json_type(prop.get('items', {}), defs)}"
    words = [kind]
    if "minLength" in prop:
        words.append("non-empty")
    if "minimum" in prop and "maximum" in prop:
        words.append(f"{prop['minimum']} to {prop['maximum']}")
    elif "exclusiveMinimum" in prop:
        words.append(f"above {prop['exclusiveMinimum']}")
    if prop.get("minItems"):
        words.append(f"at least {prop['minItems']}")
    return ", ".join(words)


def _described(prop: dict[str, Any], defs: dict[str, Any]) -> str:
    """The field's own description, else that of the object it holds (a call, a goal)."""
    if "description" in prop:
        return str(prop["description"])
    for inner in [prop, prop.get("items", {}), *prop.get("anyOf", [])]:
        if "$ref" in inner:
            return str(defs[inner["$ref"].rsplit("/", 1)[-1]].get("description", ""))
    return ""


def _object_table(props: dict[str, Any], required: list[str], defs: dict[str, Any]) -> list[str]:
    lines = ["| field | required | type | default | meaning |", "|---|---|---|---|---|"]
    for name, prop in props.items():
        default = f"`{prop['default']!r}`".replace("'", '"') if "default" in prop else ""
        default = default.replace("None", "null")
        lines.append(
            f"| `{name}` | {'yes' if name in required else 'no'} "
            f"| {_cell(_json_type(prop, defs))} | {default} | {_cell(_described(prop, defs))} |"
        )
    return lines


def corpus_fields() -> str:
    """The case format, field by field, from the pydantic model's JSON schema; then each
    nested object (a call, a goal) the same way."""
    doc = schema()
    defs: dict[str, Any] = doc.get("$defs", {})
    lines = _object_table(doc["properties"], doc.get("required", []), defs)
    for name, sub in defs.items():
        lines += ["", f"**{name}** ({_cell(sub.get('description', ''))})", ""]
        lines += _object_table(sub["properties"], sub.get("required", []), defs)
    return "\n".join(lines)


# -- the results row ------------------------------------------------------------------------

_RULES = {"level": "1 to 5", "count": ">= 0", "amount": "finite, >= 0"}


def _check(kind: str, described: dict[str, str], names: list[str]) -> None:
    missing = [n for n in names if n not in described]
    extra = [n for n in described if n not in names]
    if missing or extra:
        raise ValueError(f"{kind}: undescribed {missing}, described but gone {extra}")


def results_columns() -> str:
    """The results row, column by column, from `harness.events.ROW` (each column's
    meaning is its own `Column.meaning`)."""
    undescribed = [c.name for c in ROW if not c.meaning]
    if undescribed:
        raise ValueError(f"results columns: undescribed {undescribed}")
    lines = ["| column | type | filled | values | meaning |", "|---|---|---|---|---|"]
    for c in ROW:
        filled = "every row" if c.required else (f"{c.track} rows" if c.track else "may be null")
        values = ", ".join(f"`{v}`" for v in c.choices) or _RULES.get(c.rule, "")
        older = " (absent from older files: read as null)" if c.older else ""
        lines.append(
            f"| `{c.name}` | `{_cell(c.type)}` | {filled} | {_cell(values)} "
            f"| {_cell(c.meaning)}{older} |"
        )
    return "\n".join(lines)


# -- reason codes ---------------------------------------------------------------------------

REASON_WHEN = {
    "oap.allowed": "every rule passed",
    "oap.invalid_context": "an argument the guard cannot read unambiguously (a string or "
    "non-finite amount, sub-cent digits, a duplicate key, an unknown argument, invisible "
    "characters in the recipient), a missing required field, or an idempotency key the "
    "passport requires but the call lacks",
    "oap.evaluation_error": "a tool the guard does not know, a clock reading that is not an "
    "aware datetime, a ledger it cannot use, or anything that raised inside the engine: "
    "**fail closed**",
    "oap.passport_suspended": "the passport's status is not `active`",
    "oap.passport_expired": "`expires_at` has passed (unless `never_expires`)",
    "oap.unknown_capability": "the passport does not grant the tool's capability "
    "(`payments.charge`; `finance.payment.refund`, `payments.payout` or "
    "`finance.transaction` for the other tools)",
    "oap.assurance_insufficient": "the passport's assurance is below "
    "`require_assurance_at_least` (the pack's minimum is L2)",
    "oap.approval_required": "the limits demand human approval, which an agent cannot give",
    "oap.currency_unsupported": "the currency has no `currency_limits` entry",
    "oap.limit_exceeded": "over `max_per_tx`, over `max_items_per_tx`, or over `daily_cap` "
    "with today's allowed total; a refund past what is left of the order's total; the "
    "day's `max_payouts_per_day` reached; over `max_exposure_per_tx_usd`",
    "oap.merchant_forbidden": "the recipient is not in `allowed_merchant_ids` "
    '(`"*"` permits anyone)',
    "oap.region_blocked": "the region is not in the passport's regions, or the shipping "
    "country is not allowed",
    "oap.category_blocked": "an item's category is blocked",
    "oap.idempotency_conflict": "the idempotency key was already used by an allowed call",
    "vault.approval_code_missing": "pytest-vault's extension (Level 4): the memo lacks an "
    "approval code `APC-YYYY-NNNN`",
    # The other packs' codes (`guard.packs.PACK_CODES`).
    "oap.invalid_reason_code": "a refund's reason code is not in the limits' `refund_reason_codes`",
    "oap.cross_currency_denied": "a refund in another currency than the order's",
    "oap.destination_type_forbidden": "a payout destination's type (the bank's record) is "
    "not in `allowed_destination_types`",
    "oap.compliance_check_required": "`compliance_checks_required` and the payout carries "
    "no compliance notes",
    "oap.action_forbidden": "the transaction type is not in `allowed_transaction_types`",
    "oap.asset_class_forbidden": "the asset class is not in `allowed_asset_classes`",
    "oap.account_type_restricted": "the source account's type is restricted or not in "
    "`allowed_source_account_types`",
    "oap.commingling_of_funds_forbidden": "a transfer from client funds to a proprietary account",
    "oap.counterparty_limit_exceeded": "over `max_exposure_per_counterparty_usd` to one "
    "payee today",
    "vault.facts_unavailable": "pytest-vault's extension: the system of record (the bank, "
    "or the production guard's facts callback) does not know the order, destination or "
    "account, or gave none: the pack is not decided, **fail closed**",
    "vault.customer_mismatch": "pytest-vault's extension: a refund to someone other than "
    "the order's customer of record",
    "vault.recipient_forbidden": "pytest-vault's extension: a payout destination not in "
    '`allowed_recipients` (`"*"` permits any)',
    "vault.destination_too_new": "pytest-vault's extension: the payout destination was "
    "added less than `x_vault_destination_hold_hours` ago (or when is not recorded)",
    "vault.account_field_forbidden": "pytest-vault's extension: an account change "
    "(`update_account`) of a field not in `x_vault_account_fields` (none where the key "
    "is left out: **fail closed**)",
}


def reason_codes() -> str:
    """Every code the guard can emit: the charge pack's (`guard.engine.REASON_CODES`), in
    its order, then the other packs' (`guard.packs.PACK_CODES`)."""
    codes = [*REASON_CODES, *PACK_CODES]
    _check("reason codes", REASON_WHEN, codes)
    lines = ["| code | when |", "|---|---|"]
    lines += [f"| `{code}` | {_cell(REASON_WHEN[code])} |" for code in codes]
    return "\n".join(lines)
