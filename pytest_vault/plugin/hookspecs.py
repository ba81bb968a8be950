"""Hooks pytest-vault publishes (as pytest-xdist's `newhooks.py`): how a spec on the
command line or in the config file becomes a model, a judge or an attacker.

Our own providers and controls are ordinary implementations (`plugin/specs.py`). A
third-party plugin adds its own prefix (`mycorp:`) by implementing the same hooks; the
first implementation that returns something other than None wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_vault.models.specs import Role, Spec


@pytest.hookspec(firstresult=True)
def pytest_vault_spec(spec: str, role: Role, asks: bool, config: pytest.Config) -> Spec | None:
    """Claim `spec` at configure time, before anything runs or spends: return what it is
    (`Spec`), raise `SpecError` (one line, a usage error) when it is yours but cannot
    run, or return None when it is not yours. `role` is "model", "judge" or "attacker";
    `asks` is False for a run that sends no request (a plan), which needs no key."""


@pytest.hookspec(firstresult=True)
def pytest_vault_make_model(spec: Spec, session: Any) -> Any:
    """The model under test for a claimed spec (a `harness.agent.Model`), made on the
    runner's event loop on first use. `session` is the run's `VaultSession`."""


@pytest.hookspec(firstresult=True)
def pytest_vault_make_judge(spec: Spec, session: Any) -> Any:
    """A `--vault-judge` (a `harness.judges.Judge`) for a claimed spec."""


@pytest.hookspec(firstresult=True)
def pytest_vault_make_attacker(spec: Spec, session: Any) -> Any:
    """A `--vault-attacker` (a `harness.adaptive.Attacker`) for a claimed spec."""
