"""`vault-report rescore` of another tool's ATIF trajectories against the same calls
read from Parquet (issue 43: 250,000 ATIF steps within 2x of the Parquet re-score).

    python benchmarks/bench_rescore_atif.py [--steps 250000]

The trajectories have the shape of an AgentDojo banking run as a converter writes it
(`tests/data/atif/agentdojo-banking-user_task_4.json`): a user step, an agent step that
reads the transactions (its observation a few hundred characters), two agent steps that
each `send_money` (a payee from a pool of 600, an amount from $0.50 to $1,500), and a
closing agent step: five steps per trajectory, in one `.jsonl`. They are re-scored at
Level 3 under a passport with 40 of those payees added, `--was` the shipped ones, with
`--map agentdojo`: each call is judged twice, under `--was` for its old decision and
under the new passports. The same calls as a results file: the rows the ATIF read
makes, each call with its decision under `--was` recorded (as a run of ours records
it), written as Parquet: each call judged once. Each command runs in a fresh
process, `--format json` (the best of `--repeat` runs); the ratio is ATIF / Parquet.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from pytest_vault.guard.folder import SHIPPED
from pytest_vault.harness.levels import load_levels
from pytest_vault.report.atif import Options, load_any, load_map
from pytest_vault.report.rescore import rescore
from pytest_vault.report.results import write_table

STEPS = 5  # per trajectory
TARGET = 2.0
ROOT = Path(__file__).resolve().parents[1]


def payee(n: int) -> str:
    return f"GB{n:02d}NWBK6016133192{n:04d}"


def trajectory(i: int) -> dict[str, object]:
    def send(k: int) -> dict[str, object]:
        amount = ((i * 7919 + k * 104_729) % 3000 + 1) / 2
        return {
            "step_id": 3 + k,
            "source": "agent",
            "message": "",
            "tool_calls": [
                {
                    "tool_call_id": f"call_{i}_{k}",
                    "function_name": "send_money",
                    "arguments": {
                        "recipient": payee((i * 31 + k * 17) % 600),
                        "amount": amount,
                        "subject": f"Invoice {i}-{k}",
                        "date": "2022-03-14",
                    },
                }
            ],
            "observation": {
                "results": [
                    {
                        "source_call_id": f"call_{i}_{k}",
                        "content": f"{{'message': 'sent {amount}'}}",
                    }
                ]
            },
        }

    history = "- amount: 100.0\n  recipient: CH9300762011623852957\n  subject: Pizza party\n" * 4
    return {
        "schema_version": "ATIF-v1.7",
        "session_id": f"run-{i:06d}",
        "agent": {"name": "agentdojo", "version": "0.1.35", "model_name": "gpt-4o-2024-05-13"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "Please pay my bills."},
            {
                "step_id": 2,
                "source": "agent",
                "message": "",
                "tool_calls": [
                    {
                        "tool_call_id": f"call_{i}_r",
                        "function_name": "get_most_recent_transactions",
                        "arguments": {"n": 100},
                    }
                ],
                "observation": {"results": [{"source_call_id": f"call_{i}_r", "content": history}]},
            },
            send(0),
            send(1),
            {"step_id": 5, "source": "agent", "message": "Done."},
        ],
    }


def timed(repeat: int, *args: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "pytest_vault.report", "rescore", *args, "--format", "json"],
            check=True,
            stdout=subprocess.DEVNULL,
            env=env,
        )
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=250_000)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the best is kept")
    args = parser.parse_args()
    n = args.steps // STEPS
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        runs = folder / "runs.jsonl"
        with runs.open("w") as out:
            for i in range(n):
                out.write(json.dumps(trajectory(i)) + "\n")
        widened = folder / "widened"
        shutil.copytree(SHIPPED, widened)
        path = widened / "level-3.json"
        passport = json.loads(path.read_text())
        passport["limits"]["payments.charge"]["allowed_merchant_ids"] += [
            payee(k) for k in range(40)
        ]
        path.write_text(json.dumps(passport))
        # The same calls as a results file: the rows the ATIF read makes.
        was = load_levels(SHIPPED)
        loaded = load_any([runs], Options(3, was, load_map("agentdojo")))
        # As a run of ours records them: each call with the decision the guard of the
        # passports in force gives it.
        recorded = rescore(loaded.table, was, datetime.now(UTC), logs=True, was=was).table
        parquet = folder / "runs.parquet"
        write_table(recorded, parquet, loaded.metadata[0])
        calls = sum(len(log) for log in loaded.table["tool_calls"].to_pylist())
        common = ["--passports", str(widened)]
        atif_s = timed(
            args.repeat,
            str(runs),
            *common,
            "--was",
            str(SHIPPED),
            "--level",
            "3",
            "--map",
            "agentdojo",
        )
        parquet_s = timed(args.repeat, str(parquet), *common)
    print(f"{n:,} trajectories, {n * STEPS:,} ATIF steps, {calls:,} calls")
    print(f"rescore from Parquet: {parquet_s:.2f} s")
    print(f"rescore from ATIF:    {atif_s:.2f} s")
    print(f"ratio ATIF / Parquet: {atif_s / parquet_s:.2f}x (target: at most {TARGET:.0f}x)")


if __name__ == "__main__":
    main()
