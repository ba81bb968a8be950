"""Which `.jsonl` files are ours: those under a `--vault-corpus` path (or the config key
`vault_corpus`), those named on the command line, and `*.vault.jsonl`. Nothing else is
collected, whatever its name: an application's fixtures and a `vault-mcp --log` file
are left to their owners.

`--vault-corpus` on the command line names the run's corpora (beside any paths given);
`vault_corpus` in the config file adds them to a bare `pytest`, and to nothing else: a
run of `pytest tests/test_app.py` stays the user's.

The built-in files are no path of the user's: they join the session's own collectors
(`builtin/level-2.jsonl`), wherever the package is installed. A built-in node id on the
command line (`pytest 'builtin/level-2.jsonl::L2-s07-a3'`, copied from a report) runs
that file's matching tests, unless a `builtin/` folder of the user's is there.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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
    # Built-in node ids named on the command line (taken out of pytest's arguments).
    ids: tuple[str, ...] = ()

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
        # Named as written: a config file's relative to the file.
        ini = config.inipath
        written = os.path.relpath(path, ini.parent) if from_config and ini else value
        if not path.exists():
            raise pytest.UsageError(f"{origin} {shown(written)}: no such file or folder")
        if path.is_file() and path.suffix != ".jsonl":
            raise pytest.UsageError(
                f"{origin} {shown(written)}: expected a .jsonl file or a folder"
            )
        paths.append(_absolute(path))
    named = frozenset(
        _absolute(here / arg.partition("::")[0])
        for arg in (config.args if given else ())
        if arg.partition("::")[0].endswith(".jsonl")
    )
    if from_config and given:
        found = []  # the user named what to run; files under `paths` reached still count
    # A file named whole (`--vault-corpus builtin`) runs whole, beside any of its ids.
    ids = {i: p for i, p in (_builtin_ids(config) if given else {}).items() if p not in found}
    found += [p for p in dict.fromkeys(ids.values()) if p not in found]
    roots = frozenset([*paths, *(p.resolve() for p in paths)])
    return Corpora(tuple(found), tuple(paths), named, roots, tuple(ids))


def _builtin_ids(config: pytest.Config) -> dict[str, Path]:
    """Take the built-in node ids out of pytest's arguments (it would look for them on
    disk), with the file each names: an unknown built-in file is a usage error."""
    here, ids, rest = config.invocation_params.dir, {}, []
    for arg in config.args:
        path, sep, names = arg.partition("::")
        if not path.startswith(builtin.PREFIX + "/") or (here / path).exists():
            rest.append(arg)
            continue
        try:
            [file] = builtin.files(builtin.PREFIX + ":" + path.partition("/")[2])
        except builtin.BuiltinError:
            known = ", ".join(f"{builtin.PREFIX}/{n}.jsonl" for n in builtin.names())
            raise pytest.UsageError(
                f"{shown(arg)}: no such file or folder, nor built-in corpus file ({known})"
            ) from None
        ids[builtin.nodeid(file) + sep + names] = file
    config.args[:] = rest
    return ids


def named_by_ids(ids: Sequence[str], nodeid: str) -> bool:
    """Whether a built-in test is one the ids name, as pytest matches a node id: the
    file, a case (all of its parameters) or one test."""
    return any(nodeid == i or nodeid.startswith((i + "::", i + "[")) for i in ids)


def last_failed(config: pytest.Config, files: Sequence[Path]) -> None:
    """`--lf` on the built-in files: pytest finds the files of the last failures under the
    rootdir (`builtin/level-2.jsonl` is none), and once a file of the user's with failures
    is collected it skips every other file, ours included. The built-in files that hold a
    last failure are made known to it, so that their failures run again, and only they
    (pytest's cacheprovider has no public interface for this: its `_last_failed_paths`)."""
    plugin = config.pluginmanager.get_plugin("lfplugin")
    paths = getattr(plugin, "_last_failed_paths", None)
    if not isinstance(paths, set):  # no --lf, or a pytest whose internals differ
        return
    failed = {str(nodeid).partition("::")[0] for nodeid in getattr(plugin, "lastfailed", {})}
    paths.update(p for p in files if builtin.nodeid(p) in failed)


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
        # Only what the walk of pytest's own arguments does not reach: pytest < 9, given
        # a folder and a folder inside it, collects the inner one alone.
        here = config.invocation_params.dir
        walked = [_absolute(here / a) for a in config.args if "::" not in a]
        config.args.extend(
            p for p in paths if not any(Path(p).is_relative_to(w) for w in walked if w.is_dir())
        )
    elif corpora.paths or corpora.builtin:
        config.args[:] = paths  # the corpora, instead of testpaths or the folder
