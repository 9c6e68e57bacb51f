"""Self-attention sequence classifier: Transformer encoder, a pooled vector, linear head.

The architecture behind the ``classifier`` model and its ``sentiment`` configuration: token
embeddings and positions, encoder blocks with any registered scoring attention, then one vector
per sequence (the mean or maximum over the valid tokens, or the final state of a learned
classification token) and a linear layer.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from zoo.attention.build.spec import AttentionChoice
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import lengths_to_mask
from zoo.layers import BlockConfig, EncoderBlock, StackConfig, StackPlan, build_stacks, scaled_embedding

__all__ = ["SentimentClassifier", "SequenceClassifier"]

POOLINGS = ("mean", "max", "mean_max", "cls")


class SequenceClassifier(nn.Module):
    """Token embedding (scaled by sqrt(d_model)) + positions + encoder blocks + pooling + a linear
    classifier.

    Pooling reads one vector per sequence: ``mean`` over the valid tokens, ``max``, both
    concatenated (``mean_max``), or ``cls``: a learned classification token is prepended to every
    sequence (as BERT's ``[CLS]``, and the Long Range Arena's models), attends with the others in
    every block, and its final state alone feeds the classifier. It then holds position 0, which
    is what ``longformer`` attention makes global by default (``global_tokens=1``), so the pooled
    token sees the whole sequence in every block; positions given to an attention
    (``global_tokens`` as a list, ``max_len`` of ``linformer`` or of an absolute scheme) count
    it. The token starts as a scaled word embedding does (unit variance) and, being a vector, is
    not weight-decayed (:func:`zoo.tasks.optim.adamw_with_warmup`).

    Positions are a registered scheme (``position``, default ``sinusoidal``): an absolute one is
    added to the embeddings, a rotary or bias one (``rope``, ``alibi``, ``t5``) is built once and
    shared by the blocks' self-attention. Without positions (``position="none"``) the model sees
    no word order beyond what its attention builds in: with dense attention it reads a bag of
    words; with ``local`` attention, a bag of words in context (each token mixed with its
    neighbours, though not which neighbour came first unless the window learns a
    ``relative_bias``). On SST-2, trained on short phrases and evaluated on whole sentences,
    ``local`` attention without positions scored higher than with them (README, "Results").

    Args:
        vocab_size: Vocabulary size (from the data module).
        num_classes: Number of labels.
        d_model: Embedding and model size.
        num_heads: Attention heads per block.
        num_layers: Encoder blocks.
        ffn_hidden: Inner size of each block's FFN.
        dropout: Dropout throughout.
        attention: Registered per-head scoring attention name, or a list for a hybrid stack: one
            entry per layer or a pattern repeated over the layers, each a name or a mapping with a
            ``name`` and that variant's arguments (:func:`zoo.attention.build.spec.layer_specs`).
        attention_kwargs: Extra keyword arguments for a single named attention.
        padding_idx: Token id of padding (from the data module).
        max_len: Longest sequence an absolute scheme covers (the classification token included).
        norm_first: Pre-LN blocks instead of post-LN.
        pooling: ``mean`` over valid tokens, ``max``, both concatenated (``mean_max``), or the
            final state of a prepended classification token (``cls``).
        position: Registered positional scheme (``zoo list``).
        position_kwargs: Extra keyword arguments for it.
        num_kv_heads: Key/value heads per block (grouped-query attention); ``None``: ``num_heads``.
        attention_dropout: Dropout on the attention weights alone; ``None``: ``dropout``. On CPU a
            nonzero value takes SDPA off its fused kernel (the Long Range Arena CPU overlays set 0).
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        num_classes: int = 2,
        d_model: int = 128,
        num_heads: int = 4,
        num_layers: int = 2,
        ffn_hidden: int = 256,
        dropout: float = 0.1,
        attention: AttentionChoice = "dot_product",
        attention_kwargs: dict[str, Any] | None = None,
        padding_idx: int = 0,
        max_len: int = 4096,
        norm_first: bool = False,
        pooling: Literal["mean", "max", "mean_max", "cls"] = "mean",
        position: str = "sinusoidal",
        position_kwargs: dict[str, Any] | None = None,
        num_kv_heads: int | None = None,
        attention_dropout: float | None = None,
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(map(repr, POOLINGS))}; got {pooling!r}.")
        self.pooling = pooling
        self.embedding = scaled_embedding(vocab_size, d_model, padding_idx)
        #: the learned classification token (``pooling="cls"``), prepended at position 0
        self.cls_token = nn.Parameter(torch.randn(d_model)) if pooling == "cls" else None
        self.num_prefix_tokens = int(self.cls_token is not None)
        config = BlockConfig(d_model, num_heads, ffn_hidden, dropout, norm_first)
        stack_config = StackConfig(
            block=config, attention=attention, attention_kwargs=attention_kwargs, num_kv_heads=num_kv_heads,
            attention_dropout=attention_dropout, position=position, position_kwargs=position_kwargs, max_len=max_len,
        )  # fmt: skip
        [(self.position, self.blocks)] = build_stacks(
            stack_config,
            StackPlan(num_layers, EncoderBlock, role="the sequence classifier (padding masks)", padding=True),
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(2 * d_model if pooling == "mean_max" else d_model, num_classes)

    def encode(
        self, tokens: Tensor, valid_lens: Tensor, *, need_weights: bool = False
    ) -> tuple[Tensor, Tensor, list[Tensor]]:
        """The encoder's final states ``(B, num_prefix_tokens + L, D)``, the mask of their valid
        positions, and, if asked, one ``(B, H, L', L')`` weight tensor per block (else an empty list)."""
        x = self.embedding(tokens)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], 1, -1), x], dim=1)
        x = self.dropout(self.position.embed(x))
        keep = lengths_to_mask(valid_lens + self.num_prefix_tokens, x.shape[1])  # (B, L')
        context = AttentionContext.for_keys(keep, need_weights=need_weights)  # built once, read by every block
        weights = []
        for block in self.blocks:
            x, block_weights = block(x, context)
            if block_weights is not None:
                weights.append(block_weights)
        return self.final_norm(x), keep, weights

    def forward(self, tokens: Tensor, valid_lens: Tensor, *, need_weights: bool = False) -> tuple[Tensor, list[Tensor]]:
        """``tokens``: ``(B, L)``; ``valid_lens``: ``(B,)``. Returns logits ``(B, C)`` and, if
        asked, one ``(B, H, L', L')`` weight tensor per block, ``L' = num_prefix_tokens + L``
        (else an empty list)."""
        x, keep, weights = self.encode(tokens, valid_lens, need_weights=need_weights)
        pooled = x[:, 0] if self.pooling == "cls" else self._pool(x, keep, valid_lens)
        return self.classifier(self.dropout(pooled)), weights

    def _pool(self, x: Tensor, keep: Tensor, valid_lens: Tensor) -> Tensor:
        """``(B, L, D)`` -> ``(B, D)`` (``2D`` for ``mean_max``), ignoring padding."""
        pooled = []
        if self.pooling in ("mean", "mean_max"):
            pooled.append((x * keep.unsqueeze(-1)).sum(1) / valid_lens.clamp_min(1).unsqueeze(-1).to(x.dtype))
        if self.pooling in ("max", "mean_max"):
            pooled.append(x.masked_fill(~keep.unsqueeze(-1), torch.finfo(x.dtype).min).amax(1))
        return torch.cat(pooled, dim=-1)


#: The architecture's name before it was generalised beyond sentiment (issue 17), kept for code importing it.
SentimentClassifier = SequenceClassifier
