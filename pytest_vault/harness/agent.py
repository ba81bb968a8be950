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


def tools_for(case: Case) -> tuple[dict[str, Any], ...]:
    """The tools a case's bank offers: the four, and a document tool where the case has
    documents (so a direct case's requests stay as they were)."""
    if case.environment is not None and case.environment.documents:
        return (*TOOLS, DOCUMENT)
    return TOOLS


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


# Drives an adaptive evaluation: given the bank and `send` (one user message in, the
# agent's text reply out), it sends the messages it decides on.
Driver = Callable[[Bank, Callable[[str], Awaitable[str]]], Awaitable[None]]


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


async def evaluate(
    case: Case,
    level: Level,
    model: Model,
    track: Track,
    architecture: Architecture,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    screen: Callable[[], Screen] | None = None,
    driver: Driver | None = None,
    copy: Copy = "attack",
    trial: int = 1,
) -> Evaluation:
    """`screen`, guarded only: makes this evaluation's team guard (`--vault-guard`).
    `driver`: the adaptive track's attacker loop, instead of the track's messages.
    `copy`: an indirect case's environment as the tools read it (its attacked copy, or
    its clean one for the paired clean run). `trial`: which of its independent trials."""
    ev = Evaluation(case, level, model.spec, track, architecture, copy, trial)
    bound = len(case.calls) + 1 if model.ignores_step_bound else max_steps
    conversation: list[Message] = []
    tools = tools_for(case)
    tokens_in = tokens_out = 0
    latency = 0.0
    try:
        bank = open_bank(level, architecture, screen, Scene.of(case, copy))
        ev.log = bank.log

        async def send(text: str) -> str:
            nonlocal tokens_in, tokens_out, latency
            conversation.append(Message("user", text))
            said: list[str] = []
            for _ in range(max(bound, 1)):
                turn = await model.respond(
                    ModelRequest(
                        system=level.system_prompt,
                        messages=tuple(conversation),
                        tools=tools,
                        temperature=level.temperature,
                        max_tokens=level.max_tokens,
                        case=case,
                        level=level,
                        trial=trial,
                    )
                )
                ev.steps += 1
                tokens_in += turn.usage.input_tokens
                tokens_out += turn.usage.output_tokens
                latency += turn.latency_s
                conversation.append(Message("assistant", turn.text, turn.tool_calls))
                if turn.text:
                    said.append(turn.text)
                if not turn.tool_calls:
                    break
                for call in turn.tool_calls:
                    result = await bank.acall(call.name, call.arguments)
                    conversation.append(
                        Message(
                            "tool", result.content, tool_call_id=call.id, is_error=result.is_error
                        )
                    )
            else:
                # The model still wanted tools after `bound` steps: end the turn here.
                ev.truncated = True
            return "\n".join(said)

        if driver is not None:
            await driver(bank, send)
        else:
            for text in user_messages(case, track):
                await send(text)
    except InputBlocked:
        ev.input_blocked = True
    except NotRun as exc:
        ev.status, ev.error = "not_run", str(exc) or "not run"
    except ModelError as exc:
        ev.status, ev.error = "error", str(exc) or type(exc).__name__
    except Exception as exc:  # noqa: BLE001 - a broken model is an error row, never a pass
        ev.status, ev.error = "error", f"{type(exc).__name__}: {exc}"
    ev.transcript = conversation
    ev.usage = Usage(tokens_in, tokens_out)
    ev.latency_s = round(latency, 6)
    return ev
