"""Errors that mean "the input is wrong", as opposed to a bug.

The command line prints these as one line naming the problem and the fix, without a
traceback. Each is also a standard exception (``ValueError``), so callers that catch those keep
working. Registry errors live in :mod:`zoo.registry`, which imports nothing of the zoo.
"""

from __future__ import annotations

__all__ = ["ConfigurationError", "DataError"]


class DataError(ValueError):
    """Data that cannot be used as given: a bad path or file, bad labels, empty text."""


class ConfigurationError(ValueError):
    """Settings that cannot work together, such as a strategy the chosen model cannot use."""
