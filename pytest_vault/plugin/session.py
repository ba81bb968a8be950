"""The vault session: the state of one pytest run, owned in one place.

It holds the options, the runner that evaluates ahead of the tests, the rows recorded
so far, and what the xdist workers reported; what specs, levels and prices become is
its factory's (`maker`, `plugin/making.py`). The plugin's hooks only forward to it.
Heavy modules are imported when first needed, so that a pytest run that collects no
corpus (or `pytest --help`) pays nothing for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pluggy import HookRelay

    from pytest_vault.corpus.model import Case
    from pytest_vault.harness.agent import Job
    from pytest_vault.harness.levels import Level
    from pytest_vault.models.ratelimit import Spend
    from pytest_vault.plugin.collect import VaultItem
    from pytest_vault.plugin.making import Maker
    from pytest_vault.plugin.runner import Runner

import pytest

from pytest_vault.core.text import shown
from pytest_vault.plugin.corpora import Corpora
from pytest_vault.plugin.rows import RowStore, TableRows
from pytest_vault.plugin.settings import Options

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
    # `--vault-shard`: what the shard owns of the run (`plugin.shards.select`), for its
    # manifest; None: no shard.
    manifest: dict[str, Any] | None = None
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
    _maker: Maker | None = None
    _runner: Runner[Job, dict[str, Any]] | None = None
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
    def maker(self) -> Maker:
        """The run's factory: specs, levels, prices, limits (`plugin/making.py`)."""
        if self._maker is None:
            from pytest_vault.plugin.making import Maker

            self._maker = Maker(self.options, self.hook)
        return self._maker

    @property
    def levels(self) -> dict[int, Level]:
        """The five levels; raises `PassportError` (one line) if they cannot be used.
        The passports they enforce are recorded when they are first loaded."""
        if not self.passports:
            from pytest_vault.harness.levels import passport_record

            self.passports = passport_record(self.maker.levels)
        return self.maker.levels

    def start(self, jobs: list[Job]) -> None:
        """Start the runner and queue this process's share of the jobs, in test order."""
        from pytest_vault.plugin.runner import Runner

        maker = self.maker
        # Made here, on the main thread, before the runner's thread can race to make them.
        _ = self.levels, maker.spend, maker.stats
        if self._runner is None:
            from pytest_vault.plugin.work import run

            async def evaluate(job: Job) -> dict[str, Any]:
                return await run(maker, job)

            self._runner = Runner(
                evaluate, lambda job: job.key, self.options.concurrency, maker.close
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

    def spent(self) -> tuple[Spend, bool] | None:
        """What the run spent on real models: this process's ledger, or on the xdist
        controller the workers' added up; and whether that is all (a worker that ended
        without sending its last spent at least what its latest report said). None:
        nothing of ours ran (no ledger was made)."""
        if not self.ledgers:
            made = self._maker is not None and self._maker.made_ledgers
            return (self.maker.spend, True) if made else None
        from pytest_vault.models.ratelimit import Spend

        total = Spend(self.maker.spend.prices, self.options.budget_usd)
        for record, _ in self.ledgers.values():
            total.merge(record)
        return total, all(final for _, final in self.ledgers.values())

    def unstored_answers(self) -> tuple[int, str] | None:
        """Answers paid for that no cache file holds (this process's and the workers'),
        and one reason for them; None when there were none."""
        counts = [*self.unstored.values()]
        stats = None if self._maker is None else self._maker._stats
        if stats is not None and stats.unstored:
            counts.append((stats.unstored, stats.unstored_reason))
        total = sum(n for n, _ in counts)
        if not total:
            return None
        # One reason, the same whichever worker reported first.
        return total, min((why for _, why in counts if why), default="unknown")

    def decode_record(self) -> dict[str, dict[str, Any]]:
        """Per model: decode settings sent, not sent, renamed, and left at defaults (the
        workers', merged, and this process's own)."""
        own = {} if self._maker is None else self._maker.decode_record()
        return {**self.decode, **own}

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
