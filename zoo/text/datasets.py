"""Map-style datasets of encoded text: flat id storage and row-aligned optional columns."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

__all__ = ["Columns", "TokenIds"]


class TokenIds:
    """Many variable-length id sequences in one flat array: compact, and quick to pickle to workers."""

    def __init__(self, sequences: Sequence[Sequence[int]]) -> None:
        self.lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
        self._starts = np.concatenate([[0], np.cumsum(self.lengths)])
        self._flat = torch.from_numpy(
            np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int64, count=int(self._starts[-1]))
        )

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> Tensor:
        return self._flat[self._starts[index] : self._starts[index + 1]]


class Columns(Dataset):
    """Row-aligned columns as a dataset; item ``i`` maps each column given (not None) to its row ``i``.

    Columns are attributes too (``dataset.tokens``, ``dataset.labels``). The first column sets the length.
    """

    def __init__(self, **columns: Sequence[Any] | TokenIds | None) -> None:
        self._columns = {name: column for name, column in columns.items() if column is not None}
        for name, column in columns.items():
            setattr(self, name, column)
        self._size = len(next(iter(self._columns.values())))

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {name: column[index] for name, column in self._columns.items()}
