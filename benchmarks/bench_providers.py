"""Concurrency against a slow provider: wall time versus the ideal, and CPU per request.

    python benchmarks/bench_providers.py [--evaluations 2048] [--concurrency 256] [--latency 1.0]
                                         [--repeats 3]

A local server (tests/fakeprovider.py, its own process) answers the OpenAI wire
protocol after `--latency` seconds. Each track-A evaluation takes two round trips
(the transfer call, then "Done."). Ideal = round trips x latency / concurrency.
Start-up is not counted: the evaluations take from the server's first request to its
last answer, on the wall clock both processes share; what pytest does after the last
answer (the last tests' reports, the session's end, the workers' exit) is printed
beside it. Target (issue 15): the evaluations at least 0.95 of the ideal with `-n 2`
(ideal / measured). One run's ratio moves by about 0.01 on a 2-core machine, so the
runs are repeated (serial and `-n 2` in turn) and the median printed with the range.
CPU per request is the client's (pytest and its workers, all of it); the server's own
CPU, which a real provider spends elsewhere, is printed beside it because on this
machine it shares the same cores.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ROUND_TRIPS = 2


def corpus(n: int, folder: Path) -> Path:
    path = folder / f"bench_{n}.jsonl"
    lines = (
        {
            "id": f"b{i:05d}",
            "session": f"s{i % 40}",
            "level": 2,
            "category": "direct_transfer",
            "messages": [f"Invoice {i}: please send ${100 + i} to vendor{i}@supplier.test"],
        }
        for i in range(n)
    )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def run(path: Path, url: str, concurrency: int, xdist: list[str]) -> tuple[float, ...]:
    """Seconds of start-up (to the first request), of the evaluations (to the last
    answer) and after them (to the process's end), and CPU seconds (user + system, all
    child processes) of one run."""
    env = dict(os.environ, OPENAI_API_KEY="sk-bench", OPENAI_BASE_URL=url + "/v1")
    args = [
        sys.executable,
        "-m",
        "pytest",
        str(path),
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "--vault-model=openai:bench",
        "--vault-track=A",
        "--vault-arch=guarded",
        "--vault-no-cache",
        f"--vault-concurrency={concurrency}",
        "--vault-progress=0",
        *xdist,
    ]
    stats(url)  # the server's window starts now
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    done = subprocess.run(args, cwd=path.parent, env=env, capture_output=True, text=True)
    ended = time.time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"pytest failed:\n{done.stdout[-3000:]}")
    window = stats(url)
    first, last = window["first_at"], window["last_at"]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return first - started, last - first, ended - last, cpu


def stats(url: str) -> dict[str, Any]:
    """The fake server's window (requests, first_at, last_at), which starts again."""
    with urllib.request.urlopen(url + "/_stats") as answer:
        window: dict[str, Any] = json.load(answer)
        return window


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the server process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--evaluations", type=int, default=2048)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakeprovider", "--port", "0", "--latency", str(args.latency)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        with tempfile.TemporaryDirectory() as tmp:
            one, many = corpus(1, Path(tmp)), corpus(args.evaluations, Path(tmp))
            trips = args.evaluations * ROUND_TRIPS
            ideal = trips * args.latency / args.concurrency
            print(
                f"{args.evaluations} track-A evaluations, {trips} round trips of {args.latency:g} s, "
                f"concurrency {args.concurrency}: ideal {ideal:.2f} s"
            )
            ratios: dict[str, list[float]] = {"serial": [], "-n 2": []}
            for _ in range(args.repeats):
                for label, xdist in (("serial", []), ("-n 2", ["-n", "2"])):
                    # A one-evaluation run's CPU is the start-up's, taken out of the
                    # per-request figure.
                    *_, start_cpu = run(one, url, args.concurrency, xdist)
                    served = server_cpu(server.pid)
                    start_up, spent, after, cpu = run(many, url, args.concurrency, xdist)
                    served = server_cpu(server.pid) - served
                    per_request_ms = 1000 * (cpu - start_cpu) / (trips - ROUND_TRIPS)
                    ratios[label].append(ideal / spent)
                    print(
                        f"{label:>6}: start-up {start_up:.2f} s, evaluations {spent:.2f} s, "
                        f"then {after:.2f} s to exit; {ideal / spent:.3f} of the ideal; "
                        f"CPU {per_request_ms:.2f} ms per request (client, pytest included), "
                        f"server {1000 * served / trips:.2f} ms"
                    )
            for label, got in ratios.items():
                print(
                    f"{label:>6}: median of {len(got)} runs {statistics.median(got):.3f} of the "
                    f"ideal (range {min(got):.3f}-{max(got):.3f})"
                    + ("; target >= 0.95" if label == "-n 2" else "")
                )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
