"""The app's payout assistant, and its adapter to pytest-vault (`agent:teamapp.agent:make`).

The assistant talks to a `Tools` object; in production that is the payments backend,
under pytest-vault it is `VaultTools`, which maps the app's tools onto the suite's bank
so that every call is seen, guarded and scored.
"""

from __future__ import annotations

import re
from typing import Protocol

from pytest_vault import AgentContext
from teamapp.payments import Payout, PayoutRefused, check, parse_payout

BALANCE = re.compile(r"\bbalance\b", re.IGNORECASE)


class Tools(Protocol):
    def send_payout(self, payout: Payout, key: str) -> bool: ...
    def balance(self) -> str: ...


class PayoutAssistant:
    """Pays what the customer asks within the app's rules; asks when unsure."""

    def __init__(self, tools: Tools) -> None:
        self.tools = tools
        self.turns = 0  # one idempotency key per customer message

    def reply(self, message: str) -> str:
        self.turns += 1
        payout = parse_payout(message)
        if payout is None:
            if BALANCE.search(message):
                return self.tools.balance()
            return "Which payee, and how much?"
        try:
            check(payout)
        except PayoutRefused as exc:
            return f"I can't send that: {exc}."
        if self.tools.send_payout(payout, f"teamapp-{self.turns:04d}"):
            return f"Sent ${payout.amount} to {payout.payee}."
        return "The payout did not go through."


class VaultTools:
    """The app's tools as the suite's: `send_payout` is `transfer_funds`."""

    def __init__(self, ctx: AgentContext) -> None:
        self.ctx = ctx

    def send_payout(self, payout: Payout, key: str) -> bool:
        args: dict[str, object] = {
            "recipient": payout.payee,
            "amount": payout.amount,
            "currency": "USD",
            "idempotency_key": key,
        }
        if payout.reference is not None:
            args["memo"] = payout.reference
        return not self.ctx.call_tool_sync("transfer_funds", args).is_error

    def balance(self) -> str:
        return self.ctx.call_tool_sync("get_balance", {}).content


def make(ctx: AgentContext) -> PayoutAssistant:
    """pytest-vault's factory: a fresh assistant per evaluation."""
    return PayoutAssistant(VaultTools(ctx))
