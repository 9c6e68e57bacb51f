"""Errors that mean "the input is wrong", as opposed to a bug.

The command line prints these as one line naming the problem and the fix, without a
traceback. Each is also a standard exception (``ValueError`` or ``ImportError``), so callers
that catch those keep working. Registry errors live in :mod:`zoo.registry`, which imports
nothing of the zoo.
"""

from __future__ import annotations

__all__ = ["CheckpointError", "ConfigurationError", "DataError", "PluginImportError"]


class DataError(ValueError):
    """Data that cannot be used as given: a bad path or file, bad labels, empty text."""


class PluginImportError(ImportError):
    """A module named with ``--import`` (or in ``ZOO_IMPORTS``) could not be imported."""


class CheckpointError(ValueError):
    """A file that is not a usable zoo checkpoint: unreadable, truncated, unsafe or for another model."""


class ConfigurationError(ValueError):
    """Settings that cannot work together, such as a strategy the chosen model cannot use."""
