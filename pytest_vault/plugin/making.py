"""The run's factory: what a spec, a level, a price table or an endpoint becomes, made
once per process on first use, and handed to third-party plugins as `VaultContext`.

It holds no run state (rows, plans, xdist merges: `plugin/session.py`). Its modules are
imported when a thing is first made, so that a pytest run that names nothing of ours
(or `pytest --help`) pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_vault.core.text import safe, shown
from pytest_vault.plugin.settings import Options, VaultContext

if TYPE_CHECKING:
    from pluggy import HookRelay

    from pytest_vault.harness.adaptive import Attacker
    from pytest_vault.harness.agent import Driver, Job, Model, Subject
    from pytest_vault.harness.judges import Judge
    from pytest_vault.harness.levels import Level
    from pytest_vault.harness.yours import Loader
    from pytest_vault.models.cache import ResponseCache
    from pytest_vault.models.providers import ProviderModel, Stats
    from pytest_vault.models.ratelimit import RateLimiter, Spend
    from pytest_vault.models.specs import Role, Spec


@dataclass
class Maker:
    options: Options
    # The hooks a spec is made through (`config.hook`); None: our own implementations only.
    hook: HookRelay | None = None
    _levels: dict[int, Level] | None = None
    _spend: Spend | None = None
    _stats: Stats | None = None
    _context: VaultContext | None = None
    # What the model hook made of each spec (a `Model` or a `Subject`), and as a subject.
    _made: dict[str, Model | Subject] = field(default_factory=dict)
    _subjects: dict[str, Subject] = field(default_factory=dict)
    _judges: dict[str, Judge] = field(default_factory=dict)
    _attacker: Driver | None = None
    _providers: dict[str, ProviderModel] = field(default_factory=dict)
    _limiters: dict[Hashable, RateLimiter] = field(default_factory=dict)
    _guard: Loader | None = None

    @property
    def levels(self) -> dict[int, Level]:
        """The five levels; raises `PassportError` (one line) if they cannot be used."""
        if self._levels is None:
            from pytest_vault.guard.folder import SHIPPED
            from pytest_vault.harness.levels import load_levels

            self._levels = load_levels(self.options.passports or SHIPPED)
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

    @property
    def made_ledgers(self) -> bool:
        """Whether anything of ours was priced or counted (a ledger exists)."""
        return self._spend is not None

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

    def made(self, spec: str) -> Model | Subject:
        """What the model hook made of `spec` (the evaluation's bill is its answers')."""
        if spec not in self._made:
            try:
                self._made[spec] = self._make(spec, "model")
            except Exception as exc:  # noqa: BLE001 - one redacted line, not a traceback
                from pytest_vault.models.providers import Unavailable

                reason = safe(f"{spec}: cannot build the client: {type(exc).__name__}: {exc}")
                self._made[spec] = Unavailable(spec, reason)
        return self._made[spec]

    def subject(self, spec: str) -> Subject:
        """What is evaluated for `spec`: a subject as made, a model in the agent loop."""
        if spec not in self._subjects:
            from pytest_vault.harness.agent import as_subject

            self._subjects[spec] = as_subject(self.made(spec), self.options.max_steps)
        return self._subjects[spec]

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

    def driver(self, job: Job) -> Driver:
        """Who decides `job`'s user messages: the track's own, or on the adaptive track
        `--vault-attacker`'s campaign (made on first use, on the runner's loop)."""
        from pytest_vault.harness.agent import FIXED

        if job.track != "adaptive":
            return FIXED
        if self._attacker is None:
            from pytest_vault.harness.adaptive import Campaign, NoAttacker

            opts = self.options
            assert opts.attacker is not None, "the adaptive track needs --vault-attacker"
            try:
                attacker: Attacker = self._make(opts.attacker, "attacker")
            except Exception as exc:  # noqa: BLE001 - an error row per adaptive evaluation
                self._attacker = NoAttacker(
                    opts.attacker, f"--vault-attacker {opts.attacker}: {exc}"
                )
            else:
                self._attacker = Campaign(attacker, opts.rounds, opts.attacker_sees_policy)
        return self._attacker

    def guard(self) -> Loader | None:
        """`--vault-guard`'s factory (None: ours, the OAP engine, guards)."""
        target = self.options.guard
        if target is not None and self._guard is None:
            from pytest_vault.harness.yours import Loader

            self._guard = Loader(f"--vault-guard {target}", target, self.options.search)
        return self._guard

    @property
    def guard_spec(self) -> str:
        """The guard under test in the guarded architecture: ours (`oap`) or the team's."""
        return self.options.guard or "oap"

    def unloadable(self) -> str | None:
        """The first `agent:` spec or `--vault-guard` whose factory cannot be imported,
        as `OPTION VALUE: why`; None when every one is in hand."""
        named: list[tuple[str, Loader]] = []
        for text in self.options.models:
            target = self.spec(text).agent
            if target is not None:
                from pytest_vault.harness.yours import Loader

                named.append((f"--vault-model {text}", Loader(text, target, self.options.search)))
        guard = self.guard()
        if guard is not None:
            named.append((guard.spec, guard))
        for option, loader in named:
            problem = loader.problem()
            if problem is not None:
                return f"{shown(option)}: {problem}"
        return None

    async def close(self) -> None:
        """Close what was made (clients, an agent's pool), on the loop it was used on."""
        for made in [*self._made.values(), *self._judges.values()]:
            close = getattr(made, "close", None)
            if close is not None:
                await close()

    def decode_record(self) -> dict[str, dict[str, Any]]:
        """Per model of ours: decode settings sent, not sent, renamed, left at defaults."""
        return {spec: m.decode.record(m.wire.provider) for spec, m in self._providers.items()}

    def forget_providers(self) -> None:
        """Our providers' clients built for a plan and never asked: nothing to record."""
        self._providers.clear()

    def our_providers(self, texts: Sequence[str]) -> list[str]:
        """The specs that ask one of our providers (`specs.our_provider`)."""
        from pytest_vault.plugin.specs import our_provider

        return [t for t in texts if our_provider(self.spec(t))]
