"""LightningModules, one per task, and the model registry they fill when this is imported."""

from zoo.tasks.registry import MODEL_REGISTRY, list_models, register_model
from zoo.tasks.base import ZooTask
from zoo.tasks.classification import Classifier, Sentiment
from zoo.tasks.language_model import LanguageModel
from zoo.tasks.recall import RecallModel
from zoo.tasks.regression import NadarayaWatson
from zoo.tasks.translation import Seq2SeqTranslator, TransformerTranslator, TranslationTask

__all__ = [
    "MODEL_REGISTRY",
    "Classifier",
    "LanguageModel",
    "NadarayaWatson",
    "RecallModel",
    "Sentiment",
    "Seq2SeqTranslator",
    "TransformerTranslator",
    "TranslationTask",
    "ZooTask",
    "list_models",
    "register_model",
]
