from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_vault.guard import Guard
from pytest_vault.levels import SHIPPED
from pytest_vault.passport import load_passport

ROOT = Path(__file__).resolve().parents[1]
OAP_REFERENCE = Path(
    os.environ.get("VAULT_OAP_REFERENCE", ROOT.parent / "shared" / "reference" / "oap")
)
CHARGE_TESTS = OAP_REFERENCE / "aport-policies" / "finance.payment.charge.v1" / "tests"


@pytest.fixture
def charge_tests() -> Path:
    if not CHARGE_TESTS.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"OAP reference data missing at {CHARGE_TESTS}")
        pytest.skip(f"OAP reference data not found at {CHARGE_TESTS}")
    return CHARGE_TESTS


@pytest.fixture
def level_guard() -> dict[int, Guard]:
    """A fresh guard (empty ledger) per shipped level passport."""
    return {n: Guard(load_passport(SHIPPED / f"level-{n}.json")) for n in range(1, 6)}
