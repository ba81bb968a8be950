"""`vault-guard diff` with witnesses: two five-level passport folders.

    python benchmarks/bench_policy.py [--repeats 7]

Target (issue 31): a diff with witnesses of two five-level folders under 1 s.

Two changed copies of the shipped passports, each diffed against the shipped folder:

* `review`: the issue's change (Level 2: a new payee, a higher per-transfer limit);
* `every kind`: every level changed in every field the charge pack's rules read (payees
  added and removed, a wildcard, caps raised and lowered, daily caps, a new currency,
  countries, categories, item counts, regions, idempotency, the approval code, status,
  expiry, assurance), 70-odd changes, each searched for its witness.

Printed side by side for each: the field diff alone (no witness), the diff with witnesses
in process (median of `--repeats`), and the command in a fresh process
(`vault-guard diff OLD NEW --witnesses FILE`, Python's start-up included), beside a fresh
process that only imports the command.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_vault.guard.folder import SHIPPED
from pytest_vault.policy.diff import diff_passports, diff_paths, load_pairs

TARGET_S = 1.0


def _review(level: int, passport: dict[str, Any]) -> None:
    if level == 2:
        charge = passport["limits"]["payments.charge"]
        charge["allowed_merchant_ids"].append("vendor@aport-vault.com")
        charge["currency_limits"]["USD"]["max_per_tx"] = 280000


def _every_kind(level: int, passport: dict[str, Any]) -> None:
    charge = passport["limits"].get("payments.charge")
    if charge is None:  # Level 5: grant payments, with Level 3's limits
        passport["capabilities"].append({"id": "payments.charge"})
        charge = passport["limits"]["payments.charge"] = json.loads(
            (SHIPPED / "level-3.json").read_text()
        )["limits"]["payments.charge"]
    usd = charge["currency_limits"]["USD"]
    usd["max_per_tx"] = usd["max_per_tx"] * 3 // 2 if level % 2 else usd["max_per_tx"] // 2
    usd["daily_cap"] = usd["daily_cap"] * 2 if level % 2 else usd["daily_cap"] * 3 // 4
    charge["currency_limits"]["EUR"] = {"max_per_tx": 20000, "daily_cap": 50000}
    entries = charge["allowed_merchant_ids"]
    charge["allowed_merchant_ids"] = entries[1:] + [f"payee-{i}@partner.test" for i in range(8)]
    if level == 1:
        charge["allowed_merchant_ids"] = ["vendor@partner.test"]  # "*" removed
    if level == 4:
        charge["allowed_merchant_ids"].append("*")
        charge["x_vault_memo_approval_code_required"] = False
    charge["allowed_countries"] = ["US", "CA"]
    charge["blocked_categories"] = ["gambling", "weapons"]
    charge["max_items_per_tx"] = 1 + level
    charge["idempotency_required"] = not charge.get("idempotency_required", False)
    charge["require_assurance_at_least"] = "L3" if level == 3 else "L2"
    passport["regions"] = ["US", "GB"]
    if level == 2:
        passport.pop("never_expires", None)
        passport["expires_at"] = "2030-01-01T00:00:00Z"
    if level == 3:
        passport["assurance_level"] = "L3"


def changed_copy(root: Path, name: str, edit: Callable[[int, dict[str, Any]], None]) -> Path:
    folder = root / name
    shutil.copytree(SHIPPED, folder)
    for level in range(1, 6):
        path = folder / f"level-{level}.json"
        passport = json.loads(path.read_text())
        edit(level, passport)
        path.write_text(json.dumps(passport, indent=2))
    return folder


def median_s(fn: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def fresh(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=False, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, edit in (("review", _review), ("every kind", _every_kind)):
            new = changed_copy(root, name.replace(" ", "-"), edit)
            pairs = load_pairs(SHIPPED, new)
            changes = diff_paths(SHIPPED, new, now=now)
            witnessed = sum(
                c.witness is not None and c.witness.effect != "neutral" for c in changes
            )
            undecided = sum(c.undecided for c in changes)
            fields = median_s(
                lambda pairs=pairs: [diff_passports(p.old, p.new) for p in pairs], args.repeats
            )
            search = median_s(lambda new=new: diff_paths(SHIPPED, new, now=now), args.repeats)
            out = root / "witnesses.jsonl"
            command = [sys.executable, "-m", "pytest_vault.policy", "diff", str(SHIPPED), str(new)]
            process = statistics.median(
                fresh([*command, "--witnesses", str(out)]) for _ in range(3)
            )
            start = statistics.median(
                fresh([sys.executable, "-c", "import pytest_vault.policy.__main__"])
                for _ in range(3)
            )
            verdict = "OK" if process < TARGET_S else "OVER"
            print(f"{name}: {len(changes)} changes, {witnessed} witnessed, {undecided} undecided")
            print(
                f"  field diff alone {fields * 1000:7.1f} ms | with witnesses, in process "
                f"{search * 1000:7.1f} ms | command, fresh process {process:.2f} s "
                f"(start-up alone {start:.2f} s) | target < {TARGET_S:.0f} s: {verdict}"
            )


if __name__ == "__main__":
    main()
