"""pytest entry point (`-p vault`, `-p no:vault`). Hooks only, each forwarding to where
its concern lives: the options (`options.py`, checked in `checks.py`), the session state
(`session.py`), collection (`collect.py`), the plan (`plan.py`), progress
(`progress.py`), xdist (`xdist.py`, `distribute.py`) and the outputs and baseline gate
(`outputs.py`). Everything heavy (pydantic, pyarrow, the SDKs) is imported on first use,
so `pytest --help` and runs without a corpus stay fast.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_vault.plugin.checks import (
    asks,
    from_file,
    nothing_collected,
    only_informs,
    origin,
    settle,
)
from pytest_vault.plugin.corpora import corpora_of, take_args
from pytest_vault.plugin.options import add_options
from pytest_vault.plugin.outputs import (
    pytest_collection_finish,
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
)
from pytest_vault.plugin.plan import (
    pytest_configure_plan_output,
    pytest_runtestloop_plan,
    without_workers,
)
from pytest_vault.plugin.session import VAULT, VaultSession
from pytest_vault.plugin.xdist import is_worker

if TYPE_CHECKING:
    from pytest_vault.harness.agent import Job

# Hooks that live with their concern, registered through this module.
__all__ = [
    "pytest_collection_finish",
    "pytest_configure_plan_output",
    "pytest_runtestloop_plan",
    "pytest_sessionfinish",
    "pytest_sessionstart",
    "pytest_terminal_summary",
]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_vault.plugin import hookspecs
    from pytest_vault.plugin.specs import Builtin

    pluginmanager.add_hookspecs(hookspecs)
    pluginmanager.register(Builtin(), "vault-specs")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_cmdline_main(config: pytest.Config) -> None:
    settle(config)  # a plan asked for in the config file turns xdist off as well
    without_workers(config)


def pytest_configure(config: pytest.Config) -> None:
    from pytest_vault.plugin.checks import options_of, preflight

    settle(config)
    if only_informs(config):
        return  # no session follows: nothing of ours is made
    options = options_of(config)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        options = options.share_of(int(workerinput["workercount"]))
    vault = config.stash[VAULT] = VaultSession(options, hook=config.hook)
    from_config = from_file(config, "vault_corpus")
    vault.corpora = corpora_of(config, origin(config, "vault_corpus"), from_config)
    take_args(config, vault.corpora, from_config)
    if workerinput is None:
        preflight(vault)
    if options.shard is not None:
        from pytest_vault.plugin.shards import configure as configure_shard

        configure_shard(config, vault)
    if workerinput is None:
        from pytest_vault.plugin.rows import LastAttempts

        config.pluginmanager.register(LastAttempts(vault.store), "vault-attempts")
    if config.pluginmanager.hasplugin("syrupy"):
        from pytest_vault.plugin.decisions import hide_from_other_extensions

        hide_from_other_extensions(config)
    if config.getoption("vault_decisions"):
        from pytest_vault.plugin.decisions import configure as configure_decisions

        configure_decisions(config)
    if workerinput is None and options.progress_s > 0:
        from pytest_vault.plugin.progress import Progress

        config.pluginmanager.register(Progress(config, options.progress_s), "vault-progress")
    if config.pluginmanager.hasplugin("xdist"):
        from pytest_vault.plugin.xdist import XdistHooks

        config.pluginmanager.register(XdistHooks(config), "vault-xdist")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    vault = parent.config.stash[VAULT]
    if file_path.suffix == ".jsonl" and vault.corpora.takes(file_path):
        from pytest_vault.plugin.collect import CorpusFile

        vault.collected = True
        return CorpusFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """The built-in corpus files join the session's own collectors: they are no path of
    the user's (`builtin/level-2.jsonl`, wherever the package is installed)."""
    report = yield
    vault = collector.config.stash[VAULT]
    if vault.corpora.builtin and isinstance(collector, pytest.Session) and report.passed:
        from pytest_vault.corpus.builtin import nodeid
        from pytest_vault.plugin.collect import CorpusFile
        from pytest_vault.plugin.corpora import last_failed

        vault.collected = True
        last_failed(collector.config, vault.corpora.builtin)
        for path in vault.corpora.builtin:
            report.result.append(CorpusFile.from_parent(collector, path=path, nodeid=nodeid(path)))
    return report


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep this sample's and shard's items (after -k, -m and, for decision tests,
    --vault-level), and count what the run plans."""
    vault = config.stash[VAULT]
    shard = vault.options.shard
    if not vault.collected and not is_worker(config):  # xdist: the controller says it
        unheard = nothing_collected(config)
        if unheard is not None:
            raise pytest.UsageError(unheard)
    if not vault.collected and shard is None:
        return  # nothing of ours: the run stays exactly the user's (and imports nothing)
    from pytest_vault.plugin.collect import apply_sample, planned

    if config.getoption("vault_decisions"):
        from pytest_vault.plugin.decisions import deselect_levels

        deselect_levels(config, items)
    # The sample before the shard: every shard takes its share of the same sample.
    apply_sample(config, items)
    vault.planned_run = planned(items)
    if shard is not None:
        from pytest_vault.plugin.shards import select

        select(config, vault, items)  # its share, its manifest and its budget slice
    vault.planned = planned(items)


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    """Start evaluating this process's share ahead of the tests; stop when they end."""
    vault = session.config.stash[VAULT]
    # --collect-only and --vault-plan: no test runs, so nothing is evaluated, asked or cached.
    jobs = _share(session) if vault.collected and asks(session.config) else []
    if jobs:
        vault.start(jobs)
    try:
        return (yield)
    finally:
        vault.close()


def _share(session: pytest.Session) -> list[Job]:
    from pytest_vault.plugin.collect import VaultItem

    items = session.items
    indices: set[int] | None = set(range(len(items)))
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is not None:
        from pytest_vault.plugin.collect import pair_of
        from pytest_vault.plugin.distribute import worker_share

        pairs = {item.nodeid: p for item in items if (p := pair_of(item)) is not None}
        indices = worker_share(workerinput, [item.nodeid for item in items], pairs)
    if indices is None:  # another --dist mode: this worker's tests are not known ahead
        return []
    return [
        item.job for i, item in enumerate(items) if i in indices and isinstance(item, VaultItem)
    ]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    row = getattr(item, "row", None)
    if call.when == "call" and row is not None:
        # The store has the row: the item (kept to the end of the run) lets go of it.
        item.row = None  # type: ignore[attr-defined]
        vault: VaultSession = item.config.stash[VAULT]
        stats = vault.maker.stats
        # An attribute that travels with the report to the xdist controller (the row's
        # call log as plain tuples: `xdist.XdistHooks.pytest_report_to_serializable`).
        report.vault = {  # type: ignore[attr-defined]
            # The row itself rides along: an xdist worker that crashes later has already
            # delivered every row it finished.
            "row": row,
            "status": row["status"],
            "in_flight": vault.in_flight,
            "requests": stats.requests,
            "retries": stats.retries,
            # The ledger: what was billed and saved (the progress line, the last line).
            "spend": vault.maker.spend.record(),
            "unstored": stats.unstored,
            "unstored_reason": stats.unstored_reason,
        }
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> Generator[None, None, None]:
    """`report.vault` is read while the report is logged (the progress line; the xdist
    controller takes the row, a worker sends it): then it goes, since pytest keeps every
    report to the end of the run."""
    try:
        return (yield)
    finally:
        if hasattr(report, "vault"):
            delattr(report, "vault")
