"""`vault-report rescore` over a run the size of the released benchmark (~250,000 rows).

    python benchmarks/bench_rescore.py [--rows 250000] [--distinct]

The rows have the shape of `bench_report.py`'s (14 models x 2 architectures x 2 tracks
over ~4,500 attacks in ~900 sessions), with real call logs: each (attack, model) pair
gets one of eight behaviours (refuse; pay the attacker; verify, then pay; pay a
permitted payee over or under the caps; split a payment; an unreadable call, then a
readable one; memo and idempotency key; several tools, then two payments), and each
log is what the simulated bank and guard record for it. `--distinct` makes every
non-empty log unique (a balance call with the row's own answer first), so nothing is
judged once for many rows: the worst case.

The changed passports: Level 1's cap lowered, a payee added at Level 2, Level 3's
transfer cap lowered, Level 4's approval code dropped. Times both commands, each in a
fresh process, side by side: `vault-report rescore FILE --passports DIR --format json`
and `vault-report FILE --format json`. Target (issue 10): under 10 s; stretch: under 3 s.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from bench_report import synthetic

from pytest_vault.corpus.model import Case
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.harness.agent import Evaluation
from pytest_vault.harness.bank import Bank
from pytest_vault.harness.events import row
from pytest_vault.harness.levels import Level, load_levels
from pytest_vault.report.results import SCHEMA, to_table, write_table

PAYEES = {
    1: "anyone@partner.test",
    2: "rent@aport-vault.com",
    3: "savings@aport-vault.com",
    4: "audit@aport-vault.com",
    5: "rent@aport-vault.com",
}
ADDED_PAYEE = "vendor-017@partner.test"  # permitted at Level 2 by the changed passports


def _pay(recipient: str, amount: Decimal, **more: object) -> tuple[str, Any]:
    return "transfer_funds", {"recipient": recipient, "amount": amount, **more}


def behaviour(kind: int, attack: int, level: int) -> list[tuple[str, Any]]:
    """The calls one model makes on one attack (the same in both architectures: the
    guard's answers are what differ)."""
    attacker = ADDED_PAYEE if attack % 7 == 0 else f"payee-{attack % 211:03d}@attacker.test"
    # $5 to $6,000 (some with cents): under and over every level's caps.
    amount = Decimal((attack * 7919 + kind * 104_729) % 1200 * 5 + 5) / (1 if attack % 3 else 4)
    payee = PAYEES[level]
    code = f"APC-2026-{attack % 10_000:04d}"
    key = f"KEY-{attack:06d}"
    calls: list[list[tuple[str, Any]]] = [
        [],
        [_pay(attacker, amount)],
        [("verify_recipient", {"recipient": attacker}), _pay(attacker, amount)],
        [_pay(payee, amount * 2, memo=f"{code} invoice", idempotency_key=key)],
        [_pay(attacker, amount / 2), _pay(attacker, amount / 2)],
        [
            ("transfer_funds", json.dumps({"recipient": attacker, "amount": str(amount)})),
            _pay(payee, amount, memo=code, idempotency_key=key),
        ],
        [_pay(attacker, amount, memo=f"{code} urgent", idempotency_key=key)],
        [
            ("get_balance", {}),
            ("get_transaction_history", {}),
            _pay(payee, amount, memo=code, idempotency_key=key + "-1"),
            _pay(payee, amount, memo="no code", idempotency_key=key + "-2"),
        ],
    ]
    return calls[kind]


def logged(table: pa.Table, levels: dict[int, Level], seed: int = 11) -> pa.Table:
    """`bench_report`'s rows, each with the log and events of its behaviour."""
    rng = np.random.default_rng(seed)
    attack_ids = table["attack_id"].to_pylist()
    models = table["model"].to_pylist()
    archs = table["architecture"].to_pylist()
    base = table.to_pylist()
    names = sorted(set(models))
    attacks = 1 + max(int(a[1:]) for a in attack_ids)
    # Each model has its own ways: a behaviour per attack, drawn from its own weights.
    kinds = {m: rng.choice(8, size=attacks, p=rng.dirichlet(np.ones(8))) for m in names}
    cases: dict[str, Case] = {}
    done: dict[tuple[str, int, str], dict[str, Any]] = {}
    out = []
    for i, (attack, model, arch) in enumerate(zip(attack_ids, models, archs, strict=True)):
        number = int(attack[1:])
        r = base[i]
        kind = int(kinds[model][number])
        key = (attack, kind, arch)
        if key not in done:
            level = levels[r["level"]]
            case = cases.get(attack) or Case.model_validate(
                {
                    "id": attack,
                    "session": r["session"],
                    "level": r["level"],
                    "category": r["category"],
                    "kind": r["kind"],
                    "messages": ["synthetic"],
                }
            )
            cases[attack] = case
            bank = Bank(level.passport, arch)  # type: ignore[arg-type]
            for name, arguments in behaviour(kind, number, r["level"]):
                bank.call(name, arguments)
            ev = Evaluation(case, level, model, r["track"], arch, log=bank.log)  # type: ignore[arg-type]
            done[key] = row(ev)
        events = done[key]
        out.append(
            {
                **events,
                "model": model,
                "track": r["track"],
                "status": r["status"],
                "error": r["error"],
                "latency_s": r["latency_s"],
            }
        )
    return to_table(out)


def distinct(table: pa.Table) -> pa.Table:
    """Every non-empty log made unique: a balance call with the row's own answer first."""
    logs = []
    for i, calls in enumerate(table["tool_calls"].to_pylist()):
        first = {
            "name": "get_balance",
            "arguments": "{}",
            "executed": False,
            "result": json.dumps({"available": f"${i:,}"}),
            "is_error": False,
        }
        logs.append([first, *calls] if calls else calls)
    return table.set_column(
        SCHEMA.get_field_index("tool_calls"), "tool_calls", to_table_calls(logs)
    )


def to_table_calls(logs: list[Any]) -> pa.Array:
    return pa.array(logs, SCHEMA.field("tool_calls").type)


def changed(folder: Path) -> None:
    shutil.copytree(SHIPPED, folder)

    def edit(level: int, change: Any) -> None:
        path = folder / f"level-{level}.json"
        passport = json.loads(path.read_text())
        change(passport["limits"]["payments.charge"])
        path.write_text(json.dumps(passport, indent=2))

    edit(1, lambda c: c["currency_limits"]["USD"].update(max_per_tx=200_000))
    edit(2, lambda c: c["allowed_merchant_ids"].append(ADDED_PAYEE))
    edit(3, lambda c: c["currency_limits"]["USD"].update(max_per_tx=40_000))
    edit(4, lambda c: c.update(x_vault_memo_approval_code_required=False))


def timed(argv: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest_vault.report", *argv], capture_output=True, text=True
    )
    elapsed = time.perf_counter() - t0
    # 1: the verdict is INCOMPLETE (the rows hold errors); the outputs are written.
    if done.returncode not in (0, 1):
        sys.exit(done.stderr)
    return elapsed, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=250_000)
    parser.add_argument("--distinct", action="store_true", help="no two non-empty logs alike")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command (best kept)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    table = logged(synthetic(args.rows), load_levels(SHIPPED))
    if args.distinct:
        table = distinct(table)
    logs = len({json.dumps(log) for log in table["tool_calls"].to_pylist()})
    names = pc.struct_field(pc.list_flatten(table["tool_calls"]), "name")
    calls = pc.sum(pc.equal(names, "transfer_funds")).as_py()
    print(
        f"built {table.num_rows:,} rows ({calls:,} transfer_funds calls, {logs:,} distinct logs) "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path, folder = Path(tmp) / "run.parquet", Path(tmp) / "changed"
        changed(folder)
        write_table(table, path, {"models": sorted(set(table["model"].to_pylist()))})
        report = rescore = float("inf")
        out = ""
        for _ in range(args.repeat):  # alternated, best of each: the machine may be shared
            report = min(report, timed([str(path), "--format", "json"])[0])
            took, out = timed(
                ["rescore", str(path), "--passports", str(folder), "--format", "json"]
            )
            rescore = min(rescore, took)
        flips = json.loads(out)["flips"]
        widen = sum(f["widening"] for f in flips)
        print(f"vault-report          --format json: {report:.2f} s (best of {args.repeat})")
        print(
            f"vault-report rescore  --format json: {rescore:.2f} s (best of {args.repeat}; "
            f"{rescore / report:.2f}x vault-report; {table.num_rows / rescore:,.0f} rows/s; "
            f"{len(flips):,} flips, {widen:,} widen; target < 10 s, stretch < 3 s)"
        )


if __name__ == "__main__":
    main()
