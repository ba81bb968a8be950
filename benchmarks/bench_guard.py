"""Guard speed: in-process decision latency, and the CLI against a plain JSON loop.

    python benchmarks/bench_guard.py [--lines 100000]

Targets (issue 15): median decision <= 5 us in process; the CLI on 100,000 lines at
no worse than 1.5x a loop that only parses and re-serializes each line.

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
from pathlib import Path
from typing import Any

from pytest_vault.guard.engine import Guard
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.passport import load_passport

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
