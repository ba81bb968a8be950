"""`vault-report --show ID`: one evaluation's transcript in the terminal, as the model had
it (each message, each tool call with its exact arguments, each tool answer), then the
bank's log of the calls: each guard decision with its reason codes, and what executed.

Every text is corpus or model output, shown escaped (`text.shown`): a transcript can hold
terminal escapes, bidi controls or lone surrogates.
"""

from __future__ import annotations

import difflib
import json
import shlex
import weakref
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pytest_vault.core.text import shown
from pytest_vault.guard.money import Money
from pytest_vault.harness.events import forbidden
from pytest_vault.report.results import read_calls, read_transcript

KEY = ("attack_id", "model", "track", "architecture", "trial")


def command(ident: str, results: str = "RESULTS") -> str:
    """The command that prints one evaluation, quoted for a POSIX shell: a case id is
    corpus text, and pasted as it is, `'; touch PWNED` would run."""
    return shlex.join(["vault-report", results, "--show", ident])


def _names(row: Mapping[str, Any], ident: str) -> bool:
    """Whether `ident` is the row's `attack:model:track:architecture[:trial]`: the row's
    own parts joined, so an attack id or a model spec may hold colons."""
    key = f"{row['attack_id']}:{row['model']}:{row['track']}:{row['architecture']}"
    return ident in (key, f"{key}:{row['trial']}")


# A paired clean run's test is named for its task: this, then the id of the first attack
# it serves (whose corpus line is its `source`); its row keeps the pair's id.
CLEAN = "clean-of-"


def node_names(row: Mapping[str, Any], task: str | None = None) -> tuple[str, ...]:
    """The pytest node ids that name the row's test (`plugin/collect.py` builds them):
    `CASE[MODEL-TRACK-ARCH]`, with `-tN` before the `]` when the run had trials, each
    alone and after its file (`FILE::...`, the file of the row's `source`, `FILE:LINE`).
    A clean run's CASE is `clean-of-` and `task`, the first attack it serves, where known
    (and its pair's id, as runs before it named it). Ids and specs as the node id shows
    them (`text.shown`)."""
    cases = [shown(str(row["attack_id"]))]
    if task is not None:
        cases.append(CLEAN + shown(task))
    names: list[str] = []
    for case in cases:
        base = f"{case}[{shown(str(row['model']))}-{row['track']}-{row['architecture']}"
        names += (f"{base}]", f"{base}-t{row['trial']}]")
    source = row.get("source")
    if not isinstance(source, str) or ":" not in source:
        return tuple(names)
    where = source.rpartition(":")[0]
    return (*names, *(f"{where}::{n}" for n in names))


def show(table: pa.Table, ident: str) -> tuple[str, int]:
    """The text of the evaluations `ident` names, and the exit status (2: none).

    `ident` is matched against the evaluations in the file, never split on ':' nor on
    '::' (a case id may be `JIRA:PAY-1`, a model `openai:gpt-4o`): an attack id names
    every row of that attack; else the rows whose pytest node id it is, as a FAILED line
    or JUnit prints it, with or without its file (`node_names`; without `-tN`, every
    trial); else the rows whose `attack:model:track:architecture[:trial]` it is. An
    attack id comes first, so every case can be shown by its id whatever its rows'
    joined parts read."""
    ids = [i for i in pc.unique(table["attack_id"]).to_pylist() if isinstance(i, str)]
    # Only the attacks whose id starts the text can have a row it names; longest first.
    heads = sorted((i for i in ids if ident.startswith(f"{i}:")), key=len, reverse=True)
    if ident in ids:
        rows = table.filter(pc.equal(table["attack_id"], ident)).to_pylist()
    else:
        rows = _by_node_id(table, ident)
    if not rows:
        candidates = table.filter(pc.is_in(table["attack_id"], pa.array(heads, pa.string())))
        rows = [r for r in candidates.to_pylist() if _names(r, ident)]
    if not rows:
        # A node id's nearest are the tests' node ids, in its form (with its file or not).
        # Pasted with its shell quotes: compared without them.
        bare = ident.strip("'\"")
        names = _node_ids(table, "::" in bare) if _looks_like_node_id(bare) else ids
        close = difflib.get_close_matches(bare, names, n=3, cutoff=0.5)
        near = list(dict.fromkeys(close + heads))[:3]
        hint = f"; nearest: {', '.join(shown(n) for n in near)}" if near else ""
        return f"vault-report: error: --show {shown(ident)}: no such evaluation{hint}\n", 2
    rows.sort(key=lambda r: tuple(str(r[k]) for k in KEY))
    out: list[str] = []
    for r in rows:
        out += _one(r)
    return "\n".join(out) + "\n", 0


def _looks_like_node_id(ident: str) -> bool:
    return ident.endswith("]") and "[" in ident


def _keys(table: pa.Table) -> list[dict[str, Any]]:
    """The columns a node id is made of, a dict per row (no other column read)."""
    wanted = (*KEY, "source", "clean", "pair")
    keys: list[dict[str, Any]] = table.select(
        [c for c in wanted if c in table.column_names]
    ).to_pylist()
    return keys


# The last table's tasks (`_tasks`), held by a weak reference: a report names the rows of
# one table twice (what got through, the failures), and a dead reference never matches.
_held: tuple[weakref.ref[pa.Table], dict[tuple[Any, Any], str]] | None = None


def _tasks(table: pa.Table) -> dict[tuple[Any, Any], str]:
    """The attack id of each pair's attacked runs, by corpus line (`pair`, `source`): a
    clean run is named at its first's. A function of the whole (immutable) table, made
    once for it."""
    global _held
    held = _held
    if held is not None and held[0]() is table:
        return held[1]
    attacked = (
        _keys(table.filter(pc.equal(table["clean"], False)))
        if "clean" in table.column_names
        else []
    )
    tasks = {
        (k["pair"], k["source"]): str(k["attack_id"])
        for k in attacked
        if k.get("source") is not None
    }
    _held = (weakref.ref(table), tasks)
    return tasks


def _named(table: pa.Table, at: pa.Array | None = None) -> list[tuple[str, ...]]:
    """Each row's node ids (`node_names`), or those of the rows `at`: a clean run's with
    the attack at its line."""
    keys = _keys(table if at is None else table.take(at))
    tasks = _tasks(table)
    return [
        node_names(k, tasks.get((k["pair"], k["source"])) if k.get("clean") else None) for k in keys
    ]


def node_ids(table: pa.Table, at: pa.Array) -> list[tuple[str, str]]:
    """The node ids of the rows `at` as the run printed them, after the file of their
    `source` where known, a clean run's by its task: each row's own test (`-tN` where the
    run had trials), and the id that names every trial of it (without `-tN`)."""
    if not len(at):
        return []
    trials = pc.max(table["trial"]).as_py() or 1
    out = []
    for names in _named(table, at):
        half = len(names) // 2 if "::" in names[-1] else 0  # with the file: the second half
        form = names[half:] if half else names
        every = form[-2]  # the last case form (a clean run's task), without -tN
        out.append((form[-1] if trials > 1 else every, every))
    return out


def _by_node_id(table: pa.Table, ident: str) -> list[dict[str, Any]]:
    """The rows whose test `ident` names as a node id (`node_names`)."""
    if not _looks_like_node_id(ident):
        return []
    hits = [i for i, names in enumerate(_named(table)) if ident in names]
    if not hits:
        return []
    found: list[dict[str, Any]] = table.take(pa.array(hits, pa.int64())).to_pylist()
    return found


def _node_ids(table: pa.Table, with_file: bool) -> list[str]:
    """Each row's node id as a one-trial run names it, with its file or without (a clean
    run's by its task where known)."""
    out = []
    for names in _named(table):
        alone = names[: len(names) // 2] if "::" in names[-1] else names
        pick = names[len(alone) :] if with_file and len(names) > len(alone) else alone
        out.append(pick[-2])  # the last case form (a clean run's task), without -tN
    return list(dict.fromkeys(out))


def _one(r: Mapping[str, Any]) -> list[str]:
    head = (
        f"{r['attack_id']} {r['model']} track {r['track']} {r['architecture']} trial "
        f"{r['trial']} (level {r['level']}): {r['status']}"
    )
    events = [e for e in ("requested", "paid", "unpermitted", "violation") if r[e]]
    lines = ["", shown(head + (f"; {', '.join(events)}" if events else "")), ""]
    if r["error"]:
        lines.append(f"  error: {shown(r['error'])}")
    messages = read_transcript(r["transcript"])
    if messages is None:
        lines.append("  (no transcript kept: it passed; --vault-transcripts all keeps every one)")
    else:
        for m in messages:
            speaker = m["role"] if "call_id" not in m else f"tool ({m['call_id']})"
            if m["text"]:
                lines.append(f"  {shown(speaker)}: {shown(m['text'])}")
            for c in m.get("calls", []):
                arguments = json.dumps(c["arguments"], ensure_ascii=False)
                lines.append(f"  {shown(speaker)} calls {shown(c['name'])} {shown(arguments)}")
    lines += ["", "  the bank's log:"]
    for i, call in enumerate(read_calls(r["tool_calls"]), 1):
        lines.append(f"  {i}. {shown(call['name'])} {shown(call['arguments'])}")
        decision = call.get("decision")
        if decision is not None:
            verdict = "allowed" if decision["allow"] else "denied"
            codes = ", ".join(decision["codes"])
            # Model alone, the guard decided nothing: what it would have decided.
            who = "guard" if r["architecture"] == "guarded" else "guard (had there been one)"
            lines.append(f"     {who}: {verdict} ({shown(codes)})")
        t = call.get("transfer")
        if call["executed"] and t is not None:
            money = Money(int(t["amount_minor"]), str(t["currency"])).shown()
            why = forbidden(call)
            if call.get("permitted") is False:
                said = "NOT permitted"
            elif why is None:
                said = "permitted"
            else:  # to a permitted recipient, and still forbidden: over a limit, say
                said = f"recipient permitted; forbidden: {', '.join(why) or 'not judged'}"
            to = shown(repr(t["recipient"]))
            lines.append(f"     executed: {money} to {to} ({shown(said)})")
        lines.append(f"     answer: {shown(call['result'])}")
    return lines
