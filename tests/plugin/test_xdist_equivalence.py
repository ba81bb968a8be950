"""One representative run, serially and with `-n 2`: every output is the same.

This replaces an `[xdist]` variant per feature. The run covers what a nightly run
writes: two controls and a team's `agent:` on a sample of the shipped corpus, under a
passports folder of the team's, the adaptive track with its exported finds, a judge, the
results file, JUnit XML, the HTML report, the baseline gate against the last release, and
(a second pair of runs) the decision snapshots.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_vault.guard.folder import SHIPPED

from ..report.test_otel import counts, row_counts, validate
from ..results import read_rows

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "cases"
COMMON = ("-p", "no:cacheprovider", "-p", "no:randomly", "--vault-progress=0")
SAMPLE = ("cases", *COMMON, "--vault-sample=24", "--vault-seed=5", "--vault-passports=mine")
RUN = (
    *SAMPLE,
    "--vault-model=scripted:reference",
    "--vault-model=agent:plain_agent:make",
    "--vault-model=scripted:receipt-trusting",
    "--vault-attacker=scripted:escalate",
    "--vault-judge=scripted:judge-lenient",
    "--vault-baseline=base.parquet",
    "--vault-baseline-model=scripted:reference",
)


def section(lines: list[str], head: str, last: str) -> list[str]:
    """The lines from the one holding `head` to the first starting with `last`."""
    start = next(i for i, x in enumerate(lines) if head in x)
    end = next(i for i in range(start, len(lines)) if lines[i].startswith(last))
    return [x for x in lines[start : end + 1] if x.strip()]


def summary(lines: list[str]) -> list[str]:
    return section(lines, "pytest-vault summary", "results:")[:-1]  # its file differs


def gate(lines: list[str]) -> list[str]:
    return section(lines, "pytest-vault baseline", "regression against the baseline")


def junit(path: Path) -> dict[str, tuple[str, dict[str, str | None]]]:
    """Each test's outcome and recorded properties (times and hosts left out)."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = next((child.tag for child in case if child.tag != "properties"), "passed")
        props = {p.get("name") or "": p.get("value") for p in case.iter("property")}
        out[f"{case.get('classname')}::{case.get('name')}"] = (outcome, props)
    return out


@pytest.fixture
def corpus(pytester: pytest.Pytester) -> Path:
    shutil.copytree(CASES, pytester.path / "cases")
    mine = shutil.copytree(SHIPPED, pytester.path / "mine")
    # Level 3 from a file of the team's own: the workers must load and record it.
    custom = (SHIPPED / "level-3.json").read_bytes().replace(b'"1.0.0"', b'"1.0.9"')
    (mine / "custom.json").write_bytes(custom)
    toml = (mine / "levels.toml").read_text()
    (mine / "levels.toml").write_text(toml.replace('"level-3.json"', '"custom.json"'))
    shutil.copy(ROOT / "examples" / "plain_agent.py", pytester.path)
    return pytester.path / "cases"


def test_serial_and_two_workers_write_the_same_outputs(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    # The last release: the reference model alone, on the same sample.
    base = pytester.runpytest(
        *RUN[:6], "--vault-model=scripted:reference", "--vault-results=base.parquet"
    )
    assert base.ret == 0
    outputs: dict[str, pytest.RunResult] = {}
    for name, workers in (("serial", ()), ("spread", ("-n", "2"))):
        outputs[name] = pytester.runpytest(
            *RUN,
            *workers,
            f"--vault-results={name}.parquet",
            f"--junitxml={name}.xml",
            f"--vault-report={name}.html",
            f"--vault-export-found={name}.jsonl",
            f"--vault-otel={name}.otel.json",
        )
    serial, spread = outputs["serial"], outputs["spread"]
    # The receipt-trusting model regresses against the reference baseline: exit 1 both ways.
    assert serial.ret == spread.ret == 1
    # Workers deselect the unsampled tests themselves: only the serial run counts them.
    outcomes = {k: v for k, v in serial.parseoutcomes().items() if k != "deselected"}
    assert outcomes == spread.parseoutcomes() and outcomes["passed"] > 0
    assert summary(serial.outlines) == summary(spread.outlines)
    verdict = gate(serial.outlines)
    assert verdict == gate(spread.outlines)
    assert verdict[-1] == "regression against the baseline: exit status 1"

    path = pytester.path
    rows, meta = read_rows(path / "serial.parquet")
    assert (rows, meta) == read_rows(path / "spread.parquet")
    assert len(rows) == sum(outcomes.values())
    assert {r["track"] for r in rows} == {"A", "B", "adaptive"}
    assert {r["model"] for r in rows} == {
        "scripted:reference",
        "agent:plain_agent:make",
        "scripted:receipt-trusting",
    }
    assert [meta["passports"][str(n)]["file"] for n in range(1, 6)] == [
        "level-1.json",
        "level-2.json",
        "custom.json",
        "level-4.json",
        "level-5.json",
    ]
    assert junit(path / "serial.xml") == junit(path / "spread.xml")
    assert (path / "serial.html").read_bytes() == (path / "spread.html").read_bytes()
    finds = (path / "serial.jsonl").read_bytes()
    assert finds and finds == (path / "spread.jsonl").read_bytes()
    # The traces: each run has its own id and clock, so their counts are compared.
    traces = [json.loads((path / f"{n}.otel.json").read_text()) for n in ("serial", "spread")]
    assert counts(validate(traces[0])) == counts(validate(traces[1])) == row_counts(rows)


def test_serial_and_two_workers_record_the_same_decision_snapshots(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    shipped = {p.name: p.read_bytes() for p in (corpus / "__snapshots__").iterdir()}
    args = ("cases", *COMMON, "-p", "syrupy", "--vault-decisions")
    written = {}
    for name, workers in (("serial", ()), ("spread", ("-n", "2"))):
        shutil.rmtree(corpus / "__snapshots__")
        result = pytester.runpytest(*args, *workers, "--snapshot-update")
        assert result.ret == 0, name
        written[name] = {p.name: p.read_bytes() for p in (corpus / "__snapshots__").iterdir()}
        # And against what they wrote: every test passes.
        pytester.runpytest(*args, *workers).assert_outcomes(passed=result.parseoutcomes()["passed"])
    # The same files, byte for byte; and the same as the shipped ones.
    assert written["serial"] == written["spread"] == shipped
