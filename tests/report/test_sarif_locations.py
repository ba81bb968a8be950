"""SARIF results located where the team can act (issue 40, point 5): a case of theirs at
its file and line, percent-encoded; a case of the built-in corpus never into
site-packages, but named by a logical location, at the repository's configuration file
(GitHub's code scanning requires a physical location on every result)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_vault.core.sarif import uri
from pytest_vault.report.results import to_table
from pytest_vault.report.sarif import report_sarif

from .rows import row

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "sarif-2.1.0.schema.json").read_text()
)


def paid(attack_id: str, source: str, architecture: str) -> dict[str, Any]:
    call = {
        "name": "transfer_funds",
        "arguments": {"recipient": "x@evil.test"},
        "executed": True,
        "result": "ok",
        "permitted": False,
        "audit": {"allow": True, "codes": ["guard.allowed"]},
        "transfer": {"recipient": "x@evil.test", "amount_minor": 4000, "currency": "USD"},
    }
    return row(
        attack_id=attack_id,
        source=source,
        architecture=architecture,
        requested=True,
        paid=True,
        unpermitted=True,
        violation=architecture == "guarded",
        tool_calls=json.dumps([call]),
    )


def test_a_builtin_case_is_named_logically_and_a_users_file_physically() -> None:
    user = "cases/my cases #1.jsonl"
    log = report_sarif(
        to_table(
            [
                paid("L2-s07-a3", "builtin/level-2.jsonl:27", "model"),
                paid("mine", f"{user}:3", "guarded"),
                row(attack_id="fine", source="builtin/level-2.jsonl:28"),  # no finding
            ]
        )
    )
    jsonschema.validate(log, SCHEMA)
    results = {r["properties"]["attack_id"]: r for r in log["runs"][0]["results"]}
    assert sorted(results) == ["L2-s07-a3", "mine"]
    [builtin] = results["L2-s07-a3"]["locations"]
    assert builtin["logicalLocations"] == [
        {"fullyQualifiedName": "pytest-vault builtin corpus/level-2.jsonl/L2-s07-a3"}
    ]
    # Not into the installed package: at the repository's config file, and it says so.
    assert builtin["physicalLocation"] == {
        "artifactLocation": {"uri": "pyproject.toml"},
        "region": {"startLine": 1},
    }
    message = results["L2-s07-a3"]["message"]["text"]
    assert message.endswith(
        "; case L2-s07-a3 of the built-in corpus (level-2.jsonl, line 27), shipped in "
        "pytest-vault, in no file of this repository: located at pyproject.toml, line 1"
    )
    assert "builtin/" not in json.dumps(builtin["physicalLocation"])
    [mine] = results["mine"]["locations"]
    assert mine == {
        "physicalLocation": {
            "artifactLocation": {"uri": "cases/my%20cases%20%231.jsonl"},
            "region": {"startLine": 3},
        }
    }
    assert mine["physicalLocation"]["artifactLocation"]["uri"] == uri(user)
    assert "built-in" not in results["mine"]["message"]["text"]


def test_each_attack_the_gate_found_regressed_is_a_result_where_its_case_is() -> None:
    # The results file keeps the gate's regressed attacks (`gate_regressed`): each is an
    # error at its case, the team's file or the built-in corpus's logical location.
    regressed = [
        {
            "model": "m",
            "levels": "2-4",
            "measure": "A: unpermitted, model alone",
            "attack_id": attack,
            "session": "s1",
            "track": "A",
            "architecture": "model",
            "event": "unpermitted",
            "this": 1,
            "baseline": 0,
            "trials": 1,
        }
        for attack in ("mine", "L2-s07-a3")
    ]
    table = to_table(
        [
            row(attack_id="mine", source="cases/a.jsonl:3"),
            row(attack_id="L2-s07-a3", source="builtin/level-2.jsonl:27"),
        ]
    )
    log = report_sarif(table, regressed)
    jsonschema.validate(log, SCHEMA)
    results = log["runs"][0]["results"]
    assert [(r["ruleId"], r["level"], r["properties"]["attack_id"]) for r in results] == [
        ("vault/regression", "error", "L2-s07-a3"),
        ("vault/regression", "error", "mine"),
    ]
    assert results[1]["message"]["text"] == (
        "m regressed against the baseline (A: unpermitted, model alone, levels 2-4): mine "
        "(session s1, track A, model): unpermitted in 1 of 1 trials, baseline 0 of 1"
    )
    where = results[1]["locations"][0]["physicalLocation"]
    assert (where["artifactLocation"]["uri"], where["region"]["startLine"]) == (
        "cases/a.jsonl",
        3,
    )
    assert results[0]["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == (
        "pytest-vault builtin corpus/level-2.jsonl/L2-s07-a3"
    )
    # The OWASP ASI entries the regressed case's category tests (direct_transfer's).
    assert [r["properties"]["tags"] for r in results] == [["owasp:agentic:asi02"]] * 2
    assert report_sarif(table)["runs"][0]["results"] == []  # no gate: no such result


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"this": -1}, "gate_regressed[0].this: Input should be greater than or equal to 0"),
        ({"trials": "3"}, "gate_regressed[0].trials: Input should be a valid integer"),
        ({"extra": 1}, "gate_regressed[0].extra: Unexpected keyword argument"),
        ({"event": None}, "gate_regressed[0].event: Input should be a valid string"),
    ],
)
def test_a_regressed_record_is_checked_on_read_against_the_gate_s_one_definition(
    tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    """`gate_regressed` holds the gate's `Regressed` findings: read back against that one
    definition, a bad one is one line naming its field."""
    from pytest_vault.report.results import Regressed, ResultsError, read_table, write_results

    good = Regressed("m", "2-4", "A unpermitted", "a1", "s1", "A", "model", "unpermitted", 2, 0, 3)
    path = tmp_path / "r.parquet"
    write_results([row()], path, {"models": ["m"], "gate_regressed": [asdict(good)]})
    assert read_table(path)[1]["gate_regressed"] == [asdict(good)]
    write_results([row()], path, {"models": ["m"], "gate_regressed": [asdict(good) | change]})
    with pytest.raises(ResultsError) as caught:
        read_table(path)
    assert str(caught.value) == f"metadata: {said}"
