"""SARIF 2.1.0, the format of GitHub's code scanning: one log, one run, its rules and its
results, each located at a file's line. The one writer of it, for `vault-report` (findings
at corpus lines) and `vault-guard lint` and `diff` (at passport lines).

Every text is made safe (`text.shown`): a finding quotes model output and corpus text,
which a code-scanning page shows. Rule ids are stable names (`vault/violation`, a reason
code, a lint rule), each with its help text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from pytest_vault.core.text import shown

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION = "https://github.com/pytest-vault/pytest-vault"
Level = Literal["error", "warning", "note"]


@dataclass(frozen=True)
class Rule:
    id: str
    name: str  # PascalCase, as SARIF viewers title a rule
    short: str
    help: str


@dataclass(frozen=True)
class Finding:
    rule: str
    level: Level
    message: str
    uri: str | None = None  # the file, relative to the repository's root
    line: int | None = None  # from 1
    properties: Mapping[str, Any] | None = None
    # What the finding is about when no file of the repository holds it (a case of the
    # corpus shipped in the package): a logical location's fully qualified name.
    logical: str | None = None


def sarif_log(
    tool: str, version: str, rules: Iterable[Rule], findings: Iterable[Finding]
) -> dict[str, Any]:
    """A SARIF log of one run of `tool`: the rules its findings use, then the findings."""
    found = list(findings)
    used = {f.rule for f in found}
    described = [r for r in rules if r.id in used]
    index = {r.id: i for i, r in enumerate(described)}
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": tool,
                        "version": version,
                        "informationUri": INFORMATION,
                        "rules": [_rule(r) for r in described],
                    }
                },
                "results": [_result(f, index[f.rule]) for f in found],
            }
        ],
    }


def uri(path: str) -> str:
    """A relative path as the URI reference SARIF requires (RFC 3986): every byte but
    unreserved characters and `/` percent-encoded, so `my cases #1.jsonl` is one file,
    not `my cases ` and a fragment (a lone surrogate keeps its bytes, encoded)."""
    return quote(path.encode("utf-8", "surrogatepass"), safe="/")


def _rule(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "name": rule.name,
        "shortDescription": {"text": shown(rule.short)},
        "fullDescription": {"text": shown(rule.help)},
        "help": {"text": shown(rule.help)},
    }


def _result(finding: Finding, index: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ruleId": finding.rule,
        "ruleIndex": index,
        "level": finding.level,
        "message": {"text": shown(finding.message)},
    }
    location: dict[str, Any] = {}
    if finding.uri is not None:
        physical: dict[str, Any] = {"artifactLocation": {"uri": uri(finding.uri)}}
        if finding.line is not None:
            physical["region"] = {"startLine": max(1, finding.line)}
        location["physicalLocation"] = physical
    if finding.logical is not None:
        location["logicalLocations"] = [{"fullyQualifiedName": shown(finding.logical)}]
    if location:
        out["locations"] = [location]
    if finding.properties:
        # Viewers show these too: text as the message has it, numbers as they are.
        out["properties"] = {
            k: shown(v) if isinstance(v, str) else v for k, v in finding.properties.items()
        }
    return out
