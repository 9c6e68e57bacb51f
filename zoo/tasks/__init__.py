"""LightningModules, one per task; importing this registers the built-in models."""

from zoo.tasks.base import ZooTask
from zoo.tasks.classification import Sentiment
from zoo.tasks.regression import NadarayaWatson
from zoo.tasks.translation import Seq2SeqTranslator, TransformerTranslator, TranslationTask

__all__ = ["NadarayaWatson", "Sentiment", "Seq2SeqTranslator", "TransformerTranslator", "TranslationTask", "ZooTask"]
