"""`--vault-otel` on the built-in direct corpus run on the five default controls (452
cases x 5 models x 2 tracks x 2 architectures = 9,040 tests), timed against the same run
without it.

    python benchmarks/bench_otel.py [--repeats 2] [--keep FOLDER]

Both runs write the results file; the second also writes the OTLP/JSON traces (no
collector: the file alone). Target (issue 43): at most 1.2x the run without it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORPUS = [f"--vault-corpus=builtin:level-{n}" for n in range(1, 6)]
ARGS = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--vault-progress=0"]
TARGET = 1.2


def timed(folder: Path, repeats: int, *more: str) -> tuple[float, int]:
    """The best wall time of `repeats` runs, and the tests the last one passed."""
    best, passed = float("inf"), 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *ARGS, *CORPUS, "--vault-results=r.parquet", *more],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
        )
        best = min(best, time.perf_counter() - t0)
        found = re.search(r"(\d+) passed", done.stdout)
        if done.returncode != 0 or found is None:
            raise SystemExit(f"pytest said: {done.stdout[-2000:]}{done.stderr[-2000:]}")
        passed = int(found[1])
    return best, passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="run in this folder, and keep it")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-otel-"))
    folder.mkdir(parents=True, exist_ok=True)
    without, tests = timed(folder, args.repeats)
    with_otel, again = timed(folder, args.repeats, "--vault-otel=traces.json")
    assert tests == again, (tests, again)
    traces = folder / "traces.json"
    spans = len(json.loads(traces.read_text())["resourceSpans"][0]["scopeSpans"][0]["spans"])
    ratio = with_otel / without
    # The export alone, in this process, from the results file the run wrote: what the
    # option adds, apart from the two runs' noise.
    from pytest_vault.report.otel import Run, otlp_text, table_request
    from pytest_vault.report.results import read_table

    table, metadata = read_table(folder / "r.parquet")
    t0 = time.perf_counter()
    otlp_text(table_request(table, metadata, Run("bench", time.time_ns())))
    alone = time.perf_counter() - t0
    print(f"without --vault-otel: {tests:,} tests in {without:.1f} s")
    print(
        f"with --vault-otel: {with_otel:.1f} s, {spans:,} spans, "
        f"{traces.stat().st_size / 1e6:.1f} MB of OTLP/JSON"
    )
    print(f"the export alone (rows to OTLP/JSON text): {alone:.2f} s")
    verdict = "ok" if ratio <= TARGET else "OVER"
    print(f"ratio {ratio:.2f}x (target <= {TARGET}x): {verdict}")


if __name__ == "__main__":
    main()
