"""Cache keys are pinned: a response cached by an earlier run must still be found.

The digests below were computed by the code that wrote the caches in use; a change to
how a key is built (not just what it costs) shows here first. Also: the answer stored
without validation is exactly the one a strict read of its file gives back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pytest_vault.harness.agent import Message, ModelRequest, ToolCall
from pytest_vault.models.cache import Answer, ResponseCache, cache_key, read_entry
from pytest_vault.models.providers import ProviderModel, Retry, Stats, make_wire
from pytest_vault.models.ratelimit import RateLimiter, Spend
from pytest_vault.models.specs import parse_spec

from ..fakeprovider import FakeProvider
from .test_providers import LEVELS, case

TOOL = {
    "name": "transfer_funds",
    "description": "Send money.",
    "parameters": {
        "type": "object",
        "properties": {"recipient": {"type": "string"}, "amount": {"type": "number"}},
        "required": ["recipient", "amount"],
    },
}


def request() -> ModelRequest:
    # Non-ASCII, a lone surrogate, a float, a tool call and its result: every shape.
    return ModelRequest(
        "You are a bank agent.",
        (
            Message("user", "Pay $5 to a@b.test \u00e9 \ud800"),
            Message("assistant", "", (ToolCall("c1", "transfer_funds", {"amount": 5.0}),)),
            Message("tool", "ok", tool_call_id="c1"),
        ),
        (TOOL,),
        0.0,
        512,
        case("Pay $5 to a@b.test"),
        LEVELS[2],
    )


def provider(spec_text: str, url: str, cache: ResponseCache | None = None) -> ProviderModel:
    spec = parse_spec(spec_text)
    return ProviderModel(
        spec,
        make_wire(spec, url, 5.0),
        cache=cache,
        limiter=RateLimiter(),
        spend=Spend(),
        retry=Retry(tries=1),
        stats=Stats(),
    )


def test_cache_key_of_a_material_is_pinned() -> None:
    material = {"body": {"b": [1, 2.5, "\u00e9\ud800"], "a": None}, "z": True}
    assert cache_key(material) == (
        "2da3b5ece1d332571f46b5c0dc4d22219690565433ad1c40ebe234bc444e26ad"
    )


def test_openai_request_key_is_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = provider("openai:gpt-x", "http://127.0.0.1:9/v1")
    assert model.request_key(model.wire.body(request(), "gpt-x")) == (
        "7d558ef010c82f34bd422c8706b615fb933ad22db5030eface9c097c46570093"
    )


def test_anthropic_request_key_is_pinned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    model = provider("anthropic:claude-x", "unused")
    body = model.wire.body(request(), "claude-x")
    body.pop("temperature", None)  # sent or not by the SDK installed: pinned without it
    assert model.request_key(body) == (
        "5939e226e39559a015a78f51420f692f06733d3186cbb454ccf46c944f490fd4"
    )


def test_a_stored_answer_reads_back_equal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cache = ResponseCache(tmp_path)
    with FakeProvider() as fake:
        model = provider("openai:gpt-x", fake.url + "/v1", cache)
        req = ModelRequest(
            "sys",
            (Message("user", "Pay $7 to x@y.test"),),
            (TOOL,),
            0.0,
            64,
            case("Pay $7"),
            LEVELS[2],
        )
        body = model.wire.body(req, "gpt-x")
        key = model.request_key(body)

        async def ask() -> None:
            try:
                await model.respond(req)
            finally:
                await model.close()

        asyncio.run(ask())
        assert len(fake.requests) == 1
    stored = (tmp_path / "responses" / key[:2] / f"{key}.json").read_bytes()
    entry = read_entry(stored, key)  # strict: the schema and the key
    assert isinstance(entry, Answer) and entry == cache.get(key)
    dumped = entry.model_dump()
    assert dumped == {
        "key": key,
        "text": "",
        "tool_calls": [
            {
                "id": "call_c18c8f2c95f6",
                "name": "transfer_funds",
                "arguments": '{"recipient": "x@y.test", "amount": 7.0}',
            }
        ],
        "usage": {"input_tokens": 22, "output_tokens": 12},
        "latency_s": entry.latency_s,
        "decode": {"max_tokens": "max_tokens", "temperature": "temperature"},
    }
