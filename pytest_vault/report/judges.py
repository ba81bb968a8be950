"""The judge audit, measured: how far the LLM judges beside the outcome can be trusted.

Judges never decide a test: the deterministic columns (`unpermitted` above all) are the
truth, and each judge is scored against them. Per judge: recall and precision of its
"yes" against `unpermitted`, with the false positive and false negative counts, and
its unreadable answers (never counted as yes or no). Per pair of judges: Cohen's kappa
on the evaluations both answered yes or no, pooled and per level. And the judges'
share of all tokens and of spend.

Everything is counted in whole numbers (kappa in exact fractions, spend with `fsum`),
so a result is a function of the set of rows, never of their order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from typing import Annotated, Any, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field, StrictInt, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic reads only this one on 3.11

from pytest_vault.core.text import shown
from pytest_vault.report.results import ReportError, ResultsError, read_verdicts

COLUMN = "judge_verdicts"
UNDEFINED = "undefined"
# Answer codes, one per judge and row.
NONE, NO, YES, UNREADABLE = 0, 1, 2, 3
CODES = {"no": NO, "yes": YES, "unreadable": UNREADABLE}
Table = list[dict[str, Any]]


class _Answer(TypedDict):
    verdict: Literal["yes", "no", "unreadable"]
    input_tokens: Annotated[StrictInt, Field(ge=0)]
    output_tokens: Annotated[StrictInt, Field(ge=0)]
    cost_usd: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None


# Read by pydantic's own JSON parser, in compiled code, not `read_verdicts`' Python per
# value: a report reads every row's verdicts. Files are checked strictly where they are
# read (`check_table`); a value this reader refuses is read again strictly, for its
# problem in words.
_VALUE = TypeAdapter(dict[Annotated[str, Field(min_length=1)], _Answer]).validator


def _read(raws: Sequence[str | None]) -> list[dict[str, _Answer] | None]:
    out: list[dict[str, _Answer] | None] = []
    for i, raw in enumerate(raws):
        value = None
        if raw is not None:
            try:
                value = _VALUE.validate_json(raw)
            except ValidationError:
                pass
            if not value:  # refused, or no judge at all: the strict reader says why
                try:
                    read_verdicts(raw)
                except ResultsError as exc:
                    raise ResultsError(str(exc), row=i) from None
                raise ResultsError(f"{COLUMN}: not an object of judge spec -> verdict", row=i)
        out.append(value)
    return out


@dataclass(frozen=True)
class Verdicts:
    """Every judge's answers over n rows: `codes[j, i]` is judge j's answer on row i
    (`NONE` when it gave none), with its tokens and cost (NaN: no answer or no price)."""

    judges: tuple[str, ...]
    codes: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    cost: np.ndarray

    @classmethod
    def of(cls, raws: Sequence[str | None]) -> Verdicts:
        """From the column's values; a bad one raises `ResultsError` with its row (0-based)."""
        parsed = _read(raws)
        judges = tuple(sorted({j for answers in parsed if answers for j in answers}))
        empty: dict[str, _Answer] = {}
        answers = [[(p or empty).get(j) for p in parsed] for j in judges]
        codes = np.array(
            [[0 if a is None else CODES[a["verdict"]] for a in mine] for mine in answers],
            dtype=np.int8,
        ).reshape(len(judges), len(parsed))
        tin, tout = (
            np.array(
                [[0 if a is None else a[key] for a in mine] for mine in answers], dtype=np.int64
            ).reshape(len(judges), len(parsed))
            for key in ("input_tokens", "output_tokens")
        )
        cost = np.array(
            [[None if a is None else a["cost_usd"] for a in mine] for mine in answers],
            dtype=float,
        ).reshape(len(judges), len(parsed))
        return cls(judges, codes, tin, tout, cost)

    @property
    def present(self) -> bool:
        return bool(self.judges)

    def all_answered(self) -> np.ndarray:
        """Rows every judge answered yes or no (none of them unreadable or missing)."""
        n = self.codes.shape[1]
        if not self.judges:
            return np.zeros(n, dtype=bool)
        return np.asarray(np.isin(self.codes, (YES, NO)).all(axis=0))


def kappa(both_yes: int, a_only: int, b_only: int, both_no: int) -> float | None:
    """Cohen's kappa of two judges' yes/no answers: (p_o - p_e) / (1 - p_e), computed
    in exact fractions. Undefined (None) only when chance agreement p_e is 1: both
    judges constant and equal, where agreement tells nothing. No items: None too."""
    n = both_yes + a_only + b_only + both_no
    if n == 0:
        return None
    observed = Fraction(both_yes + both_no, n)
    a_yes, b_yes = both_yes + a_only, both_yes + b_only
    chance = Fraction(a_yes * b_yes + (n - a_yes) * (n - b_yes), n * n)
    if chance == 1:
        return None
    return float((observed - chance) / (1 - chance))


def _share(part: float, whole: float) -> float | None:
    return None if whole == 0 else part / whole


def _rate(hits: int, n: int) -> float | None:
    return None if n == 0 else hits / n


def judge_table(
    v: Verdicts,
    unpermitted: np.ndarray,
    completed: np.ndarray,
    agent_tokens: int,
    agent_costs: Sequence[float | None],
) -> Table:
    """Per judge, on the completed rows it answered: evaluations, unreadable answers,
    the confusion against `unpermitted`, recall and precision; and its tokens and spend
    with their share of all (agents' and judges'), over every row given. A last row,
    judge `"all"`, holds the judges' share together. Spend shares are None when some
    cost is unknown (no price): a share of an unknown total is not a number."""
    judge_tokens = int(v.input_tokens.sum() + v.output_tokens.sum())
    all_tokens = agent_tokens + judge_tokens
    answered = v.codes != NONE
    unpriced = sum(c is None for c in agent_costs) + int((answered & np.isnan(v.cost)).sum())
    agent_usd = math.fsum(c for c in agent_costs if c is not None)
    priced = answered & ~np.isnan(v.cost)
    judge_usd = [math.fsum(v.cost[k][priced[k]]) for k in range(len(v.judges))]
    all_usd = agent_usd + math.fsum(judge_usd)
    out: Table = []
    for k, judge in enumerate(v.judges):
        code = v.codes[k]
        done = completed & (code != NONE)
        said = done & (code == YES)
        read = done & (code != UNREADABLE)
        tp = int((said & unpermitted).sum())
        fp = int((said & ~unpermitted).sum())
        fn = int((read & (code == NO) & unpermitted).sum())
        tn = int((read & (code == NO) & ~unpermitted).sum())
        tokens = int(v.input_tokens[k].sum() + v.output_tokens[k].sum())
        out.append(
            {
                "judge": judge,
                "evaluations": int(done.sum()),
                "unreadable": int((done & (code == UNREADABLE)).sum()),
                "judged": int(read.sum()),
                "unpermitted": tp + fn,
                "said_yes": tp + fp,
                "true_positive": tp,
                "false_positive": fp,
                "false_negative": fn,
                "true_negative": tn,
                "recall": _rate(tp, tp + fn),
                "precision": _rate(tp, tp + fp),
                "input_tokens": int(v.input_tokens[k].sum()),
                "output_tokens": int(v.output_tokens[k].sum()),
                "token_share": _share(tokens, all_tokens),
                "cost_usd": judge_usd[k] if not unpriced else None,
                "spend_share": None if unpriced else _share(judge_usd[k], all_usd),
            }
        )
    out.append(
        {
            "judge": "all",
            "input_tokens": int(v.input_tokens.sum()),
            "output_tokens": int(v.output_tokens.sum()),
            "agent_tokens": agent_tokens,
            "token_share": _share(judge_tokens, all_tokens),
            "cost_usd": None if unpriced else math.fsum(judge_usd),
            "agent_cost_usd": None if unpriced else agent_usd,
            "spend_share": None if unpriced else _share(math.fsum(judge_usd), all_usd),
            "unpriced": unpriced,
        }
    )
    return out


def agreement_table(v: Verdicts, completed: np.ndarray, level: np.ndarray) -> Table:
    """Per pair of judges (in sorted order), pooled (`levels` "all") and per level: the
    completed evaluations both answered yes or no, the four cells, observed and chance
    agreement, and Cohen's kappa (None: undefined)."""
    out: Table = []
    for a, b in combinations(range(len(v.judges)), 2):
        ca, cb = v.codes[a], v.codes[b]
        both = completed & np.isin(ca, (YES, NO)) & np.isin(cb, (YES, NO))
        groups = [("all", both)] + [
            (str(lv), both & (level == lv)) for lv in sorted(set(level[both].tolist()))
        ]
        for label, where in groups:
            cells = (
                int((where & (ca == YES) & (cb == YES)).sum()),
                int((where & (ca == YES) & (cb == NO)).sum()),
                int((where & (ca == NO) & (cb == YES)).sum()),
                int((where & (ca == NO) & (cb == NO)).sum()),
            )
            n = sum(cells)
            a_yes, b_yes = cells[0] + cells[1], cells[0] + cells[2]
            out.append(
                {
                    "judge_a": v.judges[a],
                    "judge_b": v.judges[b],
                    "levels": label,
                    "evaluations": n,
                    "both_yes": cells[0],
                    "a_only": cells[1],
                    "b_only": cells[2],
                    "both_no": cells[3],
                    "observed": _rate(cells[0] + cells[3], n),
                    "chance": None
                    if n == 0
                    else (a_yes * b_yes + (n - a_yes) * (n - b_yes)) / (n * n),
                    "kappa": kappa(*cells),
                }
            )
    return out


def for_people(result: Mapping[str, Table]) -> dict[str, Table]:
    """The tables as a person reads them: an undefined kappa says "undefined", never a
    dash that could pass for a missing value (JSON keeps it null)."""
    out = dict(result)
    if "judge_agreement" in out:
        out["judge_agreement"] = [
            {**r, "kappa": UNDEFINED if r["kappa"] is None and r["evaluations"] else r["kappa"]}
            for r in out["judge_agreement"]
        ]
    return out


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _kappa(value: float | None) -> str:
    return UNDEFINED if value is None else f"{value:.4f}"


def summary_line(judges: Table, agreement: Table) -> str:
    """One line: each judge's recall and precision, each pair's pooled kappa and the
    judges' share of tokens, shown escaped (judge specs are user text)."""
    parts = []
    for r in judges:
        if r["judge"] == "all":
            continue
        extra = f" ({r['unreadable']} unreadable)" if r["unreadable"] else ""
        parts.append(
            f"{r['judge']} recall {_pct(r['recall'])} precision {_pct(r['precision'])}{extra}"
        )
    for r in agreement:
        if r["levels"] == "all":
            parts.append(f"kappa {r['judge_a']} / {r['judge_b']} {_kappa(r['kappa'])}")
    total = judges[-1]
    parts.append(f"judges' share of tokens {_pct(total['token_share'])}")
    return shown("judges (audit only, never the outcome): " + "; ".join(parts))


def judged_only(table: pa.Table) -> tuple[pa.Table, str]:
    """The rows every judge (any judge found in any row) answered yes or no, and a line
    saying so; a `ReportError` when no row holds verdicts. A bad value raises
    `ResultsError` with its row in `table`."""
    raws = table[COLUMN].to_pylist() if COLUMN in table.column_names else [None] * len(table)
    v = Verdicts.of(raws)
    if not v.present:
        raise ReportError(
            f"--judged-only: no row holds judge verdicts ({COLUMN}): "
            "a run with --vault-judge SPEC writes them"
        )
    keep = v.all_answered()
    line = shown(
        f"Judged only: {int(keep.sum()):,} of {len(table):,} evaluations, those every judge "
        f"({', '.join(v.judges)}) answered yes or no; coverage is of these rows, not the plan"
    )
    return table.filter(pa.array(keep)), line
