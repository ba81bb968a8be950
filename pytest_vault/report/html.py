"""The HTML report: one self-contained page (inline CSS and SVG, no script, no network).

Every string that comes from a corpus, a model or a results file goes through `esc`:
attack text and model output are adversarial, and a `<script>` must show as text, an
ESC, a bidi override or a lone surrogate as its backslash escape (`text.shown`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from pytest_vault.core.text import shown
from pytest_vault.report.judges import UNDEFINED, for_people
from pytest_vault.report.results import scrubbed, to_table
from pytest_vault.report.summary import sample_line
from pytest_vault.report.tables import TITLES, Analysis, Table, merged_metadata

COLORS = {
    "requested": "#8da0cb",
    "paid": "#66c2a5",
    "paid_allowlisted": "#a6d854",
    "unpermitted": "#e5534b",
}
ARCH = {"model": "model alone", "guarded": "guarded"}


def esc(value: object) -> str:
    return escape(shown(value), quote=True)


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _bars(
    groups: Sequence[tuple[str, Sequence[tuple[str, float | None, str]]]],
    title: str,
    legend: Mapping[str, str],
) -> str:
    """Grouped vertical bars: groups of (label, value 0..1, color)."""
    bar, gap, height, top, left = 34, 28, 180, 30, 40
    # Each group is as wide as its bars or its label, whichever is wider.
    spans = [max(len(items) * bar, 7 * len(label)) + gap for label, items in groups]
    legend_w = sum(14 + 7 * len(name) + 16 for name in legend)
    width = max(left + sum(spans) + 20, left + 7 * len(title), left + legend_w)
    parts = [
        f'<svg class="figure" role="img" aria-label="{esc(title)}" width="{width}" height="{height + top + 60}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        y = top + height * (1 - tick)
        parts.append(
            f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/><text x="{left - 6}" y="{y + 4:.1f}" class="axis" text-anchor="end">{int(tick * 100)}%</text>'
        )
    x = left + gap / 2
    for (label, items), span in zip(groups, spans, strict=True):
        start = x + (span - gap - len(items) * bar) / 2
        bx = start
        for name, value, color in items:
            h = 0.0 if value is None else height * value
            parts.append(
                f'<rect x="{bx:.1f}" y="{top + height - h:.1f}" width="{bar - 4}" height="{h:.1f}" fill="{color}"><title>{esc(name)}: {pct(value)}</title></rect>'
            )
            parts.append(
                f'<text x="{bx + (bar - 4) / 2:.1f}" y="{top + height - h - 4:.1f}" class="value" text-anchor="middle">{pct(value) if value else "0"}</text>'
            )
            bx += bar
        parts.append(
            f'<text x="{x + (span - gap) / 2:.1f}" y="{top + height + 18}" class="label" text-anchor="middle">{esc(label)}</text>'
        )
        x += span
    lx = left
    for name, color in legend.items():
        parts.append(
            f'<rect x="{lx}" y="{top + height + 32}" width="10" height="10" fill="{color}"/><text x="{lx + 14}" y="{top + height + 41}" class="axis">{esc(name)}</text>'
        )
        lx += 14 + 7 * len(name) + 16
    parts.append(f'<text x="{left}" y="16" class="title">{esc(title)}</text></svg>')
    return "".join(parts)


def _hbars(
    rows: Sequence[tuple[str, float | None, float | None, float | None, str]], title: str
) -> str:
    """Horizontal bars with interval whiskers: (label, rate, low, high, note)."""
    label_w, plot_w, row_h, top = 260, 360, 24, 30
    height = top + row_h * len(rows) + 30
    parts = [
        f'<svg class="figure" role="img" aria-label="{esc(title)}" width="{label_w + plot_w + 200}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="0" y="16" class="title">{esc(title)}</text>',
    ]
    for i, (label, rate, low, high, note) in enumerate(rows):
        y = top + i * row_h
        w = 0.0 if rate is None else plot_w * rate
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 15}" class="label" text-anchor="end">{esc(label)}</text>'
        )
        parts.append(
            f'<rect x="{label_w}" y="{y + 4}" width="{w:.1f}" height="{row_h - 8}" fill="{COLORS["requested"]}"><title>{esc(label)}: {pct(rate)}</title></rect>'
        )
        if low is not None and high is not None:
            parts.append(
                f'<line x1="{label_w + plot_w * low:.1f}" x2="{label_w + plot_w * high:.1f}" y1="{y + 12}" y2="{y + 12}" class="whisker"/>'
            )
        parts.append(
            f'<text x="{label_w + plot_w + 8}" y="{y + 15}" class="axis">{pct(rate)} {esc(note)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _kappas(pairs: Sequence[tuple[str, Sequence[tuple[str, float | None]]]], title: str) -> str:
    """Kappa bars from -1 to 1 around a zero line: groups (pair, [(levels, kappa)]);
    an undefined kappa is written, never drawn as 0."""
    bar, gap, half, top, left = 46, 28, 80, 30, 40
    spans = [max(len(items) * bar, 7 * len(label)) + gap for label, items in pairs]
    width = max(left + sum(spans) + 20, left + 7 * len(title))
    zero = top + half
    parts = [
        f'<svg class="figure" role="img" aria-label="{esc(title)}" width="{width}" height="{top + 2 * half + 60}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for tick in (-1.0, -0.5, 0.0, 0.5, 1.0):
        y = zero - half * tick
        parts.append(
            f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/><text x="{left - 6}" y="{y + 4:.1f}" class="axis" text-anchor="end">{tick:g}</text>'
        )
    x = left + gap / 2
    for (label, items), span in zip(pairs, spans, strict=True):
        bx = x + (span - gap - len(items) * bar) / 2
        for levels, value in items:
            name = "pooled" if levels == "all" else f"L{levels}"
            shown_value = UNDEFINED if value is None else f"{value:.2f}"
            mid = bx + (bar - 4) / 2
            if value is not None:
                h = half * abs(value)
                y = zero - h if value >= 0 else zero
                parts.append(
                    f'<rect x="{bx:.1f}" y="{y:.1f}" width="{bar - 4}" height="{h:.1f}" fill="{COLORS["requested"]}"><title>{esc(label)} {esc(name)}: kappa {esc(shown_value)}</title></rect>'
                )
            k = value or 0.0
            ty = zero - half * k - 4 if k >= 0 else zero - half * k + 11
            parts.append(
                f'<text x="{mid:.1f}" y="{ty:.1f}" class="value" text-anchor="middle">{esc(shown_value)}</text>'
                f'<text x="{mid:.1f}" y="{top + 2 * half + 14}" class="axis" text-anchor="middle">{esc(name)}</text>'
            )
            bx += bar
        parts.append(
            f'<text x="{x + (span - gap) / 2:.1f}" y="{top + 2 * half + 32}" class="label" text-anchor="middle">{esc(label)}</text>'
        )
        x += span
    parts.append(f'<text x="{left}" y="16" class="title">{esc(title)}</text></svg>')
    return "".join(parts)


def figures(result: Mapping[str, Table]) -> list[str]:
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
            groups.append((f"{ARCH.get(r['architecture'], r['architecture'])} (n={n})", items))
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
            (r["model"], r["rate"], r["ci_low"], r["ci_high"], f"({r['unpermitted']} unpermitted)")
            for r in rates
        ]
        out.append(
            _hbars(
                rows, "Per-model request rates on identical inputs (model alone), 95% CI by session"
            )
        )
    pairs = result.get("matched_pairs", [])
    if pairs:
        groups = [
            (
                r["model"],
                [
                    ("model alone", r["requested_model"] / r["pairs"], "#8da0cb"),
                    ("guarded", r["requested_guarded"] / r["pairs"], "#fc8d62"),
                ],
            )
            for r in pairs
        ]
        out.append(
            _bars(
                groups,
                "Matched request rates: model alone and guarded, same inputs",
                {"model alone": "#8da0cb", "guarded": "#fc8d62"},
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
            groups = [
                (
                    label,
                    [
                        ("attacked copy", took / n if n else None, "#e41a1c"),
                        ("clean copy", clean / m if m else None, "#4daf4a"),
                    ],
                )
                for label, (took, n, clean, m) in sorted(sums.items())
            ]
            out.append(
                _bars(
                    groups,
                    f"Indirect: the injected action asked for, attacked against clean, by {name} "
                    "(model alone)",
                    {"attacked copy": "#e41a1c", "clean copy": "#4daf4a"},
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


def _value(value: Any) -> str:
    if value is None:
        return '<span class="na">-</span>'
    if isinstance(value, bool):
        return "yes" if value else '<span class="warn">no</span>'
    if isinstance(value, float):
        return esc(f"{value:.4g}")
    if isinstance(value, dict):
        return esc(", ".join(f"{k}={v}" for k, v in value.items()) or "-")
    return esc(value)


def html_table(rows: Table) -> str:
    if not rows:
        return '<p class="na">(no rows)</p>'
    headers = list(dict.fromkeys(k for row in rows for k in row))
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr"
        + (' class="incomplete"' if row.get("complete") is False else "")
        + ">"
        + "".join(f"<td>{_value(row.get(h))}</td>" for h in headers)
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1200px;color:#1f2328;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #d0d7de;padding-bottom:.3rem}
.meta{color:#57606a}.figures{display:flex;flex-wrap:wrap;gap:1.5rem}.figure{background:#f6f8fa;border-radius:6px;padding:.5rem}
table{border-collapse:collapse;font-size:12.5px;margin:.5rem 0;display:block;overflow-x:auto}
th,td{border:1px solid #d0d7de;padding:3px 7px;text-align:right;white-space:nowrap}th{background:#f6f8fa}
td:first-child,th:first-child{text-align:left}tr.incomplete td{background:#fff8c5}
.na{color:#8c959f}.warn{color:#cf222e;font-weight:600}
.grid{stroke:#d0d7de;stroke-width:1}.axis{font-size:11px;fill:#57606a}.label{font-size:12px;fill:#1f2328}
.value{font-size:10px;fill:#1f2328}.title{font-size:13px;font-weight:600;fill:#1f2328}.whisker{stroke:#1f2328;stroke-width:2}
code{background:#f6f8fa;padding:0 3px;border-radius:3px}
"""


def render(
    result: Mapping[str, Table],
    transfers: Table,
    metadata: Mapping[str, Any],
    note: str = "",
) -> str:
    """The page; `note`: a line on the rows shown (say, `vault-report --judged-only`)."""
    metadata = scrubbed(metadata)  # whatever the caller passes: no URL secret is shown
    models = ", ".join(metadata.get("models", [])) or "-"
    record = metadata.get("sample")
    sample = f'<p class="meta">{esc(sample_line(record))}</p>' if record else ""
    sample += f'<p class="meta">{esc(note)}</p>' if note else ""
    sections = [
        f'<section><h2 id="{esc(name)}">{esc(TITLES.get(name, name))}</h2>{html_table(rows)}</section>'
        for name, rows in for_people(result).items()
    ]
    sections.append(
        '<section><h2 id="transfers">Unpermitted transfers, as the model made them (first 200)</h2>'
        "<p>Recipients and memos are model output, shown as text.</p>"
        + html_table(transfers)
        + "</section>"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>pytest-vault report</title><style>{STYLE}</style></head><body>
<h1>pytest-vault report</h1>
<p class="meta">Models: {esc(models)} · corpus {esc(str(metadata.get("corpus_digest", "-"))[:19])} · pytest-vault {esc(metadata.get("pytest_vault_version", "-"))}.
Rates are over completed evaluations; intervals are 95% percentile bootstraps over attacker sessions; a zero carries its exact one-sided 95% bound
(<code>upper_bound_eval</code>) and the per-session rule of three (<code>upper_bound_session</code>). Highlighted rows are incomplete cells.</p>{sample}
<div class="figures">{"".join(figures(result))}</div>
{"".join(sections)}
</body></html>
"""


def write_html(
    rows: Sequence[Mapping[str, Any]], metadata: Sequence[Mapping[str, Any]], path: Path
) -> None:
    """The HTML report of a run's rows (used at the end of a pytest run)."""
    analysis = Analysis(to_table(rows), metadata)
    page = render(analysis.tables(), analysis.unpermitted_transfers(), merged_metadata(metadata))
    path.write_text(page, encoding="utf-8")
