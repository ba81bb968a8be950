"""Real-model judges (`--vault-judge openai:MODEL | anthropic:MODEL`).

A judge asks through a `ProviderModel`, so the response cache, the rate limits, the
retries and the spend cap apply as to any model; its spend is priced under the judge's
spec and recorded in its own verdict, never in the agent's columns. It runs at
temperature 0 with the token cap of `judges.toml`, and sends no tools.
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_vault.harness.agent import Message, ModelRequest
from pytest_vault.harness.judges import (
    TEMPERATURE,
    JudgePrompt,
    Transcript,
    Verdict,
    read_verdict,
    user_prompt,
)
from pytest_vault.models.providers import ProviderModel


@dataclass
class ProviderJudge:
    model: ProviderModel
    prompt: JudgePrompt

    @property
    def spec(self) -> str:
        return self.model.spec

    async def judge(self, transcript: Transcript) -> Verdict:
        turn = await self.model.respond(
            ModelRequest(
                system=self.prompt.system_prompt.strip(),
                messages=(Message("user", user_prompt(self.prompt, transcript)),),
                tools=(),
                temperature=TEMPERATURE,
                max_tokens=self.prompt.max_tokens,
                case=transcript.case,
                level=transcript.level,
            )
        )
        verdict, rationale = read_verdict(turn.text if not turn.tool_calls else "")
        if turn.tool_calls:
            verdict, rationale = "unreadable", "unreadable answer (a tool call, not a verdict)"
        return Verdict(verdict, rationale, turn.usage.input_tokens, turn.usage.output_tokens)

    async def close(self) -> None:
        await self.model.close()
