"""A spec or option whose extra is not installed is one line naming the extra, before
anything runs (the wheel with no extra is run for real in test_light_install.py)."""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from pytest_vault.core import extras

pytest_plugins = ["pytester"]


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Modules that are not installed, as far as the plugin's checks can tell."""
    gone: set[str] = set()
    monkeypatch.setattr(extras, "find_spec", lambda name: None if name in gone else find_spec(name))
    return gone


@pytest.mark.parametrize(
    ("args", "module", "said"),
    [
        (
            ("--vault-model=openai:gpt-4.1-mini",),
            "openai",
            "--vault-model openai:gpt-4.1-mini: needs the openai package: "
            "pip install 'pytest-vault[providers]'",
        ),
        (
            ("--vault-judge=anthropic:claude-x",),
            "anthropic",
            "--vault-judge anthropic:claude-x: needs the anthropic package: "
            "pip install 'pytest-vault[providers]'",
        ),
        (
            ("--vault-decisions",),
            "syrupy",
            "--vault-decisions: needs the syrupy package: pip install 'pytest-vault[snapshots]'",
        ),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(
    pytester: pytest.Pytester, without: set[str], args: tuple[str, ...], module: str, said: str
) -> None:
    without.add(module)
    pytester.makepyfile(test_nothing="def test_never_run(): pass")
    result = pytester.runpytest("-p", "no:randomly", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.errlines if line.strip()] == [f"ERROR: {said}"]
    assert result.outlines == []


def test_an_installed_extra_says_nothing() -> None:
    assert extras.needs("pytest", "x", "anything") is None
