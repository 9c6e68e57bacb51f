"""A decoder-only Transformer language model (GPT-2's shape, as nanoGPT writes it), with any
registered causal attention, any position scheme and hybrid stacks, and cached generation; without
its MLPs (``ffn_hidden=0``) and with positions chosen per family (``position="auto"``), the
sequence model of Zoology's recall experiments; with a gated MLP (``mlp="swiglu"``), RMS norms
(``norm``) and an untied head (``tie_embeddings=False``), LLaMA's and Qwen3-Next's decoder
(:mod:`zoo.integrations.hf_models` converts Qwen3-Next's weights).

Shapes: B batch, T positions, D ``d_model``, V vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.build.factory import get_attention
from zoo.attention.build.spec import AttentionChoice
from zoo.attention.contract.base import IncompatibleAttentionError, capabilities
from zoo.attention.contract.cache import LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.kv_sharing import KeyValueStore, read_sources
from zoo.attention.modules.recurrent import RecurrentLayer
from zoo.errors import DataError
from zoo.layers import BlockConfig, CausalBlock, GatedFFN, StackConfig, StackPlan, build_stacks
from zoo.layers.attention_residuals import DepthAttention, DepthSources
from zoo.layers.norms import build_norm

__all__ = ["AUTO_POSITION", "GPT", "family_position"]

#: GPT-2's initial standard deviation of every weight matrix and embedding
INIT_STD = 0.02

#: ``mlp``: the block MLP's activation and whether it is gated (nanoGPT's GELU MLP; LLaMA's and Qwen's SwiGLU)
MLPS: dict[str, tuple[str, bool]] = {"gelu": ("gelu", False), "swiglu": ("silu", True)}

#: ``residual``: how a sublayer's input is formed (the sum of the earlier outputs; attention over them)
RESIDUALS = ("sum", "attention")

AUTO_POSITION = "auto"
"""``position`` that picks the scheme from the layers' families (:func:`family_position`)."""


def family_position(attention: AttentionChoice) -> str:
    """The position scheme Zoology gives a stack of these layers: ``none`` when any layer is
    recurrent (a :class:`~zoo.attention.modules.recurrent.RecurrentLayer`: its decays and short
    convolutions give the stack its order, as Zoology's convolutions, SSMs and recurrences get no
    positions), ``learned`` otherwise (Zoology's softmax attention, which sees no order without
    them, gets learned absolute positions; so does any scoring attention here)."""
    entries = [attention] if isinstance(attention, (str, Mapping)) else list(attention)
    names = [entry if isinstance(entry, str) else entry.get("name") for entry in entries]
    # an entry without a name is left to the stack's check, which says what an entry holds
    recurrent = any(isinstance(name, str) and issubclass(get_attention(name), RecurrentLayer) for name in names)
    return "none" if recurrent else "learned"


class GPT(nn.Module):
    """Token embeddings (+ absolute positions) -> pre-LN causal blocks -> final norm -> logits.

    The output projection is the token embedding (tied, as GPT-2's) unless ``tie_embeddings`` is
    off (then ``lm_head``, a linear map without bias); weights start as GPT-2's:
    normal with standard deviation 0.02, the projections that end a residual branch (the
    attention's output, the MLP's last layer) scaled by ``1 / sqrt(2 * num_layers)``, biases
    zero. Attention layers get the same for their ``q_proj``, ``k_proj``, ``v_proj`` and
    ``out_proj``; scoring attentions and layers keep the initialisation they define for
    parameters of their own (gates, convolutions, decays), and Canon layers ``nn.Conv1d``'s, as
    the paper's code keeps it.

    Positions are a registered scheme (``position``, default ``learned`` as nanoGPT's): an
    absolute one is added to the embeddings and covers ``block_size`` positions; a rotary or bias
    one acts in the layers; ``auto`` picks by family as Zoology does (:func:`family_position`).
    Every layer's attention must be causal; ``attention`` may be a list for a hybrid stack
    (:func:`zoo.attention.build.spec.layer_specs`), whose entries' ``kv_source`` make layers read an
    earlier layer's keys and values (Gemma 4's KV sharing, :mod:`zoo.attention.build.kv_sources`).

    Without MLPs (``ffn_hidden=0``) each block is ``x + dropout(attention(norm(x)))``, the
    sequence-mixer-only model of Zoology's MQAR experiments (its ``state_mixer`` the identity).
    ``forward(..., output_mask=...)`` computes the output projection only where asked, which a
    task that scores a few positions over a large vocabulary needs (MQAR: 16 of 256 positions,
    8,192 ids).

    Args:
        vocab_size: Tokens (from the data).
        block_size: The longest context, in tokens (from the data).
        d_model: Embedding and model size.
        num_heads: Attention heads per layer.
        num_layers: Blocks.
        ffn_hidden: Inner size of each MLP; ``None``: ``4 * d_model``; 0: no MLP (Zoology's
            recall models).
        dropout: Dropout on the embeddings and the residual branches, and on the attention
            weights, unless ``embedding_dropout`` and ``attention_dropout`` say otherwise.
        bias: Biases in the linear layers and layer norms (nanoGPT's ``bias``).
        attention: Registered causal scoring attention or attention layer, or a list of entries
            (hybrid stacks, which may mix the two kinds).
        attention_kwargs: Extra keyword arguments for a single named attention.
        position: Registered positional scheme (``zoo list``), or ``auto``: by the layers'
            families, as Zoology sets them (:func:`family_position`).
        position_kwargs: Extra keyword arguments for it.
        num_kv_heads: Key/value heads per layer (grouped-query attention); ``None``: ``num_heads``.
        attention_dropout: Dropout on the attention weights alone; ``None``: ``dropout``.
        embedding_dropout: Dropout on the embeddings alone; ``None``: ``dropout`` (Zoology: 0.1
            there, 0 on the residual branches).
        canon: Canon layers (Allen-Zhu, 2025; :mod:`zoo.layers.canon`), any of ``"ABCD"``: a
            residual causal convolution of 4 taps before the attention (A), on its queries, keys
            and values (B: a recurrent layer's own convolution stands in), before the MLP (C) and
            inside it (D); ``""`` (default) none. C and D need an MLP.
        mlp: The MLP: ``gelu`` (nanoGPT's ``Linear -> GELU -> Linear``) or ``swiglu`` (LLaMA's and
            Qwen's gated MLP, :class:`~zoo.layers.GatedFFN`, ``ffn_hidden`` wide; no Canon-D).
        norm: The blocks' norms and the final norm (:mod:`zoo.layers.norms`): ``layernorm``
            (nanoGPT's), ``rmsnorm`` or ``zero_centred_rmsnorm`` (Qwen3-Next's ``1 + w`` scale).
        norm_eps: Added to every norm's variance or mean square.
        tie_embeddings: The output projection is the token embedding (GPT-2's); off: a separate
            ``lm_head`` (Qwen3-Next's and LLaMA's).
        residual: ``sum`` (the residual stream, ``x + sublayer(norm(x))``) or ``attention``:
            Kimi's attention residuals (:mod:`zoo.layers.attention_residuals`), each sublayer's
            input and the final norm's a softmax mix over depth of the embedding and the earlier
            sublayers' outputs, with a learned query each (``depth_attention``; fla's
            ``attnres``).
        residual_block_size: With ``residual="attention"``, the sublayers (attention and MLP
            counted alike) summed into one source (block attention residuals; fla's
            ``attnres_block_size``); 1: every output its own source (full attention residuals).
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        block_size: int = 256,
        d_model: int = 384,
        num_heads: int = 6,
        num_layers: int = 6,
        ffn_hidden: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        attention: AttentionChoice = "dot_product",
        attention_kwargs: dict[str, Any] | None = None,
        position: str = "learned",
        position_kwargs: dict[str, Any] | None = None,
        num_kv_heads: int | None = None,
        attention_dropout: float | None = None,
        embedding_dropout: float | None = None,
        canon: str = "",
        mlp: str = "gelu",
        norm: str = "layernorm",
        norm_eps: float = 1e-5,
        tie_embeddings: bool = True,
        residual: str = "sum",
        residual_block_size: int = 1,
    ) -> None:
        super().__init__()
        if block_size < 1:
            raise ValueError(f"block_size must be a positive number of tokens, got {block_size}.")
        if mlp not in MLPS:
            raise DataError(f"unknown mlp {mlp!r}; choose one of {', '.join(MLPS)}.")
        activation, glu = MLPS[mlp]
        if residual not in RESIDUALS:
            raise DataError(f"unknown residual {residual!r}; choose one of {', '.join(RESIDUALS)}.")
        if residual_block_size < 1 or (residual == "sum" and residual_block_size != 1):
            raise DataError(
                f"residual_block_size={residual_block_size}: give a positive number of sublayers, "
                "and only with residual='attention'."
            )
        self.block_size = block_size
        if position == AUTO_POSITION:
            position = family_position(attention)
        self.embedding = nn.Embedding(vocab_size, d_model)
        hidden = 4 * d_model if ffn_hidden is None else ffn_hidden
        config = BlockConfig(
            d_model, num_heads, hidden, dropout, norm_first=True, activation=activation, bias=bias, ffn_dropout=0.0,
            canon=canon, glu=glu, norm=norm, norm_eps=norm_eps,
        )  # fmt: skip
        stack_config = StackConfig(
            block=config, attention=attention, attention_kwargs=attention_kwargs, num_kv_heads=num_kv_heads,
            attention_dropout=attention_dropout, position=position, position_kwargs=position_kwargs, max_len=block_size,
        )  # fmt: skip
        [(self.position, self.blocks)] = build_stacks(
            stack_config,
            StackPlan(num_layers, CausalBlock, role="the GPT (causal self-attention)", causal=True, kv_sharing=True),
        )
        #: the layers whose keys and values later layers read (entries' ``kv_source``)
        self.kv_sources = read_sources(block.attention for block in self.blocks)
        self.dropout = nn.Dropout(dropout if embedding_dropout is None else embedding_dropout)
        self.final_norm = build_norm(norm, d_model, norm_eps, bias)
        self.lm_head = None if tie_embeddings else nn.Linear(d_model, vocab_size, bias=False)
        # one query before each sublayer but the first (which reads the embedding) and one before the final norm
        sublayers = num_layers * (1 if hidden == 0 else 2)
        self.residual_block_size = residual_block_size
        self.depth_attention = (
            nn.ModuleList(DepthAttention(d_model, norm_eps) for _ in range(sublayers))
            if residual == "attention"
            else None
        )
        self._init_weights(num_layers)

    @torch.no_grad()
    def _init_weights(self, num_layers: int) -> None:
        residual_std = INIT_STD / math.sqrt(2 * num_layers)
        nn.init.normal_(self.embedding.weight, std=INIT_STD)
        for block in self.blocks:
            layer = block.attention
            firsts, second = _mlp_projections(block.ffn)
            q, k, v, out = (getattr(layer, name, None) for name in ("q_proj", "k_proj", "v_proj", "out_proj"))
            for projection in (q, k, v, *firsts, out, second):  # nanoGPT's order: the seeded weights are its
                if projection is None:  # no MLP, or a variant that reads no queries or keys
                    continue
                nn.init.normal_(
                    projection.weight,
                    std=residual_std if projection in (out, second) else INIT_STD,
                )
                if projection.bias is not None:
                    nn.init.zeros_(projection.bias)
        if self.lm_head is not None:
            nn.init.normal_(self.lm_head.weight, std=INIT_STD)

    @property
    def vocab_size(self) -> int:
        return self.embedding.num_embeddings

    def forward(
        self,
        tokens: Tensor,
        caches: list[LayerCache] | None = None,
        *,
        use_cache: bool = False,
        output_mask: Tensor | None = None,
    ) -> tuple[Tensor, list[LayerCache] | None]:
        """Logits ``(B, T, V)`` of the next token at every position of ``tokens`` ``(B, T)``.

        With ``use_cache``, ``tokens`` continue the positions in ``caches`` (one per layer, None to
        start) and the caches come back extended by them; without it (training), none. With
        ``output_mask`` (booleans ``(B, T)``), the final norm and the output projection run only
        where it is True, and the logits are ``(N, V)``, one row per such position in row-major
        order (``output_mask.nonzero()``'s).
        """
        hidden, new_caches = self._hidden(tokens, caches, use_cache, output_mask)
        return self.head(hidden), new_caches

    def forward_features(self, tokens: Tensor, *, output_mask: Tensor | None = None) -> Tensor:
        """:meth:`forward` without the output projection (timm's split) and without caches: the
        final hidden states ``(B, T, D)`` after the final norm, or ``(N, D)`` at the positions of
        ``output_mask``."""
        return self._hidden(tokens, None, False, output_mask)[0]

    def _hidden(
        self, tokens: Tensor, caches: list[LayerCache] | None, use_cache: bool, output_mask: Tensor | None
    ) -> tuple[Tensor, list[LayerCache] | None]:
        """The final hidden states (after the final norm) and the extended caches: :meth:`forward`
        before its output projection."""
        if tokens.dim() != 2:
            raise ValueError(f"GPT expects tokens of shape (batch, length); got {tuple(tokens.shape)}.")
        if output_mask is not None and (output_mask.shape != tokens.shape or output_mask.dtype != torch.bool):
            raise ValueError(
                f"GPT: output_mask must be booleans shaped as the tokens {tuple(tokens.shape)}; "
                f"got {output_mask.dtype} {tuple(output_mask.shape)}."
            )
        offset = 0 if not caches else caches[0].length
        if offset + tokens.shape[1] > self.block_size:
            raise ValueError(
                f"GPT: {offset + tokens.shape[1]} positions exceed block_size={self.block_size}; "
                "generate() slides the window, a forward pass does not."
            )
        x = self.dropout(self.position.embed(self.embedding(tokens), offset))
        store = KeyValueStore(self.kv_sources) if self.kv_sources else None  # keys and values layers pass on
        context = AttentionContext(is_causal=True, offset=offset, kv_store=store)  # what every layer reads, built once
        new_caches = []
        if self.depth_attention is not None:
            x, new_caches = self._depth_mixed(x, caches, use_cache, context)
        else:
            for i, block in enumerate(self.blocks):
                if use_cache:
                    x, cache = block.forward_cached(x, caches[i] if caches else None, context)
                    new_caches.append(cache)
                else:
                    x, _ = block(x, context)
        if output_mask is not None:
            x = x[output_mask]
        return self.final_norm(x), new_caches if use_cache else None

    def _depth_mixed(
        self, x: Tensor, caches: list[LayerCache] | None, use_cache: bool, context: AttentionContext
    ) -> tuple[Tensor, list[LayerCache | None]]:
        """The blocks under attention residuals: each sublayer's output joins the sources and the
        next input is their mix; returns the final norm's input and the blocks' caches (None
        each without ``use_cache``). The mix is per token, so decoding keeps no cache of its own."""
        sources, queries = DepthSources(x, self.residual_block_size), iter(self.depth_attention)

        def then_mix(output: Tensor) -> Tensor:
            sources.add(output)
            return next(queries)(sources.sources())

        new_caches = []
        for i, block in enumerate(self.blocks):
            last, cache = block.forward_sublayers(
                x, then_mix, caches[i] if caches else None, context, use_cache=use_cache
            )
            x = then_mix(last)
            new_caches.append(cache)
        return x, new_caches

    def head(self, hidden: Tensor) -> Tensor:
        """Logits ``(..., V)`` of final hidden states ``(..., D)``: the output projection, tied
        to the token embedding unless ``tie_embeddings`` was off."""
        return F.linear(hidden, self.embedding.weight if self.lm_head is None else self.lm_head.weight)

    @torch.no_grad()
    def generate(
        self,
        tokens: Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
        use_cache: bool = True,
    ) -> Iterator[Tensor]:
        """Sample ``max_new_tokens`` tokens after the prompts ``tokens`` ``(B, T0)``, yielding each
        ``(B,)`` as it is drawn (so a caller can stream text).

        Each step samples from ``softmax(logits / temperature)`` restricted to the ``top_k`` most
        likely tokens (``temperature=0`` takes the most likely, greedy). The model sees at most
        ``block_size`` tokens:

        * without the cache, every step runs the model over the last ``block_size`` tokens, as
          nanoGPT's ``generate`` does: each new token costs a pass over the whole context;
        * with it, each step runs the new token alone after the layers' caches; when the context
          is full, the window slides by a quarter block: the oldest quarter is dropped and the
          rest encoded again as a new window (positions restart), so a token sees between three
          quarters of a block and a whole one.

        Within ``block_size`` tokens the two give the same tokens (greedy exactly).
        """
        if max_new_tokens < 0:
            raise ValueError(f"max_new_tokens must be 0 or more, got {max_new_tokens}.")
        if temperature < 0 or (top_k is not None and top_k < 1):
            raise ValueError(f"temperature must be >= 0 and top_k >= 1; got {temperature} and {top_k}.")
        if use_cache and (
            blind := [i + 1 for i, b in enumerate(self.blocks) if not capabilities(b.attention).supports_decoding]
        ):
            raise IncompatibleAttentionError(
                f"GPT.generate: the attention of layer(s) {blind} decodes from no cache (it implements no "
                "attend_cached); generate with use_cache=False, which runs the model over the window each step."
            )
        context, caches = tokens[:, -self.block_size :], None
        keep = self.block_size - max(1, self.block_size // 4)
        for _ in range(max_new_tokens):
            if not use_cache:
                logits, _ = self(context[:, -self.block_size :])
            elif caches is None:
                logits, caches = self(context, use_cache=True)
            else:
                logits, caches = self(context[:, -1:], caches, use_cache=True)
            token = _sample(logits[:, -1], temperature, top_k, generator)
            yield token
            context = torch.cat([context, token[:, None]], dim=1)
            if use_cache and context.shape[1] > self.block_size:
                context, caches = context[:, -keep:], None  # slide: the next step encodes the window again


def _mlp_projections(ffn: nn.Module | None) -> tuple[tuple[nn.Linear, ...], nn.Linear | None]:
    """The MLP's input projections and its output projection (none without an MLP)."""
    if ffn is None:
        return (), None
    if isinstance(ffn, GatedFFN):
        return (ffn.gate_proj, ffn.up_proj), ffn.down_proj
    first, _, _, second = ffn.net
    return (first,), second


def _sample(logits: Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None) -> Tensor:
    """One token per row of ``logits`` ``(B, V)``: greedy at temperature 0, else sampled."""
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        threshold = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < threshold, float("-inf"))
    probabilities = F.softmax(logits.float(), dim=-1)
    return torch.multinomial(probabilities, 1, generator=generator).squeeze(-1)
