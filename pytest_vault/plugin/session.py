"""The vault session: the state of one pytest run, owned in one place.

It holds the options, the levels (loaded on first use), the models, the runner that
evaluates ahead of the tests, and the rows recorded so far. The plugin's hooks only
forward to it. Heavy modules are imported when first needed, so that a pytest run
that collects no corpus (or `pytest --help`) pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import concurrent.futures

    from pluggy import HookRelay

    from pytest_vault.corpus.model import Case
    from pytest_vault.harness.adaptive import Attacker, Campaign
    from pytest_vault.harness.agent import Evaluation, Model
    from pytest_vault.harness.judges import Judge, Verdict
    from pytest_vault.harness.levels import Level
    from pytest_vault.harness.yours import Loader
    from pytest_vault.models.cache import ResponseCache
    from pytest_vault.models.providers import ProviderModel, Stats
    from pytest_vault.models.ratelimit import RateLimiter, Spend
    from pytest_vault.models.specs import Role, Spec
    from pytest_vault.plugin.collect import VaultItem
    from pytest_vault.plugin.runner import Runner

import pytest

from pytest_vault.core.text import safe, shown
from pytest_vault.plugin.corpora import Corpora
from pytest_vault.plugin.rows import RowStore, TableRows
from pytest_vault.plugin.settings import Job, Options, VaultContext

# Distinct (name, value) user properties shared between tests, at most.
SHARED_PROPERTIES = 4096


@dataclass
class VaultSession:
    options: Options
    # The hooks a spec is made through (`config.hook`); None: our own implementations only.
    hook: HookRelay | None = field(default=None, kw_only=True)
    # One row per test (the last, if a test runs twice), keyed by node id, as tuples.
    store: RowStore = field(default_factory=RowStore)
    # Which files are corpus files, and the built-in ones the run collects.
    corpora: Corpora = field(default_factory=Corpora)
    # A corpus file was collected in this process: until then, the run is none of ours.
    collected: bool = False
    # Case ids seen in this run, across corpus files, with where they were defined.
    seen_ids: dict[str, str] = field(default_factory=dict)
    # The indirect cases collected, by their clean run's id; and the clean runs' items, by
    # that id, then (spec, architecture, trial): one per cell, whichever file holds it.
    served: dict[str, list[Case]] = field(default_factory=dict)
    clean_runs: dict[str, dict[tuple[str, str, int], VaultItem]] = field(default_factory=dict)
    # sha256 of each corpus file collected, by node id (merged from workers under xdist).
    corpus_digests: dict[str, str] = field(default_factory=dict)
    # Evaluations this process plans, per cell (after -k, levels and shard filters).
    planned: dict[str, int] = field(default_factory=dict)
    # The same for the whole run before --vault-shard: a merge of shards checks against it.
    planned_run: dict[str, int] = field(default_factory=dict)
    # Per model spec: decode settings sent / not sent, as merged from xdist workers.
    decode: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The passports enforced, per level: the file loaded and the digest of the bytes that
    # were read, taken when they were loaded (merged from workers under xdist).
    passports: dict[str, Any] = field(default_factory=dict)
    # `--vault-sample`: the sample's record (`SampleRecord`), None when the run is whole.
    # Under xdist the controller collects nothing: it takes the workers' (which agree).
    sample: dict[str, Any] | None = None
    # Why the run stopped before its end (`outputs.stopped`); None: it ran to its end.
    stopped: str | None = None
    _sample_reported: bool = False  # a worker's record arrived (controller)
    _providers: dict[str, ProviderModel] = field(default_factory=dict)
    _levels: dict[int, Level] | None = None
    _models: dict[str, Model] = field(default_factory=dict)
    _limiters: dict[Hashable, RateLimiter] = field(default_factory=dict)
    _context: VaultContext | None = None
    _runner: Runner[Job, dict[str, Any]] | None = None
    _spend: Spend | None = None
    _stats: Stats | None = None
    _loaders: dict[str, Loader] = field(default_factory=dict)
    # Sync agents' `reply` runs here, never on the runner's loop.
    _pool: concurrent.futures.ThreadPoolExecutor | None = None
    _attacker: Attacker | None = None
    _judges: dict[str, Judge] = field(default_factory=dict)
    # One (name, value) user property shared by every test that records it: most values
    # repeat (False, None, "completed"), and 12 tuples per test add up at 87,420 tests.
    _properties: dict[tuple[str, type, object], tuple[str, object]] = field(default_factory=dict)
    # Answers the cache could not store, per xdist worker (controller): count, a reason.
    unstored: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    # Each xdist worker's spend ledger (`Spend.record`), on the controller: its latest
    # report's, then (True) the last, sent when it finished.
    ledgers: dict[str, tuple[dict[str, Any], bool]] = field(default_factory=dict)
    # The baseline gate's verdict line, once it ran (the reports open with it).
    gate_verdict: str | None = None
    # The attacks the gate found regressed (`Regressed`, as JSON): for the SARIF of the run.
    gate_regressed: list[dict[str, Any]] = field(default_factory=list)
    # Why a gate that was asked for did not run (the terminal says it; its exit status).
    gate_not_run: str | None = None
    # Outputs that could not be written at the end, by option (said in one line each).
    unwritten: dict[str, Path] = field(default_factory=dict)
    # The ids of exported finds whose text no corpus line could hold exactly (repaired,
    # and named in their provenance), for the summary to say.
    repaired_finds: list[str] = field(default_factory=list)

    @property
    def levels(self) -> dict[int, Level]:
        """The five levels; raises `PassportError` (one line) if they cannot be used."""
        if self._levels is None:
            from pytest_vault.guard.folder import SHIPPED
            from pytest_vault.harness.levels import load_levels, passport_record

            self._levels = load_levels(self.options.passports or SHIPPED)
            self.passports = passport_record(self._levels)
        return self._levels

    @property
    def spend(self) -> Spend:
        if self._spend is None:
            from pytest_vault.models.ratelimit import Spend, load_prices

            prices = load_prices(self.options.prices) if self.options.prices else {}
            self._spend = Spend(prices, self.options.budget_usd)
        return self._spend

    @property
    def stats(self) -> Stats:
        if self._stats is None:
            from pytest_vault.models.providers import Stats

            self._stats = Stats()
        return self._stats

    # -- specs, and what they make (on the runner's loop, where their clients live) --------
    def spec(self, text: str) -> Spec:
        """What the plugin that claimed `text` at configure time said it is."""
        return self.options.specs[text]

    def _make(self, text: str, role: Role) -> Any:
        """What the first plugin that makes a claimed spec made of it."""
        if self.hook is None:
            from pytest_vault.plugin.specs import own_hooks

            self.hook = own_hooks()
        make = getattr(self.hook, f"pytest_vault_make_{role}")
        # `session`: the same context, under the name plugins written before it used.
        made = make(spec=self.spec(text), context=self.context, session=self.context)
        if made is None:
            raise LookupError(f"no plugin makes this {role}")
        return made

    def model(self, spec: str) -> Model:
        if spec not in self._models:
            try:
                self._models[spec] = self._make(spec, "model")
            except Exception as exc:  # noqa: BLE001 - one redacted line, not a traceback
                from pytest_vault.models.providers import Unavailable

                reason = safe(f"{spec}: cannot build the client: {type(exc).__name__}: {exc}")
                self._models[spec] = Unavailable(spec, reason)
        return self._models[spec]

    @property
    def context(self) -> VaultContext:
        """What the make hooks are handed: the settings and the factories, not the run."""
        if self._context is None:
            self._context = VaultContext(
                self.options, self.provider_model, self.response_cache, self.rate_limiter
            )
        return self._context

    def response_cache(self) -> ResponseCache | None:
        from pytest_vault.models.cache import ResponseCache

        return ResponseCache(self.options.cache) if self.options.cache else None

    def rate_limiter(self, endpoint: Hashable) -> RateLimiter:
        from pytest_vault.models.ratelimit import RateLimiter

        if endpoint not in self._limiters:
            self._limiters[endpoint] = RateLimiter(self.options.rpm, self.options.tpm)
        return self._limiters[endpoint]

    def provider_model(
        self, spec: str, *, judge: bool = False, keyless: bool = False
    ) -> ProviderModel:
        """One of our providers' models, its requests limited, cached, priced and counted
        with the run's. `judge`: a judge's model, kept out of the models' decode record (a
        judge may share its spec with a model under test). `keyless`: never asked."""
        from pytest_vault.models.providers import ProviderModel, Retry, make_wire
        from pytest_vault.models.specs import parse_spec

        opts = self.options
        parsed = parse_spec(spec)
        wire = make_wire(parsed, opts.base_url, opts.timeout, keyless=keyless)
        model = ProviderModel(
            parsed,
            wire,
            cache=self.response_cache(),
            limiter=self.rate_limiter((wire.provider, wire.base_url)),
            spend=self.spend,
            retry=Retry(tries=opts.tries),
            stats=self.stats,
        )
        if not judge:
            self._providers[spec] = model
        return model

    def judge(self, spec: str) -> Judge:
        """A `--vault-judge`, made on first use (on the runner's loop, like the models)."""
        if spec not in self._judges:
            try:
                self._judges[spec] = self._make(spec, "judge")
            except Exception as exc:  # noqa: BLE001 - unreadable verdicts, not a traceback
                from pytest_vault.harness.judges import BrokenJudge

                self._judges[spec] = BrokenJudge(spec, safe(f"{type(exc).__name__}: {exc}"))
        return self._judges[spec]

    async def _judged(self, ev: Evaluation) -> dict[str, Verdict] | None:
        """Each judge's verdict on a completed evaluation, priced under the judge's spec
        (None: no judge, or the evaluation did not complete)."""
        from dataclasses import replace

        from pytest_vault.harness.judges import judge_all, transcript_of

        if not self.options.judges or ev.status != "completed":
            return None
        verdicts = await judge_all(
            [self.judge(spec) for spec in self.options.judges], transcript_of(ev)
        )
        return {
            spec: replace(v, cost_usd=self.spend.cost(spec, v.input_tokens, v.output_tokens))
            for spec, v in verdicts.items()
        }

    def attacker(self) -> Attacker:
        """`--vault-attacker`, made on first use (on the runner's loop, like the models)."""
        spec = self.options.attacker
        assert spec is not None, "the adaptive track needs --vault-attacker"
        if self._attacker is None:
            # An exception is an error row per adaptive evaluation (`_adaptive`).
            self._attacker = self._make(spec, "attacker")
        return self._attacker

    def campaign(self) -> Campaign:
        from pytest_vault.harness.adaptive import Campaign

        opts = self.options
        return Campaign(self.attacker(), opts.rounds, opts.attacker_sees_policy)

    async def _close_models(self) -> None:
        for model in [*self._models.values(), *self._judges.values()]:
            close = getattr(model, "close", None)
            if close is not None:
                await close()

    def _agent(self, spec: str) -> Loader | None:
        """The factory of an `agent:` spec (None: a model, made through the hook)."""
        target = self.spec(spec).agent
        return None if target is None else self._loader(spec, target)

    def _loader(self, spec: str, target: str) -> Loader:
        if spec not in self._loaders:
            from pytest_vault.harness.yours import Loader

            self._loaders[spec] = Loader(spec, target, self.options.search)
        return self._loaders[spec]

    def _guard_loader(self) -> Loader | None:
        guard = self.options.guard
        return None if guard is None else self._loader(f"--vault-guard {guard}", guard)

    def unloadable(self) -> str | None:
        """The first `agent:` spec or `--vault-guard` whose factory cannot be imported,
        as `OPTION VALUE: why`; None when every one is in hand (kept for the run)."""
        named = [
            (f"--vault-model {spec}", agent)
            for spec in self.options.models
            if (agent := self._agent(spec)) is not None
        ]
        guard = self._guard_loader()
        if guard is not None:
            named.append((guard.spec, guard))
        for option, loader in named:
            problem = loader.problem()
            if problem is not None:
                return f"{shown(option)}: {problem}"
        return None

    @property
    def pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            import concurrent.futures  # on first use: an import pytest --help never pays

            self._pool = concurrent.futures.ThreadPoolExecutor(
                self.options.concurrency, thread_name_prefix="pytest-vault-agent"
            )
        return self._pool

    @property
    def guard_spec(self) -> str:
        """The guard under test in the guarded architecture: ours (`oap`) or the team's."""
        return self.options.guard or "oap"

    # -- running ---------------------------------------------------------------------------
    async def _evaluate(self, job: Job) -> dict[str, Any]:
        """The row; a provider model's answers priced as billed (`models/bill.py`)."""
        from pytest_vault.models.bill import billing

        model = None if self._agent(job.spec) is not None else self.model(job.spec)
        with billing(model) as bill:
            result = await self._evaluated(job)
        if bill.ours:
            result.update(bill.columns(self.spend, job.spec))
        return result

    async def _evaluated(self, job: Job) -> dict[str, Any]:
        from pytest_vault.harness.agent import evaluate
        from pytest_vault.harness.events import FOUND, row
        from pytest_vault.harness.yours import evaluate_agent, screen_maker

        opts = self.options
        level = self.levels[job.case.level]
        screen = screen_maker(self._guard_loader(), level)
        agent = self._agent(job.spec)
        if job.track == "adaptive":
            ev = await self._adaptive(job, level, screen, agent)
        elif agent is not None:
            ev = await evaluate_agent(
                job.case,
                level,
                job.spec,
                agent,
                job.track,
                job.architecture,
                pool=self.pool,
                max_steps=opts.max_steps,
                reply_timeout=opts.agent_timeout,
                screen=screen,
                copy=job.copy,
                trial=job.trial,
            )
        else:
            ev = await evaluate(
                job.case,
                level,
                self.model(job.spec),
                job.track,
                job.architecture,
                max_steps=opts.max_steps,
                screen=screen,
                copy=job.copy,
                trial=job.trial,
            )
        result = row(ev, self.guard_spec, await self._judged(ev), opts.transcripts)
        result["source"] = job.source
        result["cost_usd"] = self.spend.cost(
            job.spec, ev.usage.input_tokens, ev.usage.output_tokens
        )
        if ev.track == "adaptive" and result["unpermitted"]:
            from pytest_vault.harness.adaptive import found_line_of

            result[FOUND] = found_line_of(ev)
        return result

    async def _adaptive(
        self, job: Job, level: Level, screen: Any, agent: Loader | None
    ) -> Evaluation:
        from pytest_vault.harness.adaptive import evaluate_adaptive, evaluate_agent_adaptive
        from pytest_vault.harness.agent import Evaluation

        opts = self.options
        try:
            plan = self.campaign()
        except Exception as exc:  # noqa: BLE001 - an attacker that cannot be built: error rows
            ev = Evaluation(
                job.case, level, job.spec, "adaptive", job.architecture, trial=job.trial
            )
            ev.status, ev.error = "error", f"--vault-attacker {opts.attacker}: {exc}"
            ev.attacker, ev.rounds = opts.attacker, 0
            return ev
        if agent is not None:
            return await evaluate_agent_adaptive(
                job.case,
                level,
                job.spec,
                agent,
                job.architecture,
                plan,
                pool=self.pool,
                max_steps=opts.max_steps,
                reply_timeout=opts.agent_timeout,
                screen=screen,
                trial=job.trial,
            )
        return await evaluate_adaptive(
            job.case,
            level,
            self.model(job.spec),
            job.architecture,
            plan,
            max_steps=opts.max_steps,
            screen=screen,
            trial=job.trial,
        )

    def start(self, jobs: list[Job]) -> None:
        """Start the runner and queue this process's share of the jobs, in test order."""
        from pytest_vault.plugin.runner import Runner

        # Made here, on the main thread, before the runner's thread can race to make them.
        _ = self.spend, self.stats
        if self._runner is None:
            self._runner = Runner(
                self._evaluate, lambda job: job.key, self.options.concurrency, self._close_models
            )
        self._runner.prefetch(jobs)

    def result(self, job: Job) -> dict[str, Any]:
        """The row of one evaluation (run now if it was not run ahead); kept for the end."""
        if self._runner is None:
            self.start([])
        assert self._runner is not None
        row = self._runner.result(job)
        self.store.add(job.key, row)
        return row

    def recorded(self, key: str, value: object) -> tuple[str, object]:
        """A row's value as a user property (key, value), text shown. A scalar seen before
        gives the same tuple object; the cache is bounded, so distinct errors stay apart."""
        value = shown(value) if type(value) is str else value
        if type(value) not in (bool, int, str, type(None)):
            return key, value
        # (key, True) and (key, 1) are equal: the type keeps them apart.
        known = (key, type(value), value)
        pair = self._properties.get(known)
        if pair is None:
            pair = (key, value)
            if len(self._properties) < SHARED_PROPERTIES:
                self._properties[known] = pair
        return pair

    @property
    def rows(self) -> TableRows:
        """The rows kept for the end, as mappings (no dict per row)."""
        return self.store.rows()

    @property
    def in_flight(self) -> int:
        return 0 if self._runner is None else self._runner.counts.in_flight

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._pool is not None:
            # An agent thread still stuck in `reply` must not hold pytest's exit.
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def spent(self) -> tuple[Spend, bool] | None:
        """What the run spent on real models: this process's ledger, or on the xdist
        controller the workers' added up; and whether that is all (a worker that ended
        without sending its last spent at least what its latest report said). None:
        nothing of ours ran (no ledger was made)."""
        if not self.ledgers:
            return None if self._spend is None else (self._spend, True)
        from pytest_vault.models.ratelimit import Spend

        total = Spend(self.spend.prices, self.options.budget_usd)
        for record, _ in self.ledgers.values():
            total.merge(record)
        return total, all(final for _, final in self.ledgers.values())

    def unstored_answers(self) -> tuple[int, str] | None:
        """Answers paid for that no cache file holds (this process's and the workers'),
        and one reason for them; None when there were none."""
        counts = [*self.unstored.values()]
        if self._stats is not None and self._stats.unstored:
            counts.append((self._stats.unstored, self._stats.unstored_reason))
        total = sum(n for n, _ in counts)
        if not total:
            return None
        # One reason, the same whichever worker reported first.
        return total, min((why for _, why in counts if why), default="unknown")

    def decode_record(self) -> dict[str, dict[str, Any]]:
        """Per model: decode settings sent, not sent, renamed, and left at defaults."""
        own = {spec: m.decode.record(m.wire.provider) for spec, m in self._providers.items()}
        return {**self.decode, **own}

    def forget_providers(self) -> None:
        """Our providers' clients built for a plan and never asked: nothing to record."""
        self._providers.clear()

    def our_providers(self, texts: Sequence[str]) -> list[str]:
        """The specs that ask one of our providers (`specs.our_provider`)."""
        from pytest_vault.plugin.specs import our_provider

        return [t for t in texts if our_provider(self.spec(t))]

    def worker_sample(self, record: dict[str, Any] | None) -> None:
        """A worker's sample, on the xdist controller: every worker must have chosen the
        same one (they collect the same corpus with the same options)."""
        if not self._sample_reported:
            self.sample, self._sample_reported = record, True
        elif record != self.sample:
            raise pytest.UsageError(
                "pytest-vault: xdist workers sampled different cases "
                f"({_digest(self.sample)} and {_digest(record)}): "
                "did the corpus change during the run?"
            )


def _digest(sample: dict[str, Any] | None) -> str:
    return "no sample" if sample is None else str(sample.get("ids_digest"))


VAULT = pytest.StashKey[VaultSession]()


def vault_of(config: pytest.Config) -> VaultSession:
    return config.stash[VAULT]
