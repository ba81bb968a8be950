"""The simulated bank as an MCP server (`vault-mcp`), for agents written in any language.

One bank per process: one account and one guard ledger, so the daily cap holds across
calls and sessions as a real bank's would. It serves the four tools with the schemas
the suite uses (`harness.agent.TOOLS`), over stdio or streamable HTTP, with the guard in
front in the `guarded` architecture, and keeps a JSON Lines log of every call.

`--records FILE` gives the bank a system of record (`load_records`: a JSON object of
`orders`, `payout_destinations`, `scheduled` and `account`, as a case's `environment`
holds them), and each kind of record adds its tools (`refund_payment`, `create_payout`,
`schedule_transaction` and `update_scheduled_transaction`, `update_account`), judged
under their OAP packs as the suite's bank judges them: the facts a pack needs (an
order's customer, total and refunds; a destination's type and age) are the bank's
records, read through the guard's `Facts` callback at decision time, never the call's
arguments. The records live as long as the server: a refund counts against its order
in every later call and session. Without the file, a tool no record backs is not
served, and the server answers exactly as before.

Nothing executes that is not logged: a money-moving call's `decision` record is written
before the money moves, and its `outcome` record after. A decision record that cannot be
written stops the transfer (the client is told nothing executed, the balance is as it
was); an outcome record that cannot be written after the transfer executed leaves the
client told the truth (it executed, with a note) and stderr told what the log lacks.

Two things stand between the client's bytes and the bank, and neither may change them:

* The SDK's typed tools validate arguments against a model built from the function's
  signature, which coerces (`"250"` becomes 250). `RawTool` is a schema-declared tool
  whose handler gets `arguments` exactly as the client sent them.
* The SDK parses each JSON-RPC message before any tool sees it, and lets the last of a
  duplicate key win, rounds numbers to floats and turns `1e400` into infinity. So every
  message is first read strictly at the transport boundary (`screen`), where the raw
  text still exists; one that reads differently strictly is refused there. So is one
  that is not a JSON-RPC 2.0 request, notification or response, which the SDK would
  drop unanswered (an `id` of `1.5` reads to it as a notification): JSON-RPC's answer,
  `-32600` with `id: null`, logged as refused, over both transports.

Works with `mcp>=1.20,<3`: `MCPServer` in 2.x, `FastMCP` in 1.x, chosen at import.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, NoReturn, cast

import anyio
import mcp.types as mcp_types
import uvicorn
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import TypeAdapter, ValidationError

from pytest_vault.core.errors import FileError, describe, error_loc, reason
from pytest_vault.core.json import line_at, read_json_file
from pytest_vault.core.text import shown, valid_utf8
from pytest_vault.corpus.model import RECORD_TOOLS as RECORDS
from pytest_vault.corpus.model import Environment
from pytest_vault.guard.engine import (
    INVALID_CONTEXT,
    TRANSFER_TOOL,
    Decision,
    Transfer,
    Unreadable,
    parse_json_object,
)
from pytest_vault.guard.folder import LEVELS, SHIPPED
from pytest_vault.harness.agent import RECORD_TOOLS, TOOLS
from pytest_vault.harness.bank import (
    ARCHITECTURES,
    Architecture,
    Bank,
    CallRecord,
    Clock,
    NotRecorded,
    Scene,
    utc_clock,
)
from pytest_vault.harness.levels import Level, load_levels

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as SdkServer
    from mcp.server.mcpserver.tools import Tool as SdkTool
    from mcp.server.mcpserver.utilities.func_metadata import func_metadata

    MCP2 = True
except ImportError:  # mcp 1.x: the same high-level server, named FastMCP
    from mcp.server.fastmcp import FastMCP as SdkServer  # type: ignore[attr-defined,no-redef,unused-ignore]
    from mcp.server.fastmcp.tools import Tool as SdkTool  # type: ignore[import-not-found,no-redef,unused-ignore]
    from mcp.server.fastmcp.utilities.func_metadata import (  # type: ignore[import-not-found,no-redef,unused-ignore]
        func_metadata,
    )

    MCP2 = False

NAME = "pytest-vault bank"
# JSON-RPC "Invalid Request": the message cannot be read as one unambiguous request.
REFUSED = -32600
# JSON-RPC "Parse error": the message is not JSON at all.
PARSE_ERROR = -32700
# The body of one HTTP request the strict reader will hold in memory.
MAX_BODY = 4 * 1024 * 1024
# Nesting the strict reader accepts: far more than any tool call needs, and below what
# the SDKs' own parsers take (past that they drop a request unanswered, id and all).
MAX_DEPTH = 64
_MESSAGE: TypeAdapter[Any] = TypeAdapter(mcp_types.JSONRPCMessage)
# What the bank has to tell an operator (an outcome the log lost) goes to stderr, as one
# escaped line (`OneLine`), with the SDK's own warnings.
_STDERR = logging.getLogger("vault-mcp")


def _result(text: str, is_error: bool, *notes: str) -> mcp_types.CallToolResult:
    # By alias: 1.x names the field `isError`, 2.x `is_error`; both read `isError`.
    content = [{"type": "text", "text": t} for t in (text, *notes)]
    return mcp_types.CallToolResult.model_validate({"content": content, "isError": is_error})


def _no_arguments() -> None:
    """Stands in for a signature: `RawTool` validates nothing against one."""


class RawTool(SdkTool):
    """A schema-declared tool whose handler gets the raw `arguments` of the call.

    The SDK's `Tool.run` validates (and so coerces) them with the pydantic model of a
    function signature; this `run` hands them on untouched.
    """

    async def run(
        self, arguments: dict[str, Any], context: Any = None, convert_result: bool = False
    ) -> Any:
        return await self.fn(arguments)


def raw_tool(
    schema: dict[str, Any], handler: Callable[[dict[str, Any]], Awaitable[Any]]
) -> RawTool:
    """An MCP tool declaring `schema` (OpenAI function form), answered by `handler`."""
    return RawTool(
        fn=handler,
        name=schema["name"],
        title=None,
        description=schema["description"],
        parameters=json.loads(json.dumps(schema["parameters"])),  # a copy the SDK may keep
        fn_metadata=func_metadata(_no_arguments, structured_output=False),
        is_async=True,
        context_kwarg=None,
        annotations=None,
    )


class _BankSdkServer(SdkServer):  # type: ignore[misc,valid-type,unused-ignore]
    """The SDK's server, but a call to a tool it does not serve goes to the bank, which
    answers it and logs it like any call, where the SDK would answer "Unknown tool"
    unlogged: a caller probing for tools leaves a record. `call_tool` is the public
    method the SDK's own request handler calls (both major versions)."""

    unknown: Callable[[str, Any], mcp_types.CallToolResult]
    names: tuple[str, ...]  # the tools it serves: the bank's

    async def call_tool(self, name: str, arguments: Any, *args: Any, **kwargs: Any) -> Any:
        if name not in self.names:
            return self.unknown(name, arguments)
        return await super().call_tool(name, arguments, *args, **kwargs)


def _new_sdk_server(
    tools: list[Any], host: str, unknown: Callable[[str, Any], mcp_types.CallToolResult]
) -> Any:
    names = tuple(tool.name for tool in tools)
    server: Any
    if MCP2:
        server = _BankSdkServer(NAME, tools=tools, log_level="WARNING")
    else:  # 1.x sets its DNS-rebinding protection for the host when it is built.
        fastmcp: Any = _BankSdkServer
        server = fastmcp(NAME, tools=tools, log_level="WARNING", host=host)
    server.unknown, server.names = unknown, names
    return server


def _lowlevel(server: Any) -> Any:
    # The protocol server beneath: the SDK's own in-memory transport reaches it the same way.
    return server._lowlevel_server if MCP2 else server._mcp_server


def _http_app(server: Any, host: str) -> ASGIApp:
    app = server.streamable_http_app(host=host) if MCP2 else server.streamable_http_app()
    return cast("ASGIApp", app)


class Refusal(NamedTuple):
    """A message the strict reader refused: why, and what can be answered."""

    reason: str
    id: str | int | None  # the request answered; None: answered with `id: null`
    method: str | None
    tool: str | None
    code: int = REFUSED


def _inexact(value: Any) -> str | None:
    """What the SDK's parser would read differently (or not at all) in a parsed message."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        kind = type(node)
        if kind is dict or kind is list:
            if depth == MAX_DEPTH:
                return f"nested more than {MAX_DEPTH} levels"
            children = [*node, *node.values()] if kind is dict else node
            stack.extend((child, depth + 1) for child in children)
        elif kind is Decimal and Decimal(repr(float(node))) != node:
            # The SDK reads a float: 500.0000000000000001 would arrive as 500.0.
            return f"number {node} cannot be read exactly"
        elif kind is str and not valid_utf8(node):
            return f"lone surrogate in {node!r}"
    return None


def _unique_only(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    return {k: v for k, v in pairs if keys.count(k) == 1}


def _kind(value: Any) -> str:
    """A JSON value as a refusal names it: `null`, `true`, `number 1.5`, `an object`."""
    if value is None or type(value) is bool:
        return json.dumps(value)
    if type(value) in (int, float, Decimal):
        return f"number {value}"
    if type(value) is str:
        return json.dumps(value if len(value) <= 40 else f"{value[:40]}...")
    return "an object" if type(value) is dict else "an array"


def _got(message: dict[str, Any], key: str) -> str:
    return _kind(message[key]) if key in message else "nothing"


def _envelope(message: dict[str, Any]) -> str | None:
    """Why `message` is not one JSON-RPC 2.0 request, notification or response; None if
    it is. Stricter than JSON-RPC in two places, as MCP is: `params` and `result` are
    objects. And an `id` is a string or an integer: `1.0` is a number JSON-RPC allows, but
    the SDK would not answer it (it reads as a notification), so it is refused too."""
    if message.get("jsonrpc") != "2.0" or type(message["jsonrpc"]) is not str:
        return f'"jsonrpc" must be "2.0", got {_got(message, "jsonrpc")}'
    if "id" in message and type(message["id"]) not in (str, int):
        # Only an error response may say `id: null` (it answers what had no id to read).
        if not (message["id"] is None and "error" in message and "method" not in message):
            return f'"id" must be a string or an integer, got {_got(message, "id")}'
    if "method" in message:
        if type(message["method"]) is not str:
            return f'"method" must be a string, got {_got(message, "method")}'
        if "result" in message or "error" in message:
            return "a request or notification carries no result or error"
        if "params" in message and type(message["params"]) is not dict:
            return f'"params" must be an object, got {_got(message, "params")}'
        return None
    if ("result" in message) == ("error" in message):
        if "result" in message:
            return "a response carries a result or an error, not both"
        return 'no "method" (a request or notification) and no "result" or "error" (a response)'
    if "id" not in message:
        return 'a response needs the "id" of the request it answers'
    if "result" in message:
        return (
            None
            if type(message["result"]) is dict
            else (f'"result" must be an object, got {_got(message, "result")}')
        )
    error = message["error"]
    if type(error) is not dict:
        return f'"error" must be an object, got {_got(message, "error")}'
    if type(error.get("code")) is not int:
        return f'"error.code" must be an integer, got {_got(error, "code")}'
    if type(error.get("message")) is not str:
        return f'"error.message" must be a string, got {_got(error, "message")}'
    return None


# The strict reader's words for a top-level array: in JSON-RPC, a batch.
_BATCH = "expected a JSON object, got list"


def screen(data: bytes) -> Refusal | None:
    """None if `data` is one JSON-RPC 2.0 message the SDK will read exactly as the
    strict reader does.

    Else why not, with the parts of the message that are unambiguous (a duplicated
    `id` is not), so that a request can still be answered and the refusal logged.
    """
    try:
        message = parse_json_object(data)
    except Unreadable as exc:
        problem = str(exc)
        if problem == _BATCH:  # MCP (2025-06-18 on) takes one message at a time
            problem = "a JSON-RPC batch: send one message at a time"
    else:
        inexact = _inexact(message)
        if inexact is None:
            invalid = _envelope(message)
            if invalid is None:
                return None
            # Not a valid request, so no id to answer (JSON-RPC): `id: null`.
            return Refusal(shown(invalid), None, *_names(message))
        problem = inexact
    try:  # only to find whom to answer: keys given twice are left out
        head = json.loads(data.decode(errors="replace"), object_pairs_hook=_unique_only)
    except (ValueError, RecursionError):
        head = {}
    head = head if type(head) is dict else {}
    request = "method" in head and "id" in head and _envelope(head) is None
    code = PARSE_ERROR if problem.startswith("not valid JSON") else REFUSED
    return Refusal(shown(problem), head["id"] if request else None, *_names(head), code)


def _names(message: dict[str, Any]) -> tuple[str | None, str | None]:
    """The method and, for a call, the tool: what the log says of a refused message."""
    method, params = message.get("method"), message.get("params")
    tool = params.get("name") if type(params) is dict else None
    return method if type(method) is str else None, tool if type(tool) is str else None


def _error(refusal: Refusal) -> dict[str, Any]:
    error = {"code": refusal.code, "message": f"Refused: {refusal.reason}"}
    return {"jsonrpc": "2.0", "id": refusal.id, "error": error}


class CallLog:
    """The JSON Lines log: each record written whole, and flushed, before the call goes on.

    A record that cannot be written raises `NotRecorded`, naming the log and why. A record
    cut short (a device that filled up mid-line) is ended with a newline before the next
    one, so that one torn line never takes the record after it along.
    """

    def __init__(self, stream: IO[bytes], name: str) -> None:
        self._stream = stream
        self.name = name
        self._torn = False

    def write(self, line: bytes) -> None:
        data = (b"\n" if self._torn else b"") + line + b"\n"
        done = 0
        try:
            while done < len(data):
                wrote = self._stream.write(data[done:])
                if not wrote:  # None or 0: a stream that takes no more would loop forever
                    raise OSError(errno.EIO, "the log took no bytes")
                done += wrote
            self._stream.flush()
        except (OSError, ValueError) as exc:  # ValueError: the stream was closed
            if done:
                self._torn = done > len(data) - len(line) - 1  # any byte of this record
            raise NotRecorded(f"{self.name}: cannot write: {reason(exc)}") from None
        self._torn = False


class BankServer:
    """One bank behind an MCP server: one account and one ledger for its whole life.

    `log_name` names the log in what is said when it cannot be written (`--log 'x'`).
    `clock` is the bank's (see `Bank`): every record's `time` is its reading of the call.
    `records` is the bank's system of record (`load_records`): each kind adds its tools,
    and the guard's packs read their facts from it.
    """

    def __init__(
        self,
        level: Level,
        architecture: Architecture,
        log: IO[bytes],
        host: str = "127.0.0.1",
        *,
        log_name: str = "the call log",
        clock: Clock = utc_clock,
        records: Environment | None = None,
    ) -> None:
        self.level = level
        self.architecture = architecture
        self._log = CallLog(log, shown(log_name))
        self.bank = Bank(
            level.passport,
            architecture,
            clock=clock,
            journal=self._decided,
            scene=None if records is None else Scene(records),
        )
        schemas = {schema["name"]: schema for schema in TOOLS} | RECORD_TOOLS
        tools = [raw_tool(schemas[name], self._handler(name)) for name in self.bank.tool_names]
        # The call in progress: the bank is synchronous, so calls are one at a time, and
        # its journal (which is not told the tool) names the one being decided.
        self._calling = TRANSFER_TOOL
        self.mcp = _new_sdk_server(tools, host, self.call)

    def start(self, serving: str) -> None:
        """The log's first record, before any call: a log that cannot be written is
        found now (`NotRecorded`), not by the first client."""
        self._write({"record": "start", "serving": serving}, self.bank.tick())

    def _handler(self, name: str) -> Callable[[dict[str, Any]], Awaitable[Any]]:
        async def handle(arguments: dict[str, Any]) -> mcp_types.CallToolResult:
            return self.call(name, arguments)

        return handle

    def call(self, name: str, arguments: Any) -> mcp_types.CallToolResult:
        """One tool call, as the bank answers it; logged. The bank is synchronous, so
        concurrent calls are judged and recorded one at a time against one ledger."""
        self._calling = name
        result = self.bank.call(name, arguments)
        # The ledger keeps what the caps need; the record goes to the log, not to memory.
        record = self.bank.log.pop()
        try:
            self._record(record)
        except NotRecorded as lost:
            if not record.executed:  # nothing is answered that the log does not have
                _STDERR.error("a %r call was refused, unexecuted: %s", record.name, lost)
                return _result(f"Refused: {lost}; nothing executed", True)
            # It executed: the client is told so (an error would have it pay again), and
            # stderr gets what the log lacks: its decision record has no outcome after it.
            what = "transfer" if record.name == TRANSFER_TOOL else f"{record.name} call"
            _STDERR.error(
                "a %s executed but its outcome record could not be written (%s): %s",
                what,
                lost,
                result.content,
            )
            note = f"This {what} executed; its outcome record could not be written ({lost})."
            return _result(result.content, result.is_error, note)
        return _result(result.content, result.is_error)

    def _decided(self, arguments: Any, transfer: Transfer, decision: Decision | None) -> None:
        """The bank's journal: a money-moving call about to execute (`transfer`: its
        movement to its counterparty). Raises NotRecorded, and so stops it, when the
        record cannot be written."""
        self._write(
            {
                "record": "decision",
                "tool": self._calling,
                "arguments": arguments,
                "transfer": transfer.to_dict(),
                # Guarded: enforced. Model alone: what the guard would have decided.
                "decision": None if decision is None else _decision(decision),
            },
            self.bank.now,
        )

    def refused(self, refusal: Refusal, data: bytes) -> None:
        """Log a message the strict reader refused, if it was (or may have been) a call.
        It is answered whatever the log says: a refusal executes nothing."""
        if refusal.method not in (None, "tools/call"):
            return
        try:
            self._write(
                {
                    "record": "outcome",
                    "tool": refusal.tool,
                    "arguments": None,
                    "message": data.decode(errors="backslashreplace"),
                    "executed": False,
                    "decision": {"allow": False, "codes": [INVALID_CONTEXT]},
                    "result": f"Refused: {refusal.reason}",
                    "is_error": True,
                },
                self.bank.tick(),
            )
        except (NotRecorded, ValueError) as exc:  # ValueError: the clock's
            _STDERR.error("a refused message could not be logged (%s)", exc)

    def _record(self, record: CallRecord) -> None:
        entry = record.to_dict()
        self._write(
            {
                "record": "outcome",
                "tool": entry.pop("name"),
                "arguments": entry.pop("arguments"),
                "executed": entry.pop("executed"),
                # Guarded: enforced. Model alone: what the guard would have decided.
                # None for the read-only tools, which no guard judges.
                "decision": entry.pop("decision", None),
                "result": entry.pop("result"),
                "is_error": entry.pop("is_error"),
                **entry,
            },
            self.bank.now,
        )

    def _write(self, fields: dict[str, Any], instant: datetime) -> None:
        line = {
            "time": instant.isoformat(),
            "level": self.level.number,
            "architecture": self.architecture,
            **fields,
        }
        try:
            # ASCII JSON: exact (a lone surrogate stays its \u escape), valid UTF-8, and
            # safe in a terminal tailing the log (no raw bidi override or control).
            text = json.dumps(line, ensure_ascii=True, allow_nan=False)
        except ValueError:  # an in-process client's float("inf"): no JSON for it
            line["arguments"] = "<not JSON: a non-finite number>"
            text = json.dumps(line, ensure_ascii=True, allow_nan=False)
        self._log.write(text.encode())


def _decision(decision: Decision) -> dict[str, Any]:
    return {"allow": decision.allow, "codes": list(decision.codes)}


# -- stdio ------------------------------------------------------------------------------


class _StrictLines:
    """stdin as the SDK's stdio transport reads it, but each line screened first.

    A refused request is answered on the transport's own write stream, so its single
    writer keeps the framing; the SDK never parses the line.
    """

    def __init__(self, server: BankServer, source: anyio.AsyncFile[bytes]) -> None:
        self._server = server
        self._source = source
        self._ready = anyio.Event()
        self._answers: Any = None

    def answer_on(self, write_stream: Any) -> None:
        self._answers = write_stream
        self._ready.set()

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._source:
            if not line.strip():
                continue
            refusal = screen(line)
            if refusal is None:
                yield line.decode()
                continue
            self._server.refused(refusal, line.rstrip(b"\r\n"))
            # Every refusal is answered, `id: null` when no request can be named: silence
            # would leave the client waiting.
            await self._ready.wait()
            await self._answers.send(SessionMessage(_MESSAGE.validate_python(_error(refusal))))


async def serve_stdio(server: BankServer) -> None:
    lines = _StrictLines(server, anyio.wrap_file(sys.stdin.buffer))
    lowlevel = _lowlevel(server.mcp)
    # stdin is ours (screened); stdout stays the SDK's, which keeps it for the protocol.
    async with stdio_server(stdin=cast("anyio.AsyncFile[str]", lines)) as (read, write):
        lines.answer_on(write)
        await lowlevel.run(read, write, lowlevel.create_initialization_options())


# -- streamable HTTP ----------------------------------------------------------------------


class StrictBody:
    """ASGI middleware: every POSTed body is screened before the SDK reads it.

    A refused body gets a JSON-RPC error (HTTP 400, as the SDK answers a parse error)
    and never reaches the SDK; an accepted one is handed on byte for byte.
    """

    def __init__(self, app: ASGIApp, server: BankServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_BODY:
                too_big = Refusal(f"body larger than {MAX_BODY} bytes", None, None, None)
                await self._answer(send, 413, too_big)
                return
        data = bytes(body)
        refusal = screen(data)
        if refusal is not None:
            self.server.refused(refusal, data)
            await self._answer(send, 400, refusal)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": data, "more_body": False}

        await self.app(scope, replay, send)

    async def _answer(self, send: Send, status: int, refusal: Refusal) -> None:
        body = json.dumps(_error(refusal)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def serve_http(server: BankServer, sock: socket.socket) -> None:
    app = StrictBody(_http_app(server.mcp, sock.getsockname()[0]), server)
    # No log config of uvicorn's own: its records go through the one-line handler too.
    config = uvicorn.Config(app, log_level="warning", lifespan="on", log_config=None)
    await uvicorn.Server(config).serve(sockets=[sock])


def listen(host: str, port: int) -> socket.socket:
    """A listening socket, so that a port in use is one clear error before serving."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


# -- command line -------------------------------------------------------------------------


class OneLine(logging.Formatter):
    """A log record as one escaped line, never a traceback.

    The SDKs log what a peer sent (mcp 1.x: an unknown tool's name, raw, and whole
    pydantic error dumps): on a terminal that is hostile text. The JSON Lines log keeps
    the calls; stderr gets the first line of each warning, escaped.
    """

    def format(self, record: logging.LogRecord) -> str:
        text, _, rest = record.getMessage().partition("\n")
        if record.exc_info is not None and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__})"
        return f"vault-mcp: {record.levelname.lower()}: {shown(text)}{' [...]' if rest else ''}"


def _log_to_stderr() -> None:
    # Before the SDK server is built: its own logging set-up is then a no-op.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLine())
    logging.basicConfig(level=logging.WARNING, handlers=[handler])


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, argparse's exit status: the usage is one `--help` away.
        self.exit(2, f"{self.prog}: error: {shown(message)}\n")


def _number(low: int, high: int) -> Callable[[str], int]:
    def read(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {low} to {high}, got {text!r}")
        return value

    return read


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="vault-mcp",
        description=(
            "The pytest-vault bank as an MCP server: one account, four tools, and the "
            "tools its --records add."
        ),
    )
    p.add_argument("--level", required=True, type=_number(min(LEVELS), max(LEVELS)))
    p.add_argument("--passports", default=str(SHIPPED), metavar="DIR")
    p.add_argument("--arch", choices=ARCHITECTURES, default="guarded")
    p.add_argument(
        "--records",
        metavar="FILE",
        help="the bank's records (JSON: orders, payout_destinations, scheduled, account); "
        "each adds its tools, and the guard reads its facts from them",
    )
    p.add_argument("--log", metavar="FILE", help="JSON Lines, appended (default: stderr)")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--host", help="http only (default 127.0.0.1)")
    p.add_argument("--port", type=_number(1, 65535), help="http only (default 8000)")
    return p


def load_records(path: str | Path) -> Environment:
    """`--records FILE`: the bank's system of record, a JSON object of any of `orders`,
    `payout_destinations`, `scheduled` and `account`, each as a case's `environment`
    holds it (`corpus.model.Environment`), read as strictly as a corpus line. Any problem
    is one `FileError` naming the file, the line and the field."""
    path = Path(path)
    value, text, _ = read_json_file(path, FileError)
    kinds = ", ".join(RECORDS)
    if type(value) is not dict or not value:
        raise FileError(f"{path}:{line_at(text, ())}: (root): expected an object of {kinds}")
    for key in value:
        if key not in RECORDS:  # the environment's texts are a case's, never the bank's
            where = line_at(text, (key,))
            raise FileError(f"{path}:{where}: {shown(key)}: unknown key (records are {kinds})")
    try:
        return Environment.model_validate(value)
    except ValidationError as exc:
        where = line_at(text, error_loc(exc))
        raise FileError(f"{path}:{where}: {describe(exc, Environment)}") from None


def open_log(path: str) -> IO[bytes]:
    """The `--log` file, appended, unbuffered: a record the device refuses is an error
    now, never left in a buffer to land later, after the call was answered as refused."""
    return open(path, "ab", buffering=0)


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if args.transport == "stdio" and (args.host is not None or args.port is not None):
        cli.error("--host and --port need --transport http")
    try:
        level = load_levels(args.passports)[args.level]
        records = None if args.records is None else load_records(args.records)
    except FileError as exc:
        cli.error(str(exc))
    host = "127.0.0.1" if args.host is None else args.host
    sock = None
    if args.transport == "http":
        try:
            sock = listen(host, 8000 if args.port is None else args.port)
        except (OSError, ValueError) as exc:
            cli.error(f"cannot listen on {host!r}: {reason(exc)}")
    # stderr beneath its buffer, as `open_log` opens a file: a record the device refuses
    # must not wait in a buffer to be written after the call was answered as refused.
    stderr = getattr(sys.stderr.buffer, "raw", sys.stderr.buffer)
    try:
        log = stderr if args.log is None else open_log(args.log)
    except (OSError, ValueError) as exc:
        cli.error(f"--log {args.log!r}: cannot open: {reason(exc)}")
    _log_to_stderr()
    name = "the log (stderr)" if args.log is None else f"--log {args.log!r}"
    server = BankServer(level, args.arch, log, host, log_name=name, records=records)
    where = "stdio" if sock is None else f"http://{host}:{sock.getsockname()[1]}/mcp"
    try:
        server.start(where)
    except NotRecorded as exc:
        cli.error(str(exc))
    sys.stderr.write(f"vault-mcp: level {level.number}, {args.arch}, serving on {where}\n")
    sys.stderr.flush()
    try:
        if sock is None:
            anyio.run(serve_stdio, server)
        else:
            anyio.run(serve_http, server, sock)
    except KeyboardInterrupt:
        return 130
    finally:
        if log is not stderr:
            log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
