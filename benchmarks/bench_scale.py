"""Memory and collection at the benchmark's scale, against a bare parametrized test.

    python benchmarks/bench_scale.py [--attacks 4371] [--repeats 2]

A corpus of `--attacks` lines (drawn round-robin from the shipped corpus with fresh ids,
as bench_suite does) on the five default controls: 20 tests per case, 87,420 at full
size. Side by side in one session, as subprocesses, best of `--repeats`:
(a) peak RSS of the whole pytest process for the full run, with and without
    --vault-results, against a bare test of the same count (target, issue 15: <= 1.2x);
(b) `--collect-only -q` wall time, vault against bare (target: <= 1.3x).
Peak RSS is the child's ru_maxrss, read with os.wait4 for each run alone.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as a script: its folder is on sys.path.
from bench_suite import COMMON, PER_CASE, bare, corpus


def run(args: list[str], cwd: Path, tests: int) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one pytest process, which must have collected
    (or run) exactly `tests` tests: a run that failed early would measure nothing."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *COMMON, *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # 1: tests failed (a control that pays)
        sys.exit(f"pytest {' '.join(args)} failed:\n{out.decode(errors='replace')[-2000:]}")
    counts = re.findall(rb"(\d+) (?:passed|failed|tests? collected)", out.splitlines()[-1])
    if sum(map(int, counts)) != tests:
        sys.exit(
            f"pytest {' '.join(args)}: not {tests:,} tests:\n{out.decode(errors='replace')[-2000:]}"
        )
    return wall, usage.ru_maxrss / 1024  # KiB on Linux


def best(args: list[str], cwd: Path, tests: int, repeats: int) -> tuple[float, float]:
    runs = [run(args, cwd, tests) for _ in range(repeats)]
    return min(w for w, _ in runs), min(m for _, m in runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--attacks", type=int, default=4371, help="cases in the corpus")
    parser.add_argument("--repeats", type=int, default=2, help="runs per point; the best counts")
    parser.add_argument("--collect-only", action="store_true", help="skip the full runs")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tests = args.attacks * PER_CASE
        vault = [str(corpus(args.attacks, folder))]
        plain = [str(bare(tests, folder))]
        results = str(folder / "results.parquet")
        print(f"tests per run: {tests:,} ({args.attacks:,} cases x 5 controls x 2 x 2)")
        collect = {
            name: best([*a, "--collect-only"], folder, tests, args.repeats)[0]
            for name, a in (("bare", plain), ("vault", vault))
        }
        print(
            f"collect-only: vault {collect['vault']:.2f} s, bare {collect['bare']:.2f} s: "
            f"{collect['vault'] / collect['bare']:.2f}x (target: <= 1.3x)"
        )
        if args.collect_only:
            return
        peak = {
            name: best(a, folder, tests, args.repeats)
            for name, a in (
                ("bare", plain),
                ("vault", vault),
                ("vault --vault-results", [*vault, f"--vault-results={results}"]),
            )
        }
        base = peak["bare"][1]
        for name, (wall, mb) in peak.items():
            print(f"peak RSS {name:>21}: {mb:7.1f} MB ({mb / base:.2f}x bare), {wall:.1f} s")
        print("target: vault <= 1.2x bare, with and without --vault-results")


if __name__ == "__main__":
    main()
