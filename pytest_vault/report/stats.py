"""Small, exact statistics for the summary: bounds for the cells that read zero."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where it is used: the summary needs none of it
    import numpy as np


def zero_bound(n: int, alpha: float = 0.05) -> float:
    """Exact one-sided (1 - alpha) upper bound on a rate observed as 0 of n: 1 - alpha^(1/n)."""
    if n <= 0:
        return 1.0
    # -expm1(log(alpha)/n) is 1 - alpha^(1/n) without cancellation at large n.
    return -math.expm1(math.log(alpha) / n)


def rule_of_three(sessions: int) -> float:
    """The per-session rule of three, 3/S: a bound that respects clustering by session."""
    return 1.0 if sessions <= 0 else min(1.0, 3 / sessions)


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input's order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    q = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):  # from the largest p down, keeping q monotone
        i = order[rank - 1]
        running = min(running, p_values[i] * m / rank)
        q[i] = running
    return q


def bootstrap_p(draws: Sequence[float] | np.ndarray) -> float:
    """Two-sided bootstrap p-value of a difference: twice the smaller share of draws on
    either side of zero (draws at zero count on both sides), at most 1.

    All draws at zero (identical pairs) give 1; all draws on one side give 0.
    """
    import numpy as np

    values = np.asarray(draws, dtype=float)
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return 1.0
    return min(1.0, 2 * min(float(np.mean(values <= 0)), float(np.mean(values >= 0))))


def fewest_sessions_p(moving: int) -> float:
    """The smallest two-sided p that `moving` sessions (those whose paired difference is
    not zero) can support: a sign test's, all of them one way, 2 x 0.5^moving, at most 1.
    A session-clustered bootstrap over few sessions that all move one way has no spread
    and says p = 0: one flipped evaluation would be "significant"."""
    return min(1.0, 2 * 0.5**moving)
