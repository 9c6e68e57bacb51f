"""Shared fixtures: where the real corpora live, and quiet, isolated runs."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import lightning as L
import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``cuda`` on a machine without a CUDA device."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is false)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


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


class LossRecorder(L.Callback):
    """Records the training loss of every step, to assert that it falls."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def write_distribution(site: Path, dist_name: str, modules: dict[str, str], entry_points: dict[str, dict[str, str]]) -> None:
    """Install a minimal distribution into ``site``, as pip would: its modules, and a
    ``<name>-0.1.0.dist-info`` with ``METADATA`` and ``entry_points.txt`` that
    ``importlib.metadata`` finds once ``site`` is on ``sys.path``.

    Args:
        modules: module name -> source code (dedented).
        entry_points: group (``zoo.attention``, ``zoo.models``, ``zoo.datamodules``) ->
            {entry-point name: ``module:attribute``}.
    """
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist_name.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 0.1.0\n")
    sections = []
    for group, points in entry_points.items():
        lines = "\n".join(f"{name} = {target}" for name, target in points.items())
        sections.append(f"[{group}]\n{lines}\n")
    (info / "entry_points.txt").write_text("\n".join(sections))
