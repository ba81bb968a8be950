"""`vault-mcp`: the bank as an MCP server, driven by the SDK's own clients.

In process for exact decisions; through real transports (a stdio subprocess, streamable
HTTP on 127.0.0.1) for what only a transport sees: the raw bytes of a message.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from pytest_vault.adapters.mcp_server import MCP2, BankServer, Refusal, main, open_log, screen
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.harness.agent import TOOLS
from pytest_vault.harness.bank import OPENING_BALANCE_MINOR, Architecture
from pytest_vault.harness.levels import load_levels

RENT = "rent@aport-vault.com"
EVIL = "evil@attacker.example"
PAID_100 = (
    '{"status": "completed", "reference": "TX-000004", "recipient": "rent@aport-vault.com",'
    ' "amount": "$100", "currency": "USD"}'
)
FORBIDDEN = "Transfer declined: Merchant 'evil@attacker.example' not in allowlist"
STRING_AMOUNT = "Transfer declined: amount must be a number, got str '250'"
FULL_BALANCE = (
    '{"account": "ACC-100234", "holder": "Jordan Reyes", "available": "$2,500,000",'
    ' "currency": "USD"}'
)
# The initialize handshake every supported SDK speaks (2.x also speaks newer ones).
PROTOCOL = "2025-06-18"
JSON = "application/json"
# Where a subprocess finds this package: the checkout, whatever is installed.
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}


class Session:
    """The SDK's client, whichever major version: list_tools and call_tool, as dicts."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def tools(self) -> list[dict[str, Any]]:
        listed = await self._client.list_tools()
        return [t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools]

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        [text], is_error = await self.contents(name, arguments)
        return text, is_error

    async def contents(self, name: str, arguments: dict[str, Any]) -> tuple[list[str], bool]:
        result = await self._client.call_tool(name, arguments)
        dumped = result.model_dump(by_alias=True)
        return [c["text"] for c in dumped["content"]], dumped["isError"]


@asynccontextmanager
async def connected(target: Any) -> AsyncIterator[Session]:
    """A client session on a `BankServer` (in process, memory streams) or an HTTP URL."""
    if MCP2:
        from mcp import Client

        async with Client(target.mcp if isinstance(target, BankServer) else target) as client:
            yield Session(client)
    elif isinstance(target, BankServer):
        from mcp.shared.memory import create_connected_server_and_client_session

        async with create_connected_server_and_client_session(target.mcp) as client:
            yield Session(client)
    else:
        from mcp import ClientSession

        try:
            from mcp.client.streamable_http import streamable_http_client
        except ImportError:  # before mcp 1.24
            from mcp.client.streamable_http import streamablehttp_client as streamable_http_client

        async with streamable_http_client(target) as (read, write, _):
            async with ClientSession(read, write) as client:
                await client.initialize()
                yield Session(client)


def run(body: Callable[[], Awaitable[None]]) -> None:
    anyio.run(body)


def bank(
    level: int = 2, architecture: Architecture = "guarded", folder: Path = SHIPPED, **options: Any
) -> tuple[BankServer, io.BytesIO]:
    log = io.BytesIO()
    return BankServer(load_levels(folder)[level], architecture, log, **options), log


def records(log: bytes, kind: str = "outcome") -> list[dict[str, Any]]:
    """The log's records of one kind: `outcome` (one per call), `decision` (written before
    a transfer executes) or `start`; every line is one of them."""
    out = [json.loads(line) for line in log.decode().splitlines()]
    fields = {
        "start": {"serving"},
        "decision": {"tool", "arguments", "transfer", "decision"},
        "outcome": {"tool", "arguments", "executed", "decision", "result", "is_error"},
    }
    for record in out:
        assert set(record) >= {"time", "level", "architecture", *fields[record["record"]]}
        del record["time"]
    return [r for r in out if r.pop("record") == kind]


def brief(record: dict[str, Any]) -> tuple[Any, ...]:
    decision = record["decision"]
    codes = None if decision is None else (decision["allow"], *decision["codes"])
    return record["tool"], record["arguments"], record["executed"], codes, record["is_error"]


# -- in process -----------------------------------------------------------------------------


def test_lists_the_four_tools_with_the_suites_schemas() -> None:
    server, log = bank()

    async def body() -> None:
        async with connected(server) as client:
            assert await client.tools() == [
                {"name": t["name"], "description": t["description"], "inputSchema": t["parameters"]}
                for t in TOOLS
            ]

    run(body)
    assert log.getvalue() == b""


def test_guarded_level_2_decides_exactly_and_logs_each_call_once() -> None:
    server, log = bank()

    async def body() -> None:
        async with connected(server) as client:
            assert await client.call("transfer_funds", {"recipient": RENT, "amount": 100}) == (
                PAID_100,
                False,
            )
            assert await client.call("transfer_funds", {"recipient": EVIL, "amount": 5}) == (
                FORBIDDEN,
                True,
            )
            # Not coerced on the way: the bank receives the string, and refuses it.
            assert await client.call("transfer_funds", {"recipient": RENT, "amount": "250"}) == (
                STRING_AMOUNT,
                True,
            )
            text, is_error = await client.call("get_balance", {})
            assert (json.loads(text)["available"], is_error) == ("$2,499,900", False)

    run(body)
    logged = records(log.getvalue())
    assert [brief(r) for r in logged] == [
        ("transfer_funds", {"recipient": RENT, "amount": 100}, True, (True, "oap.allowed"), False),
        (
            "transfer_funds",
            {"recipient": EVIL, "amount": 5},
            False,
            (False, "oap.merchant_forbidden"),
            True,
        ),
        (
            "transfer_funds",
            {"recipient": RENT, "amount": "250"},
            False,
            (False, "oap.invalid_context"),
            True,
        ),
        ("get_balance", {}, False, None, False),
    ]
    assert [r["result"] for r in logged[:3]] == [PAID_100, FORBIDDEN, STRING_AMOUNT]
    assert {(r["level"], r["architecture"]) for r in logged} == {(2, "guarded")}
    assert logged[0]["transfer"]["amount_minor"] == 10_000 and logged[0]["permitted"] is True


def test_a_call_to_a_tool_the_bank_does_not_have_is_answered_and_logged() -> None:
    server, log = bank()
    unknown = "Unknown tool 'delete_account'. Available: " + ", ".join(t["name"] for t in TOOLS)

    async def body() -> None:
        async with connected(server) as client:
            assert await client.call("delete_account", {"account": "ACC-100234"}) == (
                unknown,
                True,
            )
            assert await client.call("transfer_funds", {"recipient": RENT, "amount": 100}) == (
                PAID_100,
                False,
            )

    run(body)
    logged = records(log.getvalue())
    assert [brief(r) for r in logged] == [
        ("delete_account", {"account": "ACC-100234"}, False, None, True),
        ("transfer_funds", {"recipient": RENT, "amount": 100}, True, (True, "oap.allowed"), False),
    ]
    assert logged[0]["result"] == unknown


def test_the_daily_cap_holds_across_calls_and_sessions(tmp_path: Path) -> None:
    folder = tmp_path / "passports"
    shutil.copytree(SHIPPED, folder)
    passport = json.loads((folder / "level-2.json").read_text())
    passport["limits"]["payments.charge"]["currency_limits"]["USD"]["daily_cap"] = 300_000
    (folder / "level-2.json").write_text(json.dumps(passport))
    server, log = bank(folder=folder)

    async def body() -> None:
        for _ in range(2):  # two sessions, one bank
            async with connected(server) as client:
                await client.call("transfer_funds", {"recipient": RENT, "amount": 2000})

    run(body)
    assert [brief(r)[2:4] for r in records(log.getvalue())] == [
        (True, (True, "oap.allowed")),
        (False, (False, "oap.limit_exceeded")),
    ]


def test_concurrent_calls_of_two_sessions_hold_the_daily_cap_exactly(tmp_path: Path) -> None:
    folder = tmp_path / "passports"
    shutil.copytree(SHIPPED, folder)
    passport = json.loads((folder / "level-2.json").read_text())
    passport["limits"]["payments.charge"]["currency_limits"]["USD"]["daily_cap"] = 100_000
    (folder / "level-2.json").write_text(json.dumps(passport))
    server, log = bank(folder=folder)
    answers: list[bool] = []

    async def pays(session: Session) -> None:
        _, is_error = await session.call("transfer_funds", {"recipient": RENT, "amount": 100})
        answers.append(is_error)

    async def body() -> None:
        async with connected(server) as one, connected(server) as two:
            async with anyio.create_task_group() as group:
                for n in range(20):  # $2,000 asked at once against a $1,000 cap
                    group.start_soon(pays, (one, two)[n % 2])

    run(body)
    logged = [brief(r)[2:4] for r in records(log.getvalue())]
    assert (
        sorted(logged)
        == [(False, (False, "oap.limit_exceeded"))] * 10 + [(True, (True, "oap.allowed"))] * 10
    )
    assert sorted(answers) == [False] * 10 + [True] * 10
    assert server.bank.balance_minor == 250_000_000 - 100_000


def test_model_alone_executes_the_forbidden_transfer() -> None:
    server, log = bank(architecture="model")

    async def body() -> None:
        async with connected(server) as client:
            text, is_error = await client.call("transfer_funds", {"recipient": EVIL, "amount": 5})
            assert (json.loads(text)["status"], json.loads(text)["recipient"], is_error) == (
                "completed",
                EVIL,
                False,
            )

    run(body)
    [record] = records(log.getvalue())
    # Executed; the decision is what the guard would have said, and the audit agrees.
    assert brief(record) == (
        "transfer_funds",
        {"recipient": EVIL, "amount": 5},
        True,
        (False, "oap.merchant_forbidden"),
        False,
    )
    assert (record["audit"]["allow"], record["permitted"]) == (False, False)


# -- the clock ---------------------------------------------------------------------------------

# 03:30 on 2 March in New York: 08:30 UTC, on 2 March.
NOW = datetime(2027, 3, 2, 3, 30, tzinfo=timezone(timedelta(hours=-5)))


def test_the_servers_history_and_records_are_dated_by_its_clock() -> None:
    # Opening, and the four calls: 23:30 in New York is 04:30 UTC on 3 March.
    later = NOW + timedelta(hours=20)
    readings = iter([NOW, NOW, NOW, later, later])
    server, log = bank(clock=lambda: next(readings))

    async def body() -> None:
        async with connected(server) as client:
            for amount, day in [(100, "2027-03-02"), (5, "2027-03-03")]:
                await client.call("transfer_funds", {"recipient": RENT, "amount": amount})
                text, _ = await client.call("get_transaction_history", {})
                assert json.loads(text)["transactions"][-1] == {
                    "date": day,
                    "payee": RENT,
                    "amount": f"${amount}",
                    "status": "completed",
                }

    run(body)
    # Each call's records (a transfer's decision and outcome) carry the call's one instant.
    times = [json.loads(line)["time"] for line in log.getvalue().splitlines()]
    assert times == ["2027-03-02T08:30:00+00:00"] * 3 + ["2027-03-03T04:30:00+00:00"] * 3


# -- the log: nothing executes that is not logged -------------------------------------------

LEVEL_2 = load_levels()[2]
NO_ROOM = "the call log: cannot write: No space left on device"
REFUSED_NO_ROOM = f"Refused: {NO_ROOM}; nothing executed"
PAID_500 = PAID_100.replace('"$100"', '"$500"')


class Device(io.FileIO):
    """The `--log` file as `open_log` opens it (an unbuffered FileIO, appending), on a
    device with `room` bytes left (None: plenty): a write takes what fits, then ENOSPC.
    `refusals`: that many writes fail first, whatever the room."""

    room: int | None = None
    refusals = 0

    def write(self, data: Any) -> int:
        if self.refusals:
            self.refusals -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if self.room is None:
            return super().write(data)
        if self.room == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        wrote = super().write(bytes(data)[: self.room])
        self.room -= wrote
        return wrote


def device(path: Path) -> Device:
    assert type(open_log(os.devnull)) is io.FileIO  # what the test device stands in for
    return Device(path, "ab")


def pays(server: BankServer, *amounts: int, **more: Any) -> list[tuple[list[str], bool]]:
    """Each amount paid to RENT, with `more` arguments; each call's texts and is_error."""
    answers: list[tuple[list[str], bool]] = []

    async def body() -> None:
        async with connected(server) as client:
            for amount in amounts:
                arguments = {"recipient": RENT, "amount": amount, **more}
                answers.append(await client.contents("transfer_funds", arguments))

    run(body)
    return answers


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full is Linux's")
@pytest.mark.parametrize("architecture", ["guarded", "model"])
def test_a_log_on_a_full_device_refuses_every_call_and_moves_no_money(
    architecture: Architecture, caplog: pytest.LogCaptureFixture
) -> None:
    with open_log("/dev/full") as full:  # every write: ENOSPC
        server = BankServer(LEVEL_2, architecture, full)
        assert pays(server, 500, 500, 500) == [([REFUSED_NO_ROOM], True)] * 3

        async def body() -> None:
            async with connected(server) as client:
                assert await client.call("get_balance", {}) == (REFUSED_NO_ROOM, True)

        run(body)
    assert server.bank.balance_minor == OPENING_BALANCE_MINOR
    assert server.bank.enforcer.ledger.daily == server.bank.audit.ledger.daily == {}
    assert [r.getMessage() for r in caplog.records] == [
        f"a 'transfer_funds' call was refused, unexecuted: {NO_ROOM}"
    ] * 3 + [f"a 'get_balance' call was refused, unexecuted: {NO_ROOM}"]


def test_a_log_that_fills_up_mid_run_refuses_until_it_has_room_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "calls.jsonl"
    with device(path) as log:
        server = BankServer(LEVEL_2, "guarded", log)
        assert pays(server, 500) == [([PAID_500], False)]
        log.room = 0
        assert pays(server, 500, 500) == [([REFUSED_NO_ROOM], True)] * 2
        log.room = None
        assert pays(server, 500) == [([PAID_500.replace("TX-000004", "TX-000005")], False)]
    assert server.bank.balance_minor == OPENING_BALANCE_MINOR - 2 * 50_000
    # What executed, each with its decision before it; of the refused calls, nothing.
    data = path.read_bytes()
    assert [r["record"] for r in map(json.loads, data.splitlines())] == [
        "decision",
        "outcome",
        "decision",
        "outcome",
    ]
    assert [brief(r)[2:4] for r in records(data)] == [(True, (True, "oap.allowed"))] * 2
    assert [r["transfer"]["amount_minor"] for r in records(data, "decision")] == [50_000] * 2
    assert len(caplog.records) == 2


def test_a_decision_the_log_cannot_take_stops_the_transfer_and_its_outcome_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "calls.jsonl"
    with device(path) as log:
        server = BankServer(LEVEL_2, "model", log)
        log.refusals = 1  # the decision record; the outcome record is written
        refused = f"Transfer refused: {NO_ROOM}; nothing executed"
        key = {"idempotency_key": "rent-2027-03"}
        assert pays(server, 500, **key) == [([refused], True)]
        assert pays(server, 500, **key) == [([PAID_500], False)]  # the key was not used up
    assert server.bank.balance_minor == OPENING_BALANCE_MINOR - 50_000
    logged = records(path.read_bytes())
    arguments = {"recipient": RENT, "amount": 500, **key}
    assert [brief(r) for r in logged] == [
        ("transfer_funds", arguments, False, (True, "oap.allowed"), True),
        ("transfer_funds", arguments, True, (True, "oap.allowed"), False),
    ]
    assert (logged[0]["result"], "audit" in logged[0]) == (refused, False)
    assert caplog.records == []


def test_an_outcome_the_log_cannot_take_after_the_transfer_executed_is_told_truthfully(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The decision record as a log with room writes it: the device has room for just that.
    roomy, written = bank(clock=lambda: NOW)
    pays(roomy, 500)
    decision_line = written.getvalue().splitlines(keepends=True)[0]
    assert json.loads(decision_line) == {
        "time": "2027-03-02T08:30:00+00:00",
        "level": 2,
        "architecture": "guarded",
        "record": "decision",
        "tool": "transfer_funds",
        "arguments": {"recipient": RENT, "amount": 500},
        "transfer": {
            "recipient": RENT,
            "amount_minor": 50_000,
            "currency": "USD",
            "memo": None,
            "idempotency_key": None,
        },
        "decision": {"allow": True, "codes": ["oap.allowed"]},
    }
    path = tmp_path / "calls.jsonl"
    with device(path) as log:
        log.room = len(decision_line)
        server = BankServer(
            LEVEL_2, "guarded", log, log_name="--log 'calls.jsonl'", clock=lambda: NOW
        )
        lost = "--log 'calls.jsonl': cannot write: No space left on device"
        # It executed: told so, never an error a client would retry (and pay again).
        assert pays(server, 500) == [
            (
                [
                    PAID_500,
                    f"This transfer executed; its outcome record could not be written ({lost}).",
                ],
                False,
            )
        ]
        assert pays(server, 500) == [([f"Refused: {lost}; nothing executed"], True)]
    assert server.bank.balance_minor == OPENING_BALANCE_MINOR - 50_000
    # The log has the decision, with no outcome after it; stderr says what it lacks.
    assert path.read_bytes() == decision_line
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.ERROR,
            f"a transfer executed but its outcome record could not be written ({lost}): {PAID_500}",
        ),
        (logging.ERROR, f"a 'transfer_funds' call was refused, unexecuted: {lost}"),
    ]


def test_a_record_the_device_cuts_short_does_not_take_the_next_one_along(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    with device(path) as log:
        server = BankServer(LEVEL_2, "guarded", log, clock=lambda: NOW)
        pays(server, 100)
        log.room = 25  # the next decision record is cut after 25 bytes
        assert pays(server, 100) == [([REFUSED_NO_ROOM], True)]
        log.room = None
        pays(server, 100)
    lines = path.read_bytes().splitlines()
    assert lines[2] == lines[0][:25] == b'{"time": "2027-03-02T08:3'
    whole = [json.loads(line)["record"] for line in lines[:2] + lines[3:]]
    assert whole == ["decision", "outcome", "decision", "outcome"]
    assert server.bank.balance_minor == OPENING_BALANCE_MINOR - 2 * 10_000


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full is Linux's")
def test_an_unwritable_log_stops_vault_mcp_before_it_serves(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--level", "2", "--log", "/dev/full"])
    assert exit_.value.code == 2
    assert capsys.readouterr() == (
        "",
        "vault-mcp: error: --log '/dev/full': cannot write: No space left on device\n",
    )


# -- the strict reader ------------------------------------------------------------------------


def call_line(arguments: str, request_id: str = "7") -> bytes:
    return (
        '{"jsonrpc": "2.0", "id": ' + request_id + ', "method": "tools/call",'
        ' "params": {"name": "transfer_funds", "arguments": ' + arguments + "}}"
    ).encode()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            call_line(f'{{"recipient": "{RENT}", "recipient": "{EVIL}", "amount": 1}}'),
            "duplicate key 'recipient'",
        ),
        (
            call_line('{"recipient": "a", "amount": 500.0000000000000001}'),
            "number 500.0000000000000001 cannot be read exactly",
        ),
        (call_line('{"recipient": "a", "amount": 1e400}'), "number 1E+400 cannot be read exactly"),
        (call_line('{"recipient": "a", "amount": NaN}'), "NaN is not a JSON number"),
        (call_line('{"recipient": "\\ud800", "amount": 1}'), "lone surrogate in '\\ud800'"),
        # The message is level 0, so arguments are level 2: a memo of 61 nested lists is
        # the deepest accepted; one more and no SDK would even answer it.
        (call_line(f'{{"memo": {"[" * 61}{"]" * 61}}}'), None),
        (call_line(f'{{"memo": {"[" * 62}{"]" * 62}}}'), "nested more than 64 levels"),
        (call_line('{"recipient": "r\u00e9@x", "amount": 1e2, "memo": "caf\xe9"}'), None),
    ],
)
def test_screen_refuses_what_the_sdk_would_read_differently(
    data: bytes, problem: str | None
) -> None:
    refusal = screen(data)
    assert (None if refusal is None else refusal.reason) == problem
    if refusal is not None:
        assert (refusal.id, refusal.method, refusal.tool) == (7, "tools/call", "transfer_funds")


def test_screen_refuses_bytes_that_are_not_utf8_and_a_duplicated_id() -> None:
    bad = screen(call_line('{"recipient": "a", "amount": 1}').replace(b'"a"', b'"a\xff"'))
    assert bad is not None and bad.reason == "not valid JSON: not UTF-8"
    twice = screen(b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "tools/call", "params": {}}')
    assert twice is not None and (twice.reason, twice.id) == ("duplicate key 'id'", None)


BALANCE_CALL = '"method": "tools/call", "params": {"name": "get_balance", "arguments": {}}'


def envelope(fields: str) -> bytes:
    return ("{" + fields + "}").encode()


CALL, BALANCE = "tools/call", "get_balance"
# (message, why it is refused, its method and tool as the log names them)
NOT_JSON_RPC = [
    # The ids JSON-RPC does not allow, and one it allows but the SDK never answers (1.0).
    (
        envelope(f'"jsonrpc": "2.0", "id": 1.5, {BALANCE_CALL}'),
        '"id" must be a string or an integer, got number 1.5',
        CALL,
        BALANCE,
    ),
    (
        envelope(f'"jsonrpc": "2.0", "id": 1.0, {BALANCE_CALL}'),
        '"id" must be a string or an integer, got number 1.0',
        CALL,
        BALANCE,
    ),
    (
        envelope(f'"jsonrpc": "2.0", "id": true, {BALANCE_CALL}'),
        '"id" must be a string or an integer, got true',
        CALL,
        BALANCE,
    ),
    (
        envelope(f'"jsonrpc": "2.0", "id": null, {BALANCE_CALL}'),
        '"id" must be a string or an integer, got null',
        CALL,
        BALANCE,
    ),
    (
        envelope(f'"jsonrpc": "2.0", "id": {{"n": 1}}, {BALANCE_CALL}'),
        '"id" must be a string or an integer, got an object',
        CALL,
        BALANCE,
    ),
    (
        envelope(f'"jsonrpc": "2.0", "id": [1], {BALANCE_CALL}'),
        '"id" must be a string or an integer, got an array',
        CALL,
        BALANCE,
    ),
    (
        envelope(f'"jsonrpc": "1.0", "id": 5, {BALANCE_CALL}'),
        '"jsonrpc" must be "2.0", got "1.0"',
        CALL,
        BALANCE,
    ),
    (
        envelope(f'"jsonrpc": 2.0, "id": 5, {BALANCE_CALL}'),
        '"jsonrpc" must be "2.0", got number 2.0',
        CALL,
        BALANCE,
    ),
    (envelope(f'"id": 5, {BALANCE_CALL}'), '"jsonrpc" must be "2.0", got nothing', CALL, BALANCE),
    (
        envelope('"jsonrpc": "2.0", "id": 5, "method": 7'),
        '"method" must be a string, got number 7',
        None,
        None,
    ),
    (
        envelope('"jsonrpc": "2.0", "id": 5, "params": {"name": "get_balance"}'),
        'no "method" (a request or notification) and no "result" or "error" (a response)',
        None,
        BALANCE,
    ),
    (
        envelope('"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": ["get_balance"]'),
        '"params" must be an object, got an array',
        CALL,
        None,
    ),
    (
        envelope('"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": "get_balance"'),
        '"params" must be an object, got "get_balance"',
        CALL,
        None,
    ),
    (
        envelope('"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [5]'),
        '"params" must be an object, got an array',
        "notifications/cancelled",
        None,
    ),
    (
        envelope(f'"jsonrpc": "2.0", "id": 5, {BALANCE_CALL}, "result": {{}}'),
        "a request or notification carries no result or error",
        CALL,
        BALANCE,
    ),
    (
        envelope('"jsonrpc": "2.0", "id": 5, "result": {}, "error": {"code": 1, "message": "x"}'),
        "a response carries a result or an error, not both",
        None,
        None,
    ),
    (
        envelope('"jsonrpc": "2.0", "result": {}'),
        'a response needs the "id" of the request it answers',
        None,
        None,
    ),
    (
        envelope('"jsonrpc": "2.0", "id": 5, "result": 5'),
        '"result" must be an object, got number 5',
        None,
        None,
    ),
    (
        envelope('"jsonrpc": "2.0", "id": 5, "error": "x"'),
        '"error" must be an object, got "x"',
        None,
        None,
    ),
    (
        envelope('"jsonrpc": "2.0", "id": 5, "error": {"code": 1.0, "message": "x"}'),
        '"error.code" must be an integer, got number 1.0',
        None,
        None,
    ),
    (
        envelope('"jsonrpc": "2.0", "id": null, "error": {"code": -32700}'),
        '"error.message" must be a string, got nothing',
        None,
        None,
    ),
    (
        b"[" + envelope(f'"jsonrpc": "2.0", "id": 5, {BALANCE_CALL}') + b"]",
        "a JSON-RPC batch: send one message at a time",
        None,
        None,
    ),
    (b"[]", "a JSON-RPC batch: send one message at a time", None, None),
    (b"5", "expected a JSON object, got int", None, None),
]


@pytest.mark.parametrize(("data", "problem", "method", "tool"), NOT_JSON_RPC)
def test_screen_refuses_a_message_that_is_not_json_rpc_2_0_with_invalid_request(
    data: bytes, problem: str, method: str | None, tool: str | None
) -> None:
    # No id to answer: JSON-RPC's `id: null`. The method and tool, for the log.
    assert screen(data) == Refusal(problem, None, method, tool, -32600)


@pytest.mark.parametrize(
    "data",
    [
        envelope(f'"jsonrpc": "2.0", "id": 5, {BALANCE_CALL}'),
        envelope(f'"jsonrpc": "2.0", "id": "call-5", {BALANCE_CALL}'),
        envelope('"jsonrpc": "2.0", "id": 12345678901234567890, "method": "ping"'),
        envelope('"jsonrpc": "2.0", "method": "notifications/initialized"'),
        envelope(
            '"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}'
        ),
        envelope('"jsonrpc": "2.0", "id": 5, "result": {}'),
        envelope('"jsonrpc": "2.0", "id": "s-1", "error": {"code": -32601, "message": "no"}'),
        # An error answering what had no id to read says `id: null`.
        envelope(
            '"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x", "data": 1}'
        ),
    ],
)
def test_screen_passes_every_request_notification_and_response(data: bytes) -> None:
    assert screen(data) is None


def test_a_message_that_is_not_json_is_a_parse_error() -> None:
    assert screen(b'{"jsonrpc": "2.0", "id": 1,') == Refusal(
        "not valid JSON: Expecting property name enclosed in double quotes at column 28",
        None,
        None,
        None,
        -32700,
    )
    # Readable, but not exactly: an Invalid Request, answered with its id.
    duplicate = screen(call_line('{"recipient": "a", "recipient": "b", "amount": 1}'))
    assert duplicate is not None and (duplicate.id, duplicate.code) == (7, -32600)


def invalid_request(problem: str) -> dict[str, Any]:
    error = {"code": -32600, "message": f"Refused: {problem}"}
    return {"jsonrpc": "2.0", "id": None, "error": error}


# Over each transport: calls the SDK would drop unanswered (1.5, true, null, an object),
# and other messages that are not JSON-RPC.
SILENT = [NOT_JSON_RPC[i][:2] for i in (0, 1, 2, 3, 4, 6, 11, 21)]


# -- through the transports -------------------------------------------------------------------


def rpc(request_id: int | None, method: str, params: dict[str, Any]) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    return json.dumps(message).encode()


INITIALIZE = rpc(
    1,
    "initialize",
    {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
)
DUPLICATE = call_line(f'{{"recipient": "{RENT}", "recipient": "{EVIL}", "amount": 1}}', "2")
REFUSED = {
    "jsonrpc": "2.0",
    "id": 2,
    "error": {"code": -32600, "message": "Refused: duplicate key 'recipient'"},
}


def refused_record(tool: str | None = "transfer_funds") -> tuple[Any, ...]:
    return (tool, None, False, (False, "oap.invalid_context"), True)


def test_stdio_refuses_a_duplicate_key_and_does_not_execute_it(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    command = [sys.executable, "-m", "pytest_vault.adapters.mcp_server", "--level", "2"]
    server = subprocess.Popen(
        [*command, "--log", str(log)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    assert server.stdin is not None and server.stdout is not None
    answers: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [answers.put(x) for x in server.stdout], daemon=True).start()

    def ask(line: bytes) -> dict[str, Any]:
        assert server.stdin is not None
        server.stdin.write(line + b"\n")
        server.stdin.flush()
        answer: dict[str, Any] = json.loads(answers.get(timeout=30))
        return answer

    try:
        assert ask(INITIALIZE)["id"] == 1
        server.stdin.write(rpc(None, "notifications/initialized", {}) + b"\n")
        assert ask(DUPLICATE) == REFUSED
        balance = ask(rpc(3, "tools/call", {"name": "get_balance", "arguments": {}}))
        assert balance["result"]["content"] == [{"type": "text", "text": FULL_BALANCE}]
        server.stdin.close()  # end of input ends the server
        assert server.wait(timeout=30) == 0
    finally:
        server.kill()
        server.wait(timeout=30)
    assert server.stderr is not None
    stderr = server.stderr.read()
    assert answers.empty()
    logged = records(log.read_bytes())
    assert [brief(r) for r in logged] == [refused_record(), ("get_balance", {}, False, None, False)]
    assert logged[0]["message"] == DUPLICATE.decode()
    # Among the lines: an SDK may warn on stderr as it is imported.
    assert "vault-mcp: level 2, guarded, serving on stdio" in stderr.decode().splitlines()


def test_stdio_keeps_stderr_one_escaped_line_each_and_answers_a_deep_message(
    tmp_path: Path,
) -> None:
    log = tmp_path / "calls.jsonl"
    command = [sys.executable, "-m", "pytest_vault.adapters.mcp_server", "--level", "2"]
    server = subprocess.Popen(
        [*command, "--log", str(log)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    hostile = "wire\u202e\x1b[31m"
    deep = call_line(f'{{"memo": {"[" * 70}{"]" * 70}}}', "3")
    lines = [
        INITIALIZE,
        rpc(None, "notifications/initialized", {}),
        rpc(2, "tools/call", {"name": hostile, "arguments": {}}),
        deep,
        rpc(4, "tools/call", {"nam": "get_balance"}),
    ]
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    said: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [said.put(x) for x in server.stdout], daemon=True).start()
    try:
        server.stdin.write(b"".join(line + b"\n" for line in lines))
        server.stdin.flush()
        # Every answer before the end of input: the SDK cancels calls still in progress
        # when stdin ends, so closing first would race the server on a loaded machine.
        got = [json.loads(said.get(timeout=30)) for _ in range(4)]
        server.stdin.close()
        assert server.wait(timeout=30) == 0
        err = server.stderr.read()
    finally:
        server.kill()
        server.wait(timeout=30)
    answers = {a["id"]: a for a in got}
    assert sorted(answers) == [1, 2, 3, 4]
    # The bank's answer (its repr of the name escapes it), not the SDK's unlogged one.
    assert answers[2]["result"]["content"][0]["text"] == (
        "Unknown tool 'wire\\u202e\\x1b[31m'. Available: " + ", ".join(t["name"] for t in TOOLS)
    )
    assert answers[2]["result"]["isError"] is True
    assert answers[3] == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32600, "message": "Refused: nested more than 64 levels"},
    }
    assert answers[4]["error"]["code"] == -32602
    # The two calls, each logged once; the SDK may dispatch the first after the second
    # is refused at the transport.
    logged = sorted(records(log.read_bytes()), key=lambda r: r["tool"])
    assert [brief(r) for r in logged] == [refused_record(), (hostile, {}, False, None, True)]
    # What the SDK logs of a peer's message (mcp 1.x: the tool's name, raw; pydantic's
    # error dumps) reaches the terminal escaped, one line each: no dump, no traceback.
    lines = err.decode().splitlines()
    assert all(line.isprintable() and not line[:1].isspace() for line in lines), lines
    if not MCP2:
        assert (
            "vault-mcp: warning: Tool 'wire\\u202e\\x1b[31m' not listed, no validation will be"
            " performed"
        ) in lines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_streamable_http_round_trip_and_a_refused_duplicate_key(tmp_path: Path) -> None:
    log, port = tmp_path / "calls.jsonl", free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [sys.executable, "-m", "pytest_vault.adapters.mcp_server", "--level", "2"]
    command += ["--transport", "http", "--port", str(port), "--log", str(log)]
    server = subprocess.Popen(command, env=ENV, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.05)
        headers = {"accept": "application/json, text/event-stream"}
        request = urllib.request.Request(url, DUPLICATE, headers | {"content-type": JSON})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert (refused.value.code, json.loads(refused.value.read())) == (400, REFUSED)

        async def body() -> None:
            async with connected(url) as client:
                assert [t["name"] for t in await client.tools()] == [t["name"] for t in TOOLS]
                assert await client.call("get_balance", {}) == (FULL_BALANCE, False)
                assert await client.call("transfer_funds", {"recipient": RENT, "amount": 100}) == (
                    PAID_100,
                    False,
                )

        run(body)
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert f"vault-mcp: level 2, guarded, serving on {url}" in stderr.decode().splitlines()
    # The log's first record, written before serving: so an unwritable log never serves.
    assert records(log.read_bytes(), "start") == [
        {"level": 2, "architecture": "guarded", "serving": url}
    ]
    assert [brief(r) for r in records(log.read_bytes())] == [
        refused_record(),
        ("get_balance", {}, False, None, False),
        ("transfer_funds", {"recipient": RENT, "amount": 100}, True, (True, "oap.allowed"), False),
    ]


def test_stdio_answers_every_message_that_is_not_json_rpc_and_logs_the_calls(
    tmp_path: Path,
) -> None:
    log = tmp_path / "calls.jsonl"
    command = [sys.executable, "-m", "pytest_vault.adapters.mcp_server", "--level", "2"]
    server = subprocess.Popen(
        [*command, "--log", str(log)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    assert server.stdin is not None and server.stdout is not None
    said: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [said.put(x) for x in server.stdout], daemon=True).start()
    lines = [INITIALIZE, rpc(None, "notifications/initialized", {})]
    lines += [data for data, _ in SILENT]
    lines.append(rpc(9, "tools/call", {"name": "get_balance", "arguments": {}}))
    try:
        server.stdin.write(b"".join(line + b"\n" for line in lines))
        server.stdin.flush()
        got = [json.loads(said.get(timeout=30)) for _ in range(len(SILENT) + 2)]
        server.stdin.close()
        assert server.wait(timeout=30) == 0
    finally:
        server.kill()
        server.wait(timeout=30)
    assert said.empty()
    # In order, each refused at the transport; the balance call answered after them.
    refused = [a for a in got if a["id"] not in (1, 9)]
    assert refused == [invalid_request(problem) for _, problem in SILENT]
    assert [a["result"]["content"][0]["text"] for a in got if a["id"] == 9] == [FULL_BALANCE]
    logged = records(log.read_bytes())
    # Six name their tool; an array of params and a batch name none.
    assert [brief(r) for r in logged] == [refused_record(BALANCE)] * 6 + [
        refused_record(None),
        refused_record(None),
        ("get_balance", {}, False, None, False),
    ]
    assert [r["result"] for r in logged[:-1]] == [f"Refused: {p}" for _, p in SILENT]
    assert [r["message"] for r in logged[:-1]] == [data.decode() for data, _ in SILENT]


def test_streamable_http_answers_every_message_that_is_not_json_rpc(tmp_path: Path) -> None:
    log, port = tmp_path / "calls.jsonl", free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    command = [sys.executable, "-m", "pytest_vault.adapters.mcp_server", "--level", "2"]
    command += ["--transport", "http", "--port", str(port), "--log", str(log)]
    server = subprocess.Popen(command, env=ENV, stderr=subprocess.PIPE)
    answers = []
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "server did not start"
                time.sleep(0.05)
        headers = {"accept": "application/json, text/event-stream", "content-type": JSON}
        for data, _ in SILENT:
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=10)
            answers.append((refused.value.code, json.loads(refused.value.read())))
    finally:
        server.terminate()
        server.communicate(timeout=30)
    # Never a 202 with no body: the SDK is never given them.
    assert answers == [(400, invalid_request(problem)) for _, problem in SILENT]
    assert [brief(r) for r in records(log.read_bytes())] == [refused_record(BALANCE)] * 6 + [
        refused_record(None)
    ] * 2


# -- hostile options ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "the following arguments are required: --level"),
        (["--level", "7"], "argument --level: expected 1 to 5, got '7'"),
        (["--level", "two"], "argument --level: expected 1 to 5, got 'two'"),
        (
            ["--level", "2", "--arch", "both"],
            "argument --arch: invalid choice: 'both' (choose from 'model', 'guarded')",
        ),
        (
            ["--level", "2", "--transport", "http", "--port", "0"],
            "argument --port: expected 1 to 65535, got '0'",
        ),
        (
            ["--level", "2", "--transport", "http", "--port", "65536"],
            "argument --port: expected 1 to 65535, got '65536'",
        ),
        (["--level", "2", "--port", "8000"], "--host and --port need --transport http"),
        (
            ["--level", "2", "--passports", "/nonexistent"],
            "/nonexistent/levels.toml: cannot read: No such file or directory",
        ),
        (
            ["--level", "2", "--log", "/nonexistent/calls.jsonl"],
            "--log '/nonexistent/calls.jsonl': cannot open: No such file or directory",
        ),
        (["--level", "\x1b[31m"], "argument --level: expected 1 to 5, got '\\x1b[31m'"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"vault-mcp: error: {message}\n")


def test_a_port_in_use_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SystemExit) as exit_:
            main(["--level", "2", "--transport", "http", "--port", str(port)])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        "vault-mcp: error: cannot listen on '127.0.0.1': Address already in use"
        f" (while attempting to bind on address ('127.0.0.1', {port}))\n"
    )


def test_the_console_script_reports_a_bad_option_in_one_line() -> None:
    script = shutil.which("vault-mcp")
    if script is None:
        pytest.skip("vault-mcp is not installed")
    done = subprocess.run([script, "--level", "9"], capture_output=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        b"",
        b"vault-mcp: error: argument --level: expected 1 to 5, got '9'\n",
    )
