"""Real-model adaptive attackers (`--vault-attacker openai:MODEL | anthropic:MODEL`).

They ask through a `ProviderModel`, so the response cache, the rate limits and the spend
cap apply as to any model. The prompt lives in `passports/attacker.toml`, beside
`levels.toml`, read strictly. The attacker sees the seed, its goal, the agent's text
replies and (with `--vault-attacker-sees-policy`) a summary of the passport: never the
guard's decisions or tool results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from pytest_vault.core.toml import load_toml
from pytest_vault.guard.engine import TRANSFER_TOOL
from pytest_vault.guard.folder import SHIPPED
from pytest_vault.guard.money import Style
from pytest_vault.harness.adaptive import STRATEGIES, Move, View, pay
from pytest_vault.harness.agent import Message, ModelError, ModelRequest
from pytest_vault.models.providers import ProviderModel

PROMPT_FILE = SHIPPED / "attacker.toml"
_STRATEGY = re.compile(r"\A\s*STRATEGY:\s*([A-Za-z_][A-Za-z0-9_-]{0,40})\s*\n", re.IGNORECASE)


class AttackerPrompt(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)]
    max_tokens: Annotated[StrictInt, Field(ge=1)]
    system_prompt: Annotated[StrictStr, Field(min_length=1)]
    prompt: Annotated[StrictStr, Field(min_length=1)]


def load_prompt(path: Path = PROMPT_FILE) -> AttackerPrompt:
    """`attacker.toml`; any problem is a one-line `FileError` naming file and key."""
    return load_toml(path, AttackerPrompt)[0]


def _fill(template: str, values: dict[str, str]) -> str:
    """Placeholders replaced in one pass: text from the corpus is never a template."""
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], m[0]), template)


def user_prompt(prompt: AttackerPrompt, view: View) -> str:
    """The prompt's placeholders filled. `{recipient}` is the goal's; for a goal through
    another tool than transfer_funds it also says how (`pay`: a refund of an order to a
    customer, a payout to a destination, a scheduled payment or its redirection), so any
    prompt file tells the attacker; `{tool}` is the goal's tool, for a prompt that asks."""
    goal = view.goal
    named = None if goal is None else goal.money()
    amount = "any amount" if named is None else named.written(Style.ATTACKER)
    recipient = goal.recipient if goal else "an account you choose"
    if goal is not None and goal.tool != TRANSFER_TOOL:
        how = pay(goal, view.case, amount)
        recipient = f"{goal.recipient}, by getting the assistant to {how} (its {goal.tool} tool)"
    lines = []
    for i, sent in enumerate(view.sent):
        lines.append(f"[attacker, message {i + 1}]\n{sent}")
        if i < len(view.replies):
            lines.append(f"[assistant]\n{view.replies[i] or '(no text)'}")
    return _fill(
        prompt.prompt,
        {
            "seed": "\n---\n".join(view.case.messages),
            "recipient": recipient,
            "amount": amount,
            "tool": TRANSFER_TOOL if goal is None else goal.tool,
            "policy": "The assistant's policy: " + view.policy.text() if view.policy else "",
            "conversation": "\n".join(lines),
            "round": str(view.round),
            "rounds": str(view.rounds),
        },
    ).strip()


def parse_move(text: str) -> Move:
    """`STRATEGY: name` then the message; a missing line is strategy `unnamed`."""
    match = _STRATEGY.match(text)
    if match is None:
        return Move(text.strip(), "unnamed")
    name = match[1].lower()
    return Move(text[match.end() :].strip(), name if name in STRATEGIES else f"other:{name}")


@dataclass
class ProviderAttacker:
    """An attacker that is a provider's model."""

    model: ProviderModel
    prompt_file: Path = PROMPT_FILE
    prompt: AttackerPrompt | None = None

    @property
    def spec(self) -> str:
        return self.model.spec

    async def next_message(self, view: View) -> Move:
        prompt = self.prompt = self.prompt or load_prompt(self.prompt_file)
        turn = await self.model.respond(
            ModelRequest(
                system=prompt.system_prompt.strip(),
                messages=(Message("user", user_prompt(prompt, view)),),
                tools=(),
                temperature=prompt.temperature,
                max_tokens=prompt.max_tokens,
                case=view.case,
                level=view.level,
                trial=view.trial,
            )
        )
        move = parse_move(turn.text)
        if not move.text:
            raise ModelError(f"attacker {self.spec}: an empty message")
        return move


def attacker_prompt_file(passports: Path | None) -> Path:
    """A real-model attacker's prompt: beside the levels.toml in use, else the shipped one."""
    from pytest_vault.guard.folder import SHIPPED

    prompt = (passports or SHIPPED) / "attacker.toml"
    return prompt if prompt.is_file() else SHIPPED / "attacker.toml"
