"""pytest entry point (`-p vault`, `-p no:vault`). Hooks only; the state lives in
`VaultSession`. Everything heavy (pydantic, pyarrow, the models) is imported on first
use, so `pytest --help` and runs without a corpus stay fast.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_vault.session import CONTROL_MODELS, Options, SpecError, VaultSession, check_spec

if TYPE_CHECKING:
    from pytest_vault.agent import Track
    from pytest_vault.bank import Architecture

VAULT = pytest.StashKey[VaultSession]()
WORKER_ROWS = "pytest_vault_rows"
WORKER_CORPUS = "pytest_vault_corpus"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vault", "pytest-vault: payment-agent attack suite")
    group.addoption(
        "--vault-model",
        action="append",
        metavar="SPEC",
        help=f"model to evaluate (repeatable); default: the controls {', '.join(CONTROL_MODELS)}",
    )
    group.addoption(
        "--vault-track",
        action="append",
        choices=("A", "B"),
        help="replay track filter (repeatable): A = final message, B = whole sequence",
    )
    group.addoption(
        "--vault-arch",
        action="append",
        choices=("model", "guarded"),
        help="architecture filter (repeatable)",
    )
    group.addoption(
        "--vault-level",
        action="append",
        type=int,
        choices=range(1, 6),
        metavar="N",
        help="level filter, 1-5 (repeatable)",
    )
    group.addoption(
        "--vault-passports",
        metavar="DIR",
        help="folder with level-1.json ... level-5.json and levels.toml "
        "(default: the passports shipped with pytest-vault)",
    )
    group.addoption(
        "--vault-results",
        metavar="FILE.parquet",
        help="write one results row per evaluation to this Parquet file",
    )
    group.addoption(
        "--vault-strict",
        action="store_true",
        help="also fail model-alone tests in which a forbidden transfer executed",
    )
    group.addoption(
        "--vault-max-steps",
        type=int,
        default=8,
        metavar="N",
        help="model steps per user turn before the turn is cut (default 8)",
    )
    parser.addini("vault_corpus_glob", "file name pattern of corpus files", default="*.jsonl")


def _dedup(values: list[Any] | None, default: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values)) if values else default


def pytest_configure(config: pytest.Config) -> None:
    try:
        models = tuple(
            check_spec(s) for s in _dedup(config.getoption("vault_model"), CONTROL_MODELS)
        )
    except SpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    if config.getoption("vault_max_steps") < 1:
        raise pytest.UsageError("--vault-max-steps must be at least 1")
    passports = config.getoption("vault_passports")
    results = config.getoption("vault_results")
    tracks: tuple[Track, ...] = _dedup(config.getoption("vault_track"), ("A", "B"))
    archs: tuple[Architecture, ...] = _dedup(config.getoption("vault_arch"), ("model", "guarded"))
    options = Options(
        models=models,
        tracks=tracks,
        architectures=archs,
        levels=frozenset(_dedup(config.getoption("vault_level"), (1, 2, 3, 4, 5))),
        passports=Path(passports).resolve() if passports else None,
        results=Path(results).resolve() if results else None,
        strict=config.getoption("vault_strict"),
        max_steps=config.getoption("vault_max_steps"),
    )
    config.stash[VAULT] = VaultSession(options)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(config), "vault-xdist")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".jsonl" and fnmatch.fnmatch(
        file_path.name, parent.config.getini("vault_corpus_glob")
    ):
        from pytest_vault.collect import CorpusFile

        return CorpusFile.from_parent(parent, path=file_path)
    return None


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    vault = config.stash[VAULT]
    vault.close()
    if _is_worker(config):
        config.workeroutput[WORKER_ROWS] = vault.rows  # type: ignore[attr-defined]
        config.workeroutput[WORKER_CORPUS] = vault.corpus_digests  # type: ignore[attr-defined]
        return
    if vault.options.results is not None and vault.rows:
        from pytest_vault.results import write_results

        write_results(vault.rows, vault.options.results, vault.metadata())


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    vault = config.stash[VAULT]
    if not vault.rows:
        return
    from pytest_vault.summary import render

    terminalreporter.section("pytest-vault summary")
    for line in render(vault.rows):
        terminalreporter.write_line(line)
    if vault.options.results is not None:
        terminalreporter.write_line(f"\nresults: {vault.options.results}")


class XdistHooks:
    """Registered only when pytest-xdist is present: merge worker rows on the controller."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {})
        vault = self.config.stash[VAULT]
        vault.rows.extend(output.get(WORKER_ROWS, []))
        vault.corpus_digests.update(output.get(WORKER_CORPUS, {}))
