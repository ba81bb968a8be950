"""Real models: OpenAI (and any OpenAI-compatible server) and Anthropic, through their
official SDKs, with retries, rate limits, the response cache and the spend cap.

Specs: `openai:MODEL` (chat completions with tools; `--vault-base-url` or
`OPENAI_BASE_URL` for a compatible server) and `anthropic:MODEL` (messages with tool
use). Keys come from `OPENAI_API_KEY` / `ANTHROPIC_API_KEY` and never leave the client:
they are not part of cache keys, and error messages are scrubbed of them.

The SDKs are imported here only, and this module only when a provider spec is used.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

from pytest_vault.agent import (
    InputBlocked,
    ModelError,
    ModelRequest,
    ModelTurn,
    NotRun,
    ToolCall,
    Usage,
)
from pytest_vault.cache import ResponseCache, cache_key
from pytest_vault.ratelimit import RateLimiter, Spend
from pytest_vault.specs import BASE_URL_ENV, KEY_ENV, ProviderSpec, SpecError

# Sampling settings each API has that the suite leaves at the provider's default.
NOT_NORMALIZED = {
    "openai": ["top_p", "presence_penalty", "frequency_penalty", "seed", "reasoning_effort"],
    "anthropic": ["top_p", "top_k", "thinking"],
}
_SECRET_SHAPES = re.compile(r"\b(sk-[A-Za-z0-9_\-*]{4,}|sk-ant-[A-Za-z0-9_\-*]{4,})")


def redact(text: str) -> str:
    """Remove the providers' keys (and anything shaped like one) from text bound for rows,
    reports or logs. The keys are read from the environment here, so no function of
    ours ever holds one as an argument that a traceback could print."""
    for name in KEY_ENV.values():
        secret = os.environ.get(name, "")
        if len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    return _SECRET_SHAPES.sub("[redacted]", text)


REQUESTED = ("max_tokens", "temperature")  # the level's decode settings


@dataclass
class Decode:
    """Which of the level's decode settings the provider was sent, and under what name.

    Noted from every answer used (cached ones carry theirs), so a rerun from the cache
    records exactly what the original run sent.
    """

    sent: dict[str, str] = field(default_factory=dict)

    def note(self, settings: dict[str, str]) -> None:
        self.sent.update(settings)

    def record(self, provider: str) -> dict[str, Any]:
        return {
            "sent": sorted(self.sent),
            "not_sent": sorted(set(REQUESTED) - set(self.sent)),
            "renamed": {k: v for k, v in sorted(self.sent.items()) if k != v},
            "not_normalized": NOT_NORMALIZED[provider],
        }


class Wire(Protocol):
    """One provider's wire format: build a request body, send it, read the reply."""

    provider: str
    base_url: str

    def body(self, request: ModelRequest, model: str) -> dict[str, Any]: ...
    def settings(self, body: dict[str, Any]) -> dict[str, str]: ...
    async def send(self, body: dict[str, Any]) -> Any: ...
    def read(self, raw: Any) -> ModelTurn: ...
    def adapt(self, exc: Exception) -> bool: ...
    def blocked(self, exc: Exception) -> bool: ...
    async def close(self) -> None: ...


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)


def _arguments_object(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments)
    except (TypeError, ValueError):
        value = None
    return value if isinstance(value, dict) else {"_unparsed": str(arguments)}


class OpenAIWire:
    provider = "openai"

    def __init__(self, key: str | None, base_url: str | None, timeout: float) -> None:
        import openai

        self._openai = openai
        # key=None: the SDK reads OPENAI_API_KEY itself.
        self.client = openai.AsyncOpenAI(
            api_key=key, base_url=base_url, max_retries=0, timeout=timeout
        )
        self.base_url = str(self.client.base_url)
        self._drop: set[str] = set()
        self._max_tokens_name = "max_tokens"

    def body(self, request: ModelRequest, model: str) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": request.system}]
        for m in request.messages:
            if m.role == "user":
                messages.append({"role": "user", "content": m.content})
            elif m.role == "assistant":
                out: dict[str, Any] = {"role": "assistant", "content": m.content or None}
                if m.tool_calls:
                    out["tool_calls"] = [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": _arguments_text(c.arguments)},
                        }
                        for c in m.tool_calls
                    ]
                messages.append(out)
            else:
                messages.append(
                    {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
                )
        return {
            "model": model,
            "messages": messages,
            "tools": [{"type": "function", "function": t} for t in request.tools],
            "temperature": request.temperature,
            "max_tokens": request.max_tokens,
        }

    def settings(self, body: dict[str, Any]) -> dict[str, str]:
        names = {"max_tokens": self._max_tokens_name, "temperature": "temperature"}
        return {k: names[k] for k in REQUESTED if k in body and k not in self._drop}

    async def send(self, body: dict[str, Any]) -> Any:
        from openai.types.chat import ChatCompletion

        sent = {k: v for k, v in body.items() if k not in self._drop}
        if "max_tokens" in sent and self._max_tokens_name != "max_tokens":
            sent[self._max_tokens_name] = sent.pop("max_tokens")
        # The body is already in wire format: the SDK's documented `post` sends it as is
        # (auth, base URL, errors and response types still the SDK's), where `create`
        # would walk every message through its TypedDict transforms, the largest CPU
        # cost per request here.
        return await self.client.post("/chat/completions", cast_to=ChatCompletion, body=sent)

    def read(self, raw: Any) -> ModelTurn:
        if not getattr(raw, "choices", None):
            raise ModelError("openai: response has no choices")
        message = raw.choices[0].message
        calls = tuple(
            ToolCall(c.id, c.function.name, c.function.arguments)
            for c in (message.tool_calls or [])
        )
        usage = raw.usage
        return ModelTurn(
            text=message.content or "",
            tool_calls=calls,
            usage=Usage(
                getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0
            ),
        )

    def adapt(self, exc: Exception) -> bool:
        """Learn from a 400 that a decode setting is not accepted; True to resend."""
        if not isinstance(exc, self._openai.BadRequestError):
            return False
        text = str(exc).lower()
        if "temperature" in text and "temperature" not in self._drop:
            self._drop.add("temperature")
            return True
        if "max_tokens" in text and self._max_tokens_name == "max_tokens":
            self._max_tokens_name = "max_completion_tokens"
            return True
        return False

    def blocked(self, exc: Exception) -> bool:
        if not isinstance(exc, self._openai.BadRequestError):
            return False
        code = str(getattr(exc, "code", "") or "")
        text = str(exc).lower()
        return (
            code in {"invalid_prompt", "content_filter", "content_policy_violation"}
            or "flagged" in text
        )

    async def close(self) -> None:
        await self.client.close()


class AnthropicWire:
    provider = "anthropic"

    def __init__(self, base_url: str | None, timeout: float) -> None:
        import anthropic

        self._anthropic = anthropic
        # The SDK reads ANTHROPIC_API_KEY itself.
        self.client = anthropic.AsyncAnthropic(base_url=base_url, max_retries=0, timeout=timeout)
        self.base_url = str(self.client.base_url)
        # Newer Messages APIs have no temperature: then it is recorded as not sent.
        self._temperature = (
            "temperature" in inspect.signature(self.client.messages.create).parameters
        )

    def body(self, request: ModelRequest, model: str) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        for m in request.messages:
            if m.role == "user":
                messages.append({"role": "user", "content": m.content})
            elif m.role == "assistant":
                blocks: list[dict[str, Any]] = (
                    [{"type": "text", "text": m.content}] if m.content else []
                )
                blocks += [
                    {
                        "type": "tool_use",
                        "id": c.id,
                        "name": c.name,
                        "input": _arguments_object(c.arguments),
                    }
                    for c in m.tool_calls
                ]
                # The API refuses an empty assistant turn; an empty answer is shown as such.
                messages.append(
                    {
                        "role": "assistant",
                        "content": blocks or [{"type": "text", "text": "(no answer)"}],
                    }
                )
            else:
                result = {
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id,
                    "content": m.content,
                    "is_error": m.is_error,
                }
                last = messages[-1] if messages else None
                if last and last["role"] == "user" and isinstance(last["content"], list):
                    last["content"].append(result)  # results of one turn travel together
                else:
                    messages.append({"role": "user", "content": [result]})
        body: dict[str, Any] = {
            "model": model,
            "system": request.system,
            "messages": messages,
            "tools": [
                {
                    "name": t["name"],
                    "description": t["description"],
                    "input_schema": t["parameters"],
                }
                for t in request.tools
            ],
            "max_tokens": request.max_tokens,
        }
        if self._temperature:
            body["temperature"] = request.temperature
        return body

    def settings(self, body: dict[str, Any]) -> dict[str, str]:
        return {k: k for k in REQUESTED if k in body}

    async def send(self, body: dict[str, Any]) -> Any:
        from anthropic.types import Message

        # Wire-format body through the SDK's documented `post` (see OpenAIWire.send).
        return await self.client.post("/v1/messages", cast_to=Message, body=body)

    def read(self, raw: Any) -> ModelTurn:
        text, calls = [], []
        for block in getattr(raw, "content", None) or []:
            if block.type == "text":
                text.append(block.text)
            elif block.type == "tool_use":
                calls.append(ToolCall(block.id, block.name, block.input))
        usage = raw.usage
        return ModelTurn(
            text="".join(text),
            tool_calls=tuple(calls),
            usage=Usage(
                getattr(usage, "input_tokens", 0) or 0, getattr(usage, "output_tokens", 0) or 0
            ),
        )

    def adapt(self, exc: Exception) -> bool:
        return False

    def blocked(self, exc: Exception) -> bool:
        return (
            isinstance(exc, self._anthropic.BadRequestError)
            and "content filtering" in str(exc).lower()
        )

    async def close(self) -> None:
        await self.client.close()


def _status(exc: Exception) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def retry_after(exc: Exception) -> float | None:
    """Seconds the provider asked us to wait (Retry-After, or retry-after-ms)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def retryable(exc: Exception) -> bool:
    """429, 5xx (and 529 overloaded), timeouts and dropped connections."""
    status = _status(exc)
    if status is not None:
        return status == 429 or status >= 500
    name = type(exc).__name__
    return name in {"APITimeoutError", "APIConnectionError"} or isinstance(
        exc, TimeoutError | ConnectionError
    )


@dataclass
class Retry:
    tries: int = 6
    base: float = 0.5
    cap: float = 30.0
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, attempt: int, asked: float | None) -> float:
        """Exponential backoff with full jitter; never shorter than Retry-After."""
        jitter = self.rng.uniform(0, min(self.cap, self.base * 2**attempt))
        return max(asked or 0.0, jitter)


@dataclass
class Stats:
    """Live counters for progress lines (this process)."""

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


class ProviderModel:
    """A real model behind the suite's `Model` protocol."""

    ignores_step_bound = False

    def __init__(
        self,
        spec: ProviderSpec,
        wire: Wire,
        *,
        cache: ResponseCache | None,
        limiter: RateLimiter,
        spend: Spend,
        retry: Retry,
        stats: Stats,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.spec = spec.spec
        self._model = spec.model
        self.wire = wire
        self._cache, self._limiter, self._spend = cache, limiter, spend
        self._retry, self._stats, self._sleep = retry, stats, sleep
        self._flight = SingleFlight()
        self.decode = Decode()

    async def respond(self, request: ModelRequest) -> ModelTurn:
        body = self.wire.body(request, self._model)
        # What determines the answer: provider, endpoint, model, messages, tools, decode
        # settings as requested. Never the key.
        key = cache_key(
            {"provider": self.wire.provider, "base_url": self.wire.base_url, "body": body}
        )
        estimate = len(json.dumps(body, default=str)) // 4 + request.max_tokens
        # One answer per distinct request: evaluations that ask the same thing (the two
        # architectures' identical first step, say) share it, in this process through
        # the single flight and across processes through the cache's lock.
        answer = await self._flight.run(key, lambda: self._answer(body, key, estimate))
        self.decode.note(answer.get("decode", {}))
        return _from_cache(answer)

    async def _answer(self, body: dict[str, Any], key: str, estimate: int) -> dict[str, Any]:
        if self._cache is None:
            return await self._ask(body, estimate)
        answer, hit = await self._cache.fill(key, lambda: self._ask(body, estimate))
        self._stats.cache_hits += hit
        return answer

    async def _ask(self, body: dict[str, Any], estimate: int) -> dict[str, Any]:
        if self._spend.exhausted:
            raise NotRun(
                f"spend cap ${self._spend.cap_usd:g} reached before this evaluation finished"
            )
        try:
            turn = await self._send(body, estimate)
        except InputBlocked:
            # A refusal is an answer too: kept, so it is never paid for twice.
            return {"input_blocked": True, "decode": self.wire.settings(body)}
        self._spend.add(self.spec, turn.usage.input_tokens, turn.usage.output_tokens)
        self._stats.input_tokens += turn.usage.input_tokens
        self._stats.output_tokens += turn.usage.output_tokens
        return {**_to_cache(turn), "decode": self.wire.settings(body)}

    async def _send(self, body: dict[str, Any], estimate: int) -> ModelTurn:
        attempt = 0
        while True:
            # Every try, retries included, spends from the request and token budgets.
            await self._limiter.acquire(estimate)
            started = time.perf_counter()
            try:
                self._stats.requests += 1
                turn = self.wire.read(await self.wire.send(body))
            except ModelError:
                raise
            except Exception as exc:  # noqa: BLE001 - sorted below; nothing passes silently
                self._limiter.settle(estimate, 0)
                if self.wire.blocked(exc):
                    raise InputBlocked(self._clean(exc)) from None
                if self.wire.adapt(exc):
                    continue  # a decode setting was refused: resend without it (recorded)
                attempt += 1
                if not retryable(exc) or attempt >= self._retry.tries:
                    raise ModelError(
                        f"{self.wire.provider}: {self._describe(exc)} (after {attempt} tries)"
                    ) from None
                asked = retry_after(exc)
                if asked:
                    self._limiter.pause(asked)  # holds the provider's other requests too
                self._stats.retries += 1
                await self._sleep(self._retry.delay(attempt, asked))
                continue
            self._limiter.settle(estimate, turn.usage.input_tokens + turn.usage.output_tokens)
            latency = round(time.perf_counter() - started, 6)
            return ModelTurn(turn.text, turn.tool_calls, turn.usage, latency)

    def _describe(self, exc: Exception) -> str:
        status = _status(exc)
        head = f"HTTP {status}" if status is not None else type(exc).__name__
        return f"{head}: {self._clean(exc)}"

    def _clean(self, exc: Exception) -> str:
        text = " ".join(str(exc).split())
        return redact(text)[:300]  # redact first: a cut must not leave half a key

    async def close(self) -> None:
        await self.wire.close()


class SingleFlight:
    """Concurrent calls with one key share one result (and one exception)."""

    def __init__(self) -> None:
        self._flights: dict[str, asyncio.Future[dict[str, Any]]] = {}

    async def run(self, key: str, call: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        flight = self._flights.get(key)
        if flight is not None:
            return await asyncio.shield(flight)
        flight = self._flights[key] = asyncio.get_running_loop().create_future()
        try:
            result = await call()
        except BaseException as exc:
            flight.set_exception(exc)
            flight.exception()  # retrieved: waiters re-raise it, nobody logs it as lost
            raise
        else:
            flight.set_result(result)
            return result
        finally:
            del self._flights[key]


def _to_cache(turn: ModelTurn) -> dict[str, Any]:
    return {
        "text": turn.text,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in turn.tool_calls
        ],
        "usage": {
            "input_tokens": turn.usage.input_tokens,
            "output_tokens": turn.usage.output_tokens,
        },
        "latency_s": turn.latency_s,
    }


def _from_cache(value: dict[str, Any]) -> ModelTurn:
    if value.get("input_blocked"):
        raise InputBlocked("input blocked by the provider (cached)")
    usage = value.get("usage", {})
    return ModelTurn(
        text=value.get("text", ""),
        tool_calls=tuple(
            ToolCall(c["id"], c["name"], c["arguments"]) for c in value.get("tool_calls", [])
        ),
        usage=Usage(usage.get("input_tokens", 0), usage.get("output_tokens", 0)),
        latency_s=value.get("latency_s", 0.0),
    )


def make_wire(spec: ProviderSpec, base_url: str | None, timeout: float) -> Wire:
    """The wire for a spec. The SDKs read their keys from the environment themselves."""
    has_key = bool(os.environ.get(KEY_ENV[spec.provider]))
    if spec.provider == "openai":
        url = base_url or os.environ.get(BASE_URL_ENV["openai"]) or None
        if not (has_key or url):
            raise SpecError(f"{spec.spec}: set {KEY_ENV['openai']} (or --vault-base-url)")
        # A local OpenAI-compatible server usually needs no key; the SDK wants one anyway.
        return OpenAIWire(None if has_key else "not-needed", url, timeout)
    if not has_key:
        raise SpecError(f"{spec.spec}: set {KEY_ENV['anthropic']}")
    return AnthropicWire(os.environ.get(BASE_URL_ENV["anthropic"]) or None, timeout)


class Unavailable:
    """A model whose client could not be built: every evaluation is an error row."""

    ignores_step_bound = False

    def __init__(self, spec: str, reason: str) -> None:
        self.spec, self.reason = spec, reason

    async def respond(self, request: ModelRequest) -> ModelTurn:
        raise ModelError(self.reason)
