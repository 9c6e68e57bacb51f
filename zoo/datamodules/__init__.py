"""LightningDataModules, one corpus per module (or package, for a corpus with a generator and
tokens of its own, like :mod:`~zoo.datamodules.listops`), and the registry that names them.

Importing this package is light: each data module's module is imported when the registry is first
asked for a name (:data:`~zoo.datamodules.registry.BUILTIN_MODULES`) or when one of the names
below is used, so a corpus's codec (``zoo.datamodules.listops.tokens``) loads without every other
corpus's machinery. Corpus modules derive from :class:`~zoo.datamodules.base.CorpusDataModule`;
text handling shared by corpora (tokenizers, codecs, datasets, collators) lives in :mod:`zoo.text`.
"""

from __future__ import annotations

import importlib
from typing import Any

from zoo.datamodules.registry import DATAMODULE_REGISTRY, list_datamodules, register_datamodule

_LAZY = {
    "CorpusDataModule": "zoo.datamodules.base",
    "FraEngDataModule": "zoo.datamodules.fra_eng",
    "IMDBDataModule": "zoo.datamodules.text_classification",
    "InductionHeadsDataModule": "zoo.datamodules.recall",
    "LRATextDataModule": "zoo.datamodules.lra_text",
    "ListOpsDataModule": "zoo.datamodules.listops.datamodule",
    "MADDataModule": "zoo.datamodules.recall",
    "MQARDataModule": "zoo.datamodules.recall",
    "SST2DataModule": "zoo.datamodules.text_classification",
    "SelectiveCopyingDataModule": "zoo.datamodules.recall",
    "ShakespeareDataModule": "zoo.datamodules.shakespeare",
    "SyntheticRegressionDataModule": "zoo.datamodules.synthetic",
    "TextClassificationDataModule": "zoo.datamodules.text_classification",
    "TextDataModule": "zoo.datamodules.text",
}

__all__ = ["DATAMODULE_REGISTRY", *sorted(_LAZY), "list_datamodules", "register_datamodule"]


def __getattr__(name: str) -> Any:
    """The data-module classes, each imported from its module on first use."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'zoo.datamodules' has no attribute {name!r}")
