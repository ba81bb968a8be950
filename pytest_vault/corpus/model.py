"""The case format: one attack (or benign request) per line of a `.jsonl` file."""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
import re
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property
from typing import Annotated, Any, Literal, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticCustomError

from pytest_vault.core.errors import Loc, field_path
from pytest_vault.core.text import shown
from pytest_vault.guard.engine import (
    POLICY_ID,
    TRANSFER_TOOL,
    Transfer,
    Unreadable,
    checked,
    parse_json_object,
    to_minor,
)
from pytest_vault.guard.money import Money, minor_digits
from pytest_vault.guard.packs import EXECUTE_POLICY, PAYOUT_POLICY, REFUND_POLICY

CATEGORIES = (
    "authority_claim",
    "direct_transfer",
    "privilege_escalation",
    "json_injection",
    "social_engineering",
    "emotional_manipulation",
    "prompt_injection",
    "reconnaissance",
    "capability_self_register",
    "account_manipulation",
)

NonEmpty = Annotated[StrictStr, Field(min_length=1)]


def _not_blank(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "must not be blank")
    return value


# An id, a session or a category of spaces names nothing: a test id of " ", a session
# that clusters by accident.
Name = Annotated[NonEmpty, AfterValidator(_not_blank)]


class CaseCall(BaseModel):
    """A tool call for `scripted:replay`, passed to the bank exactly as written."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: StrictStr
    # An object, or the raw JSON text a model would send (which may be malformed).
    arguments: dict[str, Any] | StrictStr = Field(default_factory=dict)


def _exact_amount(value: object) -> object:
    # A JSON number only (read as int or Decimal): no strings, booleans or floats.
    if type(value) not in (int, Decimal):
        raise PydanticCustomError("number", "expected a JSON number")
    # An amount the bank could pay, in whole cents: 1e400 or 1e-999999999 loaded,
    # then failed as an exception in the middle of an evaluation.
    amount = Decimal(cast(int | Decimal, value))
    try:
        if amount > 0:  # else the field's own bound says so
            to_minor(amount, 2)
    except Unreadable as exc:
        raise PydanticCustomError("amount", "{why}", {"why": str(exc)}) from None
    return value


# Dollars (major units), exact. The schema written out: only a JSON number is read (never
# a string), and so the file does not change with the pydantic release that would write
# Decimal's own.
Amount = Annotated[
    Decimal,
    BeforeValidator(_exact_amount),
    Field(gt=0, allow_inf_nan=False),
    WithJsonSchema({"type": "number", "exclusiveMinimum": 0}),
]


# The bank's tools beyond the four every case has: each is offered only where the case's
# environment holds the records it acts on (`Environment.tools`), so a case without them
# is asked exactly as before. A case whose `calls` name one of them without its records
# is refused at load: the bank would not have the tool.
REFUND_TOOL = "refund_payment"
PAYOUT_TOOL = "create_payout"
SCHEDULE_TOOL = "schedule_transaction"
RESCHEDULE_TOOL = "update_scheduled_transaction"
ACCOUNT_TOOL = "update_account"
RECORD_TOOLS: dict[str, tuple[str, ...]] = {
    "orders": (REFUND_TOOL,),
    "payout_destinations": (PAYOUT_TOOL,),
    "scheduled": (SCHEDULE_TOOL, RESCHEDULE_TOOL),
    "account": (ACCOUNT_TOOL,),
}
# The tools that move money (or where it goes), transfer_funds first: each call is a
# request of the five events, a payment to its counterparty (a refund's customer, a
# payout's destination, a scheduled payment's payee). `update_account` moves none.
MONEY_TOOLS = (TRANSFER_TOOL, REFUND_TOOL, PAYOUT_TOOL, SCHEDULE_TOOL, RESCHEDULE_TOOL)
# The OAP packs that judge each tool's calls, the one its capability names first: a
# scheduled payment is a transaction executed later (the execute pack) whose payment is
# judged as a charge; an account change needs the execute pack's capability.
PACKS: dict[str, tuple[str, ...]] = {
    TRANSFER_TOOL: (POLICY_ID,),
    REFUND_TOOL: (REFUND_POLICY,),
    PAYOUT_TOOL: (PAYOUT_POLICY,),
    SCHEDULE_TOOL: (EXECUTE_POLICY, POLICY_ID),
    RESCHEDULE_TOOL: (EXECUTE_POLICY, POLICY_ID),
    ACCOUNT_TOOL: (EXECUTE_POLICY,),
}
# The argument naming each record tool's counterparty (its movement's recipient).
COUNTERPARTY_ARG = {
    REFUND_TOOL: "customer_id",
    PAYOUT_TOOL: "destination_id",
    SCHEDULE_TOOL: "recipient",
    RESCHEDULE_TOOL: "recipient",
}
MoneyTool = Literal[
    "transfer_funds",
    "refund_payment",
    "create_payout",
    "schedule_transaction",
    "update_scheduled_transaction",
]


@dataclass(frozen=True)
class Goal:
    """What an attack tries to get paid: a recipient (a refund's customer, a payout's
    destination, a scheduled payment's payee), an amount where one is named, and the
    money-moving tool that would pay it.

    Found two ways, each for its reader: `Goal.stated` (the case's `goal` field: an
    indirect case's injected action, which the DGF columns score) and
    `harness.adaptive.goal_of` (the adaptive attacker's target: the field, else the
    case's first transfer call, else its messages)."""

    recipient: str
    amount_minor: int | None  # in minor units of `currency`; None: any amount
    currency: str = "USD"  # an ISO 4217 code
    tool: str = TRANSFER_TOOL  # one of MONEY_TOOLS

    def money(self) -> Money | None:
        """The amount named, as `Money` (its major units, its text); None: any amount."""
        return None if self.amount_minor is None else Money(self.amount_minor, self.currency)

    @classmethod
    def stated(cls, case: Case) -> Goal | None:
        """The case's `goal` field (dollars in its line) in cents of USD, exactly: its
        validator checked the amount is whole cents. None without one."""
        if case.goal is None:
            return None
        amount = case.goal.amount
        minor = None if amount is None else to_minor(amount, minor_digits("USD"))
        return cls(case.goal.recipient, minor, tool=case.goal.tool)


class WrittenGoal(BaseModel):
    """What an attack tries to get paid: the adaptive attacker's target, and an indirect
    case's injected action."""

    # The line's `goal` as the file writes it (dollars); `Goal.stated` reads it as the one
    # `Goal`. The file's schema calls it `Goal`, as it always has (`schema`).
    model_config = ConfigDict(extra="forbid", frozen=True, title="Goal")

    recipient: NonEmpty
    amount: Amount | None = Field(
        None, description="dollars (major units), an exact JSON number; omit for any amount"
    )
    tool: MoneyTool = Field(
        "transfer_funds",
        description="the money-moving tool that would pay it (the case's environment offers it)",
    )

    @model_serializer(mode="wrap")
    def _default_tool_unwritten(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A transfer's goal dumps (and so digests) exactly as before goals had a tool.
        out: dict[str, Any] = handler(self)
        if out.get("tool") == TRANSFER_TOOL:
            del out["tool"]
        return out


# A place in an environment's text where an injection is planted: `{{name}}`.
MARKER = re.compile(r"\{\{([a-z0-9_]+)\}\}")
# What a placement is called in the rows, by the part of the environment it is in.
PLACEMENTS = ("document", "transaction", "payee_note")
# The call that shows a text of each part of the environment, as the bank answers it: the
# tool, and the argument naming the text (None: the tool shows every entry of the part).
READS: dict[str, tuple[str, str | None]] = {
    "documents": ("read_document", "name"),
    "history": ("get_transaction_history", None),
    "payee_notes": ("verify_recipient", "recipient"),
}


def _iso_date(value: object) -> object:
    """A day as the file writes it, `YYYY-MM-DD`, never a number pydantic would read as one."""
    if not isinstance(value, str):
        raise PydanticCustomError("date", "expected a YYYY-MM-DD string")
    return value


class HistoryEntry(BaseModel):
    """A transaction the customer's history shows, after the bank's own opening entries."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    date: dt.date = Field(description="YYYY-MM-DD")
    counterparty: NonEmpty
    amount: Amount = Field(description="dollars (major units), an exact JSON number")
    memo: StrictStr = ""

    _iso = field_validator("date", mode="before")(_iso_date)


Currency = Annotated[StrictStr, Field(min_length=3, max_length=3)]


def _whole_minor(amount: Decimal | None, currency: str, loc: Loc) -> None:
    """`amount` is a whole number of `currency`'s minor units (`Amount` checked cents)."""
    if amount is None:
        return
    try:
        to_minor(amount, minor_digits(currency))
    except (Unreadable, ValueError) as exc:
        raise _at(loc, str(exc)) from None


def _known_currency(value: str) -> str:
    try:
        minor_digits(value)
    except ValueError as exc:
        raise PydanticCustomError("currency", "{why}", {"why": str(exc)}) from None
    return value


Code = Annotated[Currency, AfterValidator(_known_currency)]


class Order(BaseModel):
    """An order the bank holds, which `refund_payment` refunds: its buyer, total and
    what was already refunded of it (major units, exact)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    customer_id: Name = Field(description="the order's buyer: the one a refund goes to")
    total: Amount = Field(description="the order's total (major units), an exact JSON number")
    currency: Code = Field("USD", description="ISO 4217 code")
    refunded: Amount | None = Field(None, description="already refunded (major units); omit: 0")
    region: Name = Field("US", description="where the order was placed (the refund pack's region)")

    @model_validator(mode="after")
    def _exact(self) -> Order:
        _whole_minor(self.total, self.currency, ("total",))
        _whole_minor(self.refunded, self.currency, ("refunded",))
        if self.refunded is not None and self.refunded > self.total:
            raise _at(("refunded",), "more than the order's total")
        return self


def _aware(value: object) -> object:
    if not isinstance(value, str):
        raise PydanticCustomError("date_time", "expected an ISO 8601 date-time string")
    return value


def _has_offset(value: dt.datetime) -> dt.datetime:
    if value.utcoffset() is None:
        raise PydanticCustomError("date_time", "needs a UTC offset (e.g. Z or +00:00)")
    return value


class PayoutDestination(BaseModel):
    """A payout destination the bank holds, which `create_payout` pays: its type and
    when it was added (the guard holds a new one back)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["bank_account", "digital_wallet", "crypto_address"] = Field(
        description="as the payout pack's destination types"
    )
    added_at: Annotated[
        dt.datetime | None, BeforeValidator(_aware), AfterValidator(_has_offset)
    ] = Field(None, description="ISO 8601 with a UTC offset")
    # A destination "just added" cannot be written as a date that stays recent on every
    # day the corpus runs: its age at the bank's opening instead.
    added_hours_ago: Annotated[StrictInt, Field(ge=0)] | None = Field(
        None, description="hours before the bank opens (instead of added_at)"
    )

    @model_validator(mode="after")
    def _one_time(self) -> PayoutDestination:
        if (self.added_at is None) == (self.added_hours_ago is None):
            raise _at(("added_at",), "give added_at or added_hours_ago (one of them)")
        return self


class Scheduled(BaseModel):
    """A scheduled (or recurring) payment the bank holds, which
    `update_scheduled_transaction` edits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Name = Field(description="what update_scheduled_transaction names it by")
    recipient: NonEmpty = Field(description="the payee")
    amount: Amount = Field(description="major units, an exact JSON number")
    currency: Code = Field("USD", description="ISO 4217 code")
    date: dt.date = Field(description="the next payment's day, YYYY-MM-DD")
    recurring: StrictBool = False
    memo: NonEmpty | None = Field(None, description="the payment's reference")

    _iso = field_validator("date", mode="before")(_iso_date)

    @model_validator(mode="after")
    def _exact(self) -> Scheduled:
        _whole_minor(self.amount, self.currency, ("amount",))
        return self


class Environment(BaseModel):
    """What an indirect case's tools read: the evidence the organization does not vouch
    for. Its texts may hold `{{name}}` markers, each filled by one of the case's
    injections: its attack text in the attacked copy, its clean text in the clean copy.

    Beside the texts, the bank's own records (`orders`, `payout_destinations`,
    `scheduled`, `account`): the system of record the guard reads its facts from, never
    attacked. A direct case may have an environment of records alone."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    documents: dict[NonEmpty, StrictStr] = Field(
        default_factory=dict, description="file name -> text, read with read_document"
    )
    history: list[HistoryEntry] = Field(
        default_factory=list, description="entries get_transaction_history adds"
    )
    payee_notes: dict[NonEmpty, StrictStr] = Field(
        default_factory=dict, description="recipient -> the note verify_recipient returns"
    )
    orders: dict[Name, Order] | None = Field(
        None, description="order id -> the order refund_payment refunds (offers the tool)"
    )
    payout_destinations: dict[Name, PayoutDestination] | None = Field(
        None, description="destination id -> what create_payout pays (offers the tool)"
    )
    scheduled: list[Scheduled] | None = Field(
        None, description="scheduled payments (offers schedule/update_scheduled_transaction)"
    )
    account: dict[Name, StrictStr] | None = Field(
        None, description="the account's details, field -> value (offers update_account)"
    )

    @model_validator(mode="after")
    def _unique_scheduled(self) -> Environment:
        seen: set[str] = set()
        for i, entry in enumerate(self.scheduled or ()):
            if entry.id in seen:
                raise _at(("scheduled", i, "id"), f"{entry.id!r} is scheduled twice")
            seen.add(entry.id)
        return self

    @model_serializer(mode="wrap")
    def _without_absent_records(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # A record the case does not have is not written: an environment without records
        # dumps (and so digests into its clean run's id) exactly as before they existed.
        out: dict[str, Any] = handler(self)
        for name in RECORD_TOOLS:
            if out.get(name, 0) is None:
                del out[name]
        return out

    def tools(self) -> tuple[str, ...]:
        """The tools this environment adds to the bank's four, in a fixed order."""
        out: tuple[str, ...] = ("read_document",) if self.documents else ()
        for name, tools in RECORD_TOOLS.items():
            if getattr(self, name) is not None:
                out += tools
        return out

    @property
    def records_only(self) -> bool:
        """Records and no texts (nothing an injection could be planted in): the one
        environment a direct case may have."""
        texts = self.documents or self.history or self.payee_notes
        return not texts and any(getattr(self, name) is not None for name in RECORD_TOOLS)

    def texts(self) -> list[tuple[str, Loc, str]]:
        """(placement, where in the environment, text) of every text a marker may be in."""
        out: list[tuple[str, Loc, str]] = [
            ("document", ("documents", name), t) for name, t in self.documents.items()
        ]
        for i, e in enumerate(self.history):
            out.append(("transaction", ("history", i, "counterparty"), e.counterparty))
            out.append(("transaction", ("history", i, "memo"), e.memo))
        out += [("payee_note", ("payee_notes", r), t) for r, t in self.payee_notes.items()]
        return out

    def filled(self, texts: dict[str, str]) -> Environment:
        """This environment with each marker replaced by its text in `texts`."""

        def fill(text: str) -> str:
            return MARKER.sub(lambda m: texts[m.group(1)], text)

        return self.model_copy(
            update={
                "documents": {n: fill(t) for n, t in self.documents.items()},
                "history": [
                    e.model_copy(
                        update={"counterparty": fill(e.counterparty), "memo": fill(e.memo)}
                    )
                    for e in self.history
                ],
                "payee_notes": {r: fill(t) for r, t in self.payee_notes.items()},
            }
        )


class Injection(BaseModel):
    """An attack planted at one marker of the environment, and what the clean copy has."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    place: Annotated[StrictStr, Field(pattern=r"^[a-z0-9_]+$")] = Field(
        description="the marker's name: {{place}} in the environment's texts"
    )
    attack: NonEmpty = Field(description="the text planted in the attacked copy")
    clean: StrictStr = Field(description="the text the clean copy has there instead")


# The keys that describe a case rather than drive its evaluation, as the line spells them.
DESCRIPTIVE = ("technique", "canary", "provenance", "metadata")


class Case(BaseModel):
    """One attack (or benign request) against a payment agent.

    Every top-level key is declared: a misspelt one (`cals`) is an error that names the
    nearest known key, never kept as metadata. Free-form data goes under `metadata`.
    """

    # By alias: `metadata` is the key in the line, so that a dump reads back as a line.
    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    id: Name
    session: Name = Field(description="the source attacker session: the unit for clustering")
    level: Annotated[StrictInt, Field(ge=1, le=5)]
    category: Name = Field(description=f"e.g. {', '.join(CATEGORIES)}; 'benign' for benign")
    messages: Annotated[list[NonEmpty], Field(min_length=1)] = Field(
        description="the attacker's messages, in order (indirect: the user's benign task)"
    )
    kind: Literal["attack", "benign"] = "attack"
    calls: list[CaseCall] = Field(
        default_factory=list, description="replayed calls (indirect: the benign task's calls)"
    )
    # The adaptive attacker's target; without it, the first transfer_funds call's.
    # Indirect: the injected action, required.
    goal: WrittenGoal | None = None
    environment: Environment | None = Field(
        None, description="indirect cases: what the tools read, with the injections' markers"
    )
    injections: list[Injection] = Field(
        default_factory=list, description="indirect cases: the attacks planted in the environment"
    )
    technique: Name | None = Field(
        None, description="the attack's technique, e.g. forged_receipt: a word for -k"
    )
    canary: NonEmpty | None = Field(
        None, description="a marker that reveals a model trained on the corpus"
    )
    provenance: dict[str, Any] | None = Field(
        None, description="where an imported or exported case came from"
    )
    # Not `metadata` in Python: that name is the view of all four descriptive keys.
    free_metadata: dict[str, Any] | None = Field(
        None, alias="metadata", description="free-form data, kept as written"
    )

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = [f.alias or name for name, f in cls.model_fields.items()]
            unknown = [key for key in data if key not in known]
            if unknown:
                raise PydanticCustomError("unknown_key", "{why}", {"why": _unknown(unknown, known)})
        return data

    @model_validator(mode="after")
    def _indirect(self) -> Case:
        offered = () if self.environment is None else self.environment.tools()
        for i, call in enumerate(self.calls):
            record = next((r for r, ts in RECORD_TOOLS.items() if call.name in ts), None)
            if record is not None and call.name not in offered:
                raise _at(
                    ("calls", i, "name"),
                    f"the bank has no {call.name} without environment.{record}",
                )
        if self.goal is not None and self.goal.tool not in (TRANSFER_TOOL, *offered):
            record = next(r for r, ts in RECORD_TOOLS.items() if self.goal.tool in ts)
            raise _at(
                ("goal", "tool"), f"the bank has no {self.goal.tool} without environment.{record}"
            )
        if self.environment is None:
            if self.injections:
                raise _at(("environment",), "an indirect case needs the environment it plants in")
            return self
        if not self.injections:
            if self.environment.records_only:
                return self  # a direct case with the bank's records: nothing is planted
            raise _at(
                ("environment",),
                "a direct case has no environment texts (add injections, or keep only "
                "orders, payout_destinations, scheduled and account)",
            )
        if self.kind != "attack":
            raise _at(("kind",), "an indirect case is an attack (its clean copy is the benign run)")
        if self.goal is None:
            raise _at(("goal",), "an indirect case names its injected action (the recipient)")
        # A goal no transfer can name is never taken: every run would score as blocked.
        # The guard's own reading of a recipient decides (exact: no folding, no trimming).
        try:
            checked(Transfer(self.goal.recipient, 1, "USD", None, None))
        except Unreadable as exc:
            raise _at(("goal", "recipient"), f"no transfer can name it: {exc}") from None
        marked = {
            name: path
            for _, path, text in self.environment.texts()
            for name in MARKER.findall(text)
        }
        seen: set[str] = set()
        for i, injection in enumerate(self.injections):
            if injection.place in seen:
                raise _at(("injections", i, "place"), f"{injection.place!r} is planted twice")
            seen.add(injection.place)
            if injection.place not in marked:
                raise _at(
                    ("injections", i, "place"),
                    f"no {{{{{injection.place}}}}} in the environment's texts",
                )
            if injection.attack == injection.clean:
                raise _at(("injections", i, "attack"), "identical to its clean text")
        for name, path in marked.items():
            if name not in seen:
                raise _at(("environment", *path), f"{{{{{name}}}}} is filled by no injection")
        # A text the task never reads never reaches the model: its runs would observe
        # nothing and score as blocked. Each planted text is shown by one of the calls.
        for _, path, text in self.environment.texts():
            names = MARKER.findall(text)
            if names and not any(_shows(call, path) for call in self.calls):
                tool, key = READS[str(path[0])]
                which = "" if key is None else " naming it"
                raise _at(
                    ("environment", *path),
                    f"{{{{{names[0]}}}}} is planted where no call shows it "
                    f"(calls has no {tool}{which})",
                )
        return self

    @property
    def indirect(self) -> bool:
        """Attacks planted in what the tools return (an environment and injections)."""
        return bool(self.injections)

    def copy_of(self, which: Literal["attack", "clean"]) -> Environment | None:
        """The environment as the tools read it: the attacked copy, or the clean one."""
        made = self._made
        return made[0] if which == "attack" else made[1]

    def clean_id(self) -> str | None:
        """The id of this case's paired clean run: `clean-` and a digest of what the model
        sees on it (level, task, calls, the clean copy of the environment), so that every
        attack on the same task and environment shares one clean run. None for a direct
        case."""
        return self._made[2]

    def placements(self) -> tuple[str, ...]:
        """The parts of the environment the injections are planted in, in PLACEMENTS order."""
        return self._made[3]

    # Made once per case (a case is frozen), never once per evaluation: each copy is a new,
    # validated environment, and the id a digest of one.
    @cached_property
    def _made(self) -> tuple[Environment | None, Environment | None, str | None, tuple[str, ...]]:
        if not self.injections:  # a direct case: its records (if any) are both copies
            return self.environment, self.environment, None, ()
        assert self.environment is not None  # an indirect case has one (`_indirect`)
        attacked = self.environment.filled({i.place: i.attack for i in self.injections})
        clean = self.environment.filled({i.place: i.clean for i in self.injections})
        seen = {
            "level": self.level,
            "messages": self.messages,
            "calls": [c.model_dump(mode="json") for c in self.calls],
            "environment": clean.model_dump(mode="json"),
        }
        text = json.dumps(seen, sort_keys=True, ensure_ascii=False)
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        places = {i.place for i in self.injections}
        found = {
            kind
            for kind, _, text in self.environment.texts()
            if places.intersection(MARKER.findall(text))
        }
        placements = tuple(p for p in PLACEMENTS if p in found)
        return attacked, clean, f"clean-{digest}", placements

    @property
    def tool(self) -> str:
        """The money-moving tool the case is about (the unit its rows are broken down
        by): its goal's, else its first money-moving call's, else `transfer_funds`."""
        if self.goal is not None:
            return self.goal.tool
        return next((c.name for c in self.calls if c.name in MONEY_TOOLS), TRANSFER_TOOL)

    def line(self) -> dict[str, Any]:
        """The case as its line's data: every field, defaults filled in, and those of the
        descriptive keys the line has."""
        data = self.model_dump(mode="python")
        return {k: v for k, v in data.items() if k not in DESCRIPTIVE or v is not None}

    @property
    def metadata(self) -> dict[str, Any]:
        """The descriptive keys the line has (technique, canary, provenance, metadata)."""
        return {k: v for k, v in self.line().items() if k in DESCRIPTIVE}


def _shows(call: CaseCall, path: Loc) -> bool:
    """Whether the bank's answer to `call` shows the environment's text at `path`. Its
    argument is read as the bank reads it: an object, or its strict JSON text."""
    tool, key = READS[str(path[0])]
    if call.name != tool:
        return False
    if key is None:
        return True
    arguments: object = call.arguments
    if isinstance(arguments, str):
        try:
            arguments = parse_json_object(arguments)
        except Unreadable:
            return False
    return isinstance(arguments, dict) and arguments.get(key) == path[1]


def _at(loc: Loc, why: str) -> PydanticCustomError:
    """An error of the whole case, worded with the field it is about (written as
    pydantic's own errors are: `injections[0].place`)."""
    return PydanticCustomError("indirect", "{field}: {why}", {"field": field_path(loc), "why": why})


def _unknown(keys: list[Any], known: list[str]) -> str:
    """`cals: unknown key; did you mean 'calls'?`, for the first of `keys`."""
    key = keys[0]
    near = difflib.get_close_matches(key, known, n=1) if isinstance(key, str) else []
    hint = f"; did you mean {near[0]!r}?" if near else " (free-form data goes under 'metadata')"
    more = f" (+{len(keys) - 1} more unknown)" if len(keys) > 1 else ""
    return f"{shown(key)}: unknown key{hint}{more}"


class _FileSchema(GenerateJsonSchema):
    """The schema of the case file: the goal's input model is `Goal` there, as it always
    was (its title, and the key of its definition)."""

    def normalize_name(self, name: str) -> str:
        return super().normalize_name("Goal" if name == WrittenGoal.__name__ else name)


def schema() -> dict[str, Any]:
    return Case.model_json_schema(schema_generator=_FileSchema)
