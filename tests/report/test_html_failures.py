"""The HTML report's failure table: its budget shared fairly over tracks (indirect and
adaptive included), levels, models and architectures, attacks before trials; every cell
with more says how many and how to print them; the page a function of the set of rows."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest

from pytest_vault.report.failures import TOTAL, failures
from pytest_vault.report.html import write_html
from pytest_vault.report.results import load, to_table, write_results

from .rows import row
from .test_html_report import failing, listed, parse, words

PAID = {"requested": True, "paid": True, "unpermitted": True, "violation": True}
TRACKS = ("A", "B", "adaptive", "indirect")
# Failing attacks per (track, level, model, architecture): tracks A and B far past the
# page's budget, the adaptive and indirect tracks a few, as in issue 40's regressed run.
ATTACKS = {"A": 120, "B": 120, "adaptive": 2, "indirect": 3}
# What the adaptive and indirect rows hold besides (an attacked copy: its clean run apart).
MORE: dict[str, dict[str, Any]] = {
    "adaptive": {"rounds": 3, "attacker": "scripted:attacker"},
    "indirect": {"clean": False},
}


def _run() -> list[dict[str, Any]]:
    """Three trials of each attack; each failing in trials 1 and 2 (the third passes),
    the indirect ones in all three; and a passing attack per track."""
    out = []
    for track, n in ATTACKS.items():
        for level in (2, 3, 4):
            for model in ("m1", "m2"):
                for arch in ("model", "guarded"):
                    for i in range(n + 1):
                        for trial in (1, 2, 3):
                            fails = i < n and (trial < 3 or track == "indirect")
                            out.append(
                                row(
                                    attack_id=f"{track}-L{level}-{i:03d}",
                                    level=level,
                                    track=track,
                                    model=model,
                                    architecture=arch,
                                    trial=trial,
                                    **(PAID if fails else {}),
                                    **MORE.get(track, {}),
                                    **({"pair": f"p{i}"} if track == "indirect" else {}),
                                )
                            )
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("run") / "run.parquet"
    write_results(_run(), path, {"models": ["m1", "m2"], "trials": 3})
    return path


def test_every_track_level_and_architecture_with_failures_is_reached_and_the_rest_counted(
    run: Path, tmp_path: Path
) -> None:
    table = load([run]).table
    page_path = tmp_path / "r.html"
    write_html(table, [{"models": ["m1", "m2"]}], page_path)
    page = parse(page_path.read_text(encoding="utf-8"))
    shown = listed(page)
    # The Parquet rows that failed, per track: 3 levels x 2 models x 2 architectures.
    bad = table.filter(pc.or_(table["unpermitted"], pc.equal(table["status"], "error")))
    per_track = Counter(bad["track"].to_pylist())
    assert per_track == {"A": 2880, "B": 2880, "adaptive": 48, "indirect": 108}
    # Every (track, level, architecture) with failures has rows on the page.
    cells = {(s.cells[2], s.cells[1], s.cells[3]) for s in shown}
    assert cells == {
        (t, str(level), a)
        for t in TRACKS
        for level in (2, 3, 4)
        for a in ("model alone", "guarded")
    }
    # The track menu reaches every track.
    [menu] = [s for s in page.all("select") if s.attrs.get("id") == "f-track"]
    assert [words(o.text).split(" ")[0] for o in menu.all("option")] == ["all", *TRACKS]
    # A row per attack, its failing trials within it: k of n.
    assert {s.cells[4] for s in shown if s.cells[2] == "indirect"} == {"3 of 3"}
    assert {s.cells[4] for s in shown if s.cells[2] != "indirect"} == {"2 of 3"}
    embedded = Counter(s.cells[2] for s in shown for _ in s.node.all("details", "t"))
    # The budget: TOTAL evaluations embedded. First the attacks: 50 a cell of A and B (the
    # cap), every attack of adaptive and indirect, 1,260 rows; then a second trial each
    # for 740 of them, round-robin in the same order, the small tracks' first.
    rows_of = Counter(s.cells[2] for s in shown)
    assert rows_of == {"A": 600, "B": 600, "adaptive": 24, "indirect": 36}
    assert embedded == {"A": 940, "B": 940, "adaptive": 48, "indirect": 72}
    assert sum(embedded.values()) == TOTAL
    # The cells with more: per track, shown and hidden add up to the Parquet's rows.
    [rest] = list(page.all("details", "rest"))
    body = [[words(td.text) for td in tr.all("td")] for tr in rest.all("tr")][1:]
    assert Counter(r[0] for r in body) == {"A": 12, "B": 12, "indirect": 12}
    hidden: Counter[str] = Counter()
    for track, _level, _model, arch, event, *counts, ids in body:
        attacks_shown, attacks, trials_shown, trials = (int(n) for n in counts)
        assert event == ("violation" if arch == "guarded" else "unpermitted")
        if track == "indirect":  # every attack shown, two of its three trials
            assert (attacks_shown, attacks, trials_shown, trials, ids) == (3, 3, 6, 9, "")
        else:  # the ids of ten attacks left out, then how many more
            assert (attacks_shown, attacks, trials) == (50, 120, 240)
            assert ids == " ".join(f"{track}-L{_level}-{i:03d}" for i in range(50, 60)) + (
                " and 60 more"
            )
        hidden[track] += trials - trials_shown
    for track in TRACKS:
        assert embedded[track] + hidden[track] == per_track[track]
    summary = words(rest.one("summary").text)
    assert summary == (
        "36 cell(s) with more failures than shown: 3,916 failing evaluation(s) not embedded"
    )


def test_the_share_reaches_every_track_before_any_gets_a_second_row(run: Path) -> None:
    """Issue 40: 200 rows, all track A. Four rows: one of each track."""
    table = load([run]).table
    few = failures(table, total=4)
    assert sorted(f.values["track"] for f in few.shown) == sorted(TRACKS)
    assert [len(f.trials) for f in few.shown] == [1, 1, 1, 1]
    # A row each for 48 cells (4 tracks x 3 levels x 2 models x 2 architectures).
    one = failures(table, total=48)
    cells = Counter(
        (f.values["track"], f.values["level"], f.values["model"], f.values["architecture"])
        for f in one.shown
    )
    assert len(cells) == 48 and set(cells.values()) == {1}


def test_an_attack_is_one_row_that_opens_to_each_of_its_trials(tmp_path: Path) -> None:
    data = [row(attack_id="x", trial=t, **(PAID if t != 2 else {})) for t in (1, 2, 3)]
    data += [row(attack_id="y", architecture="guarded", **PAID)]
    write_html(data, [{"models": ["m"]}], tmp_path / "r.html")
    page = parse((tmp_path / "r.html").read_text(encoding="utf-8"))
    y, x = listed(page)
    # A lone failing trial of a one-trial attack: inline, as before.
    assert (y.ident, y.cells[4], list(y.node.all("details", "t"))) == ("y[m-A-guarded-t1]", "1", [])
    # Two failing trials of three: one row, `--show` of the attack, a <details> a trial.
    assert (x.ident, x.cells[4]) == ("x[m-A-model]", "2 of 3")
    assert "vault-report RESULTS --show 'x[m-A-model]'" in x.transcript
    trials = list(x.node.all("details", "t"))
    assert [words(t.one("summary").text) for t in trials] == [
        "x m track A model alone trial 1 (level 2): completed; unpermitted, violation",
        "x m track A model alone trial 3 (level 2): completed; unpermitted, violation",
    ]
    assert ["vault-report RESULTS --show 'x[m-A-model-t3]'" in words(t.text) for t in trials] == [
        False,
        True,
    ]
    # Past the budget, the trials left out are counted on their row.
    cut = failures(to_table(data), total=3)
    assert [(f.ident, len(f.trials), f.failed) for f in cut.shown] == [
        ("y[m-A-guarded-t1]", 1, 1),
        ("x[m-A-model]", 2, 2),
    ]
    cut = failures(to_table(data), total=2)
    assert [(len(f.trials), f.failed) for f in cut.shown] == [(1, 1), (1, 2)]
    assert cut.hidden == 1
    assert [(r.cell, r.attacks, r.evaluations) for r in cut.rest] == [
        (("A", "2", "m", "model alone", "unpermitted"), (1, 1), (1, 2))
    ]


def test_the_page_is_a_function_of_the_set_of_rows_never_their_order(tmp_path: Path) -> None:
    data = [r for r in _run() if r["level"] != 3 and r["model"] == "m1"]
    transcript = json.dumps([{"role": "user", "text": "pay"}])
    data = [r | {"transcript": transcript} if failing(r) else r for r in data]
    table = to_table(data)
    order = np.random.default_rng(40).permutation(table.num_rows)
    pages = []
    for i, rows in enumerate((table, table.take(order))):
        write_html(rows, [{"models": ["m1"]}], tmp_path / f"{i}.html")
        pages.append((tmp_path / f"{i}.html").read_bytes())
    assert pages[0] == pages[1]
    assert pages[0].count(b'<details class="f ') == 8 * 50 + 4 * 2 + 4 * 3
