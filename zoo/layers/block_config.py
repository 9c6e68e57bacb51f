"""The sizes and options every residual block of a stack shares, written once for the stack."""

from __future__ import annotations

from dataclasses import dataclass

from zoo.errors import DataError
from zoo.layers.add_norm import AddNorm
from zoo.layers.canon import check_canon
from zoo.layers.feed_forward import PositionWiseFFN
from zoo.layers.gated_feed_forward import GatedFFN
from zoo.layers.norms import NORMS

__all__ = ["BlockConfig"]


@dataclass(frozen=True)
class BlockConfig:
    """What the encoder, decoder and causal blocks of one stack have in common (nanoGPT's
    ``GPTConfig`` for a block): a model builds one and hands it to each block with that layer's
    attention spec, so a size or an option is stated once rather than in every block's signature.

    Args:
        d_model: Feature size.
        num_heads: Attention (query) heads.
        ffn_hidden: Inner size of the position-wise FFN (GPT-2: ``4 * d_model``); 0: no FFN, the
            block is its attention sublayers alone (Zoology's recall models).
        dropout: Dropout on every sublayer's output before its residual sum.
        norm_first: Pre-LN (norms before the sublayers) instead of post-LN.
        activation: The FFN's activation: ``relu``, ``gelu`` or ``silu``.
        bias: Biases in the linear layers and layer norms (nanoGPT's ``bias``).
        ffn_dropout: Dropout inside the FFN, after its activation; ``None``: ``dropout`` (the
            Transformer's), ``0`` for nanoGPT's MLP, which drops out only its output.
        canon: Canon layers (:mod:`zoo.layers.canon`), any of ``"ABCD"``: A before the
            attention, B on its queries, keys and values, C before the FFN, D inside it; ``""``
            none. Causal blocks only (:class:`~zoo.layers.CausalBlock`); C and D need an FFN.
        glu: A gated FFN (:class:`~zoo.layers.GatedFFN`: ``down(act(gate(x)) * up(x))``, SwiGLU
            with ``silu``; x-transformers' ``ff_glu``) instead of the two-layer one. No Canon-D.
        norm: The blocks' norms (:mod:`zoo.layers.norms`): ``layernorm``, ``rmsnorm`` or
            ``zero_centred_rmsnorm``.
        norm_eps: Added to each norm's variance or mean square (``nn.LayerNorm``'s 1e-5 by default).
    """

    d_model: int
    num_heads: int
    ffn_hidden: int
    dropout: float = 0.0
    norm_first: bool = False
    activation: str = "relu"
    bias: bool = True
    ffn_dropout: float | None = None
    canon: str = ""
    glu: bool = False
    norm: str = "layernorm"
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise DataError(f"unknown norm {self.norm!r}; choose one of {', '.join(NORMS)}.")
        if self.glu and "D" in self.canon:
            raise DataError("canon 'D' sits inside a two-layer MLP; a gated MLP (glu) has none: drop D from canon.")
        if self.ffn_hidden < 0:
            raise ValueError(f"ffn_hidden must be 0 (no FFN) or a positive size, got {self.ffn_hidden}.")
        check_canon(self.canon)
        if self.ffn_hidden == 0 and (mlp := [place for place in self.canon if place in "CD"]):
            raise DataError(
                f"canon {''.join(mlp)!r} sits in the MLP, which ffn_hidden=0 leaves out (the recall model's default); "
                "give ffn_hidden > 0 or keep canon to A and B."
            )

    def add_norm(self) -> AddNorm:
        """A residual wrapper for one sublayer."""
        return AddNorm(self.d_model, self.dropout, self.norm_first, self.bias, norm=self.norm, norm_eps=self.norm_eps)

    def feed_forward(self) -> PositionWiseFFN | GatedFFN | None:
        """The block's FFN sublayer; None where ``ffn_hidden`` is 0."""
        if self.ffn_hidden == 0:
            return None
        inner = self.dropout if self.ffn_dropout is None else self.ffn_dropout
        if self.glu:
            return GatedFFN(self.d_model, self.ffn_hidden, inner, self.activation, self.bias)
        return PositionWiseFFN(
            self.d_model, self.ffn_hidden, inner, self.activation, self.bias, canon="D" in self.canon
        )
