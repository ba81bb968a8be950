"""`--vault-model` specs, read without importing any model code (configure time)."""

from __future__ import annotations

import os
from dataclasses import dataclass

CONTROL_MODELS = (
    "scripted:reference",
    "scripted:obedient",
    "scripted:receipt-trusting",
    "scripted:refuser",
    "scripted:replay",
)
PROVIDERS = ("openai", "anthropic")
KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
BASE_URL_ENV = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}


class SpecError(ValueError):
    """A `--vault-model` spec that cannot run; the message is one line."""


@dataclass(frozen=True)
class ProviderSpec:
    spec: str
    provider: str
    model: str


def parse_spec(spec: str) -> ProviderSpec:
    provider, sep, model = spec.partition(":")
    if not sep or provider not in PROVIDERS or not model.strip():
        raise SpecError(
            f"--vault-model {spec!r}: expected openai:MODEL, anthropic:MODEL, "
            f"or a control ({', '.join(CONTROL_MODELS)})"
        )
    return ProviderSpec(spec, provider, model)


def check_spec(spec: str, base_url: str | None) -> str:
    """Fail early (a usage error) on a spec that cannot possibly run."""
    if spec.startswith("scripted:"):
        if spec not in CONTROL_MODELS:
            raise SpecError(
                f"--vault-model {spec!r}: unknown control; controls are {', '.join(CONTROL_MODELS)}"
            )
        return spec
    parsed = parse_spec(spec)
    local = parsed.provider == "openai" and bool(base_url or os.environ.get(BASE_URL_ENV["openai"]))
    if not (os.environ.get(KEY_ENV[parsed.provider]) or local):
        raise SpecError(f"--vault-model {spec}: {KEY_ENV[parsed.provider]} is not set")
    return spec
