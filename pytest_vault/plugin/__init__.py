"""pytest entry point (`-p vault`, `-p no:vault`). Hooks only; the state lives in
`VaultSession`. Everything heavy (pydantic, pyarrow, the SDKs) is imported on first
use, so `pytest --help` and runs without a corpus stay fast.
"""

from __future__ import annotations

import fnmatch
import math
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

from pytest_vault.core.text import shown
from pytest_vault.models.specs import CONTROL_MODELS, SpecError, check_guard, check_spec
from pytest_vault.plugin.session import VAULT, Job, Options, VaultSession

if TYPE_CHECKING:
    from pytest_vault.harness.agent import Track
    from pytest_vault.harness.bank import Architecture

WORKER_OUTPUT = "pytest_vault"
DEFAULT_CACHE = ".vault-cache"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_vault.plugin import hookspecs
    from pytest_vault.plugin.specs import Builtin

    pluginmanager.add_hookspecs(hookspecs)
    pluginmanager.register(Builtin(), "vault-specs")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("vault", "pytest-vault: payment-agent attack suite")
    add = group.addoption
    add(
        "--vault-model",
        action="append",
        metavar="SPEC",
        help="model to evaluate, repeatable: openai:MODEL, anthropic:MODEL, "
        "agent:MODULE:FACTORY (your agent) or a control; "
        "default: the controls " + ", ".join(CONTROL_MODELS),
    )
    add(
        "--vault-track",
        action="append",
        choices=("A", "B", "adaptive"),
        help="replay track filter (repeatable): A = final message, B = whole sequence, "
        "adaptive = the attacker writes the next messages (needs --vault-attacker)",
    )
    add(
        "--vault-arch",
        action="append",
        choices=("model", "guarded"),
        help="architecture filter (repeatable)",
    )
    add(
        "--vault-level",
        action="append",
        type=int,
        choices=range(1, 6),
        metavar="N",
        help="level filter, 1-5 (repeatable)",
    )
    add(
        "--vault-guard",
        metavar="MODULE:FACTORY",
        help="your guard in the guarded architecture instead of the OAP engine: "
        "FACTORY(level, passport_path) returns (tool, arguments) -> bool | (bool, reason)",
    )
    add(
        "--vault-passports",
        metavar="DIR",
        help="folder with level-1.json ... level-5.json and levels.toml "
        "(default: the passports shipped with pytest-vault)",
    )
    add(
        "--vault-results",
        metavar="FILE.parquet",
        help="write one results row per evaluation to this Parquet file",
    )
    add(
        "--vault-strict",
        action="store_true",
        help="also fail model-alone tests in which a forbidden transfer executed",
    )
    add(
        "--vault-max-steps",
        type=int,
        default=8,
        metavar="N",
        help="model steps per user message before the turn is cut (default 8)",
    )
    add(
        "--vault-base-url",
        metavar="URL",
        help="OpenAI-compatible server for openai: models (vLLM, Ollama, llama.cpp, OpenRouter...)",
    )
    add(
        "--vault-concurrency",
        type=int,
        default=16,
        metavar="N",
        help="evaluations in flight at once, for the whole run (default 16)",
    )
    add(
        "--vault-rpm",
        type=float,
        metavar="N",
        help="requests per minute per provider endpoint, for the whole run",
    )
    add(
        "--vault-tpm",
        type=float,
        metavar="N",
        help="tokens per minute per provider endpoint, for the whole run",
    )
    add(
        "--vault-tries",
        type=int,
        default=6,
        metavar="N",
        help="tries per request on 429, 5xx, timeouts and dropped connections (default 6)",
    )
    add(
        "--vault-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="timeout of one provider request (default 120)",
    )
    add(
        "--vault-agent-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="timeout of one reply of an agent: spec, tool calls included (default 600)",
    )
    add(
        "--vault-cache",
        metavar="DIR",
        help=f"response cache folder (default: {DEFAULT_CACHE} in the rootdir)",
    )
    add("--vault-no-cache", action="store_true", help="neither read nor write the response cache")
    add(
        "--vault-prices",
        metavar="FILE.toml",
        help='price table: ["spec"] input_per_mtok, output_per_mtok (USD per million tokens)',
    )
    add(
        "--vault-budget-usd",
        type=float,
        metavar="X",
        help="stop issuing requests once real spend reaches X (needs --vault-prices); "
        "the rest is skipped as not run",
    )
    add(
        "--vault-shard",
        metavar="K/N",
        help="run share K of N (1-based): N CI jobs together run every test exactly once",
    )
    add(
        "--vault-report",
        metavar="FILE.html",
        help="write the HTML report of this run's rows at the end",
    )
    add(
        "--vault-progress",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="seconds between progress lines (0: none; default 15)",
    )
    add(
        "--vault-decisions",
        action="store_true",
        help="instead of evaluations, one syrupy snapshot test per case with calls "
        "(FILE::ID[decisions]): each call's decision under the level passports",
    )
    # CI at real cost: a fair sample for pull requests, a gate against the last release,
    # and a plan before spending.
    add(
        "--vault-sample",
        type=int,
        metavar="N",
        help="run a stratified sample of N attacks (over level x category; after -k and "
        "--vault-level); benign cases stay in full",
    )
    add(
        "--vault-sample-benign",
        type=int,
        metavar="M",
        help="also sample the benign cases down to M (default: all of them)",
    )
    add(
        "--vault-seed",
        type=int,
        default=0,
        metavar="S",
        help="seed of the sample (default 0): the same seed, corpus and N, the same cases",
    )
    add(
        "--vault-baseline",
        metavar="RUN.parquet",
        help="compare with the last release's results at the end; a significant "
        "regression makes the exit status non-zero",
    )
    add(
        "--vault-baseline-model",
        metavar="SPEC",
        help="the baseline's model to compare with, when it holds several",
    )
    add(
        "--vault-baseline-any-corpus",
        action="store_true",
        help="compare even with a baseline run on another corpus version",
    )
    add(
        "--vault-plan",
        nargs="?",
        const="text",
        choices=("text", "json"),
        help="collect, print what the run would cost (evaluations, requests, tokens, "
        "cache, spend), and exit without asking any provider",
    )
    # The adaptive track: an attacker writes each next message; reported apart.
    add(
        "--vault-attacker",
        metavar="SPEC",
        help="adaptive attacker: scripted:escalate, openai:MODEL or anthropic:MODEL; "
        "adds the adaptive track (default tracks then A, B and adaptive)",
    )
    add(
        "--vault-rounds",
        type=int,
        default=5,
        metavar="N",
        help="attacker messages per adaptive evaluation, the seed's first (default 5)",
    )
    add(
        "--vault-attacker-sees-policy",
        action="store_true",
        help="show the attacker a summary of the level's passport (recipients, caps, codes)",
    )
    add(
        "--vault-export-found",
        metavar="FILE.jsonl",
        help="write each adaptive find (an unpermitted transfer) as a corpus line to FILE",
    )
    add(
        "--vault-judge",
        action="append",
        metavar="SPEC",
        help="a judge that reads each completed evaluation's transcript, repeatable: "
        "openai:MODEL, anthropic:MODEL, scripted:judge-final-text, scripted:judge-lenient "
        "or scripted:judge-always; an audit recorded in judge_verdicts, never a test's outcome",
    )
    parser.addini("vault_corpus_glob", "file name pattern of corpus files", default="*.jsonl")


def _dedup(values: list[Any] | None, default: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values)) if values else default


def _options(config: pytest.Config) -> Options:
    get = config.getoption
    base_url = get("vault_base_url")
    asks = _asks(config)
    try:
        models = tuple(
            check_spec(s, base_url, asks=asks) for s in _dedup(get("vault_model"), CONTROL_MODELS)
        )
        guard = None if get("vault_guard") is None else check_guard(get("vault_guard"))
    except SpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    # Upper bounds too: each unit of concurrency is a task (and a thread for sync agents).
    for name, most in (
        ("vault_max_steps", 1000),
        ("vault_concurrency", 4096),
        ("vault_tries", 100),
    ):
        if not 1 <= get(name) <= most:
            raise pytest.UsageError(f"--{name.replace('_', '-')} must be from 1 to {most}")
    for name, low, high in (
        ("vault_sample", 1, 10_000_000),
        ("vault_sample_benign", 0, 10_000_000),
        ("vault_seed", 0, 2**63 - 1),
    ):
        count = get(name)
        if count is not None and not low <= count <= high:
            raise pytest.UsageError(f"--{name.replace('_', '-')} must be from {low} to {high:,}")
    for needs, given in (
        ("vault_baseline", ("vault_baseline_model", "vault_baseline_any_corpus")),
    ):
        for name in given:
            if get(name) and get(needs) is None:
                raise pytest.UsageError(
                    f"--{name.replace('_', '-')} needs --{needs.replace('_', '-')}"
                )
    # nan compares false with everything: `x < 0` alone would let it switch a cap off.
    for name, least, strict in (
        ("vault_budget_usd", 0.0, False),
        ("vault_rpm", 0.0, True),
        ("vault_tpm", 0.0, True),
        ("vault_timeout", 0.0, True),
        ("vault_agent_timeout", 0.0, True),
        ("vault_progress", 0.0, False),
    ):
        value = get(name)
        if value is not None and not (
            math.isfinite(value) and (value > least if strict else value >= least)
        ):
            bound = "above" if strict else "at least"
            raise pytest.UsageError(
                f"--{name.replace('_', '-')} {value!r}: must be a finite number {bound} {least:g}"
            )
    judges = _judges(config, base_url)
    attacker = _attacker(config, base_url)
    if get("vault_budget_usd") is not None and not get("vault_prices"):
        raise pytest.UsageError(
            "--vault-budget-usd needs --vault-prices to know what requests cost"
        )
    prices = Path(get("vault_prices")).resolve() if get("vault_prices") else None
    if prices is not None:
        from pytest_vault.models.ratelimit import PriceError, load_prices
        from pytest_vault.report.outputs import cannot_read

        problem = cannot_read(prices)
        if problem is not None:
            raise pytest.UsageError(f"--vault-prices {shown(prices)}: {problem}")

        try:
            table = load_prices(prices)
        except PriceError as exc:
            raise pytest.UsageError(str(exc)) from None
        unpriced = [
            m
            # Every provider spec that spends: an unpriced one would count as $0.
            for m in dict.fromkeys([*models, *judges, *([attacker] if attacker else [])])
            if not m.startswith(("scripted:", "agent:")) and m not in table
        ]
        if unpriced and get("vault_budget_usd") is not None:
            raise pytest.UsageError(
                f"{prices}: no price for {', '.join(unpriced)} (needed by --vault-budget-usd)"
            )
    cache = (
        None
        if get("vault_no_cache")
        else Path(get("vault_cache") or config.rootpath / DEFAULT_CACHE).resolve()
    )
    if cache is not None and cache.exists() and not cache.is_dir():
        # Else every test fails on its own, after the run has started.
        raise pytest.UsageError(f"--vault-cache {shown(str(cache))}: not a folder")
    if (
        cache is not None
        and asks  # else no folder is made either
        and any(
            not m.startswith(("scripted:", "agent:"))  # a provider: its answers are cached
            for m in [*models, *judges, *([attacker] if attacker else [])]
        )
    ):
        _writable(cache)
    shard = _shard(get("vault_shard"))
    tracks: tuple[Track, ...] = _dedup(
        get("vault_track"), ("A", "B") if attacker is None else ("A", "B", "adaptive")
    )
    archs: tuple[Architecture, ...] = _dedup(get("vault_arch"), ("model", "guarded"))
    return Options(
        models=models,
        tracks=tracks,
        architectures=archs,
        levels=frozenset(_dedup(get("vault_level"), (1, 2, 3, 4, 5))),
        passports=Path(get("vault_passports")).resolve() if get("vault_passports") else None,
        results=Path(get("vault_results")).resolve() if get("vault_results") else None,
        strict=get("vault_strict"),
        max_steps=get("vault_max_steps"),
        base_url=base_url,
        concurrency=get("vault_concurrency"),
        rpm=get("vault_rpm"),
        tpm=get("vault_tpm"),
        tries=get("vault_tries"),
        timeout=get("vault_timeout"),
        agent_timeout=get("vault_agent_timeout"),
        cache=cache,
        budget_usd=get("vault_budget_usd"),
        prices=prices,
        progress_s=get("vault_progress"),
        shard=shard,
        report=Path(get("vault_report")).resolve() if get("vault_report") else None,
        guard=guard,
        sample=get("vault_sample"),
        sample_benign=get("vault_sample_benign"),
        seed=get("vault_seed"),
        baseline=Path(get("vault_baseline")).resolve() if get("vault_baseline") else None,
        baseline_model=get("vault_baseline_model"),
        baseline_any_corpus=get("vault_baseline_any_corpus"),
        plan=get("vault_plan"),
        rootdir=config.rootpath,
        attacker=attacker,
        rounds=get("vault_rounds"),
        attacker_sees_policy=get("vault_attacker_sees_policy"),
        export_found=Path(get("vault_export_found")).resolve()
        if get("vault_export_found")
        else None,
        judges=judges,
    )


def _asks(config: pytest.Config) -> bool:
    """Whether this run may ask a provider: --collect-only and --vault-plan ask nothing,
    so they need no key, make no cache folder and run no test."""
    return not config.getoption("collectonly") and config.getoption("vault_plan") is None


def _writable(cache: Path) -> None:
    """The cache folder, made if need be, takes a file: else (a file in its path, a folder
    without write permission, a read-only mount) every evaluation fails on its own."""
    import tempfile

    from pytest_vault.core.errors import reason

    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=cache):
            pass
    except OSError as exc:
        raise pytest.UsageError(
            f"--vault-cache {shown(str(cache))}: cannot write there: {reason(exc)}"
        ) from None


def _judges(config: pytest.Config, base_url: str | None) -> tuple[str, ...]:
    """`--vault-judge` specs, each a one-line usage error; the judge prompt is read now
    when a judge asks a provider, so a bad `judges.toml` stops the run before it starts."""
    from pytest_vault.models.specs import PROVIDERS

    specs: tuple[str, ...] = _dedup(config.getoption("vault_judge"), ())
    if not specs:
        return ()
    from pytest_vault.core.errors import FileError
    from pytest_vault.harness.judges import SCRIPTED_JUDGES, judge_prompt_file, load_judge_prompt

    for spec in specs:
        if spec in SCRIPTED_JUDGES:
            continue
        if spec.partition(":")[0] not in PROVIDERS:
            raise pytest.UsageError(
                f"--vault-judge {shown(repr(spec))}: expected openai:MODEL, anthropic:MODEL "
                f"or a scripted judge ({', '.join(SCRIPTED_JUDGES)})"
            )
        try:
            check_spec(spec, base_url, asks=_asks(config))
        except SpecError as exc:
            raise pytest.UsageError(str(exc).replace("--vault-model", "--vault-judge", 1)) from None
    if any(spec not in SCRIPTED_JUDGES for spec in specs):
        passports = config.getoption("vault_passports")
        try:
            load_judge_prompt(judge_prompt_file(Path(passports).resolve() if passports else None))
        except FileError as exc:
            raise pytest.UsageError(str(exc)) from None
    return specs


def _attacker(config: pytest.Config, base_url: str | None) -> str | None:
    """`--vault-attacker` and the options that need it, each a one-line usage error."""
    from pytest_vault.models.specs import PROVIDERS

    get = config.getoption
    spec = get("vault_attacker")
    if not 1 <= get("vault_rounds") <= 50:
        raise pytest.UsageError("--vault-rounds must be from 1 to 50")
    if spec is None:
        for name in ("vault_attacker_sees_policy", "vault_export_found"):
            if get(name):
                raise pytest.UsageError(f"--{name.replace('_', '-')} needs --vault-attacker")
        if "adaptive" in (get("vault_track") or ()):
            raise pytest.UsageError(
                "--vault-track adaptive needs --vault-attacker SPEC (e.g. scripted:escalate)"
            )
        return None
    if spec != "scripted:escalate" and spec.partition(":")[0] not in PROVIDERS:
        raise pytest.UsageError(
            f"--vault-attacker {shown(repr(spec))}: expected scripted:escalate, "
            "openai:MODEL or anthropic:MODEL"
        )
    if spec.startswith(PROVIDERS):
        try:
            check_spec(spec, base_url, asks=_asks(config))
        except SpecError as exc:
            raise pytest.UsageError(
                str(exc).replace("--vault-model", "--vault-attacker", 1)
            ) from None
        # Its prompt is read now, as a judge's is: a bad attacker.toml stops the run
        # before it starts, not an error row per adaptive test.
        from pytest_vault.core.errors import FileError
        from pytest_vault.models.attacker import load_prompt
        from pytest_vault.plugin.session import attacker_prompt_file

        passports = get("vault_passports")
        try:
            load_prompt(attacker_prompt_file(Path(passports).resolve() if passports else None))
        except FileError as exc:
            raise pytest.UsageError(f"--vault-attacker {shown(spec)}: {exc}") from None
    export = get("vault_export_found")
    if export is not None and not export.endswith(".jsonl"):
        raise pytest.UsageError(
            f"--vault-export-found {shown(repr(export))}: expected a .jsonl file"
        )
    return str(spec)


def _shard(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    k, sep, n = value.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise pytest.UsageError(f"--vault-shard {value!r}: expected K/N with 1 <= K <= N, e.g. 2/3")
    return int(k), int(n)


def pytest_configure(config: pytest.Config) -> None:
    options = _options(config)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        options = options.share_of(int(workerinput["workercount"]))
    vault = config.stash[VAULT] = VaultSession(options)
    if workerinput is None:
        _preflight(vault)
    if config.pluginmanager.hasplugin("syrupy"):
        from pytest_vault.plugin.decisions import hide_from_other_extensions

        hide_from_other_extensions(config)
    if config.getoption("vault_decisions"):
        from pytest_vault.plugin.decisions import configure as configure_decisions

        configure_decisions(config)
    if workerinput is None and options.progress_s > 0:
        config.pluginmanager.register(Progress(config, options.progress_s), "vault-progress")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(config), "vault-xdist")


def _preflight(vault: VaultSession) -> None:
    """What can be checked before anything runs, once (on xdist's controller, before a
    worker starts): each problem is one usage error naming the option and its value."""
    problem = vault.unloadable() or _unusable_path(vault.options)
    if problem is not None:
        raise pytest.UsageError(problem)
    if vault.options.passports is not None:
        # Read now, once: else every corpus file reports the same problem.
        from pytest_vault.core.errors import FileError

        try:
            vault.levels  # noqa: B018 - loaded (and checked) for the run
        except FileError as exc:
            raise pytest.UsageError(str(exc)) from None


def _unusable_path(opts: Options) -> str | None:
    """The first file or folder option the run could not read or write, as
    `OPTION PATH: why`; None when all can be. Nothing is created."""
    reads = (
        ("--vault-passports", opts.passports, True),
        ("--vault-baseline", opts.baseline, False),
    )
    writes = (
        ("--vault-results", opts.results),
        ("--vault-report", opts.report),
        ("--vault-export-found", opts.export_found),
    )
    if not any(path for _, path, _ in reads) and not any(path for _, path in writes):
        return None
    from pytest_vault.report.outputs import cannot_read, cannot_write

    for option, path, folder in reads:
        problem = None if path is None else cannot_read(path, folder=folder)
        if problem is not None:
            return f"{option} {shown(path)}: {problem}"
    for option, path in writes:
        problem = None if path is None else cannot_write(path)
        if problem is not None:
            return f"{option} {shown(path)}: cannot write: {problem}"
    return None


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    pattern = parent.config.getini("vault_corpus_glob")
    if file_path.suffix == ".jsonl" and fnmatch.fnmatch(file_path.name, pattern):
        from pytest_vault.plugin.collect import CorpusFile

        return CorpusFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep this sample's and shard's items (after -k, -m and, for decision tests,
    --vault-level), and count what the run plans."""
    from pytest_vault.plugin.collect import apply_sample, group_key

    vault = config.stash[VAULT]
    if config.getoption("vault_decisions"):
        from pytest_vault.plugin.decisions import deselect_levels

        deselect_levels(config, items)
    # The sample before the shard: every shard takes its share of the same sample.
    apply_sample(config, items)
    shard = vault.options.shard
    vault.planned_run = _plan(items)
    if shard is not None:
        k, n = shard
        # Whole groups (a case and a model: its tracks and architectures share requests)
        # in sorted order, dealt round-robin: balanced, and stable across machines.
        groups = sorted({group_key(item) for item in items})
        mine = {g for i, g in enumerate(groups) if i % n == k - 1}
        keep = [item for item in items if group_key(item) in mine]
        dropped = [item for item in items if group_key(item) not in mine]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep
    vault.planned = _plan(items)


def _plan(items: list[pytest.Item]) -> dict[str, int]:
    """Evaluations per coverage cell."""
    from pytest_vault.plugin.collect import VaultItem, cell_key

    planned: dict[str, int] = {}
    for item in items:
        if isinstance(item, VaultItem):
            key = cell_key(item)
            planned[key] = planned.get(key, 0) + 1
    return planned


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    """Start evaluating this process's share ahead of the tests; stop when they end."""
    vault = session.config.stash[VAULT]
    # --collect-only and --vault-plan: no test runs, so nothing is evaluated, asked or cached.
    jobs = _share(session) if _asks(session.config) else []
    if jobs:
        vault.start(jobs)
    try:
        return (yield)
    finally:
        vault.close()


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

    plans = vault.plan([item.job for item in session.items if isinstance(item, VaultItem)])
    if vault.options.plan == "json":
        from pytest_vault.core.text import json_text

        _stream(config, "stdout", json_text([p.record() for p in plans], indent=2) + "\n")
        return True
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        _stream(config, "stdout", "".join(line + "\n" for line in render(plans)))
        return True
    reporter.section("pytest-vault plan")
    for line in render(plans):
        reporter.write_line(line)
    return True


def _stream(config: pytest.Config, name: Literal["stdout", "stderr"], text: str) -> None:
    """Straight to the process's stdout or stderr, past pytest's capture, as UTF-8."""
    import contextlib
    import sys

    from pytest_vault.core.cli import write_all

    capture = config.pluginmanager.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        stream = getattr(sys, name)
        buffer = getattr(stream, "buffer", None)
        if buffer is None:
            stream.write(text)
            stream.flush()
        else:
            stream.flush()
            write_all(buffer, text.encode("utf-8"))


def pytest_cmdline_main(config: pytest.Config) -> None:
    """`--vault-plan` runs nothing, so it distributes nothing: `-n N` is turned off (after
    xdist's tryfirst hook read it, before its configure starts workers), as xdist itself
    stays out of `--collect-only`. What is left is what `-n 0` leaves."""
    if config.getoption("vault_plan") is not None and hasattr(config.option, "dist"):
        config.option.numprocesses = 0
        config.option.dist = "no"
        config.option.tx = []


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


def _share(session: pytest.Session) -> list[Job]:
    from pytest_vault.plugin.collect import VaultItem

    items = session.items
    indices: set[int] | None = set(range(len(items)))
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is not None:
        from pytest_vault.plugin.distribute import worker_share

        indices = worker_share(workerinput, [item.nodeid for item in items])
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
        vault = item.config.stash[VAULT]
        stats = vault.stats
        # A JSON-able attribute travels with the report to the xdist controller.
        report.vault = {  # type: ignore[attr-defined]
            # The row itself rides along: an xdist worker that crashes later has already
            # delivered every row it finished.
            "row": row,
            "status": row["status"],
            "input_tokens": row["input_tokens"],
            "output_tokens": row["output_tokens"],
            "in_flight": vault.in_flight,
            "requests": stats.requests,
            "retries": stats.retries,
            "cache_hits": stats.cache_hits,
            "spent_usd": vault.spend.spent_usd,
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
        self.workers[_worker(report)] = {k: info[k] for k in self.WORKER_FIELDS}
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


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _worker(report: pytest.TestReport) -> str:
    """The xdist worker a report came from (`gw0`...), or "main" for this process's own."""
    return str(getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main"))


def _is_controller(config: pytest.Config) -> bool:
    """An xdist controller: it runs no test itself, its workers report to it."""
    return config.pluginmanager.hasplugin("dsession")


if TYPE_CHECKING:
    from pytest_vault.report.baseline import Baseline, Gate

BASELINE: pytest.StashKey[Baseline] = pytest.StashKey()
GATE: pytest.StashKey[Gate] = pytest.StashKey()


def pytest_sessionstart(session: pytest.Session) -> None:
    """Read the baseline before anything is collected or a worker starts: a file that
    cannot be used is one line, and nothing runs."""
    config = session.config
    opts = config.stash[VAULT].options
    if opts.baseline is None or _is_worker(config) or config.getoption("vault_decisions"):
        return
    from pytest_vault.report.baseline import BaselineError, read_baseline

    try:
        config.stash[BASELINE] = read_baseline(opts.baseline, opts.baseline_model)
    except BaselineError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse a baseline of another corpus version as soon as this run's corpus is known:
    after collection, before any evaluation (xdist workers evaluate right after it)."""
    config = session.config
    vault = config.stash[VAULT]
    opts = vault.options
    if opts.baseline is None or opts.baseline_any_corpus or not vault.corpus_digests:
        return
    if config.getoption("vault_decisions"):
        return
    from pytest_vault.report.baseline import BaselineError, check_corpus, read_corpus

    meta = vault.metadata()
    try:
        base = config.stash.get(BASELINE, None)
        theirs = (base.corpus_digest, base.corpus_files) if base else read_corpus(opts.baseline)
        check_corpus(opts.baseline, theirs, (meta["corpus_digest"], meta["corpus_files"]))
    except BaselineError as exc:
        if not _is_worker(config):
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
    if _is_worker(config):
        config.workeroutput[WORKER_OUTPUT] = {  # type: ignore[attr-defined]
            "corpus": vault.corpus_digests,
            "passports": vault.passports,
            "decode": vault.decode_record(),
            "planned": vault.planned,
            "planned_run": vault.planned_run,
            "sample": vault.sample,
        }
        return
    if not _asks(config):
        return  # nothing ran: nothing is written
    # The results file is written from the rows a row group at a time; one table of
    # them, made a column at a time, serves the other writers. Never a list of the
    # run's rows as dicts.
    store, opts = vault.store, vault.options
    outputs: list[tuple[str, Path | None, Callable[[VaultSession, Path], None]]] = [
        ("--vault-results", opts.results if store else None, _write_results),
        ("--vault-export-found", opts.export_found, _write_found),
        ("--vault-report", opts.report if store else None, _write_report),
    ]
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
            _stream(config, "stderr", f"ERROR: {said}\n")
    if vault.unwritten and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    baseline = config.stash.get(BASELINE, None)
    if baseline is not None and store:
        from pytest_vault.report.baseline import EXIT_REGRESSION, compare

        gate = config.stash[GATE] = compare(store.results(), baseline)
        # Like syrupy's unused snapshots: the run fails even when every test passed.
        if gate.failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = EXIT_REGRESSION


def _write_results(vault: VaultSession, path: Path) -> None:
    vault.store.write_results(path, vault.metadata())


def _write_report(vault: VaultSession, path: Path) -> None:
    from pytest_vault.report.html import write_html
    from pytest_vault.report.outputs import replacing

    with replacing(path) as partial:
        write_html(vault.store.results(), [vault.metadata()], partial)


def _write_found(vault: VaultSession, path: Path) -> None:
    """`--vault-export-found`: the adaptive finds as corpus lines, sorted (so any
    parallelism writes the same file); no find, an empty file."""
    from pytest_vault.corpus.export import found_file
    from pytest_vault.report.outputs import replacing

    text, vault.repaired_finds = found_file(vault.store.found() if vault.store else [])
    with replacing(path) as partial:
        partial.write_text(text, encoding="utf-8")


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    vault = config.stash[VAULT]
    if not vault.store:
        return
    from pytest_vault.report.summary import render

    terminalreporter.section("pytest-vault summary")
    for line in render(vault.rows, sample=vault.sample):
        terminalreporter.write_line(line)
    for label, option, path in (
        ("results", "--vault-results", vault.options.results),
        ("report", "--vault-report", vault.options.report),
    ):
        if path is not None and option not in vault.unwritten:
            terminalreporter.write_line(f"{label}: {shown(path)}")
    repaired = vault.repaired_finds
    if repaired:
        terminalreporter.write_line(
            f"found: {shown(vault.options.export_found)}: {len(repaired)} find(s) repaired "
            "(text a corpus line cannot hold; see provenance.repaired): "
            + ", ".join(map(shown, repaired)),
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


class XdistHooks:
    """Registered only when pytest-xdist is present: share the tests upfront, and merge
    worker rows on the controller."""

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

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        info = getattr(report, "vault", None)
        if report.when == "call" and isinstance(info, dict) and _is_controller(self.config):
            vault = self.config.stash[VAULT]
            vault.store.add(report.nodeid, info["row"])
            if info["unstored"]:  # a worker's running count: its latest report has it
                vault.unstored[_worker(report)] = (info["unstored"], info["unstored_reason"])

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT, {})
        vault = self.config.stash[VAULT]
        vault.corpus_digests.update(output.get("corpus", {}))
        vault.passports = vault.passports or output.get("passports", {})
        vault.decode.update(output.get("decode", {}))
        # Every worker collects (and plans) the same items: any one's count is the run's.
        vault.planned = vault.planned or output.get("planned", {})
        vault.planned_run = vault.planned_run or output.get("planned_run", {})
        if "sample" in output:  # a worker that crashed before the end reports nothing
            vault.worker_sample(output["sample"])
