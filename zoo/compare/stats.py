"""Summaries of repeated runs: mean, sample standard deviation and Student-t confidence intervals.

scipy is not a dependency of the zoo, and ``torch.distributions.StudentT`` has no inverse CDF, so
the t quantile is computed here exactly: the two-sided mass ``P(|T| <= t)`` of Student's t with
an integer number of degrees of freedom has a closed form (Abramowitz and Stegun, 26.7.3-4), and
bisection inverts it to machine precision.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Summary", "paired_differences", "summarize", "t_quantile"]

#: The confidence level of every interval the reports show.
CONFIDENCE = 0.95


def _two_sided_mass(t: float, df: int) -> float:
    """``P(|T| <= t)`` for Student's t with ``df`` degrees of freedom (closed form, integer df)."""
    theta = math.atan(t / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:  # 2/pi * (theta + sin * (cos + 2/3 cos^3 + 2*4/(3*5) cos^5 + ... up to cos^(df-2)))
        term, total = math.cos(theta), 0.0
        for j in range(1, (df - 1) // 2 + 1):
            total += term
            term *= cos2 * (2 * j) / (2 * j + 1)
        return 2 / math.pi * (theta + sin * total)
    term, total = 1.0, 0.0  # sin * (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(df-2))
    for j in range(1, df // 2 + 1):
        total += term
        term *= cos2 * (2 * j - 1) / (2 * j)
    return sin * total


def t_quantile(probability: float, df: int) -> float:
    """The ``probability`` quantile of Student's t with ``df`` (a positive integer) degrees of freedom.

    ``t_quantile(0.975, 4)`` is 2.776..., the multiplier of a 95% interval from five samples.
    """
    if df < 1 or int(df) != df:
        raise ValueError(f"degrees of freedom must be a positive integer, got {df}.")
    if not 0.0 < probability < 1.0:
        raise ValueError(f"probability must lie in (0, 1), got {probability}.")
    if probability < 0.5:
        return -t_quantile(1.0 - probability, df)
    mass = 2.0 * probability - 1.0  # P(|T| <= t) at the quantile
    low, high = 0.0, 1.0
    while _two_sided_mass(high, df) < mass:
        low, high = high, 2.0 * high
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if _two_sided_mass(middle, df) < mass else (low, middle)
    return (low + high) / 2


@dataclass(frozen=True)
class Summary:
    """Mean, sample standard deviation and ``CONFIDENCE`` interval of ``n`` values (sd and interval need two)."""

    n: int
    mean: float
    sd: float | None
    low: float | None
    high: float | None


def summarize(values: Sequence[float]) -> Summary:
    """Mean, sample sd (n - 1) and the Student-t interval ``mean +- t * sd / sqrt(n)``."""
    if not values:
        raise ValueError("cannot summarise no values.")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Summary(len(values), mean, None, None, None)
    sd = statistics.stdev(values)
    half = t_quantile((1 + CONFIDENCE) / 2, len(values) - 1) * sd / math.sqrt(len(values))
    return Summary(len(values), mean, sd, mean - half, mean + half)


def paired_differences(values: Mapping[int, float], baseline: Mapping[int, float]) -> Summary | None:
    """The summary of ``values[seed] - baseline[seed]`` over the seeds both have; None if they share none.

    Pairing by seed removes what the seed does to both (data order, initialisation), so the
    interval is narrower than that of the difference of two means when the runs agree seed by seed.
    """
    shared = sorted(set(values) & set(baseline))
    return summarize([values[seed] - baseline[seed] for seed in shared]) if shared else None
