"""`scripted:coin:P`: only a decimal from 0 to 1 names the coin; anything else is no coin,
which the spec check then refuses in one line (tests/plugin/test_your_agent.py)."""

from __future__ import annotations

import pytest

from pytest_vault.harness.coin import coin_chance


@pytest.mark.parametrize(
    ("spec", "chance"),
    [
        ("scripted:coin:0", 0.0),
        ("scripted:coin:1", 1.0),
        ("scripted:coin:0.3", 0.3),
        ("scripted:coin:.25", 0.25),
        ("scripted:coin:1.000", 1.0),
    ],
)
def test_a_decimal_from_0_to_1_is_the_coins_chance(spec: str, chance: float) -> None:
    assert coin_chance(spec) == chance


@pytest.mark.parametrize(
    "spec",
    [
        "scripted:coin:",
        "scripted:coin:1.5",
        "scripted:coin:1.01",
        "scripted:coin:-0",
        "scripted:coin:nan",
        "scripted:coin:inf",
        "scripted:coin:1e-3",
        "scripted:coin:0x1",
        "scripted:coin: 0.3",
        "scripted:coin:0.3\n",
        "scripted:coin:٠.٣",  # Arabic-Indic digits, which float() would read
        "scripted:coin:0.5:extra",
        "scripted:coins:0.5",
        "scripted:obedient",
        "openai:coin:0.5",
    ],
)
def test_anything_else_is_no_coin(spec: str) -> None:
    assert coin_chance(spec) is None
