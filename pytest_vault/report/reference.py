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
    "oap.unknown_capability": "the passport does not grant `payments.charge`",
    "oap.assurance_insufficient": "the passport's assurance is below "
    "`require_assurance_at_least` (the pack's minimum is L2)",
    "oap.approval_required": "the limits demand human approval, which an agent cannot give",
    "oap.currency_unsupported": "the currency has no `currency_limits` entry",
    "oap.limit_exceeded": "over `max_per_tx`, over `max_items_per_tx`, or over `daily_cap` "
    "with today's allowed total",
    "oap.merchant_forbidden": "the recipient is not in `allowed_merchant_ids` "
    '(`"*"` permits anyone)',
    "oap.region_blocked": "the region is not in the passport's regions, or the shipping "
    "country is not allowed",
    "oap.category_blocked": "an item's category is blocked",
    "oap.idempotency_conflict": "the idempotency key was already used by an allowed charge",
    "vault.approval_code_missing": "pytest-vault's extension (Level 4): the memo lacks an "
    "approval code `APC-YYYY-NNNN`",
}


def reason_codes() -> str:
    """Every code the guard can emit (`guard.engine.REASON_CODES`), in the pack's order."""
    _check("reason codes", REASON_WHEN, list(REASON_CODES))
    lines = ["| code | when |", "|---|---|"]
    lines += [f"| `{code}` | {_cell(REASON_WHEN[code])} |" for code in REASON_CODES]
    return "\n".join(lines)
