"""Small architectures for the exactness tests: seeded, in float64 and in evaluation mode, so that
two formulations of one computation (cached and teacher-forced decoding, fused and explicit
attention) can be compared to rounding error."""

from __future__ import annotations

import torch

from zoo.models.transformer import Transformer

__all__ = ["SMALL_VOCAB", "small_transformer"]

SMALL_VOCAB = 17
"""The vocabulary of :func:`small_transformer`."""


def small_transformer(**kwargs) -> Transformer:
    """Seed 0, a two-layer encoder-decoder (d_model 16, 2 heads, dropout 0.1 that ``eval`` turns
    off) over :data:`SMALL_VOCAB` tokens, in float64; ``kwargs`` go to :class:`Transformer`."""
    torch.manual_seed(0)
    model = Transformer(
        SMALL_VOCAB,
        d_model=16,
        num_heads=2,
        num_encoder_layers=2,
        num_decoder_layers=2,
        ffn_hidden=32,
        dropout=0.1,
        **kwargs,
    )
    return model.double().eval()
