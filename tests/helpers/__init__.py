"""Helpers shared by the tests: where the project and the real corpora are, a callback that
records losses, and a fake installed distribution for the plugin tests.

Fixtures stay in the ``conftest.py`` files; this package holds what tests import by name
(``from tests.helpers import LossRecorder``), so that test files may live at any depth. Its
modules: ``cli`` (quiet flags, a small version of each model, :func:`~tests.helpers.cli.tiny_fit`),
``training`` (small tasks and short in-process fits), ``models`` (small seeded architectures for
exactness tests) and ``steplog`` (a callback that logs each step's loss to a file).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import lightning as L

__all__ = ["PROJECT_ROOT", "SHARED_DATA", "LossRecorder", "write_distribution"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The repository root (holds ``zoo/`` and ``tests/``); subprocesses put it on ``PYTHONPATH``."""

SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"
"""The real corpora beside the project (``../shared/data``)."""


class LossRecorder(L.Callback):
    """Records the training loss of every step, to assert that it falls."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def write_distribution(
    site: Path, dist_name: str, modules: dict[str, str], entry_points: dict[str, dict[str, str]]
) -> None:
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
