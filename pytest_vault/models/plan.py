"""What a run would cost, before it runs (`--vault-plan`).

Per model: the evaluations, a bound on model requests that a run never exceeds,
estimated tokens, how many first requests the cache already answers, and the cost range
from the price table. Nothing is asked: each evaluation's first request is built and
keyed exactly as the provider model builds and keys it, and looked up with the cache's
own reader (a corrupt entry is not an answer, so it does not count as cached).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pytest_vault.core.text import shown
from pytest_vault.harness.agent import Message, ModelRequest, tools_for, user_messages
from pytest_vault.models.ratelimit import usd

if TYPE_CHECKING:
    from pytest_vault.corpus.model import Case
    from pytest_vault.harness.agent import Copy, Track
    from pytest_vault.harness.levels import Level
    from pytest_vault.models.cache import ResponseCache
    from pytest_vault.models.providers import ProviderModel
    from pytest_vault.models.ratelimit import Price
    from pytest_vault.models.specs import Spec

CHARS_PER_TOKEN = 4
METHOD = (
    "requests <=: per evaluation, user messages x --vault-max-steps (one request per model "
    "step; not counted: retries of a request, at most --vault-tries tries each, and the "
    "one resend per client after a provider refuses a decode setting)",
    "input tokens est: characters/4 of the JSON body of each user message's first request "
    "(system prompt + tools + the user messages so far, as the provider is sent them); model "
    "answers and tool results are not counted",
    "output tokens <=: requests x the level's max_tokens",
    "judges: one request per completed evaluation at most, output at judges.toml's "
    "max_tokens; their input (the transcript) is not known before the run",
    "adaptive track: up to --vault-rounds user messages, each round sized as the first; a "
    "real-model attacker's own requests are one per round after the first",
    "first requests cached: distinct first requests of the evaluations that the response "
    "cache answers (valid entries only)",
    "cost, of the answers the run would be billed for (as its last line counts them): min = "
    "the uncached distinct first requests' input tokens est; max = every request at the "
    "bound, at its user message's input estimate and max_tokens out, but a first request "
    "several evaluations send billed once and one the cache answers not at all "
    "(--vault-prices)",
)


@dataclass(frozen=True)
class Planned:
    """One evaluation the run would make (its architecture does not change a request; nor
    does the copy of an indirect case's environment, until a tool answers)."""

    case: Case
    spec: str
    track: Track
    copy: Copy = "attack"
    trial: int = 1


@dataclass(frozen=True)
class ModelPlan:
    """One model's plan. None: not known before the run (the requests of an `agent:`
    spec or a plugin's model, a price missing from the table, a cache that cannot be
    keyed)."""

    model: str
    evaluations: int
    requests_max: int | None
    input_tokens_est: int | None
    # Every request at the bound, each at its user message's first-request estimate.
    input_tokens_at_bound: int | None
    output_tokens_max: int | None
    first_requests: int | None
    cached_first_requests: int | None
    cost_usd_min: float | None
    cost_usd_max: float | None
    note: str
    # Of `evaluations`: the indirect cases' paired clean runs, one per task, environment,
    # level and architecture.
    clean_runs: int = 0

    def record(self) -> dict[str, Any]:
        """The plan as its JSON record: costs to the micro-dollar (a sum of float
        products, whose last digits are the arithmetic's, not the prices')."""
        out = asdict(self)
        for key in ("cost_usd_min", "cost_usd_max"):
            if out[key] is not None:
                out[key] = round(out[key], 6)
        return out


def tokens(body: dict[str, Any]) -> int:
    """Characters/4 of a request body's JSON text, rounded up."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class _First(NamedTuple):
    """A distinct first request: its input estimate, its max_tokens, and how many
    evaluations send it."""

    tokens: int
    max_tokens: int
    uses: int


@dataclass
class _Counts:
    evaluations: int = 0
    clean_runs: int = 0
    requests: int = 0
    input_est: int = 0
    input_at_bound: int = 0
    output: int = 0


def plan_run(
    specs: Sequence[Spec],
    planned: Iterable[Planned],
    levels: Mapping[int, Level],
    *,
    max_steps: int,
    providers: Mapping[str, ProviderModel | str],
    cache: ResponseCache | None,
    prices: Mapping[str, Price],
    rounds: int = 1,
    attacker: str | None = None,
    judges: Mapping[str, int] | None = None,
    unknown: Mapping[str, Literal["judge", "attacker"]] | None = None,
) -> list[ModelPlan]:
    """One plan per model spec, in the order given (every `planned` item's spec among
    them). `providers` holds, per provider spec whose requests can be keyed, its model
    (never asked) or why its client could not be built. An adaptive evaluation sends up
    to `rounds` user messages; a real-model `attacker` writes all but the first (None:
    none asks a provider). `judges`: each real-model judge's token cap; it reads each
    completed evaluation once. `unknown`: a plugin's judges and attacker that spend,
    whose requests are their own: planned as unknown, never left out."""
    steps = max(max_steps, 1)  # as evaluate() bounds each user message
    counts = {spec.text: _Counts() for spec in specs}
    asks = _Counts()  # the attacker's requests: one per round after the first
    # Per provider spec: each distinct first request's key, its input estimate and
    # max_tokens, and how many evaluations send it (billed once: the rest reuse it).
    firsts: dict[str, dict[str, _First]] = {spec.text: {} for spec in specs}
    # Bodies repeat across tracks and architectures: estimate each once.
    memo: dict[tuple[str, int, bool, tuple[str, ...], int], tuple[int, str | None]] = {}
    for item in planned:
        c = counts[item.spec]
        c.evaluations += 1
        c.clean_runs += item.copy == "clean"
        adaptive = item.track == "adaptive"
        if adaptive:
            asks.evaluations += 1
            asks.requests += rounds - 1
        model = providers.get(item.spec)
        if model is None:  # no request of ours: none (a control) or unknown
            continue
        level = levels[item.case.level]
        texts = user_messages(item.case, item.track)
        # Adaptive: the attacker's later messages are not known yet; each round is sized
        # as the first (a conversation only grows, so input is underestimated, not over).
        sent = rounds if adaptive else len(texts)
        requests = sent * steps
        c.requests += requests
        c.output += requests * level.max_tokens
        # The tools too: an indirect case with documents offers one more.
        documents = item.case.environment is not None and bool(item.case.environment.documents)
        for i in range(len(texts)):
            key = (item.spec, level.number, documents, tuple(texts[: i + 1]), item.trial)
            if key not in memo:
                memo[key] = _estimate(
                    model, item.case, level, texts[: i + 1], first=i == 0, trial=item.trial
                )
            estimate, request_key = memo[key]
            times = rounds if adaptive else 1
            c.input_est += estimate * times
            c.input_at_bound += estimate * steps * times
            if request_key is not None:
                seen = firsts[item.spec].get(request_key)
                uses = 1 if seen is None else seen.uses + 1
                firsts[item.spec][request_key] = _First(estimate, level.max_tokens, uses)
    plans = [
        _plan(spec, counts[spec.text], providers.get(spec.text), firsts[spec.text], cache, prices)
        for spec in specs
    ]
    if attacker is not None and asks.evaluations:
        # Its requests are bounded; its prompts hold the agent's replies, unknown before.
        note = "attacker: one request per round after the first; tokens not estimated"
        plans.append(ModelPlan(attacker, asks.evaluations, asks.requests, *(None,) * 7, note=note))
    planned_evaluations = sum(c.evaluations for c in counts.values())
    for spec, role in (unknown or {}).items():
        evaluations = asks.evaluations if role == "attacker" else planned_evaluations
        if evaluations:
            note = f"{role}: requests unknown (a plugin's {role} asks on its own)"
            plans.append(ModelPlan(spec, evaluations, *(None,) * 8, note))
    for judge, max_tokens in (judges or {}).items():
        if not planned_evaluations:
            continue
        note = "judge: at most one request per completed evaluation; input not estimated"
        plans.append(
            ModelPlan(
                judge,
                planned_evaluations,
                planned_evaluations,
                None,
                None,
                planned_evaluations * max_tokens,
                *(None,) * 4,
                note=note,
            )
        )
    return plans


def _estimate(
    model: ProviderModel | str,
    case: Case,
    level: Level,
    texts: Sequence[str],
    *,
    first: bool,
    trial: int = 1,
) -> tuple[int, str | None]:
    """The input estimate of a user message's first request, and the request's cache key
    when it is the evaluation's first (later ones depend on the model's answers)."""
    from pytest_vault.models.specs import parse_spec

    if isinstance(model, str):
        # No client to build the body with: sized as system prompt, tools and messages.
        tools = tools_for(case)
        system = level.prompt_for(case)
        return tokens({"system": system, "tools": tools, "messages": texts}), None
    # Exactly the request evaluate() makes for this user message's first step.
    request = ModelRequest(
        system=level.prompt_for(case),
        messages=tuple(Message("user", text) for text in texts),
        tools=tools_for(case),
        temperature=level.temperature,
        max_tokens=level.max_tokens,
        case=case,
        level=level,
        trial=trial,
    )
    body = model.wire.body(request, parse_spec(model.spec).model)
    return tokens(body), model.request_key(body, trial) if first else None


def _plan(
    claimed: Spec,
    c: _Counts,
    model: ProviderModel | str | None,
    firsts: dict[str, _First],
    cache: ResponseCache | None,
    prices: Mapping[str, Price],
) -> ModelPlan:
    spec = claimed.text
    if claimed.offline:
        return ModelPlan(
            spec, c.evaluations, 0, 0, 0, 0, 0, 0, 0.0, 0.0, "control: no request", c.clean_runs
        )
    if model is None:
        unknown = (
            "agent: requests unknown (your agent calls its model itself)"
            if claimed.agent is not None
            else "requests unknown (a plugin's model asks on its own)"
        )
        return ModelPlan(spec, c.evaluations, *(None,) * 8, unknown, c.clean_runs)
    note = ""
    hits: set[str] = set()
    if isinstance(model, str):
        note = model  # why the client could not be built: nothing could be keyed
    elif cache is None:
        note = "cache off"
    else:
        hits = {key for key in firsts if cache.get(key) is not None}
    price = prices.get(spec)
    low = high = None
    if price is None:
        note = "; ".join(filter(None, [note, "no price"]))
    else:
        # At least the first requests nobody has answered yet are paid for, their input.
        low = price.cost(sum(f.tokens for key, f in firsts.items() if key not in hits), 0)
        # A first request is billed once, by the first evaluation to send it, and not at
        # all when the cache answers it: the others are at the bound, but cost nothing.
        free = [(f.uses - (key not in hits), f) for key, f in firsts.items()]
        high = price.cost(
            c.input_at_bound - sum(n * f.tokens for n, f in free),
            c.output - sum(n * f.max_tokens for n, f in free),
        )
    return ModelPlan(
        spec,
        c.evaluations,
        c.requests,
        c.input_est,
        c.input_at_bound,
        c.output,
        None if isinstance(model, str) else len(firsts),
        None if isinstance(model, str) else len(hits),
        low,
        high,
        note,
        c.clean_runs,
    )


# -- a shard's slice of the budget ----------------------------------------------------------


class Slice(NamedTuple):
    """A shard's part of `--vault-budget-usd`: `usd`, and what it was split by."""

    usd: float
    budget_usd: float
    mine: float  # the shard's planned cost (or evaluations, `by` says which)
    run: float  # the whole run's
    by: Literal["planned cost", "evaluations"]

    def said(self) -> str:
        """`budget slice $0.40 of $1.00 (its planned cost $0.12 of $0.30)`."""
        if self.by == "planned cost":
            why = f"its planned cost {usd(self.mine)} of {usd(self.run)}"
        else:
            why = (
                f"{self.mine:,.0f} of {self.run:,.0f} evaluations: the run's planned cost is "
                "not known or $0"
            )
        return f"budget slice {usd(self.usd)} of {usd(self.budget_usd)} ({why})"


def planned_cost(plans: Iterable[ModelPlan]) -> float:
    """What the plans cost at most, of those with a known cost (`cost_usd_max`)."""
    return math.fsum(p.cost_usd_max for p in plans if p.cost_usd_max is not None)


def budget_slice(
    budget_usd: float,
    mine: Sequence[ModelPlan],
    run: Sequence[ModelPlan],
) -> Slice:
    """A shard's slice of the run's budget: budget x its planned cost / the run's, so the
    shards' slices add up to the budget and each spends in proportion to what it plans.
    Where the run's planned cost is $0 or not known (controls, an `agent:` spec, no price),
    the split is by evaluations instead, and the slice says so."""
    cost, total = planned_cost(mine), planned_cost(run)
    if total > 0:
        return Slice(budget_usd * cost / total, budget_usd, cost, total, "planned cost")
    evaluations = sum(p.evaluations for p in mine if not _other(p))
    every = sum(p.evaluations for p in run if not _other(p))
    share = evaluations / every if every else 0.0
    return Slice(budget_usd * share, budget_usd, evaluations, every, "evaluations")


def _other(plan: ModelPlan) -> bool:
    """A judge's or attacker's plan (its evaluations repeat the models')."""
    return plan.note.startswith(("judge:", "attacker:"))


# -- output ---------------------------------------------------------------------------------


def _number(value: int | None) -> str:
    return "unknown" if value is None else f"{value:,}"


def _cached(plan: ModelPlan) -> str:
    if plan.cached_first_requests is None or plan.first_requests is None:
        return "unknown"
    if plan.first_requests == 0:
        return "-"
    share = 100 * plan.cached_first_requests / plan.first_requests
    return f"{plan.cached_first_requests:,}/{plan.first_requests:,} ({share:.0f}%)"


def _cost(low: float | None, high: float | None) -> str:
    return "no price" if low is None or high is None else f"{usd(low)}\N{EN DASH}{usd(high)}"


def _total(values: Iterable[int | float | None], show: Callable[[Any], str]) -> str:
    values = list(values)
    known = sum(v for v in values if v is not None)
    return show(known) + ("+?" if None in values else "")


def render(plans: Sequence[ModelPlan]) -> list[str]:
    """The plan as a table, one row per model and a total, then the method."""
    header: tuple[str, ...] = ("model", "evals", "requests <=", "input tokens est")
    header += ("output tokens <=",)
    header += ("first requests cached", "cost", "")
    rows = [
        (
            shown(p.model),
            f"{p.evaluations:,}",
            _number(p.requests_max),
            _number(p.input_tokens_est),
            _number(p.output_tokens_max),
            _cached(p),
            "unknown" if p.requests_max is None else _cost(p.cost_usd_min, p.cost_usd_max),
            shown(p.note),
        )
        for p in plans
    ]
    count = "{:,}".format
    total = ModelPlan(
        "total",
        sum(p.evaluations for p in plans),
        *(None,) * 4,
        sum(p.first_requests or 0 for p in plans),
        sum(p.cached_first_requests or 0 for p in plans),
        None,
        None,
        "",
    )
    rows.append(
        (
            "total",
            count(total.evaluations),
            _total((p.requests_max for p in plans), count),
            _total((p.input_tokens_est for p in plans), count),
            _total((p.output_tokens_max for p in plans), count),
            _cached(total),
            _total((p.cost_usd_min for p in plans), usd)
            + "\N{EN DASH}"
            + _total((p.cost_usd_max for p in plans), usd),
            "",
        )
    )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=False))
        )
        + ("  " + row[-1] if row[-1] else "")
        for row in [header, *rows]
    ]
    method = [f"  {line}" for line in METHOD]
    clean = sum(p.clean_runs for p in plans)
    pairs = (
        [
            f"of which {clean:,} are paired clean runs of indirect cases (one per task, "
            "environment, model, level and architecture)"
        ]
        if clean
        else []
    )
    return [
        *lines,
        *pairs,
        "method (+? marks what is not known before the run):",
        *method,
        "nothing was asked: no provider was contacted, no test ran",
    ]
