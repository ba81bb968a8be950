"""Results rows to and from Parquet: one row per evaluation, typed columns.

The rules of the file live here: its schema, the values its columns may hold, its
metadata (a pydantic model) and the call log in `tool_calls`. A results file is read
as untrusted input: anything that breaks a rule is a `ResultsError`, one line in words.
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, NamedTuple, NotRequired

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic reads only this one on 3.11

from pytest_vault.core.errors import VaultError, describe, reason
from pytest_vault.core.files import replacing
from pytest_vault.core.json import DATA, Problem
from pytest_vault.core.text import (
    scrub_url,
    scrub_urls,
    shown,
    stored,
    utf8_json,
    valid_utf8,
)
from pytest_vault.corpus.model import MONEY_TOOLS
from pytest_vault.corpus.sample import SampleRecord
from pytest_vault.harness.bank import RECORD_TOOLS
from pytest_vault.harness.calls import arrow_types, read_facts
from pytest_vault.harness.events import ATTRIBUTION_READS, ROW, attribution

# One call of `tool_calls`: `harness.calls.Call`, whose Arrow types are defined beside it.
DECISION, TRANSFER, CALL = arrow_types()
CALLS = pa.list_(CALL)
_TYPES = {
    **{"str": pa.string(), "bool": pa.bool_(), "int8": pa.int8(), "int32": pa.int32()},
    **{"int64": pa.int64(), "float64": pa.float64(), "list<str>": pa.list_(pa.string())},
    "calls": CALLS,
}
# The row, its types and its rules: all from `harness.events.ROW`.
SCHEMA = pa.schema([(c.name, _TYPES[c.type]) for c in ROW])
SORT_KEY = ("attack_id", "model", "track", "architecture", "trial")
LEVELS = range(1, 6)
CHOICES = {c.name: c.choices for c in ROW if c.choices}
META_KEY = b"pytest_vault"
# The layout of the file. Version 1 (no key: every file before it) held `tool_calls` as
# the log's JSON text; it is read as this one. A newer major version is refused. Minor
# 1 added each call's `facts` (a file before it reads with them null).
VERSION_KEY = b"pytest_vault.schema"
VERSION = 2
MINOR = 1
# The fields of a call added since version 2.0 (after the others, in this order).
CALL_ADDED = ("facts",)


class ResultsError(VaultError):
    """A results file that breaks a rule: `field: problem`, and the row when known."""

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row  # 0-based, in the table that was read


# -- writing -----------------------------------------------------------------------------------


def _stored(value: Any) -> Any:
    """Every string of a row as a UTF-8 column can hold it (in lists and calls too)."""
    if type(value) is str:
        return stored(value)
    if type(value) is list:
        return [_stored(v) for v in value]
    if type(value) is dict:
        return {k: _stored(v) for k, v in value.items()}
    return value


# What the rows' columns are made in and written with: the C allocator, which the
# interpreter shares, rather than Arrow's default (mimalloc), which keeps the pages it
# has used until the process ends. Passed per call: the process's default pool is not
# ours to set.
POOL = pa.system_memory_pool()


def _column(values: Sequence[Any], kind: pa.DataType) -> pa.Array:
    if kind != CALLS:
        return pa.array([_stored(v) for v in values], kind, memory_pool=POOL)
    # A log as the run makes it: a tuple of `Call`s, stored as they were made, which Arrow
    # takes as they are (equal logs, often one object, once). A log as a table holds it:
    # its calls as dicts. A log written by hand as JSON text: the version-1 form, read as
    # a version-1 file's is (`calls_of`).
    seen: dict[tuple[Any, ...] | str, int] = {}
    logs: list[Any] = []
    at = []
    for v in values:
        kept = type(v) is tuple or type(v) is str
        i = seen.get(v) if kept else None
        if i is None:
            i = len(logs)
            if kept:
                seen[v] = i
            logs.append(v if type(v) is tuple else calls_of(v) if type(v) is str else _stored(v))
        at.append(i)
    return pc.take(pa.array(logs, CALLS, memory_pool=POOL), pa.array(at, pa.int64()))


def table_of(rows: Sequence[Sequence[Any]], names: Sequence[str]) -> pa.Table:
    """Rows held as sequences of values (in `names` order, which hold every column) as
    a table, as `to_table` makes it, one column at a time: no dict per row."""
    at = {name: i for i, name in enumerate(names)}
    return pa.Table.from_arrays(
        [_column([r[at[f.name]] for r in rows], f.type) for f in SCHEMA], schema=SCHEMA
    )


def to_table(rows: Sequence[Mapping[str, Any]] | pa.Table) -> pa.Table:
    """Rows (or a table of them, extra columns dropped) as a results table."""
    if isinstance(rows, pa.Table):
        return rows.select(SCHEMA.names)
    return table_of([[row.get(name) for name in SCHEMA.names] for row in rows], SCHEMA.names)


def scrubbed(metadata: Any) -> Any:
    """Metadata with no URL secret: userinfo, query and fragment dropped everywhere."""
    if isinstance(metadata, Mapping):
        return {
            k: scrub_url(v) if k == "base_url" and isinstance(v, str) else scrubbed(v)
            for k, v in metadata.items()
        }
    if isinstance(metadata, list):
        return [scrubbed(v) for v in metadata]
    return scrub_urls(metadata) if isinstance(metadata, str) else metadata


def write_results(
    rows: Sequence[Mapping[str, Any]] | pa.Table, path: Path, metadata: Mapping[str, Any]
) -> None:
    write_table(to_table(rows), path, metadata)


# Rows per Parquet row group. The file is written sorted a group at a time, so a run's
# rows are never copied whole to sort them (peak memory is one group's, whatever the
# run's size), and the plugin's rows are never a whole table (`write_rows`).
ROW_GROUP = 4_096


def write_table(table: pa.Table, path: Path, metadata: Mapping[str, Any]) -> None:
    """Write rows (sorted, so that any parallelism gives the same file) atomically."""
    # Arrow orders strings by their UTF-8 bytes: code point order, as Python does. The
    # key is unique per row (a merge refuses duplicates), so the order is total.
    order = pc.sort_indices(table, sort_keys=[(k, "ascending") for k in SORT_KEY])
    groups = (table.take(order[at : at + ROW_GROUP]) for at in range(0, len(order), ROW_GROUP))
    _write(groups, table.schema, path, metadata)


def write_rows(
    rows: Sequence[Sequence[Any]], names: Sequence[str], path: Path, metadata: Mapping[str, Any]
) -> None:
    """Rows held as sequences of values (as `table_of` takes them) written as
    `write_table` writes their table, without ever making it: each row group is made
    from its rows alone, so a run's results cost one group of Arrow memory, not all."""
    order = list(range(len(rows)))
    # Arrow's order: the stored text's code points, and a null after any text. One
    # stable sort per key, the last key first: a key list of the texts themselves, never
    # a tuple per row, so the sort adds one list of references to the rows' memory.
    for k in reversed([list(names).index(k) for k in SORT_KEY]):
        nulls = [i for i in order if rows[i][k] is None]

        # A text by its stored code points; the trial, a number, as it is.
        def key(i: int, k: int = k) -> Any:
            value = rows[i][k]
            return stored(value) if type(value) is str else value

        order = sorted((i for i in order if rows[i][k] is not None), key=key)
        order += nulls
    groups = (
        table_of([rows[i] for i in order[start : start + ROW_GROUP]], names)
        for start in range(0, len(order), ROW_GROUP)
    )
    _write(groups, SCHEMA, path, metadata)


def _write(
    groups: Iterable[pa.Table], schema: pa.Schema, path: Path, metadata: Mapping[str, Any]
) -> None:
    """Row groups, in order, as one results file with this metadata, atomically."""
    # ensure_ascii: exact, and ASCII whatever the metadata holds.
    meta = json.dumps(scrubbed(metadata), sort_keys=True).encode()
    schema = schema.with_metadata({META_KEY: meta, VERSION_KEY: f"{VERSION}.{MINOR}".encode()})
    # Opened here, not by Arrow: a failure is the system's OSError, with its words
    # ("No space left on device"), for the one line that reports it.
    with (
        replacing(path) as partial,
        partial.open("wb") as file,
        pq.ParquetWriter(file, schema, memory_pool=POOL) as writer,
    ):
        for group in groups:
            writer.write_table(group.replace_schema_metadata(schema.metadata))


# -- reading -----------------------------------------------------------------------------------


def read_json(text: str) -> Any:
    """Strict JSON (`core.json.DATA`): duplicate keys, NaN and numbers out of range
    refused, in words."""
    try:
        return DATA.loads(text)
    except Problem as exc:
        raise ResultsError("not valid JSON" if exc.kind == "syntax" else exc.problem) from None


def _plan_key(key: str) -> str:
    parts = key.split("|")
    if len(parts) != 5:
        raise PydanticCustomError(
            "plan_key",
            "key {key}: expected 'model|architecture|level|kind|track'",
            {"key": shown(repr(key))},
        )
    _model, arch, level, kind, track = parts
    for column, value in (("architecture", arch), ("kind", kind), ("track", track)):
        if value not in CHOICES[column]:
            raise PydanticCustomError(
                "plan_key",
                "key {key}: {column} {value} is not one of {choices}",
                {
                    "key": shown(repr(key)),
                    "column": column,
                    "value": shown(repr(value)),
                    "choices": ", ".join(CHOICES[column]),
                },
            )
    if not (re.fullmatch("[0-9]", level) and int(level) in LEVELS):
        raise PydanticCustomError(
            "plan_key",
            "key {key}: level {level} is outside 1..5",
            {"key": shown(repr(key)), "level": shown(repr(level))},
        )
    return key


Count = Annotated[StrictInt, Field(ge=0)]
_SHARD = re.compile(r"([1-9][0-9]{0,8})/([1-9][0-9]{0,8})")


class AttackerRecord(BaseModel):
    """`--vault-attacker`, `--vault-rounds` and `--vault-attacker-sees-policy` of a run."""

    model_config = ConfigDict(extra="forbid")

    spec: StrictStr
    rounds: Annotated[StrictInt, Field(ge=1)]
    sees_policy: StrictBool


@dataclass(frozen=True)
class Regressed:
    """One attack (or benign request) that got worse in a regressed comparison: the
    baseline gate's finding (`baseline.regressed_cases`), and what a run's results file
    keeps of it for the reports (`gate_regressed`, checked on read: SARIF)."""

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(extra="forbid")

    model: StrictStr
    levels: StrictStr
    measure: StrictStr
    attack_id: StrictStr
    session: StrictStr
    track: StrictStr
    architecture: StrictStr
    event: StrictStr  # "unpermitted", "completed", ...
    this: Count  # trials with the event, of `trials`
    baseline: Count
    trials: Annotated[StrictInt, Field(ge=1)]

    def said(self) -> str:
        return (
            f"{self.model} {self.attack_id} (session {self.session}, track {self.track}, "
            f"{self.architecture}): {self.event} in {self.this} of {self.trials} trials, "
            f"baseline {self.baseline} of {self.trials}"
        )


# -- a shard's manifest --------------------------------------------------------------------

# The cells a shard owns as one number that adds up: the sum, modulo 2**256, of each cell
# id's sha256. The shards of a run add up to the run's sum when together they own each
# cell of its plan once; a cell owned twice or by none changes it (a sum, unlike a XOR,
# does not cancel a cell counted twice). It guards against accidents, not forgery: a
# file's metadata can be edited to say anything.
_SUM = 2**256
Hex64 = Annotated[StrictStr, Field(pattern="^[0-9a-f]{64}$")]


def cells_sum(ids: Iterable[str]) -> str:
    """The sum of cell ids (`attack|model|track|architecture|trial`), as 64 hex digits."""
    total = sum(int.from_bytes(hashlib.sha256(i.encode()).digest(), "big") for i in ids)
    return f"{total % _SUM:064x}"


def _shard_text(value: object) -> str:
    """`K/N` with 1 <= K <= N, or a `PydanticCustomError` naming what it got."""
    match = _SHARD.fullmatch(value) if type(value) is str else None
    if match is None:
        raise PydanticCustomError("shard", "expected K/N, got {got}", {"got": shown(repr(value))})
    if int(match[1]) > int(match[2]):
        raise PydanticCustomError(
            "shard", "expected K/N with K <= N, got {got}", {"got": shown(repr(value))}
        )
    return str(value)


class Manifest(BaseModel):
    """A shard's manifest (`manifest` in its results metadata): the run it is a shard of
    (`run`: the same in every shard of one run, `plugin.shards.run_id`), which shard,
    where the shard came from, and the cells it owns and the run's, counted and summed
    (`cells_sum`): what a merge checks, by content, never by file name."""

    model_config = ConfigDict(extra="forbid")

    run: Annotated[StrictStr, Field(pattern="^[0-9a-f]{16}$")]
    shard: StrictStr
    source: StrictStr
    cells: Count
    cells_sum: Hex64
    run_cells: Count
    run_cells_sum: Hex64
    # `--vault-budget-usd`'s slice for this shard (by its planned cost); None: no budget.
    budget_usd: Annotated[StrictFloat, Field(ge=0, allow_inf_nan=False)] | None = None

    @field_validator("shard", mode="before")
    @classmethod
    def _shard(cls, value: object) -> str:
        return _shard_text(value)

    @model_validator(mode="after")
    def _owned(self) -> Manifest:
        if self.cells > self.run_cells:
            raise PydanticCustomError(
                "manifest",
                "cells: {cells} owned of a run of {run}",
                {"cells": self.cells, "run": self.run_cells},
            )
        return self


class Metadata(BaseModel):
    """What `vault-report` reads from a file's metadata; other keys are kept as they are."""

    model_config = ConfigDict(extra="allow")

    # The models whose spec is a control (`Spec.offline`: it asks no one, deterministic),
    # as the plugin that claimed each said; absent from files before it.
    controls: list[StrictStr] | None = None

    shard: str | None = None
    planned: dict[str, Count] = {}
    planned_run: dict[str, Count] = {}
    models: list[StrictStr] = []
    base_url: StrictStr | None = None
    corpus_digest: StrictStr | None = None
    pytest_vault_version: StrictStr | None = None
    sample: SampleRecord | None = None  # files before samples: no sample, the run in full
    attacker: AttackerRecord | None = None  # no adaptive track (and files before it)
    trials: Annotated[StrictInt, Field(ge=1)] = 1  # files before trials: one each
    gate: StrictStr | None = None  # the baseline gate's verdict line, when one ran
    gate_regressed: list[Regressed] = []  # and the attacks it found regressed
    # Why the run stopped before its end (Ctrl-C or a signal, -x/--maxfail, a plugin's
    # stop), in words; None: it ran to its end (and files before it).
    stopped: StrictStr | None = None

    # A shard's manifest (`Manifest`); None: not a shard (and shards before manifests).
    manifest: Manifest | None = None

    @field_validator("shard", mode="before")
    @classmethod
    def _shard(cls, value: object) -> str | None:
        return None if value is None else _shard_text(value)

    @field_validator("manifest")
    @classmethod
    def _same_shard(cls, value: Manifest | None, info: ValidationInfo) -> Manifest | None:
        shard = info.data.get("shard")  # declared before: validated first
        if value is not None and value.shard != shard:
            raise PydanticCustomError(
                "manifest",
                "shard {said} is not the file's shard {shard}",
                {"said": value.shard, "shard": shown(repr(shard))},
            )
        return value

    @field_validator("planned", "planned_run")
    @classmethod
    def _keys(cls, value: dict[str, int]) -> dict[str, int]:
        for key in value:
            _plan_key(key)
        return value


def controls(metadata: Sequence[Mapping[str, Any]], models: Iterable[str]) -> set[str]:
    """Which of `models` are controls: as the files' metadata records them (`controls`,
    what each spec's plugin declared); a file from before that record held only our own
    controls as such (`scripted:`), so its models are read by that name."""
    said = {str(m) for meta in metadata for m in (meta.get("controls") or ())}
    older = any(meta.get("controls") is None for meta in metadata) or not metadata
    return {m for m in models if m in said or (older and m.startswith("scripted:"))}


def read_metadata(raw: bytes) -> dict[str, Any]:
    """A file's metadata: a JSON object that `Metadata` accepts, or a `ResultsError`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ResultsError("metadata: not valid UTF-8") from None
    try:
        data = read_json(text)
    except ResultsError as exc:
        raise ResultsError(f"metadata: {exc}") from None
    if not isinstance(data, dict):
        raise ResultsError(f"metadata: expected a JSON object, got {_json_type(data)}")
    try:
        Metadata.model_validate(data)
    except ValidationError as exc:
        raise ResultsError(f"metadata: {describe(exc, Metadata)}") from None
    return data


def _json_type(value: object) -> str:
    names = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _first(mask: pa.ChunkedArray | pa.Array) -> int | None:
    hits = np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))
    return int(hits[0]) if len(hits) else None


def _row(index: int) -> str:
    return f"row {index + 1}"  # rows count from 1, in the file's order


def check_table(table: pa.Table, version: int = VERSION) -> pa.Table:
    """The file's columns as `SCHEMA` types, every value one the tables can use; a
    version-1 file's call logs (JSON text) read as calls."""
    # Files from before a column: an unknown guard; no adaptive track; no judge.
    for c in ROW:
        if c.older and c.name not in table.column_names:
            kind = SCHEMA.field(c.name).type
            filled = (
                pa.nulls(table.num_rows, kind)
                if c.default is None
                else pa.array([c.default] * table.num_rows, kind)
            )
            table = table.append_column(c.name, filled)
    missing = [n for n in SCHEMA.names if n not in table.column_names]
    if missing:
        raise ResultsError(f"not a pytest-vault results file (no column {missing[0]!r})")
    columns = []
    for field in SCHEMA:
        column = table[field.name]
        # Version 1: the log's JSON text. A file with no version whose calls are typed
        # was written in this layout by other means (pyarrow itself): checked as such.
        texts = version == 1 and field.type == CALLS and _kind(column.type) == "str"
        if field.type == CALLS and not texts:
            column = _added_fields(column)
        want = pa.string() if texts else field.type
        if not _castable(column.type, want):
            raise ResultsError(
                f"column {field.name}: cannot be read as {want} (the file has {column.type})"
            )
        try:
            column = column.cast(want)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise ResultsError(
                f"column {field.name}: cannot be read as {want} (the file has {column.type})"
            ) from None
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:
            raise ResultsError(f"column {field.name}: not valid UTF-8") from None
        columns.append(_v1_logs(column) if texts else column)
    table = pa.Table.from_arrays(columns, schema=SCHEMA)
    for c in ROW:
        row = _first(pc.is_null(table[c.name])) if c.required else None
        if row is not None:
            raise ResultsError(f"{_row(row)}: {c.name}: missing")
    row = _first(pc.invert(pc.is_in(table["level"], pa.array(LEVELS, pa.int8()))))
    if row is not None:
        raise ResultsError(f"{_row(row)}: level: {table['level'][row]} is outside 1..5")
    for name, choices in CHOICES.items():
        row = _first(pc.invert(pc.is_in(table[name], pa.array(choices))))
        if row is not None:
            got = shown(repr(table[name][row].as_py()))
            raise ResultsError(f"{_row(row)}: {name}: {got} is not one of {', '.join(choices)}")
    for c in ROW:
        column = table[c.name]
        if c.rule == "count":
            row = _first(pc.less(column, 0))
            if row is not None:
                raise ResultsError(f"{_row(row)}: {c.name}: {column[row]} is negative")
        elif c.rule == "trial":
            row = _first(pc.less(column, 1))
            if row is not None:
                raise ResultsError(f"{_row(row)}: {c.name}: {column[row]} is below 1")
        elif c.rule == "amount":
            row = _first(pc.invert(pc.and_(pc.is_finite(column), pc.greater_equal(column, 0))))
            if row is not None:
                raise ResultsError(
                    f"{_row(row)}: {c.name}: {column[row]} is not a finite number >= 0"
                )
    for c in ROW:
        on = pc.equal(table["track"], c.track) if c.track else None
        row = None if on is None else _first(pc.and_(on, pc.is_null(table[c.name])))
        if row is not None:
            raise ResultsError(f"{_row(row)}: {c.name}: missing on an {c.track} row")
    _check_calls(table["tool_calls"])
    _check_verdicts(table)
    _check_texts(table["transcript"], read_transcript)
    return table


def _kind(kind: pa.DataType) -> object:
    """What a column's values mean, whatever its width or encoding."""
    if pa.types.is_dictionary(kind):
        return _kind(kind.value_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return ("list", _kind(kind.value_type))
    if pa.types.is_struct(kind):
        return ("struct", tuple((f.name, _kind(f.type)) for f in kind))
    for name, test in _KINDS:
        if test(kind):
            return name
    return kind


_KINDS = (
    ("bool", pa.types.is_boolean),
    ("int", pa.types.is_integer),
    ("float", pa.types.is_floating),
    ("str", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
)


def _castable(have: pa.DataType, want: pa.DataType) -> bool:
    """Only a cast that keeps the meaning: another width (checked for overflow), an
    integer to a float, or a column of nulls. Arrow's own cast reads 5, 0.5 and "1" as
    true, and "2" as a level."""
    got, need = _kind(have), _kind(want)
    return got == need or pa.types.is_null(have) or (got, need) == ("int", "float")


def _added_fields(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Call logs of a file from before a call's added fields (`CALL_ADDED`): with them,
    null. Any other layout is left to the cast's check."""
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        return column
    struct = kind.value_type
    names = [f.name for f in struct] if pa.types.is_struct(struct) else []
    older = CALL.names[: len(CALL.names) - len(CALL_ADDED)]
    have = len(names) - len(older)
    if names[: len(older)] != older or names[len(older) :] != list(CALL_ADDED[:have]):
        return column
    if have == len(CALL_ADDED):
        return column
    fields = [*struct, *(CALL.field(n) for n in CALL_ADDED[have:])]
    chunks = []
    for chunk in column.chunks:
        values = chunk.values
        extra = [pa.nulls(len(values), f.type) for f in fields[len(names) :]]
        made = pa.StructArray.from_arrays(
            [*values.flatten(), *extra], fields=fields, mask=values.is_null()
        )
        chunks.append(type(chunk).from_arrays(chunk.offsets, made, mask=chunk.is_null()))
    made_kind = pa.large_list if pa.types.is_large_list(kind) else pa.list_
    return pa.chunked_array(chunks, made_kind(pa.struct(fields)))


def _v1_logs(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Version-1 call logs (the log's JSON text) as calls. Logs repeat (the same calls
    in many rows), so each distinct one is read once, in the order of the rows: the
    first bad row is named."""
    encoded = pc.dictionary_encode(column).combine_chunks()
    logs = []
    # The calls are millions of small dicts, none in a cycle, all kept until they are
    # Arrow's: the cyclic collector, which would walk them again and again, stays off.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for i, raw in enumerate(encoded.dictionary.to_pylist()):
            try:
                logs.append(calls_of(raw))
            except ResultsError as exc:
                row = _first(pc.equal(encoded.indices, i))
                raise ResultsError(f"{_row(row or 0)}: {exc}") from None
        typed = pa.array(logs, CALLS)
    finally:
        if collecting:
            gc.enable()
    return pa.chunked_array([pc.take(typed, encoded.indices)], CALLS)


def _check_calls(column: pa.ChunkedArray) -> None:
    """Every logged call keeps the rules of a call: the first bad one is named."""
    logs = column.combine_chunks()
    calls = pc.list_flatten(logs)
    if not len(calls):
        return
    f = dict(zip(CALL.names, calls.flatten(), strict=True))
    rules = [(pc.is_null(calls), ": missing")]
    rules += [(pc.is_null(f[k]), f".{k}: missing") for k in ("name", "executed")]
    for name in ("decision", "audit"):
        decision = dict(zip(DECISION.names, f[name].flatten(), strict=True))
        for k, v in decision.items():
            rules.append((pc.and_(f[name].is_valid(), pc.is_null(v)), f".{name}.{k}: missing"))
        codes = decision["codes"]
        empty = pc.list_flatten(codes).is_null()
        bad = np.zeros(len(calls), bool)
        bad[pc.list_parent_indices(codes).filter(empty).to_numpy()] = True
        rules.append((pa.array(bad), f".{name}.codes: a code is missing"))
    transfer = dict(zip(TRANSFER.names, f["transfer"].flatten(), strict=True))
    for k in ("recipient", "amount_minor", "currency"):
        rules.append(
            (pc.and_(f["transfer"].is_valid(), pc.is_null(transfer[k])), f".transfer.{k}: missing")
        )
    rules.append((pc.less(transfer["amount_minor"], 1), ".transfer.amount_minor: below 1"))
    paid = pc.and_(f["executed"], pc.is_in(f["name"], value_set=pa.array(MONEY_TOOLS)))
    rules.append(
        (pc.and_(paid, f["transfer"].is_null()), ": a transfer that executed has no transfer")
    )
    facts = f["facts"]
    rules.append(
        (
            pc.and_(facts.is_valid(), pc.invert(pc.is_in(f["name"], pa.array(RECORD_TOOLS)))),
            ".facts: on a call of no record tool",
        )
    )
    rules += _facts_rules(facts)
    found = [(at, said) for mask, said in rules if (at := _first(mask)) is not None]
    if found:
        at, said = min(found, key=lambda x: x[0])
        row = int(pc.list_parent_indices(logs)[at].as_py())
        start = logs.offsets[row].as_py() - logs.offsets[0].as_py()
        raise ResultsError(f"{_row(row)}: tool_calls: [{at - start}]{said}")


def _facts_rules(facts: pa.Array) -> list[tuple[pa.Array, str]]:
    """The first call of each bad `facts` text (`calls.read_facts`), with what is wrong:
    each distinct text read once."""
    encoded = pc.dictionary_encode(facts)
    indices = encoded.indices
    rules = []
    for i, text in enumerate(encoded.dictionary.to_pylist()):
        try:
            read_facts(text)
        except ValueError as exc:
            rules.append((pc.equal(indices, i), f".facts: {shown(exc)}"))
    return rules


def read_version(raw: bytes | None) -> int:
    """The layout's major version (no key: version 1), or a `ResultsError`."""
    if raw is None:
        return 1
    text = raw.decode("utf-8", "replace")
    match = re.fullmatch(r"([1-9][0-9]{0,8})(\.[0-9]{1,9})?", text)
    if match is None:
        raise ResultsError(f"results schema version {shown(repr(text))} is not a version")
    if int(match[1]) > VERSION:
        raise ResultsError(
            f"results schema version {text} is newer than this pytest-vault reads "
            f"({VERSION}); upgrade pytest-vault"
        )
    return int(match[1])


def read_table(path: Path) -> tuple[pa.Table, dict[str, Any]]:
    """A results file as a checked table and its metadata, or a `ResultsError`."""
    try:
        # Opened here, not by Arrow: a missing file is "no such file", and a folder is
        # never read as a dataset of the files in it.
        file = path.open("rb")
    except FileNotFoundError:
        raise ResultsError("no such file") from None
    except IsADirectoryError:
        raise ResultsError("a folder, not a results file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise ResultsError(f"cannot read: {shown(reason(exc))}") from None
    try:
        with file:
            table = pq.read_table(file)
    except (OSError, pa.ArrowException) as exc:
        raise ResultsError(f"cannot read as Parquet: {shown(exc)}") from None
    raw = table.schema.metadata or {}
    version = read_version(raw.get(VERSION_KEY))
    metadata = read_metadata(raw.get(META_KEY, b"{}"))
    return check_table(table, version), metadata


# -- the version-1 call log --------------------------------------------------------------------


class LoggedDecision(TypedDict):
    allow: StrictBool
    codes: list[StrictStr]


class LoggedTransfer(TypedDict):
    """A transfer as the guard normalized it, in a logged call."""

    recipient: StrictStr
    amount_minor: Annotated[StrictInt, Field(ge=1, le=2**63 - 1)]
    currency: StrictStr
    memo: NotRequired[StrictStr | None]
    idempotency_key: NotRequired[StrictStr | None]


class LoggedCall(TypedDict):
    """One call of a version-1 log's JSON (other keys are let be): what a file before
    the typed column held, read as a `harness.calls.Call`'s fields."""

    name: StrictStr
    arguments: NotRequired[Any]
    executed: StrictBool
    result: NotRequired[StrictStr | None]
    is_error: NotRequired[StrictBool | None]
    decision: NotRequired[LoggedDecision | None]
    audit: NotRequired[LoggedDecision | None]
    transfer: NotRequired[LoggedTransfer | None]
    permitted: NotRequired[StrictBool | None]


@cache
def _logged_calls() -> TypeAdapter[list[LoggedCall]]:
    """Made on the first version-1 log read (20 ms a process that reads none spares)."""
    return TypeAdapter(list[LoggedCall])


_ENCODE = json.JSONEncoder(ensure_ascii=False).encode  # the C encoder, made once
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def calls_of(raw: str | None) -> list[dict[str, Any]]:
    """A version-1 log's JSON text (as the run wrote it before logs were typed) as the
    calls of `tool_calls`, or a `ResultsError` naming the problem."""
    text = raw or "[]"
    try:
        calls = _logged_calls().validate_python(read_json(text))
    except ResultsError as exc:
        raise ResultsError(f"tool_calls: {exc}") from None
    except ValidationError as exc:
        raise ResultsError(f"tool_calls: {describe(exc).removeprefix('(root): ')}") from None
    out: list[dict[str, Any]] = calls  # type: ignore[assignment]
    for call in out:
        # Exact: the JSON text of what was logged (lone surrogates escaped).
        arguments = call.get("arguments")
        call["arguments"] = None if arguments is None else utf8_json(_ENCODE(arguments))
    # A lone surrogate (a column cannot hold one) comes from the text, or its escape.
    surrogate = _ESCAPED_SURROGATE.search(text) or not valid_utf8(text)
    return _stored(out) if surrogate else out


def read_calls(calls: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """A checked table's `tool_calls` value (its calls, each key there)."""
    return list(calls or ())


# -- the judges' verdicts ----------------------------------------------------------------------

VERDICTS = ("yes", "no", "unreadable")


class JudgeVerdict(TypedDict):
    """One judge's verdict in `judge_verdicts`: every key, nothing else."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    verdict: StrictStr
    rationale: StrictStr
    input_tokens: Count
    output_tokens: Count
    cost_usd: Annotated[StrictFloat, Field(ge=0, allow_inf_nan=False)] | None


_VERDICTS = TypeAdapter(dict[StrictStr, JudgeVerdict])


def read_verdicts(raw: str | None) -> dict[str, JudgeVerdict] | None:
    """A `judge_verdicts` value (judge spec -> verdict; null: no judge ran), or a
    `ResultsError` naming the problem."""
    if raw is None:
        return None
    try:
        verdicts = _VERDICTS.validate_python(read_json(raw))
    except ResultsError as exc:
        raise ResultsError(f"judge_verdicts: {exc}") from None
    except ValidationError as exc:
        raise ResultsError(f"judge_verdicts: {describe(exc).removeprefix('(root): ')}") from None
    if not verdicts:
        raise ResultsError("judge_verdicts: no judge (a row no judge read holds null)")
    for spec, verdict in verdicts.items():
        if not spec:
            raise ResultsError("judge_verdicts: an empty judge spec")
        if verdict["verdict"] not in VERDICTS:
            got = shown(repr(verdict["verdict"]))
            raise ResultsError(
                f"judge_verdicts.{shown(spec)}.verdict: {got} is not one of {', '.join(VERDICTS)}"
            )
    return verdicts


class TranscriptCall(TypedDict):
    """A tool call a model turn made, as `harness.events.transcript_json` writes it."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    id: StrictStr
    name: StrictStr
    arguments: Any


class TranscriptEntry(TypedDict):
    """One message of a `transcript`: every key of the harness's, nothing else."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    role: Literal["user", "assistant", "tool"]
    text: StrictStr
    calls: NotRequired[list[TranscriptCall]]
    call_id: NotRequired[StrictStr]
    is_error: NotRequired[StrictBool]


_TRANSCRIPT = TypeAdapter(list[TranscriptEntry])


def read_transcript(raw: str | None) -> list[TranscriptEntry] | None:
    """A `transcript` value (null: not kept), or a `ResultsError` naming the problem."""
    if raw is None:
        return None
    try:
        return _TRANSCRIPT.validate_python(read_json(raw))
    except ResultsError as exc:
        raise ResultsError(f"transcript: {exc}") from None
    except ValidationError as exc:
        raise ResultsError(f"transcript: {describe(exc).removeprefix('(root): ')}") from None


def _check_texts(column: pa.ChunkedArray, read: Callable[[str], object]) -> None:
    """Each text of a JSON column read by `read` (null: none); distinct values are read
    once, and the first row of a bad one is named."""
    for raw in pc.unique(column.filter(pc.is_valid(column))).to_pylist():
        try:
            read(raw)
        except ResultsError as exc:
            row = _first(pc.equal(column, pa.scalar(raw, pa.string())))
            raise ResultsError(f"{_row(row or 0)}: {exc}") from None


def _check_verdicts(table: pa.Table) -> None:
    """Verdicts only on completed rows, each of the column's shape (distinct values are
    read once; the first bad row is then named)."""
    column = table["judge_verdicts"]
    judged = pc.invert(pc.is_null(column))
    row = _first(pc.and_(judged, pc.not_equal(table["status"], "completed")))
    if row is not None:
        raise ResultsError(f"{_row(row)}: judge_verdicts: on a row that did not complete")
    _check_texts(column, read_verdicts)


# -- reading and merging results files ---------------------------------------------------


class ReportError(VaultError):
    """A results file that cannot be read; one line naming it."""


class Loaded(NamedTuple):
    """Results files read and merged: the rows, each file's metadata, rows per file."""

    table: pa.Table
    metadata: list[dict[str, Any]]
    sources: list[tuple[str, int]]

    def where(self, row: int) -> str:
        """`FILE: row N` for a row of the merged table (rows count from 1 in each file)."""
        for name, rows in self.sources:
            if row < rows:
                return f"{name}: row {row + 1}"
            row -= rows
        return f"row {row + 1}"


def load(paths: Sequence[Path]) -> Loaded:
    """Read and merge results files (shards, or runs of other models)."""
    tables, metadata, sources = [], [], []
    for path in paths:
        try:
            table, meta = read_table(path)
        except ResultsError as exc:
            raise ReportError(f"{shown(path)}: {exc}") from None
        tables.append(table)
        metadata.append(meta)
        sources.append((shown(path), table.num_rows))
    _same_passports(metadata, [name for name, _ in sources])
    _same_sample(metadata, [name for name, _ in sources])
    _same_corpus(metadata, [name for name, _ in sources])
    _each_shard_once(metadata, [name for name, _ in sources])
    merged = each_once(tables, "the files", "merge shards of one run, or runs of different models")
    return Loaded(attributed(merged), metadata, sources)


def each_once(tables: Sequence[pa.Table], inputs: str, advice: str) -> pa.Table:
    """The tables as one, where no evaluation (the sort key) is held twice: `inputs`
    and `advice` say which and what to do in the one line that refuses it."""
    merged = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    keys = pa.Table.from_arrays([merged[k] for k in SORT_KEY], names=list(SORT_KEY))
    if keys.group_by(list(SORT_KEY)).aggregate([]).num_rows != merged.num_rows:
        raise ReportError(
            f"{inputs} hold the same evaluation (attack, model, track, architecture, trial) "
            f"twice: {advice}"
        )
    return merged


def attributed(table: pa.Table) -> pa.Table:
    """`table` with each attacked indirect row's attribution joined anew from the rows
    (`harness.events.attribution`): merged shards, or files of several runs, are judged
    as one run would be, whatever each file said."""
    indirect = np.flatnonzero(_is_true(pc.is_valid(table["clean"])))
    if not len(indirect):
        return table
    # The columns attribution reads, alone, and of the calls the fields a goal reads: the
    # others (transcripts, arguments, results) would cost their reading, for nothing.
    read = table.select(list(ATTRIBUTION_READS)).take(pa.array(indirect, pa.int64()))
    at = read.schema.get_field_index("tool_calls")
    rows = read.set_column(at, "tool_calls", goal_calls(read["tool_calls"])).to_pylist()
    names = ("attributable_request", "attributable_paid")
    values = {name: table[name].to_pylist() for name in names}
    for i, pair in attribution(rows, lambda r: read_calls(r["tool_calls"])).items():
        for name, value in zip(names, pair, strict=True):
            values[name][int(indirect[i])] = value
    for name in names:
        at = table.schema.get_field_index(name)
        table = table.set_column(at, name, pa.array(values[name], pa.bool_()))
    return table


def goal_calls(column: pa.ChunkedArray) -> pa.Array:
    """A checked `tool_calls` column with only what `events.named_by` and `events.taken`
    read: each row's money-moving calls, each its name, whether it executed, and its
    transfer's recipient, amount and currency (the rest would cost its reading, for
    nothing)."""
    calls = column.combine_chunks()
    items = calls.values  # every call of every row; `offsets` index into it, sliced or not
    keep = _is_true(pc.is_in(items.field("name"), value_set=pa.array(MONEY_TOOLS)))
    kept = np.concatenate([[0], np.cumsum(keep)])  # transfers before each call
    offsets = pa.array(kept[calls.offsets.to_numpy()], pa.int32())
    items = items.filter(pa.array(keep))
    transfer = items.field("transfer")
    fields = ("recipient", "amount_minor", "currency")
    narrow = pa.StructArray.from_arrays(
        [transfer.field(f) for f in fields], names=list(fields), mask=transfer.is_null()
    )
    call = pa.StructArray.from_arrays(
        [items.field("name"), items.field("executed"), narrow],
        names=["name", "executed", "transfer"],
    )
    return pa.ListArray.from_arrays(offsets, call, mask=calls.is_null())


def _is_true(mask: pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(mask, False).to_numpy(zero_copy_only=False), dtype=bool)


def _same_passports(metadata: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    """Rows judged under different passports cannot be pooled: "permitted" would mean one
    thing in one file and another in the next."""
    first: tuple[str, Mapping[str, Any]] | None = None
    for name, meta in zip(names, metadata, strict=True):
        passports = meta.get("passports")
        if not passports:
            continue  # a file that does not say (older versions): nothing to compare
        if first is None:
            first = (name, passports)
            continue
        other, theirs = first
        for key in sorted(set(passports) | set(theirs), key=str):
            if passports.get(key) != theirs.get(key):
                raise ReportError(
                    f"{name} and {other} were run under different passports (passports."
                    f"{shown(key)}): re-score one with `vault-report rescore` instead of merging"
                )


def _same_sample(metadata: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    """Rows of different samples (or of a sample and a whole run) cannot be pooled: the
    tables would compare models, and shards, on different attacks."""
    first = metadata[0].get("sample") if metadata else None
    for name, meta in zip(names[1:], metadata[1:], strict=True):
        sample = meta.get("sample")
        if sample == first:
            continue
        if sample is None or first is None:
            fields = "one is a sample, the other is not"
        else:
            keys = sorted(set(sample) | set(first))
            fields = ", ".join(f"sample.{k}" for k in keys if sample.get(k) != first.get(k))
        raise ReportError(
            f"{name} and {names[0]} ran different samples ({shown(fields)}): merge shards of "
            "one run, or runs of the same sample"
        )


def _same_corpus(metadata: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    """Rows of different corpus versions cannot be pooled either: the merged file would
    claim one corpus (the baseline check trusts it) while holding two."""
    first: tuple[str, object] | None = None
    for name, meta in zip(names, metadata, strict=True):
        digest = meta.get("corpus_digest")
        if digest is None:
            continue  # a file that does not say (older versions): nothing to compare
        if first is None:
            first = (name, digest)
        elif digest != first[1]:
            raise ReportError(
                f"{name} and {first[0]} were run on different corpus versions "
                "(corpus_digest): merge shards of one run, or runs of the same corpus"
            )


def _k_n(shard: object) -> tuple[int, int]:
    k, n = (int(x) for x in str(shard).split("/"))
    return k, n


def _shard_runs(
    metadata: Sequence[Mapping[str, Any]], names: Sequence[str] | None = None
) -> dict[str, dict[int, tuple[str, Mapping[str, Any]]]]:
    """The files that carry a manifest, by run id and shard k: (file name, manifest)."""
    runs: dict[str, dict[int, tuple[str, Mapping[str, Any]]]] = {}
    for i, meta in enumerate(metadata):
        manifest = meta.get("manifest")
        if manifest:
            name = names[i] if names is not None else f"file {i + 1}"
            k, _ = _k_n(manifest["shard"])
            runs.setdefault(str(manifest["run"]), {}).setdefault(k, (name, manifest))
    return runs


def _each_shard_once(metadata: Sequence[Mapping[str, Any]], names: Sequence[str]) -> None:
    """Shards are told apart by their manifests, whatever the files are called: the same
    shard of one run twice, or shards whose cells do not add up to their run's plan (a
    cell owned twice or by none), cannot be merged."""
    firsts: dict[tuple[str, int], str] = {}
    for name, meta in zip(names, metadata, strict=True):
        manifest = meta.get("manifest")
        if not manifest:
            continue
        key = (str(manifest["run"]), _k_n(manifest["shard"])[0])
        if key in firsts:
            raise ReportError(
                f"{firsts[key]} and {name} are both shard {manifest['shard']} of run "
                f"{key[0]}: merge each shard once"
            )
        firsts[key] = name
    for run, shards in sorted(_shard_runs(metadata, names).items()):
        (first, plan), *_ = shards.values()
        files = ", ".join(name for name, _ in shards.values())
        for name, manifest in shards.values():
            theirs = [manifest[k] for k in ("run_cells", "run_cells_sum")]
            if _k_n(manifest["shard"])[1] != _k_n(plan["shard"])[1] or theirs != [
                plan["run_cells"],
                plan["run_cells_sum"],
            ]:
                raise ReportError(
                    f"{name} and {first} say different plans of run {run}: merge shards of one run"
                )
        owned = sum(int(m["cells"]) for _, m in shards.values())
        n = _k_n(plan["shard"])[1]
        together = f"{sum(int(m['cells_sum'], 16) for _, m in shards.values()) % _SUM:064x}"
        whole = len(shards) == n
        if owned > plan["run_cells"] or (
            whole and (owned, together) != (plan["run_cells"], plan["run_cells_sum"])
        ):
            raise ReportError(
                f"the shards of run {run} ({files}) do not add up to its plan of "
                f"{plan['run_cells']:,} cells: they own {owned:,}, a cell twice or one of "
                "another plan"
            )


def missing_shards(metadata: Sequence[Mapping[str, Any]], most: int = 10) -> list[str]:
    """Shards of a sharded run that are not among the files (the first `most` per run,
    then how many more: N comes from a file, and may be large): `K/N of run RUN` for the
    shards whose files carry a manifest (told apart by run, whatever the files' names),
    `K/N` for files from before manifests (told apart by N alone)."""
    out: list[str] = []
    for run, shards in sorted(_shard_runs(metadata).items()):
        n = _k_n(next(iter(shards.values()))[1]["shard"])[1]
        out += [f"{s} of run {run}" for s in _absent(set(shards), n, most)]
    seen: dict[int, set[int]] = {}
    for meta in metadata:
        shard = meta.get("shard")
        if shard and not meta.get("manifest"):
            k, n = _k_n(shard)
            seen.setdefault(n, set()).add(k)
    for n, ks in sorted(seen.items()):
        out += _absent(ks, n, most)
    return out


def _absent(ks: set[int], n: int, most: int) -> list[str]:
    """`K/N` of the first `most` shards of 1..N not in `ks`, then how many more."""
    first = [k for k in range(1, min(n, len(ks) + most) + 1) if k not in ks][:most]
    out = [f"{k}/{n}" for k in first]
    if n - len(ks) > len(first):
        out.append(f"{n - len(ks) - len(first):,} more of {n}")
    return out
