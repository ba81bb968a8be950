"""Which `.jsonl` files are ours: those under a `--vault-corpus` path (or the config key
`vault_corpus`), those named on the command line, and `*.vault.jsonl`. Nothing else is
collected, whatever its name: an application's fixtures and a `vault-mcp --log` file
are left to their owners.

`--vault-corpus` on the command line names the run's corpora (beside any paths given);
`vault_corpus` in the config file adds them to a bare `pytest`, and to nothing else: a
run of `pytest tests/test_app.py` stays the user's.

The built-in files are no path of the user's: they join the session's own collectors
(`builtin/level-2.jsonl`), wherever the package is installed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_vault.core.text import shown
from pytest_vault.corpus import builtin

OWN_SUFFIX = ".vault.jsonl"


@dataclass(frozen=True)
class Corpora:
    builtin: tuple[Path, ...] = ()
    # Absolute: a file or folder under which every .jsonl is a corpus file.
    paths: tuple[Path, ...] = ()
    # .jsonl files named on the command line, absolute.
    named: frozenset[Path] = frozenset()
    # `paths` as written and as resolved: a link into a corpus folder, or a link to one.
    roots: frozenset[Path] = frozenset()

    def takes(self, path: Path) -> bool:
        if path.name.endswith(OWN_SUFFIX):
            return True
        if path.suffix != ".jsonl":
            return False
        forms = {_absolute(path), path.resolve()}
        return bool(forms & self.named) or any(
            f.is_relative_to(r) for f in forms for r in self.roots
        )


def corpora_of(config: pytest.Config, origin: str, from_config: bool) -> Corpora:
    """The run's corpora, each path checked: a missing one is a usage error naming
    `origin` (the flag, or the config file and key)."""
    here, given = config.invocation_params.dir, _given(config)
    found: list[Path] = []
    paths: list[Path] = []
    for value in config.getoption("vault_corpus") or ():
        if builtin.is_builtin(value):
            found += [p for p in builtin.files(value) if p not in found]
            continue
        path = here / value  # a config file's paths are already absolute
        if not path.exists():
            raise pytest.UsageError(f"{origin} {shown(value)}: no such file or folder")
        if path.is_file() and path.suffix != ".jsonl":
            raise pytest.UsageError(f"{origin} {shown(value)}: expected a .jsonl file or a folder")
        paths.append(_absolute(path))
    named = frozenset(
        _absolute(here / arg.partition("::")[0])
        for arg in (config.args if given else ())
        if arg.partition("::")[0].endswith(".jsonl")
    )
    if from_config and given:
        found = []  # the user named what to run; files under `paths` reached still count
    roots = frozenset([*paths, *(p.resolve() for p in paths)])
    return Corpora(tuple(found), tuple(paths), named, roots)


def _given(config: pytest.Config) -> bool:
    """Whether the user named paths on the command line (not testpaths, not the folder)."""
    return config.args_source == pytest.Config.ArgsSource.ARGS


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path))  # as pytest names the files it walks


def take_args(config: pytest.Config, corpora: Corpora, from_config: bool) -> None:
    """Add the corpora's paths to what pytest collects (see the module's docstring)."""
    given = _given(config)
    if from_config and given:
        return
    paths = [str(p) for p in corpora.paths]
    if from_config or given:
        config.args.extend(paths)  # pytest drops the overlaps
    elif corpora.paths or corpora.builtin:
        config.args[:] = paths  # the corpora, instead of testpaths or the folder
