"""Run evaluations ahead of the tests that report them.

pytest runs one test at a time, but a real evaluation waits seconds on a provider. The
runner owns a background thread with one event loop and `concurrency` worker tasks.
The session hands it, in test order, the jobs this process will run (`prefetch`);
each test then waits for its own result (`result`), jumping the queue if its job has
not started yet. The control models take the same path.

Read-ahead is a window: at most `ahead` jobs are queued, running or finished but not yet
reported at once, refilled by halves as tests take their results (one wake-up of the
loop per half window, not one per test). At 87,420 tests, a queue entry and a future for
every job up front was the run's largest transient memory.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Priorities: a test waiting now goes before read-ahead.
WAITING, AHEAD = 0, 1
# The read-ahead window, in multiples of the concurrency (and at least this many jobs):
# wide enough that one slow evaluation at the head does not idle the workers behind it.
AHEAD_PER_WORKER, MIN_AHEAD = 8, 1024


@dataclass(eq=False)
class _Entry(Generic[T, R]):
    """One job on its way: its future, and whether a worker has taken it."""

    job: T
    future: concurrent.futures.Future[R] = field(default_factory=concurrent.futures.Future)
    claimed: bool = False
    ahead: bool = False  # queued by the read-ahead: holds a place in its window


# What the workers' queue holds: (priority, sequence number, entry).
_Item = tuple[int, int, _Entry[T, R]]


@dataclass(frozen=True)
class Counts:
    in_flight: int
    finished: int


class Runner(Generic[T, R]):
    def __init__(
        self,
        work: Callable[[T], Awaitable[R]],
        key: Callable[[T], str],
        concurrency: int,
        on_close: Callable[[], Awaitable[None]] | None = None,
        ahead: int | None = None,
    ) -> None:
        self._work, self._key, self._concurrency, self._on_close = work, key, concurrency, on_close
        self._ahead = max(AHEAD_PER_WORKER * concurrency, MIN_AHEAD) if ahead is None else ahead
        self._entries: dict[str, _Entry[T, R]] = {}
        # Jobs to read ahead, in order, not yet queued; `_later` holds the keys among them
        # that no test has taken yet (one taken out of order is skipped when reached).
        self._pending: deque[T] = deque()
        self._later: set[str] = set()
        self._open = 0  # read-ahead entries queued and not yet taken by a test
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._queue: asyncio.PriorityQueue[_Item[T, R]] | None = None
        self._in_flight = 0
        self._finished = 0
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(ready,), name="pytest-vault-runner", daemon=True
        )
        self._thread.start()
        ready.wait()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._queue = asyncio.PriorityQueue()
        self._workers = [self._loop.create_task(self._worker()) for _ in range(self._concurrency)]
        ready.set()
        self._loop.run_forever()

    async def _worker(self) -> None:
        assert self._queue is not None
        while True:
            _, _, entry = await self._queue.get()
            with self._lock:
                if entry.claimed:
                    continue  # queued twice (ahead, then waited for): already taken
                entry.claimed = True
            future = entry.future
            self._in_flight += 1
            try:
                result = await self._work(entry.job)
            except asyncio.CancelledError:
                future.cancel()
                raise
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting test
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                self._in_flight -= 1
                self._finished += 1

    def _submit(self, job: T, key: str, priority: int, queue: list[_Item[T, R]]) -> _Entry[T, R]:
        """Enter a job (under the lock), adding what to queue to `queue`; a waiting
        test's job goes to the front."""
        entry = self._entries.get(key)
        fresh = entry is None
        if entry is None:
            entry = self._entries[key] = _Entry(job, ahead=priority == AHEAD)
            self._open += entry.ahead
        # A test waiting for a job no worker has taken yet puts it at the front.
        if fresh or (priority == WAITING and not entry.claimed):
            queue.append((priority, next(self._seq), entry))
        return entry

    def _put(self, items: list[_Item[T, R]]) -> None:
        """Queue entries, in one wake-up of the loop (thread-safe)."""
        if items:
            assert self._queue is not None
            self._loop.call_soon_threadsafe(_put_all, self._queue, items)

    def _refill(self) -> None:
        """Queue read-ahead jobs until the window is full (under the lock)."""
        items: list[_Item[T, R]] = []
        while self._open < self._ahead and self._pending:
            job = self._pending.popleft()
            key = self._key(job)
            if key in self._later:  # else a test already took it
                self._later.discard(key)
                self._submit(job, key, AHEAD, items)
        self._put(items)

    def prefetch(self, jobs: Iterable[T]) -> None:
        """Run these jobs ahead, in this order, as the window allows."""
        with self._lock:
            for job in jobs:
                key = self._key(job)
                if key not in self._later and key not in self._entries:
                    self._pending.append(job)
                    self._later.add(key)
            self._refill()

    def result(self, job: T) -> R:
        """Block until this job's result is ready (starting it now if needed)."""
        key = self._key(job)
        with self._lock:
            self._later.discard(key)
            items: list[_Item[T, R]] = []
            future = self._submit(job, key, WAITING, items).future
            self._put(items)
        try:
            return future.result()
        finally:
            # Forget the job, so that the same test run again (a rerun plugin) is
            # evaluated again; a stale queue item for it is skipped as claimed.
            with self._lock:
                entry = self._entries.pop(key, None)
                if entry is not None and entry.ahead:
                    self._open -= 1
                    if self._open <= self._ahead // 2:
                        self._refill()

    @property
    def counts(self) -> Counts:
        return Counts(self._in_flight, self._finished)

    def call(self, coro: Awaitable[Any]) -> Any:
        """Run a coroutine on the runner's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(_wrap(coro), self._loop).result()

    def close(self) -> None:
        """Cancel what has not finished, close the clients, stop the thread."""
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            for task in self._workers:
                task.cancel()
            await asyncio.gather(*self._workers, return_exceptions=True)
            if self._on_close is not None:
                await self._on_close()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._loop.close()
            for entry in self._entries.values():
                entry.future.cancel()


def _put_all(queue: asyncio.PriorityQueue[_Item[T, R]], items: list[_Item[T, R]]) -> None:
    for item in items:
        queue.put_nowait(item)


async def _wrap(coro: Awaitable[Any]) -> Any:
    return await coro
