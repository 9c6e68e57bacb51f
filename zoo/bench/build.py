"""What ``python -m zoo fit ARGS`` would build, without running it: the benchmarks' models.

A benchmark builds one model per case (``bench classify`` one per attention and length), and
each build would print Lightning's start-up lines (the seed, the accelerators, a tip) between the
timings. They are held back here; warnings still show.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zoo.cli import ZooCLI

__all__ = ["build_from_cli"]

_LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")


def build_from_cli(args: list[str]) -> ZooCLI:
    """The CLI of ``python -m zoo fit ARGS`` with its model, data module and trainer built (``run=False``)."""
    from zoo.cli import ZooCLI  # the CLI imports every part of the zoo; the benchmarks only when they run

    loggers = [logging.getLogger(name) for name in _LIGHTNING_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        return ZooCLI(args=args, run=False)
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
