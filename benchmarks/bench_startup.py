"""Start-up cost of having pytest-vault installed, in a project that does not use it.

    python benchmarks/bench_startup.py [--runs 15]

Target (issue 27): no measurable cost. `pytest --co -q` on an empty project and on a
small one (ten tests, a `tests/fixtures/events.jsonl`) with the plugin and with
`-p no:vault`, runs interleaved so that drift in the machine's load falls on both; and
the plugin's own import time (`python -X importtime`) beside pytest's.

Bytecode is cached (in a temporary `PYTHONPYCACHEPREFIX`, written by a first run), as
after `pip install`: with `PYTHONDONTWRITEBYTECODE` every run would compile every module.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def seconds(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, capture_output=True)
    return time.perf_counter() - start


def import_us(module: str, env: dict[str, str]) -> int:
    """Cumulative microseconds of `module`'s import, after pytest's (which it needs)."""
    code = f"import pytest; import {module}"
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True
    ).stderr
    line = next(x for x in err.splitlines() if x.rstrip().endswith(f"| {module}"))
    return int(line.split("|")[1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp, "pycache"))
        empty, small = Path(tmp, "empty"), Path(tmp, "small")
        empty.mkdir()
        (small / "tests" / "fixtures").mkdir(parents=True)
        (small / "tests" / "test_app.py").write_text(
            "".join(f"def test_{i}():\n    assert {i} == {i}\n\n\n" for i in range(10))
        )
        (small / "tests" / "fixtures" / "events.jsonl").write_text('{"event": "login"}\n')
        for name, folder in (("empty", empty), ("small", small)):
            base = ["--co", "-q", "-p", "no:cacheprovider"]
            seconds(base, folder, env)  # writes the bytecode
            with_, without = [], []
            for _ in range(runs):
                with_.append(seconds(base, folder, env))
                without.append(seconds([*base, "-p", "no:vault"], folder, env))
            w, wo = statistics.median(with_), statistics.median(without)
            spread = statistics.quantiles(without, n=4)
            print(
                f"{name:>5}: pytest --co -q  with {w:.3f} s  without {wo:.3f} s  "
                f"ratio {w / wo:.3f}  (without: quartiles {spread[0]:.3f}-{spread[2]:.3f} s)"
            )
        plugin = [import_us("pytest_vault.plugin", env) for _ in range(5)]
        pytest_ = [import_us("pytest", env) for _ in range(5)]
    print(
        f"import: pytest_vault.plugin {statistics.median(plugin) / 1e3:.1f} ms  "
        f"pytest {statistics.median(pytest_) / 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
