"""Reading a Hub data set's text column: every row text, or one line naming what is not."""

from __future__ import annotations

import datasets
import pytest

from zoo.datamodules.hub import text_rows
from zoo.errors import DataError


def test_text_rows_are_the_column_when_every_row_is_text() -> None:
    data = datasets.Dataset.from_dict({"text": ["a b", "c"], "label": [0, 1]})
    assert text_rows(data, "text", "here").to_pylist() == ["a b", "c"]


@pytest.mark.parametrize(
    ("rows", "detail"), [(["a", None], "1 missing, type Value('string')"), ([3, 4], "0 missing, type Value('int64')")]
)
def test_rows_that_are_not_text_are_named_with_the_fix(rows: list, detail: str) -> None:
    data = datasets.Dataset.from_dict({"text": rows})
    with pytest.raises(DataError) as refusal:
        text_rows(data, "text", "The 'train' split of x")
    assert (
        str(refusal.value) == f"The 'train' split of x has rows whose 'text' is not text ({detail}); drop or fix them."
    )
