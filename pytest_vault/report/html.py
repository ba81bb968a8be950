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

This module is the page's model for the template and its rendering; which failures are
shown is `failures`' job, the figures' geometry `charts`'.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from pytest_vault.core.text import shown
from pytest_vault.report.charts import figures
from pytest_vault.report.failures import failures
from pytest_vault.report.formats import cell, for_reading
from pytest_vault.report.judges import for_people
from pytest_vault.report.results import scrubbed, to_table
from pytest_vault.report.summary import sample_line
from pytest_vault.report.tables import TITLES, Analysis, Table, merged_metadata
from pytest_vault.report.through import cells, in_table, why
from pytest_vault.report.transcript import command
from pytest_vault.report.verdict import Verdict, verdict

TEMPLATES = Path(__file__).parent / "templates"


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
    notes: tuple[str, ...] = ()  # lines under its title (the OWASP entries not covered)


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
    notes = _uncovered(rows) if name == "owasp" else ()
    rows = for_reading(name, rows)
    headers = list(dict.fromkeys(k for row in rows for k in row))
    return HtmlTable(
        name,
        title or TITLES.get(name, name),
        [[f"{p}_" for p in h.split("_")[:-1]] + [h.split("_")[-1]] for h in headers],
        [(row.get("complete") is False, [_cell(h, row.get(h)) for h in headers]) for row in rows],
        notes,
    )


def _uncovered(rows: Table) -> tuple[str, ...]:
    """The OWASP entries no attack of the rows tests, named, each with why."""
    missing = [r for r in rows if not r["attacks"]]
    if not missing:
        return ()
    named = "; ".join(f"{r['asi']} {r['title']} ({r['coverage']})" for r in missing)
    return (f"Not tested by these rows ({len(missing)} of {len(rows)} entries): {named}.",)


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
    ]
    if v.tools:  # the rows are about more than one money-moving tool
        out.append(("by tool (forbidden / completed guarded evaluations)", v.tool_text()))
    out.append(("blocked share, Levels 2-4, guarded", v.blocked))
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
