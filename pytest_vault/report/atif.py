"""ATIF trajectories: our results written as them, and them read as results rows that
`vault-report rescore` judges.

ATIF v1.7 is the Agent Trajectory Interchange Format of Harbor's RFC 0001
(https://github.com/harbor-framework/harbor/blob/main/rfcs/0001-trajectory-format.md),
as NVIDIA NeMo Agent Toolkit's `nat.atif` models hold it
(https://docs.nvidia.com/nemo/agent-toolkit/1.7/api/nat/atif/trajectory/index.html): a
root of `schema_version` ("ATIF-v1.7"), `session_id`, `trajectory_id`, `agent` {`name`,
`version`, `model_name`}, `steps` and `final_metrics`, `extra`; a step of `step_id`
(from 1, in order), `source` (user, agent, system), `message`, `tool_calls`
[{`tool_call_id`, `function_name`, `arguments`: an object}] and `observation`
{`results` [{`source_call_id`, `content`}]}. The models below hold only what is read:
every other field (and any a later 1.x adds) is ignored; what is read is strict.

Writing (`write_atif`): one trajectory per results row, its steps the row's kept
transcript (each user message, each model turn with its tool calls, each tool answer as
the observation of the turn that asked), else one agent step of the logged calls. Under
`extra.pytest_vault`, the row whole and its file's metadata: a run written and read back
is the same rows, so `rescore` of it says exactly what `rescore` of the Parquet file says.
Each tool call's `extra.pytest_vault` holds its logged decision, transfer and facts, for
other readers. Every text is redacted (`core.text.redacted_json`) as it is written.

Reading (`load_any`): Parquet files as `results.load` reads them; ATIF files (a `.json`
trajectory, a `.jsonl` of them, a folder of either) and Inspect `.eval` logs (through
Inspect's API, extra `inspect`) as rows. A trajectory of ours comes back as its row. A
trajectory another tool wrote (and each sample of an Inspect log) is one model-alone row
(its calls executed as recorded, nothing enforced) at `--level`, each call named as ours
through a map (`ToolMap`) and undecided: `rescore(..., was=)` judges it under the `--was`
passports (those in force when it ran) first, so that the flips are old against new. A
call that cannot be judged is logged as `rescore.UNRECORDED_TOOL` and counted not
re-judgeable, never allowed: its arguments not recorded, not an object, or not readable
by the map; its tool one the map lists as `unmapped`, or one whose name says it moves
money (`MOVES_MONEY`) that the map does not know; a record tool's call whose arguments do
not say the money it moves. An observation is kept in the log only up to `RESULT_KEPT`
characters: none is ever judged.

Bad input is one line naming the file (and line of a `.jsonl`) and the step: a major
version other than 1, a step out of order, a field of the wrong type.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any, Literal, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import (
    BaseModel,
    ConfigDict,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
)

from pytest_vault.core.errors import FileError, describe, reason
from pytest_vault.core.extras import needs
from pytest_vault.core.files import write_text
from pytest_vault.core.json import DATA, Problem, dumps
from pytest_vault.core.text import json_text, redacted_json, shown, utf8_json
from pytest_vault.core.toml import parse_toml
from pytest_vault.corpus.model import MONEY_TOOLS, PAYOUT_TOOL, REFUND_TOOL
from pytest_vault.guard.engine import TRANSFER_TOOL, Transfer, Unreadable, read_transfer
from pytest_vault.guard.money import MINOR_DIGITS, Money
from pytest_vault.harness.agent import DOCUMENT, RECORD_TOOLS, TOOLS
from pytest_vault.harness.levels import Level, passport_record
from pytest_vault.report.rescore import UNRECORDED_TOOL
from pytest_vault.report.results import (
    SCHEMA,
    SORT_KEY,
    Loaded,
    ReportError,
    ResultsError,
    attributed,
    check_table,
    each_once,
    load,
    read_transcript,
    to_table,
)

SCHEMA_VERSION = "ATIF-v1.7"
_VERSION = re.compile(r"ATIF-v([0-9]+)\.([0-9]+)")
FORMAT = 1  # of `extra.pytest_vault`: a trajectory of ours
KEY = "pytest_vault"
# An observation longer than this is not kept in the log (never judged; a 50 MB one is
# read once, and not copied).
RESULT_KEPT = 65_536
# A tool the map does not know whose name says it moves money: not re-judgeable.
MOVES_MONEY = re.compile(
    r"transfer|pay|send|refund|schedul|money|wire|withdraw|charge|remit", re.IGNORECASE
)
# Our tools and their arguments: what a map may name.
OUR_TOOLS: dict[str, frozenset[str]] = {
    t["name"]: frozenset(t["parameters"]["properties"])
    for t in (*TOOLS, DOCUMENT, *RECORD_TOOLS.values())
}
BUILT_IN_MAPS = ("agentdojo", "openai-agents")


# -- the map from another tool's names to ours ----------------------------------------------


class ToolEntry(BaseModel):
    """One of their tools as one of ours."""

    model_config = ConfigDict(extra="forbid")

    tool: StrictStr
    # Their argument -> ours; an argument not named is dropped. Absent: each as it is.
    arguments: dict[StrictStr, StrictStr] | None = None
    # Our arguments fixed for every call (an account change's `field`).
    constants: dict[StrictStr, StrictStr | StrictInt | StrictBool] = {}
    # The currency of an amount the call gives without one.
    currency: StrictStr | None = None
    # Their amount: major units (dollars, as ours) or whole minor units (cents).
    amount_unit: Literal["major", "minor"] = "major"
    # Our arguments that are text where theirs may be a number (an id).
    as_text: list[StrictStr] = []


class ToolMap(BaseModel):
    """A map file: `[tools.THEIRS]` entries, and `unmapped`: their tools that move money
    (or change the account) that no entry can carry; their calls are not re-judgeable."""

    model_config = ConfigDict(extra="forbid")

    tools: dict[StrictStr, ToolEntry] = {}
    unmapped: list[StrictStr] = []


def load_map(spec: str) -> ToolMap:
    """A built-in map by name (`BUILT_IN_MAPS`) or a TOML file; a map naming a tool or an
    argument we do not have is one `FileError` naming the file and the key."""
    if spec in BUILT_IN_MAPS:
        source = files("pytest_vault.report").joinpath("atif_maps", f"{spec}.toml")
        data, name = source.read_bytes(), f"(built-in map {spec})"
    else:
        try:
            data, name = Path(spec).read_bytes(), spec
        except (OSError, ValueError) as exc:
            raise FileError(
                f"--map {shown(spec)}: cannot read: {reason(exc)} (built in: "
                f"{', '.join(BUILT_IN_MAPS)})"
            ) from None
    mapped = parse_toml(data, shown(name), ToolMap)
    for theirs, entry in mapped.tools.items():
        where = f"{shown(name)}: tools.{shown(theirs)}"
        if entry.tool not in OUR_TOOLS:
            raise FileError(
                f"{where}.tool: {shown(repr(entry.tool))} is not one of our tools "
                f"({', '.join(OUR_TOOLS)})"
            )
        ours = OUR_TOOLS[entry.tool]
        named = [("arguments", k, v) for k, v in (entry.arguments or {}).items()]
        named += [("constants", k, k) for k in entry.constants]
        named += [("as_text", k, k) for k in entry.as_text]
        if entry.currency is not None or entry.amount_unit == "minor":
            named += [("currency", "currency", "currency"), ("amount_unit", "amount", "amount")]
        for key, at, arg in named:
            if arg not in ours:
                raise FileError(
                    f"{where}.{key}.{shown(at)}: {shown(repr(arg))} is not an argument of "
                    f"{entry.tool} ({', '.join(sorted(ours)) or 'none'})"
                )
        if entry.currency is not None and entry.currency not in MINOR_DIGITS:
            raise FileError(f"{where}.currency: unknown currency {shown(repr(entry.currency))}")
    return mapped


class _Unrecorded(NamedTuple):
    why: str


def translated(entry: ToolEntry, arguments: Mapping[str, Any]) -> dict[str, Any] | _Unrecorded:
    """Their call's arguments as ours, or why they cannot be."""
    names = entry.arguments
    out = (
        dict(arguments)
        if names is None
        else {names[k]: v for k, v in arguments.items() if k in names}
    )
    for key in entry.as_text:
        value = out.get(key)
        if type(value) is int:
            out[key] = str(value)
    if entry.currency is not None and "amount" in out and "currency" not in out:
        out["currency"] = entry.currency
    if entry.amount_unit == "minor" and "amount" in out:
        amount, currency = out["amount"], out.get("currency")
        if type(amount) is not int:
            return _Unrecorded(f"amount {shown(repr(amount))} is not whole minor units")
        if type(currency) is not str or currency not in MINOR_DIGITS:
            return _Unrecorded(f"amount in minor units of currency {shown(repr(currency))}")
        out["amount"] = Money(amount, currency).major()
    out.update(entry.constants)
    return out


# -- the trajectory, as read ----------------------------------------------------------------


class _Call(NamedTuple):
    tool_call_id: str | None
    function_name: str
    arguments: Any  # an object; text that parses as one (some writers); else unreadable


class _Step(NamedTuple):
    step_id: int
    source: str
    tool_calls: list[_Call]
    # Each tool call's observation by its id: text or content parts, as written (never
    # copied, never judged).
    results: dict[str, Any]


_SOURCES = ("system", "user", "agent")


class _BadStep(Exception):
    """`field: problem` of a step (read by hand: a pydantic model per step is most of the
    cost of reading a large file)."""


def _kind(value: object) -> str:
    return "missing" if value is None else f"not a text ({type(value).__name__})"


def _step(raw: object) -> _Step:
    """A step as read: only what is used, strictly; any other field is ignored."""
    if type(raw) is not dict:
        raise _BadStep(f"not an object ({type(raw).__name__})")
    step_id, source = raw.get("step_id"), raw.get("source")
    if type(step_id) is not int:
        raise _BadStep(f"step_id: {'missing' if step_id is None else 'not a whole number'}")
    if source not in _SOURCES:
        raise _BadStep(f"source: {shown(repr(source))} is not one of {', '.join(_SOURCES)}")
    calls: list[_Call] = []
    made = raw.get("tool_calls")
    if made is not None and type(made) is not list:
        raise _BadStep("tool_calls: not a list")
    for i, c in enumerate(made or ()):
        if type(c) is not dict:
            raise _BadStep(f"tool_calls[{i}]: not an object")
        name, ident = c.get("function_name"), c.get("tool_call_id")
        if type(name) is not str:
            raise _BadStep(f"tool_calls[{i}].function_name: {_kind(name)}")
        if ident is not None and type(ident) is not str:
            raise _BadStep(f"tool_calls[{i}].tool_call_id: {_kind(ident)}")
        calls.append(_Call(ident, name, c.get("arguments")))
    results: dict[str, Any] = {}
    seen = raw.get("observation")
    if seen is not None:
        answers = seen.get("results") if type(seen) is dict else None
        if type(answers) is not list:
            raise _BadStep("observation.results: not a list")
        for i, r in enumerate(answers):
            ident = r.get("source_call_id") if type(r) is dict else None
            if type(r) is not dict or (ident is not None and type(ident) is not str):
                raise _BadStep(
                    f"observation.results[{i}]: not an object with a text source_call_id"
                )
            if ident is not None:
                results[ident] = r.get("content")
    return _Step(step_id, source, calls, results)


class _Trajectory(NamedTuple):
    """The root, as read: only what is used (`schema_version` is `_version`'s)."""

    session_id: str | None
    trajectory_id: str | None
    agent_name: str
    model_name: str | None
    steps: list[Any]  # each read by `_step`, to name a bad one


def _root(value: dict[str, Any]) -> _Trajectory:
    """The root's fields, strictly, or a `_BadStep` naming the field."""
    texts: dict[str, str | None] = {}
    agent = value.get("agent")
    if type(agent) is not dict:
        raise _BadStep(f"agent: {'missing' if agent is None else 'not an object'}")
    for key, where, required in (
        ("session_id", value, False),
        ("trajectory_id", value, False),
        ("name", agent, True),
        ("model_name", agent, False),
    ):
        text = where.get(key)
        if (text is not None or required) and type(text) is not str:
            raise _BadStep(f"{'agent.' if where is agent else ''}{key}: {_kind(text)}")
        texts[key] = text
    steps = value.get("steps")
    if type(steps) is not list:
        raise _BadStep(f"steps: {'missing' if steps is None else 'not a list'}")
    name = texts["name"]
    assert name is not None
    return _Trajectory(
        texts["session_id"], texts["trajectory_id"], name, texts["model_name"], steps
    )


class _Ours(BaseModel):
    """`extra.pytest_vault` of a trajectory we wrote."""

    model_config = ConfigDict(extra="forbid")
    format: Literal[1]
    row: dict[StrictStr, Any]
    metadata: dict[StrictStr, Any]


class _Doc(NamedTuple):
    where: str  # FILE, or FILE:LINE of a .jsonl
    value: Any


def _documents(path: Path) -> Iterator[_Doc]:
    """The trajectories of one input, each with where it is; a file that cannot be read
    as JSON is one `ReportError`."""
    name = shown(path)
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl"))
        if not found:
            raise ReportError(f"{name}: a folder with no ATIF files (.json, .jsonl)")
        for p in found:
            yield from _documents(p)
        return
    try:
        data = path.read_bytes()
    except (OSError, ValueError) as exc:
        raise ReportError(f"{name}: cannot read: {shown(reason(exc))}") from None
    if path.suffix == ".jsonl":
        for number, line in enumerate(data.split(b"\n"), 1):
            if line.strip():
                yield _Doc(f"{name}:{number}", _json(line, f"{name}:{number}"))
        return
    yield _Doc(name, _json(data, name))


def _json(data: bytes, where: str) -> Any:
    try:
        return DATA.loads(data)
    except Problem as exc:
        problem = "not valid JSON" if exc.kind == "syntax" else exc.problem
        raise ReportError(f"{where}: {shown(problem)}") from None


def _version(doc: _Doc) -> None:
    value = doc.value.get("schema_version") if type(doc.value) is dict else None
    if type(doc.value) is not dict:
        raise ReportError(f"{doc.where}: not an ATIF trajectory (a JSON object)")
    match = _VERSION.fullmatch(value) if type(value) is str else None
    if match is None:
        raise ReportError(
            f"{doc.where}: schema_version {shown(repr(value))}: not an ATIF version "
            f"(ATIF-v1.x; this reads up to {SCHEMA_VERSION})"
        )
    if match[1] != "1":
        raise ReportError(
            f"{doc.where}: schema_version {shown(value)}: major version {match[1]} is not one "
            f"this reads (ATIF-v1.x, up to {SCHEMA_VERSION})"
        )


def _ours(doc: _Doc) -> _Ours | None:
    extra = doc.value.get("extra")
    if type(extra) is not dict or KEY not in extra:
        return None
    try:
        return _Ours.model_validate(extra[KEY])
    except ValidationError as exc:
        raise ReportError(f"{doc.where}: extra.{KEY}.{describe(exc, _Ours)}") from None


class _Foreign(NamedTuple):
    where: str
    trajectory: _Trajectory
    steps: list[_Step]


def _foreign(doc: _Doc) -> _Foreign:
    try:
        trajectory = _root(doc.value)
    except _BadStep as exc:
        raise ReportError(f"{doc.where}: {exc}") from None
    steps: list[_Step] = []
    last = 0
    for i, raw in enumerate(trajectory.steps):
        try:
            step = _step(raw)
        except _BadStep as exc:
            ident = raw.get("step_id") if type(raw) is dict else None
            said = shown(ident) if type(ident) is int else f"[{i}]"
            raise ReportError(f"{doc.where}: step {said}: {exc}") from None
        if step.step_id <= last:
            raise ReportError(
                f"{doc.where}: step {step.step_id}: steps out of order (step_id "
                f"{step.step_id} after {last}; they count from 1 in turn order)"
            )
        last = step.step_id
        steps.append(step)
    return _Foreign(doc.where, trajectory, steps)


# -- another tool's trajectory as a row ----------------------------------------------------


def _result(content: Any) -> str | None:
    if content is None:
        return None
    if type(content) is not str:
        return "[an observation of content parts, not kept]"
    if len(content) > RESULT_KEPT:
        return f"[an observation of {len(content):,} characters, not kept]"
    return content


def _arguments(raw: Any) -> dict[str, Any] | _Unrecorded:
    if raw is None:
        return _Unrecorded("arguments not recorded")
    if type(raw) is str:
        try:
            raw = DATA.loads(raw)
        except Problem:
            return _Unrecorded("arguments do not parse as JSON")
    if type(raw) is not dict:
        return _Unrecorded("arguments are not a JSON object")
    return raw


def _call(name: str, arguments: Any, executed: bool, result: str | None) -> dict[str, Any]:
    """A call as the log holds it (its texts already redacted)."""
    if arguments is None:
        text = None
    else:
        try:
            text = json_text(arguments)  # the C encoder
        except TypeError:  # a Decimal (an amount made major units): exactly
            text = utf8_json(dumps(arguments))
    return {
        "name": name,
        "arguments": text,
        "executed": executed,
        "result": result,
        "is_error": None,
        "decision": None,
        "audit": None,
        "transfer": None,
        "permitted": None,
        "facts": None,
    }


# Whom a money-moving call pays, by tool (else its `recipient`), as the bank reads it.
_COUNTERPARTY = {REFUND_TOOL: "customer_id", PAYOUT_TOOL: "destination_id"}
_MONEY_KEYS = ("amount", "currency", "memo", "idempotency_key")


def _moved(tool: str, arguments: Mapping[str, Any]) -> Transfer | None:
    """The money a call moves, read as the bank reads it (`transfer_funds`' one reader,
    to the tool's counterparty); None where the arguments alone do not say."""
    money = {k: arguments[k] for k in _MONEY_KEYS if k in arguments}
    try:
        return read_transfer(
            {"recipient": arguments.get(_COUNTERPARTY.get(tool, "recipient")), **money}
        )
    except Unreadable:
        return None


@lru_cache(maxsize=4096)
def _named_money(name: str) -> bool:
    return MOVES_MONEY.search(name) is not None or name in OUR_TOOLS


def _moves_money(name: str, tool_map: ToolMap) -> bool:
    """Whether a tool the map does not know moves money: listed `unmapped`, or named so."""
    return name in tool_map.unmapped or _named_money(name)


def foreign_row(found: _Foreign, level: int, tool_map: ToolMap) -> dict[str, Any]:
    """Another tool's trajectory as one model-alone row, its calls undecided (the `--was`
    passports decide them: `_decided`)."""
    t = found.trajectory
    made: list[tuple[str, Any, str | None]] = []  # each call's tool, arguments and answer
    agent_steps = 0
    for step in found.steps:
        agent_steps += step.source == "agent"
        results = step.results
        for c in step.tool_calls:
            result = _result(results.get(c.tool_call_id)) if c.tool_call_id else None
            made.append((c.function_name, c.arguments, result))
    ident = t.trajectory_id or t.session_id or found.where
    model = t.model_name or t.agent_name
    return _row(made, ident, t.session_id or ident, model, agent_steps, level, tool_map)


def _row(
    made: list[tuple[str, Any, str | None]],
    ident: str,
    session: str,
    model: str,
    agent_steps: int,
    level: int,
    tool_map: ToolMap,
) -> dict[str, Any]:
    """Another tool's calls (each its tool, arguments and answer) as one model-alone row."""
    # Everything the row keeps, redacted in one pass (the environment read once): a secret
    # never reaches the log, nor the transfer read from it.
    ident, session, model, made = json.loads(redacted_json([ident, session, model, made]))
    calls: list[dict[str, Any]] = []
    requested = paid = False
    tool = None
    for name, arguments, result in made:
        entry = tool_map.tools.get(name)
        moves = entry is not None and entry.tool in MONEY_TOOLS
        said: dict[str, Any] | _Unrecorded
        if entry is None:
            if _moves_money(name, tool_map):
                said, moves = _Unrecorded("a tool the map does not know"), True
            else:  # a tool that moves nothing: it keeps its place, as ours do
                calls.append(_call(name, arguments, True, result))
                continue
        else:
            said = _arguments(arguments)
            if not isinstance(said, _Unrecorded):
                said = translated(entry, said)
        requested |= moves
        if isinstance(said, _Unrecorded):
            calls.append(_call(UNRECORDED_TOOL, {"tool": name, "why": said.why}, False, result))
            continue
        assert entry is not None
        moved = _moved(entry.tool, said) if moves else None
        if moves and moved is None and entry.tool != TRANSFER_TOOL:
            # A record tool's money the arguments do not say (a redirected scheduled
            # payment's amount is the bank's record): not judged on a guess.
            why = {"tool": name, "why": "the money it moves is not in its arguments"}
            calls.append(_call(UNRECORDED_TOOL, why, False, result))
            continue
        # Model-alone: what the bank can read executes (an unreadable transfer_funds
        # never does: the guard's denial of it is the run's decision, as ours).
        executed = moved is not None or not moves
        paid |= moves and executed
        tool = tool or (entry.tool if moves else None)
        call = _call(entry.tool, said, executed, result)
        call["transfer"] = None if moved is None else moved.to_dict()
        calls.append(call)
    return {
        "attack_id": ident,
        "session": session,
        "level": level,
        "category": "imported",
        "tool": tool or TRANSFER_TOOL,
        "kind": "attack",
        "track": "B",
        "architecture": "model",
        "model": model,
        "trial": 1,
        "attempts": 1,
        "attempt": 1,
        "requested": requested,
        "paid": paid,
        "paid_allowlisted": False,
        "unpermitted": False,
        "violation": False,
        "status": "completed",
        "steps": agent_steps,
        "tool_calls": calls,
    }


# -- reading inputs --------------------------------------------------------------------------


def is_parquet(path: Path) -> bool:
    """A results file by its extension, else by its first bytes (Parquet's magic)."""
    if path.suffix == ".parquet":
        return True
    if path.is_dir() or path.suffix in (".json", ".jsonl", ".eval"):
        return False
    try:
        with path.open("rb") as file:
            head = file.read(4)
    except (OSError, ValueError):
        return True  # results.load says why it cannot be read, as it always has
    if head == b"PAR1":
        return True
    if head.lstrip()[:1] == b"{":
        return False
    raise ReportError(
        f"{shown(path)}: neither a results file (.parquet) nor ATIF (.json, .jsonl, or a "
        "folder of them)"
    )


class Options(NamedTuple):
    """What reading another tool's trajectories needs: the level its rows are at, the
    passports in force when it ran (their old decisions), and the map of its names."""

    level: int | None = None
    was: Mapping[int, Level] | None = None
    tool_map: ToolMap | None = None


def load_any(paths: Sequence[Path], options: Options) -> Loaded:
    """Results files and ATIF inputs read and merged (as `results.load` merges): all
    Parquet, and it is `results.load` itself."""
    if all(is_parquet(p) for p in paths):
        return load(paths)
    tables: list[pa.Table] = []
    metadata: list[dict[str, Any]] = []
    sources: list[tuple[str, int]] = []
    # The results files among the inputs merge together first, with all of
    # `results.load`'s checks across them (one sample, one corpus, each shard once).
    parquet = [p for p in paths if is_parquet(p)]
    if parquet:
        part = load(parquet)
        tables.append(part.table)
        metadata += part.metadata
        sources += part.sources
    for path in paths:
        if path in parquet:
            continue
        for table, meta, name in _read_atif(path, options):
            tables.append(table)
            metadata.append(meta)
            sources.append((name, table.num_rows))
    merged = each_once(tables, "the inputs", "a trajectory read twice, or two with one session_id")
    return Loaded(attributed(merged), metadata, sources)


def _required(where: str, what: str, options: Options) -> tuple[int, ToolMap]:
    """The level and map another tool's run is read with; one line when one is missing."""
    if options.level is None or options.was is None or options.tool_map is None:
        raise ReportError(
            f"{where}: {what} another tool wrote: --level N (the passport level to judge it "
            "at), --was DIR (the passports in force when it ran) and --map FILE (its tool "
            "names as ours) are required"
        )
    if options.level not in options.was:
        raise ReportError(f"--was: no passport for level {options.level}")
    return options.level, options.tool_map


def _read_atif(path: Path, options: Options) -> Iterator[tuple[pa.Table, dict[str, Any], str]]:
    """One input's rows: ours grouped by the metadata their run had (one entry each, as
    the Parquet file had), then another tool's rows, decided under `--was`."""
    name = shown(path)
    if path.suffix == ".eval":
        rows = _eval_rows(path, options)
        yield _decided(rows), _foreign_metadata(name, options), name
        return
    ours: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    foreign: list[dict[str, Any]] = []
    for doc in _documents(path):
        _version(doc)
        mine = _ours(doc)
        if mine is not None:
            key = json.dumps(mine.metadata, sort_keys=True)
            ours.setdefault(key, (mine.metadata, []))[1].append(mine.row)
            continue
        found = _foreign(doc)
        level, tool_map = _required(doc.where, "a trajectory", options)
        foreign.append(foreign_row(found, level, tool_map))
    for meta, rows in ours.values():
        try:
            table = check_table(to_table(rows))
        except ResultsError as exc:
            row = "" if exc.row is None else f" (trajectory {exc.row + 1})"
            raise ReportError(f"{name}{row}: extra.{KEY}.row: {exc}") from None
        order = pc.sort_indices(table, sort_keys=[(k, "ascending") for k in SORT_KEY])
        yield table.take(order), meta, name
    if foreign:
        assert options.was is not None
        yield _decided(foreign), _foreign_metadata(name, options), name


def _decided(rows: list[dict[str, Any]]) -> pa.Table:
    """Another tool's rows as a checked table: their calls undecided, until `rescore`
    judges them under `--was` first (`rescore.rescore(..., was=)`)."""
    try:
        return check_table(_table(rows))
    except ResultsError as exc:  # a value no results column holds
        raise ReportError(f"a trajectory another tool wrote: {exc}") from None


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    """Rows as a results table: by Arrow at once, else (a lone surrogate, which UTF-8
    cannot hold) as `to_table` stores each text."""
    try:
        return pa.Table.from_pylist(rows, schema=SCHEMA)
    except (pa.ArrowException, UnicodeError):
        return to_table(rows)


def _eval_rows(path: Path, options: Options) -> list[dict[str, Any]]:
    """An Inspect `.eval` log (another tool's run, read through Inspect's API: its file
    format is not frozen) as rows: one per sample and epoch, its calls its `ToolEvent`s
    (function and arguments), its steps its model events."""
    name = shown(path)
    problem = needs("inspect_ai", "inspect", f"{name}: reading an Inspect log")
    if problem is not None:
        raise ReportError(problem)
    level, tool_map = _required(name, "an Inspect log", options)
    from inspect_ai.log import read_eval_log

    try:
        log = read_eval_log(str(path))
    except Exception as exc:  # noqa: BLE001 - whatever Inspect raises: one line
        said = reason(exc) if isinstance(exc, OSError | ValueError) else type(exc).__name__
        raise ReportError(f"{name}: cannot read as an Inspect log: {shown(said)}") from None
    rows = []
    for sample in log.samples or []:
        made: list[tuple[str, Any, str | None]] = []
        steps = 0
        for event in sample.events:
            if event.event == "model":
                steps += 1
            elif event.event == "tool":
                result = event.result if type(event.result) is str else None
                made.append((event.function, event.arguments, _result(result)))
        ident = f"{sample.id}:{sample.epoch}"
        rows.append(_row(made, ident, str(sample.id), log.eval.model, steps, level, tool_map))
    return rows


def _foreign_metadata(name: str, options: Options) -> dict[str, Any]:
    assert options.was is not None
    return {
        "atif": {"source": name, "level": options.level},
        "passports": passport_record(options.was),
    }


# -- writing --------------------------------------------------------------------------------


def _steps(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The row's kept transcript as steps (else one agent step of its logged calls), each
    call with its logged decision under `extra.pytest_vault` where the transcript's calls
    are the log's, in order."""
    log: list[dict[str, Any]] = row["tool_calls"]
    entries = read_transcript(row["transcript"])
    steps: list[dict[str, Any]] = []
    if entries is None:
        if log:
            calls = [
                {"id": f"call-{i + 1}", "name": c["name"], "arguments": _value(c["arguments"])}
                for i, c in enumerate(log)
            ]
            agent = _agent_step("", calls, log, row["model"])
            agent["observation"] = {
                "results": [
                    {"source_call_id": f"call-{i + 1}", "content": c["result"]}
                    for i, c in enumerate(log)
                    if c["result"] is not None
                ]
            }
            steps.append(agent)
        return _numbered(steps)
    made = [c for e in entries for c in e.get("calls", [])]
    same = [c["name"] for c in made] == [c["name"] for c in log]
    at = 0
    last: dict[str, Any] | None = None
    for e in entries:
        if e["role"] == "user":
            steps.append({"source": "user", "message": e["text"]})
        elif e["role"] == "assistant":
            made_calls: list[Any] = list(e.get("calls", []))
            logged = log[at : at + len(made_calls)] if same else None
            at += len(made_calls)
            last = _agent_step(e["text"], made_calls, logged, row["model"])
            steps.append(last)
        else:
            result: dict[str, Any] = {"source_call_id": e.get("call_id"), "content": e["text"]}
            if e.get("is_error"):
                result["extra"] = {KEY: {"is_error": True}}
            if last is None:  # a tool answer before any turn: a system step of its own
                steps.append(
                    {"source": "system", "message": "", "observation": {"results": [result]}}
                )
            else:
                last.setdefault("observation", {"results": []})["results"].append(result)
    return _numbered(steps)


def _agent_step(
    text: str,
    calls: Sequence[Mapping[str, Any]],
    logged: Sequence[Mapping[str, Any]] | None,
    model: str,
) -> dict[str, Any]:
    step: dict[str, Any] = {"source": "agent", "message": text, "model_name": model}
    if not calls:
        return step
    out = []
    for i, c in enumerate(calls):
        arguments = c["arguments"]
        call: dict[str, Any] = {
            "tool_call_id": c["id"],
            "function_name": c["name"],
            "arguments": arguments if type(arguments) is dict else {},
        }
        ours: dict[str, Any] = {}
        if type(arguments) is not dict:  # the model's text, whole: ATIF wants an object
            ours["arguments_as_sent"] = arguments
        if logged is not None:
            entry = logged[i]
            ours |= {
                k: entry[k]
                for k in ("executed", "decision", "audit", "transfer", "permitted", "facts")
            }
        if ours:
            call["extra"] = {KEY: ours}
        out.append(call)
    step["tool_calls"] = out
    return step


def _value(text: str | None) -> Any:
    """A logged call's arguments (their JSON text) as the value the model sent."""
    return None if text is None else json.loads(text)


def _numbered(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"step_id": i, **s} for i, s in enumerate(steps, 1)]


def trajectory(row: Mapping[str, Any], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A results row (as `to_pylist` gives it) as one ATIF trajectory."""
    from pytest_vault import __version__

    ident = ":".join(str(row[k]) for k in ("attack_id", "model", "track", "architecture", "trial"))
    steps = _steps(row)
    final = {
        "total_prompt_tokens": row["input_tokens"],
        "total_completion_tokens": row["output_tokens"],
        "total_cost_usd": row["cost_usd"],
        "total_steps": len(steps),
    }
    return {
        "schema_version": SCHEMA_VERSION,
        "session_id": ident,
        "agent": {"name": "pytest-vault", "version": __version__, "model_name": row["model"]},
        "steps": steps,
        "final_metrics": {k: v for k, v in final.items() if v is not None},
        "extra": {KEY: {"format": FORMAT, "row": dict(row), "metadata": dict(metadata)}},
    }


def write_atif(loaded: Loaded, folder: Path) -> None:
    """Every row of `loaded` as a trajectory file in `folder` (`000001.json`, ... in the
    rows' order), each written atomically and redacted."""
    folder.mkdir(parents=True, exist_ok=True)
    width = max(6, len(str(loaded.table.num_rows)))
    n = 0
    start = 0
    for (_name, count), meta in zip(loaded.sources, loaded.metadata, strict=True):
        part = loaded.table.slice(start, count)
        start += count
        for row in part.to_pylist():
            n += 1
            write_text(folder / f"{n:0{width}d}.json", redacted_json(trajectory(row, meta)) + "\n")
