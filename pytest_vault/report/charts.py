"""The report's figures: SVG charts as geometry, drawn by `templates/report.html.j2`.

Its one job: `figures` reads the analysis's tables (by name) and lays out each chart as
marks, `Rect`, `Label` and `Rule`, in a `Chart` of a given width and height; the template
writes each mark as one SVG element by its `kind`. No markup is written here, so the
template's autoescape writes every label. The width of a text is estimated (`text_width`,
erring wide), so a label that would overflow wraps or is cut with an ellipsis, its whole
text in a tooltip.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from pytest_vault.report.judges import UNDEFINED
from pytest_vault.report.tables import Table

COLORS = {
    "requested": "#8da0cb",
    "paid": "#66c2a5",
    "paid_allowlisted": "#a6d854",
    "unpermitted": "#e5534b",
}
# An architecture as people read it, in the figures and the failures (`failures`).
ARCH = {"model": "model alone", "guarded": "guarded"}
MODEL_ALONE, GUARDED = "#8da0cb", "#fc8d62"
ATTACKED, CLEAN = "#e41a1c", "#4daf4a"


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
