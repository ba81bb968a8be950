"""The run's settings, parsed and checked once at configure time (`checks.options_of`),
and the one unit of work they select."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pytest_vault.models.specs import CONTROL_MODELS
from pytest_vault.plugin.options import default

if TYPE_CHECKING:
    from pytest_vault.harness.agent import Track
    from pytest_vault.harness.bank import Architecture
    from pytest_vault.harness.events import Transcripts
    from pytest_vault.models.cache import ResponseCache
    from pytest_vault.models.providers import ProviderModel
    from pytest_vault.models.ratelimit import RateLimiter
    from pytest_vault.models.specs import Spec


@dataclass(frozen=True)
class Options:
    models: tuple[str, ...] = CONTROL_MODELS
    tracks: tuple[Track, ...] = ("A", "B", "indirect")
    architectures: tuple[Architecture, ...] = ("model", "guarded")
    levels: frozenset[int] = frozenset({1, 2, 3, 4, 5})
    passports: Path | None = None
    results: Path | None = None
    strict: bool = default("strict")
    max_steps: int = default("max_steps")
    # Real models. Concurrency, rate limits and the spend cap are for the whole run;
    # under pytest-xdist each worker takes an equal share (`share_of`).
    base_url: str | None = None
    concurrency: int = default("concurrency")
    rpm: float | None = None
    tpm: float | None = None
    tries: int = default("tries")
    timeout: float = default("timeout")
    agent_timeout: float = default("agent_timeout")  # one reply of an `agent:` spec
    cache: Path | None = None
    budget_usd: float | None = None
    prices: Path | None = None
    progress_s: float = default("progress_s")
    # This job's share of the items (K of N, 1-based), for spreading a run over CI jobs.
    shard: tuple[int, int] | None = None
    report: Path | None = None
    # `--vault-otel`: the run as OTLP/JSON traces (and to a collector, where one is named);
    # the variable holding the input hash's key (None: no hash).
    otel: Path | None = None
    otel_key_env: str | None = None
    # `--vault-guard MODULE:FACTORY`: the team's guard instead of ours (None: "oap").
    guard: str | None = None
    # A stratified sample of the attacks (and of the benign cases), and its seed.
    sample: int | None = None
    sample_benign: int | None = None
    seed: int = default("seed")
    # Each evaluation this many times, as independent trials (`--vault-trials`).
    trials: int = default("trials")
    # Which evaluations keep their conversation (`--vault-transcripts`).
    transcripts: Transcripts = default("transcripts")
    # The last release's results, to gate against at the end.
    baseline: Path | None = None
    baseline_model: str | None = None
    baseline_any_corpus: bool = default("baseline_any_corpus")
    # Compare on the baseline cells this run has (else a missing one fails the gate); and
    # where the gate's verdict and regressed attacks are written.
    baseline_subset: bool = default("baseline_subset")
    baseline_out: Path | None = None
    # `--vault-plan`: print what the run would cost and run nothing.
    plan: Literal["text", "json"] | None = None
    # Where `agent:` and `--vault-guard` modules are looked for first, in order: the
    # invocation folder, pytest's `pythonpath` setting, the rootdir.
    search: tuple[Path, ...] = ()
    # The adaptive track: the attacker's spec, its rounds, whether it sees the policy,
    # and where its finds are written as corpus lines.
    attacker: str | None = None
    rounds: int = default("rounds")
    attacker_sees_policy: bool = default("attacker_sees_policy")
    export_found: Path | None = None
    # `--vault-judge`: judges that read each completed evaluation's transcript, an audit
    # recorded beside the events, never deciding a test.
    judges: tuple[str, ...] = ()
    # What the plugins that claimed them said each spec is (models, judges, attacker),
    # by its text: `plugin.specs.claim`, at configure time.
    specs: Mapping[str, Spec] = field(default_factory=dict)

    def share_of(self, workers: int) -> Options:
        """This worker's part of the run-wide limits."""
        from dataclasses import replace

        if workers <= 1:
            return self
        return replace(
            self,
            concurrency=max(1, math.ceil(self.concurrency / workers)),
            rpm=None if self.rpm is None else self.rpm / workers,
            tpm=None if self.tpm is None else self.tpm / workers,
            budget_usd=None if self.budget_usd is None else self.budget_usd / workers,
        )


@dataclass(frozen=True)
class VaultContext:
    """What a plugin's `pytest_vault_make_*` hooks are handed (`plugin/hookspecs.py`):
    the run's settings and the run's factories, never its state. Public API: a field is
    added, never changed or removed."""

    options: Options  # the run's settings (read only: a frozen dataclass)
    # `provider_model(spec, judge=False)`: one of our providers' models (`openai:...`,
    # `anthropic:...`), its requests limited, cached, priced and counted with the run's.
    provider_model: Callable[..., ProviderModel]
    # `response_cache()`: the run's answer cache (None under `--vault-no-cache`), for a
    # plugin's own client to reuse answers across runs.
    response_cache: Callable[[], ResponseCache | None]
    # `rate_limiter(endpoint)`: the run's limiter of an endpoint (any hashable key), one
    # per key for the whole process, sharing `--vault-rpm` and `--vault-tpm`.
    rate_limiter: Callable[[Hashable], RateLimiter]
