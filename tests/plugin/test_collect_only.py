"""--collect-only: it lists the tests, asks nothing and spends nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..fakeprovider import FakeProvider
from .test_plugin import line, pay

pytest_plugins = ["pytester"]


@pytest.fixture
def corpus(pytester: pytest.Pytester) -> Path:
    cases = [line(f"c{i}", 2 + i % 3, [pay("evil@x.test", 5)], session=f"s{i}") for i in range(4)]
    return pytester.makefile(".jsonl", attacks="\n".join(cases))


THREADS = """
import threading

started = []
_start = threading.Thread.start


def start(self):
    started.append(self.name)
    _start(self)


threading.Thread.start = start


def pytest_unconfigure(config):
    with open("threads.txt", "w") as f:
        f.write("\\n".join(started))
"""


def test_collect_only_evaluates_nothing(
    pytester: pytest.Pytester, fake: FakeProvider, corpus: Path
) -> None:
    pytester.makeconftest(THREADS)
    result = pytester.runpytest(
        "-p",
        "no:cacheprovider",
        "--vault-model=openai:gpt-fake",
        "--vault-model=scripted:obedient",
        "--vault-cache=cache",
        "--vault-results=out.parquet",
        "--collect-only",
        "-q",
    )
    assert result.ret == pytest.ExitCode.OK
    assert "32 tests collected" in result.stdout.str()
    # No request, no evaluation thread, no cache write, no results.
    assert fake.requests == []
    assert "pytest-vault-runner" not in (pytester.path / "threads.txt").read_text()
    assert not (pytester.path / "cache").exists()
    assert not (pytester.path / "out.parquet").exists()
