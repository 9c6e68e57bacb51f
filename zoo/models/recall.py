"""The sequence model of the recall experiments: :class:`~zoo.models.GPT` with the defaults of
Zoology's MQAR figure (Arora, Eyuboglu et al., 2023;
``zoology/experiments/paper_configs/iclr24_zoology_figure2/configs.py``, ``zoology/model.py``).

Zoology's ``LanguageModel`` is a token embedding (plus learned absolute positions for softmax
attention alone), pre-norm blocks of a sequence mixer and a state mixer, a final norm and an
output projection tied to the embedding, initialised as GPT-2 (normal, 0.02; the projections
that end a residual branch scaled by ``1 / sqrt(2 * n_layers)``). Its Figure 2 runs 2 layers, one
head, widths 64 to 512, the identity for a state mixer (no MLP), dropout 0.1 on the embeddings
and on the attention weights, none on the residual branches. :class:`~zoo.models.GPT` is that
model; here are its defaults.
"""

from __future__ import annotations

from typing import Any

from zoo.attention.build.spec import AttentionChoice
from zoo.models.gpt import AUTO_POSITION, GPT

__all__ = ["RecallLM"]


class RecallLM(GPT):
    """:class:`~zoo.models.GPT` with Zoology's MQAR defaults: 2 layers of width 64, one head, no
    MLP (``ffn_hidden=0``), positions by family (``auto``: learned for softmax attention, none
    for a stack with a recurrent layer), dropout 0.1 on the embeddings and the attention weights.

    Every argument is :class:`~zoo.models.GPT`'s, with the meaning its docstring gives.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        block_size: int = 256,
        d_model: int = 64,
        num_heads: int = 1,
        num_layers: int = 2,
        ffn_hidden: int | None = 0,
        dropout: float = 0.0,
        bias: bool = True,
        attention: AttentionChoice = "dot_product",
        attention_kwargs: dict[str, Any] | None = None,
        position: str = AUTO_POSITION,
        position_kwargs: dict[str, Any] | None = None,
        num_kv_heads: int | None = None,
        attention_dropout: float | None = 0.1,
        embedding_dropout: float | None = 0.1,
        canon: str = "",
    ) -> None:
        super().__init__(
            vocab_size, block_size=block_size, d_model=d_model, num_heads=num_heads, num_layers=num_layers,
            ffn_hidden=ffn_hidden, dropout=dropout, bias=bias, attention=attention, attention_kwargs=attention_kwargs,
            position=position, position_kwargs=position_kwargs, num_kv_heads=num_kv_heads,
            attention_dropout=attention_dropout, embedding_dropout=embedding_dropout, canon=canon,
        )  # fmt: skip
