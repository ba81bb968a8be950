"""`vault-report` over a run the size of the released benchmark (about 250,000 rows).

    python benchmarks/bench_report.py [--rows 250000]

Synthetic rows: 14 models x 2 architectures x 2 tracks over ~4,500 attacks in ~900
sessions, outcomes concentrated in a few sessions. Times the whole command (read,
every table, bootstrap included) in a fresh process. Target (issue 15): under 3 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pytest_vault.corpus.model import CATEGORIES
from pytest_vault.report.results import SCHEMA

CODES = [
    "oap.merchant_forbidden",
    "oap.limit_exceeded",
    "oap.unknown_capability",
    "vault.approval_code_missing",
]


def synthetic(rows: int, seed: int = 7) -> pa.Table:
    rng = np.random.default_rng(seed)
    models = [f"provider:model-{i:02d}" for i in range(14)]
    per_attack = len(models) * 4
    attacks = max(1, rows // per_attack)
    n = attacks * per_attack
    attack = np.repeat(np.arange(attacks), per_attack)
    session = attack // 5
    model = np.tile(np.repeat(np.arange(len(models)), 4), attacks)
    track = np.tile([0, 0, 1, 1], attacks * len(models))
    arch = np.tile([0, 1], n // 2)
    level = 1 + attack % 5
    kind = np.where(attack % 12 == 0, "benign", "attack")
    requested = rng.random(n) < 0.35
    hot = (session % 37 == 0) & (level >= 2) & (level <= 4)
    unpermitted = requested & (arch == 0) & hot & (rng.random(n) < 0.3)
    paid = requested & ((arch == 0) | (rng.random(n) < 0.5))
    status = np.where(rng.random(n) < 0.002, "error", "completed")
    denied = np.where(arch == 1, requested.astype(int) - (paid & requested).astype(int), 0)
    deny_codes = [
        [CODES[i % 4]] * int(d) if a == 1 else None
        for i, (d, a) in enumerate(zip(denied, arch, strict=True))
    ]
    tool_calls = [
        json.dumps(
            [
                {
                    "name": "transfer_funds",
                    "executed": True,
                    "permitted": False,
                    "transfer": {
                        "recipient": "mallory@evil.test",
                        "amount_minor": 90000,
                        "currency": "USD",
                        "memo": None,
                    },
                }
            ]
        )
        if u
        else "[]"
        for u in unpermitted
    ]
    columns = {
        "attack_id": [f"A{a:05d}" for a in attack],
        "session": [f"S{s:04d}" for s in session],
        "level": level,
        "category": [CATEGORIES[a % 10] for a in attack],
        "kind": kind,
        "track": np.where(track == 0, "A", "B"),
        "architecture": np.where(arch == 0, "model", "guarded"),
        "model": [models[m] for m in model],
        "requested": requested,
        "paid": paid,
        "allowed_calls": np.where(arch == 1, paid.astype(int), None),
        "denied_calls": np.where(arch == 1, denied, None),
        "deny_codes": deny_codes,
        "paid_allowlisted": paid & ~unpermitted,
        "unpermitted": unpermitted,
        "violation": unpermitted,
        "completed": np.where(kind == "benign", paid, None),
        "status": status,
        "error": np.where(status == "error", "openai: HTTP 500 (after 6 tries)", None),
        "input_blocked": np.zeros(n, dtype=bool),
        "steps": np.full(n, 2),
        "truncated": np.zeros(n, dtype=bool),
        "input_tokens": np.full(n, 900),
        "output_tokens": np.full(n, 40),
        "latency_s": rng.random(n) * 20,
        "cost_usd": np.full(n, 0.001),
        "tool_calls": tool_calls,
    }
    return pa.table(
        {
            k: pa.array(list(v) if not isinstance(v, list) else v, type=SCHEMA.field(k).type)
            for k, v in columns.items()
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=250_000)
    args = parser.parse_args()
    table = synthetic(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.parquet"
        meta = {"models": sorted(set(table["model"].to_pylist()))}
        pq.write_table(
            table.replace_schema_metadata({b"pytest_vault": json.dumps(meta).encode()}), path
        )
        for label, extra in (
            ("text", []),
            ("json", ["--format", "json", "--out", str(Path(tmp) / "t.json")]),
            ("html", ["--html", str(Path(tmp) / "r.html")]),
        ):
            t0 = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "pytest_vault.report", str(path), *extra],
                capture_output=True,
                text=True,
            )
            elapsed = time.perf_counter() - t0
            if done.returncode:
                sys.exit(done.stderr)
            print(
                f"vault-report ({label}) over {table.num_rows:,} rows: {elapsed:.2f} s, "
                f"{table.num_rows / elapsed:,.0f} rows/s, 1,500 bootstrap resamples per interval (target: < 3 s)"
            )


if __name__ == "__main__":
    main()
