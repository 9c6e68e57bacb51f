"""The gated MLP of LLaMA, Qwen and PaLM (Shazeer, 2020, "GLU Variants Improve Transformer"): two
projections of the input, one through the activation, multiplied feature by feature, then a third
back to the model's width::

    ffn(x) = W_down (act(x W_gate) * (x W_up))

With SiLU it is SwiGLU, with GELU GeGLU. The parameters carry transformers' names (``gate_proj``,
``up_proj``, ``down_proj``, as ``Qwen3NextMLP`` and ``LlamaMLP`` do), so a checkpoint's MLP maps by
name. Dropout (off in those models) acts on the product, where :class:`~zoo.layers.PositionWiseFFN`
drops its activation.
"""

from __future__ import annotations

from torch import Tensor, nn

from zoo.layers.feed_forward import ACTIVATIONS

__all__ = ["GatedFFN"]


class GatedFFN(nn.Module):
    """``down_proj(dropout(act(gate_proj(x)) * up_proj(x)))``.

    Args:
        d_model: Input and output size.
        hidden_dim: Inner size (each of the two inner projections').
        dropout: Dropout on the gated product.
        activation: One of ``relu``, ``gelu``, ``silu`` (SwiGLU's).
        bias: Whether the three linear layers have biases (LLaMA's and Qwen's have none).
    """

    def __init__(
        self, d_model: int, hidden_dim: int, dropout: float = 0.0, activation: str = "silu", bias: bool = False
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"Unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}.")
        self.gate_proj = nn.Linear(d_model, hidden_dim, bias=bias)
        self.up_proj = nn.Linear(d_model, hidden_dim, bias=bias)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.down_proj = nn.Linear(hidden_dim, d_model, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.dropout(self.activation(self.gate_proj(x)) * self.up_proj(x)))

    def forward_cached(self, x: Tensor, window: Tensor | None) -> tuple[Tensor, None]:
        """:meth:`forward`, with the cached signature of a block's MLP: position-wise, it keeps no
        window (Canon-D is refused with a gated MLP, :class:`~zoo.layers.BlockConfig`)."""
        return self(x), None
