"""The corpus shipped inside the package: `--vault-corpus builtin` (every level) or
`builtin:level-2` (one file), and `python -m pytest_vault.corpus copy DIR` for a team
that wants to extend it.

Its files are collected under the node ids `builtin/level-2.jsonl::...`, wherever the
package is installed, so that baselines and `--deselect` keep working across versions.
"""

from __future__ import annotations

from pathlib import Path

from pytest_vault.core.files import write_bytes

FOLDER = Path(__file__).parent / "cases"
PREFIX = "builtin"
SCHEMA = "case.schema.json"


class BuiltinError(ValueError):
    """A `builtin:` name that names no built-in file."""


def names() -> list[str]:
    """The built-in files' names, in the order a copy of them collects in: pytest's, by
    file name ("tools-indirect.jsonl" before "tools.jsonl", though "tools" < "tools-...")."""
    return [p.stem for p in sorted(FOLDER.glob("*.jsonl"), key=lambda p: p.name)]


def is_builtin(value: str) -> bool:
    return value == PREFIX or value.startswith(PREFIX + ":")


def files(value: str) -> list[Path]:
    """The built-in files `builtin` or `builtin:NAME` names, in order."""
    if value == PREFIX:
        return [FOLDER / f"{name}.jsonl" for name in names()]
    name = value.removeprefix(PREFIX + ":").removesuffix(".jsonl")
    if name not in names():
        raise BuiltinError(f"{value!r}: no such built-in corpus (builtin, {_choices()})")
    return [FOLDER / f"{name}.jsonl"]


def nodeid(path: Path) -> str:
    return f"{PREFIX}/{path.name}"


def copy(folder: Path) -> list[Path]:
    """Write the built-in files and their schema into `folder`; never over a file that
    is there (a team's edited copy)."""
    targets = [*files(PREFIX), FOLDER / SCHEMA]
    there = [folder / p.name for p in targets if (folder / p.name).exists()]
    if there:
        raise FileExistsError(f"{there[0].name} is there already (copy into a new folder)")
    for p in targets:  # each whole: a copy cut short leaves no half file to edit
        write_bytes(folder / p.name, p.read_bytes())
    return [folder / p.name for p in targets]


def _choices() -> str:
    return ", ".join(f"{PREFIX}:{n}" for n in names())
