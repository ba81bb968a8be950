"""The bank's tools as a pydantic-ai toolset: `toolset(ctx)`.

    agent = Agent(model, instructions=ctx.system_prompt, toolsets=[toolset(ctx)])

Each tool call goes to `ctx.call_tool` with the model's arguments exactly as the model
sent them: its raw JSON text when it sent text (so a duplicate key or `"250"` reaches
the bank's strict reader, which refuses them), the dict when it sent a dict. A typed
pydantic-ai tool, and even `Tool.from_schema` (which parses the text), would hand the
bank a parsed dict: `{"amount": 1, "amount": 2}` becomes `{"amount": 2}`, `1e2`
becomes `100.0`, and JSON that is not an object aborts the run. So the tools here carry
a validator that validates nothing and hands the raw arguments through.

The tools are `ctx.tools`: the four, and where the case's environment holds the bank's
records, the tools they add (`refund_payment`, `create_payout`, ...), each going to the
bank as transfer_funds' calls do (behind the guard in the guarded architecture).
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic_ai import RunContext, ToolFailed
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool

from pytest_vault.harness.yours import AgentContext

__all__ = ["VaultToolset", "toolset"]

RAW = "arguments"  # the one key of the `tool_args` our validator hands to `call_tool`


class _Raw:
    """An args validator that keeps the model's arguments as they are, under `RAW`."""

    def validate_json(self, input: str | bytes | bytearray, **kwargs: Any) -> dict[str, Any]:
        # pydantic-ai passes `call.args or "{}"`: only an empty string is rewritten.
        return {RAW: input}

    def validate_python(self, input: Any, **kwargs: Any) -> dict[str, Any]:
        return {RAW: input}


class VaultToolset(AbstractToolset[Any]):
    """`ctx.tools`: `transfer_funds`, `verify_recipient`, `get_transaction_history`,
    `get_balance`, and the tools the case's records add."""

    def __init__(self, ctx: AgentContext, *, id: str | None = "pytest-vault") -> None:
        self._ctx, self._id = ctx, id
        self._defs = [
            ToolDefinition(
                name=f["name"],
                description=f["description"],
                parameters_json_schema=copy.deepcopy(f["parameters"]),
                # As ctx.tools say (no key: not strict, as for the raw OpenAI API), not
                # pydantic-ai's choice: its OpenAI model turns strict mode on for every
                # schema that allows it, and the model would then see other tools.
                strict=f.get("strict", False),
                # One call at a time, in the model's order: the bank's log is that order,
                # and a call past the step bound never starts beside another.
                sequential=True,
            )
            for f in (t["function"] for t in ctx.tools)
        ]

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        return {
            d.name: ToolsetTool(toolset=self, tool_def=d, max_retries=0, args_validator=_Raw())
            for d in self._defs
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> str:
        result = await self._ctx.call_tool(name, tool_args[RAW])  # StepLimit propagates
        if result.is_error:
            # ToolFailed: the model sees a failed tool result and decides what to do next.
            # Not ModelRetry, which counts against the tool's retry budget and aborts the
            # run (UnexpectedModelBehavior) once spent: a model that retries a declined
            # transfer is exactly what the suite measures. Not a plain return either,
            # which would show the model a declined transfer as a success. Either way,
            # pydantic-ai never re-runs the call itself: one bank record per model call.
            raise ToolFailed(result.content)
        return result.content


def toolset(ctx: AgentContext) -> VaultToolset:
    """This evaluation's bank as a pydantic-ai toolset of its tools (`ctx.tools`)."""
    return VaultToolset(ctx)
