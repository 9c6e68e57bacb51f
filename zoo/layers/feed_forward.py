"""Position-wise feed-forward network: the same two-layer MLP applied at every position."""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["PositionWiseFFN"]

_ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}


class PositionWiseFFN(nn.Module):
    """``Linear(d_model, hidden) -> activation -> dropout -> Linear(hidden, d_model)``.

    Args:
        d_model: Input and output size.
        hidden_dim: Inner size.
        dropout: Dropout after the activation.
        activation: One of ``relu``, ``gelu``, ``silu``.
        bias: Whether the two linear layers have biases.
    """

    def __init__(
        self, d_model: int, hidden_dim: int, dropout: float = 0.0, activation: str = "relu", bias: bool = True
    ) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"Unknown activation {activation!r}; choose one of {sorted(_ACTIVATIONS)}.")
        self.net = nn.Sequential(
            nn.Linear(d_model, hidden_dim, bias=bias),
            _ACTIVATIONS[activation](),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, d_model, bias=bias),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)
