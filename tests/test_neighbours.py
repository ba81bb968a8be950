"""A good neighbour: the plugins a team already has run beside ours without changing a
vault result or being changed by it. A small vault corpus, with the team's own tests,
runs with pytest-cov, pytest-randomly (random order and seed), pytest-rerunfailures,
pytest-timeout, pytest-html, pytest-asyncio (auto mode), pytest-benchmark, syrupy in
the team's own tests and `-p no:cacheprovider`, serially and on two workers; its rows,
summary and exit status are those of a run with none of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from . import wheelhouse
from .wheelhouse import Venv

pytestmark = pytest.mark.slow

NEIGHBOURS = (
    "pytest-cov",
    "pytest-randomly",
    "pytest-rerunfailures",
    "pytest-timeout",
    "pytest-html",
    "pytest-asyncio",
    "pytest-benchmark",
)
# Their plugin names, for a run without them.
OFF = ("cov", "randomly", "rerunfailures", "timeout", "html", "asyncio", "benchmark")
VAULT = (
    "--vault-corpus",
    "builtin:level-3",
    "--vault-model",
    "scripted:obedient",
    "--vault-model",
    "scripted:reference",
    "--vault-strict",  # failures, so a rerun plugin has something to rerun
    "--vault-progress=0",
)
TEAM_TESTS = {
    "tests/test_app.py": (
        "import asyncio\n\n"
        "async def test_async():  # pytest-asyncio's auto mode runs it\n"
        "    await asyncio.sleep(0)\n\n"
        "def test_snapshot(snapshot):\n"
        "    assert {'a': 1} == snapshot\n\n"
        "def test_benchmark(benchmark):\n"
        "    assert benchmark(sum, [1, 2]) == 3\n"
    ),
}
# What a row says that depends on the clock, not on what happened.
TIMED = ("latency_s",)


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Venv:
    return wheelhouse.venv(
        request.config, tmp_path_factory, "neighbours", ("xdist", "snapshots"), NEIGHBOURS
    )


def project(root: Path) -> Path:
    root.mkdir()
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\nasyncio_mode = 'auto'\n")
    for name, text in TEAM_TESTS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def summary(stdout: str) -> list[str]:
    """The pytest-vault summary section, as printed."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "pytest-vault summary" in line)
    end = next(
        (i for i in range(start + 1, len(lines)) if re.match(r"^([=-])+ .* \1+$", lines[i])),
        len(lines),
    )
    return [line for line in lines[start + 1 : end] if not line.startswith("results: ")]


def counts(stdout: str) -> dict[str, int]:
    """pytest's closing line, as counts by outcome."""
    last = stdout.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (failed|passed|rerun|error)", last)}


def rows(path: Path) -> list[dict[str, object]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    kept = table.drop_columns([c for c in TIMED if c in table.column_names])
    key = ("attack_id", "track", "architecture", "model", "trial")
    return sorted(kept.to_pylist(), key=lambda r: tuple(str(r[k]) for k in key))


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_the_plugins_a_team_has_change_no_vault_result(
    neighbours: Venv, tmp_path: Path, workers: tuple[str, ...]
) -> None:
    alone = project(tmp_path / "alone")
    plain = neighbours.run(
        "-m",
        "pytest",
        *VAULT,
        *workers,
        "--vault-results=run.parquet",
        *(arg for name in OFF for arg in ("-p", f"no:{name}")),
        cwd=alone,
    )
    beside = project(tmp_path / "beside")
    busy = neighbours.run(
        "-m",
        "pytest",
        "tests",
        *VAULT,
        *workers,
        "--vault-results=run.parquet",
        "--snapshot-update",
        "-p",
        "no:cacheprovider",
        "--randomly-seed=12345",
        "--reruns=1",
        "--timeout=120",
        "--html=report.html",
        "--self-contained-html",
        "--cov=.",
        "--benchmark-disable",
        cwd=beside,
    )
    assert plain.returncode == 1, plain.stdout[-3000:] + plain.stderr
    assert busy.returncode == plain.returncode, busy.stdout[-3000:] + busy.stderr
    before, after = counts(plain.stdout), counts(busy.stdout)
    # Each failed vault test was rerun once, and still counted once: the same rows and
    # numbers, and one line saying so; the team's own three tests ran beside ours.
    said = summary(busy.stdout)
    reruns = (
        f"reruns: {before['failed']} test(s) ran more than once ({2 * before['failed']} "
        "attempts in all); each is one evaluation in every number, and a forbidden transfer "
        "in any attempt is kept"
    )
    assert said.count(reruns) == 1
    assert [line for line in said if line != reruns] == summary(plain.stdout)
    # The same rows, but for the rerun tests' count of attempts: two, the first kept.
    ran = rows(beside / "run.parquet")
    assert sum((r["attempts"], r["attempt"]) == (2, 1) for r in ran) == before["failed"]
    assert sum((r["attempts"], r["attempt"]) == (1, 1) for r in ran) == len(ran) - before["failed"]
    attempts = ("attempts", "attempt")
    assert [{k: v for k, v in r.items() if k not in attempts} for r in ran] == [
        {k: v for k, v in r.items() if k not in attempts} for r in rows(alone / "run.parquet")
    ]
    assert after == {
        "failed": before["failed"],
        "passed": before["passed"] + 3,
        "rerun": before["failed"],
    }
    assert (beside / "report.html").is_file()
    assert (beside / "tests" / "__snapshots__").is_dir()
