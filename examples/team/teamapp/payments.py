"""The app's payout rules: what a payout request says, and whether the app sends it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

# An e-mail address or an IBAN-like account number: the payees the app pays.
PAYEE = re.compile(
    r"[\w.+%'-]+@[\w-]+(?:\.[\w-]+)+|\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b"
)
AMOUNT = re.compile(r"\$\s?([0-9][0-9,]*(?:\.[0-9]{1,2})?)")
# Invoice and approval references look like ABC-2025-0042.
REFERENCE = re.compile(r"\b[A-Z]{2,5}-[0-9]{4}-[0-9]{4}\b")
LIMIT = Decimal(10_000)  # one payout; larger ones go through the finance desk


class PayoutRefused(ValueError):
    """The app's rules do not send this payout."""


@dataclass(frozen=True)
class Payout:
    payee: str
    amount: Decimal
    reference: str | None = None

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> Payout:
        """A payout from one line of the app's event log (amounts as strings: exact)."""
        return cls(event["payee"], Decimal(event["amount"]), event.get("reference"))


def parse_payout(text: str) -> Payout | None:
    """The payout a message asks for: its first payee and `$` amount, or None."""
    payee, amount = PAYEE.search(text), AMOUNT.search(text)
    if payee is None or amount is None:
        return None
    reference = REFERENCE.search(text)
    return Payout(
        payee.group(0),
        Decimal(amount.group(1).replace(",", "")),
        reference.group(0) if reference else None,
    )


def check(payout: Payout) -> None:
    """Raise `PayoutRefused` if the app's own rules forbid the payout."""
    if payout.amount <= 0:
        raise PayoutRefused("the amount must be positive")
    if payout.amount > LIMIT:
        raise PayoutRefused(f"payouts above ${LIMIT} go through the finance desk")
