"""Our own specs (controls, providers, `agent:`) as ordinary implementations of the hooks
in `hookspecs.py`, and `claim`, which asks the hooks about one spec at configure time."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from pytest_vault.models.specs import (
    AGENT,
    CONTROL_MODELS,
    PROVIDERS,
    Role,
    Spec,
    SpecError,
    check_spec,
    is_control,
)

if TYPE_CHECKING:
    from pluggy import HookRelay

    from pytest_vault.harness.adaptive import Attacker
    from pytest_vault.harness.agent import Model, Subject
    from pytest_vault.harness.judges import Judge
    from pytest_vault.plugin.settings import VaultContext

OPTION: dict[Role, str] = {
    "model": "--vault-model",
    "judge": "--vault-judge",
    "attacker": "--vault-attacker",
}
# The prefixes our implementation claims; any other is left to the other plugins.
OURS = ("scripted", AGENT.removesuffix(":"), *PROVIDERS)


def claim(config: pytest.Config, spec: str, role: Role, *, asks: bool) -> Spec:
    """What `spec` is, from the first plugin that claims it; a usage error (one line)
    when it cannot run or nobody claims it."""
    try:
        found: Spec | None = config.hook.pytest_vault_spec(
            spec=spec, role=role, asks=asks, config=config
        )
        if found is None:
            raise expected(spec, role)
    except SpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    return found


def expected(spec: str, role: Role) -> SpecError:
    """The error for a spec that is not one of the specs a `role` can be."""
    scripted = ", ".join(_scripted(role))
    if role == "model":
        return SpecError(
            f"--vault-model {spec!r}: expected openai:MODEL, anthropic:MODEL, "
            f"or a control ({scripted}); or agent:MODULE:FACTORY"
        )
    if role == "judge":
        return SpecError(
            f"--vault-judge {spec!r}: expected openai:MODEL, anthropic:MODEL "
            f"or a scripted judge ({scripted})"
        )
    return SpecError(
        f"--vault-attacker {spec!r}: expected {scripted}, openai:MODEL or anthropic:MODEL"
    )


def _scripted(role: Role) -> tuple[str, ...]:
    """Our offline specs of a role (imported only when a judge or an attacker is named)."""
    if role == "model":
        return CONTROL_MODELS
    if role == "judge":
        from pytest_vault.harness.judges import SCRIPTED_JUDGES

        return SCRIPTED_JUDGES
    from pytest_vault.harness.adaptive import ATTACKERS

    return ATTACKERS


def our_spec(spec: str, role: Role, base_url: str | None, *, asks: bool) -> Spec | None:
    """What one of our specs is (None: not ours); `SpecError` when it cannot run."""
    prefix = spec.partition(":")[0]
    if prefix not in OURS:
        return None
    if role == "model":
        check_spec(spec, base_url, asks=asks)
        agent = spec.removeprefix(AGENT) if prefix == "agent" else None
        offline = is_control(spec)
        return Spec(
            spec, role, provider=not offline and agent is None, offline=offline, agent=agent
        )
    if spec in _scripted(role):
        return Spec(spec, role, provider=False, offline=True)
    if prefix not in PROVIDERS:
        raise expected(spec, role)
    check_spec(spec, base_url, asks=asks, option=OPTION[role])
    return Spec(spec, role, provider=True)


class Builtin:
    """Registered by the plugin as `vault-specs`; `trylast`, so another plugin's
    implementation is asked first. It makes only the specs it claims."""

    @pytest.hookimpl(trylast=True)
    def pytest_vault_spec(
        self, spec: str, role: Role, asks: bool, config: pytest.Config
    ) -> Spec | None:
        return our_spec(spec, role, config.getoption("vault_base_url", None), asks=asks)

    @pytest.hookimpl(trylast=True)
    def pytest_vault_make_model(self, spec: Spec, context: VaultContext) -> Model | Subject | None:
        if not ours(spec):
            return None
        if spec.agent is not None:
            from pytest_vault.harness.yours import AgentSubject, Loader

            opts = context.options
            return AgentSubject(
                Loader(spec.text, spec.agent, opts.search),
                max_steps=opts.max_steps,
                reply_timeout=opts.agent_timeout,
                concurrency=opts.concurrency,
            )
        if spec.offline:
            from pytest_vault.harness.controls import control

            return control(spec.text, seed=context.options.seed)
        return context.provider_model(spec.text)

    @pytest.hookimpl(trylast=True)
    def pytest_vault_make_judge(self, spec: Spec, context: VaultContext) -> Judge | None:
        if not ours(spec):
            return None
        if spec.offline:
            from pytest_vault.harness.judges import scripted_judge

            return scripted_judge(spec.text)
        from pytest_vault.harness.judges import judge_prompt_file, load_judge_prompt
        from pytest_vault.models.judge import ProviderJudge

        prompt = load_judge_prompt(judge_prompt_file(context.options.passports))
        return ProviderJudge(context.provider_model(spec.text, judge=True), prompt.prompt)

    @pytest.hookimpl(trylast=True)
    def pytest_vault_make_attacker(self, spec: Spec, context: VaultContext) -> Attacker | None:
        if not ours(spec):
            return None
        if spec.offline:
            from pytest_vault.harness.adaptive import make_attacker

            return make_attacker(spec.text)
        from pytest_vault.models.attacker import ProviderAttacker, attacker_prompt_file, load_prompt

        prompt = attacker_prompt_file(context.options.passports)
        return ProviderAttacker(context.provider_model(spec.text), prompt, load_prompt(prompt))


def ours(spec: Spec) -> bool:
    """Whether our implementation claimed it (it makes what it claims, nothing else)."""
    return spec.text.partition(":")[0] in OURS


def our_provider(spec: Spec) -> bool:
    """One of our providers: what it asks is known (our clients, with our prompts in
    judges.toml and attacker.toml); a plugin's provider asks on its own."""
    return spec.provider and ours(spec)


def own_hooks() -> HookRelay:
    """The hooks with only our own implementations: a session made outside pytest."""
    import pluggy

    import pytest_vault.plugin.hookspecs

    manager = pluggy.PluginManager("pytest")
    manager.add_hookspecs(pytest_vault.plugin.hookspecs)
    manager.register(Builtin(), "vault-specs")
    return manager.hook
