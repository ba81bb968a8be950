"""`scripted:coin:P`, the stochastic control, by name and toss: light enough to be read at
configure time (a spec is checked before any model code is imported)."""

from __future__ import annotations

import hashlib
import re

COIN = "scripted:coin:"
_CHANCE = re.compile(r"(?:0|1|0?\.[0-9]+|1\.0*)")


def coin_chance(spec: str) -> float | None:
    """P of `scripted:coin:P` (a decimal from 0 to 1), or None for any other spec."""
    chance = spec.removeprefix(COIN)
    return float(chance) if spec.startswith(COIN) and _CHANCE.fullmatch(chance) else None


def toss(seed: int, case_id: str, trial: int) -> float:
    """One trial's toss, in [0, 1): sha256 of the seed, the case's id and the trial, so the
    same on every run, worker and shard."""
    text = f"{seed}\n{case_id}\n{trial}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") / 2**64
