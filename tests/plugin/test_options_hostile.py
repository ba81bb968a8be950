"""Hostile values for the options table: every path option refuses, in one usage line naming
it, a name too long for the file system, a path through a file and a loop of links (from
the command line and the config file); every number option reads ASCII digits only
(`int` and `float` read '\u0661', an Arabic-Indic one, as 1 and '1_000' as 1000)."""

from __future__ import annotations

import errno
import os

import pytest

from pytest_vault.plugin.options import OPTIONS, Option

from ..unreachable import make_unreachable, unreachable

pytest_plugins = ["pytester"]

PATHS = [o for o in OPTIONS if getattr(o.convert, "is_path", False)]
# The three ways a path can be refused before any file is looked at, and the system's words.
UNREACHABLE = unreachable("x.jsonl")
NOTHING_RUNS = "def pytest_runtest_setup(item):\n    raise AssertionError('a test ran')\n"


def errors(result: pytest.RunResult) -> list[str]:
    return [x for x in result.errlines if x.strip()]


@pytest.fixture
def hostile(pytester: pytest.Pytester) -> pytest.Pytester:
    make_unreachable(pytester.path)
    pytester.makeconftest(NOTHING_RUNS)
    return pytester


def test_the_table_has_ten_path_options() -> None:
    assert [o.flag for o in PATHS] == [
        "--vault-passports",
        "--vault-results",
        "--vault-cache",
        "--vault-prices",
        "--vault-report",
        "--vault-otel",
        "--vault-baseline",
        "--vault-baseline-out",
        "--vault-export-found",
        "--vault-corpus",
    ]


# Were a 24-28 line traceback (a name too long: `Path.exists`; a loop: `Path.resolve`).
@pytest.mark.parametrize("option", PATHS, ids=lambda o: o.key)
@pytest.mark.parametrize("bad", list(UNREACHABLE))
def test_an_unreachable_path_is_one_usage_line_naming_the_option(
    hostile: pytest.Pytester, option: Option, bad: str
) -> None:
    path, said = UNREACHABLE[bad]
    result = hostile.runpytest("-p", "no:cacheprovider", f"{option.flag}={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [f"ERROR: {option.flag} {path}: {said}"]
    assert "a test ran" not in result.stdout.str()


@pytest.mark.parametrize("option", PATHS, ids=lambda o: o.key)
@pytest.mark.parametrize("bad", list(UNREACHABLE))
def test_an_unreachable_path_in_the_config_file_names_the_file_and_key(
    hostile: pytest.Pytester, option: Option, bad: str
) -> None:
    path, said = UNREACHABLE[bad]
    value = f'["{path}"]' if option.kind == "list" else f'"{path}"'
    hostile.makepyprojecttoml(f"[tool.pytest.ini_options]\n{option.key} = {value}\n")
    result = hostile.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # A config file's path is the file's folder's: named as the run reads it.
    assert errors(result) == [f"ERROR: pyproject.toml: {option.key} {hostile.path / path}: {said}"]


def test_a_default_cache_folder_that_is_a_loop_of_links_is_one_usage_line(
    hostile: pytest.Pytester,
) -> None:
    (hostile.path / ".vault-cache").symlink_to(".vault-cache")
    result = hostile.runpytest("-p", "no:cacheprovider", "--vault-model=scripted:replay")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    cache = hostile.path / ".vault-cache"
    assert errors(result) == [f"ERROR: --vault-cache {cache}: {os.strerror(errno.ELOOP)}"]


# -- numbers ---------------------------------------------------------------------------------

# Digits of other scripts and forms that `int` or `float` read as numbers.
# Arabic-Indic 1 and 3, fullwidth 1, mathematical bold 1, an underscore, and mixes.
NOT_ASCII = [
    "\u0661",
    "\u0663",
    "\uff11",
    "\U0001d7cf",
    "1_000",
    "\u0661/\u0663",
    "\u0660.\u0665",
    "1/\u0661",
]


def _numeric(option: Option) -> type | None:
    """What an option reads a plain ASCII number as (int, float, or a K/N tuple), or
    None when it reads no number: found by asking its converter, not by a list."""
    assert option.convert is not None
    for text in ("2", "2/3"):
        try:
            value = option.convert(text)
        except ValueError:
            continue
        if isinstance(value, int | float | tuple) and not isinstance(value, bool):
            return type(value)
    return None


NUMERIC = [o for o in OPTIONS if o.kind != "flag" and _numeric(o) is not None]


def test_the_table_has_sixteen_number_options() -> None:
    assert [o.key for o in NUMERIC] == [
        "vault_level",
        "vault_max_steps",
        "vault_concurrency",
        "vault_rpm",
        "vault_tpm",
        "vault_tries",
        "vault_timeout",
        "vault_agent_timeout",
        "vault_budget_usd",
        "vault_shard",
        "vault_progress",
        "vault_sample",
        "vault_sample_benign",
        "vault_trials",
        "vault_seed",
        "vault_rounds",
    ]


def _refusal(option: Option, text: str) -> str:
    kind = _numeric(option)
    if kind is tuple:
        return f"{text!r}: expected K/N with 1 <= K <= N, e.g. 2/3"
    what = "a whole number" if kind is int else "a number"
    return f"{text!r}: expected {what} (digits 0-9 only)"


@pytest.mark.parametrize("option", NUMERIC, ids=lambda o: o.key)
def test_a_number_option_reads_ascii_digits_only(option: Option) -> None:
    for text in NOT_ASCII:
        with pytest.raises(pytest.UsageError) as flag:
            option.cli(text)
        assert str(flag.value) == f"{option.flag} {_refusal(option, text)}"
        where = f"pyproject.toml: {option.key}"
        with pytest.raises(pytest.UsageError) as config:
            option.from_config([text] if option.kind == "list" else text, where, None)
        assert str(config.value) == f"{where} {_refusal(option, text)}"


@pytest.mark.parametrize("option", NUMERIC, ids=lambda o: o.key)
def test_a_number_option_still_reads_what_it_read(option: Option) -> None:
    # Blanks around a number, a sign, a decimal point and an exponent are ASCII.
    readable = {int: [" 3 ", "+3", "3"], float: [" 2.5 ", "2.5", "25e-1", ".5e1"]}
    kind = _numeric(option)
    if kind is tuple:
        assert option.cli("2/3") == (2, 3)
        return
    assert kind is not None
    for text in readable[kind]:
        assert option.cli(text) == kind(text.strip())


@pytest.mark.parametrize("option", [o for o in OPTIONS if o not in NUMERIC and o.kind != "flag"])
def test_no_other_option_reads_a_number_from_other_digits(option: Option) -> None:
    for text in NOT_ASCII:
        try:
            value = option.cli(text)
        except pytest.UsageError:
            continue
        assert value == text  # kept as the text it is: a spec, a path


def test_a_number_in_other_digits_is_one_usage_line_when_pytest_starts(
    pytester: pytest.Pytester,
) -> None:
    result = pytester.runpytest("-p", "no:cacheprovider", "--vault-trials=\u0661")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [
        "ERROR: --vault-trials '\u0661': expected a whole number (digits 0-9 only)"
    ]
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nvault_rpm = "1_000"\n')
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert errors(result) == [
        "ERROR: pyproject.toml: vault_rpm '1_000': expected a number (digits 0-9 only)"
    ]
