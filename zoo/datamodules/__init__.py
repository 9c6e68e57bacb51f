"""LightningDataModules; importing this registers the built-in data modules."""

from zoo.datamodules.registry import DATAMODULE_REGISTRY, list_datamodules, register_datamodule
from zoo.datamodules.synthetic import SyntheticRegressionDataModule

__all__ = ["DATAMODULE_REGISTRY", "SyntheticRegressionDataModule", "list_datamodules", "register_datamodule"]
