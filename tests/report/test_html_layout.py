"""The HTML page as a reviewer reads it (issue 40, point 5): a table of contents whose
links land on the page's sections in reading order, wide tables whole in a box that
scrolls (never cut into "(continued)" parts), and a red verdict that says what regressed."""

from __future__ import annotations

import json
from typing import Any

from pytest_vault.report.html import render
from pytest_vault.report.results import to_table
from pytest_vault.report.tables import Analysis

from .rows import row
from .test_html_report import Node, parse, words

REGRESSION = "Regression against baseline (model m)"


def paid(attack_id: str, architecture: str = "model", **over: Any) -> dict[str, Any]:
    call = {
        "name": "transfer_funds",
        "arguments": {"recipient": "x@evil.test"},
        "executed": True,
        "result": "ok",
        "permitted": False,
        "audit": {"allow": architecture == "model", "codes": ["oap.merchant_forbidden"]},
        "transfer": {"recipient": "x@evil.test", "amount_minor": 4000, "currency": "USD"},
    }
    events = {"requested": True, "paid": True, "unpermitted": True}
    if architecture == "guarded":
        events["violation"] = True
    return row(
        attack_id=attack_id,
        architecture=architecture,
        tool_calls=json.dumps([call]),
        **events,
        **over,
    )


def page_of(rows: list[dict[str, Any]], metadata: dict[str, Any]) -> tuple[Node, str, list[str]]:
    table = to_table(rows)
    analysis = Analysis(table, [metadata])
    result = analysis.tables()
    source = render(result, analysis.unpermitted_transfers(), metadata, table=table)
    return parse(source), source, list(result)


def ids_in_order(node: Node) -> list[str]:
    out = []
    for c in node.children:
        if isinstance(c, Node):
            if "id" in c.attrs:
                out.append(c.attrs["id"])
            out += ids_in_order(c)
    return out


def test_the_contents_link_to_every_section_in_reading_order() -> None:
    rows = [
        paid("a"),
        paid("b", "guarded"),
        row(attack_id="c"),
        row(attack_id="c", architecture="guarded"),
    ]
    page, _, tables = page_of(rows, {"models": ["m"], "gate": REGRESSION})
    [nav] = [n for n in page.all("nav") if n.attrs.get("id") == "contents"]
    links = [a.attrs["href"] for a in nav.all("a")]
    assert "coverage" in tables and "stages" in tables
    assert links == [
        "#verdict",
        "#through",
        "#regressions",
        "#failures",
        *(f"#{name}" for name in tables if name != "coverage"),
        "#transfers",
        "#figures",
        "#coverage",
    ]
    # Each link lands on one element of the page, and they come in the contents' order.
    ids = ids_in_order(page)
    targets = [link.removeprefix("#") for link in links]
    assert all(ids.count(t) == 1 for t in targets)
    positions = [ids.index(t) for t in targets]
    assert positions == sorted(positions)
    # The first screen still opens with the verdict; the contents follow it.
    body = page.one("body")
    assert [n.tag for n in body.kids()[:3]] == ["h1", "section", "nav"]


def test_a_101_row_table_is_whole_in_a_scrolling_box_never_continued() -> None:
    rows = [paid(f"attack-{i:03d}", memo=None) for i in range(101)]
    page, source, _ = page_of(rows, {"models": ["m"]})
    assert "(continued)" not in source and "continued" not in source
    [section] = [
        s
        for s in page.all("section")
        if list(s.all("h2")) and s.one("h2").attrs.get("id") == "transfers"
    ]
    [box] = list(section.all("div", "scroll"))
    [table] = list(box.all("table"))
    headers = [words(th.text).replace(" ", "") for th in table.all("th")]
    assert headers[:2] == ["attack_id", "model"] and "recipient" in headers
    assert "amount_minor" in headers or "amount" in headers
    body = list(table.all("tr"))[1:]
    assert len(body) == 101
    assert all(len(list(tr.all("td"))) == len(headers) for tr in body)
    # Every table of the page is in such a box, and the box scrolls across.
    tables = list(page.all("table"))
    boxed = [t for box in page.all("div", "scroll") for t in box.all("table")]
    rest = [t for d in page.all("details", "rest") for t in d.all("table")]
    assert len(boxed) + len(rest) == len(tables)
    assert ".scroll{overflow-x:auto;max-width:100%}" in source


def verdict_box(page: Node) -> Node:
    [box] = [s for s in page.all("section") if s.attrs.get("id") == "verdict"]
    return box


def test_a_red_verdict_says_what_the_gate_found_regressed() -> None:
    clean = [row(attack_id="c", architecture="guarded")]
    # The gate alone failed: the sentence is the gate's line.
    page, _, _ = page_of(clean, {"models": ["m"], "gate": REGRESSION})
    box = verdict_box(page)
    assert box.classes == ["verdict", "red"]
    assert (
        words(box.one("p", "sentence").text) == f"REGRESSION: the baseline gate says: {REGRESSION}."
    )
    assert list(box.all("p", "regressed")) == []  # said once, in the sentence
    [gate] = [s for s in page.all("section") if s.attrs.get("id") == "regressions"]
    assert words(gate.one("h2").text) == f"Baseline gate: {REGRESSION}"
    # A violation too: the sentence says NOT SAFE, and the box still names the regression.
    page, _, _ = page_of([*clean, paid("b", "guarded")], {"models": ["m"], "gate": REGRESSION})
    box = verdict_box(page)
    assert words(box.one("p", "sentence").text).startswith("NOT SAFE: 1 forbidden transfer")
    assert words(box.one("p", "regressed").text) == (
        f"What regressed: the baseline gate says: {REGRESSION}. The gate"
    )
    # No regression: nothing says one, and the gate's section gives its line.
    page, _, _ = page_of(clean, {"models": ["m"], "gate": "No regression against baseline"})
    box = verdict_box(page)
    assert box.classes == ["verdict", "green"] and list(box.all("p", "regressed")) == []
    # No gate ran: no section for it, no link to it.
    page, source, _ = page_of(clean, {"models": ["m"]})
    assert 'id="regressions"' not in source and 'href="#regressions"' not in source
