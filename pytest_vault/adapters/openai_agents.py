"""The bank's tools as OpenAI Agents SDK `FunctionTool`s (extra `openai-agents`).

    agent = agents.Agent(name="payments", instructions=..., model=..., tools=tools(ctx))
    result = await agents.Runner.run(agent, message, run_config=run_config())

Each tool's `on_invoke_tool` gets the model's arguments as the raw JSON string the SDK
received and hands that very string to `ctx.call_tool`: no schema validation, no
coercion, so a string amount or a duplicate key reaches the bank's strict reader as the
model wrote it. The schemas are `ctx.tools`' own, with `strict_json_schema=False` so the
SDK does not rewrite them. A declined call comes back to the model as the tool's output
text, as a payment API would answer. The tools are `ctx.tools`: the four, and where the
case's environment holds the bank's records, the tools they add (`refund_payment`,
`create_payout`, ...), each going to the bank as transfer_funds' calls do.

The step bound: past `--vault-max-steps`, `ctx.call_tool` raises `StepLimit`. The SDK's
run loop wraps any exception a tool raises in `UserError`, except its own
`AgentsException`s, which it re-raises as they are. So the tools raise `StepLimitReached`,
both an `AgentsException` and a `StepLimit`: it leaves `Runner.run` unchanged and the
suite marks the turn truncated. An agent that catches `AgentsException` itself must let
`StepLimit` through.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

from agents import FunctionTool, RunConfig
from agents.exceptions import AgentsException
from agents.tool_context import ToolContext

from pytest_vault.harness.yours import AgentContext, StepLimit

__all__ = ["StepLimitReached", "run_config", "tools"]


class StepLimitReached(AgentsException, StepLimit):
    """`StepLimit`, in the one exception family the Agents SDK lets out of a tool unwrapped."""


def run_config(**settings: Any) -> RunConfig:
    """A `RunConfig` with tracing off for this run only (the SDK's own switch is global)."""
    if settings.get("tracing_disabled", True) is not True:
        raise ValueError("run_config(): tracing stays off (no trace may leave a test run)")
    return RunConfig(**{**settings, "tracing_disabled": True})


def tools(ctx: AgentContext) -> list[FunctionTool]:
    """`ctx.tools` as `FunctionTool`s whose calls go, arguments unread, to `ctx.call_tool`."""
    if not isinstance(ctx, AgentContext):
        raise TypeError(
            f"tools() needs the AgentContext of the factory, not a {type(ctx).__name__}"
        )
    return [_tool(ctx, index, entry) for index, entry in enumerate(ctx.tools)]


def _tool(ctx: AgentContext, index: int, entry: Any) -> FunctionTool:
    spec = entry.get("function") if isinstance(entry, dict) else None
    if not (
        isinstance(spec, dict)
        and entry.get("type") == "function"
        and isinstance(spec.get("name"), str)
        and isinstance(spec.get("description", ""), str)
        and isinstance(spec.get("parameters"), dict)
    ):
        raise ValueError(
            f"ctx.tools[{index}] is not an OpenAI function tool "
            "({'type': 'function', 'function': {'name', 'description', 'parameters'}})"
        )
    return FunctionTool(
        name=spec["name"],
        description=spec.get("description", ""),
        params_json_schema=copy.deepcopy(spec["parameters"]),
        on_invoke_tool=_invoker(ctx, spec["name"]),
        strict_json_schema=False,
    )


def _invoker(ctx: AgentContext, name: str) -> Callable[[ToolContext[Any], str], Awaitable[str]]:
    async def invoke(tool_context: ToolContext[Any], raw_json: str) -> str:
        try:
            result = await ctx.call_tool(name, raw_json)  # the model's text, as it sent it
        except StepLimit as cut:
            raise StepLimitReached(*cut.args) from cut
        return result.content

    return invoke
