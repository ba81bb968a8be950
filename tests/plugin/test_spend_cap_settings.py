"""Settings that would switch the spend cap off: numbers out of range, price tables that
price nothing, every field of a price table checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..fakeprovider import FakeProvider
from .test_plugin import REPLAY, line, pay

pytest_plugins = ["pytester"]


def errors(result: pytest.RunResult) -> list[str]:
    return [line for line in result.errlines if line.strip()]


PRICES = '["openai:gpt-fake"]\ninput_per_mtok = 1\noutput_per_mtok = 2\n'


@pytest.fixture
def corpus(pytester: pytest.Pytester) -> Path:
    cases = [line(f"c{i}", 2 + i % 3, [pay("evil@x.test", 5)], session=f"s{i}") for i in range(4)]
    return pytester.makefile(".jsonl", attacks="\n".join(cases))


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--vault-budget-usd=nan", "--vault-budget-usd nan: must be a finite number at least 0"),
        ("--vault-budget-usd=inf", "--vault-budget-usd inf: must be a finite number at least 0"),
        ("--vault-budget-usd=-1", "--vault-budget-usd -1.0: must be a finite number at least 0"),
        ("--vault-rpm=nan", "--vault-rpm nan: must be a finite number above 0"),
        ("--vault-rpm=0", "--vault-rpm 0.0: must be a finite number above 0"),
        ("--vault-rpm=-inf", "--vault-rpm -inf: must be a finite number above 0"),
        ("--vault-tpm=nan", "--vault-tpm nan: must be a finite number above 0"),
        ("--vault-tpm=-5", "--vault-tpm -5.0: must be a finite number above 0"),
        ("--vault-timeout=nan", "--vault-timeout nan: must be a finite number above 0"),
        ("--vault-timeout=0", "--vault-timeout 0.0: must be a finite number above 0"),
        ("--vault-agent-timeout=0", "--vault-agent-timeout 0.0: must be a finite number above 0"),
        ("--vault-agent-timeout=inf", "--vault-agent-timeout inf: must be a finite number above 0"),
        ("--vault-progress=nan", "--vault-progress nan: must be a finite number at least 0"),
        ("--vault-progress=-1", "--vault-progress -1.0: must be a finite number at least 0"),
    ],
)
def test_every_number_option_must_be_finite_and_in_range(
    pytester: pytest.Pytester, corpus: Path, option: str, message: str
) -> None:
    prices = pytester.makefile(".toml", prices=PRICES)
    result = pytester.runpytest(*REPLAY, f"--vault-prices={prices}", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: {message}"]


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("input_per_mtok = nan\noutput_per_mtok = 1", "input_per_mtok: expected a finite number"),
        ("input_per_mtok = inf\noutput_per_mtok = 1", "input_per_mtok: expected a finite number"),
        ("input_per_mtok = 1\noutput_per_mtok = -0.5", "output_per_mtok: expected a finite number"),
        ("input_per_mtok = true\noutput_per_mtok = 1", "input_per_mtok: expected a finite number"),
        ('input_per_mtok = "1"\noutput_per_mtok = 1', "input_per_mtok: expected a finite number"),
        ("input_per_mtok = [1]\noutput_per_mtok = 1", "input_per_mtok: expected a finite number"),
        ("input_per_mtok = 1", "output_per_mtok: Field required"),
        (
            "input_per_mtok = 1\noutput_per_mtok = 1\noutptu_per_mtok = 9",
            "outptu_per_mtok: unknown",
        ),
    ],
)
def test_every_price_table_field_is_checked(
    pytester: pytest.Pytester, corpus: Path, entry: str, problem: str
) -> None:
    prices = pytester.makefile(".toml", prices=f'["openai:gpt-fake"]\n{entry}\n')
    # Checked whenever a table is given, with or without a budget.
    for budget in ([], ["--vault-budget-usd=1"]):
        result = pytester.runpytest(*REPLAY, f"--vault-prices={prices}", *budget)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        [error] = errors(result)
        assert error.startswith(f"ERROR: {prices}: openai:gpt-fake.{problem}")


def test_a_cache_path_that_is_a_file_is_one_usage_error(
    pytester: pytest.Pytester, corpus: Path
) -> None:
    # Else every test failed on its own, once the run had started.
    cache = pytester.makefile(".txt", cache="not a folder")
    result = pytester.runpytest(*REPLAY, f"--vault-cache={cache}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: --vault-cache {cache}: not a folder"]


def test_a_cache_folder_that_cannot_be_written_is_one_usage_error(
    pytester: pytest.Pytester, corpus: Path, fake: FakeProvider
) -> None:
    # A file in the folder's path (or no write permission, a read-only mount): every
    # evaluation of a provider model failed on its own, an error row each.
    blocker = pytester.makefile(".txt", blocker="a file")
    cache = blocker / "cache"
    result = pytester.runpytest("--vault-model=openai:gpt-fake", f"--vault-cache={cache}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: --vault-cache {cache}: Not a directory"]
    assert fake.requests == []
    # A path no folder can be at is a mistake in the settings whatever the run asks: the
    # control models' runs, which use no cache, refuse it too (`checks._reachable`).
    result = pytester.runpytest(*REPLAY, f"--vault-cache={cache}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: --vault-cache {cache}: Not a directory"]
    # A folder the run can make is made, and holds nothing until an answer is stored; not
    # by --collect-only, which asks nothing.
    fresh = pytester.path / "new" / "cache"
    result = pytester.runpytest(
        "--vault-model=openai:gpt-fake", f"--vault-cache={fresh}", "--collect-only"
    )
    assert result.ret == pytest.ExitCode.OK and not (pytester.path / "new").exists()
    result = pytester.runpytest("--vault-model=openai:gpt-fake", f"--vault-cache={fresh}")
    assert result.ret == pytest.ExitCode.OK
    assert fresh.is_dir() and sorted(p.name for p in fresh.iterdir()) == ["responses"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[x\ninput_per_mtok = 1", ":1: invalid TOML: "),
        ("a = " + "[" * 5000 + "]" * 5000, ": invalid TOML: nested too deeply"),
        # More digits than `int` reads from text: was a traceback.
        ("a = " + "9" * 5000, ": invalid TOML: number out of range"),
        (b"\n# caf\xe9\n", ":2: not valid UTF-8: byte 0xe9 at column 6"),
        ('\n"openai:gpt-fake" = 3', ": openai:gpt-fake: Input should be a valid dictionary"),
    ],
    ids=["syntax", "deep", "digits", "utf8", "not-a-table"],
)
def test_an_unreadable_price_table_is_one_line(
    pytester: pytest.Pytester, corpus: Path, text: str | bytes, problem: str
) -> None:
    prices = pytester.path / "pri\x1bces.toml"  # the name is escaped in the message too
    prices.write_bytes(text if isinstance(text, bytes) else text.encode())
    result = pytester.runpytest(*REPLAY, f"--vault-prices={prices}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [error] = errors(result)
    assert error.startswith(f"ERROR: {pytester.path}/pri\\x1bces.toml{problem}")
