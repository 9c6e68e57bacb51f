"""Goodness-of-fit tests for generated data: Pearson's chi-square, its p-value from torch's
regularized incomplete gamma function (scipy is not a dependency of the zoo).

The generators under test are seeded, so a test that passes passes every time; the thresholds
(``p > 0.001``) are there so that a correct generator passes for almost every seed too, and a
wrong distribution fails by orders of magnitude.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["chi_square_p", "two_sample_chi_square_p"]


def _survival(statistic: float, degrees: int) -> float:
    """P(X >= statistic) for X chi-square with ``degrees`` degrees of freedom."""
    return float(
        torch.special.gammaincc(
            torch.tensor(degrees / 2, dtype=torch.float64), torch.tensor(statistic / 2, dtype=torch.float64)
        )
    )


def chi_square_p(observed: np.ndarray, probabilities: np.ndarray) -> float:
    """The p-value of ``observed`` counts against ``probabilities`` (Pearson's test; cells expected
    to hold fewer than 5 counts are pooled into one)."""
    observed = np.asarray(observed, dtype=np.float64)
    expected = np.asarray(probabilities, dtype=np.float64) * observed.sum()
    small = expected < 5
    if small.any():
        observed = np.append(observed[~small], observed[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    statistic = float(((observed - expected) ** 2 / expected).sum())
    return _survival(statistic, len(observed) - 1)


def two_sample_chi_square_p(first: np.ndarray, second: np.ndarray) -> float:
    """The p-value that two arrays of counts over the same cells come from one distribution
    (the chi-square test of homogeneity; cells empty in both are dropped)."""
    table = np.stack([np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)])
    table = table[:, table.sum(axis=0) > 0]
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    return _survival(statistic, table.shape[1] - 1)
