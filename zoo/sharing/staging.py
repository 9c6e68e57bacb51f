"""Writing a folder all at once: into a temporary sibling, then renamed into place.

An interrupted export leaves the old folder (or none) rather than half a new one. A folder that
holds anything is replaced only when asked (``overwrite``), and then whole, never merged into:
files of an earlier model (a tokenizer, a card) would otherwise survive beside the new one's.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from zoo.errors import DataError

__all__ = ["staged_folder"]


@contextmanager
def staged_folder(target: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """An empty temporary folder beside ``target`` to write into; on leaving the block without an
    error it becomes ``target`` (an empty ``target``, or with ``overwrite`` any ``target``
    folder, is replaced), and on an error it is removed.

    Raises:
        DataError: ``target`` is a file, or a folder that holds something and ``overwrite`` is false.
    """
    if target.exists() and not target.is_dir():
        raise DataError(f"{str(target)!r} is a file, not a folder to write the model into.")
    if target.is_dir() and any(target.iterdir()) and not overwrite:
        raise DataError(
            f"{str(target)!r} is not empty: choose a new folder, or replace it with --overwrite (overwrite=True)."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
    staging.mkdir()  # with the umask's permissions, as the folder it becomes should have
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _publish(staging, target)


def _publish(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``; an existing ``target`` folder is set aside first, put
    back if the rename fails, and deleted once the new folder is in place."""
    if not target.exists():
        staging.rename(target)
        return
    replaced = staging.with_suffix(".old")
    target.rename(replaced)
    try:
        staging.rename(target)
    except OSError:
        replaced.rename(target)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(replaced)
