"""A plain-Python agent for `--vault-model agent:plain_agent:make` (copy and adapt).

pytest-vault calls `make(ctx)` once per evaluation and then `reply(message)` with each
user message. The agent's own logic is its business; every tool call goes through
`ctx.call_tool_sync` (or `await ctx.call_tool` in an async agent), so the suite sees
exactly what executed.

- `make`: scripted to behave like `scripted:obedient` (offline, deterministic): it pays
  the first e-mail address or account number in the message its first `$` figure (else
  $100), and retries once after an error.
- `make_openai`: the same shape with a real model, a hand-written OpenAI tool loop
  (model from VAULT_AGENT_MODEL; key and base URL as the openai SDK reads them).

    pytest --vault-corpus builtin --vault-model agent:plain_agent:make    # from this folder
"""

from __future__ import annotations

import os
from typing import Any

from pytest_vault import AgentContext
from pytest_vault.harness.controls import obedient_arguments


class PlainAgent:
    def __init__(self, ctx: AgentContext) -> None:
        self.ctx = ctx
        self.turns = 0  # user messages so far: one idempotency key per turn

    def plan(self, message: str) -> dict[str, Any] | None:
        """The transfer this message asks for, or None: here, what the control would."""
        return obedient_arguments(message, self.turns)

    def reply(self, message: str) -> str:
        self.turns += 1
        args = self.plan(message)
        if args is None:
            return "Who should I pay?"
        result = self.ctx.call_tool_sync("transfer_funds", args)
        if result.is_error:
            result = self.ctx.call_tool_sync("transfer_funds", args)  # retry once
        return "Done."


def make(ctx: AgentContext) -> PlainAgent:
    return PlainAgent(ctx)


class OpenAIAgent:
    """A tool loop on the OpenAI chat API: the level's prompt, the suite's tools."""

    def __init__(self, ctx: AgentContext, model: str) -> None:
        from openai import AsyncOpenAI

        self.ctx, self.model = ctx, model
        self.client = AsyncOpenAI(max_retries=2)
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": ctx.system_prompt}]

    async def reply(self, message: str) -> str:
        self.messages.append({"role": "user", "content": message})
        while True:  # the suite's step bound ends a runaway loop (StepLimit)
            response = await self.client.chat.completions.create(
                model=self.model,
                messages=self.messages,  # type: ignore[arg-type]
                tools=self.ctx.tools,  # type: ignore[arg-type]
                temperature=self.ctx.temperature,
                max_tokens=self.ctx.max_tokens,
            )
            answer = response.choices[0].message
            self.messages.append(answer.model_dump(exclude_none=True))
            if not answer.tool_calls:
                return answer.content or ""
            for call in answer.tool_calls:
                if call.type == "function":
                    # The raw JSON text the model sent: the bank reads it strictly, as is.
                    name, arguments = call.function.name, call.function.arguments
                else:  # a custom (free-text) tool call: the bank answers unknown tool
                    name, arguments = call.custom.name, call.custom.input
                result = await self.ctx.call_tool(name, arguments)
                self.messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": result.content}
                )

    async def aclose(self) -> None:
        """Called once the evaluation is over: its client, and its connections, go too."""
        await self.client.close()


def make_openai(ctx: AgentContext) -> OpenAIAgent:
    return OpenAIAgent(ctx, os.environ.get("VAULT_AGENT_MODEL", "gpt-4o-mini"))
