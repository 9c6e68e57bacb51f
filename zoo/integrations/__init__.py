"""Optional integrations of the zoo with other libraries.

Each module here imports the library it integrates, which the zoo itself does not depend on: it is
installed with an extra (``pip install attention-zoo[hf]`` for :mod:`zoo.integrations.transformers`).
So ``import zoo`` never imports them; importing an integration whose library is missing raises
:class:`MissingExtraError`, one line naming the command that installs it.
"""

from __future__ import annotations

from zoo.errors import ZooError

__all__ = ["MissingExtraError"]


class MissingExtraError(ZooError, ImportError):
    """An integration's library is not installed; the message names the extra that installs it."""
