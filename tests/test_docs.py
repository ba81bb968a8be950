"""Docs that cannot rot: every shell block of the README and of the docs is run.

The convention (CONTRIBUTING.md):
- ```console: each `$ ` line is a command (a trailing `\\` continues it); it must exit 0,
  and the lines shown after it must appear in its output in order, `...` matching
  anything within a line, and a line of its own `...` any lines;
- ```bash: run as one script under `bash -e`;
- a block right after `<!-- not run: WHY -->` is not run, and says why.

A page's blocks run in order in one fresh folder, with no network and no key.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL = {"console", "bash"}
# Fences that hold no shell: what they show is read, not run.
NOT_SHELL = {"python", "toml", "json", "yaml", "text", "html"}
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    info: str
    lines: list[str]
    line: int  # of the opening fence, 1-based
    not_run: str | None  # why, when marked


def blocks(text: str) -> list[Block]:
    lines = text.split("\n")
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        marker = re.fullmatch(r"<!-- not run: (.+) -->", lines[i - 1].strip()) if i else None
        found.append(Block(m.group(1), lines[i + 1 : end], i + 1, marker and marker.group(1)))
        i = end + 1
    return found


def _matches(shown: str, line: str) -> bool:
    return re.fullmatch(".*".join(map(re.escape, shown.split("..."))), line) is not None


def missing(shown: list[str], output: list[str]) -> str | None:
    """The first shown line the output lacks (in order), or None."""
    at = 0
    for want in shown:
        if want.strip() in ("", "..."):
            continue
        while at < len(output) and not _matches(want, output[at]):
            at += 1
        if at == len(output):
            return want
        at += 1
    return None


def commands(block: Block) -> list[tuple[str, list[str]]]:
    said: list[tuple[str, list[str]]] = []
    for line in block.lines:
        if line.startswith("$ "):
            said.append((line[2:], []))
        elif said and said[-1][0].endswith("\\") and not said[-1][1]:
            said[-1] = (said[-1][0][:-1] + "\n" + line, [])
        elif said:
            said[-1][1].append(line)
    return said


def run_page(text: str, name: str, folder: Path) -> list[str]:
    """What went wrong on one page, a line each; nothing when all its blocks ran."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(PYTEST_ADDOPTS="-p no:randomly -p no:cacheprovider", NO_COLOR="1")
    problems = []
    for block in blocks(text):
        where = f"{name}:{block.line}"
        if block.not_run is not None:
            continue
        if block.info not in SHELL | NOT_SHELL:
            problems.append(f"{where}: ```{block.info}: neither run nor marked not run")
        elif block.info == "bash":
            r = _shell("set -e\n" + "\n".join(block.lines), folder, env)
            if r.returncode != 0:
                problems.append(f"{where}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
        elif block.info == "console":
            for command, shown in commands(block):
                r = _shell(command, folder, env)
                output = (r.stdout + r.stderr).split("\n")
                if r.returncode != 0:
                    problems.append(f"{where}: `{command}` exit {r.returncode}: {output[-5:]}")
                elif (lack := missing(shown, output)) is not None:
                    problems.append(f"{where}: `{command}` did not print {lack!r}")
    return problems


def _shell(script: str, folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shell_block_of_the_page_runs(page: Path, tmp_path: Path) -> None:
    assert run_page(page.read_text(encoding="utf-8"), page.name, tmp_path) == []


def test_the_pages_that_matter_have_runnable_blocks() -> None:
    runnable = {
        p.relative_to(ROOT).as_posix()
        for p in PAGES
        for b in blocks(p.read_text(encoding="utf-8"))
        if b.info in SHELL and b.not_run is None
    }
    assert {
        "README.md",
        *(f"docs/tutorials/{t}.md" for t in ("team", "policy-author", "nightly")),
    } <= runnable
    readme = blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert any("&& pytest tests" in line for b in readme[:3] for line in b.lines)


PAGE = """\
```console
$ echo one; echo two
one
...
two
```

<!-- not run: needs an API key -->
```bash
exit 3
```
"""


@pytest.mark.parametrize(
    ("page", "said"),
    [
        (PAGE, []),
        (
            PAGE.replace("echo two", "echo too"),
            ["p.md:1: `echo one; echo too` did not print 'two'"],
        ),
        (PAGE.replace("echo one;", "false;"), ["p.md:1: `false; echo two` did not print 'one'"]),
        (
            PAGE.replace("$ echo one", "$ exit 4; echo one"),
            ["p.md:1: `exit 4; echo one; echo two` exit 4: ['']"],
        ),
        (PAGE.replace("<!-- not run: needs an API key -->\n", ""), ["p.md:8: exit 3: "]),
        ("```sh\nls\n```\n", ["p.md:1: ```sh: neither run nor marked not run"]),
    ],
    ids=["passes", "output-changed", "command-changed", "command-fails", "unmarked", "sh"],
)
def test_a_changed_command_fails_the_page(tmp_path: Path, page: str, said: list[str]) -> None:
    assert run_page(page, "p.md", tmp_path) == said
