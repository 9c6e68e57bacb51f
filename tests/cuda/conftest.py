"""The CUDA group: tests marked ``cuda`` run only where ``torch.cuda.is_available()`` (the root
conftest skips them elsewhere); their CPU twins run in the default suite.

``benchmarks/gpu.sh`` runs them on a GPU machine (``pytest tests/cuda -m cuda``). The real
corpora come from ``$ZOO_DATA_DIR`` when set (gpu.sh sets it to the folder it was given), else
from ``../shared/data``.

A lease can end before pytest prints its summary (a GPU call is cut at its time limit), so with
``ZOO_FAILURE_LOG`` set each failure's report is appended to that file the moment it is known
(gpu.sh writes ``cuda_failures.txt`` beside its results).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import SHARED_DATA


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A failed phase's report, appended to ``$ZOO_FAILURE_LOG`` at once (under pytest-xdist the
    controller receives every worker's reports, so one process writes the file: the one without
    ``PYTEST_XDIST_WORKER``, which xdist sets in its workers; a report carries no config to ask)."""
    path = os.environ.get("ZOO_FAILURE_LOG")
    if path and report.failed and "PYTEST_XDIST_WORKER" not in os.environ:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")


@pytest.fixture
def data_dir() -> Path:
    """The real corpora: ``$ZOO_DATA_DIR`` or ``../shared/data``."""
    path = Path(os.environ.get("ZOO_DATA_DIR", SHARED_DATA))
    if not path.is_dir():
        pytest.skip(f"real corpora not found at {path} (set ZOO_DATA_DIR)")
    return path
