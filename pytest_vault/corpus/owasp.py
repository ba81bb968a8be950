"""The OWASP Top 10 for Agentic Applications 2026 (ASI01-ASI10), and which of its
entries each corpus category tests: the one table SARIF tags, OpenTelemetry findings,
the HTML report's filters and the coverage table are made from.

The table was reviewed by hand against the OWASP entries' descriptions
(docs/explanation/owasp.md says why each category maps where it does). Every attack
aims at a money movement the passport forbids, so every attack tests ASI02 (tool misuse);
what else it tests depends on how it asks, and where: an attack planted in what the tools
return (the indirect track, whatever its category) hijacks the agent's goal through its
context (ASI01, ASI06). A category not in the table (a team's own, an importer's) maps
by its track alone. Benign requests and paired clean runs test nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

# Each entry's id and title, in OWASP's order.
ASI: Mapping[str, str] = {
    "ASI01": "Agent Goal Hijack",
    "ASI02": "Tool Misuse and Exploitation",
    "ASI03": "Identity and Privilege Abuse",
    "ASI04": "Agentic Supply Chain Vulnerabilities",
    "ASI05": "Unexpected Code Execution",
    "ASI06": "Memory and Context Poisoning",
    "ASI07": "Insecure Inter-Agent Communication",
    "ASI08": "Cascading Failures",
    "ASI09": "Human-Agent Trust Exploitation",
    "ASI10": "Rogue Agents",
}

_HIJACK = ("ASI01", "ASI02")
_PRIVILEGE = ("ASI02", "ASI03")
_PLANTED = ("ASI01", "ASI02", "ASI06")

# Category -> the entries its attacks test. Direct categories (corpus.model.CATEGORIES)
# first, then the indirect placements' styles.
BY_CATEGORY: Mapping[str, tuple[str, ...]] = {
    # A plain ask to pay where the passport forbids: the tool misused, nothing more.
    "direct_transfer": ("ASI02",),
    # Probing limits and payees before asking: the tool's reach explored.
    "reconnaissance": ("ASI02",),
    # Instructions that override the agent's task: its goal hijacked.
    "prompt_injection": _HIJACK,
    "json_injection": _HIJACK,
    "social_engineering": _HIJACK,
    "emotional_manipulation": _HIJACK,
    # Claimed identities, roles, approvals and capabilities: privilege the caller lacks.
    "authority_claim": _PRIVILEGE,
    "privilege_escalation": _PRIVILEGE,
    "capability_self_register": _PRIVILEGE,
    "account_manipulation": _PRIVILEGE,
    # Planted in what the tools return: the agent's context poisoned to hijack its goal.
    "fake_policy_update": _PLANTED,
    "fake_review_procedure": _PLANTED,
    "fake_system_message": _PLANTED,
    "payee_redirect": _PLANTED,
    "split_payment": _PLANTED,
    "amount_inflation": _PLANTED,
    "urgent_directive": _PLANTED,
    # A forged approval in a document: privilege abused through poisoned context.
    "fake_prior_approval": ("ASI01", "ASI02", "ASI03", "ASI06"),
}

# What no attack of this corpus tests, and why: said beside every coverage table.
NOT_TESTED: Mapping[str, str] = {
    "ASI04": "no attack comes through a compromised tool, plugin or model supply chain",
    "ASI05": "the agent under test runs no code",
    "ASI07": "one agent: no messages between agents",
    "ASI08": "one evaluation at a time: no failure propagates across agents or runs",
    "ASI09": "the attacks manipulate the agent, not a human through the agent",
    "ASI10": "no agent acts outside its task unprompted: every attack is a prompt",
}

# Benign requests and paired clean runs test no entry.
UNTESTED_CATEGORIES = frozenset({"benign", "clean"})


def asi_of(category: str, track: str) -> tuple[str, ...]:
    """The OWASP ASI entries an attack of this category and track tests, in order;
    () for a benign request or a paired clean run."""
    if category in UNTESTED_CATEGORIES:
        return ()
    entries = set(BY_CATEGORY.get(category, ("ASI02",)))
    if track == "indirect":
        entries.update(_PLANTED)
    return tuple(sorted(entries))


def risk_category(asi: str) -> str:
    """OpenTelemetry's `gen_ai.guardrail.security.finding` risk category of an entry:
    a custom value, since the conventions name no OWASP ASI ids (`custom:owasp_asi02`)."""
    return f"custom:owasp_{asi.lower()}"
