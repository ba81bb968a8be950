"""Cost per test of the vault suite on the control models, against a bare pytest test.

    python benchmarks/bench_suite.py [--small 40] [--large 400] [--repeats 3] [--part P]

Both run in the same session as subprocesses, each at a small and a large size; the
cost per test is the slope between the two, so start-up (interpreter, plugins,
passports) is reported apart. Target (issue 3): vault slope <= 1.5x the bare slope.
Indirect cases (issue 28) per test, next to the direct ones: each case's attacked run
and its paired clean run, per control and architecture, against a direct case's tracks A
and B; target <= 1.2x. And trials (issue 29): `--vault-trials 5` against 1 on a control,
per case (target <= 5.5x), and the peak memory of the two runs side by side (target: N = 5
within 1.2x of N = 1's, plus its rows).
Also reported: the example `agent:` specs per test, next to the built-in controls, each
scripted like `scripted:obedient`: plain Python (a sync agent in the thread pool), and
pydantic-ai and the OpenAI Agents SDK through our adapters (skipped when not installed).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTROLS = 5  # the default models: five controls
PER_CASE = CONTROLS * 2 * 2  # x tracks x architectures
AGENTS = {  # spec -> the framework it needs
    "agent:plain_agent:make": None,
    "agent:pydantic_ai_agent:make": "pydantic_ai",
    "agent:openai_agents_agent:make": "agents",
}
AGENT_PER_CASE = 2 * 2  # one agent spec x tracks x architectures
COMMON = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly"]


def corpus(cases: int, folder: Path, kind: str = "level-*") -> Path:
    """`cases` lines drawn round-robin from the shipped corpus files `kind`, with fresh
    ids (and, for an indirect case, a task of its own: one clean run each, as shipped)."""
    source = [
        json.loads(x)
        for f in sorted((ROOT / "cases").glob(f"{kind}.jsonl"))
        for x in f.read_text().splitlines()
    ]
    path = folder / f"corpus_{kind.strip('*-')}_{cases}.jsonl"
    with path.open("w") as out:
        for i in range(cases):
            line = dict(source[(i * 37) % len(source)])
            line["id"] = f"bench-{i:05d}"
            if "environment" in line:
                line["messages"] = [*line["messages"][:-1], f"{line['messages'][-1]} (#{i})"]
            out.write(json.dumps(line) + "\n")
    return path


def bare(tests: int, folder: Path) -> Path:
    path = folder / f"test_bare_{tests}.py"
    path.write_text(
        f"import pytest\n\n@pytest.mark.parametrize('i', range({tests}))\ndef test_bare(i):\n    pass\n"
    )
    return path


def timed(args: list[str], cwd: Path, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *COMMON, *args],
            cwd=cwd,
            capture_output=True,
            text=True,
        )
        best = min(best, time.perf_counter() - t0)
        if done.returncode != 0:
            sys.exit(f"pytest failed:\n{done.stdout[-2000:]}")
    return best


PEAK = (
    "import resource, sys, pytest\n"
    "code = pytest.main(sys.argv[1:])\n"
    "print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    "sys.exit(code)\n"
)


def peak_kb(args: list[str], cwd: Path) -> int:
    """The peak resident memory of one pytest run, in KiB."""
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *COMMON, *args], cwd=cwd, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"pytest failed:\n{done.stdout[-2000:]}")
    return int(done.stdout.rsplit("PEAK_KB", 1)[1].split()[0])


def trials(args: argparse.Namespace, folder: Path) -> None:
    """N = 5 trials against N = 1, on one control: the cost per case and the peak memory."""
    one = ["--vault-model=scripted:obedient"]
    slopes = {}
    for n in (1, 5):
        sizes = (args.small, args.large)
        times = [
            timed([str(corpus(c, folder)), *one, f"--vault-trials={n}"], folder, args.repeats)
            for c in sizes
        ]
        slopes[n] = (times[1] - times[0]) / (sizes[1] - sizes[0])
        print(
            f"trials {n}: {times[0]:6.2f} s / {times[1]:6.2f} s -> {1e3 * slopes[n]:.2f} ms per "
            "case"
        )
    print(f"ratio 5 trials / 1, per case: {slopes[5] / slopes[1]:.2f}x (target: <= 5.5x)")
    path = str(corpus(args.large, folder))
    peaks = {n: peak_kb([path, *one, f"--vault-trials={n}"], folder) for n in (1, 5)}
    print(
        f"peak memory at {args.large} cases: {peaks[1] / 1024:.0f} MiB with 1 trial, "
        f"{peaks[5] / 1024:.0f} MiB with 5 ({peaks[5] / peaks[1]:.2f}x; target: <= 1.2x plus "
        f"the 4 more rows of each of its {args.large * 4:,} evaluations)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=40, help="cases in the small corpus")
    parser.add_argument("--large", type=int, default=400, help="cases in the large corpus")
    parser.add_argument("--repeats", type=int, default=3, help="runs per point; the best counts")
    parser.add_argument(
        "--part",
        choices=("all", "suite", "trials"),
        default="all",
        help="suite: the controls, indirect and bare tests (no agents); trials: N = 5 against 1",
    )
    args = parser.parse_args()
    if args.part == "trials":
        with tempfile.TemporaryDirectory() as tmp:
            trials(args, Path(tmp))
        return

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for example in ("plain_agent", "pydantic_ai_agent", "openai_agents_agent"):
            shutil.copy(ROOT / "examples" / f"{example}.py", folder / f"{example}.py")
        agents = [
            a
            for a, needs in AGENTS.items()
            if args.part == "all" and (needs is None or importlib.util.find_spec(needs))
        ]
        n_small, n_large = args.small * PER_CASE, args.large * PER_CASE
        points = {}
        for name, make in (
            ("vault", lambda n: [str(corpus(n // PER_CASE, folder))]),
            ("indirect", lambda n: [str(corpus(n // PER_CASE, folder, "indirect"))]),
            ("bare", lambda n: [str(bare(n, folder))]),
        ):
            for n in (n_small, n_large):
                points[name, n] = timed(make(n), folder, args.repeats)
        agent_sizes = (args.small * AGENT_PER_CASE, args.large * AGENT_PER_CASE)
        for agent in agents:
            for n in agent_sizes:
                points[agent, n] = timed(
                    [str(corpus(n // AGENT_PER_CASE, folder)), f"--vault-model={agent}"],
                    folder,
                    args.repeats,
                )
        print(
            f"tests per run: {n_small:,} and {n_large:,} (cases x {CONTROLS} controls x 2 tracks x 2 architectures)"
        )
        slopes = {}
        for name in ("bare", "vault"):
            small, large = points[name, n_small], points[name, n_large]
            slopes[name] = (large - small) / (n_large - n_small)
            startup = small - slopes[name] * n_small
            print(
                f"{name:>5}: {small:6.2f} s / {large:6.2f} s -> {1e3 * slopes[name]:.3f} ms per test, start-up {startup:.2f} s"
            )
        print(
            f"ratio vault / bare, per test: {slopes['vault'] / slopes['bare']:.2f}x (target: <= 1.5x)"
        )
        small, large = points["indirect", n_small], points["indirect", n_large]
        slope = (large - small) / (n_large - n_small)
        print(
            f"indirect: {small:6.2f} s / {large:6.2f} s -> {1e3 * slope:.3f} ms per test "
            f"(attacked and clean runs); ratio indirect / direct, per test: "
            f"{slope / slopes['vault']:.2f}x (target: <= 1.2x)"
        )
        for agent in agents:
            small, large = (points[agent, n] for n in agent_sizes)
            slope = (large - small) / (agent_sizes[1] - agent_sizes[0])
            print(
                f"agent: {small:6.2f} s / {large:6.2f} s -> {1e3 * slope:.3f} ms per test "
                f"({agent}, {slope / slopes['vault']:.2f}x the controls' per test)"
            )


if __name__ == "__main__":
    main()
