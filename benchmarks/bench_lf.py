"""`--lf` after a failing run of the built-in direct corpus on the five default controls
(452 cases x 5 models x 2 tracks x 2 architectures = 9,040 tests), counted, not timed.

    python benchmarks/bench_lf.py [--keep FOLDER]

Target (issue 40): `--lf` collects and evaluates exactly the failures of the run before,
nothing else: the tests pytest reports, and the rows the results file holds. A failure
here is a model-alone test that paid where the passport forbids (`vault_strict`).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

CORPUS = [f"builtin:level-{n}" for n in range(1, 6)]
ARGS = ["-q", "-p", "no:randomly", "--vault-progress=0", "--vault-strict"]


def pytest(folder: Path, *more: str) -> tuple[dict[str, int], float]:
    """Run pytest in `folder`: its outcome counts (pytest's last line), and seconds."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *ARGS, *more],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    last = done.stdout.strip().splitlines()[-1]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (\w+)", last)}
    if not counts:
        raise SystemExit(f"pytest said: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return counts, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="run in this folder, and keep it")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-lf-"))
    folder.mkdir(parents=True, exist_ok=True)
    corpus = ", ".join(f'"{c}"' for c in CORPUS)
    (folder / "pyproject.toml").write_text(
        f'[tool.pytest.ini_options]\nvault_corpus = [{corpus}]\nvault_results = "r.parquet"\n'
    )
    first, t1 = pytest(folder)
    failed = first.get("failed", 0)
    ran = failed + first.get("passed", 0)
    again, t2 = pytest(folder, "--lf")
    rows = pq.read_table(folder / "r.parquet").num_rows
    print(f"first run: {ran:,} tests, {failed:,} failed ({t1:.1f} s)")
    print(
        f"--lf: {sum(again.values()):,} tests reported ({again}), {rows:,} evaluations "
        f"written ({t2:.1f} s); target: exactly the {failed:,} failures: "
        f"{'ok' if rows == failed == again.get('failed', 0) else 'MISMATCH'}; "
        f"ratio {rows / failed if failed else 0:.2f}x the failures"
    )


if __name__ == "__main__":
    main()
