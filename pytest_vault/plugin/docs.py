"""The docs' generated blocks, written into the pages themselves, so docs/ reads the same
on GitHub as on the built site.

A generated block is delimited by two lines of its own, its content committed between:

    <!-- generated: NAME -->          a table: options, corpus, results, reason-codes
    <!-- end generated: NAME -->
    <!-- help: MODULE [SUBCOMMAND] -->    the command's own --help, at 88 columns
    <!-- end help: MODULE [SUBCOMMAND] -->
    <!-- include: PATH -->            a file of docs/ as a code block
    <!-- end include: PATH -->

`render` is the one function that fills them: `python -m pytest_vault.plugin.docs`
rewrites the pages with it (`--check` only says which are stale, exit 1), the MkDocs hook
(`docs/hooks.py`) renders each page with it at build time, and `tests/test_reference_pages.py`
fails when a committed page differs from it. What it writes is a function of the code
alone: no absolute path, no terminal width, no colour.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pytest_vault.core.errors import VaultError, reason
from pytest_vault.core.files import write_text

# Anchored to whole lines: a marker quoted inside a sentence or code span is text.
OPEN = re.compile(r"^<!-- (generated|help|include): (.+?) -->$")
END = re.compile(r"^<!-- end (generated|help|include): (.+?) -->$")
COMMAND = "python -m pytest_vault.plugin.docs"
# The width --help is wrapped at, whatever the terminal: argparse reads COLUMNS.
HELP_COLUMNS = 88


def _options() -> str:
    from pytest_vault.plugin import options

    # reference() frames the table for the README; here the block's own markers frame it.
    lines = options.reference().split("\n")
    frame = (options.BEGIN, options.END)
    return "\n".join(line for line in lines if line not in frame).strip("\n")


def tables() -> dict[str, Callable[[], str]]:
    """Every `<!-- generated: NAME -->` table, by name."""
    from pytest_vault.report import reference

    return {
        "options": _options,
        "corpus": reference.corpus_fields,
        "results": reference.results_columns,
        "reason-codes": reference.reason_codes,
    }


def command_help(module: str) -> str:
    """`python -m MODULE [SUBCOMMAND] --help` as its parser prints it at 88 columns, in a
    fresh interpreter (as a user runs it), without colour."""
    env = {**os.environ, "COLUMNS": str(HELP_COLUMNS), "NO_COLOR": "1", "PYTHON_COLORS": "0"}
    env.pop("FORCE_COLOR", None)
    argv = [sys.executable, "-m", *module.split(), "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise VaultError(f"help: {module}: --help exited {done.returncode}: {last}")
    return f"```text\n{done.stdout.rstrip()}\n```"


def include(docs: Path, path: str) -> str:
    """A file of docs/ as a fenced code block."""
    file = (docs / path).resolve()
    if docs.resolve() not in file.parents:
        raise VaultError(f"include: {path}: outside docs/")
    language = {".yml": "yaml", ".yaml": "yaml", ".toml": "toml", ".json": "json"}
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise VaultError(f"include: {path}: {reason(exc)}") from None
    return f"```{language.get(file.suffix, '')}\n{text.rstrip()}\n```"


class Blocks:
    """What each marker holds, each made once however many pages name it. Without
    `run_help`, a help block keeps what the page holds (each --help is a fresh
    interpreter, seconds each: the fast tests check the rest)."""

    def __init__(self, docs: Path, *, run_help: bool = True) -> None:
        self.docs = docs
        self.run_help = run_help
        self._made: dict[tuple[str, str], str] = {}
        self._tables = tables()

    def content(self, kind: str, name: str) -> str | None:
        """The block's content; None: keep the page's."""
        key = (kind, name)
        if key not in self._made:
            if kind == "include":
                self._made[key] = include(self.docs, name)
            elif kind == "help":
                if not self.run_help:
                    return None
                self._made[key] = command_help(name)
            elif name in self._tables:
                self._made[key] = self._tables[name]()
            else:
                known = ", ".join(self._tables)
                raise VaultError(f"no generated table {name!r} (known: {known})")
        return self._made[key]

    def prefetch(self, texts: Sequence[str]) -> None:
        """Run every --help the pages name at once (each waits on its own interpreter);
        what fails is raised when its page is rendered, naming the page and line."""
        if not self.run_help:
            return
        names = sorted(
            {
                m.group(2)
                for text in texts
                for m in map(OPEN.match, text.split("\n"))
                if m and m.group(1) == "help"
            }
        )
        with ThreadPoolExecutor(max_workers=4) as pool:
            done = dict(zip(names, pool.map(_try_help, names), strict=True))
        self._made.update({("help", n): out for n, out in done.items() if out is not None})


def _try_help(module: str) -> str | None:
    try:
        return command_help(module)
    except VaultError:
        return None


def render(text: str, where: str, blocks: Blocks) -> str:
    """The page with every generated block filled afresh; the rest of it untouched.

    Each opening marker needs its end marker, with no other marker between: a page that
    breaks the pairing is an error naming `where` and the line, never a guess. A marker
    inside a fenced code block is text (a page may show one)."""
    lines = text.split("\n")
    out: list[str] = []
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            fenced = not fenced
        if fenced or line.startswith("```"):
            out.append(line)
            i += 1
            continue
        if END.match(line):
            raise VaultError(f"{where}:{i + 1}: {line} has no opening marker")
        opened = OPEN.match(line)
        if opened is None:
            out.append(line)
            i += 1
            continue
        kind, name = opened.groups()
        end = f"<!-- end {kind}: {name} -->"
        close = next(
            (j for j in range(i + 1, len(lines)) if OPEN.match(lines[j]) or END.match(lines[j])),
            None,
        )
        if close is None or lines[close] != end:
            raise VaultError(f"{where}:{i + 1}: {line} has no {end} after it")
        try:
            content = blocks.content(kind, name)
        except ValueError as exc:  # a table refusing an undescribed column or code too
            raise VaultError(f"{where}:{i + 1}: {exc}") from None
        out += [line, *(lines[i + 1 : close] if content is None else [content]), end]
        i = close + 1
    return "\n".join(out)


def pages(docs: Path) -> list[Path]:
    """The Markdown pages of docs/, in a stable order."""
    return sorted(docs.rglob("*.md"))


def stale(docs: Path, *, write: bool, run_help: bool = True) -> list[str]:
    """The pages (relative to docs/'s parent) whose generated blocks differ from the code;
    with `write`, each is rewritten in place, atomically (`run_help`: see `Blocks`)."""
    texts = {}
    for page in pages(docs):
        name = page.relative_to(docs.parent).as_posix()
        try:
            texts[page] = page.read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            raise VaultError(f"{name}: {reason(exc)}") from None
    blocks = Blocks(docs, run_help=run_help)
    blocks.prefetch(list(texts.values()))
    changed = []
    for page, text in texts.items():
        name = page.relative_to(docs.parent).as_posix()
        fresh = render(text, name, blocks)
        if fresh == text:
            continue
        changed.append(name)
        if write:
            write_text(page, fresh, newline="\n")
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=COMMAND,
        description="Write the generated blocks of the docs' pages (option, corpus, "
        "results and reason-code tables, each command's --help, included files) from "
        "the code.",
    )
    parser.add_argument("docs", nargs="?", default="docs", help="the docs folder (docs)")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming each stale page"
    )
    args = parser.parse_args(argv)
    docs = Path(args.docs)
    if not docs.is_dir():
        print(f"error: {args.docs}: no such folder", file=sys.stderr)
        return 2
    try:
        changed = stale(docs, write=not args.check)
    except VaultError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name in changed:
        if args.check:
            print(f"{name}: stale generated blocks; run `{COMMAND}`")
        else:
            print(f"{name}: written")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
