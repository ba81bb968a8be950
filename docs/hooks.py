"""MkDocs hooks: the generated blocks of each page are rendered from the code at build
time, by the same function that writes them into the pages
(`python -m pytest_vault.plugin.docs`; see that module for the markers), so the built
site equals the committed files when they are current. An unknown or unpaired marker
fails the build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_vault.plugin.docs import Blocks, render

_blocks: Blocks | None = None


def on_pre_build(config: Any, **_: Any) -> None:
    global _blocks  # one set of blocks per build: each --help is run once
    _blocks = Blocks(Path(config["docs_dir"]))


def on_page_markdown(markdown: str, page: Any, config: Any, **_: Any) -> str:
    blocks = _blocks or Blocks(Path(config["docs_dir"]))
    return render(markdown, page.file.src_path, blocks)
