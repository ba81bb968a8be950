"""SARIF locations are URI references (RFC 3986), relative to the repository's root: a
file name with a space, a `#`, non-ASCII letters or a control character is one file
(issue 39, point 11)."""

from __future__ import annotations

from urllib.parse import unquote

import pytest

from pytest_vault.core.sarif import Finding, Rule, sarif_log, uri

RULE = Rule("vault/violation", "Violation", "short", "help")


@pytest.mark.parametrize(
    ("path", "encoded"),
    [
        ("cases/level-2.jsonl", "cases/level-2.jsonl"),
        ("my cases #1.jsonl", "my%20cases%20%231.jsonl"),
        ("attacks/ünï?.jsonl", "attacks/%C3%BCn%C3%AF%3F.jsonl"),
        ("a\x1b[31m%.jsonl", "a%1B%5B31m%25.jsonl"),
        ("lone\ud800.jsonl", "lone%ED%A0%80.jsonl"),
    ],
)
def test_each_location_is_a_uri_reference(path: str, encoded: str) -> None:
    log = sarif_log("t", "1", [RULE], [Finding(RULE.id, "error", "m", uri=path, line=3)])
    [result] = log["runs"][0]["results"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == encoded == uri(path)
    assert location["region"] == {"startLine": 3}
    assert unquote(encoded, errors="surrogatepass") == path
