"""Shared fixtures: where the real corpora live, and quiet, isolated runs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import SHARED_DATA
from zoo.plugins import ENV_VAR

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under pytest-xdist (``make test`` runs a worker a core): one thread a worker and for the
    # processes it starts, so that the workers do not oversubscribe the cores they share.
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``cuda`` on a machine without a CUDA device. The marker is read, not
    ``item.keywords``: those hold the folder's name too, which skipped the CPU twins in
    ``tests/cuda`` with their GPU halves."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is false)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _plugins_stay_with_their_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """A command run in this process with ``--import`` lists its plugin in ``ZOO_IMPORTS`` for the
    processes it starts (:mod:`zoo.plugins`); the listing ends with the test, as it would with
    that command's process, and later tests' child processes do not import the plugin."""
    monkeypatch.setenv(ENV_VAR, os.environ.get(ENV_VAR, ""))


@pytest.fixture
def shared_data() -> Path:
    """The real corpora beside the project (``../shared/data``); skip if absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real corpora not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in a temporary working directory with a private cache (runs/ and caches land there)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ZOO_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path
