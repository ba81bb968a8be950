"""A logged tool call, typed once: from the bank's log through the run's rows to the
results file's `tool_calls` column, and back.

`Call` is the shape of a logged call, field for field the Arrow struct of the column
(`arrow_types`, beside it): the bank's live record makes one (`bank.CallRecord.call`),
the results row holds a log as a tuple of them (`events.row`), and the results writer
hands the tuples to Arrow as they are. A table gives each call back as a dict of the same
fields (`as_dict` makes that form of a `Call`; `Call.of` reads it); `from_arrow` reads a
column back as calls. Tuples, not dicts: a log is hashable, so the run keeps one copy of
equal logs (`plugin/rows.py`), and it is a quarter of a dict's size.

A value stored is what a UTF-8 column can hold, and what the run's JSON text of a log
read back gave before the log was typed: every string redacted (`core.text.redacted`),
a lone surrogate as its backslash escape (`core.text.stored`), the arguments as their
exact JSON text (a lone surrogate as its `\\uXXXX` escape).

Under pytest-xdist a log crosses to the controller as plain nested tuples (`sent`,
`received`): no names, no JSON, what execnet carries.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pytest_vault.core.text import json_text, redacted, stored, utf8_json, valid_utf8

if TYPE_CHECKING:
    import pyarrow as pa

    from pytest_vault.harness.bank import CallRecord


class CallDecision(NamedTuple):
    """A guard's decision on a call (`decision`, `audit`): allowed, and its reason codes."""

    allow: bool
    codes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"allow": self.allow, "codes": list(self.codes)}


class CallTransfer(NamedTuple):
    """The transfer a `transfer_funds` call asked for, as the guard normalized it."""

    recipient: str
    amount_minor: int  # >= 1
    currency: str
    memo: str | None
    idempotency_key: str | None


class Call(NamedTuple):
    """One logged tool call, in the bank's order of its fields."""

    name: str
    # The JSON text of the arguments as the bank logged them (a model's raw text is a
    # JSON string, kept whole, however malformed); None: none.
    arguments: str | None
    executed: bool
    result: str | None
    is_error: bool | None
    # transfer_funds only: the guard's decision (enforced when guarded, what it would
    # have decided when model-alone), the audit of an executed transfer, the normalized
    # transfer when readable, and whether the passport permits its recipient (set with
    # the transfer).
    decision: CallDecision | None = None
    audit: CallDecision | None = None
    transfer: CallTransfer | None = None
    permitted: bool | None = None
    # A record tool's call only (refund_payment, create_payout, ...): the JSON text of
    # the facts its guards read for it (`bank.CallRecord.facts`: a list of {"kind",
    # "key", "record"}, a record null where the bank had none); None for the other
    # tools, and in files from before it.
    facts: str | None = None

    @classmethod
    def of(cls, call: Mapping[str, Any]) -> Call:
        """A table's call (a dict of these fields, as `to_pylist` gives it) as a `Call`."""
        decision, audit, transfer = call["decision"], call["audit"], call["transfer"]
        return cls(
            call["name"],
            call["arguments"],
            call["executed"],
            call["result"],
            call["is_error"],
            None if decision is None else CallDecision(decision["allow"], tuple(decision["codes"])),
            None if audit is None else CallDecision(audit["allow"], tuple(audit["codes"])),
            None if transfer is None else CallTransfer(**transfer),
            call["permitted"],
            call.get("facts"),
        )

    def as_dict(self) -> dict[str, Any]:
        """This call as a table gives it back (`to_pylist`): what `Call.of` reads, and
        what the readers of a table's calls (`events.forbidden`, `events.named_by`) read."""
        decision, audit, transfer = self.decision, self.audit, self.transfer
        return {
            "name": self.name,
            "arguments": self.arguments,
            "executed": self.executed,
            "result": self.result,
            "is_error": self.is_error,
            "decision": None if decision is None else decision.as_dict(),
            "audit": None if audit is None else audit.as_dict(),
            "transfer": None if transfer is None else transfer._asdict(),
            "permitted": self.permitted,
            "facts": self.facts,
        }


# A results row's `tool_calls`: the calls in the order they were made.
Log = tuple[Call, ...]


def arrow_types() -> tuple[pa.DataType, pa.DataType, pa.DataType]:
    """The Arrow types of a decision, a transfer and a call (the column's struct): each
    field's name from the tuple above, its type here. pyarrow is imported only when
    asked (the run holds its rows without it)."""
    import pyarrow as pa

    text, flag = pa.string(), pa.bool_()
    decision = pa.struct(zip(CallDecision._fields, (flag, pa.list_(text)), strict=True))
    transfer = pa.struct(
        zip(CallTransfer._fields, (text, pa.int64(), text, text, text), strict=True)
    )
    kinds = (text, text, flag, text, flag, decision, decision, transfer, flag, text)
    return decision, transfer, pa.struct(zip(Call._fields, kinds, strict=True))


def from_arrow(logs: pa.Array | pa.ChunkedArray) -> list[Log | None]:
    """A `tool_calls` column (`list<CALL>`) as each row's calls (None: a null log)."""
    return [None if log is None else tuple(map(Call.of, log)) for log in logs.to_pylist()]


# -- made from the bank's log ----------------------------------------------------------


def _text(value: str) -> str:
    """A string as the run's JSON text of a log read back gave it: a lone surrogate as
    its backslash escape (two that make a pair, written as escapes and read back as one
    character, as that character)."""
    if valid_utf8(value):
        return value
    read: str = json.loads(json_text(value))
    return stored(read)


def _arguments(value: Any) -> str | None:
    """The JSON text of a logged call's arguments, exact and valid UTF-8."""
    if value is None:
        return None
    text = json.dumps(value, ensure_ascii=False)
    if valid_utf8(text):
        return text
    # A lone surrogate: as its escape; a pair of them read back as the one character.
    return json_text(json.loads(utf8_json(text)))


def _decision(value: Mapping[str, Any] | None) -> CallDecision | None:
    if value is None:
        return None
    return CallDecision(value["allow"], tuple(map(_text, value["codes"])))


Facts = dict[tuple[str, str], dict[str, Any] | None]


def read_facts(text: str) -> Facts:
    """A call's `facts` text as each record read, by (kind, key) (None: the bank had no
    such record), or a ValueError saying what is wrong with it."""
    try:
        entries = json.loads(text)
    except ValueError:
        raise ValueError("not JSON") from None
    if type(entries) is not list:
        raise ValueError("not a list")
    out: Facts = {}
    for i, entry in enumerate(entries):
        if type(entry) is not dict or set(entry) != {"kind", "key", "record"}:
            raise ValueError(f"[{i}] is not an object of kind, key and record")
        kind, key, record = entry["kind"], entry["key"], entry["record"]
        if type(kind) is not str or type(key) is not str:
            raise ValueError(f"[{i}]: kind and key must be strings")
        if record is not None and type(record) is not dict:
            raise ValueError(f"[{i}].record: not an object or null")
        if (kind, key) in out:
            raise ValueError(f"[{i}]: {kind} {key!r} is read twice")
        out[kind, key] = record
    return out


def logged(records: Iterable[CallRecord]) -> Log:
    """The bank's log as a results row holds it: every string redacted, then stored (see
    the module's words). Read from each record's `to_dict` (the environment once)."""
    out = []
    for entry in redacted([r.to_dict() for r in records]):
        transfer = entry.get("transfer")
        memo = key = None
        if transfer is not None:
            memo, key = transfer.get("memo"), transfer.get("idempotency_key")
        out.append(
            Call(
                _text(entry["name"]),
                _arguments(entry["arguments"]),
                entry["executed"],
                _text(entry["result"]),
                entry["is_error"],
                _decision(entry.get("decision")),
                _decision(entry.get("audit")),
                None
                if transfer is None
                else CallTransfer(
                    _text(transfer["recipient"]),
                    transfer["amount_minor"],
                    _text(transfer["currency"]),
                    None if memo is None else _text(memo),
                    None if key is None else _text(key),
                ),
                entry.get("permitted") if transfer is not None else None,
                _arguments(entry.get("facts")),
            )
        )
    return tuple(out)


# -- across the xdist boundary -----------------------------------------------------------

# A call as plain tuples (execnet carries tuples, not their named kinds): its fields in
# order, a decision as (allow, codes), a transfer as its five fields, the facts' text.
Sent = tuple[Any, ...]


def sent(log: Sequence[Call]) -> tuple[Sent, ...]:
    """A log as a worker sends it to the xdist controller."""
    return tuple(
        (
            *call[:5],
            None if call.decision is None else tuple(call.decision),
            None if call.audit is None else tuple(call.audit),
            None if call.transfer is None else tuple(call.transfer),
            call.permitted,
            call.facts,
        )
        for call in log
    )


def received(log: Iterable[Sent]) -> Log:
    """A log as the xdist controller receives it (`sent`), typed again."""
    return tuple(
        Call(
            name,
            arguments,
            executed,
            result,
            is_error,
            None if decision is None else CallDecision(decision[0], tuple(decision[1])),
            None if audit is None else CallDecision(audit[0], tuple(audit[1])),
            None if transfer is None else CallTransfer(*transfer),
            permitted,
            facts,
        )
        for (
            name,
            arguments,
            executed,
            result,
            is_error,
            decision,
            audit,
            transfer,
            permitted,
            facts,
        ) in log
    )
