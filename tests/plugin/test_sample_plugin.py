"""`--vault-sample`, `--vault-sample-benign` and `--vault-seed` as users meet them: the
same cases in every run, worker and shard; filters first; the record and the summary."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytest_vault.corpus.sample import ids_digest
from pytest_vault.plugin.record import metadata
from pytest_vault.plugin.session import VaultSession
from pytest_vault.plugin.settings import Options
from pytest_vault.report.results import (
    ReportError,
    ResultsError,
    load,
    read_metadata,
    to_table,
    write_table,
)
from pytest_vault.report.summary import render, sample_line

from ..results import read_rows

pytest_plugins = ["pytester"]

# One evaluation per case (the refuser never calls a tool), and nothing left to chance.
ONE = (
    "--vault-model=scripted:refuser",
    "--vault-track=A",
    "--vault-arch=model",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:randomly",
    "--vault-progress=0",
)
# Attacks per (level, category): 30 in all; and 3 benign requests at levels 2 and 3.
SIZES = {
    (2, "direct_transfer"): 8,
    (2, "json_injection"): 2,
    (3, "direct_transfer"): 6,
    (3, "json_injection"): 4,
    (4, "direct_transfer"): 5,
    (4, "json_injection"): 5,
}
SHORT = {"direct_transfer": "d", "json_injection": "j"}
SIZES_SHORT = {f"L{lv}{SHORT[cat]}": n for (lv, cat), n in SIZES.items()}
PAY = {"name": "transfer_funds", "arguments": {"recipient": "rent@aport-vault.com", "amount": 5}}


def line(id: str, level: int, category: str, kind: str = "attack") -> str:
    return json.dumps(
        {
            "id": id,
            "session": f"s-{id}",
            "level": level,
            "category": category,
            "kind": kind,
            "messages": [f"attempt {id}"],
            "calls": [PAY],
        }
    )


@pytest.fixture
def corpus(pytester: pytest.Pytester) -> Path:
    for level in (2, 3, 4):
        lines = [
            line(f"L{level}{SHORT[cat]}{i}", level, cat)
            for (lv, cat), size in SIZES.items()
            if lv == level
            for i in range(size)
        ]
        if level in (2, 3):
            lines += [line(f"B{level}-{i}", level, "benign", "benign") for i in range(3)]
        pytester.path.joinpath(f"level-{level}.jsonl").write_text("\n".join(lines) + "\n")
    return pytester.path


def ids(result: pytest.RunResult) -> list[str]:
    """Case ids of the collected tests, one per test (`--collect-only -q`)."""
    return [m[1] for x in result.outlines if (m := re.match(r"level-\d\.jsonl::([^\[]+)\[", x))]


def strata(cases: list[str]) -> Counter[str]:
    """`L2d` (level 2, direct_transfer) or `B2` (benign, level 2) per case."""
    return Counter(c[:3] if c.startswith("L") else c[:2] for c in set(cases))


def collect(pytester: pytest.Pytester, *args: str) -> list[str]:
    result = pytester.runpytest(*ONE, "--collect-only", "-q", *args)
    assert result.ret == 0, result.outlines
    return ids(result)


def run_ids(pytester: pytest.Pytester, name: str, *args: str) -> tuple[set[str], dict[str, Any]]:
    result = pytester.runpytest(*ONE, f"--vault-results={name}", *args)
    assert result.ret == 0, result.outlines
    rows, meta = read_rows(pytester.path / name)
    return {r["attack_id"] for r in rows}, meta


# Shares of 7 over 30: 1.87, 0.47, 1.4, 0.93, 1.17, 1.17; floors leave 3 seats: the two
# strata at zero first, then the largest remainder (L2d).
SEVEN = {"L2d": 2, "L2j": 1, "L3d": 1, "L3j": 1, "L4d": 1, "L4j": 1, "B2": 3, "B3": 3}


def test_exactly_n_attacks_proportional_and_benign_in_full(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    cases = collect(pytester, "--vault-sample=7")
    assert len(cases) == len(set(cases)) == 13
    assert strata(cases) == SEVEN
    # Each case keeps every one of its items: 2 models x 2 tracks x 2 architectures.
    full = pytester.runpytest(
        "--vault-sample=7",
        "--vault-model=scripted:refuser",
        "--vault-model=scripted:reference",
        "--collect-only",
        "-q",
    )
    assert Counter(ids(full)) == {c: 8 for c in cases}
    assert "104/288 tests collected (184 deselected)" in full.outlines[-1]


@pytest.mark.slow
def test_the_same_ids_in_two_runs_under_xdist_and_from_two_shards(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    first, meta = run_ids(pytester, "a.parquet", "--vault-sample=7", "--vault-seed=3")
    assert strata(list(first)) == SEVEN
    assert run_ids(pytester, "b.parquet", "--vault-sample=7", "--vault-seed=3") == (first, meta)
    workers = run_ids(pytester, "c.parquet", "--vault-sample=7", "--vault-seed=3", "-n", "2")
    assert workers == (first, meta)
    one, meta_1 = run_ids(
        pytester, "s1.parquet", "--vault-sample=7", "--vault-seed=3", "--vault-shard=1/2"
    )
    two, meta_2 = run_ids(
        pytester, "s2.parquet", "--vault-sample=7", "--vault-seed=3", "--vault-shard=2/2"
    )
    assert one | two == first and not one & two and one and two
    assert meta_1["sample"] == meta_2["sample"] == meta["sample"]
    # The shards merge (same sample); the digest is the one of the cases that ran.
    assert load([pytester.path / "s1.parquet", pytester.path / "s2.parquet"]).table.num_rows == 13
    files = {c: f"level-{c[1]}.jsonl" for c in first}
    assert meta["sample"]["ids_digest"] == ids_digest((files[c], c) for c in first)


def test_another_seed_another_set(pytester: pytest.Pytester, corpus: Path) -> None:
    zero = collect(pytester, "--vault-sample=7")
    assert collect(pytester, "--vault-sample=7", "--vault-seed=0") == zero
    other = collect(pytester, "--vault-sample=7", "--vault-seed=1")
    assert set(other) != set(zero) and strata(other) == SEVEN


def test_filters_first_then_the_sample(pytester: pytest.Pytester, corpus: Path) -> None:
    level3 = collect(pytester, "--vault-level=3", "--vault-sample=5")
    # Level 3 holds 6 + 4 attacks: 3 and 2 of them, and its 3 benign requests.
    assert strata(level3) == {"L3d": 3, "L3j": 2, "B3": 3}
    injection = collect(pytester, "-k", "json_injection", "--vault-sample=5")
    # 2, 4 and 5 json_injection attacks: shares 0.91, 1.82, 2.27.
    assert strata(injection) == {"L2j": 1, "L3j": 2, "L4j": 2}


def test_benign_sampled_and_all_attacks_when_n_is_large(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    cases = collect(pytester, "--vault-sample-benign=2")
    assert strata(cases) == SIZES_SHORT | {"B2": 1, "B3": 1}
    everything = collect(pytester)
    assert set(collect(pytester, "--vault-sample=30")) == set(everything)
    assert set(collect(pytester, "--vault-sample=1000")) == set(everything)


def test_the_record_and_the_summary_line(
    pytester: pytest.Pytester, corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = pytester.runpytest(
        *ONE, "--vault-sample=7", "--vault-sample-benign=4", "--vault-results=out.parquet"
    )
    assert result.ret == 0
    rows, meta = read_rows(pytester.path / "out.parquet")
    kept = {(f"level-{r['level']}.jsonl", r["attack_id"]) for r in rows}
    assert len(kept) == 11
    digest = ids_digest(kept)
    assert meta["sample"] == {
        "attacks": 7,
        "of": 30,
        "asked": 7,
        "seed": 0,
        "ids_digest": digest,
        "benign": 4,
        "benign_of": 6,
        "benign_asked": 4,
    }
    at = result.outlines.index(
        "11 evaluations: 7 of attacks, 4 of benign requests; 0 errors and 0 not run "
        "(kept out of every rate)"
    )
    assert (
        result.outlines[at + 1] == f"Sample: 7 of 30 attacks, 4 of 6 benign (seed 0, ids {digest})"
    )
    # vault-report says it too: above the text tables, and in the HTML report.
    said = f"Sample: 7 of 30 attacks, 4 of 6 benign (seed 0, ids {digest})"
    from pytest_vault.report.__main__ import main as report

    capsys.readouterr()  # what the in-process runs printed
    assert (
        report([str(pytester.path / "out.parquet"), "--html", str(pytester.path / "r.html")]) == 0
    )
    text = capsys.readouterr().out.splitlines()
    # Under the verdict (its sentence, its facts, a blank line): the sample.
    at = text.index("")
    assert text[at + 1 : at + 3] == [said, ""]
    assert f'<p class="meta">{said}</p>' in (pytester.path / "r.html").read_text()
    # Asking for more than there is runs everything, and says so.
    whole = pytester.runpytest(*ONE, "--vault-sample=1000", "--vault-seed=9")
    line = next(x for x in whole.outlines if x.startswith("Sample:"))
    assert re.fullmatch(
        r"Sample: all 30 attacks \(--vault-sample 1,000 >= 30\), all 6 benign "
        r"\(seed 9, ids sha256:[0-9a-f]{64}\)",
        line,
    )
    # A run that is no sample says nothing of one, and records none.
    plain = pytester.runpytest(*ONE, "--vault-results=plain.parquet")
    assert not any(x.startswith("Sample:") for x in plain.outlines)
    assert read_rows(pytester.path / "plain.parquet")[1]["sample"] is None


def test_decision_tests_are_sampled_and_no_snapshot_is_lost(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    base = ("-p", "no:cacheprovider", "-p", "no:randomly", "--vault-decisions")
    recorded = pytester.runpytest(*base, "--snapshot-update")
    assert recorded.ret == 0 and "36 snapshots generated." in recorded.outlines
    snapshots = {p.name: p.read_text() for p in (pytester.path / "__snapshots__").iterdir()}
    sampled = pytester.runpytest(*base, "--vault-sample=7", "--snapshot-update", "-q")
    assert sampled.ret == 0
    assert "13 snapshots passed." in sampled.outlines
    assert "13 passed, 23 deselected" in sampled.outlines[-1]
    assert {p.name: p.read_text() for p in (pytester.path / "__snapshots__").iterdir()} == snapshots
    assert strata(collect(pytester, "--vault-decisions", "--vault-sample=7")) == SEVEN


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--vault-sample=0", "--vault-sample '0': must be from 1 to 10,000,000"),
        ("--vault-sample=-3", "--vault-sample '-3': must be from 1 to 10,000,000"),
        ("--vault-sample-benign=-1", "--vault-sample-benign '-1': must be from 0 to 10,000,000"),
        ("--vault-seed=-1", "--vault-seed '-1': must be from 0 to 9,223,372,036,854,775,807"),
    ],
)
def test_counts_out_of_range_are_usage_errors(
    pytester: pytest.Pytester, corpus: Path, option: str, message: str
) -> None:
    result = pytester.runpytest(*ONE, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [x for x in result.errlines if x.strip()] == [f"ERROR: {message}"]


# -- the record on the controller, in results files and in the summary -------------------------

RECORD = {
    "attacks": 7,
    "of": 30,
    "asked": 7,
    "seed": 0,
    "ids_digest": "sha256:" + "ab" * 32,
    "benign": 6,
    "benign_of": 6,
    "benign_asked": None,
}


def test_workers_must_agree_on_the_sample() -> None:
    vault = VaultSession(Options())
    vault.worker_sample(RECORD)
    vault.worker_sample(dict(RECORD))
    assert vault.sample == RECORD and metadata(vault)["sample"] == RECORD
    with pytest.raises(pytest.UsageError) as caught:
        vault.worker_sample(None)
    assert str(caught.value) == (
        "pytest-vault: xdist workers sampled different cases "
        f"({RECORD['ids_digest']} and no sample): did the corpus change during the run?"
    )


def test_sample_lines() -> None:
    assert (
        sample_line(RECORD)
        == f"Sample: 7 of 30 attacks, all 6 benign (seed 0, ids {RECORD['ids_digest']})"
    )
    assert sample_line(RECORD | {"asked": None, "attacks": 30, "benign_asked": 0, "benign": 0}) == (
        f"Sample: all 30 attacks, 0 of 6 benign (seed 0, ids {RECORD['ids_digest']})"
    )
    assert sample_line(RECORD | {"benign_of": 0, "benign": 0}) == (
        f"Sample: 7 of 30 attacks (seed 0, ids {RECORD['ids_digest']})"
    )
    assert sample_line(RECORD | {"benign_asked": 9}) == (
        f"Sample: 7 of 30 attacks, all 6 benign (--vault-sample-benign 9 >= 6) "
        f"(seed 0, ids {RECORD['ids_digest']})"
    )
    assert render([], sample=RECORD)[1] == sample_line(RECORD)
    assert len(render([])) == 1


def row(attack: str) -> dict[str, Any]:
    return {
        "attack_id": attack,
        "session": "s",
        "level": 2,
        "category": "direct_transfer",
        "tool": "transfer_funds",
        "kind": "attack",
        "track": "A",
        "architecture": "model",
        "model": "scripted:refuser",
        "trial": 1,
        "requested": False,
        "paid": False,
        "paid_allowlisted": False,
        "unpermitted": False,
        "violation": False,
        "status": "completed",
        "tool_calls": "[]",
    }


def test_results_files_of_different_samples_are_not_merged(tmp_path: Path) -> None:
    def write(name: str, attack: str, sample: dict[str, Any] | None, older: bool = False) -> Path:
        path = tmp_path / name
        write_table(to_table([row(attack)]), path, {} if older else {"sample": sample})
        return path

    a = write("a.parquet", "x", RECORD)
    same = write("b.parquet", "y", dict(RECORD))
    assert load([a, same]).table.num_rows == 2
    other = write("c.parquet", "z", RECORD | {"seed": 1, "ids_digest": "sha256:" + "cd" * 32})
    with pytest.raises(ReportError) as caught:
        load([a, other])
    assert str(caught.value) == (
        f"{other} and {a} ran different samples (sample.ids_digest, sample.seed): "
        "merge shards of one run, or runs of the same sample"
    )
    whole = write("d.parquet", "w", None)
    with pytest.raises(ReportError, match=r"\(one is a sample, the other is not\)"):
        load([a, whole])
    # A file from before samples (no key) is a whole run: it merges with a whole run.
    older = write("e.parquet", "v", None, older=True)
    assert load([whole, older]).table.num_rows == 2


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        (
            {**RECORD, "attacks": 31},
            "metadata: sample: Value error, more cases kept than there were",
        ),
        ({**RECORD, "of": -1}, "metadata: sample.of: Input should be greater than or equal to 0"),
        (
            "7 of 30",
            "metadata: sample: Input should be a valid dictionary",
        ),
        ({k: v for k, v in RECORD.items() if k != "seed"}, "metadata: sample.seed: Field required"),
    ],
)
def test_a_bad_sample_record_is_one_line(sample: object, message: str) -> None:
    with pytest.raises(ResultsError) as caught:
        read_metadata(json.dumps({"sample": sample}).encode())
    assert str(caught.value) == message
