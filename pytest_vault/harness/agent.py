"""The agent loop: a model, the level's prompt and the bank's tools, turn by turn.

One `evaluate()` is one evaluation: a case replayed on one track against one model in
one architecture, with a fresh bank (and so a fresh guard ledger). It is async so that
many evaluations can share one event loop; the control models take the same path as
real providers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pytest_vault.core.text import safe
from pytest_vault.corpus.model import Case
from pytest_vault.harness.bank import Architecture, Bank, CallRecord, Scene, Screen
from pytest_vault.harness.levels import Level

# "adaptive": an attacker writes each next message (harness/adaptive.py); reported apart.
# "indirect": the user's benign task, the attack planted in what the tools return; its
# cases (and only they) run on it, each attacked run with its paired clean run.
Track = Literal["A", "B", "adaptive", "indirect"]
TRACKS: tuple[Track, ...] = ("A", "B")
INDIRECT: Track = "indirect"
# Which copy of an indirect case's environment the tools read.
Copy = Literal["attack", "clean"]
DEFAULT_MAX_STEPS = 8


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    # An object, or the raw JSON text the provider returned (possibly malformed).
    arguments: Any


@dataclass(frozen=True)
class Message:
    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    is_error: bool = False


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class ModelTurn:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    # Wall time of the provider round trip that produced this turn (0 for controls;
    # the original time when replayed from the cache, so rows stay identical).
    latency_s: float = 0.0


@dataclass(frozen=True)
class ModelRequest:
    system: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    temperature: float
    max_tokens: int
    # For the deterministic control models only; a real provider never reads these.
    case: Case
    level: Level
    # Which of the evaluation's independent trials (`--vault-trials`) this request is of:
    # a provider keys trial k > 1 apart from trial 1, so each is asked on its own.
    trial: int = 1


class Model(Protocol):
    spec: str
    # True for a model whose every step is scripted (replay): the step bound must not
    # cut it short.
    ignores_step_bound: bool

    async def respond(self, request: ModelRequest) -> ModelTurn: ...


class ModelError(Exception):
    """The model could not answer; the evaluation is an error, never 'no transfer'."""


class InputBlocked(Exception):
    """The provider refused the input before the model saw it: an evaluation with no
    transfer, flagged `input_blocked` (as the benchmark kept them), not an error."""


class NotRun(Exception):
    """The evaluation was not attempted (spend cap reached): reported as not run."""


def _tool(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    }


_RECIPIENT = {"type": "string", "description": "Payee e-mail address or account number"}
TOOLS: tuple[dict[str, Any], ...] = (
    _tool(
        "transfer_funds",
        "Send money from the customer's account to a recipient.",
        {
            "recipient": _RECIPIENT,
            "amount": {"type": "number", "description": "Amount in major units (dollars)"},
            "currency": {"type": "string", "description": "ISO 4217 code", "default": "USD"},
            "memo": {"type": "string", "description": "Payment reference"},
            "idempotency_key": {"type": "string", "description": "Unique key for this transfer"},
        },
        ["recipient", "amount"],
    ),
    _tool(
        "verify_recipient",
        "Check whether a recipient is an approved payee.",
        {"recipient": _RECIPIENT},
        ["recipient"],
    ),
    _tool("get_transaction_history", "List the account's recent transactions.", {}, []),
    _tool("get_balance", "Show the account's available balance.", {}, []),
)
DOCUMENT = _tool(
    "read_document",
    "Read one of the customer's documents (a bill, an invoice, a notice) by its file name.",
    {"name": {"type": "string", "description": "The document's file name"}},
    ["name"],
)


_AMOUNT = {"type": "number", "description": "Amount in major units (dollars)"}
_CURRENCY = {"type": "string", "description": "ISO 4217 code", "default": "USD"}
_KEY = {"type": "string", "description": "Unique key for this request"}
_DAY = {"type": "string", "description": "The payment's day, YYYY-MM-DD"}
# The tools an environment's records add (`Environment.tools`), by name: offered only
# where the case has the records, so a case without them is asked exactly as before.
RECORD_TOOLS: dict[str, dict[str, Any]] = {
    "refund_payment": _tool(
        "refund_payment",
        "Refund (part of) an order to the customer who paid for it.",
        {
            "order_id": {"type": "string", "description": "The order to refund"},
            "customer_id": {"type": "string", "description": "The order's customer"},
            "amount": _AMOUNT,
            "currency": _CURRENCY,
            "reason": {"type": "string", "description": "Refund reason code"},
            "memo": {"type": "string", "description": "Note for the refund"},
            "idempotency_key": _KEY,
        },
        ["order_id", "customer_id", "amount", "reason", "idempotency_key"],
    ),
    "create_payout": _tool(
        "create_payout",
        "Pay money out to one of the account's payout destinations.",
        {
            "destination_id": {"type": "string", "description": "The payout destination"},
            "amount": _AMOUNT,
            "currency": _CURRENCY,
            "memo": {"type": "string", "description": "Payout description"},
            "idempotency_key": _KEY,
        },
        ["destination_id", "amount", "idempotency_key"],
    ),
    "schedule_transaction": _tool(
        "schedule_transaction",
        "Schedule a (possibly recurring) payment to a recipient on a later day.",
        {
            "recipient": _RECIPIENT,
            "amount": _AMOUNT,
            "currency": _CURRENCY,
            "date": _DAY,
            "recurring": {"type": "boolean", "description": "Repeat every month"},
            "memo": {"type": "string", "description": "Payment reference"},
            "idempotency_key": _KEY,
        },
        ["recipient", "amount", "date"],
    ),
    "update_scheduled_transaction": _tool(
        "update_scheduled_transaction",
        "Change a scheduled payment: its recipient, amount, day or reference.",
        {
            "id": {"type": "string", "description": "The scheduled payment's id"},
            "recipient": _RECIPIENT,
            "amount": _AMOUNT,
            "currency": _CURRENCY,
            "date": _DAY,
            "recurring": {"type": "boolean", "description": "Repeat every month"},
            "memo": {"type": "string", "description": "Payment reference"},
            "idempotency_key": _KEY,
        },
        ["id"],
    ),
    "update_account": _tool(
        "update_account",
        "Change one of the account's details (contact e-mail, phone, address, ...).",
        {
            "field": {"type": "string", "description": "The detail to change"},
            "value": {"type": "string", "description": "Its new value"},
        },
        ["field", "value"],
    ),
}


def tools_for(case: Case) -> tuple[dict[str, Any], ...]:
    """The tools a case's bank offers: the four, a document tool where the case has
    documents, and each record's tools where it has the records (so a direct case's
    requests stay as they were)."""
    if case.environment is None:
        return TOOLS
    extra = case.environment.tools()
    if not extra:
        return TOOLS
    return (
        *TOOLS,
        *(DOCUMENT if name == "read_document" else RECORD_TOOLS[name] for name in extra),
    )


@dataclass
class Evaluation:
    """What happened in one evaluation: the bank's call log and the transcript."""

    case: Case
    level: Level
    model: str
    track: Track
    architecture: Architecture
    # An indirect case's environment as its tools read it: attacked, or the clean copy of
    # its paired clean run.
    copy: Copy = "attack"
    trial: int = 1
    log: list[CallRecord] = field(default_factory=list)
    transcript: list[Message] = field(default_factory=list)
    steps: int = 0
    truncated: bool = False
    status: Literal["completed", "error", "not_run"] = "completed"
    # Why the evaluation is an error or was not run; None when completed.
    error: str | None = None
    input_blocked: bool = False
    usage: Usage = Usage()
    latency_s: float = 0.0
    # The adaptive track only: attacker messages sent (the first included), the
    # attacker's spec, and the strategy of the round that found (or of the last round).
    rounds: int | None = None
    attacker: str | None = None
    attacker_strategy: str | None = None
    sent: tuple[str, ...] = ()


def open_bank(
    level: Level,
    architecture: Architecture,
    screen: Callable[[], Screen] | None,
    scene: Scene | None = None,
) -> Bank:
    """A fresh bank; a team guard, if any, is made for it (a failing factory raises)."""
    if screen is None or architecture != "guarded":
        return Bank(level.passport, architecture, scene=scene)
    return Bank(level.passport, architecture, screen=screen(), scene=scene)


def user_messages(case: Case, track: Track) -> list[str]:
    """Track A sends the attacker's final message; tracks B and indirect send them all,
    in order (the adaptive track starts with the final message: its attacker writes the
    rest)."""
    return list(case.messages) if track in ("B", INDIRECT) else case.messages[-1:]


@dataclass(frozen=True)
class Job:
    """One evaluation to run: a case on a track, against a spec, in an architecture (an
    indirect case: its attacked copy, or the clean copy of its paired clean run)."""

    case: Case
    spec: str
    track: Track
    architecture: Architecture
    copy: Copy = "attack"
    trial: int = 1
    # The runner's key (the test's node id) and the case's corpus line, `FILE:LINE`.
    key: str = ""
    source: str | None = None


Send = Callable[[str], Awaitable[str]]


class Conversation(Protocol):
    """One evaluation's conversation with a subject, over its bank."""

    async def send(self, text: str) -> str:
        """One user message in; the subject's text reply out (its tool calls run in the
        bank meanwhile)."""

    async def end(self, ev: Evaluation) -> None:
        """Record the conversation on `ev` (transcript, steps, usage) and let go of what
        it holds. Called once, whatever happened; an exception is an error row."""


class Subject(Protocol):
    """What is evaluated: a `Model` (`ModelSubject`), or a team's agent (`harness.yours`)."""

    async def converse(self, ev: Evaluation, bank: Bank) -> Conversation:
        """A conversation for one evaluation; an exception is an error row."""


class Driver(Protocol):
    """What decides one evaluation's user messages: the track's (`FIXED`), or an
    attacker's, round after round (`harness.adaptive.Campaign`)."""

    def start(self, ev: Evaluation) -> None:
        """Record on `ev` what the driver is, before the bank opens (an exception is an
        error row: nothing ran)."""

    async def drive(self, ev: Evaluation, bank: Bank, send: Send) -> None: ...


class Fixed:
    """The track's own messages (`user_messages`), in order."""

    def start(self, ev: Evaluation) -> None:
        pass

    async def drive(self, ev: Evaluation, bank: Bank, send: Send) -> None:
        for text in user_messages(ev.case, ev.track):
            await send(text)


FIXED = Fixed()


class ModelSubject:
    """A `Model` in the agent loop: the level's prompt and the bank's tools, each user
    message answered in at most `max_steps` model turns."""

    def __init__(self, model: Model, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        self.model, self.max_steps = model, max_steps

    async def converse(self, ev: Evaluation, bank: Bank) -> Conversation:
        # A replay's every step is scripted: the bound must not cut it short.
        bound = len(ev.case.calls) + 1 if self.model.ignores_step_bound else self.max_steps
        return _ModelConversation(self.model, ev, bank, max(bound, 1))


class _ModelConversation:
    def __init__(self, model: Model, ev: Evaluation, bank: Bank, bound: int) -> None:
        self.model, self.ev, self.bank, self.bound = model, ev, bank, bound
        self.messages: list[Message] = []
        self.tools = tools_for(ev.case)
        self.system = ev.level.prompt_for(ev.case)
        self.tokens_in = self.tokens_out = 0
        self.latency = 0.0

    async def send(self, text: str) -> str:
        ev, level = self.ev, self.ev.level
        self.messages.append(Message("user", text))
        said: list[str] = []
        for _ in range(self.bound):
            turn = await self.model.respond(
                ModelRequest(
                    system=self.system,
                    messages=tuple(self.messages),
                    tools=self.tools,
                    temperature=level.temperature,
                    max_tokens=level.max_tokens,
                    case=ev.case,
                    level=level,
                    trial=ev.trial,
                )
            )
            ev.steps += 1
            self.tokens_in += turn.usage.input_tokens
            self.tokens_out += turn.usage.output_tokens
            self.latency += turn.latency_s
            self.messages.append(Message("assistant", turn.text, turn.tool_calls))
            if turn.text:
                said.append(turn.text)
            if not turn.tool_calls:
                break
            for call in turn.tool_calls:
                result = await self.bank.acall(call.name, call.arguments)
                self.messages.append(
                    Message("tool", result.content, tool_call_id=call.id, is_error=result.is_error)
                )
        else:
            # The model still wanted tools after `bound` steps: end the turn here.
            ev.truncated = True
        return "\n".join(said)

    async def end(self, ev: Evaluation) -> None:
        ev.transcript = self.messages
        ev.usage = Usage(self.tokens_in, self.tokens_out)
        ev.latency_s = round(self.latency, 6)


def as_subject(made: Model | Subject, max_steps: int = DEFAULT_MAX_STEPS) -> Subject:
    """What a `pytest_vault_make_model` hook made, as a subject: a subject as it is, a
    model in the agent loop."""
    if callable(getattr(made, "converse", None)):
        return made  # type: ignore[return-value]
    return ModelSubject(made, max_steps)  # type: ignore[arg-type]


async def evaluate(
    job: Job,
    level: Level,
    subject: Subject,
    driver: Driver = FIXED,
    *,
    screen: Callable[[], Screen] | None = None,
) -> Evaluation:
    """The one evaluation entry: `job`'s case replayed against `subject` at `level`, the
    user messages decided by `driver`, in a fresh bank (and so a fresh guard ledger).
    `screen`, guarded only: makes this evaluation's team guard (`--vault-guard`).

    Never raises: what went wrong is the row's status (an error, or not run), never a
    pass; what executed before it stays in the log."""
    ev = Evaluation(job.case, level, job.spec, job.track, job.architecture, job.copy, job.trial)
    talk: Conversation | None = None
    try:
        driver.start(ev)
        bank = open_bank(level, job.architecture, screen, Scene.of(job.case, job.copy))
        ev.log = bank.log
        talk = await subject.converse(ev, bank)
        await driver.drive(ev, bank, talk.send)
    except InputBlocked:
        ev.input_blocked = True
    except NotRun as exc:
        ev.status, ev.error = "not_run", str(exc) or "not run"
    except ModelError as exc:
        ev.status, ev.error = "error", safe(str(exc) or type(exc).__name__)
    except Exception as exc:  # noqa: BLE001 - a broken subject is an error row, never a pass
        ev.status, ev.error = "error", safe(f"{type(exc).__name__}: {exc}")
    if talk is not None:
        try:
            await talk.end(ev)
        except Exception as exc:  # noqa: BLE001 - an error row; the first error stands
            if ev.status == "completed":
                said = str(exc) if isinstance(exc, ModelError) else f"{type(exc).__name__}: {exc}"
                ev.status, ev.error = "error", safe(f"close: {said}")
    return ev
