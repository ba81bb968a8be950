"""Under pytest-xdist: the tests shared out upfront (`distribute.py`), and the workers'
rows and records merged on the controller. Registered only when xdist is present."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from pytest_vault.plugin.session import VAULT

WORKER_OUTPUT = "pytest_vault"


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def is_controller(config: pytest.Config) -> bool:
    """An xdist controller: it runs no test itself, its workers report to it."""
    return config.pluginmanager.hasplugin("dsession")


def worker_of(report: pytest.TestReport) -> str:
    """The xdist worker a report came from (`gw0`...), or "main" for this process's own."""
    return str(getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main"))


class XdistHooks:
    """Share the tests upfront, and merge worker rows on the controller."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def _sharing(self) -> bool:
        return bool(self.config.getvalue("dist") == "load")

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if not self._sharing():
            return None
        from pytest_vault.plugin.distribute import ShareScheduling

        return ShareScheduling(config, log)

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["vault_share"] = self._sharing()

    @pytest.hookimpl(wrapper=True)
    def pytest_report_to_serializable(self, report: pytest.TestReport) -> Generator[None, Any, Any]:
        """A worker's report as it is sent: the row's call log (`harness.calls.Call`s,
        which execnet cannot carry) as plain tuples (`calls.sent`); the row itself, kept
        by the worker's own store, as it was."""
        data = yield
        info = data.get("vault") if isinstance(data, dict) else None
        if isinstance(info, dict) and isinstance(info.get("row"), dict):
            from pytest_vault.harness.calls import sent

            row = info["row"]
            data["vault"] = {**info, "row": {**row, "tool_calls": sent(row["tool_calls"])}}
        return data

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        info = getattr(report, "vault", None)
        if report.when == "call" and isinstance(info, dict) and is_controller(self.config):
            from pytest_vault.harness.calls import received

            vault = self.config.stash[VAULT]
            row = info["row"]
            vault.store.add(report.nodeid, {**row, "tool_calls": received(row["tool_calls"])})
            vault.ledgers[worker_of(report)] = (info["spend"], False)  # its running ledger
            if info["unstored"]:  # a worker's running count: its latest report has it
                vault.unstored[worker_of(report)] = (info["unstored"], info["unstored_reason"])

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT, {})
        vault = self.config.stash[VAULT]
        vault.corpus_digests.update(output.get("corpus", {}))
        vault.passports = vault.passports or output.get("passports", {})
        vault.decode.update(output.get("decode", {}))
        # Every worker collects (and plans) the same items: any one's count is the run's.
        vault.planned = vault.planned or output.get("planned", {})
        vault.planned_run = vault.planned_run or output.get("planned_run", {})
        vault.manifest = vault.manifest or output.get("manifest")
        if "spend" in output:  # its last ledger
            vault.ledgers[str(node.gateway.id)] = (output["spend"], True)
        if "sample" in output:  # a worker that crashed before the end reports nothing
            vault.worker_sample(output["sample"])
