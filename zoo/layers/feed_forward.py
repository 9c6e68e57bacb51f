"""Position-wise feed-forward network: the same two-layer MLP applied at every position, with an
optional Canon-D layer on its hidden pre-activation (:mod:`zoo.layers.canon`)."""

from __future__ import annotations

from torch import Tensor, nn

from zoo.layers.canon import canon_convolution, residual_conv

__all__ = ["ACTIVATIONS", "PositionWiseFFN"]

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


class PositionWiseFFN(nn.Module):
    """``Linear(d_model, hidden) -> activation -> dropout -> Linear(hidden, d_model)``.

    With ``canon`` the up projection's output ``h`` becomes ``h + conv(h)`` before the activation
    (Canon-D: a causal depthwise convolution over the positions, ``canon_d``), so the MLP is no
    longer position-wise; :meth:`forward_cached` then continues from the previous positions' window.

    Args:
        d_model: Input and output size.
        hidden_dim: Inner size.
        dropout: Dropout after the activation.
        activation: One of ``relu``, ``gelu``, ``silu``.
        bias: Whether the two linear layers have biases.
        canon: A Canon-D layer on the hidden pre-activation.
    """

    def __init__(
        self,
        d_model: int,
        hidden_dim: int,
        dropout: float = 0.0,
        activation: str = "relu",
        bias: bool = True,
        *,
        canon: bool = False,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"Unknown activation {activation!r}; choose one of {sorted(ACTIVATIONS)}.")
        self.net = nn.Sequential(
            nn.Linear(d_model, hidden_dim, bias=bias),
            ACTIVATIONS[activation](),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, d_model, bias=bias),
        )
        self.canon_d = canon_convolution(hidden_dim) if canon else None

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x) if self.canon_d is None else self.forward_cached(x, None)[0]

    def forward_cached(self, x: Tensor, window: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """The MLP of ``x`` ``(B, T, d_model)`` after the positions whose Canon-D inputs end in
        ``window`` (None: a sequence's start), and the window after ``x`` (None without Canon-D)."""
        if self.canon_d is None:
            return self.net(x), None
        up, activation, dropout, down = self.net
        hidden, window = residual_conv(self.canon_d, up(x), window)
        return down(dropout(activation(hidden))), window
