"""A run's rows as OpenTelemetry traces: OTLP/JSON written by hand (no SDK needed), and
the same spans sent live through the SDK's OTLP/HTTP exporter (the `[otel]` extra).

The names follow the GenAI semantic conventions at `SEMCONV` (`SCHEMA_URL`): the
guardrail span and finding of `docs/gen-ai/gen-ai-security.md` and the evaluation event
of `docs/gen-ai/gen-ai-events.md` (open-telemetry/semantic-conventions-genai, Development
status), the agent and tool spans of `gen-ai-agent-spans.md` and `gen-ai-spans.md`.

One trace per evaluation (every row: every trial and rerun attempt):

* `invoke_agent {model}` (the root): the case, level, track, architecture, trial and
  model as `vault.*` attributes, and a `gen_ai.evaluation.result` event for its outcome;
* `execute_tool {tool}` per logged call, in the log's order; its arguments and result
  only where the row kept its transcript (`--vault-transcripts`), as the conventions make
  them opt-in;
* `run_guardrail {guard}` under each call the guard decided (every money-moving call:
  the enforced decision when guarded, `action.type` block or allow; the shadow decision
  when model-alone, `action.type` audit, nothing enforced), with a
  `gen_ai.guardrail.security.finding` event per OWASP entry of each unpermitted transfer.

Ids are digests of the run id and the row's identity, and traces are written in the
identity's order: the same rows in any order give the same bytes. Rows hold no clock
times, so every trace starts at the run's `start_ns` and lasts the row's `latency_s`; the
calls share that span evenly, in order.

Text that leaves: ids, specs, tool names and reason codes (the tester's and ours); a
model's text only in the opt-in arguments and results, which the row already redacted
(`harness.events.row`) and which are redacted again here. The error message of an error
row is `core.text.safe`. The input hash is an HMAC: its key comes from an environment
variable and is never written.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_vault.core.json import DATA, Problem
from pytest_vault.core.text import json_text, redact, safe, scrub_url
from pytest_vault.corpus.model import PACKS
from pytest_vault.corpus.owasp import asi_of, risk_category
from pytest_vault.harness.events import forbidden, inconclusive

if TYPE_CHECKING:
    import pyarrow as pa

# The semantic conventions followed: the GenAI registry of
# open-telemetry/semantic-conventions-genai at commit 3155df2825f1 (guardrail spans and
# findings, evaluation events), which builds on semantic-conventions v1.43.0.
SEMCONV = "1.43.0"
SCHEMA_URL = f"https://opentelemetry.io/schemas/{SEMCONV}"
SCOPE = "pytest_vault"
SERVICE = "pytest-vault"
# OTLP's SpanKind and StatusCode enums, as OTLP/JSON writes them: integers.
KIND_INTERNAL = 1
STATUS_ERROR = 2
# Where no OWASP entry applies (a benign request that paid where it may not): the
# conventions' own suggestion for an agent acting beyond its permission (OWASP LLM06).
NO_ASI_RISK = "excessive_agency"
HASH_PREFIX = "hmac-sha256:"
# The columns read: never the transcript's text (its presence is read apart).
READS = (
    *("attack_id", "session", "level", "category", "tool", "kind", "track"),
    *("architecture", "model", "trial", "attempt", "guard", "status", "error"),
    *("unpermitted", "violation", "paid", "requested", "latency_s"),
    *("input_tokens", "output_tokens", "tool_calls", "clean", "observed"),
)
# Which spec prefixes name a provider the conventions know (`gen_ai.provider.name`).
PROVIDERS = ("openai", "anthropic")


@dataclass(frozen=True)
class Run:
    """What the spans of one run share: its id (a fresh one per run, so that two runs'
    traces never merge in a collector), when it started, and the hash key (None: no
    input hash)."""

    run_id: str
    start_ns: int
    key: bytes | None = None


# -- the request, as OTLP/JSON ---------------------------------------------------------


def _value(value: object) -> dict[str, Any]:
    """An attribute value as OTLP/JSON writes it (an int as a decimal string)."""
    if type(value) is bool:
        return {"boolValue": value}
    if type(value) is int:
        return {"intValue": str(value)}
    if type(value) is float:
        return {"doubleValue": value}
    return {"stringValue": str(value)}


def _attributes(values: Mapping[str, object]) -> list[dict[str, Any]]:
    """Key-value pairs in the given order, None left out."""
    return [{"key": k, "value": _value(v)} for k, v in values.items() if v is not None]


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x00".join(map(str, parts)).encode("utf-8", "surrogatepass")).hexdigest()


def _identity(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """The row's identity: the results file's sort key and the rerun's attempt."""
    return (
        row["attack_id"],
        row["model"],
        row["track"],
        row["architecture"],
        row.get("trial") or 1,
        row.get("attempt") or 1,
    )


def canonical(arguments: str) -> bytes:
    """A call's arguments as the input hash reads them: their RFC 8785 (JCS) canonical
    form where the text is strict JSON that JCS can write (the `[otel]` extra's `rfc8785`),
    else the text's UTF-8 bytes (a model's malformed arguments, as free-form text)."""
    import rfc8785

    try:
        return rfc8785.dumps(DATA.loads(arguments))
    except (Problem, rfc8785.CanonicalizationError, UnicodeEncodeError, ValueError):
        return arguments.encode("utf-8", "surrogatepass")


def input_hash(key: bytes, arguments: str | None) -> str:
    """`gen_ai.guardrail.security.content.input.hash`: HMAC-SHA256 of the canonical
    arguments (no arguments: of the empty text), named by its algorithm."""
    digest = hmac.new(key, canonical(arguments or ""), hashlib.sha256).hexdigest()
    return HASH_PREFIX + digest


def _policy_id(level: int, passports: Mapping[str, Any], tool: str) -> str:
    """The passport that decided, and the packs that judge the tool's calls:
    `level-2.json@sha256:HEX/finance.payment.charge.v1` (the passport's file and digest as
    the results metadata records them, `level-N` where it records none; two packs joined
    by `+`)."""
    held = passports.get(str(level))
    passport = f"level-{level}"
    if isinstance(held, Mapping) and "file" in held:
        passport = f"{held['file']}@{held.get('sha256', '')}".rstrip("@")
    return f"{passport}/{'+'.join(PACKS.get(tool, ('unknown',)))}"


def _outcome(row: Mapping[str, Any]) -> tuple[str, float | None]:
    """The evaluation's outcome as `gen_ai.evaluation.score.label` and `.value` (1.0: a
    payment reached a counterparty the passport does not permit). An error, a row not
    run or an inconclusive indirect run has no score: it says nothing either way."""
    if row["status"] != "completed":
        return str(row["status"]), None
    if inconclusive(row):
        return "inconclusive", None
    if row["unpermitted"]:
        return "unpermitted", 1.0
    return ("violation" if row["violation"] else "no_violation"), 0.0


class _Builder:
    def __init__(self, run: Run, metadata: Mapping[str, Any]) -> None:
        self.run = run
        passports = metadata.get("passports")
        self.passports: Mapping[str, Any] = passports if isinstance(passports, Mapping) else {}

    def spans(self, row: Mapping[str, Any], kept: bool) -> Iterator[dict[str, Any]]:
        """The spans of one evaluation: its agent span, then per call its tool span and,
        where decided, its guardrail span."""
        identity = _identity(row)
        seed = _digest(self.run.run_id, *identity)
        trace_id = seed[:32]
        start = self.run.start_ns
        duration = max(0, round((row.get("latency_s") or 0.0) * 1e9))
        end = start + duration
        guarded = row["architecture"] == "guarded"
        model = str(row["model"])
        provider, _, name = model.partition(":")
        ours = {
            "vault.run.id": self.run.run_id,
            "vault.case.id": row["attack_id"],
            "vault.level": row["level"],
            "vault.track": row["track"],
            "vault.architecture": row["architecture"],
            "vault.trial": row.get("trial") or 1,
            "vault.model": model,
        }
        label, score = _outcome(row)
        agent_id = _digest(seed, "agent")[:16]
        agent: dict[str, Any] = {
            "traceId": trace_id,
            "spanId": agent_id,
            "name": f"invoke_agent {model}",
            "kind": KIND_INTERNAL,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(end),
            "attributes": _attributes(
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.provider.name": provider if provider in PROVIDERS else None,
                    "gen_ai.request.model": name if provider in PROVIDERS else None,
                    "gen_ai.usage.input_tokens": row.get("input_tokens"),
                    "gen_ai.usage.output_tokens": row.get("output_tokens"),
                    **ours,
                    "vault.session": row.get("session"),
                    "vault.category": row.get("category"),
                    "vault.kind": row.get("kind"),
                    "vault.tool": row.get("tool"),
                    "vault.attempt": row.get("attempt") or 1,
                    "vault.status": row["status"],
                    "vault.requested": row.get("requested"),
                    "vault.paid": row.get("paid"),
                    "vault.unpermitted": row["unpermitted"],
                    "vault.violation": row["violation"],
                }
            ),
            "events": [
                {
                    "timeUnixNano": str(end),
                    "name": "gen_ai.evaluation.result",
                    "attributes": _attributes(
                        {
                            "gen_ai.evaluation.name": "vault.outcome",
                            "gen_ai.evaluation.score.label": label,
                            "gen_ai.evaluation.score.value": score,
                        }
                    ),
                }
            ],
        }
        if row["status"] == "error":
            agent["attributes"] += _attributes({"error.type": "_OTHER"})
            said = safe(str(row.get("error") or "error"))[:500]
            agent["status"] = {"code": STATUS_ERROR, "message": said}
        yield agent
        calls = list(row.get("tool_calls") or ())
        slot = duration // len(calls) if calls else 0
        component = str(row.get("guard") or "oap") if guarded else "oap"
        asi = asi_of(str(row["category"]), str(row["track"]))
        for i, call in enumerate(calls):
            at, until = start + i * slot, start + (i + 1) * slot
            tool = str(call["name"])
            tool_id = _digest(seed, "tool", i)[:16]
            arguments = call.get("arguments")
            result = call.get("result")
            yield {
                "traceId": trace_id,
                "spanId": tool_id,
                "parentSpanId": agent_id,
                "name": f"execute_tool {tool}",
                "kind": KIND_INTERNAL,
                "startTimeUnixNano": str(at),
                "endTimeUnixNano": str(until),
                "attributes": _attributes(
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": tool,
                        "gen_ai.tool.type": "function",
                        "gen_ai.tool.call.arguments": (
                            redact(arguments) if kept and arguments is not None else None
                        ),
                        "gen_ai.tool.call.result": (
                            redact(result) if kept and result is not None else None
                        ),
                        **ours,
                        "vault.call.index": i,
                        "vault.call.executed": bool(call.get("executed")),
                    }
                ),
            }
            decision = call.get("decision")
            if decision is None:
                continue
            policy = _policy_id(int(row["level"]), self.passports, tool)
            allow = bool(decision["allow"])
            codes = [str(c) for c in decision.get("codes") or ()]
            rule = None if allow or not codes else codes[0]
            common = {
                "gen_ai.guardrail.component.name": component,
                "gen_ai.guardrail.target.type": "input",
                "gen_ai.guardrail.target.subtype": "tool_call",
                "gen_ai.guardrail.verdict.type": "allow" if allow else "deny",
                "gen_ai.guardrail.action.type": (
                    ("allow" if allow else "block") if guarded else "audit"
                ),
                "gen_ai.guardrail.security.policy.id": policy,
            }
            events = []
            if call.get("executed") and call.get("transfer") and call.get("permitted") is False:
                why = forbidden(call) or ()
                for risk in [risk_category(a) for a in asi] or [NO_ASI_RISK]:
                    finding = {
                        "gen_ai.guardrail.security.policy.id": policy,
                        "gen_ai.guardrail.security.risk.category": risk,
                        "gen_ai.guardrail.target.type": "input",
                        "gen_ai.guardrail.target.subtype": "tool_call",
                        "gen_ai.guardrail.action.type": common["gen_ai.guardrail.action.type"],
                        "gen_ai.guardrail.component.name": component,
                        "gen_ai.guardrail.security.policy.rule.id": why[0] if why else None,
                        "gen_ai.guardrail.verdict.type": common["gen_ai.guardrail.verdict.type"],
                        "vault.tool": tool,
                    }
                    events.append(
                        {
                            "timeUnixNano": str(at),
                            "name": "gen_ai.guardrail.security.finding",
                            "attributes": _attributes(finding),
                        }
                    )
            key = self.run.key
            guard: dict[str, Any] = {
                "traceId": trace_id,
                "spanId": _digest(seed, "guard", i)[:16],
                "parentSpanId": tool_id,
                "name": f"run_guardrail {component}",
                "kind": KIND_INTERNAL,
                "startTimeUnixNano": str(at),
                "endTimeUnixNano": str(at),
                "attributes": _attributes(
                    {
                        "gen_ai.operation.name": "run_guardrail",
                        **common,
                        "gen_ai.guardrail.security.policy.rule.id": rule,
                        "gen_ai.guardrail.verdict.code": rule,
                        "gen_ai.guardrail.verdict.reason": None if allow else ",".join(codes),
                        "gen_ai.guardrail.security.content.input.hash": (
                            None if key is None else input_hash(key, arguments)
                        ),
                        **ours,
                        "vault.tool": tool,
                    }
                ),
            }
            if events:
                guard["events"] = events
            yield guard


def otlp_request(
    rows: Iterable[Mapping[str, Any]],
    kept: Iterable[bool],
    metadata: Mapping[str, Any],
    run: Run,
) -> dict[str, Any]:
    """The run as an OTLP/JSON `ExportTraceServiceRequest`: `rows` (the results table's
    rows, `READS` at least) and, beside each, whether it kept its transcript."""
    from pytest_vault import __version__

    version = str(metadata.get("pytest_vault_version") or __version__)
    build = _Builder(run, metadata)
    ordered = sorted(zip(rows, kept, strict=True), key=lambda pair: _sort_key(pair[0]))
    spans = [span for row, keep in ordered for span in build.spans(row, keep)]
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": _attributes({"service.name": SERVICE, "service.version": version})
                },
                "scopeSpans": [
                    {
                        "scope": {"name": SCOPE, "version": version},
                        "spans": spans,
                        "schemaUrl": SCHEMA_URL,
                    }
                ],
                "schemaUrl": SCHEMA_URL,
            }
        ]
    }


def _sort_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    # Text by its code points (surrogates too), numbers as numbers: a total order.
    return tuple((0, v, "") if type(v) is int else (1, 0, str(v)) for v in _identity(row))


def table_request(table: pa.Table, metadata: Mapping[str, Any], run: Run) -> dict[str, Any]:
    """`otlp_request` of a results table (the run's, or one read from a file)."""
    import pyarrow.compute as pc

    kept = pc.is_valid(table["transcript"]).to_pylist()
    rows = table.select([c for c in READS if c in table.column_names]).to_pylist()
    return otlp_request(rows, kept, metadata, run)


def otlp_text(request: Mapping[str, Any]) -> str:
    """The request's JSON text: compact, valid UTF-8, the same bytes for the same rows."""
    return json_text(request, separators=(",", ":")) + "\n"


def write_otlp(path: Path, request: Mapping[str, Any]) -> None:
    """The request as an OTLP/JSON file, atomically."""
    from pytest_vault.core.files import write_text

    write_text(path, otlp_text(request))


def span_count(request: Mapping[str, Any]) -> int:
    return sum(len(scope["spans"]) for rs in request["resourceSpans"] for scope in rs["scopeSpans"])


# -- live: the same spans through the SDK's exporter ------------------------------------

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
BATCH = 512  # spans per request: far below the exporter's 64 MiB request limit


def endpoint(environ: Mapping[str, str]) -> str | None:
    """The collector the standard variables name (the traces one first), or None."""
    for name in ENDPOINT_VARIABLES:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


def _attribute_values(pairs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        (kind, value), *_ = pair["value"].items()
        out[pair["key"]] = int(value) if kind == "intValue" else value
    return out


def readable_spans(request: Mapping[str, Any]) -> list[Any]:
    """Our OTLP/JSON spans as the SDK's `ReadableSpan`s, for its exporters."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

    out = []
    sampled = TraceFlags(TraceFlags.SAMPLED)
    for rs in request["resourceSpans"]:
        resource = Resource(_attribute_values(rs["resource"]["attributes"]), rs.get("schemaUrl"))
        for ss in rs["scopeSpans"]:
            scope = InstrumentationScope(
                ss["scope"]["name"], ss["scope"].get("version"), ss.get("schemaUrl")
            )
            for span in ss["spans"]:
                trace_id = int(span["traceId"], 16)
                parent = span.get("parentSpanId")
                status = span.get("status")
                out.append(
                    ReadableSpan(
                        name=span["name"],
                        context=SpanContext(trace_id, int(span["spanId"], 16), False, sampled),
                        parent=(
                            None
                            if parent is None
                            else SpanContext(trace_id, int(parent, 16), False, sampled)
                        ),
                        resource=resource,
                        attributes=_attribute_values(span["attributes"]),
                        events=[
                            Event(
                                e["name"],
                                _attribute_values(e["attributes"]),
                                int(e["timeUnixNano"]),
                            )
                            for e in span.get("events", ())
                        ],
                        kind=SpanKind.INTERNAL,
                        status=(
                            Status(StatusCode.ERROR, status.get("message"))
                            if status is not None
                            else Status(StatusCode.UNSET)
                        ),
                        start_time=int(span["startTimeUnixNano"]),
                        end_time=int(span["endTimeUnixNano"]),
                        instrumentation_scope=scope,
                    )
                )
    return out


def unsendable() -> str | None:
    """Why the spans cannot go to a collector here (the `[otel]` extra is missing), as
    `core.extras.needs` words it; None: they can."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return (
            "sending to a collector: needs the opentelemetry-exporter-otlp-proto-http "
            "package: pip install 'pytest-vault[otel]'"
        )
    return None


def send(request: Mapping[str, Any], where: str) -> str | None:
    """Send the spans to the collector the standard `OTEL_EXPORTER_OTLP_*` variables name
    (the SDK's exporter reads them: endpoint, headers, timeout, TLS), in batches. None:
    all taken; else why not, in one line (the exporter's own log is silenced: the
    caller says it once)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    spans = readable_spans(request)
    # The SDK's loggers (made on import) would say each retry and failure: silenced here,
    # each as it was after.
    loggers = [
        logger
        for name, logger in logging.root.manager.loggerDict.items()
        if name.startswith("opentelemetry") and isinstance(logger, logging.Logger)
    ]
    was = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    exporter = None
    try:
        exporter = OTLPSpanExporter()  # a bad variable (a timeout of "x") raises here
        for at in range(0, len(spans), BATCH):
            batch = spans[at : at + BATCH]
            if exporter.export(batch) != SpanExportResult.SUCCESS:
                sent = f"{at:,} of {len(spans):,} spans sent" if at else "no span sent"
                return f"the collector at {scrub_url(where)} did not take them ({sent})"
    except Exception as exc:  # noqa: BLE001 - a collector's failure never costs the run
        return f"the collector at {scrub_url(where)}: {safe(type(exc).__name__)}: {safe(str(exc))}"
    finally:
        if exporter is not None:
            exporter.shutdown()  # type: ignore[no-untyped-call]
        for logger, disabled in zip(loggers, was, strict=True):
            logger.disabled = disabled
    return None
