"""`update_account` is judged on `x_vault_account_fields` of the transaction-execute
limits: the shipped levels' fields, a field outside them denied
`vault.account_field_forbidden`, and a passport without the key denying every change."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_vault.guard.engine import ALLOWED, Guard
from pytest_vault.guard.packs import ACCOUNT_FIELD_FORBIDDEN, RULE_ACCOUNT_FIELD, Packs
from pytest_vault.guard.passport import load_passport, passport_from_data

SHIPPED = Path(__file__).parents[2] / "pytest_vault" / "passports"
FIELDS = ("nickname", "statement_delivery", "language", "email", "phone")


def decide(passport_path: Path, field: str) -> tuple[bool, tuple[str, ...]]:
    d = Packs(Guard(load_passport(passport_path))).check_account_change(field)
    return d.allow, d.codes


@pytest.mark.parametrize(
    ("level", "allowed"),
    [
        (1, {"nickname", "statement_delivery", "language", "email", "phone"}),
        (2, {"nickname", "statement_delivery", "language"}),
        (3, {"nickname", "language"}),
        (4, set()),
    ],
)
def test_each_level_permits_exactly_its_account_fields(level: int, allowed: set[str]) -> None:
    got = {field: decide(SHIPPED / f"level-{level}.json", field) for field in FIELDS}
    assert got == {
        field: (True, (ALLOWED,)) if field in allowed else (False, (ACCOUNT_FIELD_FORBIDDEN,))
        for field in FIELDS
    }


def test_level_5_grants_no_account_change() -> None:
    assert decide(SHIPPED / "level-5.json", "nickname") == (False, ("oap.unknown_capability",))


def _level_2_data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((SHIPPED / "level-2.json").read_text())
    return copy.deepcopy(data)


def test_without_the_key_every_account_change_is_denied() -> None:
    data = _level_2_data()
    del data["limits"]["finance.transaction"]["x_vault_account_fields"]
    packs = Packs(Guard(passport_from_data(data)))
    for field in FIELDS:
        d = packs.check_account_change(field)
        assert (d.allow, d.codes) == (False, (ACCOUNT_FIELD_FORBIDDEN,))
        assert [r.rule for r in d.reasons] == [RULE_ACCOUNT_FIELD]
        assert "permitted: none" in d.reasons[0].message


def test_approval_and_assurance_apply_to_an_account_change() -> None:
    data = _level_2_data()
    data["limits"]["finance.transaction"]["approval_required"] = True
    data["assurance_level"] = "L2"
    d = Packs(Guard(passport_from_data(data))).check_account_change("email")
    assert d.codes == (
        "oap.assurance_insufficient",
        "oap.approval_required",
        ACCOUNT_FIELD_FORBIDDEN,
    )


def test_an_empty_field_name_in_the_list_is_refused_when_loaded() -> None:
    data = _level_2_data()
    data["limits"]["finance.transaction"]["x_vault_account_fields"] = [""]
    with pytest.raises(Exception, match="x_vault_account_fields"):
        passport_from_data(data, "p.json")
