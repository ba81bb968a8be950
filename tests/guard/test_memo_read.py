"""A memo is a payment's reference: an empty one is no memo, and a tab between its words
is a space (AgentDojo's ground-truth payment for its bill, `Car Rental\\t\\t\\t98.70`, was
refused as unreadable, so the user's own task could never complete). Every other rule on
the memo holds: a tab at an end, a line break or an escape is still refused."""

from __future__ import annotations

import pytest

from pytest_vault.guard.engine import (
    ALLOWED,
    APPROVAL_CODE_MISSING,
    Guard,
    Transfer,
    Unreadable,
    checked,
    memo_read,
    read_transfer,
)
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import load_passport

RENT = "rent@aport-vault.com"


@pytest.mark.parametrize(
    ("memo", "held"),
    [
        ("Car Rental\t\t\t98.70", "Car Rental   98.70"),  # AgentDojo's user_task_0
        ("", None),
        ("Rent", "Rent"),
    ],
)
def test_a_tab_between_words_is_a_space_and_an_empty_memo_is_none(
    memo: str, held: str | None
) -> None:
    transfer = read_transfer({"recipient": RENT, "amount": 98.7, "memo": memo})
    assert transfer == Transfer(RENT, 9870, "USD", held, None)
    assert checked(transfer) is transfer  # what it holds is what a Transfer may hold
    decision = Guard(load_passport(SHIPPED / "level-2.json")).check_call(
        "transfer_funds", {"recipient": RENT, "amount": 98.7, "memo": memo}
    )
    assert (decision.allow, decision.codes) == (True, (ALLOWED,))
    assert decision.executes == transfer


@pytest.mark.parametrize(
    ("memo", "why"),
    [
        ("\t", "memo has surrounding whitespace: '\\t'"),
        ("Rent\t", "memo has surrounding whitespace: 'Rent\\t'"),
        ("Rent\t\nlater", "memo contains control or invisible characters: 'Rent \\nlater'"),
        ("Rent\x1b[2J", "memo contains control or invisible characters: 'Rent\\x1b[2J'"),
        (" ", "memo has surrounding whitespace: ' '"),
    ],
)
def test_every_other_blank_or_control_in_a_memo_is_still_refused(memo: str, why: str) -> None:
    with pytest.raises(Unreadable) as refused:
        read_transfer({"recipient": RENT, "amount": 1, "memo": memo})
    assert str(refused.value) == why
    assert memo_read(memo) in (memo, memo.replace("\t", " "))


def test_an_approval_code_after_a_tab_is_a_whole_token_and_an_empty_memo_has_none() -> None:
    level_4 = load_passport(SHIPPED / "level-4.json")
    limits = level_4.charge_limits
    assert limits is not None and limits.x_vault_memo_approval_code_required
    payee = limits.allowed_merchant_ids[0]
    call = {"recipient": payee, "amount": 10, "idempotency_key": "memo-tab-0001"}
    coded = Guard(level_4).check_call("transfer_funds", call | {"memo": "Bill\tAPC-2026-0001"})
    assert coded.codes == (ALLOWED,)
    empty = Guard(level_4).check_call("transfer_funds", call | {"memo": ""})
    assert empty.codes == (APPROVAL_CODE_MISSING,)
