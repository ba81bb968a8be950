"""MkDocs hooks: the reference pages are generated from the code at build time.

A page holds a marker, `<!-- generated: NAME -->`, on a line of its own; the build puts
the table NAME there. `<!-- include: PATH -->` puts a file of docs/ there as a code
block; `<!-- help: MODULE [SUBCOMMAND] -->` the command's own `--help`. An unknown
marker fails the build.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent
MARKER = re.compile(r"^<!-- (generated|include|help): (.+?) -->$", re.M)


def _options() -> str:
    from pytest_vault.plugin.options import reference

    return reference()


def _generators() -> dict[str, Callable[[], str]]:
    from pytest_vault.report import reference

    return {
        "options": _options,
        "corpus": reference.corpus_fields,
        "results": reference.results_columns,
        "reason-codes": reference.reason_codes,
    }


def _include(path: str) -> str:
    file = (DOCS / path).resolve()
    if DOCS not in file.parents:
        raise ValueError(f"include: {path}: outside docs/")
    language = {".yml": "yaml", ".yaml": "yaml", ".toml": "toml", ".json": "json"}
    return f"```{language.get(file.suffix, '')}\n{file.read_text(encoding='utf-8').rstrip()}\n```"


def _help(module: str) -> str:
    """A command's own --help, as its parser prints it at 88 columns."""
    env = {**os.environ, "COLUMNS": "88"}
    argv = [sys.executable, "-m", *module.split(), "--help"]
    out = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    return f"```text\n{out.rstrip()}\n```"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    generators = _generators()

    def put(match: re.Match[str]) -> str:
        kind, name = match.groups()
        if kind == "include":
            return _include(name)
        if kind == "help":
            return _help(name)
        if name not in generators:
            raise ValueError(f"{page.file.src_path}: no generated table {name!r}")
        return generators[name]()

    return MARKER.sub(put, markdown)
