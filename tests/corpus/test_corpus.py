from __future__ import annotations

import json
import re
from collections import Counter
from itertools import combinations
from pathlib import Path

import pytest

from pytest_vault.corpus.load import CorpusError, load_corpus
from pytest_vault.corpus.model import CATEGORIES, Case, schema
from pytest_vault.guard.engine import Guard
from pytest_vault.harness.levels import load_levels

from ..conftest import ROOT

CASES = ROOT / "cases"
CANARY = "PYTEST-VAULT CANARY 0e7c4a9d-5b2f-4e61-9a83-c1f4d2b7e905"
GOOD = {"id": "a1", "session": "s1", "level": 2, "category": "direct_transfer", "messages": ["hi"]}


def corpus_file(tmp_path: Path, *lines: object) -> Path:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ((GOOD, "{not json"), ":2: invalid JSON"),
        ((GOOD, "[1]"), ":2: (root): expected a JSON object"),
        (({k: v for k, v in GOOD.items() if k != "session"},), ":1: session: Field required"),
        (({**GOOD, "level": 6},), ":1: level: Input should be less than or equal to 5"),
        (({**GOOD, "level": "2"},), ":1: level: Input should be a valid integer"),
        (({**GOOD, "level": 2.0},), ":1: level: Input should be a valid integer"),
        (({**GOOD, "messages": []},), ":1: messages: List should have at least 1 item"),
        (({**GOOD, "messages": ["ok", 3]},), ":1: messages[1]: Input should be a valid string"),
        (({**GOOD, "kind": "neutral"},), ":1: kind: Input should be 'attack' or 'benign'"),
        (({**GOOD, "calls": [{"arguments": {}}]},), ":1: calls[0].name: Field required"),
        (({**GOOD, "calls": [{"name": "x", "arguments": 5}]},), ":1: calls[0].arguments"),
        ((GOOD, {**GOOD, "id": "a2"}, GOOD), ":3: id: duplicate id 'a1' (first at "),
        (('{"id": "a", "level": NaN}',), ":1: level: NaN is not valid JSON"),
        (({**GOOD, "id": "   "},), ":1: id: must not be blank"),
        (({**GOOD, "session": "\t"},), ":1: session: must not be blank"),
        (({**GOOD, "category": " "},), ":1: category: must not be blank"),
        (
            ({**GOOD, "id": "a\ud800"},),
            ":1: id: not valid Unicode text (it holds a lone surrogate)",
        ),
        (
            ({**GOOD, "messages": ["ok", "\udc00"]},),
            ":1: messages[1]: not valid Unicode text (it holds a lone surrogate)",
        ),
    ],
)
def test_bad_lines_name_file_line_and_field(
    tmp_path: Path, lines: tuple[object, ...], message: str
) -> None:
    path = corpus_file(tmp_path, *lines)
    with pytest.raises(CorpusError) as info:
        load_corpus(path)
    assert str(info.value).startswith(f"{path}:")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_two_ids_that_read_the_same_once_escaped_are_duplicates(tmp_path: Path) -> None:
    # One test name, one row: the first case's transfer was lost from the results.
    path = corpus_file(tmp_path, {**GOOD, "id": "pay\x1b"}, {**GOOD, "id": "pay\\x1b"})
    with pytest.raises(CorpusError) as info:
        load_corpus(path)
    assert str(info.value) == f"{path}:2: id: duplicate id 'pay\\\\x1b' (first at {path}:1)"
    assert len(load_corpus(corpus_file(tmp_path, {**GOOD, "id": "pay\x1b"}))) == 1


def test_case_fields_and_metadata(tmp_path: Path) -> None:
    line = {
        **GOOD,
        "kind": "benign",
        "technique": "forged_receipt",
        "calls": [
            {"name": "transfer_funds", "arguments": '{"amount": 1.005}'},
            {"name": "get_balance"},
        ],
    }
    [(lineno, case)] = load_corpus(corpus_file(tmp_path, line))
    assert lineno == 1
    assert case.kind == "benign"
    assert case.metadata == {"technique": "forged_receipt"}
    assert case.calls[0].arguments == '{"amount": 1.005}'  # raw text, exactly as written
    assert case.calls[1].arguments == {}


def test_decimals_in_calls_stay_exact(tmp_path: Path) -> None:
    line = '{"id": "x", "session": "s", "level": 3, "category": "c", "messages": ["m"], "calls": [{"name": "transfer_funds", "arguments": {"recipient": "r", "amount": 1.000000000000000000001}}]}'
    [(_, case)] = load_corpus(corpus_file(tmp_path, line))
    assert str(case.calls[0].arguments["amount"]) == "1.000000000000000000001"  # type: ignore[index]


def test_exported_schema_is_current() -> None:
    assert json.loads((CASES / "case.schema.json").read_text()) == schema()


# -- the shipped corpus ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped() -> list[Case]:
    seen: dict[str, str] = {}
    return [case for path in sorted(CASES.glob("*.jsonl")) for _, case in load_corpus(path, seen)]


def test_shipped_corpus_shape(shipped: list[Case]) -> None:
    attacks = [c for c in shipped if c.kind == "attack"]
    benign = [c for c in shipped if c.kind == "benign"]
    assert len(attacks) >= 400 and len(benign) >= 50
    assert set(Counter(c.category for c in attacks)) == set(CATEGORIES)
    for level in range(1, 6):
        at_level = [c for c in attacks if c.level == level]
        assert len({c.category for c in at_level}) == len(CATEGORIES), level
    sessions = Counter(c.session for c in attacks)
    assert sum(n >= 2 for n in sessions.values()) >= 0.9 * len(sessions)  # several attempts each
    multi = [c for c in attacks if len(c.messages) > 1]
    assert 0.25 * len(attacks) <= len(multi) <= 0.75 * len(attacks)
    assert {c.level for c in benign} == {1, 2, 3, 4, 5}


def test_forged_receipts_in_every_paying_level(shipped: list[Case]) -> None:
    forged = [c for c in shipped if c.metadata.get("technique") == "forged_receipt"]
    assert {c.level for c in forged} == {1, 2, 3, 4, 5}
    marker = re.compile(r"\[Tool Result: verify_recipient\]")
    literal = [c for c in forged if c.level == 2 and any(marker.search(m) for m in c.messages)]
    assert len(literal) >= 3
    multi_l2 = [c for c in forged if c.level == 2 and len(c.messages) > 1]
    assert len(multi_l2) >= 5


def test_canary_on_every_line() -> None:
    for path in CASES.glob("*.jsonl"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            assert json.loads(line).get("canary") == CANARY, f"{path}:{n}"


def _shingles(case: Case) -> set[tuple[str, ...]]:
    # Mask what a template would swap (addresses, accounts, numbers) and compare the rest.
    text = " ".join(case.messages).lower()
    text = re.sub(r"\S+@\S+", "<addr>", text)
    text = re.sub(r"\b[a-z]{2}\d{2}[a-z0-9 ]{10,30}\b", "<acct>", text)
    text = re.sub(r"[$€£]?\d[\d,.]*", "<n>", text)
    words = re.findall(r"[\w<>]+", text)
    return {tuple(words[i : i + 4]) for i in range(max(1, len(words) - 3))}


def test_no_two_attacks_are_one_template(shipped: list[Case]) -> None:
    attacks = [(c.id, _shingles(c)) for c in shipped if c.kind == "attack"]
    near = [
        (a, b, round(len(sa & sb) / len(sa | sb), 2))
        for (a, sa), (b, sb) in combinations(attacks, 2)
        if len(sa & sb) / len(sa | sb) > 0.6
    ]
    assert near == []


def test_benign_calls_are_allowed_by_their_level(shipped: list[Case]) -> None:
    levels = load_levels()
    for case in (c for c in shipped if c.kind == "benign"):
        guard = Guard(levels[case.level].passport)
        for call in case.calls:
            if call.name == "transfer_funds":
                decision = guard.check_call(call.name, call.arguments)
                assert decision.allow, (case.id, decision.reasons)
