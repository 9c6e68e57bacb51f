"""Errors that mean "the input is wrong", as opposed to a bug.

Every such error derives from :class:`ZooError`, so the command line prints any of them as one
line naming the problem and the fix, without a traceback, and without a list of error classes
kept by hand. Each is also a standard exception (``ValueError``, ``ImportError``, ``OSError``,
``KeyError``), so callers that catch those keep working. This module imports nothing, so every
part of the zoo (the registry included) can derive its errors from it.
"""

from __future__ import annotations

__all__ = ["CheckpointError", "ConfigurationError", "DataError", "PluginImportError", "ZooError"]


class ZooError(Exception):
    """Base of the errors a user fixes by changing the input: shown as one line by the CLI."""


class DataError(ZooError, ValueError):
    """Data that cannot be used as given: a bad path or file, bad labels, empty text."""


class PluginImportError(ZooError, ImportError):
    """A module named with ``--import`` (or in ``ZOO_IMPORTS``) could not be imported."""


class CheckpointError(ZooError, ValueError):
    """A file that is not a usable zoo checkpoint: unreadable, truncated, unsafe or for another model."""


class ConfigurationError(ZooError, ValueError):
    """Settings that cannot work together, such as a strategy the chosen model cannot use."""
