"""The judge audit in vault-report: kappa, recall and precision against hand-computed
tables, the judges tables, the summary line, the HTML figure and --judged-only."""

from __future__ import annotations

import json
import random
from fractions import Fraction
from itertools import product
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from pytest_vault.report.__main__ import main
from pytest_vault.report.html import render
from pytest_vault.report.judges import kappa
from pytest_vault.report.results import ResultsError, to_table, write_results
from pytest_vault.report.summary import render as summary
from pytest_vault.report.tables import Analysis, Bootstrap

from ..conftest import RunPytest
from .rows import row as base_row

ALWAYS, FINAL, LENIENT = (
    "scripted:judge-always",
    "scripted:judge-final-text",
    "scripted:judge-lenient",
)
VERDICT = {"y": "yes", "n": "no", "u": "unreadable"}
CELLS = ("both_yes", "a_only", "b_only", "both_no")


# -- Cohen's kappa -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        ((20, 5, 10, 15), 0.4),  # p_o 35/50, p_e (25*30 + 25*20)/2500 = 1/2
        ((3, 0, 0, 2), 1.0),  # perfect agreement, both judges varying
        ((0, 2, 2, 0), -1.0),  # perfect disagreement, balanced
        ((0, 3, 1, 0), -0.6),  # p_o 0, p_e (3*1 + 1*3)/16 = 3/8: -3/8 / 5/8
        ((3, 1, 0, 0), 0.0),  # one judge constant (yes): p_o = p_e = 3/4
        ((0, 0, 2, 2), 0.0),  # one judge constant (no): p_o = p_e = 1/2
        ((0, 5, 0, 0), 0.0),  # both constant and different: p_o = 0, p_e = 0
        ((0, 0, 5, 0), 0.0),
        ((5, 0, 0, 0), None),  # both constant and equal: p_e = 1, undefined
        ((0, 0, 0, 5), None),
        ((0, 0, 0, 0), None),  # nothing judged by both
    ],
)
def test_kappa_known_answers(cells: tuple[int, int, int, int], expected: float | None) -> None:
    assert kappa(*cells) == expected


def test_kappa_against_an_independent_formula() -> None:
    # kappa = 2(ad - bc) / ((a+b)(b+d) + (a+c)(c+d)): no p_o, no p_e; its denominator
    # is zero exactly when chance agreement is 1.
    for a, b, c, d in product(range(6), repeat=4):
        den = (a + b) * (b + d) + (a + c) * (c + d)
        got = kappa(a, b, c, d)
        if den == 0:
            assert got is None, (a, b, c, d)
        else:
            assert got == float(Fraction(2 * (a * d - b * c), den)), (a, b, c, d)


# -- the judges tables ---------------------------------------------------------------------------


def row(**over: Any) -> dict[str, Any]:
    return base_row(
        **({"category": "c", "input_tokens": 100, "output_tokens": 20, "latency_s": 0.0} | over)
    )


def verdicts(cost: float | None, **answers: str | None) -> str | None:
    specs = {"always": ALWAYS, "final": FINAL, "lenient": LENIENT}
    given = {
        specs[k]: {
            "verdict": VERDICT[v],
            "rationale": "because",
            "input_tokens": 10,
            "output_tokens": 2,
            "cost_usd": cost,
        }
        for k, v in answers.items()
        if v is not None
    }
    return json.dumps(given, sort_keys=True) if given else None


# (level, architecture, kind, unpermitted, lenient, final-text, always); None: no answer.
SPEC: list[tuple[int, str, str, bool, str | None, str | None, str | None]] = [
    (2, "model", "attack", True, "y", "y", "y"),  # 1
    (2, "model", "attack", True, "n", "y", "y"),  # 2
    (2, "guarded", "attack", False, "n", "y", "y"),  # 3
    (2, "guarded", "attack", False, "n", "n", "y"),  # 4
    (3, "model", "attack", True, "y", "y", "y"),  # 5
    (3, "model", "attack", False, "y", "y", "y"),  # 6
    (3, "guarded", "attack", False, "u", "y", "y"),  # 7
    (2, "model", "benign", False, "n", "n", "y"),  # 8
    (3, "guarded", "attack", False, None, "n", None),  # 9
    (2, "model", "attack", False, None, None, None),  # 10: no judge
]


def rows(cost: float | None = None, agent_cost: float | None = None) -> list[dict[str, Any]]:
    out = [
        row(
            attack_id=f"a{i}",
            session=f"s{i % 4}",
            level=level,
            architecture=arch,
            kind=kind,
            unpermitted=unpermitted,
            paid=unpermitted,
            requested=unpermitted,
            completed=kind == "benign",
            denied_calls=0 if arch == "guarded" else None,
            allowed_calls=0 if arch == "guarded" else None,
            cost_usd=agent_cost,
            judge_verdicts=verdicts(cost, lenient=le, final=fi, always=al),
        )
        for i, (level, arch, kind, unpermitted, le, fi, al) in enumerate(SPEC, 1)
    ]
    # An evaluation that failed: no verdict, outside every rate; its tokens were spent.
    out.append(
        row(
            attack_id="a11",
            session="s3",
            status="error",
            error="x",
            unpermitted=True,
            cost_usd=agent_cost,
        )
    )
    return out


def tables(data: list[dict[str, Any]]) -> dict[str, Any]:
    return Analysis(to_table(data), [], Bootstrap(50, 1)).tables()


def test_per_judge_recall_precision_and_counts() -> None:
    judges = tables(rows())["judges"]
    counts = [
        {k: r[k] for k in ("judge", "evaluations", "unreadable", "judged", "unpermitted")}
        | {k: r[k] for k in ("said_yes", "true_positive", "false_positive")}
        | {k: r[k] for k in ("false_negative", "true_negative", "recall", "precision")}
        for r in judges[:3]
    ]
    assert counts == [
        # Rows 1-8: says yes on all; the unpermitted rows are 1, 2 and 5.
        {
            "judge": ALWAYS,
            "evaluations": 8,
            "unreadable": 0,
            "judged": 8,
            "unpermitted": 3,
            "said_yes": 8,
            "true_positive": 3,
            "false_positive": 5,
            "false_negative": 0,
            "true_negative": 0,
            "recall": 1.0,
            "precision": 3 / 8,
        },
        # Rows 1-9: yes on 1, 2, 3, 5, 6, 7; no on 4, 8, 9.
        {
            "judge": FINAL,
            "evaluations": 9,
            "unreadable": 0,
            "judged": 9,
            "unpermitted": 3,
            "said_yes": 6,
            "true_positive": 3,
            "false_positive": 3,
            "false_negative": 0,
            "true_negative": 3,
            "recall": 1.0,
            "precision": 0.5,
        },
        # Rows 1-8, row 7 unreadable (neither yes nor no): yes on 1, 5, 6; no on 2, 3, 4, 8.
        {
            "judge": LENIENT,
            "evaluations": 8,
            "unreadable": 1,
            "judged": 7,
            "unpermitted": 3,
            "said_yes": 3,
            "true_positive": 2,
            "false_positive": 1,
            "false_negative": 1,
            "true_negative": 3,
            "recall": 2 / 3,
            "precision": 2 / 3,
        },
    ]


def test_token_and_spend_shares() -> None:
    # Agents: 11 rows x 120 tokens = 1,320. Judges: 25 answers x 12 tokens = 300.
    judges = tables(rows())["judges"]
    assert [(r["judge"], r["input_tokens"], r["output_tokens"]) for r in judges] == [
        (ALWAYS, 80, 16),
        (FINAL, 90, 18),
        (LENIENT, 80, 16),
        ("all", 250, 50),
    ]
    assert [r["token_share"] for r in judges] == [96 / 1620, 108 / 1620, 96 / 1620, 300 / 1620]
    # No price anywhere: spend and its share are unknown, never 0.
    assert judges[-1] == {
        "judge": "all",
        "input_tokens": 250,
        "output_tokens": 50,
        "agent_tokens": 1320,
        "token_share": 300 / 1620,
        "cost_usd": None,
        "agent_cost_usd": None,
        "spend_share": None,
        "unpriced": 36,
    }
    assert {r["spend_share"] for r in judges} == {None}
    # Everything priced: judges 25 x 0.002 = 0.05 of 0.05 + 11 x 0.01.
    priced = tables(rows(cost=0.002, agent_cost=0.01))["judges"]
    assert priced[-1]["unpriced"] == 0
    assert priced[-1]["cost_usd"] == pytest.approx(0.05, rel=1e-12)
    assert priced[-1]["agent_cost_usd"] == pytest.approx(0.11, rel=1e-12)
    assert priced[-1]["spend_share"] == pytest.approx(0.05 / 0.16, rel=1e-12)
    assert priced[1]["spend_share"] == pytest.approx(0.018 / 0.16, rel=1e-12)
    # One agent row without a price: the share of spend is unknown again.
    some = rows(cost=0.002, agent_cost=0.01)
    some[0]["cost_usd"] = None
    assert tables(some)["judges"][-1]["spend_share"] is None
    assert tables(some)["judges"][-1]["unpriced"] == 1


def pairs(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        tuple(r[k] for k in ("judge_a", "judge_b", "levels", "evaluations", *CELLS, "kappa"))
        for r in result["judge_agreement"]
    ]


def test_kappa_per_pair_pooled_and_per_level() -> None:
    assert pairs(tables(rows())) == [
        # always is constant (yes): kappa 0 wherever the other judge varies; at Level 3
        # final-text says yes on 5, 6, 7 too: both constant and equal, undefined.
        (ALWAYS, FINAL, "all", 8, 6, 2, 0, 0, 0.0),
        (ALWAYS, FINAL, "2", 5, 3, 2, 0, 0, 0.0),
        (ALWAYS, FINAL, "3", 3, 3, 0, 0, 0, None),
        # Row 7 is out (lenient unreadable): 1-6 and 8.
        (ALWAYS, LENIENT, "all", 7, 3, 4, 0, 0, 0.0),
        (ALWAYS, LENIENT, "2", 5, 1, 4, 0, 0, 0.0),
        (ALWAYS, LENIENT, "3", 2, 2, 0, 0, 0, None),
        # Pooled: p_o 5/7, p_e (5*3 + 2*4)/49 = 23/49, kappa (12/49)/(26/49) = 6/13.
        # Level 2: p_o 3/5, p_e (3*1 + 2*4)/25 = 11/25, kappa (4/25)/(14/25) = 2/7.
        (FINAL, LENIENT, "all", 7, 3, 2, 0, 2, 6 / 13),
        (FINAL, LENIENT, "2", 5, 1, 2, 0, 2, 2 / 7),
        (FINAL, LENIENT, "3", 2, 2, 0, 0, 0, None),
    ]
    pooled = tables(rows())["judge_agreement"][6]
    assert (pooled["observed"], pooled["chance"]) == (5 / 7, 23 / 49)


def test_tables_do_not_depend_on_the_order_of_the_rows() -> None:
    data = rows(cost=0.003, agent_cost=0.007)
    first = json.dumps(tables(data))
    for seed in range(5):
        random.Random(seed).shuffle(data)
        assert json.dumps(tables(data)) == first


def test_json_keeps_kappa_to_more_than_four_decimals(tmp_path: Path, capsys: Any) -> None:
    write_results(rows(), tmp_path / "run.parquet", {})
    assert (
        main([str(tmp_path / "run.parquet"), "--format", "json", "--resamples", "20"]) == 1
    )  # a11 errored: INCOMPLETE (issue 39)
    out = json.loads(capsys.readouterr().out)
    pooled = out["judge_agreement"][6]
    assert pooled["kappa"] == 6 / 13  # 0.46153846153846156, not 0.4615
    assert out["judge_agreement"][2]["kappa"] is None  # JSON null, never 0 or 1
    assert round(pooled["kappa"], 4) != pooled["kappa"]


def test_shards_merge_to_the_same_judges_tables(tmp_path: Path, capsys: Any) -> None:
    data = rows(cost=0.001, agent_cost=0.01)
    write_results(data, tmp_path / "all.parquet", {})
    write_results(data[::2], tmp_path / "1.parquet", {})
    write_results(data[1::2], tmp_path / "2.parquet", {})
    main([str(tmp_path / "all.parquet"), "--format", "json"])
    whole = capsys.readouterr().out
    main([str(tmp_path / "2.parquet"), str(tmp_path / "1.parquet"), "--format", "json"])
    assert capsys.readouterr().out == whole


def test_text_says_undefined(tmp_path: Path, capsys: Any) -> None:
    write_results(rows(), tmp_path / "run.parquet", {})
    # --wide: the table whole, one line a row (else cut to fit 100 columns).
    assert (
        main([str(tmp_path / "run.parquet"), "--resamples", "20", "--wide"]) == 1
    )  # a11 errored: INCOMPLETE (issue 39)
    text = capsys.readouterr().out
    assert "Judges (audit only, never the outcome)" in text
    level3 = [
        line.split() for line in text.splitlines() if line.split()[:3] == [ALWAYS, FINAL, "3"]
    ]
    assert level3 == [[ALWAYS, FINAL, "3", "3", "3", "0", "0", "0", "1", "1", "undefined"]]


def test_no_verdicts_no_judges_tables() -> None:
    plain = [r | {"judge_verdicts": None} for r in rows()]
    result = tables(plain)
    assert "judges" not in result and "judge_agreement" not in result
    # The same rows from a file written before the column: the same tables.
    old = to_table(plain).drop_columns(["judge_verdicts"])
    assert Analysis(old, [], Bootstrap(50, 1)).tables() == result
    assert summary(plain) == summary([{k: v for k, v in r.items()} for r in plain])
    assert not any("judges" in line for line in summary(plain))


# -- the summary line ------------------------------------------------------------------------------


def test_summary_line() -> None:
    lines = summary(rows())
    assert lines[-2:] == [
        "",
        "judges (audit only, never the outcome): "
        f"{ALWAYS} recall 100.0% precision 37.5%; "
        f"{FINAL} recall 100.0% precision 50.0%; "
        f"{LENIENT} recall 66.7% precision 66.7% (1 unreadable); "
        f"kappa {ALWAYS} / {FINAL} 0.0000; "
        f"kappa {ALWAYS} / {LENIENT} 0.0000; "
        f"kappa {FINAL} / {LENIENT} 0.4615; "
        "judges' share of tokens 18.5%",
    ]
    # Without judges the summary ends as before: no judges line.
    assert not any(line.startswith("judges") for line in summary(rows()[-2:]))


def test_summary_shows_hostile_judge_names_escaped() -> None:
    data = rows()[:1]
    data[0]["judge_verdicts"] = data[0]["judge_verdicts"].replace(ALWAYS, "evil\\u001b[2J")
    line = summary(data)[-1]
    assert "\x1b" not in line and "evil\\x1b[2J recall 100.0% precision 100.0%" in line


def test_summary_undefined_and_no_positives() -> None:
    # Two judges always saying no on rows with no unpermitted transfer.
    data = [
        row(attack_id=f"a{i}", judge_verdicts=verdicts(None, lenient="n", final="n"))
        for i in range(3)
    ]
    assert summary(data)[-1] == (
        "judges (audit only, never the outcome): "
        f"{FINAL} recall n/a precision n/a; {LENIENT} recall n/a precision n/a; "
        f"kappa {FINAL} / {LENIENT} undefined; judges' share of tokens 16.7%"
    )


# -- the HTML figure -------------------------------------------------------------------------------


def test_html_figure_of_agreement_per_level_is_escaped() -> None:
    hostile = "<script>alert(1)</script>\x1b"
    data = rows()
    for r in data:
        if r["judge_verdicts"]:
            answers = json.loads(r["judge_verdicts"])
            if ALWAYS in answers:
                answers[hostile] = answers.pop(ALWAYS)
            r["judge_verdicts"] = json.dumps(answers)
    analysis = Analysis(to_table(data), [], Bootstrap(20, 1))
    page = render(analysis.tables(), [], {})
    assert "<script" not in page and "\x1b" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b / scripted:judge-final-text" in page
    start = page.index('aria-label="Judge agreement per level')
    figure = page[start : page.index("</svg>", start)]
    # Three pairs; pooled, L2, L3 each; 6/13 drawn, the undefined kappas written.
    assert figure.count(">pooled<") == 3 and figure.count(">L3<") == 3
    assert ">0.46<" in figure and ">0.29<" in figure
    assert figure.count(">undefined<") == 3
    # The table says undefined too.
    assert "<td>undefined</td>" in page


# -- --judged-only ---------------------------------------------------------------------------------


def test_judged_only_restricts_every_table(tmp_path: Path, capsys: Any) -> None:
    plan = {"planned": {"m|model|2|attack|A": 4, "m|guarded|2|attack|A": 2}}
    write_results(rows(), tmp_path / "run.parquet", plan)
    args = [str(tmp_path / "run.parquet"), "--format", "json", "--resamples", "20"]
    assert main(args) == 1  # a11 errored: INCOMPLETE (issue 39)
    full = json.loads(capsys.readouterr().out)
    assert main([*args, "--judged-only"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    # Every judge answered yes or no on rows 1-6 and 8: not 7 (unreadable), 9 (two
    # judges silent), 10 (no judge), 11 (an error).
    assert captured.err == (
        "vault-report: Judged only: 7 of 11 evaluations, those every judge "
        f"({ALWAYS}, {FINAL}, {LENIENT}) answered yes or no; coverage is of these rows, "
        "not the plan\n"
    )
    assert sum(r["rows"] for r in full["coverage"]) == 11
    assert sum(r["rows"] for r in out["coverage"]) == 7
    assert {r["planned"] for r in out["coverage"]} == {None}
    stages = {(r["levels"], r["architecture"], r["model"]): r for r in out["stages"]}
    assert stages["2-4", "model", "all"]["evaluations"] == 4  # rows 1, 2, 5, 6
    assert stages["2-4", "model", "all"]["unpermitted"] == 3
    assert stages["2-4", "model", "all"]["errors"] == 0
    assert stages["2-4", "guarded", "all"]["evaluations"] == 2  # rows 3, 4
    assert out["benign"][0]["model_evaluations"] == 1
    assert [r["evaluations"] for r in out["judges"][:3]] == [7, 7, 7]
    assert [r["unreadable"] for r in out["judges"][:3]] == [0, 0, 0]
    # The pairs, all on the same 7 evaluations.
    assert {r["evaluations"] for r in out["judge_agreement"] if r["levels"] == "all"} == {7}
    # Text says so above its tables.
    assert main([str(tmp_path / "run.parquet"), "--judged-only", "--resamples", "20"]) == 0
    out = capsys.readouterr().out
    # Under the verdict (its sentence, its facts, a blank line): what the rows are.
    assert out.split("\n\n", 1)[1].startswith("Judged only: 7 of 11 evaluations")


def test_judged_only_with_one_judge_drops_rows_it_did_not_answer(
    tmp_path: Path, capsys: Any
) -> None:
    data = [
        row(attack_id="a1", judge_verdicts=verdicts(None, final="y")),
        row(attack_id="a2", judge_verdicts=verdicts(None, final="u")),
        row(attack_id="a3", judge_verdicts=verdicts(None, final="n")),
        row(attack_id="a4"),
    ]
    write_results(data, tmp_path / "run.parquet", {})
    path = str(tmp_path / "run.parquet")
    assert main([path, "--judged-only", "--format", "json", "--resamples", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sum(r["rows"] for r in out["coverage"]) == 2
    assert out["judge_agreement"] == []


def test_judged_only_without_verdicts_is_one_line(tmp_path: Path, capsys: Any) -> None:
    write_results(rows()[-2:], tmp_path / "run.parquet", {})
    assert main([str(tmp_path / "run.parquet"), "--judged-only"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "vault-report: error: --judged-only: no row holds judge verdicts (judge_verdicts): "
        "a run with --vault-judge SPEC writes them\n"
    )
    # A file from before the column: the same line.
    table = pq.read_table(tmp_path / "run.parquet")
    pq.write_table(table.drop_columns(["judge_verdicts"]), tmp_path / "old.parquet")
    assert main([str(tmp_path / "old.parquet"), "--judged-only"]) == 2
    assert capsys.readouterr().err.endswith("a run with --vault-judge SPEC writes them\n")


# -- end to end: the shipped corpus, the scripted judges -------------------------------------------

CASES = Path(__file__).resolve().parents[2] / "cases"


@pytest.mark.slow
def test_shipped_corpus_with_the_scripted_judges(
    pytester: pytest.Pytester, run_pytest: RunPytest, capsys: Any
) -> None:
    judges = [f"--vault-judge={j}" for j in (LENIENT, ALWAYS, FINAL)]
    files = [str(f) for f in sorted(CASES.glob("level-*.jsonl"))]  # the whole corpus
    result = run_pytest(
        *files,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--vault-model=scripted:obedient",
        *judges,
        "--vault-results=run.parquet",
    )
    assert result.ret == 0
    path = pytester.path / "run.parquet"
    data = pq.read_table(path).to_pylist()
    capsys.readouterr()  # the run's own output
    assert main([str(path), "--format", "json", "--resamples", "20"]) == 0
    out = json.loads(capsys.readouterr().out)
    by_judge = {r["judge"]: r for r in out["judges"]}
    done = [r for r in data if r["status"] == "completed"]
    unpermitted = sum(r["unpermitted"] for r in done)
    assert unpermitted > 0 and len(done) == len(data)
    # judge-lenient recovers exactly the deterministic unpermitted transfers.
    lenient = by_judge[LENIENT]
    assert (lenient["true_positive"], lenient["false_positive"]) == (unpermitted, 0)
    assert (lenient["false_negative"], lenient["recall"], lenient["precision"]) == (0, 1.0, 1.0)
    # judge-always: precision is the unpermitted share.
    assert by_judge[ALWAYS]["precision"] == unpermitted / len(done)
    assert by_judge[ALWAYS]["evaluations"] == len(done)
    # The kappas against their own count of the rows, by the other formula.
    answers = [json.loads(r["judge_verdicts"]) for r in done]
    for got in out["judge_agreement"]:
        a, b = got["judge_a"], got["judge_b"]
        cells = {(x, y): 0 for x in ("yes", "no") for y in ("yes", "no")}
        for r, v in zip(done, answers, strict=True):
            if got["levels"] in ("all", str(r["level"])):
                cells[v[a]["verdict"], v[b]["verdict"]] += 1
        yy, yn, ny, nn = (
            cells[k] for k in [("yes", "yes"), ("yes", "no"), ("no", "yes"), ("no", "no")]
        )
        den = (yy + yn) * (yn + nn) + (yy + ny) * (ny + nn)
        assert got["kappa"] == (None if den == 0 else 2 * (yy * nn - yn * ny) / den), got
    assert {r["levels"] for r in out["judge_agreement"]} == {"all", "1", "2", "3", "4", "5"}


def test_a_bad_verdict_names_its_row_in_the_table_given() -> None:
    data = rows()
    data[4]["judge_verdicts"] = '{"scripted:judge-always": {"verdict": "maybe"}}'
    # Adaptive rows first: the row named is still the bad one's own (0-based 5).
    adaptive = row(attack_id="x", track="adaptive", rounds=1, attacker="scripted:escalate")
    with pytest.raises(ResultsError) as caught:
        Analysis(to_table([adaptive, *data]), [], Bootstrap(20, 1)).tables()
    assert caught.value.row == 5
    assert str(caught.value).startswith("judge_verdicts")
    assert summary(data)[-2:] == ["", f"judges: not reported: {caught.value}"]
