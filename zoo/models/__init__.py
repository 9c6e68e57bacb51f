"""Architectures as plain ``nn.Module``s (no Lightning), each taking its attention by name."""

from zoo.models.autoencoder import SequenceAutoEncoder
from zoo.models.classifier import SentimentClassifier, SequenceClassifier
from zoo.models.decoding import DecodeLimits, beam_search, greedy_decode
from zoo.models.gpt import GPT
from zoo.models.kernel_regression import KernelRegression
from zoo.models.recall import RecallLM
from zoo.models.seq2seq import Seq2SeqAttention
from zoo.models.transformer import Transformer

__all__ = [
    "DecodeLimits",
    "GPT",
    "KernelRegression",
    "RecallLM",
    "SentimentClassifier",
    "SequenceClassifier",
    "Seq2SeqAttention",
    "SequenceAutoEncoder",
    "Transformer",
    "beam_search",
    "greedy_decode",
]
