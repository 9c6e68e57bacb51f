"""Encoder-decoder Transformer (Vaswani et al., 2017) for translation, with cached decoding."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.build.spec import AttentionChoice, AttentionSpec
from zoo.attention.contract.cache import LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import lengths_to_mask
from zoo.layers import (
    BlockConfig,
    DecoderBlock,
    EncoderBlock,
    KeyValue,
    StackConfig,
    StackPlan,
    build_stacks,
    scaled_embedding,
)

__all__ = ["Transformer", "TransformerState", "cross_attention_spec"]

log = logging.getLogger(__name__)

#: The decoder's cross-attention when a layer's attention works only within one sequence.
DEFAULT_CROSS_ATTENTION = "dot_product"


def cross_attention_spec(
    spec: AttentionSpec, cross_attention: str | None, cross_attention_kwargs: dict[str, Any] | None
) -> AttentionSpec:
    """The cross-attention spec of a decoder layer, from its self-attention spec.

    ``cross_attention=None`` means the layer's own variant when it can attend over another
    sequence, else ``dot_product`` (a sliding window, ``local``, is defined by positions within
    one sequence). Arguments carry over only with the name. Cross-attention takes no positions.
    """
    name = cross_attention
    if name is None:
        name = spec.name if spec.variant.supports_cross_attention else DEFAULT_CROSS_ATTENTION
        if name != spec.name:
            log.info("%r attends within one sequence only; its cross-attention uses %r.", spec.name, name)
    kwargs = cross_attention_kwargs
    if kwargs is None:
        kwargs = dict(spec.kwargs) if name == spec.name else {}
    cross = AttentionSpec(name, kwargs, spec.num_kv_heads, None, spec.dropout)
    return cross.require(padding=True, cross=True, bidirectional=True, role="the Transformer's cross-attention")


@dataclass
class TransformerState:
    """Decoding state: what the encoder computed once, and what the decoder has cached.

    ``memory_kv`` holds each decoder block's projected memory; ``memory_mask`` the source
    padding ``(B, Ls)``, True at real tokens; ``caches`` each block's self-attention cache of the positions
    decoded so far (``None`` before the first step or without the cache); ``prefix`` the tokens
    fed so far ``(B, t)``, used when decoding without the cache.
    """

    memory_kv: list[KeyValue]
    memory_mask: Tensor
    caches: list[LayerCache] | None
    prefix: Tensor

    def select(self, index: Tensor) -> TransformerState:
        """The rows ``index`` of every batch-first tensor (for beam search)."""
        pick = lambda kv: (kv[0].index_select(0, index), kv[1].index_select(0, index))  # noqa: E731
        return TransformerState(
            memory_kv=[pick(kv) for kv in self.memory_kv],
            memory_mask=self.memory_mask.index_select(0, index),
            caches=None if self.caches is None else [cache.select(index) for cache in self.caches],
            prefix=self.prefix.index_select(0, index),
        )


class Transformer(nn.Module):
    """Embeddings scaled by sqrt(d_model) (+ absolute positions) -> encoder blocks; decoder
    blocks with masked self-attention and encoder-decoder cross-attention -> vocabulary logits.

    Positions are a registered scheme (``position``): an absolute one is added to the
    embeddings; a rotary or bias one acts in the self-attention layers. The encoder and the
    decoder each build their own, shared by their layers: the decoder's is causal (T5's
    unidirectional buckets, ALiBi's one-sided distances). Cross-attention gets none.

    Source and target share one (joint subword) vocabulary, so one embedding matrix serves
    the encoder, the decoder and, with ``tie_embeddings``, the output projection.

    The defaults are the README's 30-minute CPU recipe on fra-eng: a small model that is fast
    per token, pre-LN, and no dropout (4-5 epochs barely overfit with label smoothing, and
    dropout costs a fifth of a CPU step). With a GPU and more steps, ``dropout=0.1`` and deeper
    stacks pay off.

    Args:
        vocab_size: Joint vocabulary size.
        d_model: Model size.
        num_heads: Attention heads.
        num_encoder_layers: Encoder blocks.
        num_decoder_layers: Decoder blocks.
        ffn_hidden: Inner FFN size.
        dropout: Dropout throughout.
        attention: Registered per-head scoring attention of the encoder and of the decoder's
            self-attention (needs padding and causal masks), or a list for hybrid stacks, applied
            to each stack: one entry per layer or a pattern repeated over its layers, each a name or
            a mapping with a ``name`` and that variant's arguments.
        attention_kwargs: Extra keyword arguments for a single named attention.
        norm_first: Pre-LN blocks (with a final norm) instead of post-LN.
        padding_idx: Padding token id.
        max_len: Longest sequence an absolute scheme covers.
        tie_embeddings: Share the embedding matrix with the output projection.
        use_cache: Decode with cached keys/values (False re-runs the decoder over the prefix).
        cross_attention: Scoring attention of the decoder's cross-attention; ``None``: see
            :func:`cross_attention_spec`.
        cross_attention_kwargs: Its keyword arguments (``None``: ``attention_kwargs`` if it is
            the same variant).
        num_kv_heads: Key/value heads of every attention (grouped-query attention, 1 =
            multi-query); must divide ``num_heads``; the decoder's cache shrinks by
            ``num_heads / num_kv_heads``. ``None``: ``num_heads``.
        position: Registered positional scheme (``zoo list``): ``sinusoidal``, ``learned``,
            ``none``, ``rope``, ``alibi``, ``t5``, or a plugin's.
        position_kwargs: Extra keyword arguments for it.
        attention_dropout: Dropout on the attention weights alone; ``None``: ``dropout``.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        d_model: int = 256,
        num_heads: int = 4,
        num_encoder_layers: int = 2,
        num_decoder_layers: int = 2,
        ffn_hidden: int = 1024,
        dropout: float = 0.0,
        attention: AttentionChoice = "dot_product",
        attention_kwargs: dict[str, Any] | None = None,
        norm_first: bool = True,
        padding_idx: int = 0,
        max_len: int = 1024,
        tie_embeddings: bool = True,
        use_cache: bool = True,
        cross_attention: str | None = None,
        cross_attention_kwargs: dict[str, Any] | None = None,
        num_kv_heads: int | None = None,
        position: str = "sinusoidal",
        position_kwargs: dict[str, Any] | None = None,
        attention_dropout: float | None = None,
    ) -> None:
        super().__init__()
        self.padding_idx, self.use_cache = padding_idx, use_cache
        self.embedding = scaled_embedding(vocab_size, d_model, padding_idx)
        self.embedding_dropout = nn.Dropout(dropout)
        config = BlockConfig(d_model, num_heads, ffn_hidden, dropout, norm_first)
        stack_config = StackConfig(
            block=config, attention=attention, attention_kwargs=attention_kwargs, num_kv_heads=num_kv_heads,
            attention_dropout=attention_dropout, position=position, position_kwargs=position_kwargs, max_len=max_len,
        )  # fmt: skip

        def decoder_block(config: BlockConfig, spec: AttentionSpec) -> DecoderBlock:
            return DecoderBlock(config, spec, cross_attention_spec(spec, cross_attention, cross_attention_kwargs))

        encoder, decoder = build_stacks(
            stack_config,
            StackPlan(
                num_encoder_layers,
                EncoderBlock,
                role="the Transformer's encoder (padding masks)",
                padding=True,
                layer_name="encoder layer",
            ),
            StackPlan(
                num_decoder_layers,
                decoder_block,
                role="the Transformer's decoder (causal and padding masks, decoding)",
                causal=True,
                padding=True,
                decoding=True,
                layer_name="decoder layer",
            ),
        )
        self.encoder_position, self.decoder_position = encoder.position, decoder.position
        self.encoder_blocks, self.decoder_blocks = encoder.blocks, decoder.blocks
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.output = None if tie_embeddings else nn.Linear(d_model, vocab_size)

    # -- shapes: B batch, Ls source length, Lt target length, D d_model, V vocabulary ------------

    def _logits(self, h: Tensor) -> Tensor:
        return F.linear(h, self.embedding.weight) if self.output is None else self.output(h)

    def _check(self, src: Tensor, src_lens: Tensor) -> None:
        if src.dim() != 2 or src_lens.shape != src.shape[:1]:
            raise ValueError(
                f"Expected src (B, Ls) and src_lens (B,); got {tuple(src.shape)} and {tuple(src_lens.shape)}."
            )

    def encode_memory(self, src: Tensor, src_lens: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder output ``(B, Ls, D)`` and the source padding ``(B, Ls)``, True at real tokens."""
        self._check(src, src_lens)
        keep = lengths_to_mask(src_lens, src.shape[1])
        context = AttentionContext.for_keys(keep)  # the encoder's, built once for every layer
        x = self.embedding_dropout(self.encoder_position.embed(self.embedding(src)))
        for block in self.encoder_blocks:
            x, _ = block(x, context)
        return self.encoder_norm(x), keep

    def _decode(
        self, tokens: Tensor, state: TransformerState, *, offset: int, need_weights: bool = False
    ) -> tuple[Tensor, list[LayerCache], Tensor | None]:
        """Run the decoder over ``tokens`` ``(B, t)`` placed after ``offset`` cached positions."""
        x = self.embedding_dropout(self.decoder_position.embed(self.embedding(tokens), offset=offset))
        context = AttentionContext(is_causal=True, offset=offset)  # the decoder's self-attention
        cross_context = AttentionContext.for_keys(state.memory_mask, need_weights=need_weights)
        caches, weights = [], None
        for i, block in enumerate(self.decoder_blocks):
            cached = state.caches[i] if state.caches is not None else None
            x, cache, weights = block(x, state.memory_kv[i], cross_context, cache=cached, context=context)
            caches.append(cache)
        return self._logits(self.decoder_norm(x)), caches, weights

    def forward(
        self, src: Tensor, src_lens: Tensor, tgt_in: Tensor, *, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher forcing: logits ``(B, Lt, V)`` for every target position, and if asked the
        last decoder block's cross-attention weights ``(B, H, Lt, Ls)``."""
        if tgt_in.dim() != 2 or tgt_in.shape[0] != src.shape[0]:
            raise ValueError(f"Expected tgt_in (B, Lt) with B = {src.shape[0]}; got {tuple(tgt_in.shape)}.")
        state = self.encode(src, src_lens)
        logits, _, weights = self._decode(tgt_in, state, offset=0, need_weights=need_weights)
        return logits, weights

    # -- the EncoderDecoder protocol of zoo.models.decoding -------------------------------------

    def encode(self, src: Tensor, src_lens: Tensor) -> TransformerState:
        memory, mask = self.encode_memory(src, src_lens)
        memory_kv = [block.project_memory(memory) for block in self.decoder_blocks]
        return TransformerState(memory_kv, mask, None, src.new_zeros((src.shape[0], 0)))

    def decode_step(self, tokens: Tensor, state: TransformerState) -> tuple[Tensor, TransformerState]:
        prefix = torch.cat([state.prefix, tokens.unsqueeze(1)], dim=1)
        if self.use_cache:
            logits, caches, _ = self._decode(tokens.unsqueeze(1), state, offset=state.prefix.shape[1])
            return logits[:, -1], replace(state, caches=caches, prefix=prefix)
        logits, _, _ = self._decode(prefix, replace(state, caches=None), offset=0)
        return logits[:, -1], replace(state, prefix=prefix)

    def reorder_state(self, state: TransformerState, index: Tensor) -> TransformerState:
        return state.select(index)
