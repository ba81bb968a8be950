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

# A run's traces sent to a stand-in collector on 127.0.0.1, with the keyed input hash.
OTEL_EXPORT = """
import http.server, os, subprocess, sys, threading
got = []
class Collector(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        got.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
threading.Thread(target=server.serve_forever, daemon=True).start()
env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{server.server_port}",
       "VAULT_OTEL_KEY": "nox-key"}
run = subprocess.run([sys.executable, "-m", "pytest", "--vault-corpus", "builtin:level-2", "-q",
                      "-p", "no:cacheprovider", "--vault-otel", "t.json",
                      "--vault-otel-key-env", "VAULT_OTEL_KEY"], env=env, capture_output=True,
                     text=True, timeout=600)
assert run.returncode == 0 and "WARNING" not in run.stderr, run.stdout[-2000:] + run.stderr
assert got and b"hmac-sha256:" in open("t.json", "rb").read(), len(got)
"""

# A run's Inspect logs read back by Inspect's own reader: a sample per row.
INSPECT_READ = """
import glob, pyarrow.parquet as pq
from inspect_ai.log import read_eval_log
logs = [read_eval_log(p) for p in sorted(glob.glob("logs/*.eval"))]
rows = pq.read_table("r.parquet").num_rows
assert len(logs) == 10 and sum(len(log.samples) for log in logs) == rows, (len(logs), rows)
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
    # The traces to a collector, through the OpenTelemetry SDK's exporter.
    "otel": [["python", "-c", OTEL_EXPORT]],
    # The run as Inspect logs (one per model and architecture), read back.
    "inspect": [
        [
            "pytest",
            "--vault-corpus",
            "builtin:level-2",
            "-q",
            "-p",
            "no:cacheprovider",
            "--vault-results",
            "r.parquet",
        ],
        ["vault-report", "r.parquet", "--inspect-log", "logs"],
        ["python", "-c", INSPECT_READ],
    ],
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
