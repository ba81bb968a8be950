"""Your agent, your guard: a team's own agent and guard, driven against the bank.

- `--vault-model agent:MODULE:FACTORY`: the factory gets an `AgentContext` once per
  evaluation and returns an object with `reply(message) -> str` (sync or async). Every
  tool call goes through `ctx.call_tool` (or `ctx.call_tool_sync`), so the bank, the
  guard and the five events are the same whatever framework the agent is written in.
- `--vault-guard MODULE:FACTORY`: the factory gets the level number and the passport's
  path once per evaluation and returns `(tool, arguments) -> bool | (bool, str)` (sync or
  async). `TeamGuard` puts it in front of every tool call and fails closed.

Sync agents run in a thread pool (never on the event loop's thread); their tool calls
hop back to the loop, where the bank lives.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import copy
import importlib
import importlib.machinery
import inspect
import logging
import pkgutil
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_vault.core.text import safe, shown
from pytest_vault.guard.engine import Decision, Reason, deny
from pytest_vault.harness.agent import TOOLS, Evaluation, Message, ModelError, tools_for
from pytest_vault.harness.bank import Bank, Screen, ToolResult
from pytest_vault.harness.levels import Level

__all__ = ["AgentContext", "AgentSubject", "Loader", "StepLimit", "TeamGuard", "ToolResult"]

# Decision codes of a team's guard (not OAP codes: the guard under test is theirs).
GUARD_ALLOWED = "guard.allowed"
GUARD_DENIED = "guard.denied"
GUARD_ERROR = "guard.error"
MAX_REASON = 500  # characters of a guard's reason kept: it goes back to the model

log = logging.getLogger("pytest_vault.guard_under_test")


class StepLimit(Exception):
    """The step bound was reached: this tool call was not executed."""


class SetupError(ModelError):
    """A factory could not be imported or called: the evaluation is an error row."""


class Loader:
    """`MODULE:FACTORY`, imported on first use. The module's top package is looked for in
    `search` first, in order (the invocation folder, pytest's `pythonpath`, the rootdir:
    where a user expects their own module to be, whatever folder pytest ran from and
    under xdist), then on sys.path. The folder it is found in joins sys.path, so that
    the module's own imports of its neighbours work as from a script."""

    def __init__(self, spec: str, target: str, search: Sequence[Path] = ()) -> None:
        self.spec, self.search = spec, tuple(dict.fromkeys(search))
        self.module, _, self.name = target.partition(":")
        self._factory: Callable[..., Any] | None = None
        self._failure: str | None = None
        self._lock = threading.Lock()

    @classmethod
    def of(cls, spec: str, factory: Callable[..., Any]) -> Loader:
        """A loader of a factory already in hand (in-process use, tests)."""
        loader = cls(spec, ":")
        loader._factory = factory
        return loader

    def factory(self) -> Callable[..., Any]:
        with self._lock:  # once per process, even if evaluations race to it
            if self._factory is None and self._failure is None:
                self._factory, self._failure = self._load()
            if self._factory is None:
                raise SetupError(f"{self.spec}: cannot load: {self._failure}")
            return self._factory

    def problem(self) -> str | None:
        """Why the factory cannot be loaded (one line, made safe), or None once it is in
        hand: the plugin asks at configure, so a misspelt name stops the run before it
        starts."""
        try:
            self.factory()
        except SetupError:
            return self._failure
        return None

    def _load(self) -> tuple[Callable[..., Any] | None, str | None]:
        """The factory, or why there is none."""
        try:
            found = self._resolve()
        except ModuleNotFoundError as exc:
            # This module (or a package of its path) is missing, or one it imports is.
            if exc.name is not None and f"{self.module}.".startswith(f"{exc.name}."):
                where = "".join(f"{folder}, " for folder in self.search)
                return None, safe(f"no module named {exc.name!r} (looked in {where}then sys.path)")
            return None, safe(f"importing {self.module} raised {type(exc).__name__}: {exc}")
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - one line, not a traceback
            # A module whose import fails is not left in sys.modules: then it was the import.
            if self.module not in sys.modules:
                return None, safe(f"importing {self.module} raised {type(exc).__name__}: {exc}")
            if isinstance(exc, AttributeError):
                return None, safe(f"module {self.module} has no {self.name}")
            # A module `__getattr__` that raises something else.
            return None, safe(f"{self.module}.{self.name} raised {type(exc).__name__}: {exc}")
        if not callable(found):
            kind = type(found).__name__
            return None, safe(f"{self.module}.{self.name} is not callable ({kind})")
        return found, None

    def _resolve(self) -> Any:
        top = self.module.partition(".")[0]
        if top not in sys.modules:
            for folder in self.search:
                if importlib.machinery.PathFinder.find_spec(top, [str(folder)]) is not None:
                    if str(folder) not in sys.path:
                        sys.path.insert(0, str(folder))
                        importlib.invalidate_caches()
                    break
        return pkgutil.resolve_name(f"{self.module}:{self.name}")

    def call(self, *args: Any) -> Any:
        factory = self.factory()
        try:
            return factory(*args)
        except Exception as exc:  # noqa: BLE001 - a failing factory is an error row
            failure = f"{self.spec}: the factory raised {type(exc).__name__}: {exc}"
            raise SetupError(safe(failure)) from None


# -- the team's guard ------------------------------------------------------------------
def _is_async(fn: Callable[..., Any]) -> bool:
    # A coroutine function, or an object whose __call__ is one.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


class TeamGuard:
    """One evaluation's team guard as the bank's screen: it never raises, fails closed."""

    def __init__(self, spec: str, check: Callable[..., Any]) -> None:
        self.spec, self._check = spec, check

    @classmethod
    def make(cls, loader: Loader, level: Level) -> TeamGuard:
        check = loader.call(level.number, level.passport_file)
        if not callable(check):
            raise SetupError(
                f"{loader.spec}: the factory returned a {type(check).__name__}, not a callable"
            )
        return cls(loader.spec, check)

    async def __call__(self, tool: str, arguments: Any) -> Decision:
        try:
            # A copy: a guard that edits the arguments must not change what executes.
            probe = copy.deepcopy(arguments)
        except Exception as exc:  # noqa: BLE001 - e.g. nested too deep: never executed
            return self._failed(tool, f"could not be shown the arguments ({type(exc).__name__})")
        try:
            if _is_async(self._check):
                answer = await self._check(tool, probe)
            else:  # off the loop: a guard's I/O (a ledger's lock) must not stall the run
                answer = await asyncio.to_thread(self._check, tool, probe)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:  # noqa: BLE001 - fail closed, and say so
            # Redacted before the cut, so that a cut never leaves half a key.
            return self._failed(tool, f"raised {type(exc).__name__}: {safe(str(exc))[:MAX_REASON]}")
        if type(answer) is bool:
            allow, why = answer, ""
        elif (
            type(answer) is tuple
            and len(answer) == 2
            and type(answer[0]) is bool
            and type(answer[1]) is str
        ):
            allow, why = answer
        else:
            return self._failed(
                tool, f"answered a {type(answer).__name__}, not bool or (bool, str)"
            )
        why = safe(why)[:MAX_REASON]
        if allow:
            return Decision(True, (Reason(GUARD_ALLOWED, why or "allowed by the guard"),))
        return deny(GUARD_DENIED, why or "denied by the guard")

    def _failed(self, tool: str, what: str) -> Decision:
        message = safe(f"the guard under test ({self.spec}) {what}; denied")
        log.warning("%s (tool %s)", message, shown(tool))
        return deny(GUARD_ERROR, message)


def screen_maker(loader: Loader | None, level: Level) -> Callable[[], Screen] | None:
    """What `evaluate` calls once per guarded evaluation to get a fresh team guard."""
    if loader is None:
        return None
    return lambda: TeamGuard.make(loader, level)


# -- the team's agent ------------------------------------------------------------------
class AgentContext:
    """What an agent's factory gets: the level's settings and the bank's tools."""

    def __init__(
        self,
        level: Level,
        bank: Bank,
        max_steps: int,
        tools: tuple[dict[str, Any], ...] = TOOLS,
        trial: int = 1,
        system_prompt: str | None = None,
    ) -> None:
        self.level: int = level.number
        # Which of the evaluation's independent trials this is (`--vault-trials`): an agent
        # that caches its model's answers keys trial k > 1 apart, as our providers do.
        self.trial: int = trial
        # The level's prompt for this case (`Level.prompt_for`: with a paragraph for each
        # of the bank's records the case holds), else the level's own.
        self.system_prompt: str = level.system_prompt if system_prompt is None else system_prompt
        # OpenAI function-tool form; a copy each, so an agent may edit its own. An
        # indirect case with documents adds `read_document`.
        self.tools: list[dict[str, Any]] = [
            {"type": "function", "function": copy.deepcopy(t)} for t in tools
        ]
        self.temperature: float = level.temperature
        self.max_tokens: int = level.max_tokens
        # Tool calls per user message (`--vault-max-steps`); call N+1 raises StepLimit.
        self.max_steps: int = max_steps
        self._bank, self._max_steps = bank, max_steps
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._lock = asyncio.Lock()  # one call at a time: the log keeps the agent's order
        self._calls = 0  # tool calls for the current user message
        self._open = True
        self._running: asyncio.Task[Any] | None = None  # the call being judged, if any
        self.truncated = False
        self.steps = 0

    def _next_message(self) -> None:
        self._calls = 0

    def _close(self) -> None:
        self._open = False
        if self._running is not None:
            # A call still being judged (a timed-out sync agent's) never executes after
            # the row is taken: cancelled before the bank runs it, it is not run at all.
            self._running.cancel()

    async def call_tool(self, name: str, arguments: dict[str, Any] | str) -> ToolResult:
        """Run one tool call in this evaluation's bank; raises `StepLimit` past the bound."""
        if asyncio.get_running_loop() is not self._loop:
            # Awaited on another loop (an agent that runs its own): hop to the bank's.
            inner = asyncio.run_coroutine_threadsafe(self.call_tool(name, arguments), self._loop)
            return await asyncio.wrap_future(inner)
        async with self._lock:
            if not self._open:
                raise RuntimeError("call_tool after the evaluation ended")
            if self._calls >= self._max_steps:
                self.truncated = True
                raise StepLimit(f"step bound reached: {self._max_steps} tool calls per message")
            self._calls += 1
            self.steps += 1
            self._running = asyncio.current_task()
            try:
                return await self._bank.acall(name, arguments)
            finally:
                self._running = None

    def call_tool_sync(self, name: str, arguments: dict[str, Any] | str) -> ToolResult:
        """`call_tool` for a sync agent (in its thread); refused on the loop's thread."""
        if threading.get_ident() == self._loop_thread:
            raise RuntimeError(
                "call_tool_sync on the event loop's thread would deadlock; "
                "await ctx.call_tool in an async agent"
            )
        if not self._open:  # e.g. a thread still running after its reply timed out
            raise RuntimeError("call_tool after the evaluation ended")
        future = asyncio.run_coroutine_threadsafe(self.call_tool(name, arguments), self._loop)
        return future.result()


async def _reply(agent: Any, message: str, pool: concurrent.futures.ThreadPoolExecutor) -> object:
    reply = agent.reply
    if inspect.iscoroutinefunction(reply):
        return await reply(message)
    result = await asyncio.get_running_loop().run_in_executor(pool, reply, message)
    return await result if inspect.isawaitable(result) else result


async def _timed_reply(
    agent: Any, message: str, pool: concurrent.futures.ThreadPoolExecutor, timeout: float | None
) -> object:
    """`_reply`, bounded: a hung agent is an error row, not a run that never ends.

    An async agent is cancelled. A sync agent's thread cannot be stopped: it keeps its
    pool slot until it returns, and the closed context refuses its later tool calls."""
    try:
        async with asyncio.timeout(timeout) as scope:
            return await _reply(agent, message, pool)
    except TimeoutError:
        if not scope.expired():
            raise  # the agent's own TimeoutError: an error row that names it
        raise ModelError(f"reply timed out after {timeout:g} s") from None


class AgentSubject:
    """A team's agent (`agent:MODULE:FACTORY`) as the subject of evaluations: its factory
    is called once per evaluation with an `AgentContext`, and the object it returns is
    driven through its `reply`. Sync agents run in a pool of threads (`pool`, or one of
    its own of `concurrency` threads, made on first use), never on the loop's thread."""

    def __init__(
        self,
        loader: Loader,
        *,
        max_steps: int,
        reply_timeout: float | None = None,
        concurrency: int = 1,
        pool: concurrent.futures.ThreadPoolExecutor | None = None,
    ) -> None:
        self.spec = loader.spec
        self.loader, self.max_steps, self.reply_timeout = loader, max_steps, reply_timeout
        self._concurrency = concurrency
        # A pool handed in is the caller's to shut down; one made here is this subject's.
        self._pool, self._owned = pool, pool is None

    @property
    def pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self._concurrency, thread_name_prefix="pytest-vault-agent"
            )
        return self._pool

    async def converse(self, ev: Evaluation, bank: Bank) -> _AgentConversation:
        ctx = AgentContext(
            ev.level,
            bank,
            self.max_steps,
            tools_for(ev.case),
            ev.trial,
            system_prompt=ev.level.prompt_for(ev.case),
        )
        talk = _AgentConversation(ctx, self.pool, self.reply_timeout)
        try:
            talk.agent = agent = self.loader.call(ctx)
            if not callable(getattr(agent, "reply", None)):
                kind = type(agent).__name__
                raise SetupError(f"{self.spec}: the factory returned a {kind} without reply")
        except BaseException:
            # The context closed, and an agent that was made closed: the first error stands.
            with contextlib.suppress(Exception):
                await talk.end(ev)
            raise
        return talk

    async def close(self) -> None:
        """At the run's end: an agent thread still stuck in `reply` must not hold it."""
        if self._pool is not None and self._owned:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


class _AgentConversation:
    def __init__(
        self,
        ctx: AgentContext,
        pool: concurrent.futures.ThreadPoolExecutor,
        timeout: float | None,
    ) -> None:
        self.ctx, self.pool, self.timeout = ctx, pool, timeout
        self.agent: Any = None
        self.transcript: list[Message] = []

    async def send(self, text: str) -> str:
        self.transcript.append(Message("user", text))
        self.ctx._next_message()
        try:
            answer = await _timed_reply(self.agent, text, self.pool, self.timeout)
        except StepLimit:
            return ""  # the turn was cut at the bound; the next message goes on
        if type(answer) is not str:
            raise ModelError(f"reply returned a {type(answer).__name__}, not a str")
        self.transcript.append(Message("assistant", answer))
        return answer

    async def end(self, ev: Evaluation) -> None:
        self.ctx._close()
        ev.transcript = self.transcript
        ev.truncated, ev.steps = self.ctx.truncated, self.ctx.steps
        if self.agent is not None:
            await _close_agent(self.agent, self.pool, self.timeout)


async def _close_agent(
    agent: Any, pool: concurrent.futures.ThreadPoolExecutor, timeout: float | None
) -> None:
    """The agent's `aclose()` or `close()`, if it has one, once its evaluation is over
    (its tool calls are refused by then): a client made per evaluation goes with it,
    on the loop it was used on. Bounded like a reply."""
    close = getattr(agent, "aclose", None)
    if not callable(close):
        close = getattr(agent, "close", None)
    if not callable(close):
        return
    try:
        async with asyncio.timeout(timeout) as scope:
            if inspect.iscoroutinefunction(close):
                await close()
                return
            result = await asyncio.get_running_loop().run_in_executor(pool, close)
            if inspect.isawaitable(result):
                await result
    except TimeoutError:
        if not scope.expired():
            raise
        raise ModelError(f"timed out after {timeout:g} s") from None
