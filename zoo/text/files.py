"""Atomic file writes for caches shared by several processes, and the one way a cache entry is
read back or built: :func:`load_or_build`."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from zoo.errors import DataError

__all__ = ["atomic_write_text", "load_or_build"]

T = TypeVar("T")


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a synced temporary file and ``os.replace``.

    A reader (another rank of a multi-GPU run, or the next run after a crash) sees either the
    old file or the complete new one, never half a file; an interrupted write leaves no
    temporary file behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def load_or_build(
    file: Path, *, what: str, build: Callable[[], T], read: Callable[[str], T], write: Callable[[T], str]
) -> T:
    """The object cached in ``file`` (``read`` of its text), or ``build()``'s, cached there first.

    ``file`` must be named by its key, everything that changes what ``build`` makes (a data
    module's ``cache_file``): an existing file then holds what ``build`` would make and is read
    instead, and other settings name another file, which is built. The text (``write`` of the
    object) is written atomically, so processes that build at once (ranks of a multi-GPU run)
    write the same content and any one wins, and a crash never leaves half an entry.

    Args:
        what: The object as messages name it ("codec", "vocabulary").

    Raises:
        DataError: ``file`` exists but ``read`` refuses it (a ``ValueError`` or ``TypeError``).
    """
    if file.is_file():
        try:
            return read(file.read_text(encoding="utf-8"))
        except (ValueError, TypeError) as exc:  # unchained: the reason is in the one line the CLI prints
            reason = str(exc).rstrip(".")
            raise DataError(f"The cached {what} {file} is unreadable ({reason}); delete it to rebuild.") from None
    value = build()
    atomic_write_text(file, write(value))
    return value
