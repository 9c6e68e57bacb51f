"""LightningDataModules; importing this registers the built-in data modules."""

from zoo.datamodules.registry import DATAMODULE_REGISTRY, list_datamodules, register_datamodule
from zoo.datamodules.fra_eng import FraEngDataModule
from zoo.datamodules.listops import ListOpsDataModule
from zoo.datamodules.lra_text import LRATextDataModule
from zoo.datamodules.synthetic import SyntheticRegressionDataModule
from zoo.datamodules.text_classification import IMDBDataModule, SST2DataModule, TextClassificationDataModule

__all__ = [
    "DATAMODULE_REGISTRY",
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
