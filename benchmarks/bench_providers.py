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
(ideal / measured). One run's ratio moves by 0.01 on a quiet 2-core machine and by up
to 0.05 on a shared one, so the runs are repeated (serial and `-n 2` in turn) and the
median printed with the range. CPU per request is the client's (pytest and its workers,
all of it); the server's own CPU, which a real provider spends elsewhere, is printed
beside it because on this machine it shares the same cores. So is a round trip as the
client timed it (from the rows' `latency_s`): what it adds to the server's `--latency`
is the time each request waited in the client's own process.
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

import pyarrow.parquet as pq

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
    answer) and after them (to the process's end), CPU seconds (user + system, all
    child processes) of one run, and the mean and 90th percentile of a round trip as
    the client timed it (each row's `latency_s` over its requests)."""
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
        f"--vault-results={path.with_suffix('.parquet')}",
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
    trips = sorted(
        pq.read_table(path.with_suffix(".parquet"), columns=["latency_s"])[0].to_pylist()
    )
    mean, p90 = statistics.mean(trips) / ROUND_TRIPS, trips[int(len(trips) * 0.9)] / ROUND_TRIPS
    return first - started, last - first, ended - last, cpu, mean, p90


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
                    start_cpu = run(one, url, args.concurrency, xdist)[3]
                    served = server_cpu(server.pid)
                    start_up, spent, after, cpu, trip, trip_p90 = run(
                        many, url, args.concurrency, xdist
                    )
                    served = server_cpu(server.pid) - served
                    per_request_ms = 1000 * (cpu - start_cpu) / (trips - ROUND_TRIPS)
                    ratios[label].append(ideal / spent)
                    print(
                        f"{label:>6}: start-up {start_up:.2f} s, evaluations {spent:.2f} s, "
                        f"then {after:.2f} s to exit; {ideal / spent:.3f} of the ideal; "
                        f"CPU {per_request_ms:.2f} ms per request (client, pytest included), "
                        f"server {1000 * served / trips:.2f} ms"
                    )
                    # Where the time beyond the ideal goes: the server holds each request
                    # `--latency` s (to within a millisecond), so the rest of a round trip
                    # as the client times it is the client's own queue (its loop, the GIL).
                    print(
                        f"        round trip as the client timed it: mean {trip:.3f} s, "
                        f"90th percentile {trip_p90:.3f} s (per evaluation; the server holds "
                        f"each {args.latency:g} s)"
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
