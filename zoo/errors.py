"""Errors that mean "the input is wrong", as opposed to a bug.

Every such error derives from :class:`ZooError`, so the command line prints any of them as one
line naming the problem and the fix, without a traceback, and without a list of error classes
kept by hand. Each is also a standard exception (``ValueError``, ``ImportError``, ``OSError``,
``KeyError``), so callers that catch those keep working. This module imports nothing, so every
part of the zoo (the registry included) can derive its errors from it.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "ConfigurationError",
    "DataError",
    "DuplicateNameError",
    "PluginImportError",
    "RegistryError",
    "UnknownArgumentError",
    "UnknownNameError",
    "ZooError",
]


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


class RegistryError(ZooError):
    """Base class of the errors of :mod:`zoo.registry` (names and their constructors' keywords)."""


class UnknownNameError(RegistryError, KeyError):
    """A name that is not registered. A ``KeyError``, so ``except KeyError`` catches it."""

    def __str__(self) -> str:  # KeyError would print the message quoted, like a repr.
        return str(self.args[0]) if self.args else ""


class DuplicateNameError(RegistryError, ValueError):
    """A name (or alias) that is already taken by another object."""


class UnknownArgumentError(RegistryError, TypeError, ValueError):
    """A keyword argument that the registered constructor does not accept.

    A ``TypeError`` like Python's own error for a bad keyword, and a ``ValueError`` for callers
    that treat all bad configuration alike.
    """
