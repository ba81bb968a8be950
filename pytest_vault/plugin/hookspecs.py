"""Hooks pytest-vault publishes (as pytest-xdist's `newhooks.py`): how a spec on the
command line or in the config file becomes a model, a judge or an attacker.

Our own providers and controls are ordinary implementations (`plugin/specs.py`). A
third-party plugin adds its own prefix (`mycorp:`) by implementing the same hooks; the
first implementation that returns something other than None wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_vault.harness.adaptive import Attacker
    from pytest_vault.harness.agent import Model, Subject
    from pytest_vault.harness.judges import Judge
    from pytest_vault.models.specs import Role, Spec
    from pytest_vault.plugin.settings import VaultContext


@pytest.hookspec(firstresult=True)
def pytest_vault_spec(spec: str, role: Role, asks: bool, config: pytest.Config) -> Spec | None:
    """Claim `spec` at configure time, before anything runs or spends: return what it is
    (`Spec`), raise `SpecError` (one line, a usage error) when it is yours but cannot
    run, or return None when it is not yours.

    `spec`: the text as given (`--vault-model`, `--vault-judge`, `--vault-attacker`, or
    their config keys). `role`: "model", "judge" or "attacker". `asks`: False for a run
    that sends no request (a plan, `--collect-only`), which needs no key. `config`:
    pytest's, to read your own options (ours are read through `context` later)."""


@pytest.hookspec(firstresult=True)
def pytest_vault_make_model(
    spec: Spec, context: VaultContext, session: VaultContext
) -> Model | Subject | None:
    """What is under test for a claimed spec, made once per process on the runner's event
    loop, on first use; None when the spec is not yours. A `harness.agent.Model` (it
    answers requests; the agent loop drives it with the level's prompt and the bank's
    tools) or a `harness.agent.Subject` (it holds each evaluation's conversation itself,
    as `agent:` does). Either way every evaluation goes through `harness.agent.evaluate`.
    An exception is one error row per evaluation, never a traceback.

    `spec`: the `Spec` a `pytest_vault_spec` returned for it (`spec.text`, `spec.role`,
    whether it is a `provider` or `offline`). `context` (`plugin.settings.VaultContext`):
    the run's settings (`context.options`) and factories (`context.provider_model(text)`,
    `context.response_cache()`, `context.rate_limiter(endpoint)`), never the run's state.
    `session`: the same object, under the name plugins written before it used (take
    either, or neither)."""


@pytest.hookspec(firstresult=True)
def pytest_vault_make_judge(
    spec: Spec, context: VaultContext, session: VaultContext
) -> Judge | None:
    """A `--vault-judge` (a `harness.judges.Judge`) for a claimed spec; an exception
    makes its every verdict unreadable, with why. `context`, `session`: as for
    `pytest_vault_make_model`."""


@pytest.hookspec(firstresult=True)
def pytest_vault_make_attacker(
    spec: Spec, context: VaultContext, session: VaultContext
) -> Attacker | None:
    """A `--vault-attacker` (a `harness.adaptive.Attacker`) for a claimed spec; an
    exception makes each adaptive evaluation an error row. `context`, `session`: as for
    `pytest_vault_make_model`."""
