"""Architectures as plain ``nn.Module``s (no Lightning), each taking its attention by name."""

from zoo.models.kernel_regression import KernelRegression
from zoo.models.registry import MODEL_REGISTRY, list_models, register_model
from zoo.models.sentiment import SentimentClassifier

__all__ = ["MODEL_REGISTRY", "KernelRegression", "SentimentClassifier", "list_models", "register_model"]
