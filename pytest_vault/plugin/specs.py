"""Our own specs (controls, providers, `agent:`) as ordinary implementations of the hooks
in `hookspecs.py`, and `claim`, which asks the hooks about one spec at configure time."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_vault.models.specs import Role, Spec, SpecError, check_spec

OPTION: dict[Role, str] = {
    "model": "--vault-model",
    "judge": "--vault-judge",
    "attacker": "--vault-attacker",
}


def claim(config: pytest.Config, spec: str, role: Role, *, asks: bool) -> Spec:
    """What `spec` is, from the first plugin that claims it; a usage error (one line)
    when it cannot run or nobody claims it."""
    try:
        found: Spec | None = config.hook.pytest_vault_spec(
            spec=spec, role=role, asks=asks, config=config
        )
    except SpecError as exc:
        raise pytest.UsageError(str(exc)) from None
    if found is None:
        raise pytest.UsageError(f"{OPTION[role]} {spec!r}: no plugin knows this spec")
    return found


class Builtin:
    """Registered by the plugin as `vault-specs`; `trylast`, so another plugin's
    implementation is asked first."""

    @pytest.hookimpl(trylast=True)
    def pytest_vault_spec(
        self, spec: str, role: Role, asks: bool, config: pytest.Config
    ) -> Spec | None:
        base_url = config.getoption("vault_base_url", None)
        check_spec(spec, base_url, asks=asks)
        return Spec(spec, role, provider=not spec.startswith(("scripted:", "agent:")))

    @pytest.hookimpl(trylast=True)
    def pytest_vault_make_model(self, spec: Spec, session: Any) -> Any:
        return session._builtin_model(spec.text)

    @pytest.hookimpl(trylast=True)
    def pytest_vault_make_judge(self, spec: Spec, session: Any) -> Any:
        return session._builtin_judge(spec.text)

    @pytest.hookimpl(trylast=True)
    def pytest_vault_make_attacker(self, spec: Spec, session: Any) -> Any:
        return session._builtin_attacker(spec.text)
