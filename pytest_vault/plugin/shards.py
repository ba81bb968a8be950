"""A shard's run: its share of the items, its manifest and its budget slice.

Where the shard comes from (`--vault-shard K/N`, or `auto`: the CI engine's variables) is
`shard_engines.py`'s. Each shard records a manifest in its results
(`report.results.Manifest`): its run, which shard, and the cells it owns, counted and
summed, so a merge tells shards apart by content. Under Bazel's sharding the shard
touches `TEST_SHARD_STATUS_FILE`, and a shard that owns no test passes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_vault.core.text import shown
from pytest_vault.plugin.shard_engines import STATUS_FILE, source

if TYPE_CHECKING:
    from pytest_vault.plugin.collect import VaultItem
    from pytest_vault.plugin.session import VaultSession


def configure(config: pytest.Config, vault: VaultSession) -> None:
    """A shard's setup before anything runs: under Bazel's sharding, touch its status
    file (its protocol: the runner says it shards; else Bazel runs every test in every
    shard); and let a shard that owns no test pass."""
    shard = vault.options.shard
    if shard is None:
        return
    from_where = source(shard, os.environ)
    status = os.environ.get(STATUS_FILE)
    if from_where.startswith("Bazel ") and status and not hasattr(config, "workerinput"):
        try:
            Path(status).touch()
        except OSError as exc:
            from pytest_vault.core.errors import reason

            said = f"{STATUS_FILE}={shown(status)}: cannot write: {shown(reason(exc))}"
            raise pytest.UsageError(said) from None
    config.pluginmanager.register(ShardHooks(), "vault-shard")


class ShardHooks:
    """A shard that owns no test passes (pytest's own status would be "no tests
    collected"): it ran its share, nothing, and its results file says so. Under xdist,
    the controller (which collects nothing) says the shard's line at the end."""

    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, config: pytest.Config
    ) -> None:
        from pytest_vault.plugin.session import VAULT
        from pytest_vault.plugin.xdist import is_controller

        manifest = config.stash[VAULT].manifest
        if manifest is not None and is_controller(config):
            terminalreporter.write_line(line(manifest))

    # Last: syrupy's own hook ORs pytest's status back in.
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from pytest_vault.plugin.session import VAULT

        vault = session.config.stash[VAULT]
        ours = vault.collected or bool(vault.corpus_digests)
        if (
            ours
            and not vault.unwritten
            and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED
        ):
            session.exitstatus = pytest.ExitCode.OK


def cell_id(item: VaultItem) -> str:
    """A cell, as its row names it: `attack|model|track|architecture|trial` (a clean
    run's attack is its clean run id)."""
    attack = item.case.clean_id() if item.copy == "clean" else item.case.id
    return f"{attack}|{item.spec}|{item.track}|{item.architecture}|{item.trial}"


def select(config: pytest.Config, vault: VaultSession, items: list[pytest.Item]) -> None:
    """Keep this shard's items; record what it owns of the run, and its budget slice."""
    from pytest_vault.plugin.collect import VaultItem, group_key
    from pytest_vault.report.results import cells_sum

    shard = vault.options.shard
    assert shard is not None
    k, n = shard
    # Whole groups (a case and a model: its tracks and architectures share requests) in
    # sorted order, dealt round-robin: balanced, and stable across machines.
    groups = sorted({group_key(item) for item in items})
    mine = {g for i, g in enumerate(groups) if i % n == k - 1}
    keep = [item for item in items if group_key(item) in mine]
    dropped = [item for item in items if group_key(item) not in mine]
    run = [item for item in items if isinstance(item, VaultItem)]
    owned = [item for item in keep if isinstance(item, VaultItem)]
    vault.manifest = {
        "shard": f"{k}/{n}",
        "source": source(shard, os.environ),
        "cells": len(owned),
        "cells_sum": cells_sum(map(cell_id, owned)),
        "run_cells": len(run),
        "run_cells_sum": cells_sum(map(cell_id, run)),
        "budget_usd": None,
    }
    budget = vault.options.budget_usd
    if budget is not None and vault.options.plan is None:
        from pytest_vault.models.plan import budget_slice
        from pytest_vault.plugin.plan import plan_of

        # An xdist worker's budget is its share of the run's (`Options.share_of`): the
        # slice is the run's budget's, and the worker stops at its share of the slice.
        workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
        mine_plan = plan_of(vault, [i.job for i in owned])
        cut = budget_slice(budget * workers, mine_plan, plan_of(vault, [i.job for i in run]))
        vault.maker.spend.cap_usd = cut.usd / workers  # today's budget stop, at the slice
        vault.manifest["budget_usd"] = cut.usd
        vault.manifest["said"] = cut.said()
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(config, "workerinput"):
        reporter.write_line(line(vault.manifest))


def line(manifest: Mapping[str, Any]) -> str:
    """The shard's output line: `pytest-vault: shard 1/2 (GitLab CI_NODE_INDEX=1
    CI_NODE_TOTAL=2): 30 of 60 evaluations; budget slice $0.40 of $1.00 (...)`."""
    said = (
        f"pytest-vault: shard {manifest['shard']} ({shown(manifest['source'])}): "
        f"{manifest['cells']:,} of {manifest['run_cells']:,} evaluations"
    )
    return said + (f"; {manifest['said']}" if manifest.get("said") else "")
