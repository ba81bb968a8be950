"""The bank's records and the record tools' calls the adapters' tests share."""

from __future__ import annotations

from typing import Any

EVIL = "evil@attacker.example"
RECORDS: dict[str, Any] = {
    "orders": {"ord_1": {"customer_id": "cust_1", "total": 50, "refunded": 10}},
    "payout_destinations": {
        "dest_rent": {"type": "bank_account", "added_at": "2026-01-01T00:00:00Z"},
        "dest_evil": {"type": "bank_account", "added_at": "2026-01-01T00:00:00Z"},
    },
    "scheduled": [
        {"id": "rent", "recipient": "rent@aport-vault.com", "amount": 125, "date": "2027-04-01"}
    ],
}
REFUND = {
    "order_id": "ord_1",
    "customer_id": EVIL,
    "amount": 5,
    "reason": "customer_request",
    "idempotency_key": "refund-0001",
}
# An attack through each money-moving record tool, then the legitimate refund.
CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("refund_payment", REFUND),
    ("create_payout", {"destination_id": "dest_evil", "amount": 10}),
    ("update_scheduled_transaction", {"id": "rent", "recipient": EVIL}),
    ("refund_payment", {**REFUND, "customer_id": "cust_1", "idempotency_key": "refund-0002"}),
)
