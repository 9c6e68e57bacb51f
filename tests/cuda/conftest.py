"""The CUDA group: tests marked ``cuda`` run only where ``torch.cuda.is_available()`` (the root
conftest skips them elsewhere); their CPU twins run in the default suite.

``benchmarks/gpu.sh`` runs them on a GPU machine (``pytest tests/cuda -m cuda``). The real
corpora come from ``$ZOO_DATA_DIR`` when set (gpu.sh sets it to the folder it was given), else
from ``../shared/data``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import SHARED_DATA


@pytest.fixture
def data_dir() -> Path:
    """The real corpora: ``$ZOO_DATA_DIR`` or ``../shared/data``."""
    path = Path(os.environ.get("ZOO_DATA_DIR", SHARED_DATA))
    if not path.is_dir():
        pytest.skip(f"real corpora not found at {path} (set ZOO_DATA_DIR)")
    return path
