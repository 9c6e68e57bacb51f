"""What a run's results depend on besides its config: the seed and the package versions.

Every checkpoint a zoo model saves carries :func:`run_record` under :data:`RECORD_KEY`; the CLI
also writes :func:`package_versions` to ``versions.json`` beside the resolved ``config.yaml``
(which holds the seed as ``seed_everything``) in each run directory. Everything is plain data,
so it loads with ``torch.load(weights_only=True)`` and reads as JSON.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

import torch

from zoo.version import __version__

__all__ = ["RECORD_FORMAT", "RECORD_KEY", "package_versions", "run_record", "run_seed"]

RECORD_KEY = "zoo"
"""The checkpoint key of the zoo's record."""

RECORD_FORMAT = 2
"""Bump when the record's layout, or the layout of the weights it describes, changes (2: the
recurrent families are attention layers; :mod:`zoo.attention.compat.legacy` rebuilds format 1)."""

_PACKAGES = ("lightning", "torchmetrics", "jsonargparse", "tokenizers", "sacrebleu", "datasets", "numpy")


def package_versions() -> dict[str, str | None]:
    """The versions of Python, the platform, the zoo, torch (with its CUDA) and the libraries it uses."""
    versions: dict[str, str | None] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "attention-zoo": __version__,
        "torch": str(torch.__version__),  # a TorchVersion, which weights_only loading refuses
        "cuda": torch.version.cuda,
    }
    for package in _PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def run_seed() -> int | None:
    """The global seed of this run, as ``lightning.seed_everything`` (and LightningCLI's
    ``seed_everything``) recorded it in ``PL_GLOBAL_SEED``; None if the run was not seeded."""
    seed = os.environ.get("PL_GLOBAL_SEED")
    return int(seed) if seed is not None else None


def run_record(model: str | None) -> dict[str, Any]:
    """The zoo's record for a checkpoint: the registered model name, the seed and the versions."""
    return {"format": RECORD_FORMAT, "model": model, "seed": run_seed(), "versions": package_versions()}
