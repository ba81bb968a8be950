"""A run as Inspect `.eval` logs (`vault-report RESULTS --inspect-log DIR`, extra `[inspect]`),
so that Inspect View, Docent and Inspect Scout open it.

Written only through Inspect's Python API (`inspect_ai.log`): its maintainers say the file
format is not frozen. One log per model and architecture, one sample per results row:

* `id` the row's case and cell, `ATTACK_ID:TRACK:LEVEL` (`sample_id`); `epoch` its trial;
* its messages: the row's kept transcript (`--vault-transcripts`), else none, and the
  sample's metadata says they were not kept;
* per logged call (the bank's log, `tool_calls`), in order: an `ApprovalEvent` for the
  guard's decision where it made one (`approve` or `reject`, the reason codes as its
  explanation; model-alone rows hold the shadow guard's decision, which nothing
  enforced: the approver says so), then a `ToolEvent` (its arguments parsed where they
  parse, its result, its error);
* scores as the row holds them: `unpermitted`, `violation`, and on attacked indirect rows
  `received` (`observed`), `exact_action` (`attributable_request`) and
  `exact_action_paid` (`attributable_paid`); a null column is no score, never 0;
* a rerun test (`attempts` > 1) is the attempt its row records (`attempt`: the last, or
  the first that made a forbidden transfer); the others were never kept, and the
  sample's metadata says so.

The log's results are the tables' rows for its model and architecture
(`report/tables.py`, computed once for the whole run): nothing is counted here.

Text from the corpus or a model is data, never markup: Inspect View renders a log's
messages, tool results, scores and metadata as markdown with HTML (sanitized, but an
`<img>` still draws) unless the log says its content is not trusted, so every log says
so (`ViewerConfig(trust_content=False)`: the viewer shows it all as plain text, media
withheld, invisible and bidi characters made visible). Each text is also redacted and
every line `shown` (no terminal escape reaches a reader that prints it).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from pytest_vault.core.extras import needs
from pytest_vault.core.text import redact, redacted, shown
from pytest_vault.corpus.model import PACKS
from pytest_vault.guard.engine import TRANSFER_TOOL
from pytest_vault.report.results import ResultsError, read_calls, read_json, read_transcript

if TYPE_CHECKING:
    import pyarrow as pa
    from inspect_ai.event import Event
    from inspect_ai.log import EvalSample, EvalScore
    from inspect_ai.model import ChatMessage

M = TypeVar("M", bound=BaseModel)
OPTION = "--inspect-log"
HEADLINE = "stages levels 2-4"
TASK = "pytest-vault"
# Per-sample scores: name -> the row's column (null: no score).
SCORES = {
    "unpermitted": "unpermitted",
    "violation": "violation",
    "received": "observed",
    "exact_action": "attributable_request",
    "exact_action_paid": "attributable_paid",
}
# What the first event of a sample's transcript says of its row.
_OUTCOME = ("status", "error", "requested", "paid", "unpermitted", "violation", "deny_codes")
# Columns a sample holds elsewhere than in its metadata.
_ELSEWHERE = ("tool_calls", "transcript")
# The keys that name a table row's cell (its score's name), beside model and architecture.
_CELL = ("levels", "level", "kind", "category", "track", "tool", "placement")
NOT_KEPT = (
    "not kept: the run kept this evaluation's transcript only on failure; run with "
    "--vault-transcripts=all to keep every evaluation's messages"
)


def missing() -> str | None:
    """Why `--inspect-log` cannot run (inspect_ai is not installed), or None."""
    return needs("inspect_ai", "inspect", OPTION)


def as_text(text: str) -> str:
    """Corpus or model text as a log holds it: redacted, and each line `shown` (no
    terminal escape, no invisible character); the line breaks kept."""
    return "\n".join(shown(line) for line in redact(text).split("\n"))


def _data(value: Any) -> Any:
    """A JSON-like value (a call's arguments, a table row) with every string redacted and
    `shown`, keys too."""
    return _shown(redacted(value))


def _shown(value: Any) -> Any:
    if type(value) is str:
        return shown(value)
    if isinstance(value, dict):
        return {shown(k): _shown(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_shown(v) for v in value]
    return value


def sample_id(row: Mapping[str, Any]) -> str:
    """A row's case and cell: `ATTACK_ID:TRACK:LEVEL` (unique in its log with its epoch).
    Inspect names a sample's file in the log's zip by its id, so `/` and `\\` in a
    case's id (and `%`, to keep it readable back) are %-escaped: no member name climbs
    out of its folder. The sample's metadata holds the case's id as it is."""
    ident = shown(row["attack_id"]).replace("%", "%25").replace("/", "%2F").replace("\\", "%5C")
    return f"{ident}:{row['track']}:{row['level']}"


def _arguments(raw: str | None) -> dict[str, Any]:
    """A logged call's arguments as Inspect takes them (an object): parsed where they
    parse as an object, else their text under `unparsed` (none: `{}`)."""
    if raw is None:
        return {}
    try:
        value = read_json(raw)
    except ResultsError:
        value = None
    if isinstance(value, dict):
        return dict(_data(value))
    return {"unparsed": shown(redact(raw))}


class _Texts:
    """`as_text` and `_data` of each distinct string once: a run's rows repeat most of
    their strings (tools, codes, results, columns' values). One per export: `prime`
    redacts every distinct string of a table at once (`redacted` reads the environment's
    keys once), before any row is read."""

    def __init__(self) -> None:
        self._text: dict[str, str] = {}
        self._shown: dict[str, str] = {}
        self.shown_memo = self._shown  # column names and strings, `shown` and redacted
        self._arguments: dict[str, dict[str, Any]] = {}

    def prime(self, table: pa.Table) -> None:
        """Every distinct string of `table` (its nested ones too; column names), `shown`
        and redacted, and each call's result as `as_text`."""
        import pyarrow as pa
        import pyarrow.compute as pc

        strings: set[str] = set(table.column_names)
        results: list[str] = []

        def leaves(array: pa.Array, name: str) -> None:
            kind = array.type
            if pa.types.is_struct(kind):
                for i in range(kind.num_fields):
                    leaves(array.field(i), kind.field(i).name)
            elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
                leaves(array.flatten(), name)
            elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
                values = pc.unique(array.drop_null()).to_pylist()
                strings.update(values)
                if name == "result":
                    results.extend(values)

        for name, column in zip(table.column_names, table.columns, strict=True):
            if column.num_chunks and name != "transcript":  # read as JSON, per row
                leaves(pa.concat_arrays(column.chunks), name)
        ordered = list(strings)
        self._shown.update(zip(ordered, map(shown, redacted(ordered)), strict=True))
        for raw, clean in zip(results, redacted(results), strict=True):
            self._text[raw] = "\n".join(shown(line) for line in clean.split("\n"))

    def text(self, text: str) -> str:
        """`as_text(text)`."""
        done = self._text.get(text)
        if done is None:
            done = self._text[text] = as_text(text)
        return done

    def data(self, value: Any) -> Any:
        """`_data(value)`: every string redacted and `shown`, keys too."""
        if type(value) is str:
            done = self._shown.get(value)
            if done is None:
                done = self._shown[value] = shown(redact(value))
            return done
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        return value

    def arguments(self, raw: str | None) -> dict[str, Any]:
        """`_arguments(raw)`; the one dict for equal texts (nothing changes it)."""
        if raw is None:
            return {}
        done = self._arguments.get(raw)
        if done is None:
            done = self._arguments[raw] = _arguments(raw)
        return done


def _approver(row: Mapping[str, Any], name: str) -> str:
    guard = shown(row.get("guard") or "oap")
    pack = " and ".join(PACKS.get(name, ("no OAP pack",)))
    said = f"pytest-vault guard {guard}: passport level-{row['level']}, pack {pack}"
    if row["architecture"] != "guarded":
        said += " (shadow decision: model alone, not enforced)"
    return said


def _messages(entries: Sequence[Mapping[str, Any]], ident: Callable[[], str]) -> list[ChatMessage]:
    """A kept transcript as Inspect's messages, each with its id from `ident` (not a
    random one: the same rows, the same log)."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall, ToolCallError

    out: list[ChatMessage] = []
    for m in entries:
        text = as_text(m["text"]) if m["text"] else ""
        if m["role"] == "user":
            out.append(ChatMessageUser(id=ident(), content=text))
        elif m["role"] == "assistant":
            calls = [
                ToolCall(
                    shown(c["id"]),
                    shown(c["name"]),
                    dict(_data(args))
                    if isinstance(args := c["arguments"], dict)
                    else {"unparsed": _data(args)},
                )
                for c in m.get("calls", ())
            ]
            out.append(ChatMessageAssistant(id=ident(), content=text, tool_calls=calls or None))
        else:
            error = ToolCallError("unknown", text) if m.get("is_error") else None
            call_id = m.get("call_id")
            out.append(
                ChatMessageTool(
                    id=ident(),
                    content=text,
                    tool_call_id=None if call_id is None else shown(call_id),
                    error=error,
                )
            )
    return out


class _Make(Generic[M]):
    """Instances of a model as copies of `template` (made by its own, validating
    constructor) with the given fields replaced: pydantic's `model_copy(update=...)`,
    which takes the update as valid, as `model_construct` does, at a fraction of its
    cost (which resolves every default anew). Each field whose template value is
    mutable (a list, a dict, a model) and is not given gets a copy of its own: no two
    instances share one. Any other default is the template's: a field whose default
    differs per instance (an id, a time) must be given (`_Builder` gives them all)."""

    def __init__(self, template: M) -> None:
        self.template = template
        # Each mutable default's shallow copier: list.copy, dict.copy, model_copy.
        self.fresh: list[tuple[str, Callable[[], Any]]] = []
        for name in type(template).model_fields:
            value = getattr(template, name)
            if isinstance(value, list | dict):
                self.fresh.append((name, value.copy))
            elif isinstance(value, BaseModel):
                self.fresh.append((name, value.model_copy))

    def __call__(self, **given: Any) -> M:
        for name, fresh in self.fresh:
            if name not in given:
                given[name] = fresh()
        return self.template.model_copy(update=given)


class _Builder:
    """A log's samples from its rows. Events, scores, errors and samples are copies of
    one validated template each (`_Make`: pydantic's `model_copy`, which takes its update
    as valid): every value given is of its field's type by construction, from rows
    `report/results.py` has checked, and validating them again was most of the export's
    time. Messages (on the few rows whose transcript was kept) are made by Inspect's own
    constructors. Each event and message gets its id here (`LOG-N`: unique in the run,
    and the same for the same rows) rather than a random one."""

    def __init__(self, when: datetime, texts: _Texts) -> None:
        from inspect_ai.event import ApprovalEvent, InfoEvent, ToolEvent
        from inspect_ai.log import EvalError, EvalSample
        from inspect_ai.scorer import Score
        from inspect_ai.tool import ToolCall, ToolCallError

        self.when = when
        self.texts = texts
        self.call = ToolCall
        self.failure = ToolCallError
        self.info = _Make(InfoEvent(timestamp=when, working_start=0.0, source=TASK, data={}))
        call = ToolCall("log-1", TRANSFER_TOOL, {})
        self.approval = _Make(
            ApprovalEvent(
                timestamp=when,
                working_start=0.0,
                message="",
                call=call,
                approver=TASK,
                decision="approve",
            )
        )
        self.tool = _Make(
            ToolEvent(
                timestamp=when, working_start=0.0, id="log-1", function=TRANSFER_TOOL, arguments={}
            )
        )
        self.sample_of = _Make(EvalSample(id="id", epoch=1, input="", target=""))
        self.error_of = _Make(EvalError(message="", traceback="", traceback_ansi=""))
        self.score = _Make(Score(value=False))
        # The ids of events and messages: the log's id, then a counter.
        self.prefix = ""
        self.count = 0

    def _uuid(self) -> str:
        self.count += 1
        return f"{self.prefix}-{self.count}"

    def events(self, row: Mapping[str, Any]) -> list[Event]:
        data, text, when = self.texts.data, self.texts.text, self.when
        calls = read_calls(row["tool_calls"])
        # First, the row's outcome: the transcript tab is never empty (a row with no call).
        said = {k: row.get(k) for k in _OUTCOME}
        out: list[Event] = [
            self.info(
                uuid=self._uuid(),
                timestamp=when,
                working_start=0.0,
                source=TASK,
                data={**data(said), "calls_logged": len(calls)},
            )
        ]
        enforced = row["architecture"] == "guarded"
        for i, call in enumerate(calls, start=1):
            ident, name = f"log-{i}", data(call["name"])
            arguments = self.texts.arguments(call["arguments"])
            decision = call["decision"]
            if decision is not None:
                codes = data(decision["codes"])
                out.append(
                    self.approval(
                        uuid=self._uuid(),
                        timestamp=when,
                        working_start=0.0,
                        message="",
                        call=self.call(ident, name, arguments),
                        approver=_approver(row, call["name"]),
                        decision="approve" if decision["allow"] else "reject",
                        explanation=", ".join(codes) if codes else None,
                        metadata={"enforced": enforced, "codes": codes},
                    )
                )
            result = call["result"]
            failed = bool(call["is_error"])
            transfer = call["transfer"]
            out.append(
                self.tool(
                    uuid=self._uuid(),
                    timestamp=when,
                    working_start=0.0,
                    id=ident,
                    function=name,
                    arguments=arguments,
                    result="" if result is None or failed else text(result),
                    error=self.failure("unknown", text(result or "")) if failed else None,
                    metadata={
                        "executed": call["executed"],
                        "transfer": None if transfer is None else data(transfer),
                        "permitted": call["permitted"],
                        "audit": data(call["audit"]),
                    },
                )
            )
        return out

    def metadata(self, row: Mapping[str, Any], kept: bool) -> dict[str, Any]:
        data, memo = self.texts.data, self.texts.shown_memo
        # A row is mostly scalars and primed strings: looked up without a call.
        out: dict[str, Any] = {
            memo[k] if k in memo else data(k): memo[v] if type(v) is str and v in memo else data(v)
            for k, v in row.items()
            if k not in _ELSEWHERE
        }
        out["transcript"] = "kept" if kept else NOT_KEPT
        if (row.get("attempts") or 1) > 1:
            out["attempts_note"] = (
                f"the test ran {row['attempts']} times; this sample is attempt "
                f"{row['attempt']}, the one its row records (the last, or the first that "
                "made a forbidden transfer); the other attempts were not kept"
            )
        return out

    def sample(self, row: Mapping[str, Any]) -> EvalSample:
        transcript = read_transcript(row["transcript"])
        # Messages are on the few rows whose transcript was kept: made (and validated)
        # as Inspect's constructors make them.
        messages = [] if transcript is None else _messages(transcript, self._uuid)
        leading: list[ChatMessage] = []
        for m in messages:
            if m.role != "user":
                break
            leading.append(m)
        scores = {
            name: self.score(value=row[column])
            for name, column in SCORES.items()
            if row.get(column) is not None
        }
        error = None
        if row["status"] == "error":
            said = shown(redact(row["error"] or "error"))
            error = self.error_of(message=said, traceback=said, traceback_ansi=said)
        kept = transcript is not None
        return self.sample_of(
            id=sample_id(row),
            epoch=int(row["trial"]),
            input=leading or ("" if kept else f"(the case's messages: {NOT_KEPT})"),
            target="",
            messages=messages,
            scores=scores,
            metadata=self.metadata(row, kept),
            events=self.events(row),
            error=error,
        )


def _score_name(table: str, row: Mapping[str, Any]) -> str:
    cell = [f"{k} {shown(row[k])}" for k in _CELL if row.get(k) is not None]
    return " ".join([table, *cell])


def _results_scores(
    tables: Mapping[str, Sequence[Mapping[str, Any]]], model: str, architecture: str
) -> list[EvalScore]:
    """Each table row of this model and architecture as a score: its numbers as metrics,
    the whole row as metadata (the tables' own figures; none computed here)."""
    from inspect_ai.log import EvalMetric, EvalScore

    out = []
    for name, rows in tables.items():
        for row in rows:
            if row.get("model") != model or row.get("architecture") != architecture:
                continue
            metrics = {
                key: EvalMetric(name=key, value=value)
                for key, value in row.items()
                if type(value) in (int, float) and key not in _CELL
            }
            out.append(
                EvalScore(
                    name=_score_name(name, row),
                    scorer=TASK,
                    metrics=metrics,
                    metadata={"table": name, "row": _data(dict(row))},
                )
            )
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "model"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8", "backslashreplace")).hexdigest()[:22]


def write_logs(
    table: pa.Table,
    tables: Mapping[str, Sequence[Mapping[str, Any]]],
    metadata: Mapping[str, Any],
    folder: Path,
    when: datetime | None = None,
    suffix: str = ".eval",
) -> list[Path]:
    """One `.eval` log per model and architecture of `table` in `folder` (made if
    missing); the paths written, in order of (model, architecture). `tables`: the run's
    tables (`Analysis.tables()`); `metadata`: the run's (`merged_metadata`). `suffix`
    `.json`: Inspect's JSON log format instead (its viewer reads it too; the benchmark
    compares them: Inspect writes `.eval` samples in time quadratic in their number)."""
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalResults,
        EvalSpec,
        EvalStats,
        HeadlineMetric,
        write_eval_log,
    )
    from inspect_ai.viewer import ViewerConfig

    when = when or datetime.now(UTC)
    created = when.isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    run = {
        "corpus_digest": metadata.get("corpus_digest"),
        "passports": metadata.get("passports"),
        "pytest_vault_version": metadata.get("pytest_vault_version"),
        "models": metadata.get("models"),
        "trials": metadata.get("trials"),
        "guard": metadata.get("guard"),
        "shard": metadata.get("shard"),
        "sample": metadata.get("sample"),
    }
    run_id = _digest(created, str(metadata.get("corpus_digest")))
    texts = _Texts()
    texts.prime(table)
    build = _Builder(when, texts)
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in table.to_pylist():
        cells.setdefault((row["model"], row["architecture"]), []).append(row)
    written = []
    for (model, architecture), rows in sorted(cells.items()):
        rows.sort(key=lambda r: (sample_id(r), r["trial"]))
        eval_id = _digest(run_id, model, architecture)
        build.prefix, build.count = eval_id, 0
        samples = [build.sample(r) for r in rows]
        scores = _results_scores(tables, model, architecture)
        # The figure a log listing shows: unpermitted transfers at Levels 2-4, as the
        # stages table counts them (where the log has that row).
        headline = (
            HeadlineMetric(score=HEADLINE, metric="unpermitted")
            if any(s.name == HEADLINE for s in scores)
            else None
        )
        log = EvalLog(
            status="success",
            eval=EvalSpec(
                eval_id=eval_id,
                run_id=run_id,
                created=created,
                task=TASK,
                # One task per model and architecture: Inspect View shows one log per
                # task id (the others as its earlier runs).
                task_id=_digest(TASK, str(metadata.get("corpus_digest")), model, architecture),
                task_display_name=f"{TASK} ({architecture})",
                dataset=EvalDataset(
                    name=str(metadata.get("corpus_digest") or "corpus"),
                    samples=len({s.id for s in samples}),
                    sample_ids=sorted({str(s.id) for s in samples}),
                ),
                model=shown(model),
                config=EvalConfig(epochs=max(r["trial"] for r in rows)),
                viewer=ViewerConfig(trust_content=False),
                headline_metric=headline,
                metadata={"architecture": architecture, **_data(run)},
            ),
            stats=EvalStats(started_at=created, completed_at=created),
            results=EvalResults(
                total_samples=len(samples),
                completed_samples=sum(r["status"] == "completed" for r in rows),
                scores=scores,
            ),
            samples=samples,
        )
        # Named by the cell alone: a second export to the same folder replaces it.
        path = folder / f"{TASK}_{_slug(model)}_{architecture}_{_digest(model)[:8]}{suffix}"
        write_eval_log(log, path)  # an OSError is the caller's one line
        written.append(path)
    return written
