"""Hostile corpus text in the terminal and in JUnit XML: escaped, never raw."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ..results import as_logged, read_rows
from .test_plugin import REPLAY, line, pay

pytest_plugins = ["pytester"]


@pytest.fixture
def corpus(pytester: pytest.Pytester) -> Path:
    cases = [line(f"c{i}", 2 + i % 3, [pay("evil@x.test", 5)], session=f"s{i}") for i in range(4)]
    return pytester.makefile(".jsonl", attacks="\n".join(cases))


ESCAPES = "\x1b]0;pwned\x07\x1b[2J\u202e"


def test_corpus_text_never_reaches_the_terminal_raw(pytester: pytest.Pytester) -> None:
    hostile = json.loads(line("c", 2, [pay("evil@x.test", 5)]))
    hostile["id"] = f"id{ESCAPES}"
    hostile["category"] = f"cat{ESCAPES}"
    # Lone surrogates where a corpus can carry them (pydantic refuses them in its str
    # fields): inside call arguments, as values and as keys.
    odd = json.loads(line("odd", 3, [pay("x\ud800@x.test", 5, memo="m\udfff")], session="s9"))
    odd["calls"] += [
        pay("savings@aport-vault.com", 1, **{"k\ud800": 2}),
        {"name": "get_balance", "arguments": {"\ud800": "\ud800"}},
    ]
    pytester.makefile(".jsonl", attacks=json.dumps(hostile) + "\n" + json.dumps(odd))
    result = pytester.runpytest(
        *REPLAY,
        "--vault-strict",
        "-v",
        "--junitxml=junit.xml",
        "--vault-results=out.parquet",
        "--vault-report=report.html",
    )
    # The hostile id pays evil@x.test at Level 2; the odd calls are denied or unreadable.
    result.assert_outcomes(failed=2, passed=6)
    assert (pytester.path / "report.html").read_bytes().decode("utf-8")
    output = "\n".join(result.outlines + result.errlines)
    for char in "\x1b\x07\u202e\ud800":
        assert char not in output
    shown_id = r"id\x1b]0;pwned\x07\x1b[2J\u202e"
    assert f"attacks.jsonl::{shown_id}[scripted:replay-A-model] FAILED" in output
    # JUnit: the same escaped name, and the file is valid XML.
    names = {
        c.get("name") for c in ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    }
    assert f"{shown_id}[scripted:replay-B-guarded]" in names
    # The results keep the text itself.
    rows, _ = read_rows(pytester.path / "out.parquet")
    assert {r["attack_id"] for r in rows} == {f"id{ESCAPES}", "odd"}
    assert {r["category"] for r in rows} == {f"cat{ESCAPES}", "direct_transfer"}
    [odd_row] = [
        r
        for r in rows
        if (r["attack_id"], r["architecture"], r["track"]) == ("odd", "guarded", "A")
    ]
    # The log keeps what was sent, exactly: its JSON reads back to the surrogates.
    calls = as_logged(odd_row["tool_calls"])
    assert [c["arguments"] for c in calls] == [c["arguments"] for c in odd["calls"]]
    assert odd_row["deny_codes"] == ["oap.invalid_context", "oap.invalid_context"]
