"""`--vault-plan[=json]`: what the collected run would cost, printed instead of running
it; and the evaluations a run plans, per coverage cell."""

from __future__ import annotations

import pytest

from pytest_vault.plugin.session import VAULT


def planned(items: list[pytest.Item]) -> dict[str, int]:
    """Evaluations per coverage cell."""
    from pytest_vault.plugin.collect import VaultItem, cell_key

    counts: dict[str, int] = {}
    for item in items:
        if isinstance(item, VaultItem):
            key = cell_key(item)
            counts[key] = counts.get(key, 0) + 1
    return counts


def without_workers(config: pytest.Config) -> None:
    """A plan runs nothing, so it distributes nothing: `-n N` is turned off (after
    xdist's tryfirst `pytest_cmdline_main` read it, before its configure starts workers),
    as xdist itself stays out of `--collect-only`. What is left is what `-n 0` leaves."""
    if config.getoption("vault_plan") is not None and hasattr(config.option, "dist"):
        config.option.numprocesses = 0
        config.option.dist = "no"
        config.option.tx = []


@pytest.hookimpl(tryfirst=True, specname="pytest_runtestloop")
def pytest_runtestloop_plan(session: pytest.Session) -> bool | None:
    """`--vault-plan`: print the plan of the collected items and run none of them."""
    config = session.config
    vault = config.stash[VAULT]
    if vault.options.plan is None:
        return None
    if session.testsfailed and not config.option.continue_on_collection_errors:
        return None  # pytest's own loop stops on the collection errors: no partial plan
    from pytest_vault.models.plan import render
    from pytest_vault.plugin.collect import VaultItem
    from pytest_vault.plugin.outputs import stream

    plans = vault.plan([item.job for item in session.items if isinstance(item, VaultItem)])
    if vault.options.plan == "json":
        from pytest_vault.core.text import json_text

        stream(config, "stdout", json_text([p.record() for p in plans], indent=2) + "\n")
        return True
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        stream(config, "stdout", "".join(line + "\n" for line in render(plans)))
        return True
    reporter.section("pytest-vault plan")
    for line in render(plans):
        reporter.write_line(line)
    return True


@pytest.hookimpl(trylast=True, specname="pytest_configure")
def pytest_configure_plan_output(config: pytest.Config) -> None:
    """`--vault-plan=json`: stdout holds the JSON document alone, so pytest's own lines
    (header, warnings, summaries) go to stderr."""
    if config.getoption("vault_plan") != "json":
        return
    import sys

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        config.pluginmanager.unregister(reporter, "terminalreporter")
        config.pluginmanager.register(
            pytest.TerminalReporter(config, sys.stderr), "terminalreporter"
        )
