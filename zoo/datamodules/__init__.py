"""LightningDataModules; importing this registers the built-in data modules.

Corpus modules derive from :class:`~zoo.datamodules.base.CorpusDataModule`; text handling
(tokenizers, codecs, datasets, collators) lives in :mod:`zoo.text`.
"""

from zoo.datamodules.base import CorpusDataModule
from zoo.datamodules.fra_eng import FraEngDataModule
from zoo.datamodules.listops import ListOpsDataModule
from zoo.datamodules.lra_text import LRATextDataModule
from zoo.datamodules.registry import DATAMODULE_REGISTRY, list_datamodules, register_datamodule
from zoo.datamodules.synthetic import SyntheticRegressionDataModule
from zoo.datamodules.text_classification import IMDBDataModule, SST2DataModule, TextClassificationDataModule

__all__ = [
    "DATAMODULE_REGISTRY",
    "CorpusDataModule",
    "FraEngDataModule",
    "IMDBDataModule",
    "LRATextDataModule",
    "ListOpsDataModule",
    "SST2DataModule",
    "SyntheticRegressionDataModule",
    "TextClassificationDataModule",
    "list_datamodules",
    "register_datamodule",
]
