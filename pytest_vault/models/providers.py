"""Real models: OpenAI (and any OpenAI-compatible server) and Anthropic, through their
official SDKs, with retries, rate limits, the response cache and the spend cap.

Specs: `openai:MODEL` (chat completions with tools; `--vault-base-url` or
`OPENAI_BASE_URL` for a compatible server) and `anthropic:MODEL` (messages with tool
use). Keys come from `OPENAI_API_KEY` / `ANTHROPIC_API_KEY` and never leave the client:
they are not part of cache keys, and error messages are scrubbed of them (and of URLs'
userinfo and query strings).

Both providers' raw response bodies are read here, strictly: an envelope that is not
exactly what we read is a malformed response (an error row), and a tool call's input
that a dict would not say exactly (a key twice, digits a float drops) stays the model's
own JSON text, which the guard reads strictly.

The SDKs are imported here only, and this module only when a provider spec is used.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import importlib.util
import inspect
import json
import math
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Annotated, Any, Generic, Protocol, TypeVar
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError

from pytest_vault.core.json import Pairs, exact_or_text, read_lossless
from pytest_vault.core.text import KEY_ENV, safe, scrub_url, shown
from pytest_vault.harness.agent import (
    InputBlocked,
    ModelError,
    ModelRequest,
    ModelTurn,
    NotRun,
    ToolCall,
    Usage,
)
from pytest_vault.models.bill import BILL, Source
from pytest_vault.models.cache import (
    Answer,
    Blocked,
    CachedCall,
    CachedUsage,
    Entry,
    ResponseCache,
    Stopped,
    Tokens,
    Unstored,
    cache_key,
)
from pytest_vault.models.ratelimit import RateLimiter, Spend, usd
from pytest_vault.models.specs import BASE_URL_ENV, ProviderSpec, SpecError

# Sampling settings each API has that the suite leaves at the provider's default.
NOT_NORMALIZED = {
    "openai": ["top_p", "presence_penalty", "frequency_penalty", "seed", "reasoning_effort"],
    "anthropic": ["top_p", "top_k", "thinking"],
}
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
    # The endpoint, printable and recordable: no userinfo, no query string.
    base_url: str
    # What tells endpoints apart in cache keys (a digest, never printed).
    endpoint: str
    # The base URL's credentials in every form a server may echo back: never printed.
    secrets: tuple[str, ...]

    def body(self, request: ModelRequest, model: str) -> dict[str, Any]: ...
    def settings(self, body: dict[str, Any]) -> dict[str, str]: ...
    async def send(self, body: dict[str, Any]) -> bytes: ...
    def read(self, raw: bytes) -> tuple[ModelTurn, str | None]: ...
    def adapt(self, exc: Exception) -> bool: ...
    def blocked(self, exc: Exception) -> bool: ...
    async def close(self) -> None: ...


def _endpoint(url: str) -> str:
    """A digest of the whole base URL but its userinfo: a query parameter (`api-version`)
    tells deployments apart, credentials never change an answer (and a password hashed
    with a request rebuilt from the corpus could be guessed)."""
    parts = urlsplit(url)
    whole = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    return hashlib.sha256(whole.encode("utf-8", "backslashreplace")).hexdigest()


def url_secrets(url: str) -> tuple[str, ...]:
    """What of a base URL may be a secret, as a server may quote it: its userinfo (the
    password and the user, as written and percent-decoded, `user:password`, and its
    base64, the Basic auth header httpx sends) and its query string (each value, and
    each `name=value`: a server's "Invalid URL (POST /v1/chat?key=...)" has no scheme,
    so `scrub_urls` does not see it)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    forms: set[str] = set()
    if userinfo:
        forms = {userinfo, unquote(userinfo)}
        for form in list(forms):
            forms.add(base64.b64encode(form.encode("utf-8", "backslashreplace")).decode())
            forms.update(form.split(":", 1))
    if parts.query:
        for query in {parts.query, unquote(parts.query)}:
            forms.add(query)
            for pair in query.split("&"):
                forms.add(pair)
                forms.add(pair.partition("=")[2])
    # Longest first, so a part never leaves the rest of a longer form behind.
    return tuple(sorted((f for f in forms if len(f) >= 3), key=len, reverse=True))


# `json.dumps(body, separators=(",", ":"), allow_nan=False)`, its encoder built once.
_WIRE = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def _encode(body: dict[str, Any]) -> bytes:
    """The request body as ASCII JSON: exact, and a lone surrogate in a conversation
    travels as the `\\uXXXX` escape it arrived as (the SDKs' UTF-8 encoder would raise)."""
    return _WIRE.encode(body).encode("ascii")


def _arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def _arguments_object(arguments: Any) -> dict[str, Any]:
    """Arguments as the object Anthropic's `tool_use.input` must be: raw text read as
    JSON would read it (the last of two keys, the nearest float), or, when no JSON
    object can say it (not JSON, NaN, a number beyond a float), the text itself."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments, parse_float=_finite, parse_constant=_finite)
    except (TypeError, ValueError, RecursionError):
        value = None
    return value if isinstance(value, dict) else {"_unparsed": str(arguments)}


# -- reading response bodies strictly -------------------------------------------------------
#
# A body is read losslessly (`core.json.read_lossless`): the envelope around the answer
# must be unambiguous; a tool call's input that is not becomes the model's own JSON text,
# which the guard reads strictly and denies.


class _Envelope(BaseModel):
    # Only the fields read, each of its exact type; whatever else a provider sends is
    # its own business.
    model_config = ConfigDict(strict=True, extra="ignore")


_E = TypeVar("_E", bound=_Envelope)


def _read(provider: str, raw: bytes, envelope: type[_E]) -> _E:
    """The body, decoded strictly and checked against its envelope, or a ModelError."""
    try:
        return envelope.model_validate(read_lossless(raw.decode("utf-8")))
    except UnicodeDecodeError as exc:
        problem = f"body: not valid UTF-8 (byte {exc.start})"
    except json.JSONDecodeError as exc:
        problem = f"body: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
    except RecursionError:
        problem = "body: nested too deeply"
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        found = first["input"]
        if type(found) is Pairs:
            problem = f"{where}: duplicate key {found.duplicate()!r}"
        else:
            said = _PROBLEMS.get(first["type"]) or first["msg"].removeprefix("Value error, ")
            problem = f"{where}: {said}"
    raise ModelError(f"{provider}: malformed response: {shown(problem)}")


# pydantic's words for the problems an envelope can have, said plainly.
_PROBLEMS = {
    "missing": "missing",
    "model_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "too_short": "must not be empty",
}


# Usage is required, not read as 0 when missing: an answer that does not say what it
# used cannot be counted against the spend cap. Every API targeted reports it.
class _OpenAIUsage(_Envelope):
    prompt_tokens: Tokens
    completion_tokens: Tokens


class _OpenAIFunction(_Envelope):
    name: str
    arguments: str  # the model's own JSON text, kept as is: the guard reads it strictly


class _OpenAICall(_Envelope):
    id: str
    function: _OpenAIFunction


class _OpenAIMessage(_Envelope):
    content: str | None = None
    tool_calls: list[_OpenAICall] | None = None


class _OpenAIChoice(_Envelope):
    message: _OpenAIMessage
    finish_reason: str | None = None  # some OpenAI-compatible servers leave it out


class _OpenAIBody(_Envelope):
    choices: Annotated[list[_OpenAIChoice], Field(min_length=1)]
    usage: _OpenAIUsage


class _AnthropicText(_Envelope):
    text: str


class _AnthropicToolUse(_Envelope):
    id: str
    name: str
    input: Annotated[dict[str, Any] | str, PlainValidator(exact_or_text)]


_BLOCKS: dict[str, type[_AnthropicText | _AnthropicToolUse]] = {
    "text": _AnthropicText,
    "tool_use": _AnthropicToolUse,
}


def _block(value: Any) -> _AnthropicText | _AnthropicToolUse | None:
    if type(value) is not dict or type(value.get("type")) is not str:
        raise ValueError('must be a JSON object with a string "type"')
    read = _BLOCKS.get(value["type"])
    # Other blocks (thinking, say) are not part of the answer read here.
    return None if read is None else read.model_validate(value)


_AnthropicBlock = Annotated[_AnthropicText | _AnthropicToolUse | None, PlainValidator(_block)]


class _AnthropicUsage(_Envelope):
    input_tokens: Tokens
    output_tokens: Tokens


class _AnthropicBody(_Envelope):
    content: list[_AnthropicBlock]
    usage: _AnthropicUsage
    stop_reason: str | None = None


# Why an answer ended, when that makes it no answer: a provider's output filter, or a
# cut at the token limit before the model called a tool. Scored, it would pass for the
# model declining to pay; it is an error row instead.
_FILTERED = frozenset({"content_filter", "refusal"})
_CUT = frozenset({"length", "max_tokens", "model_context_window_exceeded"})


def stopped(field: str, reason: str | None, turn: ModelTurn) -> str | None:
    """The problem with an answer that ended this way, or None."""
    if reason in _FILTERED or (reason in _CUT and not turn.tool_calls):
        return f"the answer was stopped ({field} {shown(repr(reason))})"
    return None


def aiohttp_client(sdk: Any, timeout: float) -> Any:
    """The SDK's own aiohttp transport, which both SDKs recommend for concurrency, or
    None (the SDK's default transport) when aiohttp or the SDK's support for it is
    missing. At 256 requests in flight, httpx's connection pool scans every connection
    for every request: about half the CPU of a request here (bench_providers.py)."""
    make = getattr(sdk, "DefaultAioHttpClient", None)
    if make is None or importlib.util.find_spec("aiohttp") is None:
        return None
    try:
        return make(timeout=timeout)
    except RuntimeError:  # the SDK's placeholder when its aiohttp glue cannot load
        return None


class OpenAIWire:
    provider = "openai"

    def __init__(self, key: str | None, base_url: str | None, timeout: float) -> None:
        import openai

        self._openai = openai
        # key=None: the SDK reads OPENAI_API_KEY itself.
        self.client = openai.AsyncOpenAI(
            api_key=key,
            base_url=base_url,
            max_retries=0,
            timeout=timeout,
            http_client=aiohttp_client(openai, timeout),
        )
        url = str(self.client.base_url)
        self.base_url, self.endpoint = scrub_url(url), _endpoint(url)
        self.secrets = url_secrets(url)
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
        body: dict[str, Any] = {"model": model, "messages": messages}
        if request.tools:  # none (an attacker, a judge): OpenAI refuses an empty list
            body["tools"] = [{"type": "function", "function": t} for t in request.tools]
        return body | {"temperature": request.temperature, "max_tokens": request.max_tokens}

    def settings(self, body: dict[str, Any]) -> dict[str, str]:
        names = {"max_tokens": self._max_tokens_name, "temperature": "temperature"}
        return {k: names[k] for k in REQUESTED if k in body and k not in self._drop}

    async def send(self, body: dict[str, Any]) -> bytes:
        sent = {k: v for k, v in body.items() if k not in self._drop}
        if "max_tokens" in sent and self._max_tokens_name != "max_tokens":
            sent[self._max_tokens_name] = sent.pop("max_tokens")
        # The body is already in wire format: the SDK's documented `post` sends it as is
        # (auth, base URL and status errors still the SDK's), where `create` would walk
        # every message through its TypedDict transforms, the largest CPU cost per
        # request here. `cast_to=bytes` hands back the raw body, read strictly below.
        return await self.client.post("/chat/completions", cast_to=bytes, content=_encode(sent))

    def read(self, raw: bytes) -> tuple[ModelTurn, str | None]:
        """The turn, and what stopped it if it is no answer (`stopped`)."""
        body = _read(self.provider, raw, _OpenAIBody)
        message = body.choices[0].message
        turn = ModelTurn(
            text=message.content or "",
            tool_calls=tuple(
                ToolCall(c.id, c.function.name, c.function.arguments)
                for c in message.tool_calls or ()
            ),
            usage=Usage(body.usage.prompt_tokens, body.usage.completion_tokens),
        )
        return turn, stopped("finish_reason", body.choices[0].finish_reason, turn)

    def adapt(self, exc: Exception) -> bool:
        """Learn from a 400 that a decode setting is not accepted; True to resend."""
        if not isinstance(exc, self._openai.BadRequestError):
            return False
        text = said(exc).lower()
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
        text = said(exc).lower()
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
        self.client = anthropic.AsyncAnthropic(
            base_url=base_url,
            max_retries=0,
            timeout=timeout,
            http_client=aiohttp_client(anthropic, timeout),
        )
        url = str(self.client.base_url)
        self.base_url, self.endpoint = scrub_url(url), _endpoint(url)
        self.secrets = url_secrets(url)
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
        body: dict[str, Any] = {"model": model, "system": request.system, "messages": messages}
        if request.tools:  # none (an attacker, a judge): no tools key, as for OpenAI
            body["tools"] = [
                {
                    "name": t["name"],
                    "description": t["description"],
                    "input_schema": t["parameters"],
                }
                for t in request.tools
            ]
        body["max_tokens"] = request.max_tokens
        if self._temperature:
            body["temperature"] = request.temperature
        return body

    def settings(self, body: dict[str, Any]) -> dict[str, str]:
        return {k: k for k in REQUESTED if k in body}

    async def send(self, body: dict[str, Any]) -> bytes:
        # Wire-format body through the SDK's documented `post` (see OpenAIWire.send).
        return await self.client.post("/v1/messages", cast_to=bytes, content=_encode(body))

    def read(self, raw: bytes) -> tuple[ModelTurn, str | None]:
        body = _read(self.provider, raw, _AnthropicBody)
        blocks = body.content
        turn = ModelTurn(
            text="".join(b.text for b in blocks if isinstance(b, _AnthropicText)),
            tool_calls=tuple(
                ToolCall(b.id, b.name, b.input) for b in blocks if isinstance(b, _AnthropicToolUse)
            ),
            usage=Usage(body.usage.input_tokens, body.usage.output_tokens),
        )
        return turn, stopped("stop_reason", body.stop_reason, turn)

    def adapt(self, exc: Exception) -> bool:
        return False

    def blocked(self, exc: Exception) -> bool:
        return (
            isinstance(exc, self._anthropic.BadRequestError)
            and "content filtering" in said(exc).lower()
        )

    async def close(self) -> None:
        await self.client.close()


# -- retries -------------------------------------------------------------------------------
#
# Ours, with the SDKs' own turned off (`max_retries=0`), and not tenacity's: an SDK retries
# inside one `post`, out of our sight, so its tries would pass neither this provider's rate
# limiter nor the spend cap, its Retry-After would hold that one request instead of the
# provider's others, and nothing would count the tries (progress lines, "after N tries").
# Nor do the SDKs honour a long Retry-After alike: openai-python gives up beyond 120 s,
# anthropic's waits. Tenacity could drive the loop, but each of these would remain a
# callback of ours, and the whole longer than the loop in `ProviderModel._send`.


def said(exc: Exception) -> str:
    """What the provider said, from the error body itself: each SDK words `str(exc)` its
    own way, and rewords it between releases (anthropic 2.17 did), so recorded errors and
    cached refusals would change with the SDK installed."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    if isinstance(body, str) and body.strip():
        return body
    return str(exc)


def _status(exc: Exception) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def retry_after(exc: Exception) -> float | None:
    """Seconds the provider asked us to wait (retry-after-ms, or Retry-After in seconds or
    as an HTTP date), however long; None when it said nothing we can wait for."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        if (ms := headers.get("retry-after-ms")) is not None:
            seconds = float(ms) / 1000
        elif (value := headers.get("retry-after")) is None:
            return None
        else:
            try:
                seconds = float(value)
            except ValueError:
                seconds = parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        return None
    # "inf" would hold every request to the provider for ever; NaN is no number.
    return max(0.0, seconds) if math.isfinite(seconds) else None


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
    """Live counters for progress lines (this process). Tokens and money are the
    ledger's (`Spend`)."""

    requests: int = 0
    cache_hits: int = 0
    retries: int = 0
    # Answers paid for that the cache could not store, and one reason (the least, one line).
    unstored: int = 0
    unstored_reason: str | None = None


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
        self._flight = SingleFlight[tuple[Entry, Source]]()
        self.decode = Decode()

    def request_key(self, body: dict[str, Any], trial: int = 1) -> str:
        """The cache key of a request body. What determines the answer: provider,
        endpoint, model, messages, tools, decode settings as requested. Never the key.
        Trial k > 1 of an evaluation is keyed apart (asked anew); trial 1's key is the
        key a run without trials makes, so recorded caches replay."""
        what: dict[str, Any] = {
            "provider": self.wire.provider,
            "endpoint": self.wire.endpoint,
            "body": body,
        }
        if trial > 1:
            what["trial"] = trial
        return cache_key(what)

    async def respond(self, request: ModelRequest) -> ModelTurn:
        bill = BILL.get()
        if bill is not None and bill.model is not self:
            bill = None  # a judge's or an attacker's answers: never the row's
        if bill is not None:
            bill.ours = True
        body = self.wire.body(request, self._model)
        key = self.request_key(body, request.trial)
        estimate = len(json.dumps(body, default=str)) // 4 + request.max_tokens
        # One answer per distinct request: evaluations that ask the same thing (the two
        # architectures' identical first step, say) share it, in this process through
        # the single flight and across processes through the cache's lock. The asking
        # runs in the task of the evaluation that asked: billed there, reused by the rest.
        (answer, source), led = await self._flight.run(
            key, lambda: self._answer(body, key, estimate)
        )
        if not led:
            source = "reused"
        self.decode.note(answer.decode)
        if not isinstance(answer, Blocked):  # a refusal: no answer, nothing billed
            used = answer.usage
            if source != "billed":  # `_ask` counted the billed one as it arrived
                self._spend.save(self.spec, used.input_tokens, used.output_tokens)
            if bill is not None:
                bill.note(source, used.input_tokens, used.output_tokens)
        return _turn(answer)

    async def _answer(self, body: dict[str, Any], key: str, estimate: int) -> tuple[Entry, Source]:
        if self._cache is None:
            return await self._ask(body, key, estimate), "billed"
        try:
            answer, got = await self._cache.fill(key, lambda: self._ask(body, key, estimate))
        except Unstored as exc:
            stats = self._stats
            stats.unstored += 1
            # One reason for them all, whichever answer came first: the least.
            why = safe(str(exc))
            stats.unstored_reason = min(why, stats.unstored_reason or why)
            return exc.entry, "billed"
        if got == "asked":
            return answer, "billed"
        self._stats.cache_hits += 1
        # Waited for another process asking it now, or stored by this one earlier in the
        # run: reused. Else an earlier run's (or, under xdist, another worker's): cached.
        return answer, "reused" if got == "waited" or self._spend.asked(key) else "cached"

    async def _ask(self, body: dict[str, Any], key: str, estimate: int) -> Entry:
        try:
            turn, problem = await self._send(body, estimate)
        except InputBlocked as exc:
            # A refusal is an answer too: kept with what the provider said, so it is never
            # paid for twice.
            error = str(exc) or "input blocked by the provider"
            return Blocked(
                key=key, input_blocked=True, error=error, decode=self.wire.settings(body)
            )
        # Billed, whatever the answer: counted once, here, as it arrives (its key kept
        # only where a later cache hit must tell this run's answers from earlier ones).
        asked = key if self._cache is not None else ""
        self._spend.add(self.spec, turn.usage.input_tokens, turn.usage.output_tokens, asked)
        usage = CachedUsage(
            input_tokens=turn.usage.input_tokens, output_tokens=turn.usage.output_tokens
        )
        decode = self.wire.settings(body)  # after the send: it learned what was refused
        if problem is not None:
            # No answer to score, but paid for: kept, so that it is never paid for twice
            # and a rerun replays the same error row.
            return Stopped(
                key=key, stopped=f"{self.wire.provider}: {problem}", usage=usage, decode=decode
            )
        return Answer(
            key=key,
            text=turn.text,
            tool_calls=[
                CachedCall(id=c.id, name=c.name, arguments=c.arguments) for c in turn.tool_calls
            ],
            usage=usage,
            latency_s=turn.latency_s,
            decode=decode,
        )

    async def _send(self, body: dict[str, Any], estimate: int) -> tuple[ModelTurn, str | None]:
        tries = 0
        while True:
            # Before every try, retries included: others may have spent the rest meanwhile.
            if self._spend.exhausted:
                raise NotRun(
                    f"spend cap {usd(self._spend.cap_usd)} reached before this evaluation finished"
                )
            # Every try, retries included, spends from the request and token budgets.
            await self._limiter.acquire(estimate)
            self._stats.requests += 1
            started = time.perf_counter()
            try:
                raw = await self.wire.send(body)
            except Exception as exc:  # noqa: BLE001 - sorted below; nothing passes silently
                self._limiter.settle(estimate, 0)
                if self.wire.blocked(exc):
                    raise InputBlocked(self._clean(exc)) from None
                if self.wire.adapt(exc):
                    continue  # a decode setting was refused: resend without it (not a try)
                tries += 1
                if not retryable(exc) or tries >= self._retry.tries:
                    raise ModelError(
                        f"{self.wire.provider}: {self._describe(exc)} (after {tries} tries)"
                    ) from None
                asked = retry_after(exc)
                if asked:
                    self._limiter.pause(asked)  # holds the provider's other requests too
                self._stats.retries += 1
                await self._sleep(self._retry.delay(tries, asked))
                continue
            turn, problem = self.wire.read(raw)  # a malformed body is a ModelError: no retry
            self._limiter.settle(estimate, turn.usage.input_tokens + turn.usage.output_tokens)
            latency = round(time.perf_counter() - started, 6)
            return ModelTurn(turn.text, turn.tool_calls, turn.usage, latency), problem

    def _describe(self, exc: Exception) -> str:
        status = _status(exc)
        head = f"HTTP {status}" if status is not None else type(exc).__name__
        return f"{head}: {self._clean(exc)}"

    def _clean(self, exc: Exception) -> str:
        # Keys first, then URLs' userinfo and query strings (an SDK error can quote the
        # request URL), then the cut: a cut must not leave half a key.
        return _safe(" ".join(said(exc).split()), self.wire.secrets)[:300]

    async def close(self) -> None:
        await self.wire.close()


def _safe(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Provider text bound for rows, reports or logs: `safe`, and none of the base URL's
    secrets (in any form a server echoes them)."""
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
    return safe(text)


_R = TypeVar("_R")


class SingleFlight(Generic[_R]):
    """Concurrent calls with one key share one result (and one exception); each learns
    whether it led (its call ran) or waited for another's."""

    def __init__(self) -> None:
        self._flights: dict[str, asyncio.Future[_R]] = {}

    async def run(self, key: str, call: Callable[[], Awaitable[_R]]) -> tuple[_R, bool]:
        flight = self._flights.get(key)
        if flight is not None:
            return await asyncio.shield(flight), False
        flight = self._flights[key] = asyncio.get_running_loop().create_future()
        try:
            result = await call()
        except BaseException as exc:
            flight.set_exception(exc)
            flight.exception()  # retrieved: waiters re-raise it, nobody logs it as lost
            raise
        else:
            flight.set_result(result)
            return result, True
        finally:
            del self._flights[key]


def _turn(entry: Entry) -> ModelTurn:
    if isinstance(entry, Blocked):
        raise InputBlocked(entry.error)
    if isinstance(entry, Stopped):
        raise ModelError(entry.stopped)
    return ModelTurn(
        text=entry.text,
        tool_calls=tuple(ToolCall(c.id, c.name, c.arguments) for c in entry.tool_calls),
        usage=Usage(entry.usage.input_tokens, entry.usage.output_tokens),
        latency_s=entry.latency_s,
    )


def make_wire(
    spec: ProviderSpec, base_url: str | None, timeout: float, *, keyless: bool = False
) -> Wire:
    """The wire for a spec. The SDKs read their keys from the environment themselves.
    `keyless`: a wire that is never sent on (`--vault-plan` keys requests with it), so
    it needs no key: a key is part of no request body and of no cache key."""
    has_key = bool(os.environ.get(KEY_ENV[spec.provider]))
    if spec.provider == "openai":
        url = base_url or os.environ.get(BASE_URL_ENV["openai"]) or None
        if not (has_key or url or keyless):
            raise SpecError(f"{spec.spec}: set {KEY_ENV['openai']} (or --vault-base-url)")
        # A local OpenAI-compatible server usually needs no key; the SDK wants one anyway.
        return OpenAIWire(None if has_key else "not-needed", url, timeout)
    if not (has_key or keyless):
        raise SpecError(f"{spec.spec}: set {KEY_ENV['anthropic']}")
    return AnthropicWire(os.environ.get(BASE_URL_ENV["anthropic"]) or None, timeout)


class Unavailable:
    """A model whose client could not be built: every evaluation is an error row."""

    ignores_step_bound = False

    def __init__(self, spec: str, reason: str) -> None:
        self.spec, self.reason = spec, _safe(reason)

    async def respond(self, request: ModelRequest) -> ModelTurn:
        raise ModelError(self.reason)
