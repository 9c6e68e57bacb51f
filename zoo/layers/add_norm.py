"""The residual wrapper of every Transformer block: post-LN ("add & norm") or pre-LN."""

from __future__ import annotations

from torch import Tensor, nn

from zoo.layers.norms import build_norm

__all__ = ["AddNorm"]


class AddNorm(nn.Module):
    """A residual connection around a sublayer, with its norm after the sum or before the sublayer.

    Post-LN (the original Transformer): ``norm(x + dropout(sublayer(x)))``.
    Pre-LN (``norm_first=True``, nanoGPT's and GPT-2's): ``x + dropout(sublayer(norm(x)))``,
    steadier for deep stacks and large learning rates (the stack adds one final norm).

    A block feeds the sublayer :meth:`pre` ``(x)`` and calls this module on ``x`` and the
    sublayer's output, so one block body serves both placements::

        x = self.add_norm1(x, self.attention(self.add_norm1.pre(x)))

    Args:
        d_model: Feature size.
        dropout: Dropout on the sublayer's output before the residual sum.
        norm_first: Pre-LN instead of post-LN.
        bias: Whether the layer norm has a bias (nanoGPT's ``bias=False`` drops it).
        norm: The norm, by name (:mod:`zoo.layers.norms`): ``layernorm``, ``rmsnorm`` or
            ``zero_centred_rmsnorm``.
        norm_eps: Added to the norm's variance or mean square.
    """

    def __init__(
        self,
        d_model: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        bias: bool = True,
        *,
        norm: str = "layernorm",
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        self.norm_first = norm_first
        self.dropout = nn.Dropout(dropout)
        self.norm = build_norm(norm, d_model, norm_eps, bias)

    def pre(self, x: Tensor) -> Tensor:
        """The sublayer's input: ``norm(x)`` pre-LN, ``x`` itself post-LN."""
        return self.norm(x) if self.norm_first else x

    def forward(self, x: Tensor, sublayer_output: Tensor) -> Tensor:
        if x.shape != sublayer_output.shape:
            raise ValueError(f"AddNorm: shapes differ: {tuple(x.shape)} and {tuple(sublayer_output.shape)}.")
        residual = x + self.dropout(sublayer_output)
        return residual if self.norm_first else self.norm(residual)

    def extra_repr(self) -> str:
        return "norm_first=True" if self.norm_first else ""
