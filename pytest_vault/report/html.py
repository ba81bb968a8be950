"""The HTML report: one self-contained page, rendered from `templates/report.html.j2`.

Jinja2 with autoescape writes every value; its `finalize` passes each one through
`text.shown` first. So no string reaches the page unescaped: attack text and model output
are adversarial, and a `<script>` shows as text, an ESC, a bidi override or a lone
surrogate as its backslash escape. The page runs no script at all (its
Content-Security-Policy allows inline CSS and nothing else): the failures are filtered
and sorted with CSS alone (`:has()` on the controls' chosen options, flex `order` from
each row's ranks), and each transcript opens in place as a `<details>`.

It opens with the verdict (`verdict.Verdict`) and a table of contents, then what got
through, the baseline gate's line when one ran, and every evaluation that failed: a
violation behind the guard, a payment to an unpermitted recipient, or an error, each
with its transcript and the bank's log of its calls. The tables follow, their numbers as
the text report shows them (`formats.cell`, `formats.for_reading`), each whole in a box
that scrolls across (never cut into parts); then the figures, and coverage last.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from pytest_vault.core.text import shown
from pytest_vault.guard.money import Money
from pytest_vault.report.formats import cell, for_reading
from pytest_vault.report.judges import UNDEFINED, for_people
from pytest_vault.report.results import read_calls, read_transcript, scrubbed, to_table
from pytest_vault.report.summary import sample_line
from pytest_vault.report.tables import TITLES, Analysis, Table, merged_metadata
from pytest_vault.report.through import cells, in_table, why
from pytest_vault.report.transcript import command, node_ids
from pytest_vault.report.verdict import Verdict, verdict

TEMPLATES = Path(__file__).parent / "templates"
COLORS = {
    "requested": "#8da0cb",
    "paid": "#66c2a5",
    "paid_allowlisted": "#a6d854",
    "unpermitted": "#e5534b",
}
ARCH = {"model": "model alone", "guarded": "guarded"}
MODEL_ALONE, GUARDED = "#8da0cb", "#fc8d62"
ATTACKED, CLEAN = "#e41a1c", "#4daf4a"

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


# -- charts: geometry here, drawn by the template ---------------------------------------------


@dataclass(frozen=True)
class Rect:
    kind: ClassVar[str] = "rect"
    x: float
    y: float
    w: float
    h: float
    fill: str
    tip: str


@dataclass(frozen=True)
class Label:
    kind: ClassVar[str] = "text"
    x: float
    y: float
    text: str
    cls: str
    anchor: str = "start"
    tip: str = ""  # the whole text of a label cut to fit


@dataclass(frozen=True)
class Rule:
    kind: ClassVar[str] = "line"
    x1: float
    y1: float
    x2: float
    y2: float
    cls: str


Mark = Rect | Label | Rule


@dataclass(frozen=True)
class Chart:
    title: str
    width: float
    height: float
    marks: list[Mark]


# Font sizes of the chart classes (the template's CSS), and the width of a text in them,
# estimated on the widest common sans (DejaVu Sans) so that the layout errs wide.
SIZES = {"title": 13.0, "label": 12.0, "axis": 11.0, "value": 10.0}
_NARROW, _WIDE = frozenset("ilj.,:;'|!()[] "), frozenset("mwMW%@")


def _em(char: str) -> float:
    if char in _NARROW:
        return 0.34
    if char in _WIDE:
        return 0.98
    if char.isupper():
        return 0.76
    return 0.66 if char.isdigit() else 0.62


def text_width(text: str, cls: str) -> float:
    return sum(map(_em, text)) * SIZES[cls] * (1.1 if cls == "title" else 1.0)


def _fit(text: str, width: float, cls: str) -> str:
    """`text`, cut with an ellipsis to fit `width` (its whole text goes in a tooltip)."""
    if text_width(text, cls) <= width:
        return text
    while text and text_width(text + "…", cls) > width:
        text = text[:-1]
    return text + "…"


_PLACES = re.compile(r"(?<=[ :/_@+.-])")


def _wrap(text: str, width: float, cls: str, most: int = 2) -> list[str]:
    """`text` in at most `most` lines of `width`, broken after a space or a `:/_@+.-`
    (a spec, a placement); what does not fit is cut with an ellipsis."""
    lines: list[str] = []
    for piece in _PLACES.split(text):
        if lines and text_width(lines[-1] + piece, cls) <= width:
            lines[-1] += piece
        else:
            lines.append(piece)
    if len(lines) > most:
        lines = [*lines[: most - 1], "".join(lines[most - 1 :])]
    return [_fit(line.strip(), width, cls) for line in lines]


def _labels(
    x: float, y: float, text: str, width: float, cls: str, anchor: str, most: int = 2
) -> list[Label]:
    """`text` as lines of labels from `y` down, the whole text in a tooltip when cut."""
    lines = _wrap(text, width, cls, most)
    tip = text if any(line.endswith("…") for line in lines) else ""
    step = SIZES[cls] + 3
    return [Label(x, y + step * i, line, cls, anchor, tip) for i, line in enumerate(lines)]


def _title(title: str, width: float) -> list[Label]:
    """The title in lines of at most `width`, broken between words."""
    lines: list[str] = []
    for word in title.split(" "):
        if lines and text_width(f"{lines[-1]} {word}", "title") <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return [Label(8, 18 + 17 * i, line, "title") for i, line in enumerate(lines)]


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _legend(legend: Mapping[str, str], x0: float, y: float, width: float) -> list[Mark]:
    """Swatches and names, wrapped to `width`."""
    marks: list[Mark] = []
    x = x0
    for name, color in legend.items():
        span = 14 + text_width(name, "axis") + 18
        if x > x0 and x + span > width:
            x, y = x0, y + 18
        marks += [Rect(x, y, 10, 10, color, name), Label(x + 14, y + 9, name, "axis")]
        x += span
    return marks


def _bars(
    groups: Sequence[tuple[str, Sequence[tuple[str, float | None, str]]]],
    title: str,
    legend: Mapping[str, str],
) -> Chart:
    """Grouped vertical bars from 0 to 100%: groups of (label, value 0..1, color), each
    bar as wide as its value label, each group as wide as its bars or its label."""
    values = [pct(v) for _, items in groups for _, v, _ in items]
    bar = max(34.0, max((text_width(v, "value") for v in values), default=0) + 8)
    gap, height, left = 28.0, 180.0, 44.0
    spans = [max(len(items) * bar, text_width(label, "label") + 8) + gap for label, items in groups]
    width = max(left + sum(spans) + 12, 480.0)
    heading = _title(title, width - 16)
    top = heading[-1].y + 26  # room for a full bar's value label under the title
    marks: list[Mark] = [*heading]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = top + height * (1 - tick)
        marks.append(Rule(left, y, width - 8, y, "grid"))
        marks.append(Label(left - 6, y + 4, f"{int(tick * 100)}%", "axis", "end"))
    x = left + gap / 2
    for (label, items), span in zip(groups, spans, strict=True):
        bx = x + (span - gap - len(items) * bar) / 2
        for name, value, color in items:
            h = 0.0 if value is None else height * value
            marks.append(Rect(bx + 2, top + height - h, bar - 4, h, color, f"{name}: {pct(value)}"))
            marks.append(Label(bx + bar / 2, top + height - h - 4, pct(value), "value", "middle"))
            bx += bar
        marks.append(Label(x + (span - gap) / 2, top + height + 18, label, "label", "middle"))
        x += span
    marks += _legend(legend, left, top + height + 32, width - 8)
    bottom = max(m.y for m in marks if isinstance(m, Rect | Label)) + 16
    return Chart(title, width, bottom, marks)


def _hbars(
    rows: Sequence[tuple[str, Sequence[tuple[str, float | None, float | None, float | None, str]]]],
    title: str,
    legend: Mapping[str, str] | None = None,
) -> Chart:
    """Horizontal bars with interval whiskers: per label, its bars (name, rate, low,
    high, color) and one note each on the right."""
    label_w, plot_w, bar_h = 230.0, 340.0, 18.0
    notes = [f"{pct(rate)} {name}".rstrip() for _, bars in rows for name, rate, _, _, _ in bars]
    width = label_w + plot_w + 16 + max((text_width(n, "axis") for n in notes), default=0) + 8
    heading = _title(title, width - 16)
    top = heading[-1].y + 14
    marks: list[Mark] = [*heading]
    y = top
    for label, bars in rows:
        lines = _wrap(label, label_w - 16, "label")
        # A row as tall as its bars or its label's lines, the label beside their middle.
        tall = max(len(bars) * bar_h, 15 * len(lines) + 3)
        first = y + tall / 2 - 15 * (len(lines) - 1) / 2 + 4
        marks += _labels(label_w - 8, first, label, label_w - 16, "label", "end")
        y += (tall - len(bars) * bar_h) / 2
        for name, rate, low, high, color in bars:
            w = 0.0 if rate is None else plot_w * rate
            marks.append(Rect(label_w, y + 2, w, bar_h - 4, color, f"{label} {name}: {pct(rate)}"))
            if low is not None and high is not None:
                cy = y + bar_h / 2
                marks.append(
                    Rule(label_w + plot_w * low, cy, label_w + plot_w * high, cy, "whisker")
                )
            note = f"{pct(rate)} {name}".rstrip()
            marks.append(Label(label_w + plot_w + 8, y + bar_h / 2 + 4, note, "axis"))
            y += bar_h
        y += (tall - len(bars) * bar_h) / 2 + 8
    for tick in (0, 0.5, 1.0):
        x = label_w + plot_w * tick
        marks.append(Rule(x, top - 2, x, y - 6, "grid"))
        marks.append(Label(x, y + 8, f"{int(tick * 100)}%", "axis", "middle"))
    y += 16
    if legend:
        marks += _legend(legend, label_w, y, width - 8)
        y += 18
    return Chart(title, width, y + 6, marks)


def _kappas(pairs: Sequence[tuple[str, Sequence[tuple[str, float | None]]]], title: str) -> Chart:
    """Kappa bars from -1 to 1 around a zero line: groups (pair, [(levels, kappa)]);
    an undefined kappa is written, never drawn as 0."""
    bar, gap, half, left = 50.0, 28.0, 80.0, 40.0
    # A pair's label in up to three lines as wide as its bars, or 240 wide at most.
    spans = [
        max(len(items) * bar, min(text_width(label, "label") + 8, 240.0)) + gap
        for label, items in pairs
    ]
    width = max(left + sum(spans) + 12, 480.0)
    heading = _title(title, width - 16)
    top = heading[-1].y + 26
    zero = top + half
    marks: list[Mark] = [*heading]
    for tick in (-1.0, -0.5, 0.0, 0.5, 1.0):
        y = zero - half * tick
        marks.append(Rule(left, y, width - 8, y, "grid"))
        marks.append(Label(left - 6, y + 4, f"{tick:g}", "axis", "end"))
    x = left + gap / 2
    for (label, items), span in zip(pairs, spans, strict=True):
        bx = x + (span - gap - len(items) * bar) / 2
        for levels, value in items:
            name = "pooled" if levels == "all" else f"L{levels}"
            said = UNDEFINED if value is None else f"{value:.2f}"
            mid = bx + bar / 2
            if value is not None:
                h = half * abs(value)
                marks.append(
                    Rect(
                        bx + 2,
                        zero - h if value >= 0 else zero,
                        bar - 4,
                        h,
                        COLORS["requested"],
                        f"{label} {name}: kappa {said}",
                    )
                )
            k = value or 0.0
            ty = zero - half * k - 4 if k >= 0 else zero - half * k + 12
            marks.append(Label(mid, ty, said, "value", "middle"))
            # Below a bar down to -1 and its value: the level, then the pair.
            marks.append(Label(mid, top + 2 * half + 30, name, "axis", "middle"))
            bx += bar
        marks += _labels(
            x + (span - gap) / 2, top + 2 * half + 48, label, span - gap, "label", "middle", 3
        )
        x += span
    bottom = max(m.y for m in marks if isinstance(m, Label)) + 12
    return Chart(title, width, bottom, marks)


def figures(result: Mapping[str, Table]) -> list[Chart]:
    out = []
    stages = [r for r in result.get("stages", []) if r["levels"] == "2-4" and r["model"] == "all"]
    if stages:
        groups = []
        for r in stages:
            n = r["evaluations"]
            items = [
                (e, (r[e] / n if n else None), COLORS[e])
                for e in ("requested", "paid", "paid_allowlisted", "unpermitted")
            ]
            groups.append((f"{ARCH.get(r['architecture'], r['architecture'])} (n={n:,})", items))
        legend = {
            "requested": COLORS["requested"],
            "paid": COLORS["paid"],
            "paid to a permitted recipient": COLORS["paid_allowlisted"],
            "unpermitted": COLORS["unpermitted"],
        }
        out.append(_bars(groups, "The five stages per architecture, Levels 2-4", legend))
    rates = [r for r in result.get("model_rates", []) if r["architecture"] == "model"]
    if rates:
        rows = [
            (
                r["model"],
                [
                    (
                        # The rate's own count and denominator: requests, never another event.
                        f"({r['requested']:,}/{r['evaluations']:,})",
                        r["rate"],
                        r["ci_low"],
                        r["ci_high"],
                        COLORS["requested"],
                    )
                ],
            )
            for r in rates
        ]
        title = "Per-model request rates on identical inputs (model alone), 95% CI by session"
        out.append(_hbars(rows, title))
    pairs = [r for r in result.get("matched_pairs", []) if r["pairs"]]
    if pairs:
        rows = [
            (
                r["model"],
                [
                    (
                        f"({r['unpermitted_model']:,}/{r['pairs']:,})",
                        r["unpermitted_model"] / r["pairs"],
                        None,
                        None,
                        MODEL_ALONE,
                    ),
                    (
                        f"({r['unpermitted_guarded']:,}/{r['pairs']:,})",
                        r["unpermitted_guarded"] / r["pairs"],
                        None,
                        None,
                        GUARDED,
                    ),
                ],
            )
            for r in pairs
        ]
        out.append(
            _hbars(
                rows,
                "Matched unpermitted transfers per model: model alone against behind the "
                "guard, on the same inputs",
                {"model alone": MODEL_ALONE, "behind the guard": GUARDED},
            )
        )
    placed = [r for r in result.get("indirect_by_placement", []) if r["architecture"] == "model"]
    for key, name in (("placement", "placement"), ("style", "attack style")):
        sums: dict[str, list[int]] = {}
        for r in placed:
            total = sums.setdefault(r[key], [0, 0, 0, 0])
            for i, k in enumerate(("attacked_took", "attacked", "clean_took", "clean")):
                total[i] += r[k]
        if sums:
            rows = [
                (
                    label,
                    [
                        (f"({took:,}/{n:,})", took / n if n else None, None, None, ATTACKED),
                        (f"({clean:,}/{m:,})", clean / m if m else None, None, None, CLEAN),
                    ],
                )
                for label, (took, n, clean, m) in sorted(sums.items())
            ]
            out.append(
                _hbars(
                    rows,
                    f"Indirect: the injected action asked for, attacked against clean, by {name} "
                    "(model alone)",
                    {"attacked copy": ATTACKED, "clean copy": CLEAN},
                )
            )
    agreement = result.get("judge_agreement", [])
    if agreement:
        kappas: dict[str, list[tuple[str, float | None]]] = {}
        for r in agreement:
            if r["evaluations"]:
                kappas.setdefault(f"{r['judge_a']} / {r['judge_b']}", []).append(
                    (r["levels"], r["kappa"])
                )
        if kappas:
            out.append(
                _kappas(
                    list(kappas.items()),
                    "Judge agreement per level: Cohen's kappa (judges audit, never decide)",
                )
            )
    return out


# -- tables -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    text: str
    kind: str = ""  # "na" (no value), "warn" (a False), "n" (a number: right-aligned)

    @property
    def pieces(self) -> list[str]:
        """A number's text in the pieces a line may break between: a rate and its
        interval, a zero's two bounds (`44.8%`, `[43.01%, 46.63%]`)."""
        return _PIECES.split(self.text)


_NUMBER = re.compile(r"[-+]?[$€£¥]?[0-9]")
_PIECES = re.compile(r" (?=\[|3/S )")


@dataclass(frozen=True)
class HtmlTable:
    """A table whole: the page scrolls a wide one inside its own box, never cuts it into
    parts (a row's recipient and amount stay on one line of one table)."""

    name: str
    title: str
    headers: list[list[str]]  # each header's pieces, to break after each "_"
    rows: list[tuple[bool, list[Cell]]]  # (incomplete, cells)


def _cell(name: str, value: Any) -> Cell:
    if value is None:
        return Cell("-", "na")
    if value is False:
        return Cell(cell(name, value), "warn")
    text = cell(name, value)
    number = not isinstance(value, str) or _NUMBER.match(text) is not None
    return Cell(text, "n" if number and not isinstance(value, dict) else "")


def html_table(name: str, rows: Table, title: str = "") -> HtmlTable:
    """A table as the text report shows it (`formats.for_reading`, `formats.cell`), whole."""
    rows = for_reading(name, rows)
    headers = list(dict.fromkeys(k for row in rows for k in row))
    return HtmlTable(
        name,
        title or TITLES.get(name, name),
        [[f"{p}_" for p in h.split("_")[:-1]] + [h.split("_")[-1]] for h in headers],
        [(row.get("complete") is False, [_cell(h, row.get(h)) for h in headers]) for row in rows],
    )


# -- the failures, each with its transcript ---------------------------------------------------


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


# -- the page ---------------------------------------------------------------------------------


def _shown(value: Any) -> Any:
    """Every value the template writes: our own markup as it is, anything else as text
    for people (controls, bidi and lone surrogates escaped); autoescape does the rest."""
    if value is None or isinstance(value, Markup):
        return value
    return shown(value)


# Where a long name may break: after these (`scripted:obedient`, `direct_transfer`).
_BREAK = re.compile(r"(?<=[_:,-])")
_WBR = Markup("<wbr>")


def wbr(value: Any) -> Markup:
    """A value as text for people, with a `<wbr>` wherever a long name may break (each
    piece is escaped by `Markup.join`)."""
    return _WBR.join(map(shown, _BREAK.split(str(value))))


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=True,
        finalize=_shown,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["wbr"] = wbr
    return env


def _through(table: pa.Table) -> dict[str, Any] | None:
    """What got through, as the terminal summary ends with it: per model and architecture,
    the first evaluations, what each paid and why the passport forbids it, and the
    command that shows it."""
    found = in_table(table)
    if not found:
        return None
    entries = [
        {
            "model": c.model,
            "said": c.said,
            "count": len(c.shown) + c.more,
            "more": c.more,
            "shown": [
                {
                    "ident": t.ident,
                    "command": command(t.ident),
                    "paid": [
                        {"money": p.money, "to": p.recipient, "why": why(p), "injected": p.injected}
                        for p in t.paid
                    ],
                }
                for t in c.shown
            ],
        }
        for c in cells(found)
    ]
    return {"total": len(found), "cells": entries}


def _facts(v: Verdict) -> list[tuple[str, str]]:
    """The verdict's facts, one a line, as the text report lists them."""
    behind = f"{v.violations:,}" + (f" ({v.bound})" if v.bound else "")
    out = [("guard under test", v.guard)]
    if v.passports:
        out.append(
            ("passports enforced", ", ".join(f"L{k} {d}" for k, d in sorted(v.passports.items())))
        )
    out += [
        ("models", ", ".join(v.models) or "-"),
        (
            "forbidden transfers behind the guard",
            f"{behind}, in {v.guarded:,} completed guarded evaluations",
        ),
        ("blocked share, Levels 2-4, guarded", v.blocked),
    ]
    if v.dgf is not None:
        out.append(("DGF score (indirect), guarded", v.dgf))
    out += [
        ("benign requests completed", v.benign),
        ("errors; not run", f"{v.errors:,}; {v.not_run:,}"),
    ]
    if v.gate is not None:
        out.append(("baseline gate", v.gate))
    return out


def _tone(v: Verdict) -> str:
    if v.green:
        return "green"
    return "red" if v.violations or v.sentence.startswith("REGRESSION") else "amber"


def _regressed(v: Verdict | None) -> str | None:
    """The gate's verdict line when it found a regression (the results file keeps the
    line alone, never the regressed measures), else None."""
    if v is None or v.gate is None:
        return None
    return None if v.gate.startswith(("No regression", "INCOMPLETE")) else v.gate


# The headings a reviewer reads, in the order the page gives them: the verdict, what got
# through, the gate, the failures, the tables, the figures, and coverage last.
LAST = ("coverage",)


def _contents(context: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The table of contents: (id, heading) of each section, in the page's order."""
    out = []
    if context["verdict"] is not None:
        out.append(("verdict", "Verdict"))
    if context["through"]:
        out.append(("through", "What got through"))
    if context["gate"] is not None:
        out.append(("regressions", "Baseline gate"))
    if context["failures"] is not None:
        out.append(("failures", "Failures and unpermitted payments"))
    out += [(t.name, _short(t.title)) for t in context["tables"]]
    out.append((context["transfers"].name, _short(context["transfers"].title)))
    if context["charts"]:
        out.append(("figures", "Figures"))
    out += [(t.name, _short(t.title)) for t in context["last"]]
    return out


def _short(title: str) -> str:
    """A table's title up to its first parenthesis: the heading's name, for the contents."""
    return title.split(" (")[0]


def render(
    result: Mapping[str, Table],
    transfers: Table,
    metadata: Mapping[str, Any],
    note: str = "",
    *,
    table: pa.Table | None = None,
    found: Verdict | None = None,
) -> str:
    """The page; `note`: a line on the rows shown (say, `vault-report --judged-only`).
    With the rows (`table`), it opens with the verdict (`found`, else computed from them
    and `metadata`) and lists every failure with its transcript."""
    metadata = scrubbed(metadata)  # whatever the caller passes: no URL secret is shown
    if table is not None and found is None:
        gate = metadata.get("gate")
        found = verdict(table, [metadata], gate if isinstance(gate, str) else None)
    record = metadata.get("sample")
    people = for_people(result)
    context = {
        "verdict": found,
        "tone": None if found is None else _tone(found),
        "facts": [] if found is None else _facts(found),
        "models": ", ".join(metadata.get("models", [])) or "-",
        "corpus": str(metadata.get("corpus_digest", "-"))[:19],
        "version": metadata.get("pytest_vault_version", "-"),
        "sample": sample_line(record) if record else None,
        "note": note or None,
        "failures": None if table is None else failures(table),
        "through": None if table is None else _through(table),
        "gate": None if found is None else found.gate,
        "regressed": _regressed(found),
        "charts": figures(result),
        "tables": [html_table(name, rows) for name, rows in people.items() if name not in LAST],
        "last": [html_table(name, people[name]) for name in LAST if name in people],
        "transfers": html_table(
            "transfers",
            transfers,
            "Unpermitted transfers, as the model made them (first 200)",
        ),
    }
    context["contents"] = _contents(context)
    return _environment().get_template("report.html.j2").render(context)


def write_html(
    rows: Sequence[Mapping[str, Any]] | pa.Table,
    metadata: Sequence[Mapping[str, Any]],
    path: Path,
) -> None:
    """The HTML report of a run's rows (used at the end of a pytest run)."""
    table = to_table(rows)
    analysis = Analysis(table, metadata)
    merged = merged_metadata(metadata)
    page = render(analysis.tables(), analysis.unpermitted_transfers(), merged, table=table)
    path.write_text(page, encoding="utf-8")
