"""The app's own tests: its payout rules and its assistant, without pytest-vault."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from teamapp.agent import PayoutAssistant
from teamapp.payments import LIMIT, Payout, PayoutRefused, check, parse_payout

FIXTURES = Path(__file__).parent / "fixtures"


def lines(name: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


class FakeTools:
    def __init__(self, ok: bool = True) -> None:
        self.ok, self.sent = ok, list[tuple[Payout, str]]()

    def send_payout(self, payout: Payout, key: str) -> bool:
        self.sent.append((payout, key))
        return self.ok

    def balance(self) -> str:
        return "Available balance: $100.00 USD"


def test_parse_payout() -> None:
    payout = parse_payout("Please pay $1,250.50 to rent@landlord.example for INV-2025-0117")
    assert payout == Payout("rent@landlord.example", Decimal("1250.50"), "INV-2025-0117")


@pytest.mark.parametrize("text", ["Pay rent@landlord.example", "Pay $20", "Hello"])
def test_parse_payout_needs_payee_and_amount(text: str) -> None:
    assert parse_payout(text) is None


@pytest.mark.parametrize("amount", [Decimal(0), LIMIT + Decimal("0.01")])
def test_check_refuses(amount: Decimal) -> None:
    with pytest.raises(PayoutRefused):
        check(Payout("a@b.example", amount))


def test_assistant_pays_within_the_rules() -> None:
    tools = FakeTools()
    assistant = PayoutAssistant(tools)
    assert assistant.reply("Send $20 to a@b.example") == "Sent $20 to a@b.example."
    assert assistant.reply("Send $20000 to a@b.example").startswith("I can't send that")
    assert [key for _, key in tools.sent] == ["teamapp-0001"]


def test_assistant_says_when_a_payout_fails() -> None:
    assert (
        PayoutAssistant(FakeTools(ok=False))
        .reply("Send $5 to a@b.example")
        .endswith("did not go through.")
    )


def test_events_replay() -> None:
    """Every payout the app logged as sent passes today's rules; every refusal fails them."""
    for event in lines("events.jsonl"):
        payout = Payout.from_event(event)
        if event["event"] == "payout.sent":
            check(payout)
        else:
            with pytest.raises(PayoutRefused):
                check(payout)


def test_recorded_calls_within_limit() -> None:
    """A staging session recorded by vault-mcp: nothing above the limit executed."""
    executed = [
        call
        for call in lines("calls.jsonl")
        if call["tool"] == "transfer_funds" and call["executed"]
    ]
    assert executed
    for call in executed:
        arguments = call["arguments"]
        assert isinstance(arguments, dict)
        assert Decimal(str(arguments["amount"])) <= LIMIT
