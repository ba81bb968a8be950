"""Guard speed: in-process decision latency, and the CLI against a plain JSON loop.

    python benchmarks/bench_guard.py [--lines 100000]

Targets (issue 15): median decision <= 5 us in process; the CLI on 100,000 lines at
no worse than 1.5x a loop that only parses and re-serializes each line. Issue 42: an
allowed refund or payout context decision within 1.2x of an allowed charge context
decision (printed side by side).

Each decision is timed with a pair of `perf_counter_ns` readings; the median of an
empty pair (the timer's own cost, inside every sample) is measured the same way and
printed beside it, and the figure net of it is printed too. The target is read on the
raw median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_vault.guard.engine import Guard
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.packs import PAYOUT_POLICY, REFUND_POLICY, Packs
from pytest_vault.guard.passport import load_passport, passport_from_data

PLAIN_LOOP = """
import json, sys
out = sys.stdout
for line in sys.stdin.buffer:
    out.write(json.dumps(json.loads(line)) + "\\n")
"""


def workload(n: int) -> list[dict[str, Any]]:
    """A mix as an attack run produces it: allowed, forbidden payee, over cap, malformed."""
    shapes: list[dict[str, Any]] = [
        {"recipient": "audit@aport-vault.com", "amount": 250.5, "memo": "Q3 APC-2026-0142"},
        {"recipient": "attacker@evil.test", "amount": 900, "memo": "APC-2026-0001"},
        {"recipient": "audit@aport-vault.com", "amount": 4_800, "memo": "APC-2026-0002"},
        {"recipient": "audit@aport-vault.com ", "amount": "1e3"},
    ]
    return [{**shapes[i % len(shapes)], "idempotency_key": f"bench-key-{i:08d}"} for i in range(n)]


def in_process(calls: list[dict[str, Any]], repeats: int = 7) -> tuple[float, float]:
    """Median and p99 of per-decision time (us), each guard fresh per 200 calls."""
    passport = load_passport(SHIPPED / "level-4.json")
    samples: list[float] = []
    for _ in range(repeats):
        for start in range(0, len(calls), 200):
            guard = Guard(passport)
            for args in calls[start : start + 200]:
                t0 = time.perf_counter_ns()
                guard.check_call("transfer_funds", args)
                samples.append((time.perf_counter_ns() - t0) / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


# One passport granting the charge, refund and payout packs, for their side-by-side timing.
PACKS_PASSPORT: dict[str, Any] = {
    "passport_id": "bench-packs",
    "kind": "instance",
    "spec_version": "oap/1.0",
    "owner_id": "org_bench",
    "owner_type": "org",
    "status": "active",
    "assurance_level": "L3",
    "capabilities": [
        {"id": "payments.charge"},
        {"id": "finance.payment.refund"},
        {"id": "payments.payout"},
    ],
    "limits": {
        "payments.charge": {
            "currency_limits": {"USD": {"max_per_tx": 100_000, "daily_cap": 10**12}},
            "allowed_merchant_ids": ["merchant_1"],
        },
        "finance.payment.refund": {
            "currency_limits": {"USD": {"max_per_tx": 100_000, "daily_cap": 10**12}},
            "refund_reason_codes": ["customer_request"],
        },
        "payments.payout": {
            "currency_limits": {"USD": {"max_per_tx": 100_000}},
            "allowed_destination_types": ["bank_account"],
            "allowed_recipients": ["*"],
            "max_payouts_per_day": 10**9,
        },
    },
    "regions": ["US"],
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:00Z",
    "version": "1.0.0",
}
# The system of record the refund and payout decisions read (a dict lookup: the guard's
# own cost, not a database's).
RECORDS: dict[tuple[str, str], dict[str, object]] = {
    ("order", "ord_1"): {
        "customer_id": "cust_1",
        "total_minor": 10**12,
        "currency": "USD",
        "refunded_minor": 0,
    },
    ("payout_destination", "dest_1"): {
        "type": "bank_account",
        "added_at": datetime(2020, 1, 1, tzinfo=UTC),
    },
}


def pack_contexts(i: int) -> dict[str, dict[str, Any]]:
    key = f"bench-key-{i:08d}"
    return {
        "charge": {
            "amount": 2_500,
            "currency": "USD",
            "merchant_id": "merchant_1",
            "region": "US",
            "items": [{"sku": "sku_1", "qty": 1}],
            "idempotency_key": key,
        },
        "refund": {
            "order_id": "ord_1",
            "customer_id": "cust_1",
            "amount": 2_500,
            "currency": "USD",
            "region": "US",
            "reason_code": "customer_request",
            "idempotency_key": key,
        },
        "payout": {
            "amount": 2_500,
            "currency": "USD",
            "destination_type": "bank_account",
            "destination_id": "dest_1",
            "payout_method": "ach",
            "idempotency_key": key,
        },
    }


def per_pack(n: int = 20_000, repeats: int = 5) -> dict[str, float]:
    """Median per-decision time (us) of an allowed context of each pack, on one guard
    (fresh per 200 decisions), refund and payout reading their facts from `RECORDS`."""
    passport = passport_from_data(PACKS_PASSPORT, "bench")
    contexts = [pack_contexts(i) for i in range(n)]
    samples: dict[str, list[float]] = {"charge": [], "refund": [], "payout": []}
    clock = time.perf_counter_ns
    for _ in range(repeats):
        for start in range(0, n, 200):
            guards = {name: Guard(passport) for name in samples}
            packs = {
                name: Packs(guards[name], facts=lambda kind, key: RECORDS.get((kind, key)))
                for name in ("refund", "payout")
            }
            for ctx in contexts[start : start + 200]:
                t0 = clock()
                decision = guards["charge"].check_context(ctx["charge"])
                samples["charge"].append((clock() - t0) / 1000)
                assert decision.allow, decision
                t0 = clock()
                decision = packs["refund"].check_context(REFUND_POLICY, ctx["refund"])
                samples["refund"].append((clock() - t0) / 1000)
                assert decision.allow, decision
                t0 = clock()
                decision = packs["payout"].check_context(PAYOUT_POLICY, ctx["payout"])
                samples["payout"].append((clock() - t0) / 1000)
                assert decision.allow, decision
    return {name: statistics.median(values) for name, values in samples.items()}


def timer_cost(n: int = 200_000) -> float:
    """Median of an empty `perf_counter_ns` pair (us): what every sample includes."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(n):
        t0 = clock()
        samples.append((clock() - t0) / 1000)
    return statistics.median(samples)


def timed(cmd: list[str], stdin: Path) -> float:
    with stdin.open("rb") as f:
        t0 = time.perf_counter()
        subprocess.run(cmd, stdin=f, stdout=subprocess.DEVNULL, check=True)
        return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=100_000)
    args = parser.parse_args()

    calls = workload(args.lines)
    median, p99 = in_process(calls[:20_000])
    timer = timer_cost()
    print(f"in-process decision: median {median:.2f} us, p99 {p99:.2f} us (target: median <= 5 us)")
    print(f"  of which the timer pair: {timer:.2f} us (median net of it: {median - timer:.2f} us)")
    packs = per_pack()
    charge = packs["charge"]
    print(
        "pack contexts, median per allowed decision: "
        + ", ".join(f"{name} {t:.2f} us ({t / charge:.2f}x)" for name, t in packs.items())
        + " (target: refund, payout <= 1.2x charge)"
    )

    with tempfile.TemporaryDirectory() as tmp:
        lines = Path(tmp) / "calls.jsonl"
        lines.write_text(
            "".join(json.dumps({"tool": "transfer_funds", "arguments": c}) + "\n" for c in calls)
        )
        guard_cmd = [
            sys.executable,
            "-m",
            "pytest_vault.guard",
            "--passport",
            str(SHIPPED / "level-4.json"),
        ]
        plain_cmd = [sys.executable, "-c", PLAIN_LOOP]
        # Alternate and keep the best of five so that one noisy run does not decide.
        guard_t, plain_t = [], []
        for _ in range(5):
            guard_t.append(timed(guard_cmd, lines))
            plain_t.append(timed(plain_cmd, lines))
        g, p = min(guard_t), min(plain_t)
    print(
        f"CLI, {args.lines:,} lines: guard {g:.2f} s ({args.lines / g:,.0f} lines/s), "
        f"plain parse+serialize loop {p:.2f} s"
    )
    print(f"ratio guard / plain loop: {g / p:.2f}x (target: <= 1.5x)")


if __name__ == "__main__":
    main()
