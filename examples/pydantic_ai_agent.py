"""A pydantic-ai agent for `--vault-model agent:pydantic_ai_agent:make` (copy and adapt).

Your prompt, your pydantic-ai `Agent`, our tools: `toolset(ctx)` hands every tool call
to this evaluation's bank with the model's arguments exactly as it sent them. The agent
keeps the conversation across `reply` calls, as a chat agent does.

- `make`: offline and deterministic, a `FunctionModel` scripted to behave like
  `scripted:obedient`: on each user message it pays the first e-mail address or
  account number its first `$` figure (else $100), sent as JSON text, retries once
  after an error, then answers "Done."; with no recipient it asks "Who should I pay?".
- `make_openai`: the same agent on a real OpenAI model (model from VAULT_AGENT_MODEL;
  key and base URL as the openai SDK reads them).

    pip install 'pytest-vault[pydantic-ai]'
    pytest --vault-corpus builtin --vault-model agent:pydantic_ai_agent:make    # from this folder
"""

from __future__ import annotations

import os

from pydantic_ai import Agent, capture_run_messages
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings

from pytest_vault import AgentContext, StepLimit
from pytest_vault.adapters.pydantic_ai import toolset
from pytest_vault.harness.controls import arguments_json, obedient_arguments


class PydanticAIAgent:
    def __init__(self, ctx: AgentContext, model: Model | str) -> None:
        self.agent = Agent(
            model,
            instructions=ctx.system_prompt,  # or your own prompt
            toolsets=[toolset(ctx)],
            model_settings=ModelSettings(temperature=ctx.temperature, max_tokens=ctx.max_tokens),
        )
        self.agent.instrument = False  # no tracing: nothing leaves the machine but the model call
        self.history: list[ModelMessage] = []

    async def reply(self, message: str) -> str:
        with capture_run_messages() as messages:
            try:
                result = await self.agent.run(message, message_history=self.history)
            except StepLimit:
                # The suite cut the turn at its step bound; the turn stays in the
                # conversation (pydantic-ai marks the unexecuted call interrupted).
                self.history = list(messages)
                raise
        self.history = result.all_messages()
        return result.output


# -- the offline script: scripted:obedient, as a pydantic-ai FunctionModel -------------
def obedient(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """What `scripted:obedient` does, read from the conversation so far."""
    # The user's own prompts: pydantic-ai may add notes of its own to a request as
    # private UserPromptPart subclasses (e.g. when a message looks like a <system> tag).
    prompts = [
        (i, part.content)
        for i, m in enumerate(messages)
        if isinstance(m, ModelRequest)
        for part in m.parts
        if type(part) is UserPromptPart
    ]
    last, text = prompts[-1]
    since = messages[last + 1 :]  # what the agent did for the latest user message
    calls = [p for m in since for p in m.parts if isinstance(p, ToolCallPart)]
    results = [p for m in since for p in m.parts if isinstance(p, ToolReturnPart)]
    if calls and not (len(calls) == 1 and results and results[-1].outcome != "success"):
        return ModelResponse(parts=[TextPart("Done.")])
    # First attempt, or the one retry after an error: the same arguments again.
    args = obedient_arguments(text if isinstance(text, str) else "", len(prompts))
    if args is None:
        return ModelResponse(parts=[TextPart("Who should I pay?")])
    number = sum(isinstance(p, ToolCallPart) for m in messages for p in m.parts) + 1
    return ModelResponse(
        parts=[ToolCallPart("transfer_funds", arguments_json(args), tool_call_id=f"call_{number}")]
    )


def make(ctx: AgentContext) -> PydanticAIAgent:
    return PydanticAIAgent(ctx, FunctionModel(obedient))


def make_openai(ctx: AgentContext) -> PydanticAIAgent:
    from pydantic_ai.models.openai import OpenAIChatModel

    return PydanticAIAgent(ctx, OpenAIChatModel(os.environ.get("VAULT_AGENT_MODEL", "gpt-4o-mini")))
