"""Raw inputs to predict, from a list or from the lines of a file: read here, for every path.

The data modules' predict stage (``--data.predict_texts`` / ``--data.predict_file``) and
``zoo predict --ckpt_path`` (no data module) both read their inputs through :func:`predict_inputs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.errors import DataError

__all__ = ["predict_inputs"]


def predict_inputs(texts: Sequence[Any] | None, file: str | None) -> list[Any]:
    """The inputs of ``texts``, or the non-blank lines of the UTF-8 ``file``; exactly one must be given.

    Raises:
        DataError: both or neither given, or an empty list.
        FileNotFoundError: ``file`` does not exist.
    """
    if texts is not None and file is not None:
        raise DataError("Pass either --data.predict_texts or --data.predict_file, not both.")
    if file is not None:
        path = Path(file).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"predict_file {file!r} does not exist; give a text file, one input per line.")
        return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if texts is None or isinstance(texts, str) or len(texts) == 0:
        raise DataError(
            f'Nothing to predict: pass --data.predict_texts \'["a text", "another"]\' (a non-empty list, got '
            f"{texts!r}) or --data.predict_file FILE (one input per line)."
        )
    return list(texts)
