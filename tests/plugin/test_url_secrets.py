"""URLs that carry secrets (user info, query, fragment) reach no file and no terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..fakeprovider import FakeProvider
from ..results import read_rows
from .test_plugin import REPLAY, line, pay

pytest_plugins = ["pytester"]


def errors(result: pytest.RunResult) -> list[str]:
    return [line for line in result.errlines if line.strip()]


@pytest.fixture
def corpus(pytester: pytest.Pytester) -> Path:
    cases = [line(f"c{i}", 2 + i % 3, [pay("evil@x.test", 5)], session=f"s{i}") for i in range(4)]
    return pytester.makefile(".jsonl", attacks="\n".join(cases))


def test_no_url_secret_reaches_a_file_or_the_terminal(
    pytester: pytest.Pytester, fake: FakeProvider, corpus: Path
) -> None:
    base = fake.url.replace("http://", "http://vault-user:pw-0123456789@") + "/v1"
    url = f"{base}?api-version=q-0123456789&sig=s-0123456789#f-0123456789"
    fake.fail(*["500"] * 12)  # error rows too: their messages must not carry it
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--vault-model=openai:gpt-fake",
        f"--vault-base-url={url}",
        "--vault-tries=2",
        "--vault-cache=cache",
        "--vault-results=out.parquet",
        "--vault-report=report.html",
        "--vault-transcripts=all",
        "--junitxml=junit.xml",
        "--vault-progress=0.000001",
        "-rA",
    )
    texts = [*result.outlines, *result.errlines]
    texts += [
        p.read_bytes().decode("utf-8", "replace") for p in pytester.path.rglob("*") if p.is_file()
    ]
    for secret in ("vault-user", "pw-0123456789", "q-0123456789", "s-0123456789", "f-0123456789"):
        assert not any(secret in text for text in texts), secret
    _, meta = read_rows(pytester.path / "out.parquet")
    assert meta["base_url"] == fake.url + "/v1"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "--vault-concurrency=100000000",
            "--vault-concurrency '100000000': must be from 1 to 4096",
        ),
        ("--vault-concurrency=0", "--vault-concurrency '0': must be from 1 to 4096"),
        ("--vault-tries=1000", "--vault-tries '1000': must be from 1 to 100"),
        ("--vault-max-steps=100000", "--vault-max-steps '100000': must be from 1 to 1000"),
    ],
)
def test_counts_that_would_exhaust_the_machine_are_usage_errors(
    pytester: pytest.Pytester, corpus: Path, option: str, message: str
) -> None:
    result = pytester.runpytest(*REPLAY, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: {message}"]


def test_a_spec_in_a_usage_error_is_shown_escaped(
    pytester: pytest.Pytester, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    result = pytester.runpytest("--vault-model=openai:x\x1b]0;pwn\x07")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [
        "ERROR: --vault-model openai:x\\x1b]0;pwn\\x07: OPENAI_API_KEY is not set"
    ]
