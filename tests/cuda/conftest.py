"""The CUDA group: tests marked ``cuda`` run only where ``torch.cuda.is_available()``.

``benchmarks/gpu.sh`` runs them on a GPU machine (``pytest tests/cuda -m cuda``); elsewhere they
are collected and skipped. The real corpora come from ``$ZOO_DATA_DIR`` when set (gpu.sh sets
it to the folder it was given), else from ``../shared/data``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tests.helpers import SHARED_DATA


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cuda: needs a CUDA device; skipped when torch.cuda.is_available() is false")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is false)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture
def data_dir() -> Path:
    """The real corpora: ``$ZOO_DATA_DIR`` or ``../shared/data``."""
    path = Path(os.environ.get("ZOO_DATA_DIR", SHARED_DATA))
    if not path.is_dir():
        pytest.skip(f"real corpora not found at {path} (set ZOO_DATA_DIR)")
    return path
