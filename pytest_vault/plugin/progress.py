"""Progress lines for a person watching a long run (`--vault-progress SECONDS`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from pytest_vault.plugin.session import vault_of
from pytest_vault.plugin.xdist import worker_of

if TYPE_CHECKING:
    from pytest_vault.models.ratelimit import Spend


class Progress:
    """Progress lines for a person watching a long run: done, in flight, errors,
    answers billed and saved, tokens and spend. On the controller under xdist, from the
    workers' reports.

    Answers, tokens and money are the run's ledger (`VaultSession.spent`): each answer
    a provider billed counted once, what reuse and the cache saved apart; the same
    figure the spend cap stops at and the run's last line says. A line is printed (at
    most every `every` seconds) only when a count besides done and in flight moved since
    the last line: requests, retries, answers, tokens, spend, errors or evaluations not
    run. The controls ask nothing, so their runs print none."""

    WORKER_FIELDS = ("in_flight", "requests", "retries")
    NEWS = ("requests", "retries")  # summed over the workers

    def __init__(self, config: pytest.Config, every: float) -> None:
        self.config, self.every = config, every
        self.last = time.monotonic()
        self.done = self.errors = self.not_run = 0
        self.workers: dict[str, dict[str, Any]] = {}
        # What the last line said: nothing yet, as `news` of a run that asked nothing
        # (not asked here: a run of none of ours imports no ledger).
        self.said: tuple[float, ...] = (0,) * 8

    # After the terminal reporter has written this test's result on its line (and after
    # the xdist controller took the worker's ledger).
    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        info = getattr(report, "vault", None)
        if report.when != "call" or not isinstance(info, dict):
            return
        self.done += 1
        self.errors += info["status"] == "error"
        self.not_run += info["status"] == "not_run"
        self.workers[worker_of(report)] = {k: info[k] for k in self.WORKER_FIELDS}
        now = time.monotonic()
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if now - self.last < self.every or reporter is None:
            return
        news = self.news()
        if news == self.said:
            return
        self.last, self.said = now, news
        # A line of its own: the reporter ends a line it knows it opened (a file's
        # dots, a test's name under -v), but not `-q`'s dots, which name no file.
        reporter.ensure_newline()
        if self.config.get_terminal_writer().width_of_current_line:
            reporter.write("\n")
        reporter.write_line(self.line())

    def _ledger(self) -> Spend:
        from pytest_vault.models.ratelimit import Spend

        spent = vault_of(self.config).spent()
        return Spend() if spent is None else spent[0]

    def news(self) -> tuple[float, ...]:
        """The counts a line is printed for."""
        total = [sum(w[k] for w in self.workers.values()) for k in self.NEWS]
        ledger = self._ledger()
        return (
            self.errors,
            self.not_run,
            *total,
            *ledger.totals(),
            ledger.totals(saved=True)[0],
        )

    def line(self) -> str:
        total = {k: sum(w[k] for w in self.workers.values()) for k in self.WORKER_FIELDS}
        ledger = self._ledger()
        billed, tokens_in, tokens_out = ledger.totals()
        saved = ledger.totals(saved=True)[0]
        return (
            f"vault: {self.done:,} done ({self.errors} errors, {self.not_run} not run), "
            f"{total['in_flight']} in flight; {total['requests']:,} requests, "
            f"{total['retries']} retries; {billed:,} answers billed, {saved:,} reused or "
            f"cached; tokens {tokens_in:,} in / {tokens_out:,} out; "
            f"spent {ledger.figure()}{ledger.budget()}"
        )
