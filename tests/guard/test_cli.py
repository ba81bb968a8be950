from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pytest_vault.guard.folder import SHIPPED

from ..conftest import CONTEXT

INVALID = "oap.invalid_context"


def run(passport: Path, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_vault.guard", "--passport", str(passport)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def decisions(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_cli_conformance_lines_keep_the_ledger(charge_tests: Path) -> None:
    out = decisions(
        run(charge_tests / "passport.instance.json", (charge_tests / "contexts.jsonl").read_text())
    )
    assert [(d["allow"], d["reasons"][0]["code"]) for d in out] == [
        (True, "oap.allowed"),
        (False, "oap.currency_unsupported"),
        (False, "oap.limit_exceeded"),
        (False, "oap.limit_exceeded"),
        (False, "oap.merchant_forbidden"),
        (False, "oap.region_blocked"),
        (False, "oap.category_blocked"),
        (True, "oap.allowed"),
        (False, "oap.limit_exceeded"),  # upstream expects allow: see test_guard.py
        (False, "oap.limit_exceeded"),
        (False, "oap.idempotency_conflict"),  # the key of line 1, remembered
        (False, "oap.assurance_insufficient"),
    ]
    assert all("executes" not in d for d in out)


def test_cli_tool_calls_and_malformed_lines() -> None:
    lines = [
        {
            "tool": "transfer_funds",
            "arguments": {"recipient": "savings@aport-vault.com", "amount": 300},
        },
        {
            "tool": "transfer_funds",
            "arguments": '{"recipient": "savings@aport-vault.com", "amount": 300.5}',
        },
        {
            "tool": "transfer_funds",
            "arguments": {"recipient": "savings@aport-vault.com", "amount": 400},
        },
        {"tool": "transfer_funds", "arguments": {"recipient": "evil@x.test", "amount": 1}},
        {"tool": "wire_money", "arguments": {"recipient": "savings@aport-vault.com", "amount": 1}},
        {"tool": "transfer_funds"},
    ]
    stdin = "\n".join(json.dumps(x) for x in lines)
    stdin += '\nnot json\n[1, 2]\n\n{"tool": "transfer_funds", "tool": "x"}\n{"neither": 1}\n'
    out = decisions(run(SHIPPED / "level-3.json", stdin))
    assert [(d["allow"], [r["code"] for r in d["reasons"]]) for d in out] == [
        (True, ["oap.allowed"]),
        (True, ["oap.allowed"]),
        (False, ["oap.limit_exceeded"]),  # 300 + 300.50 + 400 > $1,000 a day
        (False, ["oap.merchant_forbidden"]),
        (False, ["oap.evaluation_error"]),
        (False, ["oap.invalid_context"]),
        (False, ["oap.invalid_context"]),
        (False, ["oap.invalid_context"]),
        (False, ["oap.invalid_context"]),
        (False, ["oap.invalid_context"]),
        (False, ["oap.invalid_context"]),
    ]
    assert out[0]["executes"] == {
        "recipient": "savings@aport-vault.com",
        "amount_minor": 30_000,
        "currency": "USD",
        "memo": None,
        "idempotency_key": None,
    }
    assert out[1]["executes"]["amount_minor"] == 30_050
    assert [d["executes"] for d in out[2:6]] == [None] * 4


def test_cli_refuses_a_field_a_line_does_not_have() -> None:
    context = CONTEXT
    call = {"recipient": "savings@aport-vault.com", "amount": 1}
    suspended = {"status": "suspended"}
    lines = [
        {"tool": "transfer_funds", "arguments": call, "overridePassport": suspended},
        {"context": context, "overidePassport": suspended},
        {"context": context, "overridePassport": None},
        {"tool": "transfer_funds", "arguments": call, "context": context},
        {"name": "labelled", "tool": "transfer_funds", "arguments": call},
        {"name": "labelled", "context": context, "overridePassport": suspended},
        {"context": context, "\u202ex": 1},
    ]
    out = decisions(run(SHIPPED / "level-3.json", "\n".join(json.dumps(x) for x in lines)))
    assert [(d["allow"], [(r["code"], r["message"]) for r in d["reasons"]]) for d in out] == [
        (False, [(INVALID, "line: a tool line has no field(s) 'overridePassport'")]),
        (False, [(INVALID, "line: a context line has no field(s) 'overidePassport'")]),
        (False, [(INVALID, "overridePassport must be an object")]),
        (False, [(INVALID, "line: a tool line has no field(s) 'context'")]),
        (True, [("oap.allowed", "Transaction within limits and policy requirements")]),
        (False, [("oap.passport_suspended", "Passport status is suspended")]),
        (False, [(INVALID, "line: a context line has no field(s) '\\u202ex'")]),
    ]
    assert [d.get("executes", "none") for d in out[:5:4]] == [
        None,
        {
            "recipient": "savings@aport-vault.com",
            "amount_minor": 100,
            "currency": "USD",
            "memo": None,
            "idempotency_key": None,
        },
    ]


def test_cli_bad_passport_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"status": "active"}')
    result = run(bad, "")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr == f"error: {bad}:1: passport_id: Field required (+11 more)\n"
    assert "Traceback" not in result.stderr


def test_cli_warns_on_empty_allowlist(tmp_path: Path) -> None:
    data = json.loads((SHIPPED / "level-2.json").read_text())
    data["limits"]["payments.charge"]["allowed_merchant_ids"] = []
    path = tmp_path / "open.json"
    path.write_text(json.dumps(data))
    result = run(
        path,
        json.dumps(
            {"tool": "transfer_funds", "arguments": {"recipient": "anyone@x.test", "amount": 5}}
        ),
    )
    assert "WARNING" in result.stderr and "fail-open" in result.stderr
    assert decisions(result)[0]["allow"] is True


def test_cli_survives_hostile_lines() -> None:
    good = json.dumps(
        {
            "tool": "transfer_funds",
            "arguments": {"recipient": "savings@aport-vault.com", "amount": 5},
        }
    )
    context = CONTEXT
    lines = [
        good,
        '{"x": 1e99999999999999999999}',
        json.dumps({"context": context, "overridePassport": {"metadata": {"x": 1.5}}}),
        '{"tool": "transfer_funds", "arguments": {"recipient": "'
        + "a" * 5_000_000
        + '", "amount": 1}}',
        "\xff\xfe",
        good,
    ]
    out = decisions(run(SHIPPED / "level-3.json", "\n".join(lines) + "\n"))
    assert [(d["allow"], d["reasons"][0]["code"]) for d in out] == [
        (True, "oap.allowed"),
        (False, "oap.invalid_context"),
        (True, "oap.allowed"),
        (False, "oap.invalid_context"),
        (False, "oap.invalid_context"),
        (True, "oap.allowed"),
    ]


def test_cli_answers_every_line_whatever_its_bytes() -> None:
    """Hostile bytes anywhere on a line (lone surrogates in values, keys and duplicate
    keys, bytes that are not UTF-8, control characters, nesting, huge numbers): every
    line gets its answer, in order, as valid UTF-8 JSON, and the CLI exits 0."""
    ok = b'{"tool":"transfer_funds","arguments":{"recipient":"savings@aport-vault.com","amount":5}}'
    hostile = [
        rb'{"tool":"transfer_funds","arguments":{"recipient":"a\ud800@x.com","amount":1}}',
        rb'{"tool":"transfer_funds","arguments":{"recipient":"x@y.com","amount":1,"k\udfff":1}}',
        rb'{"tool":"transfer_funds","arguments":"{\"recipient\":\"x\",\"r\ud800\":1,\"r\ud800\":2}"}',
        rb'{"tool":"transfer_\ud800","arguments":{}}',
        b'{"tool":"transfer_funds","arguments":{"recipient":"\xff\xfe@x.com","amount":1}}',
        b'{"tool":"transfer_funds","arguments":{"recipient":"\x1b[2J@x.com","amount":1}}',
        b"[" * 100_000,
        b'{"tool":"transfer_funds","arguments":{"recipient":"x@y.com","amount":1.5e99999999999999999999}}',
    ]
    result = subprocess.run(
        [sys.executable, "-m", "pytest_vault.guard", "--passport", str(SHIPPED / "level-3.json")],
        input=b"\n".join([*hostile, ok]) + b"\n",
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode("utf-8", errors="strict").splitlines()
    out = [json.loads(line) for line in lines]
    assert [(d["allow"], d["reasons"][0]["code"]) for d in out] == [
        *[(False, "oap.invalid_context")] * 3,
        (False, "oap.evaluation_error"),  # not a payment tool
        *[(False, "oap.invalid_context")] * 4,
        (True, "oap.allowed"),
    ]
    assert out[-1]["executes"]["amount_minor"] == 500
    # Quoted back in its safe form: the key is named, never written raw.
    assert out[2]["reasons"][0]["message"] == "duplicate key 'r\\ud800'"
    assert b"\x1b" not in result.stdout


def test_cli_stops_quietly_when_its_reader_goes_away() -> None:
    line = json.dumps({"tool": "transfer_funds", "arguments": {"recipient": "x@y.z", "amount": 1}})
    # Enough answers to fill the pipe after the reader has gone (`| head -1`).
    stdin = (line + "\n") * 200_000
    head = subprocess.run(
        f"{sys.executable} -m pytest_vault.guard --passport {SHIPPED / 'level-3.json'} | head -1;"
        " echo rc=${PIPESTATUS[0]} >&2",
        shell=True,
        executable="/bin/bash",
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert json.loads(head.stdout)["allow"] is False
    assert head.stderr == "rc=1\n"  # no BrokenPipeError traceback
