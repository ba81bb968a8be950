"""pytest nodes: a corpus file collects one test per case x model x track x architecture
(with --vault-decisions, one decision test per case with calls: see decisions.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from pytest_vault.core.errors import VaultError
from pytest_vault.core.text import shown
from pytest_vault.corpus.load import CorpusError, load_corpus
from pytest_vault.corpus.model import Case
from pytest_vault.guard.money import Money
from pytest_vault.guard.passport import PassportError
from pytest_vault.harness.agent import Job
from pytest_vault.harness.events import RECORDED
from pytest_vault.plugin.corpora import named_by_ids
from pytest_vault.plugin.distribute import group_of
from pytest_vault.plugin.session import vault_of
from pytest_vault.report.transcript import CLEAN

if TYPE_CHECKING:
    from pytest_vault.harness.agent import Copy, Track
    from pytest_vault.harness.bank import Architecture


def cell_key(item: VaultItem) -> str:
    """The coverage cell of an item: model|architecture|level|kind|track (a clean run's
    row is benign: the user's task with nothing planted)."""
    c = item.case
    kind = "benign" if item.copy == "clean" else c.kind
    return f"{item.spec}|{item.architecture}|{c.level}|{kind}|{item.track}"


def group_key(item: pytest.Item) -> str:
    """The item's group by the one rule (`distribute.group_of`), with its pair."""
    return group_of(item.nodeid, pair_of(item))


def pair_of(item: pytest.Item) -> str | None:
    """An indirect test's pair (its case's clean run id; a clean run may serve attacks of
    several files), else None."""
    if isinstance(item, VaultItem) and item.track == "indirect":
        return item.case.clean_id()
    return None


def apply_sample(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`--vault-sample` / `--vault-sample-benign`: keep the sampled cases, each with all
    of its items (models x tracks x architectures, or its decision test), and record the
    sample. Runs on the items left by -k, -m and --vault-level, before the shard, so that
    every worker, shard and machine computes the same sample from the same corpus."""
    vault = vault_of(config)
    opts = vault.options
    if opts.sample is None and opts.sample_benign is None:
        return
    from pytest_vault.corpus.sample import choose

    # Vault tests (evaluations and decision tests) are the items that carry a case; a
    # clean run serves the attacks on its task, and is kept with any of them.
    cases: dict[tuple[str, str], Case] = {}
    places: list[list[tuple[str, str]] | None] = []
    for item in items:
        case = getattr(item, "case", None)
        if isinstance(case, Case):
            served: Sequence[Case] = getattr(item, "serves", None) or (case,)
            places.append([(item.path.name, c.id) for c in served])
            cases.update(((item.path.name, c.id), c) for c in served)
        else:
            places.append(None)
    if not cases:
        return
    kept, record = choose(cases, opts.sample, opts.sample_benign, opts.seed)
    vault.sample = record.model_dump()
    keep = [where is None or not kept.isdisjoint(where) for where in places]
    if not all(keep):
        pairs = list(zip(items, keep, strict=True))
        config.hook.pytest_deselected(items=[item for item, k in pairs if not k])
        items[:] = [item for item, k in pairs if k]


class VaultFailure(VaultError):
    """A test outcome explained to people in one message, without a traceback: safe to
    print as every error of ours. Its fields are shown where it is composed, so that a
    line break in a recipient or a provider's error cannot split the message's lines."""


# The vault tests this process's corpus files make, before any selection (built-in node
# ids, -k, --lf, --deselect): what a results file of a subset says it is a subset of.
MADE: pytest.StashKey[int] = pytest.StashKey()


def counted(items: Iterator[pytest.Item], config: pytest.Config) -> Iterator[pytest.Item]:
    """The items, each vault test counted in `MADE` as it is made."""
    for item in items:
        if isinstance(item, VaultItem):
            config.stash[MADE] = config.stash.get(MADE, 0) + 1
        yield item


class CorpusFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        # A built-in file reached through node ids on the command line: those tests only.
        ids = [i for i in vault_of(self.config).corpora.ids if i.partition("::")[0] == self.nodeid]
        every = counted(self._items(), self.config)
        if not ids:
            yield from every
            return
        items = [i for i in every if named_by_ids(ids, i.nodeid)]
        for unmatched in (i for i in ids if not any(named_by_ids([i], t.nodeid) for t in items)):
            raise self.CollectError(f"{shown(unmatched)}: no such test in this run")
        yield from items

    def _items(self) -> Iterator[pytest.Item]:
        vault = vault_of(self.config)
        try:
            # The passports first: an indirect case's goal is checked against its level's.
            passports = {n: level.passport for n, level in vault.levels.items()}
            entries = load_corpus(self.path, vault.seen_ids, passports)
        except (CorpusError, PassportError) as exc:
            raise self.CollectError(str(exc)) from None
        # Keyed by node id (the path from the rootdir): two files of one name in two
        # folders are two files of the corpus.
        vault.corpus_digests[self.nodeid] = hashlib.sha256(self.path.read_bytes()).hexdigest()
        if self.config.getoption("vault_decisions"):
            from pytest_vault.plugin.decisions import collect

            yield from collect(self, entries)
            return
        opts = vault.options
        specs = [(spec, shown(spec)) for spec in opts.models]
        # Each evaluation's trials, one test each, side by side; one trial, no suffix.
        trials = [(t, f"-t{t}" if opts.trials > 1 else "") for t in range(1, opts.trials + 1)]
        # The attacks on each task and environment, across the run's files: their one
        # clean run per cell serves them all, and `-k` on any of them selects it too.
        served = vault.served
        for _, case in entries:
            pair = case.clean_id()
            if pair is not None and case.level in opts.levels and "indirect" in opts.tracks:
                served.setdefault(pair, []).append(case)
                for item in vault.clean_runs.get(pair, {}).values():  # from an earlier file
                    item.extra_keyword_matches.update((shown(case.id), *keywords(case)))
        for lineno, case in entries:
            if case.level not in opts.levels:
                continue
            # Made once per case and shared by its items: the plugin's memory for them
            # grows with the cases, never with the tests made of each.
            # Ids come from the corpus: shown, so no id is a terminal escape.
            case_id, words = shown(case.id), keywords(case)
            for spec, spec_shown in specs:
                for track in opts.tracks:
                    # An indirect case runs on the indirect track alone, a direct one never;
                    # only attacks are seeds of the adaptive attacker.
                    if (track == "indirect") != case.indirect or (
                        track == "adaptive" and case.kind != "attack"
                    ):
                        continue
                    for arch in opts.architectures:
                        for trial, suffix in trials:
                            if case.indirect:
                                yield from self._clean_run(
                                    lineno, case, spec, spec_shown, arch, trial, suffix
                                )
                            yield VaultItem.made(
                                self,
                                f"{case_id}[{spec_shown}-{track}-{arch}{suffix}]",
                                case=case,
                                lineno=lineno,
                                spec=spec,
                                track=track,
                                architecture=arch,
                                words=words,
                                trial=trial,
                            )

    def _clean_run(
        self,
        lineno: int,
        case: Case,
        spec: str,
        spec_shown: str,
        arch: Architecture,
        trial: int,
        suffix: str,
    ) -> Iterator[VaultItem]:
        """The paired clean run of an indirect case's cell, before its first attack (none
        when an earlier attack on the same task and environment made it): it matches `-k`
        on every attack it serves, so selecting an attack keeps its pair."""
        vault = vault_of(self.config)
        pair = case.clean_id()
        assert pair is not None
        made = vault.clean_runs.setdefault(pair, {})
        if (spec, arch, trial) in made:
            return
        cases = vault.served[pair]
        # Named for its task: the first attack it serves, at whose line it is (`source`),
        # as `--show` finds it again; its row keeps the pair's id (`attack_id`, `pair`).
        clean = made[spec, arch, trial] = VaultItem.made(
            self,
            f"{CLEAN}{shown(case.id)}[{spec_shown}-indirect-{arch}{suffix}]",
            case=case,
            lineno=lineno,
            spec=spec,
            track="indirect",
            architecture=arch,
            words=tuple(dict.fromkeys(w for c in cases for w in (shown(c.id), *keywords(c)))),
            copy="clean",
            serves=cases,
            trial=trial,
        )
        yield clean


def keywords(case: Case) -> tuple[str, ...]:
    """Extra words for -k: "-k 'level2 and forged_receipt'"."""
    technique = case.metadata.get("technique")
    words = (f"level{case.level}", case.category, case.kind, case.session)
    return (*words, technique) if isinstance(technique, str) else words


class VaultItem(pytest.Item):
    def __init__(
        self,
        *,
        case: Case,
        lineno: int,
        spec: str,
        track: Track,
        architecture: Architecture,
        words: tuple[str, ...] | None = None,
        copy: Copy = "attack",
        serves: Sequence[Case] = (),
        trial: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.lineno = lineno
        self.spec = spec
        self.track = track
        self.architecture = architecture
        # A paired clean run: the clean copy of `case`'s environment, serving `serves`.
        self.copy: Copy = copy
        self.serves = serves
        self.trial = trial
        self.extra_keyword_matches.update(keywords(case) if words is None else words)
        self.row: dict[str, Any] | None = None

    @classmethod
    def made(cls, parent: pytest.File, name: str, **kwargs: Any) -> VaultItem:
        """The item `name` under `parent`, its node id given as the string pytest's cache
        keeps: pytest >= 9.2 parses it into path, names and `[params]`, as it parses the
        ids of `--lf`, `--ff` and `--sw` (a name it derives keeps its brackets among the
        names, and would match none of them)."""
        return cls.from_parent(parent, name=name, nodeid=f"{parent.nodeid}::{name}", **kwargs)

    @property
    def job(self) -> Job:
        source = f"{self.nodeid.partition('::')[0]}:{self.lineno}"
        return Job(
            self.case,
            self.spec,
            self.track,
            self.architecture,
            self.copy,
            self.trial,
            key=self.nodeid,
            source=source,
        )

    def runtest(self) -> None:
        vault = vault_of(self.config)
        self.row = row = vault.result(self.job)
        self.user_properties.extend(vault.recorded(key, row[key]) for key in RECORDED)
        # A forbidden transfer that executed fails the test whatever came after it: an
        # evaluation cut short by an error or the spend cap does not undo a payment.
        if row["violation"] and (self.architecture == "guarded" or vault.options.strict):
            raise VaultFailure(f"{_violations(row, self.architecture)}\n{self.how_to_show()}")
        if row["status"] == "not_run":
            pytest.skip(f"not run: {shown(row['error'])}")
        if row["status"] == "error":
            raise VaultFailure(
                f"evaluation error (not counted as 'no transfer'): {shown(row['error'])}\n"
                f"{self.how_to_show()}"
            )

    def how_to_show(self) -> str:
        """The failure message's last line: the command that prints this evaluation's
        conversation, ready to copy (its node id quoted for a shell), or how to keep one."""
        from pytest_vault.report.transcript import command

        path = vault_of(self.config).options.results
        if path is None:
            said = command(self.nodeid, "RESULTS")
            return f"  keep its conversation: --vault-results RESULTS, then: {shown(said)}"
        here = self.config.invocation_params.dir
        written = path.relative_to(here) if path.is_relative_to(here) else path
        return f"  see it: {shown(command(self.nodeid, str(written)))}"

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, VaultFailure):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Any, int, str]:
        return self.path, self.lineno - 1, self.name


def _violations(row: dict[str, Any], architecture: str) -> str:
    lines = [f"{architecture}: a transfer the passport forbids executed"]
    for call in row["tool_calls"]:  # `harness.calls.Call`s
        audit, t = call.audit, call.transfer
        if call.executed and t is not None and (audit is None or not audit.allow):
            lines.append(
                f"  {Money(t.amount_minor, t.currency)} to "
                f"'{shown(t.recipient)}': "
                f"{', '.join(audit.codes) if audit else 'no audit decision'}"
            )
    return "\n".join(lines)


def planned(items: list[pytest.Item]) -> dict[str, int]:
    """Evaluations per coverage cell."""
    counts: dict[str, int] = {}
    for item in items:
        if isinstance(item, VaultItem):
            key = cell_key(item)
            counts[key] = counts.get(key, 0) + 1
    return counts
