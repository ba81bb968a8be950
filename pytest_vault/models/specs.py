"""Specs (`--vault-model`, `--vault-judge`, `--vault-attacker`, `--vault-guard`), read
without importing any model code (configure time)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from pytest_vault.core.errors import VaultError
from pytest_vault.core.extras import needs
from pytest_vault.core.text import KEY_ENV

CONTROL_MODELS = (
    "scripted:reference",
    "scripted:obedient",
    "scripted:receipt-trusting",
    "scripted:refuser",
    "scripted:replay",
)
PROVIDERS = ("openai", "anthropic")


def is_control(spec: str) -> bool:
    """One of our offline models: a deterministic control, or the seeded coin."""
    if spec in CONTROL_MODELS:
        return True
    if not spec.startswith("scripted:"):
        return False
    # Only a scripted spec reads the coin's name: a run of the controls imports no harness.
    from pytest_vault.harness.coin import coin_chance

    return coin_chance(spec) is not None


BASE_URL_ENV = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}


AGENT = "agent:"


class SpecError(VaultError):
    """A spec that cannot run; the message is one line (made safe by `VaultError`)."""


Role = Literal["model", "judge", "attacker"]


@dataclass(frozen=True)
class Spec:
    """A spec as claimed at configure time: what is decided before anything is made."""

    text: str
    role: Role
    # Sends requests that cost: priced, cached, counted against --vault-budget-usd.
    provider: bool
    # Asks no one (a control: scripted, deterministic): a plan counts no request for it,
    # where the requests of a spec that is neither this nor a provider are unknown.
    offline: bool = False
    # `MODULE:FACTORY` of a team's agent (`agent:`): driven through its `reply` by the
    # agent runner, never made into a model by `pytest_vault_make_model`.
    agent: str | None = None


def valid_target(target: str) -> bool:
    """`MODULE:FACTORY` (a dotted module, a name), checked without importing anything."""
    module, sep, name = target.partition(":")
    return bool(sep) and name.isidentifier() and all(p.isidentifier() for p in module.split("."))


def check_guard(target: str) -> str:
    """A `--vault-guard` spec."""
    if not valid_target(target):
        raise SpecError(f"--vault-guard {target!r}: expected MODULE:FACTORY, e.g. my_guard:make")
    return target


@dataclass(frozen=True)
class ProviderSpec:
    spec: str
    provider: str
    model: str


def parse_spec(spec: str, option: str = "--vault-model") -> ProviderSpec:
    provider, sep, model = spec.partition(":")
    if not sep or provider not in PROVIDERS or not model.strip():
        raise SpecError(
            f"{option} {spec!r}: expected openai:MODEL, anthropic:MODEL, "
            f"or a control ({', '.join(CONTROL_MODELS)}); or agent:MODULE:FACTORY"
        )
    return ProviderSpec(spec, provider, model)


def check_spec(
    spec: str, base_url: str | None, *, asks: bool = True, option: str = "--vault-model"
) -> str:
    """Fail early (a usage error) on a spec that cannot possibly run. `asks`: the run
    sends requests; one that asks nothing (a plan) needs no key. `option` names it."""
    if spec.startswith(AGENT):
        if not valid_target(spec.removeprefix(AGENT)):
            raise SpecError(
                f"--vault-model {spec!r}: expected agent:MODULE:FACTORY, e.g. agent:my_agent:make"
            )
        return spec
    if spec.startswith("scripted:"):
        if not is_control(spec):
            raise SpecError(
                f"--vault-model {spec!r}: unknown control; controls are "
                f"{', '.join(CONTROL_MODELS)} and scripted:coin:P (P from 0 to 1)"
            )
        return spec
    parsed = parse_spec(spec, option)
    missing = needs(parsed.provider, "providers", f"{option} {spec}")
    if missing is not None:
        raise SpecError(missing)
    local = parsed.provider == "openai" and bool(base_url or os.environ.get(BASE_URL_ENV["openai"]))
    if asks and not (os.environ.get(KEY_ENV[parsed.provider]) or local):
        raise SpecError(f"{option} {spec}: {KEY_ENV[parsed.provider]} is not set")
    return spec
