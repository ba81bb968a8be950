"""What a run leaves at its end: the results file, the HTML report and the exported finds,
the summary, and the baseline gate (read at the start, its verdict at the end)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pytest

from pytest_vault.core.text import shown
from pytest_vault.plugin.checks import asks, named_flags, nothing_collected
from pytest_vault.plugin.record import metadata
from pytest_vault.plugin.session import VAULT, VaultSession
from pytest_vault.plugin.xdist import WORKER_OUTPUT, is_controller, is_worker

if TYPE_CHECKING:
    from pytest_vault.report.baseline import Baseline, Gate

BASELINE: pytest.StashKey[Baseline] = pytest.StashKey()
GATE: pytest.StashKey[Gate] = pytest.StashKey()
# What the summary's `results:` line adds when the file holds less than a whole run.
SUBSET: pytest.StashKey[str] = pytest.StashKey()
# When the session started (unix nanoseconds): the traces of `--vault-otel` start there.
STARTED: pytest.StashKey[int] = pytest.StashKey()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Read the baseline before anything is collected or a worker starts: a file that
    cannot be used is one line, and nothing runs."""
    config = session.config
    opts = config.stash[VAULT].options
    if not is_worker(config):
        import time

        config.stash[STARTED] = time.time_ns()
        _otel_key(opts.otel, opts.otel_key_env)
    if opts.baseline is None or is_worker(config) or config.getoption("vault_decisions"):
        return
    from pytest_vault.report.baseline import BaselineError, check_trials, read_baseline

    try:
        baseline = read_baseline(opts.baseline, opts.baseline_model)
        check_trials(baseline, opts.baseline, opts.trials)
        config.stash[BASELINE] = baseline
    except BaselineError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse a baseline of another corpus version as soon as this run's corpus is known:
    after collection, before any evaluation (xdist workers evaluate right after it).

    First, count again what runs, now that every plugin has selected: pytest's `--lf` and
    `--ff` wrap every `pytest_collection_modifyitems` and deselect after ours, and a rerun
    of the last failures plans them alone, never a run "cut short" of the rest."""
    config = session.config
    vault = config.stash[VAULT]
    opts = vault.options
    if vault.collected:
        from pytest_vault.plugin.collect import planned

        if opts.shard is None:  # a shard's whole run is not this process's to count
            vault.planned_run = planned(session.items)
        vault.planned = planned(session.items)
    if opts.baseline is None or opts.baseline_any_corpus or not vault.corpus_digests:
        return
    if config.getoption("vault_decisions"):
        return
    from pytest_vault.report.baseline import BaselineError, check_corpus, read_corpus

    meta = metadata(vault)
    try:
        base = config.stash.get(BASELINE, None)
        theirs = (base.corpus_digest, base.corpus_files) if base else read_corpus(opts.baseline)
        check_corpus(opts.baseline, theirs, (meta["corpus_digest"], meta["corpus_files"]))
    except BaselineError as exc:
        if not is_worker(config):
            raise pytest.UsageError(str(exc)) from None
        # A worker cannot end the run with a usage error (xdist reports a crash): it
        # reports one collection error, which the controller shows, and runs nothing.
        session.items.clear()
        report = pytest.CollectReport("", "failed", str(exc), [])
        config.hook.pytest_collectreport(report=report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    vault = config.stash[VAULT]
    vault.close()
    if is_worker(config):
        config.workeroutput[WORKER_OUTPUT] = {  # type: ignore[attr-defined]
            "corpus": vault.corpus_digests,
            "passports": vault.passports,
            "decode": vault.decode_record(),
            "planned": vault.planned,
            "planned_run": vault.planned_run,
            "manifest": vault.manifest,
            "sample": vault.sample,
            "spend": vault.maker.spend.record(),
        }
        return
    if not asks(config):
        return  # nothing ran: nothing is written
    ours = vault.collected or bool(vault.corpus_digests)  # a worker's collection counts
    unheard = None if ours or not is_controller(config) else nothing_collected(config)
    if unheard is not None:  # a run alone said so at collection, before any test ran
        stream(config, "stderr", f"ERROR: {unheard}\n")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    vault.stopped = stopped(session)
    # Every row is in (the workers' too): each attacked run meets its clean run.
    vault.store.attribute()
    # The gate first: its verdict is the reports' too.
    baseline = config.stash.get(BASELINE, None)
    gate = None
    store, opts = vault.store, vault.options
    if baseline is not None and store:
        from pytest_vault.report.baseline import compare, verdict_line

        gate = config.stash[GATE] = compare(
            store.results(), baseline, metadata=metadata(vault), subset=opts.baseline_subset
        )
        vault.gate_verdict = verdict_line(gate)
        vault.gate_regressed = gate.record()["regressed"]
    # The results file is written from the rows a row group at a time; one table of
    # them, made a column at a time, serves the other writers. Never a list of the
    # run's rows as dicts.
    outputs: list[tuple[str, Path | None, Callable[[VaultSession, Path], None]]] = [
        # A shard that owns nothing writes its file too: its manifest says it ran.
        ("--vault-results", opts.results if store or opts.shard else None, _write_results),
        ("--vault-export-found", opts.export_found, _write_found),
        ("--vault-report", opts.report if store else None, _write_report),
        # After the results file: a collector that fails never costs it.
        ("--vault-otel", opts.otel if store else None, functools.partial(_write_otel, config)),
    ]
    if gate is not None:  # the gate's verdict stands whether or not its file is written
        write_gate = functools.partial(_write_gate, gate)
        outputs.append(("--vault-baseline-out", opts.baseline_out, write_gate))
    if opts.results is not None and store:
        subset = _subset(config, len(store), opts.results)
        if subset is not None:
            config.stash[SUBSET] = subset
    # Each output is tried: one that fails (a full disk) is one line, never the others.
    for option, path, write in outputs:
        if path is None:
            continue
        try:
            write(vault, path)
        except OSError as exc:
            from pytest_vault.core.errors import reason

            vault.unwritten[option] = path
            said = f"{option} {shown(path)}: cannot write: {shown(reason(exc))}"
            stream(config, "stderr", f"ERROR: {said}\n")
    if gate is not None:
        from pytest_vault.report.baseline import EXIT_REGRESSION

        # Like syrupy's unused snapshots: the run fails even when every test passed.
        if gate.failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = EXIT_REGRESSION
    elif baseline is not None and (ours or "--vault-baseline" in named_flags(config)):
        # Asked for and not run: never a pass. (Only a baseline in the config file, on a
        # run of the user's own tests, asks for nothing.)
        from pytest_vault.report.baseline import EXIT_GATE_NOT_RUN

        planned = sum(vault.planned.values())
        vault.gate_not_run = (
            f"none of the {planned} planned vault evaluations ran"
            if planned
            else "no vault test was selected"
        )
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = EXIT_GATE_NOT_RUN
    hidden = store.rerun_violations(opts.strict)
    if hidden:  # its test passed on a rerun: the run must not
        said = ", ".join(shown(key) for key in hidden[:3]) + (", ..." if len(hidden) > 3 else "")
        stream(
            config,
            "stderr",
            f"ERROR: a forbidden transfer executed in an attempt of {len(hidden)} test(s) "
            f"that a rerun then passed; it counts: {said}\n",
        )
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if vault.unwritten and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _subset(config: pytest.Config, written: int, path: Path) -> str | None:
    """Whether the results file about to be written holds less than a whole run, in
    words: the file is always written whole with what ran (a selection is a run too), and
    the summary says so when the run selected some of the vault tests it collected (a
    node id, -k, --lf, --deselect, a sample or a shard), or when it replaces a file that
    held more evaluations (under xdist, where only the workers collect). None: neither."""
    from pytest_vault.plugin.collect import MADE

    collected = config.stash.get(MADE, 0)
    if written < collected:
        return f"a subset: {written:,} of the {collected:,} vault tests of its corpus files"
    before = _rows_in(path)
    if before is not None and before > written:
        return f"a subset: {written:,} evaluations; it replaced a file of {before:,}"
    return None


def _rows_in(path: Path) -> int | None:
    """The evaluations a results file there holds (its footer alone is read); None where
    there is none, or none that reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return int(pq.read_metadata(path).num_rows) if path.is_file() else None
    except (OSError, ValueError, pa.ArrowException):
        return None


def stopped(session: pytest.Session) -> str | None:
    """Why the run stopped before its end, in words (pytest's own for -x, --maxfail and a
    plugin's stop); None: it ran to its end. Under xdist, the controller's."""
    if session.exitstatus == pytest.ExitCode.INTERRUPTED:
        return "interrupted (Ctrl-C or a signal)"
    said = session.shouldfail or session.shouldstop
    return str(said) if said else None


def _write_gate(gate: Gate, vault: VaultSession, path: Path) -> None:
    """`--vault-baseline-out`: the gate as JSON, for the CI job's artifacts."""
    from pytest_vault.core.files import write_text
    from pytest_vault.core.text import json_text

    write_text(path, json_text(gate.record(), indent=2) + "\n")


def _write_results(vault: VaultSession, path: Path) -> None:
    vault.store.write_results(path, metadata(vault))


def _write_report(vault: VaultSession, path: Path) -> None:
    from pytest_vault.core.files import replacing
    from pytest_vault.report.html import write_html

    with replacing(path) as partial:
        write_html(vault.store.results(), [metadata(vault)], partial)


def _otel_key(otel: Path | None, name: str | None) -> bytes | None:
    """The input hash's key, from the variable `--vault-otel-key-env` names (None: no
    hash); a variable unset or empty, or no `--vault-otel`, is one line before anything
    runs. The key itself is never written, nor said."""
    if name is None:
        return None
    if otel is None:
        raise pytest.UsageError("--vault-otel-key-env needs --vault-otel")
    import os

    from pytest_vault.core.extras import needs

    missing = needs("rfc8785", "otel", "--vault-otel-key-env (RFC 8785 canonical arguments)")
    if missing is not None:
        raise pytest.UsageError(missing)
    key = os.environ.get(name, "")
    if not key:
        raise pytest.UsageError(
            f"--vault-otel-key-env {shown(name)}: the variable is not set or is empty, so "
            "there is no key to hash the guardrail spans' input with"
        )
    return key.encode("utf-8", "surrogateescape")


def _write_otel(config: pytest.Config, vault: VaultSession, path: Path) -> None:
    """`--vault-otel`: the rows as OTLP/JSON traces, written whole; then, where the
    standard variables name a collector, the same spans sent to it. A collector that
    refuses, is down, or cannot be reached without the `[otel]` extra is one warning
    line: the file and the results stand, and the exit status is the run's."""
    import os
    import time
    import uuid

    from pytest_vault.report.otel import (
        Run,
        endpoint,
        send,
        table_request,
        unsendable,
        write_otlp,
    )

    opts = vault.options
    start = config.stash.get(STARTED, None) or time.time_ns()
    meta = metadata(vault)
    # A shard's traces carry its run's id (the manifest's, the same in every shard), so
    # the shards of one run group as one; an unsharded run's is its own.
    manifest = meta.get("manifest") or {}
    run = Run(
        str(manifest.get("run") or uuid.uuid4().hex),
        start,
        _otel_key(opts.otel, opts.otel_key_env),
    )
    request = table_request(vault.store.results(), meta, run)
    write_otlp(path, request)
    where = endpoint(os.environ)
    if where is None:
        return
    said = unsendable() or send(request, where)
    if said is not None:
        stream(config, "stderr", f"WARNING: --vault-otel: {said}; {shown(path)} is written\n")


def _write_found(vault: VaultSession, path: Path) -> None:
    """`--vault-export-found`: the adaptive finds as corpus lines, sorted (so any
    parallelism writes the same file); no find, an empty file."""
    from pytest_vault.core.files import write_text
    from pytest_vault.corpus.export import found_file

    text, vault.repaired_finds = found_file(vault.store.found() if vault.store else [])
    write_text(path, text)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    vault = config.stash[VAULT]
    if vault.gate_not_run is not None:
        from pytest_vault.report.baseline import EXIT_GATE_NOT_RUN

        terminalreporter.section("pytest-vault baseline")
        terminalreporter.write_line(
            f"Gate not run: {vault.gate_not_run} (exit status {EXIT_GATE_NOT_RUN})", red=True
        )
    spent = vault.spent()
    # What the run spent on real models, in one line (the ledger the cap stops at).
    spend = None if spent is None else spent[0].line(whole=spent[1])
    if not vault.store:
        if spend is not None:  # paid for, though no row came of it
            terminalreporter.section("pytest-vault summary")
            terminalreporter.write_line(spend)
        return
    from pytest_vault.report.summary import render

    terminalreporter.section("pytest-vault summary")
    planned = sum(vault.planned.values())
    specs = vault.options.specs
    controls = {m for m in vault.options.models if m in specs and specs[m].offline}
    for line in render(vault.rows, vault.sample, planned, vault.stopped, controls):
        terminalreporter.write_line(line)
    if spend is not None:
        terminalreporter.write_line(spend)
    for label, option, path in (
        ("results", "--vault-results", vault.options.results),
        ("report", "--vault-report", vault.options.report),
        ("otel", "--vault-otel", vault.options.otel),
    ):
        if path is not None and option not in vault.unwritten:
            said = config.stash.get(SUBSET, None) if label == "results" else None
            terminalreporter.write_line(
                f"{label}: {shown(path)}" + ("" if said is None else f" ({said})"),
                yellow=said is not None,
            )
    repaired = vault.repaired_finds
    if repaired:
        terminalreporter.write_line(
            f"found: {shown(vault.options.export_found)}: {len(repaired)} find(s) repaired "
            "(text a corpus line cannot hold; see provenance.repaired): "
            + ", ".join(map(shown, repaired)),
            yellow=True,
        )
    attempts = vault.store.attempts
    if attempts:
        terminalreporter.write_line(
            f"reruns: {len(attempts)} test(s) ran more than once ({sum(attempts.values())} "
            "attempts in all); each is one evaluation in every number, and a forbidden "
            "transfer in any attempt is kept",
            yellow=True,
        )
    unstored = vault.unstored_answers()
    if unstored is not None:
        count, reason = unstored
        terminalreporter.write_line(
            f"cache: {count} answer(s) paid for could not be stored (used in this run, asked "
            f"again next run): {shown(reason)}",
            yellow=True,
        )
    gate = config.stash.get(GATE, None)
    if gate is not None:
        from pytest_vault.report.baseline import render as render_gate

        terminalreporter.section("pytest-vault baseline")
        for line in render_gate(gate):
            terminalreporter.write_line(line)
    _got_through(terminalreporter, vault)


def _got_through(terminalreporter: pytest.TerminalReporter, vault: VaultSession) -> None:
    """The summary ends with the evaluations in which a forbidden transfer executed, each
    named by its test id with the command that shows it; nothing when none did."""
    from pytest_vault.report.through import got_through, lines

    found = got_through(vault.store.keyed())
    if not found:
        return
    written = {
        option: str(path)
        for option, path in (
            ("--vault-results", vault.options.results),
            ("--vault-report", vault.options.report),
        )
        if path is not None and option not in vault.unwritten
    }
    terminalreporter.section("pytest-vault, what got through", red=True)
    for line in lines(found, written.get("--vault-results"), written.get("--vault-report")):
        terminalreporter.write_line(line)


def stream(config: pytest.Config, name: Literal["stdout", "stderr"], text: str) -> None:
    """Straight to the process's stdout or stderr, past pytest's capture, as UTF-8."""
    import contextlib
    import sys

    from pytest_vault.core.cli import write_all

    capture = config.pluginmanager.get_plugin("capturemanager")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    writer = getattr(reporter, "_tw", None)  # pytest's TerminalWriter: no public accessor
    if writer is not None and writer.width_of_current_line:
        writer.line()  # never in the middle of pytest's line (`....[100%]ERROR: ...`)
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        out = getattr(sys, name)
        buffer = getattr(out, "buffer", None)
        if buffer is None:
            out.write(text)
            out.flush()
        else:
            out.flush()
            write_all(buffer, text.encode("utf-8"))
