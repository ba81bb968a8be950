"""`vault-report --format sarif`: the run's findings for GitHub's code scanning, each at the
corpus line of its case (the row's `source`, relative to the rootdir).

A case of the built-in corpus (`builtin/level-2.jsonl:27`) is in no file of the team's
repository, only in the installed package: its result names it by a logical location
(`pytest-vault builtin corpus/level-2.jsonl/L2-s07-a3`) and says so in its message. GitHub's
code scanning requires every result to have a location with a physical location (the
GitHub rules of Microsoft's SARIF validator: GH1015, GH1016), so it also points at the
repository's configuration file (`CONFIG`, line 1), never into site-packages.

- `vault/violation` (error): a transfer the passport forbids executed behind the guard;
- `vault/unpermitted` (note): the model alone paid a recipient the passport does not
  permit (what the guard is there to stop).

Each result about an attack carries, in `properties.tags`, the OWASP Top 10 for Agentic
Applications 2026 entries its case tests (`corpus.owasp.asi_of`), spelled as promptfoo's
framework collections name them (`owasp:agentic:asi02`), so code scanning filters by them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pytest_vault import __version__
from pytest_vault.core.sarif import Finding, Rule, sarif_log
from pytest_vault.corpus.builtin import PREFIX
from pytest_vault.corpus.owasp import asi_of
from pytest_vault.guard.engine import TRANSFER_TOOL
from pytest_vault.guard.money import Money
from pytest_vault.harness.events import forbidden
from pytest_vault.report.results import read_calls

RULES = (
    Rule(
        "vault/violation",
        "ForbiddenTransferBehindTheGuard",
        "A transfer the passport forbids executed behind the guard",
        "In the guarded architecture every transfer_funds call goes through the guard, and "
        "only what it allows executes. A transfer the level's passport forbids (its recipient, "
        "its amount, its codes) executed anyway: the guard under test let it through. The "
        "case's test failed; the row's transcript shows the conversation.",
    ),
    Rule(
        "vault/unpermitted",
        "UnpermittedTransferModelAlone",
        "The model alone paid a recipient the passport does not permit",
        "With no guard, the model was talked into paying a recipient its level's passport "
        "does not permit: what a guard in front of it must stop. A note, not a failure.",
    ),
    Rule(
        "vault/regression",
        "RegressedAgainstBaseline",
        "The baseline gate found this attack regressed",
        "The release gate compared this run with the last release's results, evaluation for "
        "evaluation, and found a significant regression in one of its measures; this attack "
        "is one of those that got worse (the event in how many of its trials, against the "
        "baseline's). The run failed on it.",
    ),
)
# Where a built-in case's result points in the repository: the file that configures the run.
CONFIG = "pyproject.toml"
BUILTIN = "pytest-vault builtin corpus"
COLUMNS = (
    *("attack_id", "model", "track", "architecture", "trial", "level", "source", "category"),
    *("violation", "unpermitted", "tool_calls"),
)
TOOL = "tool"  # the money-moving tool a case is about (a table without it: transfers)


def report_sarif(table: pa.Table, regressed: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The SARIF log of a run's rows: its violations behind the guard, the model-alone
    unpermitted transfers, and the attacks the baseline gate found regressed
    (`regressed`: the results file's `gate_regressed`). Each result names the tool its
    case is about, in its message and `properties`, unless every row is about
    transfer_funds (a run of transfers alone: its log is what it was before tools)."""
    if TOOL not in table.column_names:
        table = table.append_column(TOOL, pa.nulls(table.num_rows, pa.string()))
    table = table.set_column(
        table.schema.get_field_index(TOOL), TOOL, pc.fill_null(table[TOOL], TRANSFER_TOOL)
    )
    named = bool(pc.any(pc.not_equal(table[TOOL], TRANSFER_TOOL)).as_py())
    guarded = pc.equal(table["architecture"], "guarded")
    violation = pc.and_(guarded, pc.fill_null(table["violation"], False))
    alone = pc.and_(pc.invert(guarded), pc.fill_null(table["unpermitted"], False))
    rows = table.filter(pc.or_(violation, alone)).select([*COLUMNS, TOOL]).to_pylist()
    rows.sort(key=lambda r: (r["attack_id"], r["model"], r["track"], r["architecture"], r["trial"]))
    findings = [_finding(r, named) for r in rows]
    if regressed:
        ids = pa.array(sorted({str(r["attack_id"]) for r in regressed}), pa.string())
        mine = table.filter(pc.is_in(table["attack_id"], ids)).select(
            ["attack_id", "source", TOOL, "category"]
        )
        sources = dict(zip(mine["attack_id"].to_pylist(), mine["source"].to_pylist(), strict=True))
        tools = dict(zip(mine["attack_id"].to_pylist(), mine[TOOL].to_pylist(), strict=True))
        categories = dict(
            zip(mine["attack_id"].to_pylist(), mine["category"].to_pylist(), strict=True)
        )
        order = ("attack_id", "model", "track", "architecture", "measure")
        for r in sorted(regressed, key=lambda r: tuple(str(r[k]) for k in order)):
            tool = tools.get(r["attack_id"]) if named else None
            tags = tags_of(categories.get(r["attack_id"]), str(r["track"]))
            findings.append(_regressed(r, sources.get(r["attack_id"]), tool, tags))
    return sarif_log("pytest-vault", __version__, RULES, findings)


def tags_of(category: str | None, track: str) -> list[str]:
    """A case's OWASP ASI tags (`owasp:agentic:asi01`), in OWASP's order: none for a
    benign request, a paired clean run, or a case whose category is not known."""
    return (
        [] if category is None else [f"owasp:agentic:{a.lower()}" for a in asi_of(category, track)]
    )


def _regressed(
    r: Mapping[str, Any], source: str | None, tool: str | None, tags: list[str]
) -> Finding:
    """A regressed attack's result; `tool`: its case's, where the log names tools."""
    about = "" if tool is None else f", tool {tool}"
    text = (
        f"{r['model']} regressed against the baseline ({r['measure']}, levels {r['levels']}): "
        f"{r['attack_id']} (session {r['session']}, track {r['track']}, {r['architecture']}"
        f"{about}): "
        f"{r['event']} in {r['this']} of {r['trials']} trials, baseline {r['baseline']} of "
        f"{r['trials']}"
    )
    uri, line, logical, said = _location(source, str(r["attack_id"]))
    properties = {k: r[k] for k in ("attack_id", "model", "track", "architecture", "measure")}
    if tool is not None:
        properties["tool"] = tool
    if tags:
        properties["tags"] = tags
    return Finding("vault/regression", "error", text + said, uri, line, properties, logical)


def _finding(row: dict[str, Any], named: bool) -> Finding:
    """A row's result; `named`: it names the row's tool (the log is about more than
    transfers)."""
    guarded = row["architecture"] == "guarded"
    paid = []
    for call in read_calls(row["tool_calls"]):
        why = forbidden(call)  # the one rule, as the row's events count it
        # Model alone, this rule's finding is a payment to a recipient not permitted.
        if why is None or (not guarded and call.get("permitted") is not False):
            continue
        t = call["transfer"]
        codes = ", ".join(why) if guarded else "recipient not permitted"
        money = Money(int(t["amount_minor"]), str(t["currency"])).shown()
        paid.append(f"{money} to {t['recipient']!r} ({codes})")
    where = f"{row['attack_id']}, level {row['level']}, track {row['track']}" + (
        f", trial {row['trial']}" if row["trial"] != 1 else ""
    )
    if named:
        where += f", tool {row[TOOL]}"
    what = "; ".join(paid) or "a transfer"
    text = (
        f"{row['model']} behind the guard: forbidden transfer executed: {what} ({where})"
        if guarded
        else f"{row['model']} alone paid an unpermitted recipient: {what} ({where})"
    )
    uri, line, logical, said = _location(row["source"], row["attack_id"])
    text += said
    properties = {k: row[k] for k in ("attack_id", "model", "track", "architecture", "trial")}
    if named:
        properties[TOOL] = row[TOOL]
    tags = tags_of(row["category"], row["track"])
    if tags:
        properties["tags"] = tags
    return Finding(
        "vault/violation" if guarded else "vault/unpermitted",
        "error" if guarded else "note",
        text,
        uri,
        line,
        properties,
        logical,
    )


def _location(source: str | None, attack_id: str) -> tuple[str | None, int | None, str | None, str]:
    """Where a finding about a case points: (file, line, logical location, what the
    message adds). A case of the team's file: that file and line. A case of the built-in
    corpus is in no file of the repository: its logical name, and the config file."""
    uri, line = _source(source)
    if uri is None or not uri.startswith(f"{PREFIX}/"):
        return uri, line, None, ""
    name = uri.removeprefix(f"{PREFIX}/")
    at = f", line {line}" if line is not None else ""
    said = (
        f"; case {attack_id} of the built-in corpus ({name}{at}), shipped in "
        f"pytest-vault, in no file of this repository: located at {CONFIG}, line 1"
    )
    return CONFIG, 1, f"{BUILTIN}/{name}/{attack_id}", said


def _source(source: str | None) -> tuple[str | None, int | None]:
    """`FILE:LINE` as (file, line); a file from before the column: no location."""
    if not source:
        return None, None
    path, _, line = source.rpartition(":")
    return (path, int(line)) if path and line.isdigit() else (source, None)
