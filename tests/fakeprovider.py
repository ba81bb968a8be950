"""A local model server speaking both wire protocols, scripted per test.

OpenAI chat completions (`POST /v1/chat/completions`, `tool_calls`) and Anthropic
messages (`POST /v1/messages`, `tool_use`), on 127.0.0.1 only, with injectable
latency and faults. Its model is deterministic and obedient: it pays the first e-mail
address of the latest user message the first `$` figure (else $100), then says "Done."

    python -m tests.fakeprovider --port 8765 --latency 1.0     # for benchmarks
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EMAIL = re.compile(r"[\w.+'-]+@[\w-]+(?:\.[\w-]+)+")
DOLLARS = re.compile(r"\$\s?([0-9][0-9,]*(?:\.[0-9]+)?)")

# Faults, applied to the next requests in order ("ok" lets one through untouched):
# "429" / "429:SECONDS" (Retry-After), "500", "timeout" (sleep past the client's
# timeout), "drop" (close the connection without answering), "malformed" (tool-call
# arguments that are not JSON), "blocked" (refuse the input before the model sees it),
# "401" (an authentication error that echoes the key), "400" (a bad request).
FAULTS = ("ok", "429", "500", "timeout", "drop", "malformed", "blocked", "401", "400")
# Replies (`FakeProvider.reply`) are raw bodies answered with a 200, in order, to the
# requests that no fault takes: a duplicate key or a number's exact digits, which a
# dict cannot hold, reach the client as written.


@dataclass
class Script:
    latency: float = 0.0
    faults: deque[str] = field(default_factory=deque)
    timeout_sleep: float = 5.0
    # Request fields this server refuses with a 400, as reasoning models do temperature.
    refuse_fields: set[str] = field(default_factory=set)
    # Appended to every error message: what a server may quote (a URL, say).
    detail: str = ""
    replies: deque[bytes] = field(default_factory=deque)
    # Every request as received, for tests to inspect; a benchmark's server keeps only the
    # count (`keep=False`): thousands of kept bodies made each of its full garbage
    # collections 70-310 ms, a pause in every answer due then.
    requests: list[dict[str, Any]] = field(default_factory=list)
    keep: bool = True
    count: int = 0
    # Wall-clock time (time.time()) of the first request and the last answer since the
    # last `GET /_stats`: what a benchmark needs to leave a run's start-up apart.
    first_at: float | None = None
    last_at: float | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next_fault(self) -> str:
        with self.lock:
            return self.faults.popleft() if self.faults else "ok"

    def next_reply(self) -> bytes | None:
        with self.lock:
            return self.replies.popleft() if self.replies else None

    def record(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> int:
        with self.lock:
            if self.first_at is None:
                self.first_at = time.time()
            self.count += 1
            if self.keep:
                self.requests.append({"path": path, "body": body, "headers": headers})
            return self.count

    def answered(self) -> None:
        with self.lock:
            self.last_at = time.time()

    def window(self) -> dict[str, Any]:
        """The requests so far and the window's times; the window starts again."""
        with self.lock:
            out = {
                "requests": self.count,
                "first_at": self.first_at,
                "last_at": self.last_at,
            }
            self.first_at = self.last_at = None
            return out


def _decide(
    last_user: str, answered: bool, malformed: bool
) -> tuple[str, dict[str, Any] | str | None]:
    """(text, arguments of a transfer_funds call or None)."""
    if answered:
        return "Done.", None
    m = EMAIL.search(last_user)
    if not m:
        return "Who should I pay?", None
    amount = DOLLARS.search(last_user)
    args: dict[str, Any] = {
        "recipient": m.group(0),
        "amount": float(amount.group(1).replace(",", "")) if amount else 100,
    }
    if malformed:
        return "", '{"recipient": "' + m.group(0) + '", "amount": '  # cut off: not JSON
    return "", args


def _id(messages: list[Any]) -> str:
    # Derived from the conversation, so the same request always gets the same answer.
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:12]


def _openai(body: dict[str, Any], malformed: bool) -> dict[str, Any]:
    messages = body["messages"]
    n = _id(messages)
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    answered = any(m["role"] == "tool" for m in messages[last:])
    text, args = _decide(str(messages[last]["content"]), answered, malformed)
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if args is not None:
        arguments = args if isinstance(args, str) else json.dumps(args)
        message["tool_calls"] = [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "transfer_funds", "arguments": arguments},
            }
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1764460800,
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if args is not None else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": len(json.dumps(messages)) // 4,
            "completion_tokens": 12,
            "total_tokens": 0,
        },
    }


def _anthropic(body: dict[str, Any], malformed: bool) -> dict[str, Any]:
    messages = body["messages"]
    n = _id(messages)
    last = max(
        i for i, m in enumerate(messages) if m["role"] == "user" and isinstance(m["content"], str)
    )
    answered = any(
        isinstance(m["content"], list) and any(b.get("type") == "tool_result" for b in m["content"])
        for m in messages[last:]
    )
    text, args = _decide(messages[last]["content"], answered, malformed=False)
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    if args is not None:
        content.append(
            {"type": "tool_use", "id": f"toolu_{n}", "name": "transfer_funds", "input": args}
        )
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": content,
        "stop_reason": "tool_use" if args is not None else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": len(json.dumps(messages)) // 4, "output_tokens": 12},
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body are two writes: with Nagle's algorithm on, the body waits for the
    # client's delayed ACK, 40 ms on every answer (what a real provider does not add).
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(
        self, status: int, payload: dict[str, Any] | bytes, headers: dict[str, str] | None = None
    ) -> None:
        if status >= 400 and isinstance(payload, dict):
            payload["error"]["message"] += self.server.script.detail
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        if self.command == "POST":
            self.server.script.answered()

    def do_GET(self) -> None:
        if self.path != "/_stats":
            self._send(404, b'{"error": "not found"}')
            return
        self._send(200, json.dumps(self.server.script.window()).encode())

    def do_POST(self) -> None:
        script = self.server.script
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        script.record(self.path, body, dict(self.headers))
        fault = script.next_fault()
        if script.latency:
            time.sleep(script.latency)
        anthropic = self.path.endswith("/messages")
        refused = sorted(script.refuse_fields & set(body))
        if refused:
            name = refused[0]
            self._send(
                400,
                _error(
                    anthropic,
                    "invalid_request_error",
                    f"Unsupported parameter: '{name}' is not supported with this model.",
                ),
            )
        elif fault.startswith("429"):
            retry = fault.partition(":")[2] or "0"
            self._send(
                429,
                _error(anthropic, "rate_limit_error", "Rate limit reached"),
                {"retry-after": retry},
            )
        elif fault == "400":
            self._send(400, _error(anthropic, "invalid_request_error", "Bad request"))
        elif fault == "500":
            self._send(500, _error(anthropic, "api_error", "Internal server error"))
        elif fault == "401":
            key = self.headers.get("authorization", "").removeprefix("Bearer ") or self.headers.get(
                "x-api-key", ""
            )
            self._send(
                401, _error(anthropic, "authentication_error", f"Incorrect API key provided: {key}")
            )
        elif fault == "blocked":
            if anthropic:
                self._send(
                    400,
                    _error(
                        True, "invalid_request_error", "Input blocked by content filtering policy"
                    ),
                )
            else:
                err = _error(
                    False,
                    "invalid_request_error",
                    "Invalid prompt: your prompt was flagged as potentially violating our usage policy.",
                )
                err["error"]["code"] = "invalid_prompt"
                self._send(400, err)
        elif fault == "timeout":
            time.sleep(script.timeout_sleep)
            self.close_connection = True
        elif fault == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        elif fault == "ok" and (reply := script.next_reply()) is not None:
            self._send(200, reply)
        else:
            build = _anthropic if anthropic else _openai
            self._send(200, build(body, fault == "malformed"))


def _error(anthropic: bool, kind: str, message: str) -> dict[str, Any]:
    if anthropic:
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512
    script: Script


class FakeProvider:
    """Start with `with FakeProvider() as fake:`; `fake.url` is the base URL."""

    def __init__(self, latency: float = 0.0, port: int = 0, keep: bool = True) -> None:
        self.script = Script(latency=latency, keep=keep)
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.script = self.script
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.script.requests

    def fail(self, *faults: str) -> None:
        assert all(f.partition(":")[0] in FAULTS for f in faults), faults
        self.script.faults.extend(faults)

    def reply(self, *bodies: bytes | str) -> None:
        """Answer the next requests with these raw bodies (after any queued fault)."""
        self.script.replies.extend(b if isinstance(b, bytes) else b.encode() for b in bodies)

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    # Run from the command line for a benchmark: nothing reads the requests back.
    with FakeProvider(args.latency, args.port, keep=False) as fake:
        print(fake.url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
