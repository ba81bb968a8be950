"""Progress lines for a person watching a long run (`--vault-progress SECONDS`)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pytest_vault.plugin.xdist import worker_of


class Progress:
    """Progress lines for a person watching a long run: done, in flight, errors,
    tokens and spend. On the controller under xdist, from the workers' reports.

    A line says something pytest's own dots do not: one is printed (at most every
    `every` seconds) only when a count besides done and in flight moved since the last
    line: requests, retries, answers from the cache, tokens, spend, errors or
    evaluations not run. The controls ask nothing, so their runs print none."""

    WORKER_FIELDS = ("in_flight", "requests", "retries", "cache_hits", "spent_usd")
    NEWS = ("requests", "retries", "cache_hits", "spent_usd")  # summed over the workers

    def __init__(self, config: pytest.Config, every: float) -> None:
        self.config, self.every = config, every
        self.last = time.monotonic()
        self.done = self.errors = self.not_run = self.tokens_in = self.tokens_out = 0
        self.workers: dict[str, dict[str, Any]] = {}
        self.said = self.news()  # what the last line said (nothing yet)

    # After the terminal reporter has written this test's result on its line.
    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        info = getattr(report, "vault", None)
        if report.when != "call" or not isinstance(info, dict):
            return
        self.done += 1
        self.errors += info["status"] == "error"
        self.not_run += info["status"] == "not_run"
        self.tokens_in += info["input_tokens"]
        self.tokens_out += info["output_tokens"]
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

    def news(self) -> tuple[float, ...]:
        """The counts a line is printed for."""
        total = [sum(w[k] for w in self.workers.values()) for k in self.NEWS]
        return (self.errors, self.not_run, self.tokens_in, self.tokens_out, *total)

    def line(self) -> str:
        total = {k: sum(w[k] for w in self.workers.values()) for k in self.WORKER_FIELDS}
        return (
            f"vault: {self.done:,} done ({self.errors} errors, {self.not_run} not run), "
            f"{total['in_flight']} in flight; {total['requests']:,} requests, "
            f"{total['retries']} retries, {total['cache_hits']:,} from cache; "
            f"tokens {self.tokens_in:,} in / {self.tokens_out:,} out; "
            f"spent ${total['spent_usd']:.2f}"
        )
