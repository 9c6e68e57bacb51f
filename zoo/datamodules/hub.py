"""Loading a Hugging Face Hub data set, with one line that says what to do when the Hub is out of
reach, and reading its text columns, with one line that names the rows that are not text.

Without network, or with ``HF_DATASETS_OFFLINE=1`` / ``HF_HUB_OFFLINE=1`` (as CI sets) and no
cached copy, ``datasets.load_dataset`` raises a ``ConnectionError`` ("Couldn't reach ... on the
Hub") whose context is a ``FileNotFoundError`` about a cache. Left alone, the command line would
print the latter, which names neither the cause nor the fix. :func:`load_hub_dataset` turns it
into a :class:`~zoo.errors.DataError` naming the data set, the cause and the local copy to give
instead.
"""

from __future__ import annotations

from typing import Any

import datasets
import pyarrow as pa

from zoo.errors import DataError

__all__ = ["load_hub_dataset", "text_rows"]

#: the column types whose rows are text
_TEXT_TYPES = (datasets.Value("string"), datasets.Value("large_string"))


def load_hub_dataset(name: str, local_copy: str, **kwargs: Any) -> datasets.DatasetDict:
    """``datasets.load_dataset(name, **kwargs)``, or one line that says what to give instead.

    Args:
        name: The Hub data set (``stanfordnlp/sst2``).
        local_copy: The options and layout of a local copy, as the message ends: "give a local
            copy with <local_copy>" (``--data.path DIR (the hub layout ...)``).

    Raises:
        DataError: the Hub cannot be reached (no network, or offline mode) and no copy is cached.
    """
    try:
        return datasets.load_dataset(name, **kwargs)
    except ConnectionError:
        # Not chained (``from None``): an error raised while LightningCLI builds the data module
        # (linking vocab_size) is reported by its innermost cause, which would be the Hub's again.
        raise DataError(
            f"Could not download {name!r} from the Hugging Face Hub (no network, or offline mode): "
            f"give a local copy with {local_copy}."
        ) from None


def text_rows(data: datasets.Dataset, column: str, where: str) -> pa.ChunkedArray:
    """The rows of ``data``'s (existing) ``column``, refused unless every one is text.

    Raises:
        DataError: a row is missing or the column holds something else; the message starts with
            ``where`` (``"The 'train' split of stanfordnlp/sst2"``).
    """
    rows = data.data.column(column)
    if rows.null_count or data.features[column] not in _TEXT_TYPES:
        raise DataError(
            f"{where} has rows whose {column!r} is not text "
            f"({rows.null_count} missing, type {data.features[column]}); drop or fix them."
        )
    return rows
