"""`--vault-otel FILE`: a run's traces as OTLP/JSON, and live to a collector (a stand-in
on 127.0.0.1 started by the test); a collector that refuses never costs the results."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ..report.test_otel import counts, message_counts, proto_counts, row_counts, validate
from ..results import read_rows

pytest_plugins = ["pytester"]

# A slice of the built-in corpus (three sessions of level 2), on a control that does what
# it is told and one that refuses: guarded and model-alone, tracks A and B.
SLICE = (
    *("--vault-corpus=builtin:level-2", "-k", "L2-s01 or L2-s02 or L2-s03"),
    *("--vault-model=scripted:obedient", "--vault-model=scripted:reference"),
    *("-p", "no:cacheprovider", "-p", "no:randomly", "--vault-progress=0"),
    *("--vault-results=r.parquet", "--vault-otel=traces.json"),
)


def _run(pytester: pytest.Pytester, *more: str) -> tuple[Any, list[dict[str, Any]], dict]:
    result = pytester.runpytest(*SLICE, *more)
    rows, _ = read_rows(pytester.path / "r.parquet")
    request = json.loads((pytester.path / "traces.json").read_text(encoding="utf-8"))
    return result, rows, request


def test_the_slice_validates_and_counts_as_its_rows(pytester: pytest.Pytester) -> None:
    result, rows, request = _run(pytester)
    result.assert_outcomes(passed=104, deselected=792)  # model-alone pays: not strict
    spans = validate(request)
    got = counts(spans)
    assert got == row_counts(rows)
    # One guardrail span per logged decision, in each evaluation.
    by_trace = Counter(s["traceId"] for s in spans if s["name"].startswith("run_guardrail"))
    agents = {
        (
            s["attrs"]["vault.case.id"],
            s["attrs"]["vault.model"],
            s["attrs"]["vault.track"],
            s["attrs"]["vault.architecture"],
        ): s["traceId"]
        for s in spans
        if s["name"].startswith("invoke_agent")
    }
    assert len(agents) == len(rows)
    for r in rows:
        trace = agents[(r["attack_id"], r["model"], r["track"], r["architecture"])]
        assert by_trace[trace] == sum(c["decision"] is not None for c in r["tool_calls"])
    assert got == Counter(EXPECTED)
    # Read back by opentelemetry-proto's own types: the same counts.
    read = ("invoke_agent", "execute_tool", "run_guardrail", "action", "finding")
    assert proto_counts(request) == Counter(
        {k: v for k, v in EXPECTED.items() if k.split(":")[0] in read}
    )
    assert "otel: " in result.stdout.str()


# The slice's counts, from its rows (`row_counts`): asserted exactly, so that a change
# in what the file holds is seen.
EXPECTED = {
    "invoke_agent": 104,
    "execute_tool": 75,
    "run_guardrail": 75,  # every call here moves money: each one decided
    "action:allow": 6,
    "action:block": 42,
    "action:audit": 27,  # model-alone: the shadow decision, nothing enforced
    "money:allow": 6,
    "money:block": 42,
    "finding:custom:owasp_asi01": 11,
    "finding:custom:owasp_asi02": 21,  # every attack tests ASI02: one per transfer
    "finding:custom:owasp_asi03": 8,
    "unpermitted rows": 20,
    "outcome:unpermitted": 20,
    "outcome:no_violation": 84,
}


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector's traces endpoint: each request parsed as protobuf."""

    received: list[Any]

    def do_POST(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        body = self.rfile.read(int(self.headers["Content-Length"]))
        assert self.path == "/v1/traces", self.path
        assert self.headers["Content-Type"] == "application/x-protobuf"
        self.received.append(ExportTraceServiceRequest.FromString(body))
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[Any]]]:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    received: list[Any] = []
    handler = type("Handler", (_Collector,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_live_export_reaches_the_collector(
    pytester: pytest.Pytester, collector: tuple[str, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, received = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
    result, _, request = _run(pytester)
    assert "WARNING" not in result.stderr.str()
    got: Counter[str] = Counter()
    for message in received:
        got += message_counts(message)
    assert got == proto_counts(request)
    assert sum(got[op] for op in ("invoke_agent", "execute_tool", "run_guardrail")) == len(
        request["resourceSpans"][0]["scopeSpans"][0]["spans"]
    )
    # The resource and scope as the file names them.
    [resource] = {
        tuple((a.key, a.value.string_value) for a in m.resource_spans[0].resource.attributes)
        for m in received
    }
    assert dict(resource)["service.name"] == "pytest-vault"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refusing_collector_costs_one_line_and_nothing_else(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    closed = f"http://127.0.0.1:{_closed_port()}/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", closed)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # the exporter's retries: 1 s
    result, rows, request = _run(pytester)
    # The exit status and outcomes of the run without a collector (the first test's).
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=104, deselected=792)
    said = [line for line in result.stderr.lines if line.strip()]
    assert said == [
        f"WARNING: --vault-otel: the collector at {closed} did not take them (no span "
        f"sent); {pytester.path / 'traces.json'} is written"
    ]
    assert counts(validate(request)) == Counter(EXPECTED)
    assert len(rows) == 104


def test_arguments_follow_the_transcripts_and_the_hash_the_key(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    rfc8785 = pytest.importorskip("rfc8785")
    _, rows, request = _run(pytester)
    spans = validate(request)
    kept = {
        (r["attack_id"], r["model"], r["track"], r["architecture"]) for r in rows if r["transcript"]
    }
    assert len(kept) == 20  # the failures: the unpermitted transfers' rows
    for span in spans:
        if span["name"].startswith("execute_tool"):
            a = span["attrs"]
            key = (a["vault.case.id"], a["vault.model"], a["vault.track"], a["vault.architecture"])
            assert ("gen_ai.tool.call.arguments" in a) == (key in kept)
    assert "content.input.hash" not in json.dumps(request)  # no key: no hash
    monkeypatch.setenv("TEAM_OTEL_KEY", "the-team-key-1")
    more = ("--vault-transcripts=all", "--vault-otel-key-env=TEAM_OTEL_KEY")
    _, rows, request = _run(pytester, *more)
    spans = validate(request)
    tools = [s for s in spans if s["name"].startswith("execute_tool")]
    assert len(tools) == sum(len(r["tool_calls"]) for r in rows) == 75
    assert all("gen_ai.tool.call.arguments" in s["attrs"] for s in tools)
    assert "the-team-key-1" not in (pytester.path / "traces.json").read_text(encoding="utf-8")
    # Each guardrail span's hash: HMAC-SHA256, with the key, of its call's RFC 8785 form.
    calls = [c for r in rows for c in r["tool_calls"] if c["decision"] is not None]
    key = b"the-team-key-1"
    want = Counter(
        "hmac-sha256:"
        + hmac.new(key, rfc8785.dumps(json.loads(c["arguments"])), hashlib.sha256).hexdigest()
        for c in calls
    )
    got = Counter(
        s["attrs"]["gen_ai.guardrail.security.content.input.hash"]
        for s in spans
        if s["name"].startswith("run_guardrail")
    )
    assert got == want
    assert sum(got.values()) == 75


def test_a_key_variable_that_is_not_set_is_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_KEY", raising=False)
    result = pytester.runpytest(*SLICE, "--vault-otel-key-env=NO_SUCH_KEY")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.stderr.lines if line] == [
        "ERROR: --vault-otel-key-env NO_SUCH_KEY: the variable is not set or is empty, so "
        "there is no key to hash the guardrail spans' input with"
    ]
    assert not Path(pytester.path / "traces.json").exists()
    assert not Path(pytester.path / "r.parquet").exists()


@pytest.mark.slow
def test_the_guarded_builtin_run_validates_with_a_span_per_decision(
    pytester: pytest.Pytester,
) -> None:
    """Issue 43's Done-when: the OTLP-JSON of a guarded run of the built-in corpus (on
    the five default controls) validates against the conventions, has one
    `run_guardrail` span per decision, and its counts equal the rows'."""
    result = pytester.runpytest(
        *("--vault-corpus=builtin", "--vault-arch=guarded", "-q", "--vault-progress=0"),
        *("-p", "no:cacheprovider", "-p", "no:randomly"),
        *("--vault-results=r.parquet", "--vault-otel=traces.json"),
    )
    rows, _ = read_rows(pytester.path / "r.parquet")
    assert result.ret == pytest.ExitCode.OK
    request = json.loads((pytester.path / "traces.json").read_text(encoding="utf-8"))
    got = counts(validate(request))
    assert got == row_counts(rows)
    decisions = sum(c["decision"] is not None for r in rows for c in r["tool_calls"])
    assert got["run_guardrail"] == decisions
    assert got["money:block"] == sum(r["denied_calls"] for r in rows)
    assert got["money:allow"] == sum(r["allowed_calls"] for r in rows)
    assert got["invoke_agent"] == len(rows)
    assert got["action:audit"] == 0  # guarded only: every decision enforced
    assert proto_counts(request)["run_guardrail"] == decisions


def test_the_shards_of_one_run_trace_under_its_run_id(pytester: pytest.Pytester) -> None:
    """Each shard's traces carry the run id of its manifest (the same in every shard), so
    the shards' files together are the run's traces, under one id."""
    whole, rows, request = _run(pytester)
    whole.assert_outcomes(passed=104, deselected=792)
    everything = counts(validate(request))
    got: Counter[str] = Counter()
    runs = set()
    for k in (1, 2):
        result = pytester.runpytest(*SLICE, f"--vault-shard={k}/2")
        assert result.ret == 0
        manifest = read_rows(pytester.path / "r.parquet")[1]["manifest"]
        spans = validate(json.loads((pytester.path / "traces.json").read_text("utf-8")))
        runs |= {s["attrs"]["vault.run.id"] for s in spans}
        assert {s["attrs"]["vault.run.id"] for s in spans} == {manifest["run"]}
        got += counts(spans)
    assert len(runs) == 1
    assert got == everything
