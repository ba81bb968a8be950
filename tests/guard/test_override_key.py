"""The guard's command line keeps each override passport by its exact JSON
(`core.json.dumps`): a number and the text of it are two overrides, never one."""

from __future__ import annotations

from decimal import Decimal

from pytest_vault.guard.__main__ import _Session
from pytest_vault.guard.engine import Guard
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import load_passport

CONTEXT = '"context": {"amount": 100, "currency": "USD", "merchant_id": "savings@aport-vault.com"}'


def test_a_number_and_its_text_are_two_overrides() -> None:
    session = _Session(Guard(load_passport(SHIPPED / "level-3.json")))
    for given in ("1.5", '"1.5"', "1.50", "1.5"):
        line = f'{{{CONTEXT}, "overridePassport": {{"metadata": {{"x": {given}}}}}}}'
        session.answer(line.encode())  # denied: the context names no region
    assert sorted(session.overrides) == [
        '{"metadata": {"x": "1.5"}}',
        '{"metadata": {"x": 1.5}}',
    ]
    kept = {key: p.metadata["x"] for key, p in session.overrides.items()}
    assert kept == {'{"metadata": {"x": "1.5"}}': "1.5", '{"metadata": {"x": 1.5}}': Decimal("1.5")}
