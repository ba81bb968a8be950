"""`vault-guard lint --format sarif` and `vault-guard diff --format sarif`: valid SARIF
2.1.0, each result at the line of its passport field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_vault.guard.folder import SHIPPED
from pytest_vault.policy.__main__ import main

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "sarif-2.1.0.schema.json").read_text()
)


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    old = Path(shutil.copytree(SHIPPED, tmp_path / "old"))
    new = Path(shutil.copytree(SHIPPED, tmp_path / "new"))
    level_2 = json.loads((new / "level-2.json").read_text())
    charge = level_2["limits"]["payments.charge"]
    charge["allowed_merchant_ids"].append("landlord@x.test")  # widens
    charge["currency_limits"]["USD"]["max_per_tx"] = 100000  # $1,000: narrows
    (new / "level-2.json").write_text(json.dumps(level_2, indent=2))
    level_3 = json.loads((new / "level-3.json").read_text())
    level_3["limits"]["payments.charge"]["allowed_merchant_ids"] = []  # fail open
    (new / "level-3.json").write_text(json.dumps(level_3, indent=2))
    return old, new


def sarif(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    status = main(list(args))
    log = json.loads(capsys.readouterr().out)
    jsonschema.validate(log, SCHEMA)
    return status, log


def located(log: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(rule, level, file name, the text of the located line) of each result."""
    out = []
    for r in log["runs"][0]["results"]:
        where = r["locations"][0]["physicalLocation"]
        path = Path(where["artifactLocation"]["uri"])
        line = path.read_text().splitlines()[where["region"]["startLine"] - 1].strip()
        out.append((r["ruleId"], r["level"], path.name, line))
    return out


def test_diff_sarif_puts_each_change_at_its_field(
    folders: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = folders
    status, log = sarif(capsys, "diff", str(old), str(new), "--format", "sarif")
    assert status == 0
    assert sorted(located(log)) == [
        ("vault/narrows", "note", "level-2.json", '"max_per_tx": 100000,'),
        ("vault/widens", "warning", "level-2.json", '"allowed_merchant_ids": ['),
        ("vault/widens", "warning", "level-3.json", '"allowed_merchant_ids": [],'),
    ]
    texts = [r["message"]["text"] for r in log["runs"][0]["results"]]
    assert any("landlord@x.test" in t and "witness" in t for t in texts)


def test_lint_sarif_puts_each_finding_at_its_line(
    folders: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, new = folders
    status, log = sarif(capsys, "lint", str(new), "--format", "sarif")
    assert status == 1  # the empty allowlist is an error
    results = located(log)
    assert ("empty-allowlist", "error", "level-3.json", '"allowed_merchant_ids": [],') in results
    rules = {r["id"]: r for r in log["runs"][0]["tool"]["driver"]["rules"]}
    assert {r for r, *_ in results} == set(rules)
    assert rules["empty-allowlist"]["help"]["text"].startswith("An empty allowed_merchant_ids")
