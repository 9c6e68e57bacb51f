"""Self-attention sentiment classifier: Transformer encoder, pooling over valid tokens, linear head."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from zoo.attention import require_attention
from zoo.attention.masking import lengths_to_mask
from zoo.layers import EncoderBlock, scaled_embedding
from zoo.positions import create_position, require_position

__all__ = ["SentimentClassifier"]


class SentimentClassifier(nn.Module):
    """Token embedding (scaled by sqrt(d_model)) + positions + encoder blocks + pooling over the
    valid tokens + a linear classifier.

    Positions are a registered scheme (``position``, default ``sinusoidal``): an absolute one is
    added to the embeddings, a rotary or bias one (``rope``, ``alibi``, ``t5``) is built once and
    shared by the blocks' self-attention. Without positions (``position="none"``) the model sees
    no word order beyond what its attention builds in: with dense attention it reads a bag of
    words; with ``local`` attention, a bag of words in context (each token mixed with its
    neighbours, though not which neighbour came first unless the window learns a
    ``relative_bias``). On SST-2,
    trained on short phrases and evaluated on whole sentences, ``local`` attention without
    positions scored higher than with them (README, "Results").

    Args:
        vocab_size: Vocabulary size (from the data module).
        num_classes: Number of labels.
        d_model: Embedding and model size.
        num_heads: Attention heads per block.
        num_layers: Encoder blocks.
        ffn_hidden: Inner size of each block's FFN.
        dropout: Dropout throughout.
        attention: Registered per-head scoring attention name.
        attention_kwargs: Extra keyword arguments for it.
        padding_idx: Token id of padding (from the data module).
        max_len: Longest sequence an absolute scheme covers.
        norm_first: Pre-LN blocks instead of post-LN.
        pooling: ``mean`` over valid tokens, ``max``, or both concatenated (``mean_max``).
        position: Registered positional scheme (``zoo list``).
        position_kwargs: Extra keyword arguments for it.
        num_kv_heads: Key/value heads per block (grouped-query attention); ``None``: ``num_heads``.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int = 2,
        d_model: int = 128,
        num_heads: int = 4,
        num_layers: int = 2,
        ffn_hidden: int = 256,
        dropout: float = 0.1,
        attention: str = "dot_product",
        attention_kwargs: dict[str, Any] | None = None,
        padding_idx: int = 0,
        max_len: int = 4096,
        norm_first: bool = False,
        pooling: Literal["mean", "max", "mean_max"] = "mean",
        position: str = "sinusoidal",
        position_kwargs: dict[str, Any] | None = None,
        num_kv_heads: int | None = None,
    ) -> None:
        super().__init__()
        require_attention(attention, padding=True, role="the sentiment classifier (padding masks)")
        require_position(position, attention, role="the sentiment classifier")
        if pooling not in ("mean", "max", "mean_max"):
            raise ValueError(f"pooling must be 'mean', 'max' or 'mean_max', got {pooling!r}.")
        self.pooling = pooling
        self.embedding = scaled_embedding(vocab_size, d_model, padding_idx)
        self.position = create_position(
            position, d_model=d_model, num_heads=num_heads, max_len=max_len, **(position_kwargs or {})
        )
        self.blocks = nn.ModuleList(
            EncoderBlock(
                d_model,
                num_heads,
                ffn_hidden,
                dropout,
                attention,
                attention_kwargs,
                norm_first,
                num_kv_heads,
                position=self.position.for_attention,
            )
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * d_model if pooling == "mean_max" else d_model, num_classes)

    def forward(self, tokens: Tensor, valid_lens: Tensor, *, need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """``tokens``: ``(B, L)``; ``valid_lens``: ``(B,)``. Returns logits ``(B, C)`` and, if
        asked, one ``(B, H, L, L)`` weight tensor per block (else an empty list)."""
        x = self.dropout(self.position.embed(self.embedding(tokens)))
        keep = lengths_to_mask(valid_lens, tokens.shape[1])  # (B, L)
        attn_mask = keep[:, None, :]  # built once, shared by all blocks
        weights = []
        for block in self.blocks:
            x, block_weights = block(x, attn_mask=attn_mask, need_weights=need_weights)
            if block_weights is not None:
                weights.append(block_weights)
        x = self.final_norm(x)
        return self.classifier(self.dropout(self._pool(x, keep, valid_lens))), weights

    def _pool(self, x: Tensor, keep: Tensor, valid_lens: Tensor) -> Tensor:
        """``(B, L, D)`` -> ``(B, D)`` (``2D`` for ``mean_max``), ignoring padding."""
        pooled = []
        if self.pooling in ("mean", "mean_max"):
            pooled.append((x * keep.unsqueeze(-1)).sum(1) / valid_lens.clamp_min(1).unsqueeze(-1).to(x.dtype))
        if self.pooling in ("max", "mean_max"):
            pooled.append(x.masked_fill(~keep.unsqueeze(-1), torch.finfo(x.dtype).min).amax(1))
        return torch.cat(pooled, dim=-1)
