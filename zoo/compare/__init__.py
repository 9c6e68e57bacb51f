"""``zoo compare``: train a grid of variants over several seeds and report them with confidence intervals.

:class:`CompareConfig` and :class:`Comparison` run it from Python; :mod:`zoo.compare.cli` is the
command line. Statistics (:mod:`zoo.compare.stats`) and the report (:mod:`zoo.compare.report`)
work on the records alone.
"""

from zoo.compare.grid import Budget, Combination, combinations, parse_budget, parse_grid
from zoo.compare.runner import CompareConfig, Comparison
from zoo.compare.stats import Summary, paired_differences, summarize, t_quantile

__all__ = [
    "Budget",
    "Combination",
    "CompareConfig",
    "Comparison",
    "Summary",
    "combinations",
    "paired_differences",
    "parse_budget",
    "parse_grid",
    "summarize",
    "t_quantile",
]
