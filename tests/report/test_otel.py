"""The OTLP/JSON traces of a run's rows (`report/otel.py`): every span against the GenAI
semantic conventions' names and types, the input hash, and independence from row order.

`validate` and the conventions' table are used by the plugin's tests too
(tests/plugin/test_otel_option.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from pytest_vault.core.text import REDACTED
from pytest_vault.corpus.model import MONEY_TOOLS
from pytest_vault.corpus.owasp import asi_of, risk_category
from pytest_vault.report.otel import (
    NO_ASI_RISK,
    SCHEMA_URL,
    SEMCONV,
    Run,
    canonical,
    input_hash,
    otlp_request,
    otlp_text,
)

# The conventions followed (`report/otel.py`'s SEMCONV), as the spec text states them:
# open-telemetry/semantic-conventions-genai, commit 3155df2825f1,
# docs/gen-ai/gen-ai-security.md ("Run guardrail internal span", "Finding:
# gen_ai.guardrail.security.finding": each attribute's key, value type and requirement
# level), docs/gen-ai/gen-ai-events.md ("Event: gen_ai.evaluation.result": its six
# attributes), gen-ai-agent-spans.md (invoke_agent) and gen-ai-spans.md (execute_tool).
# Each span: {attribute: (type, required)}; "any" where the conventions allow any.
REQUIRED, OPTIONAL = True, False
GUARDRAIL_SPAN = {
    "gen_ai.operation.name": ("string", REQUIRED),
    "gen_ai.guardrail.target.type": ("string", REQUIRED),
    "gen_ai.guardrail.verdict.type": ("string", REQUIRED),
    "error.type": ("string", OPTIONAL),
    "gen_ai.conversation.id": ("string", OPTIONAL),
    "gen_ai.guardrail.action.type": ("string", OPTIONAL),
    "gen_ai.guardrail.security.content.input.hash": ("string", OPTIONAL),
    "gen_ai.guardrail.security.content.modified": ("boolean", OPTIONAL),
    "gen_ai.guardrail.security.external_finding_id": ("string", OPTIONAL),
    "gen_ai.guardrail.security.policy.id": ("string", OPTIONAL),
    "gen_ai.guardrail.target.id": ("string", OPTIONAL),
    "gen_ai.guardrail.target.subtype": ("string", OPTIONAL),
    "gen_ai.guardrail.verdict.reason": ("string", OPTIONAL),
    "gen_ai.guardrail.component.name": ("string", OPTIONAL),
    "gen_ai.guardrail.security.policy.rule.id": ("string", OPTIONAL),
    "gen_ai.guardrail.security.risk.category": ("string", OPTIONAL),
    "gen_ai.guardrail.security.risk.score": ("double", OPTIONAL),
    "gen_ai.guardrail.verdict.code": ("string", OPTIONAL),
    "gen_ai.provider.name": ("string", OPTIONAL),
    "gen_ai.guardrail.security.content.input.value": ("any", OPTIONAL),
    "gen_ai.guardrail.security.content.output.value": ("any", OPTIONAL),
}
FINDING_EVENT = {
    "gen_ai.guardrail.security.policy.id": ("string", REQUIRED),
    "gen_ai.guardrail.security.risk.category": ("string", REQUIRED),
    "gen_ai.guardrail.target.type": ("string", REQUIRED),
    "gen_ai.guardrail.security.external_finding_id": ("string", OPTIONAL),
    "gen_ai.guardrail.target.id": ("string", OPTIONAL),
    "gen_ai.guardrail.target.subtype": ("string", OPTIONAL),
    "gen_ai.guardrail.action.type": ("string", OPTIONAL),
    "gen_ai.guardrail.component.name": ("string", OPTIONAL),
    "gen_ai.guardrail.security.policy.rule.id": ("string", OPTIONAL),
    "gen_ai.guardrail.security.risk.score": ("double", OPTIONAL),
    "gen_ai.guardrail.verdict.code": ("string", OPTIONAL),
    "gen_ai.guardrail.verdict.reason": ("string", OPTIONAL),
    "gen_ai.guardrail.verdict.type": ("string", OPTIONAL),
    "gen_ai.provider.name": ("string", OPTIONAL),
}
EVALUATION_EVENT = {
    "gen_ai.evaluation.name": ("string", REQUIRED),
    "error.type": ("string", OPTIONAL),
    "gen_ai.evaluation.score.label": ("string", OPTIONAL),
    "gen_ai.evaluation.score.value": ("double", OPTIONAL),
    "gen_ai.evaluation.explanation": ("string", OPTIONAL),
    "gen_ai.response.id": ("string", OPTIONAL),
}
AGENT_SPAN = {
    "gen_ai.operation.name": ("string", REQUIRED),
    "gen_ai.provider.name": ("string", OPTIONAL),
    "gen_ai.request.model": ("string", OPTIONAL),
    "gen_ai.agent.name": ("string", OPTIONAL),
    "gen_ai.usage.input_tokens": ("int", OPTIONAL),
    "gen_ai.usage.output_tokens": ("int", OPTIONAL),
    "error.type": ("string", OPTIONAL),
}
TOOL_SPAN = {
    "gen_ai.operation.name": ("string", REQUIRED),
    "gen_ai.tool.name": ("string", OPTIONAL),
    "gen_ai.tool.type": ("string", OPTIONAL),
    "gen_ai.tool.call.id": ("string", OPTIONAL),
    "gen_ai.tool.call.arguments": ("any", OPTIONAL),
    "gen_ai.tool.call.result": ("any", OPTIONAL),
    "error.type": ("string", OPTIONAL),
}
# The conventions' well-known values (the spec's tables of them).
WELL_KNOWN = {
    "gen_ai.guardrail.verdict.type": {"allow", "audit", "deny", "escalate", "modify", "warn"},
    "gen_ai.guardrail.action.type": {"allow", "audit", "block", "escalate", "modify"},
    "gen_ai.guardrail.target.type": {"input", "output"},
    "gen_ai.guardrail.target.subtype": {
        *("action", "llm", "memory", "message", "retrieval", "tool_call", "tool_definition")
    },
}
# Ours, in our own namespace: what every span of an evaluation carries, and the rest.
OURS = {
    "vault.run.id": "string",
    "vault.case.id": "string",
    "vault.level": "int",
    "vault.track": "string",
    "vault.architecture": "string",
    "vault.trial": "int",
    "vault.model": "string",
    "vault.session": "string",
    "vault.category": "string",
    "vault.kind": "string",
    "vault.tool": "string",
    "vault.attempt": "int",
    "vault.status": "string",
    "vault.requested": "boolean",
    "vault.paid": "boolean",
    "vault.unpermitted": "boolean",
    "vault.violation": "boolean",
    "vault.call.index": "int",
    "vault.call.executed": "boolean",
}
EVERY_SPAN = ("vault.case.id", "vault.level", "vault.track", "vault.architecture")
EVERY_SPAN += ("vault.trial", "vault.model", "vault.run.id")
BY_OPERATION = {
    "invoke_agent": AGENT_SPAN,
    "execute_tool": TOOL_SPAN,
    "run_guardrail": GUARDRAIL_SPAN,
}
EVENTS = {
    "gen_ai.evaluation.result": EVALUATION_EVENT,
    "gen_ai.guardrail.security.finding": FINDING_EVENT,
}
HEX = {"traceId": re.compile("[0-9a-f]{32}"), "spanId": re.compile("[0-9a-f]{16}")}
NANOS = re.compile("(0|[1-9][0-9]*)")


def _typed(value: Mapping[str, Any]) -> tuple[str, Any]:
    """An OTLP/JSON AnyValue's type (as the conventions name types) and value."""
    [(kind, raw)] = value.items()
    if kind == "intValue":
        assert isinstance(raw, str) and re.fullmatch("-?[0-9]+", raw), raw  # int64 as text
        return "int", int(raw)
    assert kind in ("stringValue", "boolValue", "doubleValue"), kind
    expected = {"stringValue": str, "boolValue": bool, "doubleValue": float}[kind]
    assert type(raw) is expected, (kind, raw)
    return {"stringValue": "string", "boolValue": "boolean", "doubleValue": "double"}[kind], raw


def _attrs(pairs: Iterable[Mapping[str, Any]], table: Mapping[str, tuple[str, bool]]) -> dict:
    out: dict[str, Any] = {}
    for pair in pairs:
        key = pair["key"]
        assert key not in out, f"{key} twice"
        kind, value = _typed(pair["value"])
        if key.startswith("vault."):
            assert OURS.get(key) == kind, (key, kind)
        else:
            assert key in table, f"{key}: not an attribute the conventions define here"
            want = table[key][0]
            assert want in (kind, "any"), (key, kind, want)
        if key in WELL_KNOWN:
            assert value in WELL_KNOWN[key], (key, value)
        out[key] = value
    for key, (_, required) in table.items():
        assert not required or key in out, f"required {key} missing"
    return out


def validate(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every span and event of an OTLP/JSON request against the tables above, and the
    OTLP/JSON rules (hex ids, times as decimal strings, enums as integers); the spans,
    each with `attrs` (its attributes read) and `event_attrs` (each event's)."""
    [resource] = request["resourceSpans"]
    assert resource["schemaUrl"] == SCHEMA_URL == f"https://opentelemetry.io/schemas/{SEMCONV}"
    service = {p["key"]: p["value"] for p in resource["resource"]["attributes"]}
    assert service["service.name"] == {"stringValue": "pytest-vault"}
    [scope] = resource["scopeSpans"]
    assert scope["scope"]["name"] == "pytest_vault"
    out = []
    ids = set()
    for span in scope["spans"]:
        for field, pattern in HEX.items():
            assert pattern.fullmatch(span[field]), (field, span[field])
        assert "parentSpanId" not in span or HEX["spanId"].fullmatch(span["parentSpanId"])
        assert NANOS.fullmatch(span["startTimeUnixNano"])
        assert NANOS.fullmatch(span["endTimeUnixNano"])
        assert int(span["startTimeUnixNano"]) <= int(span["endTimeUnixNano"])
        assert span["kind"] == 1  # INTERNAL: everything ran in-process
        assert (span["traceId"], span["spanId"]) not in ids
        ids.add((span["traceId"], span["spanId"]))
        operation = span["name"].split(" ", 1)[0]
        attrs = _attrs(span["attributes"], BY_OPERATION[operation])
        assert attrs["gen_ai.operation.name"] == operation
        for key in EVERY_SPAN:
            assert key in attrs, (span["name"], key)
        events = []
        for event in span.get("events", ()):
            assert NANOS.fullmatch(event["timeUnixNano"])
            events.append((event["name"], _attrs(event["attributes"], EVENTS[event["name"]])))
        out.append({**span, "attrs": attrs, "event_attrs": events})
    # Every parent is a span of its own trace.
    for span in out:
        if "parentSpanId" in span:
            assert (span["traceId"], span["parentSpanId"]) in ids
    return out


def counts(spans: list[dict[str, Any]]) -> Counter[str]:
    """What the spans say, counted as the rows count it (see `row_counts`)."""
    out: Counter[str] = Counter()
    for span in spans:
        a = span["attrs"]
        op = a["gen_ai.operation.name"]
        out[op] += 1
        if op == "run_guardrail":
            out[f"action:{a['gen_ai.guardrail.action.type']}"] += 1
            if a["vault.tool"] in MONEY_TOOLS and a["vault.architecture"] == "guarded":
                out[f"money:{a['gen_ai.guardrail.action.type']}"] += 1
        if op == "invoke_agent" and a["vault.unpermitted"]:
            out["unpermitted rows"] += 1
        for name, event in span["event_attrs"]:
            if name == "gen_ai.guardrail.security.finding":
                out[f"finding:{event['gen_ai.guardrail.security.risk.category']}"] += 1
            else:
                out[f"outcome:{event['gen_ai.evaluation.score.label']}"] += 1
    return out


def row_counts(rows: list[Mapping[str, Any]]) -> Counter[str]:
    """The same counts from the rows alone: one guardrail span per logged decision, the
    guarded rows' money-moving calls as `allowed_calls` and `denied_calls` count them,
    a finding per OWASP entry of each unpermitted transfer."""
    out: Counter[str] = Counter()
    for r in rows:
        out["invoke_agent"] += 1
        guarded = r["architecture"] == "guarded"
        for call in r["tool_calls"]:
            out["execute_tool"] += 1
            if call["decision"] is None:
                continue
            out["run_guardrail"] += 1
            allow = call["decision"]["allow"]
            out[f"action:{('allow' if allow else 'block') if guarded else 'audit'}"] += 1
            if call["executed"] and call["transfer"] and call["permitted"] is False:
                risks = [risk_category(a) for a in asi_of(r["category"], r["track"])]
                for risk in risks or [NO_ASI_RISK]:
                    out[f"finding:{risk}"] += 1
        if guarded:
            out["money:allow"] += r["allowed_calls"]
            out["money:block"] += r["denied_calls"]
        out["unpermitted rows"] += bool(r["unpermitted"])
        if r["status"] != "completed":
            out[f"outcome:{r['status']}"] += 1
        elif r["unpermitted"]:
            out["outcome:unpermitted"] += 1
        elif r.get("clean") is False and not r.get("observed"):
            out["outcome:inconclusive"] += 1
        else:
            out["outcome:" + ("violation" if r["violation"] else "no_violation")] += 1
    return +out


def proto_counts(request: Mapping[str, Any]) -> Counter[str]:
    """The request read by opentelemetry-proto's own message types: OTLP/JSON's hex ids
    as the protobuf JSON mapping's base64, then `ParseDict` (unknown fields refused)."""
    from google.protobuf.json_format import ParseDict
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    def b64(hex_id: str) -> str:
        return base64.b64encode(bytes.fromhex(hex_id)).decode()

    doc = json.loads(json.dumps(request))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for field in ("traceId", "spanId", "parentSpanId"):
                    if field in span:
                        span[field] = b64(span[field])
    message = ParseDict(doc, ExportTraceServiceRequest())
    return message_counts(message)


def message_counts(message: Any) -> Counter[str]:
    """Spans by operation, guardrail actions and findings of a protobuf request."""
    out: Counter[str] = Counter()
    for rs in message.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                assert len(span.trace_id) == 16 and len(span.span_id) == 8
                attrs = {a.key: a.value for a in span.attributes}
                op = attrs["gen_ai.operation.name"].string_value
                out[op] += 1
                if op == "run_guardrail":
                    out[f"action:{attrs['gen_ai.guardrail.action.type'].string_value}"] += 1
                for event in span.events:
                    if event.name == "gen_ai.guardrail.security.finding":
                        [risk] = [
                            a.value.string_value
                            for a in event.attributes
                            if a.key == "gen_ai.guardrail.security.risk.category"
                        ]
                        out[f"finding:{risk}"] += 1
    return out


# -- the rows, by hand -----------------------------------------------------------------


def _call(recipient: str, allow: bool, executed: bool, permitted: bool) -> dict[str, Any]:
    arguments = json.dumps({"recipient": recipient, "amount": 5, "memo": "sk-test1234567890ab"})
    return {
        "name": "transfer_funds",
        "arguments": arguments,
        "executed": executed,
        "result": "ok" if executed else "declined",
        "is_error": not executed,
        "decision": {"allow": allow, "codes": [] if allow else ["oap.merchant_forbidden"]},
        "audit": None if not executed else {"allow": permitted, "codes": []},
        "transfer": {
            "recipient": recipient,
            "amount_minor": 500,
            "currency": "USD",
            "memo": None,
            "idempotency_key": None,
        },
        "permitted": permitted,
        "facts": None,
    }


def _row(case: str, arch: str, trial: int, calls: list[dict[str, Any]]) -> dict[str, Any]:
    guarded = arch == "guarded"
    unpermitted = any(c["executed"] and c["permitted"] is False for c in calls)
    return {
        "attack_id": case,
        "session": "s1",
        "level": 2,
        "category": "prompt_injection",
        "tool": "transfer_funds",
        "kind": "attack",
        "track": "A",
        "architecture": arch,
        "model": "openai:gpt-4.1-mini",
        "trial": trial,
        "attempt": 1,
        "guard": "oap" if guarded else None,
        "status": "completed",
        "error": None,
        "unpermitted": unpermitted,
        "violation": unpermitted,
        "paid": any(c["executed"] for c in calls),
        "requested": bool(calls),
        "latency_s": 0.25,
        "input_tokens": 10,
        "output_tokens": 3,
        "tool_calls": calls,
        "clean": None,
        "observed": None,
        "allowed_calls": sum(c["decision"]["allow"] for c in calls) if guarded else None,
        "denied_calls": sum(not c["decision"]["allow"] for c in calls) if guarded else None,
    }


ROWS = [
    _row("c1", "model", 1, [_call("evil@x.test", False, True, False)]),
    _row("c1", "guarded", 1, [_call("evil@x.test", False, False, False)]),
    _row("c1", "model", 2, [_call("rent@aport-vault.com", True, True, True)]),
    _row("c2", "guarded", 1, [_call("rent@aport-vault.com", True, True, True)] * 2),
    _row("c2", "model", 1, []),
]
META = {"passports": {"2": {"file": "level-2.json", "sha256": "sha256:ab"}}}
RUN = Run("r" * 32, 1_700_000_000_000_000_000)


def test_hand_rows_validate_and_count_as_the_rows_do() -> None:
    request = otlp_request(ROWS, [False] * len(ROWS), META, RUN)
    spans = validate(request)
    assert counts(spans) == row_counts(ROWS)
    assert row_counts(ROWS) == Counter(
        {
            "invoke_agent": 5,
            "execute_tool": 5,
            "run_guardrail": 5,
            "action:audit": 2,
            "action:block": 1,
            "action:allow": 2,
            "money:allow": 2,
            "money:block": 1,
            "finding:custom:owasp_asi01": 1,
            "finding:custom:owasp_asi02": 1,
            "unpermitted rows": 1,
            "outcome:unpermitted": 1,
            "outcome:no_violation": 4,
        }
    )
    assert proto_counts(request) == +Counter(
        {k: v for k, v in counts(spans).items() if not k.startswith(("money", "unp", "out"))}
    )
    [agent] = [
        s
        for s in spans
        if s["name"].startswith("invoke_agent")
        and s["attrs"]["vault.case.id"] == "c1"
        and s["attrs"]["vault.trial"] == 2
    ]
    assert agent["attrs"]["gen_ai.provider.name"] == "openai"
    assert agent["attrs"]["gen_ai.request.model"] == "gpt-4.1-mini"
    assert int(agent["endTimeUnixNano"]) - int(agent["startTimeUnixNano"]) == 250_000_000
    # The blocked call's guardrail span: the failing rule, the passport that decided.
    [block] = [s for s in spans if s["attrs"].get("gen_ai.guardrail.action.type") == "block"]
    assert block["name"] == "run_guardrail oap"
    assert block["attrs"]["gen_ai.guardrail.security.policy.id"] == (
        "level-2.json@sha256:ab/finance.payment.charge.v1"
    )
    assert block["attrs"]["gen_ai.guardrail.security.policy.rule.id"] == "oap.merchant_forbidden"
    assert block["attrs"]["gen_ai.guardrail.verdict.reason"] == "oap.merchant_forbidden"


def test_arguments_only_where_the_transcript_was_kept_and_redacted() -> None:
    kept = [True, False, False, False, False]
    spans = validate(otlp_request(ROWS, kept, META, RUN))
    tools = [s for s in spans if s["name"].startswith("execute_tool")]
    with_args = [s for s in tools if "gen_ai.tool.call.arguments" in s["attrs"]]
    assert [(s["attrs"]["vault.case.id"], s["attrs"]["vault.architecture"]) for s in with_args] == [
        ("c1", "model")
    ]
    [span] = with_args
    assert json.loads(span["attrs"]["gen_ai.tool.call.arguments"])["memo"] == REDACTED
    assert span["attrs"]["gen_ai.tool.call.result"] == "ok"
    assert "sk-test" not in otlp_text(otlp_request(ROWS, [True] * 5, META, RUN))


def test_input_hash_is_hmac_of_rfc8785_arguments_only_with_a_key() -> None:
    rfc8785 = pytest.importorskip("rfc8785")
    key = b"team-secret-key"
    without = validate(otlp_request(ROWS, [False] * 5, META, RUN))
    assert not any("gen_ai.guardrail.security.content.input.hash" in s["attrs"] for s in without)
    spans = validate(otlp_request(ROWS, [False] * 5, META, Run(RUN.run_id, RUN.start_ns, key)))
    guards = [s for s in spans if s["name"].startswith("run_guardrail")]
    assert len(guards) == 5

    # Each span's hash is that of its own call's canonical arguments.
    def hashed(recipient: str) -> str:
        [arguments] = {
            c["arguments"]
            for r in ROWS
            for c in r["tool_calls"]
            if c["transfer"]["recipient"] == recipient
        }
        digest = hmac.new(key, rfc8785.dumps(json.loads(arguments)), hashlib.sha256)
        return f"hmac-sha256:{digest.hexdigest()}"

    hashes = Counter(s["attrs"]["gen_ai.guardrail.security.content.input.hash"] for s in guards)
    assert hashes == {hashed("evil@x.test"): 2, hashed("rent@aport-vault.com"): 3}
    assert key.decode() not in otlp_text(otlp_request(ROWS, [True] * 5, META, Run("r", 1, key)))


def test_canonical_form_is_rfc8785() -> None:
    pytest.importorskip("rfc8785")
    # RFC 8785 section 3.2.2's example input, canonicalized as its section 3.2.3 shows.
    text = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    assert (
        canonical(text)
        == (
            '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
            '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
        ).encode()
    )
    # Keys sorted by their UTF-16 code units (RFC 8785 section 3.2.3).
    assert canonical('{"\\u20ac": 1, "\\ud83d\\ude00": 2, "a": 3}') == (
        '{"a":3,"€":1,"\U0001f600":2}'.encode()
    )
    # Not JSON (a model's malformed arguments): the text's own bytes, as free-form text.
    assert canonical('{"recipient": "x",') == b'{"recipient": "x",'
    assert input_hash(b"k", None) == "hmac-sha256:" + hmac.new(b"k", b"", "sha256").hexdigest()


def test_shuffled_rows_give_the_same_bytes() -> None:
    kept = [True, False, True, False, False]
    want = otlp_text(otlp_request(ROWS, kept, META, RUN))
    pairs = list(zip(ROWS, kept, strict=True))
    for seed in range(5):
        random.Random(seed).shuffle(pairs)
        rows, keep = zip(*pairs, strict=True)
        assert otlp_text(otlp_request(list(rows), list(keep), META, RUN)) == want
