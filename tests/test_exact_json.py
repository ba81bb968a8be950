"""Exact decimals out (`core/json.py`): one rule, `number`, for the JSON of a Decimal,
used by `dumps` (text) and `plain` (values for a log): exact, never through a float,
and the very text a float of the same value has always been written as."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_vault.core.json import dumps, number, plain, read_json


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal(500), "500.0"),
        (Decimal("4.0958867109292616e+16"), "4.0958867109292616e+16"),
        (Decimal("500.00"), "500.0"),
        (Decimal("275.50"), "275.5"),
        (Decimal("1E+3"), "1000.0"),
        (Decimal("-2.5e-7"), "-2.5e-07"),
        (Decimal("0.0001"), "0.0001"),
        (Decimal("0.00001"), "1e-05"),
        (Decimal("1e16"), "1e+16"),
        (Decimal("1234567890123456.5"), "1234567890123456.5"),
        (Decimal("-0.0"), "-0.0"),
        (Decimal("0E-7"), "0.0"),
        (Decimal("1E+5000"), "1e+5000"),
        (Decimal("1E+9999999"), "1e+9999999"),
        (Decimal("0.1000000000000000055511151231257827"), "0.1000000000000000055511151231257827"),
    ],
)
def test_number_is_exact_and_written_as_a_float_is(value: Decimal, text: str) -> None:
    assert number(value) == text
    assert read_json(text) == value


@pytest.mark.parametrize("value", [Decimal("NaN"), Decimal("-Infinity"), Decimal("sNaN")])
def test_number_refuses_what_json_cannot_say(value: Decimal) -> None:
    with pytest.raises(ValueError, match="is not a JSON number"):
        number(value)


@given(st.floats(allow_nan=False, allow_infinity=False), st.integers(0, 3))
def test_a_decimal_a_float_holds_is_that_floats_text(value: float, zeros: int) -> None:
    written = repr(value)
    if "e" not in written:
        written += "0" * zeros  # `275.50`: the same number, as a model may write it
    decimal = Decimal(written)
    assert number(decimal) == repr(value)
    assert json.dumps(plain(decimal)) == json.dumps(value)
    assert dumps([decimal]) == json.dumps([value])


@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_every_finite_decimal_reads_back_exactly(value: Decimal) -> None:
    assert read_json(dumps({"amount": value})) == {"amount": value}


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)


@given(_JSON, st.booleans(), st.booleans(), st.sampled_from([None, 1, 2]))
def test_without_decimals_dumps_is_jsons_own(
    value: Any, sort_keys: bool, ascii: bool, indent: int | None
) -> None:
    expected = json.dumps(value, sort_keys=sort_keys, ensure_ascii=ascii, indent=indent)
    assert dumps(value, sort_keys=sort_keys, ascii=ascii, indent=indent) == expected


def test_plain_values_for_a_log() -> None:
    deep: Any = "bottom"
    for _ in range(40):
        deep = [deep]
    logged = plain(
        {
            1: (500, Decimal("250.50"), Decimal("1E+3")),
            "far": Decimal("0.1000000000000000055511151231257827"),
            "huge": Decimal("1E+400"),
            "odd": {1, 2},
            "deep": deep,
        }
    )
    nested = logged["deep"]
    for _ in range(32):
        nested = nested[0]
    assert nested == "<nested too deep>"
    del logged["deep"]
    assert logged == {
        "1": [500, 250.5, 1000.0],
        "far": "0.1000000000000000055511151231257827",
        "huge": "1E+400",
        "odd": "<set>",
    }
    assert [type(v) for v in logged["1"]] == [int, float, float]
    assert not math.isinf(json.loads(json.dumps(logged))["1"][2])
