"""The options settled (the command line over the config file, `settle`), and the run's
`Options` made of them: what no converter can check alone (an option that needs another,
a spec the plugins must claim, a file or folder) is checked here, once, each problem one
usage error naming the option or config key."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_vault.core.errors import unreachable
from pytest_vault.core.text import shown
from pytest_vault.corpus.builtin import is_builtin
from pytest_vault.models.specs import CONTROL_MODELS
from pytest_vault.plugin.corpora import OWN_SUFFIX
from pytest_vault.plugin.options import DEFAULT_CACHE, NOT_A_LIST, OPTIONS
from pytest_vault.plugin.session import VaultSession
from pytest_vault.plugin.settings import Options
from pytest_vault.plugin.specs import our_provider

if TYPE_CHECKING:
    from pytest_vault.harness.agent import Track
    from pytest_vault.harness.bank import Architecture
    from pytest_vault.models.specs import Role, Spec


SETTLED: pytest.StashKey[dict[str, str]] = pytest.StashKey()
_BY_FLAG = {o.flag: o for o in OPTIONS}


def settle(config: pytest.Config) -> None:
    """Each option the command line left unset takes its config-file value, through its
    converter, or else its default; once per config, before any hook reads an option.
    `pytest --help` and `--version` settle nothing: they work whatever the file says."""
    if SETTLED in config.stash:
        return
    if only_informs(config):
        for option in OPTIONS:  # the defaults, so nothing of ours reads a None
            if getattr(config.option, option.key) is None:
                setattr(config.option, option.key, option.default)
        config.stash[SETTLED] = {}
        return
    rootdir_kept(config)
    _unknown_keys(config)
    origins: dict[str, str] = {}
    folder = config.inipath.parent if config.inipath else None
    for option in OPTIONS:
        if getattr(config.option, option.key) is not None:
            continue
        where = _where(config, option.key)
        raw = _read(config, option.key, where)
        value = option.default
        if raw is not None:
            value = option.from_config(raw, where, folder)
            origins[option.key] = where
        setattr(config.option, option.key, value)
    _reachable(config, origins)
    config.stash[SETTLED] = origins


def _reachable(config: pytest.Config, origins: dict[str, str]) -> None:
    """Every path an option names, from the command line or the config file, is one the
    system can look at: a name too long, a path through a file (`a/file.txt/x`) or a loop
    of links is one usage error naming the option, before anything reads it (a path that
    does not exist yet is for its own check, `preflight`)."""
    here = config.invocation_params.dir
    for option in OPTIONS:
        if not getattr(option.convert, "is_path", False):
            continue
        value = getattr(config.option, option.key)
        for path in value if isinstance(value, list) else [] if value is None else [value]:
            problem = None if is_builtin(path) else unreachable(here / path)
            if problem is not None:
                where = origins.get(option.key, option.flag)
                raise pytest.UsageError(f"{where} {shown(path)}: {problem}")


def only_informs(config: pytest.Config) -> bool:
    """`pytest --help` or `--version`: nothing runs, so no vault setting is read."""
    return bool(config.option.help or config.option.version)


def _read(config: pytest.Config, key: str, where: str) -> object:
    """A config value as pytest reads it, read as pytest 10 will: a list given to a
    one-value key is an error, not a deprecation warning. Whatever pytest refuses (a
    TOML type, a truth value) is one usage error naming the file and key."""
    import warnings

    removed = getattr(pytest, "PytestRemovedIn10Warning", None)
    with warnings.catch_warnings():
        if removed is not None:
            warnings.simplefilter("error", removed)
        try:
            return config.getini(key)
        except Warning:  # pytest 9's warning for a list given to a "string" key
            raise pytest.UsageError(f"{where} {NOT_A_LIST}") from None
        except (pytest.UsageError, TypeError, ValueError) as exc:
            # pytest 8 raises the converter's error; 9 wraps it in a usage error, and
            # names the file and key in its own words, which ours replace.
            said = str(exc).removeprefix(f"{config.inipath}: ")
            said = said.removeprefix(f"config option '{key}' ")
    if said.startswith("expects a string"):  # pytest 9's native [tool.pytest] table
        said += " (pytest-vault's keys take strings: write it in quotes)"
    raise pytest.UsageError(f"{where}: {shown(said)}")


def _unknown_keys(config: pytest.Config) -> None:
    """A `vault_*` key no option has is a typo of one that does, and the run would do
    something else than asked: a usage error naming it and the nearest key, before
    anything runs (pytest's own check does not see keys a plugin registered)."""
    import difflib

    keys = [o.key for o in OPTIONS]
    for key in sorted(k for k in _keys_set(config) if k.startswith("vault_") and k not in keys):
        near = difflib.get_close_matches(key, keys, n=1, cutoff=0.8)
        hint = f"; did you mean {near[0]}?" if near else ""
        raise pytest.UsageError(f"{_where(config, key)}: unknown pytest-vault key{hint}")


def _keys_set(config: pytest.Config) -> set[str]:
    """The keys the config file and `-o` set: pytest has no public reader of them (its
    `config.inicfg` is deprecated), so the file is read as pytest read it."""
    from _pytest.config.findpaths import load_config_dict_from_file

    keys: set[str] = set()
    if config.inipath is not None:
        keys |= set(load_config_dict_from_file(config.inipath) or {})
    for override in config.getoption("override_ini") or ():
        keys.add(override.partition("=")[0].strip())
    return keys


def named_flags(config: pytest.Config) -> list[str]:
    """Our flags the command line names, in its order: a run that names one is a vault
    run, whatever pytest collects."""
    flags = {o.flag for o in OPTIONS}
    words = [arg.partition("=")[0] for arg in config.invocation_params.args]
    return list(dict.fromkeys(w for w in words if w in flags))


def rootdir_kept(config: pytest.Config) -> None:
    """pytest chooses its rootdir and config file before it knows our options, so the
    value of `--vault-baseline ../last.parquet` (two words) is taken for a test path and
    can move both: the project's settings are then never read. Whether it did is asked
    of pytest's own rootdir search, without those values; when it did, a usage error
    names what was chosen and the `=` form that keeps it."""
    args = [str(arg) for arg in config.invocation_params.args]
    values = {
        i + 1: flag
        for i, flag in enumerate(args[:-1])
        if (option := _BY_FLAG.get(flag)) is not None and option.kind != "flag"
    }
    if not values:
        return
    import inspect

    from _pytest.config.findpaths import determine_setup

    given = config.args if config.args_source == pytest.Config.ArgsSource.ARGS else []
    more = {}
    if "override_ini" in inspect.signature(determine_setup).parameters:
        more["override_ini"] = config.option.override_ini
    rootpath, inipath = determine_setup(  # what pytest would choose without our values
        inifile=config.option.inifilename,
        args=[str(arg) for arg in given],
        rootdir_cmd_arg=config.option.rootdir or None,
        invocation_dir=config.invocation_params.dir,
        **more,
    )[:2]
    if (rootpath, inipath) == (config.rootpath, config.inipath):
        return
    i = min(values)
    flag, value = values[i], args[i]
    raise pytest.UsageError(
        f"{flag} {shown(value)}: pytest took this path for a test path and chose rootdir "
        f"{shown(config.rootpath)} with {_config_file(config.inipath)}, not {shown(rootpath)} "
        f"with {_config_file(inipath)}; write {flag}={shown(value)}"
    )


def _config_file(path: Path | None) -> str:
    return f"config file {shown(path)}" if path is not None else "no config file"


def nothing_collected(config: pytest.Config) -> str | None:
    """When the command line names our options and no vault test was collected, why, in
    one line: a vault run that ran no vault test (a gate, strict mode) must not pass."""
    flags = named_flags(config)
    if not flags:
        return None  # the user's own run: vault settings in the config file are not a request
    return (
        f"{', '.join(flags)} given, but no vault test was collected: no corpus was named "
        f"(--vault-corpus, or *{OWN_SUFFIX} files among the paths) nor found in the config "
        f"file (rootdir {shown(config.rootpath)}, {_config_file(config.inipath)})"
    )


def asks(config: pytest.Config) -> bool:
    """Whether this run may ask a provider: --collect-only and --vault-plan ask nothing,
    so they need no key, make no cache folder and run no test."""
    return not config.getoption("collectonly") and config.getoption("vault_plan") is None


def origin(config: pytest.Config, key: str) -> str:
    """How a message names an option: its flag, or the config file and key it came from."""
    return config.stash[SETTLED].get(key) or "--" + key.replace("_", "-")


def from_file(config: pytest.Config, key: str) -> bool:
    """Whether an option's value came from the config file (or -o), not its flag."""
    return key in config.stash[SETTLED]


def _where(config: pytest.Config, key: str) -> str:
    overrides = config.getoption("override_ini") or ()
    if any(o.partition("=")[0].strip() == key for o in overrides):
        return f"-o {key}"
    inipath = config.inipath
    if inipath is None:
        return key
    try:
        name = str(inipath.relative_to(config.invocation_params.dir))
    except ValueError:
        name = str(inipath)
    return f"{shown(name)}: {key}"


def _dedup(values: list[Any] | None, default: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values)) if values else default


def _path(value: str | None) -> Path | None:
    return Path(value).resolve() if value is not None else None


def options_of(config: pytest.Config) -> Options:
    get = config.getoption
    if get("vault_decisions"):
        from pytest_vault.core.extras import needs

        missing = needs("syrupy", "snapshots", origin(config, "vault_decisions"))
        if missing is not None:
            raise pytest.UsageError(missing)
    specs: dict[str, Spec] = {}
    models = _claimed(config, "vault_model", "model", CONTROL_MODELS, specs)
    for name in (
        "vault_baseline_model",
        "vault_baseline_any_corpus",
        "vault_baseline_subset",
        "vault_baseline_out",
    ):
        if get(name) and get("vault_baseline") is None:
            raise pytest.UsageError(f"{origin(config, name)} needs --vault-baseline")
    judges = _judges(config, specs)
    attacker = _attacker(config, specs)
    spends = [spec.text for spec in specs.values() if spec.provider]
    if get("vault_budget_usd") is not None and not get("vault_prices"):
        raise pytest.UsageError(
            "--vault-budget-usd needs --vault-prices to know what requests cost"
        )
    prices = _path(get("vault_prices"))
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
        # Every spec that spends: an unpriced one would count as $0.
        unpriced = [text for text in spends if text not in table]
        if unpriced and get("vault_budget_usd") is not None:
            raise pytest.UsageError(
                f"{prices}: no price for {', '.join(unpriced)} (needed by --vault-budget-usd)"
            )
    cache = None
    if not get("vault_no_cache"):
        cache = Path(get("vault_cache") or config.rootpath / DEFAULT_CACHE)
        problem = unreachable(cache)  # the default's too: `.vault-cache` a loop of links
        if problem is not None:
            raise pytest.UsageError(f"{origin(config, 'vault_cache')} {shown(cache)}: {problem}")
        cache = cache.resolve()
    if cache is not None and cache.exists() and not cache.is_dir():
        # Else every test fails on its own, after the run has started.
        raise pytest.UsageError(f"--vault-cache {shown(str(cache))}: not a folder")
    if cache is not None and asks(config) and spends:  # a provider: its answers are cached
        _writable(cache)
    tracks: tuple[Track, ...] = _dedup(
        get("vault_track"),
        ("A", "B", "indirect") if attacker is None else ("A", "B", "adaptive", "indirect"),
    )
    archs: tuple[Architecture, ...] = _dedup(get("vault_arch"), ("model", "guarded"))
    settled: dict[str, Any] = {
        "models": models,
        "tracks": tracks,
        "architectures": archs,
        "levels": frozenset(_dedup(get("vault_level"), (1, 2, 3, 4, 5))),
        "cache": cache,
        "prices": prices,
        "search": (
            config.invocation_params.dir,
            *(Path(p) for p in config.getini("pythonpath")),
            config.rootpath,
        ),
        "attacker": attacker,
        "judges": judges,
        "specs": specs,
    }
    # Every other field as its option settled (the table says which is a path): a new
    # option is one entry in the table and one field.
    fields = {f.name for f in dataclasses.fields(Options)}
    plain: dict[str, Any] = {
        o.field: _path(get(o.key)) if o.is_path else get(o.key)
        for o in OPTIONS
        if o.field in fields and o.field not in settled
    }
    return Options(**plain, **settled)


def _claimed(
    config: pytest.Config, key: str, role: Role, default: tuple[str, ...], specs: dict[str, Spec]
) -> tuple[str, ...]:
    """The specs of an option, each claimed by a plugin (into `specs`); a spec from the
    config file is named by the file and key."""
    from pytest_vault.plugin.specs import claim

    value = config.getoption(key)
    values = value if isinstance(value, list) else [] if value is None else [value]
    texts: tuple[str, ...] = _dedup(values, default)
    flag, where = "--" + key.replace("_", "-"), origin(config, key)
    for text in texts:
        try:
            specs.setdefault(text, claim(config, text, role, asks=asks(config)))
        except pytest.UsageError as exc:
            if where == flag:
                raise
            raise pytest.UsageError(str(exc).replace(flag, where, 1)) from None
    return texts


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


def _judges(config: pytest.Config, specs: dict[str, Spec]) -> tuple[str, ...]:
    """`--vault-judge` specs, each claimed; the judge prompt is read now when one of our
    providers judges, so a bad `judges.toml` stops the run before it starts."""
    if not config.getoption("vault_judge"):
        return ()
    judges = _claimed(config, "vault_judge", "judge", (), specs)
    if any(our_provider(specs[text]) for text in judges):
        from pytest_vault.core.errors import FileError
        from pytest_vault.harness.judges import judge_prompt_file, load_judge_prompt

        try:
            load_judge_prompt(judge_prompt_file(_path(config.getoption("vault_passports"))))
        except FileError as exc:
            raise pytest.UsageError(str(exc)) from None
    return judges


def _attacker(config: pytest.Config, specs: dict[str, Spec]) -> str | None:
    """`--vault-attacker` and the options that need it, each a one-line usage error."""
    get = config.getoption
    if get("vault_attacker") is None:
        for name in ("vault_attacker_sees_policy", "vault_export_found"):
            if get(name):
                raise pytest.UsageError(f"{origin(config, name)} needs --vault-attacker")
        if "adaptive" in (get("vault_track") or ()):
            raise pytest.UsageError(
                f"{origin(config, 'vault_track')} adaptive needs --vault-attacker SPEC "
                "(e.g. scripted:escalate)"
            )
        return None
    (spec,) = _claimed(config, "vault_attacker", "attacker", (), specs)
    if our_provider(specs[spec]):
        # Its prompt is read now, as a judge's is: a bad attacker.toml stops the run
        # before it starts, not an error row per adaptive test.
        from pytest_vault.core.errors import FileError
        from pytest_vault.models.attacker import attacker_prompt_file, load_prompt

        try:
            load_prompt(attacker_prompt_file(_path(get("vault_passports"))))
        except FileError as exc:
            raise pytest.UsageError(f"--vault-attacker {shown(spec)}: {exc}") from None
    return spec


def preflight(vault: VaultSession) -> None:
    """What can be checked before anything runs, once (on xdist's controller, before a
    worker starts): each problem is one usage error naming the option and its value."""
    problem = vault.maker.unloadable() or _unusable_path(vault.options)
    if problem is not None:
        raise pytest.UsageError(problem)
    if vault.options.passports is not None:
        # Read now, once: else every corpus file reports the same problem.
        from pytest_vault.core.errors import FileError

        try:
            vault.levels  # noqa: B018 - loaded (and checked) for the run
        except FileError as exc:
            # Named by the option, its files by their names in it: `--vault-passports DIR:
            # level-3.json:8: status: ...` (the file is one the user never typed).
            folder = shown(str(vault.options.passports))
            said = f"--vault-passports {folder}: {str(exc).replace(folder + '/', '')}"
            raise pytest.UsageError(said) from None


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
        ("--vault-baseline-out", opts.baseline_out),
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
