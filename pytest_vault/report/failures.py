"""The failures the HTML report shows, each with its transcript and the bank's log.

Its one job: `failures` picks, from a run's failing rows (a violation behind the guard, a
payment to an unpermitted recipient, another forbidden transfer, an error), the
evaluations the page embeds within fixed bounds (CAP, TOTAL, BUDGET, TEXT), names the
ones left out with the ids that print them, and gives each row shown its filter classes
and sort ranks, so the page filters and sorts with CSS alone. `html` renders them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pytest_vault.corpus.owasp import ASI, asi_of
from pytest_vault.guard.engine import TRANSFER_TOOL
from pytest_vault.guard.money import Money
from pytest_vault.report.charts import ARCH
from pytest_vault.report.results import read_calls, read_transcript
from pytest_vault.report.summary import in_order
from pytest_vault.report.transcript import command, node_ids

# The failures shown: a row per attack, at most CAP rows per track x level x model x
# architecture x event and TOTAL evaluations in all, shared round-robin (`_share`); and
# transcripts embedded until about BUDGET characters: a 250,000-row run stays well under
# 10 MB. Each text of a transcript is cut at TEXT characters; `vault-report --show` prints
# it whole.
CAP, TOTAL, BUDGET, TEXT = 50, 2_000, 6_000_000, 4_000
# What made a row fail, one per row, worst first: a forbidden transfer behind the guard;
# model alone, a payment to a recipient the passport does not permit, or another transfer
# it forbids (to a permitted recipient: over a limit, without an approval code); an error.
EVENTS = ("violation", "unpermitted", "forbidden", "error")
# What the failures read of every failing row; the call logs and transcripts (the heavy
# columns) only of the rows shown.
COLUMNS = (
    *("attack_id", "level", "category", "track", "architecture", "model", "trial"),
    *("status", "error", "violation", "unpermitted", "source"),
)
HEAVY = ("tool_calls", "transcript")


@dataclass(frozen=True)
class Said:
    """One message of a transcript."""

    role: str  # user, assistant or tool
    speaker: str
    lines: list[str]
    calls: list[str]  # `name {arguments}` of each tool call it made
    error: bool


@dataclass(frozen=True)
class Logged:
    """One call of the bank's log."""

    name: str
    arguments: str
    decision: str | None
    audit: str | None
    executed: tuple[str, str, str] | None  # money, recipient, permitted or not
    answer: list[str]
    forbidden: bool


@dataclass(frozen=True)
class Trial:
    """One failing evaluation (one trial of an attack), as the page embeds it."""

    ident: str  # what `vault-report --show` takes
    command: str  # the command that prints it, quoted for the shell
    head: str
    error: str | None
    source: str | None
    messages: list[Said] | None
    unkept: str | None  # why the row shows no transcript
    calls: list[Logged]


@dataclass(frozen=True)
class Failure:
    """One row of the table: an attack's failing trials with one event in one cell, its
    trials shown each in a `<details>` (a lone failing trial of a one-trial run inline)."""

    ident: str  # what `vault-report --show` takes: the attack's every trial, or its one
    command: str
    values: dict[str, str]  # column -> text
    classes: str  # the filters' classes: `x-model3 x-level1 ...`
    ranks: str  # the sorts' order: `--model:3;--level:1;...`
    head: str
    source: str | None
    trials: list[Trial]  # the failing trials shown, by trial number
    failed: int  # its failing trials with this event
    runs: int  # its trials in the file

    @property
    def inline(self) -> bool:
        return self.runs == 1 and len(self.trials) == 1


@dataclass(frozen=True)
class Dimension:
    key: str
    title: str
    options: list[tuple[str, int]]  # (value, rows shown with it)


@dataclass(frozen=True)
class Rest:
    """A cell with more failures than the page shows: how many, and the ids that print
    the attacks left out (`vault-report --show ID`), the first few."""

    cell: tuple[str, str, str, str, str]  # track, level, model, architecture, event
    attacks: tuple[int, int]  # shown, all
    evaluations: tuple[int, int]  # failing trials shown, all
    ids: list[str]  # attack ids not shown, the first IDS
    more: int  # attack ids not shown beyond them


@dataclass(frozen=True)
class Failures:
    total: Counter[str]
    shown: list[Failure]
    cap: int  # the most attacks shown of one cell
    rest: list[Rest]
    dimensions: list[Dimension]
    sorts: list[tuple[str, str]]
    recorded: bool  # the file holds transcripts
    columns: tuple[tuple[str, str], ...] = (
        *(("model", "model"), ("level", "level"), ("track", "track")),
        *(("architecture", "architecture"), ("trial", "trial"), ("category", "category")),
        *(("attack", "attack id (corpus line)"), ("event", "event")),
        *(("reason", "reason codes"), ("amount", "amount")),
    )

    @property
    def trials(self) -> int:
        return sum(len(f.trials) for f in self.shown)

    @property
    def hidden(self) -> int:
        """The failing evaluations the page does not embed."""
        return sum(self.total.values()) - self.trials


def _event(r: Mapping[str, Any]) -> str:
    if r["violation"] and r["architecture"] == "guarded":
        return "violation"
    if r["unpermitted"]:
        return "unpermitted"
    return "forbidden" if r["violation"] else "error"


def _cut(text: str, ident: str, most: int = TEXT) -> str:
    if len(text) <= most:
        return text
    return f"{text[:most]} … ({len(text) - most:,} more characters: {command(ident)})"


def _size(calls: Iterable[Logged]) -> int:
    """The characters a log takes on the page, escaped (as `_messages` counts them)."""
    return int(sum(200 + len(c.arguments) + sum(map(len, c.answer)) for c in calls) * 1.4)


def _first_forbidden(calls: Sequence[Logged], ident: str) -> list[Logged]:
    """A log past the page's budget: its first forbidden call alone, briefly."""
    for c in calls:
        if c.forbidden:
            return [replace(c, arguments=_cut(c.arguments, ident, 300), answer=[])]
    return []


def _decided(decision: Mapping[str, Any] | None) -> str | None:
    if decision is None:
        return None
    return f"{'allowed' if decision['allow'] else 'denied'} ({', '.join(decision['codes']) or '-'})"


def _forbidden(call: Mapping[str, Any]) -> bool:
    """An executed transfer the passport forbids: as the row's `violation` and
    `unpermitted` count it (the audit denied it, or its recipient is not permitted)."""
    audit = call.get("audit")
    executed = bool(call["executed"]) and call.get("transfer") is not None
    return executed and (audit is None or not audit["allow"] or call.get("permitted") is False)


def _money(t: Mapping[str, Any]) -> Money:
    return Money(int(t["amount_minor"]), str(t["currency"]))


def _log(r: Mapping[str, Any], ident: str) -> tuple[list[Logged], list[str], dict[str, int]]:
    """The bank's log of a row, the reason codes of its forbidden executed transfers, and
    their amounts per currency."""
    out: list[Logged] = []
    codes: list[str] = []
    amounts: Counter[str] = Counter()
    guarded = r["architecture"] == "guarded"
    for call in read_calls(r["tool_calls"]):
        forbidden = _forbidden(call)
        t = call.get("transfer")
        executed = None
        if call["executed"] and t is not None:
            permitted = "permitted" if call.get("permitted") else "NOT permitted"
            executed = (_money(t).shown(), t["recipient"], permitted)
        if forbidden and t is not None:
            amounts[str(t["currency"])] += int(t["amount_minor"])
            # Why it is forbidden: the audit's codes (else, in an older log, the guard's).
            denied = [d for d in (call.get("audit"), call.get("decision")) if d and not d["allow"]]
            codes += denied[0]["codes"] if denied else []
        decision = _decided(call.get("decision"))
        if decision is not None:
            # Model alone, the guard decided nothing: what it would have decided.
            decision = f"{'guard' if guarded else 'guard (had there been one)'}: {decision}"
        audit = _decided(call.get("audit"))
        out.append(
            Logged(
                call["name"],
                _cut(call["arguments"] or "", ident),
                decision,
                None if audit is None else f"passport audit of what executed: {audit}",
                executed,
                _cut(call["result"] or "", ident).split("\n"),
                forbidden,
            )
        )
    return out, list(dict.fromkeys(codes)), dict(amounts)


def _messages(raw: str | None, ident: str) -> tuple[list[Said] | None, int]:
    """A row's transcript, and an estimate of the characters it takes on the page."""
    messages = read_transcript(raw)
    if messages is None:
        return None, 0
    out, size = [], 0
    for m in messages:
        speaker = m["role"] if "call_id" not in m else f"tool ({m['call_id']})"
        calls = [
            _cut(f"{c['name']} {json.dumps(c['arguments'], ensure_ascii=False)}", ident)
            for c in m.get("calls", [])
        ]
        lines = _cut(m["text"], ident).split("\n") if m["text"] else []
        size += 120 + sum(len(x) + 8 for x in lines) + sum(len(c) + 60 for c in calls)
        out.append(Said(m["role"], speaker, lines, calls, bool(m.get("is_error"))))
    # Escaping: quotes and brackets of JSON text take several characters each.
    return out, int(size * 1.4)


def _rank(values: Sequence[Any]) -> list[int]:
    order = {v: i for i, v in enumerate(sorted(set(values)))}
    return [order[v] for v in values]


def _failing(table: pa.Table) -> tuple[list[dict[str, Any]], bool]:
    """The failing rows (light columns, each with its event and its index in `table`),
    in a canonical order (the page is a function of the set of rows, never their order);
    and whether the file holds transcripts for them."""
    # Every test a strict run fails: a forbidden transfer (`violation`, either
    # architecture), an unpermitted payment, an error.
    mask = pc.or_(
        pc.or_(table["violation"], table["unpermitted"]), pc.equal(table["status"], "error")
    )
    at = np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))
    rows = table.select(list(COLUMNS)).take(at).to_pylist()
    # The tool filter, where the rows are about more than one money-moving tool (else
    # none: a page of transfers alone is what it was before tools were counted).
    tools: list[Any] = [None] * len(rows)
    if "tool" in table.column_names:
        tool = pc.fill_null(table["tool"], TRANSFER_TOOL)
        if len(pc.unique(tool)) > 1:
            tools = tool.take(pa.array(at, pa.int64())).to_pylist()
    for r, t in zip(rows, tools, strict=True):
        r["tool"] = t
    # Whether any of them holds a transcript, without reading the transcripts.
    valid = pc.is_valid(table["transcript"]).to_numpy(zero_copy_only=False)
    recorded = bool(valid[at].any())
    nodes = node_ids(table, pa.array(at, pa.int64()))
    for i, r, (node, every) in zip(at.tolist(), rows, nodes, strict=True):
        r["event"], r["at"], r["node"], r["every"] = _event(r), i, node, every
    rows.sort(key=lambda r: (*(str(r[k]) for k in KEY), r["trial"], r["event"]))
    return rows, recorded


# An attack's evaluations: its trials share this key (`vault-report --show` takes it).
KEY = ("attack_id", "model", "track", "architecture")
# A cell of the fair share, and the order its dimensions are interleaved in: tracks
# first, so that every track is reached before any gets a second row.
CELL = ("track", "level", "model", "architecture", "event")
IDS = 10  # the ids of left-out attacks a cell lists


def _cell_of(r: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(EVENTS.index(r[k]) if k == "event" else r[k] for k in CELL)


def _runs(table: pa.Table, rows: Sequence[Mapping[str, Any]]) -> Counter[tuple[str, ...]]:
    """The trials in the file of each failing attack (passing trials included)."""
    attacks = pa.array(sorted({r["attack_id"] for r in rows}), pa.string())
    some = table.select(list(KEY)).filter(pc.is_in(table["attack_id"], attacks))
    counted = some.group_by(list(KEY)).aggregate([([], "count_all")]).to_pylist()
    return Counter({tuple(str(c[k]) for k in KEY): c["count_all"] for c in counted})


def _interleaved(cells: Sequence[tuple[Any, ...]], depth: int = 0) -> list[tuple[Any, ...]]:
    """Sorted cells in a round-robin order: the values of the first dimension in turn,
    within each the next dimension's in turn, and so on; a round of the fair share that
    the budget cuts short thus spreads over tracks, then levels, models, architectures."""
    if len(cells) <= 1 or depth == len(CELL):
        return list(cells)
    groups: dict[Any, list[tuple[Any, ...]]] = {}
    for c in cells:
        groups.setdefault(c[depth], []).append(c)
    parts = [_interleaved(g, depth + 1) for g in groups.values()]
    return [p[i] for i in range(max(map(len, parts))) for p in parts if i < len(p)]


@dataclass
class _Attack:
    """An attack's failing trials with one event in one cell (a row of the table)."""

    cell: tuple[Any, ...]
    rows: list[dict[str, Any]]  # by trial number
    runs: int
    shown: int = 0  # its trials embedded


def _share(attacks: Sequence[_Attack], cap: int, total: int) -> tuple[list[_Attack], int]:
    """The attacks shown and the most of one cell: round-robin over the cells in their
    interleaved order, one attack of each a round, at most `cap` rounds and `total`
    trials; then the trials past each shown attack's first, a round each, while `total`
    lasts. Attacks before trials: every cell gets a row before any attack a second trial."""
    cells: dict[tuple[Any, ...], list[_Attack]] = {}
    for a in attacks:
        cells.setdefault(a.cell, []).append(a)
    order = _interleaved(sorted(cells))
    shown: list[_Attack] = []
    for turn in range(cap):
        ready = [cells[c][turn] for c in order if turn < len(cells[c])]
        if not ready or len(shown) == total:
            break
        shown += ready[: total - len(shown)]
    for a in shown:
        a.shown = 1
    left = total - len(shown)
    more = True
    while left and more:
        more = False
        for a in shown:
            if left and a.shown < len(a.rows):
                a.shown, left, more = a.shown + 1, left - 1, True
    most = Counter(a.cell for a in shown)
    return shown, max(most.values(), default=0)


def _view(r: dict[str, Any], recorded: bool, room: int) -> tuple[Trial, int]:
    """A failing trial as the page shows it, and the characters it takes: its transcript
    and log whole when they fit in `room`, else its forbidden call alone. The row gets
    its reason codes and amounts (`reasons`, `amounts`), which the filters and sorts read."""
    ident = r["node"]  # its test's node id, as the terminal names it
    calls, codes, amounts = _log(r, ident)
    messages, size = _messages(r["transcript"], ident)
    size += _size(calls)
    unkept = None
    if size > room:
        messages, calls = None, _first_forbidden(calls, ident)
        size = _size(calls)
        unkept = (
            "Transcript and calls not embedded: the page keeps its size bounded. "
            f"{command(ident)} prints them."
        )
    elif messages is None and recorded:
        unkept = "No transcript was kept for this evaluation."
    r["reasons"], r["amounts"] = codes, amounts
    return Trial(
        ident, command(ident), _head(r), r["error"], r["source"], messages, unkept, calls
    ), size


def _head(r: Mapping[str, Any]) -> str:
    arch = ARCH.get(r["architecture"], r["architecture"])
    events = [e for e in ("unpermitted", "violation") if r[e]]
    return (
        f"{r['attack_id']} {r['model']} track {r['track']} {arch} trial {r['trial']} (level "
        f"{r['level']}): {r['status']}" + (f"; {', '.join(events)}" if events else "")
    )


def _row(a: _Attack, trials: list[Trial]) -> tuple[Failure, dict[str, Any]]:
    """The table's row of an attack, and the values its filters and sorts read: the
    reason codes of its trials shown, the amounts of its first."""
    r = dict(a.rows[0])
    r["reasons"] = list(dict.fromkeys(c for t in a.rows[: a.shown] for c in t["reasons"]))
    r["failed"] = len(a.rows)
    inline = a.runs == 1 and a.shown == 1
    ident = trials[0].ident if inline else r["every"]
    arch = ARCH.get(r["architecture"], r["architecture"])
    values = {
        **{k: str(r[k]) for k in ("model", "level", "track", "trial", "category", "event")},
        "architecture": arch,
        "attack": r["attack_id"],
        "reason": ", ".join(r["reasons"]) or "-",
        "amount": ", ".join(Money(n, c).shown() for c, n in sorted(r["amounts"].items())) or "-",
    }
    if not inline:
        values["trial"] = f"{len(a.rows)} of {a.runs}"
    head = (
        f"{r['attack_id']} {r['model']} track {r['track']} {arch} (level {r['level']}): "
        f"{r['event']} in {len(a.rows)} of {a.runs} trial(s), {a.shown} shown"
    )
    view = Failure(
        ident, command(ident), values, "", "", head, r["source"], trials, len(a.rows), a.runs
    )
    return view, r


def failures(table: pa.Table, cap: int = CAP, total: int = TOTAL, budget: int = BUDGET) -> Failures:
    """The evaluations a reader must see: a violation behind the guard, a payment to an
    unpermitted recipient, an error; a row per attack and event, shared fairly over the
    cells (track x level x model x architecture x event, `_share`): at most `cap` rows a
    cell and `total` trials embedded, transcripts up to `budget` characters."""
    rows, recorded = _failing(table)
    runs = _runs(table, rows) if rows else Counter()
    grouped: dict[tuple[Any, ...], _Attack] = {}
    for r in rows:
        name = tuple(str(r[k]) for k in KEY)
        a = grouped.setdefault((*name, r["event"]), _Attack(_cell_of(r), [], runs[name]))
        a.rows.append(r)
    shown, most = _share(list(grouped.values()), cap, total)
    # The page's default order: events, then model, level, architecture, track, attack.
    shown.sort(
        key=lambda a: (
            a.cell[CELL.index("event")],
            *(str(a.rows[0][k]) for k in ("model", "level", "architecture", "track", "attack_id")),
        )
    )
    # The heavy columns of the trials shown alone.
    embedded = [r for a in shown for r in a.rows[: a.shown]]
    heavy = table.select(list(HEAVY)).take(np.array([r["at"] for r in embedded], np.int64))
    for r, more in zip(embedded, heavy.to_pylist(), strict=True):
        r.update(more)
    views, kept, used = [], [], 0
    for a in shown:
        trials = []
        for r in a.rows[: a.shown]:
            trial, size = _view(r, recorded, budget - used)
            trials.append(trial)
            used += size
        view, r = _row(a, trials)
        views.append(view)
        kept.append(r)
    dims = _dimensions(kept)
    listed = [
        replace(view, classes=classes, ranks=order)
        for view, (classes, order) in zip(views, _classes(kept, dims, _ranks(kept)), strict=True)
    ]
    return Failures(
        Counter(r["event"] for r in rows),
        listed,
        most,
        _rest(grouped.values()),
        [d for d in dims if d.options],
        list(SORTS),
        recorded,
    )


def _rest(attacks: Iterable[_Attack]) -> list[Rest]:
    """The cells with failures not shown, in the cells' sorted order."""
    cells: dict[tuple[Any, ...], list[_Attack]] = {}
    for a in attacks:
        cells.setdefault(a.cell, []).append(a)
    out = []
    for key in sorted(cells):
        some = cells[key]
        seen = [a for a in some if a.shown]
        trials = (sum(a.shown for a in some), sum(len(a.rows) for a in some))
        if trials[0] == trials[1]:
            continue
        left = [str(a.rows[0]["attack_id"]) for a in some if not a.shown]
        track, level, model, arch, event = key
        out.append(
            Rest(
                (str(track), str(level), str(model), ARCH.get(arch, arch), EVENTS[event]),
                (len(seen), len(some)),
                trials,
                left[:IDS],
                max(0, len(left) - IDS),
            )
        )
    return out


# The filters: (key, title, a row's values for it). The sorts: (key, title).
FILTERS: tuple[tuple[str, str, Callable[[Mapping[str, Any]], list[str]]], ...] = (
    ("model", "model", lambda r: [r["model"]]),
    ("level", "level", lambda r: [str(r["level"])]),
    ("track", "track", lambda r: [r["track"]]),
    ("arch", "architecture", lambda r: [ARCH.get(r["architecture"], r["architecture"])]),
    ("category", "category", lambda r: [r["category"]]),
    ("tool", "tool", lambda r: [] if r["tool"] is None else [r["tool"]]),
    # The OWASP entries its attack tests (`corpus.owasp`): one row under several.
    ("asi", "OWASP ASI", lambda r: [f"{a} {ASI[a]}" for a in asi_of(r["category"], r["track"])]),
    ("event", "event", lambda r: [r["event"]]),
    ("reason", "reason", lambda r: list(r["reasons"])),
)
SORTS = (
    ("model", "model"),
    ("level", "level"),
    ("track", "track"),
    ("arch", "architecture"),
    ("trial", "trial"),
    ("category", "category"),
    ("attack", "attack id"),
    ("event", "event"),
    ("reason", "reason codes"),
    ("amount", "amount"),
)


def _dimensions(rows: Sequence[Mapping[str, Any]]) -> list[Dimension]:
    out = []
    for key, title, values in FILTERS:
        counts = Counter(v for r in rows for v in values(r))
        order = sorted(counts, key=lambda v: (EVENTS.index(v) if key == "event" else 0, v))
        if key == "tool":  # the tools' one order, in every report
            order = in_order(counts)
        out.append(Dimension(key, title, [(v, counts[v]) for v in order]))
    return out


def _ranks(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    keys: dict[str, list[Any]] = {
        "model": [r["model"] for r in rows],
        "level": [r["level"] for r in rows],
        "track": [r["track"] for r in rows],
        "arch": [r["architecture"] for r in rows],
        "trial": [(r["failed"], r["trial"]) for r in rows],
        "category": [r["category"] for r in rows],
        "attack": [r["attack_id"] for r in rows],
        "event": [EVENTS.index(r["event"]) for r in rows],
        "reason": [", ".join(r["reasons"]) for r in rows],
        "amount": [sum(r["amounts"].values()) for r in rows],
    }
    return {k: _rank(v) for k, v in keys.items()}


def _classes(
    rows: Sequence[Mapping[str, Any]], dims: Sequence[Dimension], ranks: Mapping[str, list[int]]
) -> list[tuple[str, str]]:
    """Each row's filter classes (`x-model3`: the 4th value of the model filter) and its
    rank per sort, as CSS variables: indices only, never a row's text."""
    index = {d.key: {v: i for i, (v, _) in enumerate(d.options)} for d in dims}
    filters = {key: values for key, _, values in FILTERS}
    out = []
    for i, r in enumerate(rows):
        classes = " ".join(f"x-{d.key}{index[d.key][v]}" for d in dims for v in filters[d.key](r))
        order = ";".join(f"--{k}:{ranks[k][i]}" for k, _ in SORTS)
        out.append((classes, order))
    return out
