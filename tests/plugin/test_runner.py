"""The runner that evaluates ahead of the tests: order, priority, reruns, errors, shutdown."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest

from pytest_vault.plugin.runner import Runner


def test_read_ahead_then_each_result_once_and_again_on_a_rerun() -> None:
    calls: list[str] = []

    async def work(job: str) -> str:
        calls.append(job)
        await asyncio.sleep(0.001)
        return job.upper()

    runner: Runner[str, str] = Runner(work, lambda job: job, concurrency=3)
    try:
        jobs = [f"j{i}" for i in range(20)]
        runner.prefetch(jobs)
        assert [runner.result(j) for j in jobs] == [j.upper() for j in jobs]
        assert sorted(calls) == sorted(jobs)  # each once, although asked twice (ahead, then waited)
        # A rerun plugin runs a test again: it is evaluated again, and does not hang.
        assert runner.result("j3") == "J3" and calls.count("j3") == 2
        assert runner.counts.in_flight == 0
    finally:
        runner.close()


def test_a_waiting_test_jumps_the_read_ahead_queue() -> None:
    order: list[str] = []
    gate = asyncio.Event()

    async def work(job: str) -> str:
        order.append(job)
        if job == "first":
            await gate.wait()
        return job

    runner: Runner[str, str] = Runner(work, lambda job: job, concurrency=1)
    try:
        runner.prefetch(["first", "a", "b", "c"])
        runner.call(asyncio.sleep(0.05))  # "first" is now running and holds the only worker
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(runner.result, "c")  # a test now waits for "c"
            time.sleep(0.05)

            async def release() -> None:
                gate.set()

            runner.call(release())
            assert waiting.result(timeout=10) == "c"
        assert order[:2] == ["first", "c"]
    finally:
        runner.close()


def test_errors_reach_the_waiting_test() -> None:
    async def work(job: str) -> str:
        if job == "x":
            raise ValueError(f"broken {job}")
        return job

    runner: Runner[str, str] = Runner(work, lambda job: job, concurrency=1)
    try:
        with pytest.raises(ValueError, match="broken x"):
            runner.result("x")
        assert runner.result("y") == "y"  # the worker survived the error
    finally:
        runner.close()


def test_read_ahead_stays_within_its_window_and_a_job_taken_early_runs_once() -> None:
    calls: list[str] = []

    async def work(job: str) -> str:
        calls.append(job)
        return job.upper()

    def settle() -> None:  # let the workers finish what they can
        runner.call(asyncio.sleep(0.05))

    runner: Runner[str, str] = Runner(work, lambda job: job, concurrency=1, ahead=4)
    try:
        jobs = [f"j{i}" for i in range(20)]
        runner.prefetch(jobs)
        settle()
        assert calls == ["j0", "j1", "j2", "j3"]  # finished, none taken: the window is full
        assert runner.result("j0") == "J0"
        settle()
        assert calls == ["j0", "j1", "j2", "j3"]  # three still open: more than half
        assert runner.result("j1") == "J1"
        settle()
        assert calls[4:] == ["j4", "j5"]  # two open: refilled to four, in one go
        assert runner.result("j10") == "J10"  # out of order: run now, outside the window
        settle()
        assert calls[6:] == ["j10"]
        rest = [j for j in jobs if j not in ("j0", "j1", "j10")]
        assert [runner.result(j) for j in rest] == [j.upper() for j in rest]
        assert sorted(calls) == sorted(jobs)  # j10 was not run again when its turn came
        assert runner.counts.in_flight == 0
    finally:
        runner.close()


def test_the_default_window_grows_with_the_concurrency() -> None:
    from pytest_vault.plugin.runner import MIN_AHEAD

    async def work(job: str) -> str:
        return job

    for concurrency, window in ((16, MIN_AHEAD), (256, 2048)):
        runner: Runner[str, str] = Runner(work, lambda job: job, concurrency=concurrency)
        try:
            assert runner._ahead == window
        finally:
            runner.close()
