"""`--vault-shard auto`: the shard the CI engine hands its job through the environment.

GitLab's `parallel:` (`CI_NODE_INDEX`, 1-based, of `CI_NODE_TOTAL`), Bazel's `shard_count`
(`TEST_SHARD_INDEX`, 0-based, of `TEST_TOTAL_SHARDS`), a Kubernetes Indexed Job
(`JOB_COMPLETION_INDEX`, 0-based; Kubernetes gives no total, so `VAULT_SHARD_TOTAL` says
it), or `VAULT_SHARD=K/N`. Engines whose variables are set must agree; anything else is a
`ShardError`, one line, which the option's converter says as a usage error while pytest
parses the option, before anything runs. Nothing of the plugin is imported here: the
options table's converter imports it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import NamedTuple

from pytest_vault.core.text import shown

# An optional id the user gives every shard of one run alike (say, from the CI's run id).
RUN_ID = "VAULT_RUN_ID"
STATUS_FILE = "TEST_SHARD_STATUS_FILE"
_NATURAL = re.compile("[0-9]{1,18}")  # ASCII digits: `isdigit` is true of '\u00b2' too


class Engine(NamedTuple):
    name: str
    shard_var: str  # the variable of the shard's index
    total_var: str  # and of the total
    base: int  # the first index: 0 or 1
    why_total: str = ""  # what to do when the total is missing


ENGINES = (
    Engine("GitLab", "CI_NODE_INDEX", "CI_NODE_TOTAL", 1),
    Engine("Bazel", "TEST_SHARD_INDEX", "TEST_TOTAL_SHARDS", 0),
    Engine(
        "Kubernetes",
        "JOB_COMPLETION_INDEX",
        "VAULT_SHARD_TOTAL",
        0,
        " (a Kubernetes Indexed Job gives no total: set VAULT_SHARD_TOTAL to its completions)",
    ),
)
NONE_SET = (
    "no shard in the environment (GitLab's CI_NODE_INDEX and CI_NODE_TOTAL, Bazel's "
    "TEST_SHARD_INDEX and TEST_TOTAL_SHARDS, a Kubernetes Indexed Job's "
    "JOB_COMPLETION_INDEX with VAULT_SHARD_TOTAL, or VAULT_SHARD=K/N)"
)


class ShardError(ValueError):
    """Shard variables that cannot be used: one line."""


class Found(NamedTuple):
    """A shard one engine's variables say: K of N (1-based), and where it came from."""

    k: int
    n: int
    source: str  # `GitLab CI_NODE_INDEX=2 CI_NODE_TOTAL=3`


def _whole(name: str, value: str) -> int:
    if not _NATURAL.fullmatch(value):
        raise ShardError(f"{name}={shown(repr(value))}: expected a whole number")
    return int(value)


def _of(engine: Engine, environ: Mapping[str, str]) -> Found | None:
    """The shard an engine's variables say; None when neither is set. GitLab sets
    CI_NODE_TOTAL (to 1) on every job, and CI_NODE_INDEX only under `parallel:`: its
    total alone says nothing."""
    index, total = environ.get(engine.shard_var), environ.get(engine.total_var)
    if index is None and (total is None or engine.name == "GitLab"):
        return None
    if index is None:
        raise ShardError(f"{engine.total_var} is set but {engine.shard_var} is not")
    if total is None:
        said = f"{engine.shard_var} is set but {engine.total_var} is not"
        raise ShardError(said + engine.why_total)
    i, n = _whole(engine.shard_var, index), _whole(engine.total_var, total)
    if n == 0:
        raise ShardError(f"{engine.total_var}=0: expected a total of at least 1")
    last = n - 1 + engine.base
    if not engine.base <= i <= last:
        raise ShardError(
            f"{engine.shard_var}={i} is out of range for {engine.total_var}={n} "
            f"({engine.base} to {last}: {engine.name} counts from {engine.base})"
        )
    source = f"{engine.name} {engine.shard_var}={i} {engine.total_var}={n}"
    return Found(i - engine.base + 1, n, source)


def _explicit(environ: Mapping[str, str]) -> Found | None:
    value = environ.get("VAULT_SHARD")
    if value is None:
        return None
    k, sep, n = value.partition("/")
    if not (sep and _NATURAL.fullmatch(k) and _NATURAL.fullmatch(n) and 1 <= int(k) <= int(n)):
        raise ShardError(
            f"VAULT_SHARD={shown(repr(value))}: expected K/N with 1 <= K <= N, e.g. 2/3"
        )
    return Found(int(k), int(n), f"VAULT_SHARD={value}")


def found(environ: Mapping[str, str]) -> list[Found]:
    """Every shard the environment says, one per engine whose variables are set; a
    `ShardError` for variables that cannot be used."""
    out = [f for engine in ENGINES if (f := _of(engine, environ)) is not None]
    explicit = _explicit(environ)
    return out if explicit is None else [*out, explicit]


def from_environ(environ: Mapping[str, str]) -> Found:
    """The shard `--vault-shard auto` runs: the one the engines set agree on."""
    said = found(environ)
    if not said:
        raise ShardError(NONE_SET)
    first = said[0]
    for other in said[1:]:
        if (other.k, other.n) != (first.k, first.n):
            raise ShardError(
                f"{first.source} says shard {first.k}/{first.n}, but {other.source} says "
                f"{other.k}/{other.n}"
            )
    return first


def auto(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """`--vault-shard auto`, for the option's converter (which says a `ShardError`)."""
    shard = from_environ(os.environ if environ is None else environ)
    return shard.k, shard.n


def source(shard: tuple[int, int], environ: Mapping[str, str]) -> str:
    """Where this shard came from: the first engine whose variables say it, else the
    option (given as K/N, or variables that do not say this shard)."""
    try:
        said = found(environ)
    except ShardError:
        said = []
    return next((f.source for f in said if (f.k, f.n) == shard), "--vault-shard")
