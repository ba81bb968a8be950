"""One evaluation of the run, as the runner does it: `job`'s subject evaluated at its
level, judged, billed, and made its row, whole.

Imported once, when the runner starts: from then on the harness is the run's, and no
evaluation imports anything.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pytest_vault.harness.agent import Evaluation, Job, evaluate
from pytest_vault.harness.events import row
from pytest_vault.harness.judges import Verdict, judge_all, transcript_of
from pytest_vault.harness.yours import screen_maker
from pytest_vault.models.bill import billing
from pytest_vault.plugin.making import Maker


async def run(maker: Maker, job: Job) -> dict[str, Any]:
    """The row of one evaluation. Every spec takes the same path: what the model hook
    made of it, as a subject (`harness.agent.evaluate`)."""
    opts = maker.options
    level = maker.levels[job.case.level]
    screen = screen_maker(maker.guard(), level)
    # The bill is the answers of what the hook made (our provider models note theirs).
    with billing(maker.made(job.spec)) as bill:
        ev = await evaluate(job, level, maker.subject(job.spec), maker.driver(job), screen=screen)
    verdicts = await _judged(maker, ev)
    spend = maker.spend
    if bill.ours:
        spent = bill.columns(spend, job.spec)
    else:
        spent = {"cost_usd": spend.cost(job.spec, ev.usage.input_tokens, ev.usage.output_tokens)}
    return row(ev, maker.guard_spec, verdicts, opts.transcripts, source=job.source, spent=spent)


async def _judged(maker: Maker, ev: Evaluation) -> dict[str, Verdict] | None:
    """Each judge's verdict on a completed evaluation, priced under the judge's spec
    (None: no judge, or the evaluation did not complete)."""
    judges = maker.options.judges
    if not judges or ev.status != "completed":
        return None
    verdicts = await judge_all([maker.judge(spec) for spec in judges], transcript_of(ev))
    spend = maker.spend
    return {
        spec: replace(v, cost_usd=spend.cost(spec, v.input_tokens, v.output_tokens))
        for spec, v in verdicts.items()
    }
