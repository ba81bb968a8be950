"""The matrix pytest-vault is tested on, and each extra on its own.

    nox -s tests              # the suite on the newest pytest and pytest-xdist (whole),
                              # and on the oldest stated in pyproject.toml (not slow)
    nox -s extras             # each extra installed alone in a fresh environment, used

.ci/run calls both. Each session is a fresh virtual environment of the running Python.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = False

# The oldest versions pyproject.toml states (its lower bounds): the plugin uses internals
# of pytest, xdist and syrupy, so each is tested at both ends of its stated range.
OLDEST = ("pytest==8.4.0", "pytest-xdist==3.6.1", "syrupy==7.0.2")


@nox.session
@nox.parametrize("versions", ["oldest", "newest"])
def tests(session: nox.Session, versions: str) -> None:
    """The README's set-up and test command: `pip install -e '.[test]' && pytest tests`
    (on two workers), on the newest versions; the not-slow suite on the oldest."""
    session.install("-e", ".[test]")
    if versions == "oldest":
        session.install(*OLDEST)
        session.run("python", "-m", "pip", "list", "--format=freeze", silent=False)
        session.run("pytest", "tests", "-m", "not slow", "-n", "2", *session.posargs)
    else:
        session.install("--upgrade", "pytest", "pytest-xdist", "syrupy")
        session.run("pytest", "tests", "-n", "2", *session.posargs)


MCP_INITIALIZE = """
import json, subprocess
client = {"name": "nox", "version": "0"}
hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}}
bank = subprocess.run(["vault-mcp", "--level", "2"], input=json.dumps(hello) + "\\n",
                      capture_output=True, text=True, timeout=120)
answer = json.loads(bank.stdout.splitlines()[0])
assert answer["result"]["serverInfo"]["name"] == "pytest-vault bank", bank.stdout + bank.stderr
"""

# Each extra alone, and what shows it works: a command run in an empty folder.
EXTRAS: dict[str, list[list[str]]] = {
    # No extra: the built-in corpus on the five controls.
    "none": [["pytest", "--vault-corpus", "builtin:level-2", "-q", "-p", "no:cacheprovider"]],
    "providers": [
        ["python", "-c", "import openai, anthropic, aiohttp"],
        # A plan asks no provider and needs no key: the spec is claimed, its SDK found.
        [
            "pytest",
            "--vault-corpus",
            "builtin:level-2",
            "--vault-model",
            "openai:gpt-4.1-mini",
            "--vault-plan",
            "-p",
            "no:cacheprovider",
        ],
    ],
    "snapshots": [
        [
            "pytest",
            "--vault-corpus",
            "builtin:level-2",
            "--vault-decisions",
            "--snapshot-update",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
    ],
    "xdist": [
        ["pytest", "--vault-corpus", "builtin:level-2", "-n", "2", "-q", "-p", "no:cacheprovider"]
    ],
    # The bank served over stdio answers an MCP client's first request.
    "mcp": [["python", "-c", MCP_INITIALIZE]],
    "pydantic-ai": [["python", "-c", "import pytest_vault.adapters.pydantic_ai"]],
    "openai-agents": [["python", "-c", "import pytest_vault.adapters.openai_agents"]],
    "agentdojo": [
        [
            "python",
            "-m",
            "pytest_vault.corpus",
            "import",
            "agentdojo",
            "--direct",
            "--out",
            "a.jsonl",
        ],
        ["pytest", "--vault-corpus", "a.jsonl", "-q", "-p", "no:cacheprovider"],
    ],
}


@nox.session
@nox.parametrize("extra", [*EXTRAS, "docs"])
def extras(session: nox.Session, extra: str) -> None:
    """One extra, installed alone from the working tree into a fresh environment."""
    root = Path(__file__).parent
    session.install(str(root) if extra == "none" else f"{root}[{extra}]")
    if extra == "docs":  # CONTRIBUTING's command
        with tempfile.TemporaryDirectory() as site:
            session.run("mkdocs", "build", "--strict", "--quiet", "-d", site)
        return
    with tempfile.TemporaryDirectory() as empty:
        session.chdir(empty)
        for command in EXTRAS[extra]:
            session.run(*command)
