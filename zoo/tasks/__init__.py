"""LightningModules, one per task; importing this registers the built-in models."""

from zoo.tasks.base import ZooTask
from zoo.tasks.classification import Sentiment
from zoo.tasks.regression import NadarayaWatson

__all__ = ["NadarayaWatson", "Sentiment", "ZooTask"]
