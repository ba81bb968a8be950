"""The CI workflow to copy: valid against GitHub's workflow schema, and every option it
passes to pytest and vault-report is one they have."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import RunPytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "docs" / "ci" / "github-actions.yml"
pytest.importorskip("check_jsonschema")


def schema_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.github-workflows",
            str(path),
        ],
        capture_output=True,
        text=True,
    )


def test_the_workflow_is_valid_against_githubs_schema() -> None:
    done = schema_check(WORKFLOW)
    assert (done.returncode, done.stdout.strip()) == (0, "ok -- validation done")


def test_the_schema_check_can_fail(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    # A job without runs-on, and a step that is neither `uses` nor `run`.
    broken.write_text(
        WORKFLOW.read_text().replace("runs-on: ubuntu-latest", "runs_on: ubuntu-latest", 1)
    )
    done = schema_check(broken)
    assert done.returncode == 1
    assert "validation errors" in done.stdout


def _help(*command: str) -> set[str]:
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return set(re.findall(r"--[a-z][a-z-]+", out))


def _commands(tool: str) -> list[str]:
    """Each command line of the workflow's `run` steps that calls `tool`."""
    from ruamel.yaml import YAML  # check-jsonschema's own YAML reader

    workflow = YAML(typ="safe").load(WORKFLOW.read_text())
    runs = [
        step["run"] for job in workflow["jobs"].values() for step in job["steps"] if "run" in step
    ]
    # A `>-` block folds to one line; a `|` block is one command per line (`\` continues).
    lines = [line for run in runs for line in run.replace("\\\n", " ").splitlines()]
    return [line for line in lines if re.match(rf"\s*{re.escape(tool)}\s", line)]


@pytest.mark.slow  # starts pytest in a subprocess
def test_every_option_the_workflow_uses_exists(run_pytest: RunPytest) -> None:
    used = {
        tool: {
            opt for line in _commands(tool) for opt in re.findall(r"(?<![\w-])--[a-z][a-z-]+", line)
        }
        for tool in ("pytest", "vault-report")
    }
    assert {"--vault-sample", "--vault-shard", "--vault-baseline", "--vault-plan"} <= used["pytest"]
    assert used["vault-report"] == {"--merge-to", "--html", "--format", "--out"}
    assert used["pytest"] - _help(*run_pytest.argv("--help")) == set()
    assert (
        used["vault-report"] - _help(sys.executable, "-m", "pytest_vault.report", "--help") == set()
    )


def test_the_findings_go_to_code_scanning() -> None:
    from ruamel.yaml import YAML

    workflow = YAML(typ="safe").load(WORKFLOW.read_text())
    uploads = [
        step["with"]["sarif_file"]
        for job in workflow["jobs"].values()
        for step in job["steps"]
        if step.get("uses", "").startswith("github/codeql-action/upload-sarif@")
    ]
    assert uploads == ["vault-lint.sarif", "vault.sarif"]
    assert workflow["permissions"]["security-events"] == "write"
    lint = {opt for line in _commands("vault-guard") for opt in re.findall(r"--[a-z-]+", line)}
    assert lint == {"--format"}
    said = subprocess.run(
        [sys.executable, "-m", "pytest_vault.policy", "lint", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "{text,json,sarif}" in said
