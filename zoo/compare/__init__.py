"""``zoo compare``: train a grid of variants over several seeds and report them with confidence intervals.

:class:`CompareConfig` and :class:`Comparison` run it from Python, through a launcher that says
where the runs run (:class:`LocalLauncher` by default, :class:`RayLauncher`, :class:`SlurmLauncher`:
the last two need the ``ray`` and ``slurm`` extras when created); :mod:`zoo.compare.cli` is the
command line. Statistics (:mod:`zoo.compare.stats`) and the report (:mod:`zoo.compare.report`)
work on the records alone.
"""

from zoo.compare.grid import Budget, Combination, combinations, parse_budget, parse_grid
from zoo.compare.runner import CompareConfig, Comparison
from zoo.compare.launch import Launcher
from zoo.compare.local import LocalLauncher
from zoo.compare.ray_tasks import RayLauncher
from zoo.compare.slurm import SlurmLauncher
from zoo.compare.stats import Summary, paired_differences, summarize, t_quantile

__all__ = [
    "Budget",
    "Combination",
    "CompareConfig",
    "Comparison",
    "Launcher",
    "LocalLauncher",
    "RayLauncher",
    "SlurmLauncher",
    "Summary",
    "combinations",
    "paired_differences",
    "parse_budget",
    "parse_grid",
    "summarize",
    "t_quantile",
]
