"""Lightning attention (MiniMax: Li et al., 2025, MiniMax-01, arXiv 2501.08313): linear attention with a fixed
decay per head, its slopes ALiBi's, scaled down with the layer's depth.

Per head ``h``, with row vectors and a ``(d, d)`` state::

    q_t, k_t, v_t = silu(x_t W_q), silu(x_t W_k), silu(x_t W_v)       (no 1 / sqrt(d) scale)
    S_t = exp(-s_h) S_{t-1} + k_t^T v_t,      o_t = q_t S_t
    y_t = (RMSNorm(o_t over all heads' features) * sigmoid(x_t W_g)) W_o

Unrolled, ``o_t = sum_{s <= t} exp(-s_h (t - s)) (q_t . k_s) v_s``. The slopes are ALiBi's,
``s_h = 2 ** (-8 (h + 1) / H)`` for the heads ``h = 0 .. H - 1``, times a factor of the layer's
depth ``l`` of ``L`` layers, ``1 - l / (L - 1 + 1e-5) + 1e-5``: the first layer decays the most, the
last hardly at all (its slopes about ``1e-5`` of the first's). The recurrence is the zoo's constant
scalar decay (:mod:`zoo.attention.kernels.decay`, the log decay ``-s_h`` at every step, as
:mod:`~zoo.attention.variants.retention` runs its fixed decays), in the three forms of
:mod:`zoo.attention.modules.recurrent`.

Follows transformers' ``MiniMaxLightningAttention`` (``models/minimax/modeling_minimax.py``): SiLU
(its ``hidden_act``) on the queries, keys and values, no scale on the queries, one RMSNorm
(epsilon 1e-6) over the ``H * d`` features of all heads (not one per head), then the sigmoid gate of
the layer's input. :mod:`zoo.integrations.hf_layers.minimax` maps its weights onto this layer.

flash-linear-attention's ``fla/ops/lightning_attn/chunk.py`` runs the same recurrence
(``chunk_simple_gla`` at a constant log decay per head) with another schedule, ``log a_h = -(8 / H)
(1 - l / L) h``, under which head 0 never decays; the zoo follows transformers' slopes, MiniMax's
released model's (``benchmarks/fla_reference.py`` compares the recurrence with fla's
``simple_gla`` reference at the zoo's slopes).

Where the zoo departs, and why:

* Separate query, key and value projections (``q_proj``, ``k_proj``, ``v_proj``); transformers
  fuses them into one ``qkv_proj`` whose rows are per head ``q, k, v`` (the map splits them).
* The slopes are computed in the computation's dtype from ``layer_index`` and ``num_layers``;
  transformers keeps them, and the decays of its blocks of ``block_size`` (256) steps, as float32
  buffers.
* ``num_layers=None`` (the default: a zoo stack tells a layer its index, not its depth) leaves the
  slopes unscaled, factor 1; give ``num_layers`` for MiniMax's depth scaling.
* A padded step writes nothing and decays nothing (the zoo's key padding); transformers zeroes a
  padded token's queries, keys and values and still decays the state, which agrees on left padding.
* Biases in the projections follow the stack's ``bias`` (MiniMax has none; its map builds
  ``bias=False``); no short convolution by default (``conv_size=0``, MiniMax has none).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import Unpack

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.modules.recurrent import Recurrence, RecurrentLayer, RecurrentOptions

__all__ = ["NORM_EPS", "LightningAttention", "minimax_slopes"]

#: the epsilon of the RMSNorm over the output (transformers' ``MiniMaxRMSNorm`` default)
NORM_EPS = 1e-6


def minimax_slopes(
    num_heads: int, layer_index: int, num_layers: int | None, dtype: torch.dtype, device: torch.device | None = None
) -> Tensor:
    """MiniMax's per-head slopes ``s_h``, ``(H,)``: ALiBi's ``2 ** (-8 (h + 1) / H)`` times the depth
    factor ``1 - l / (L - 1 + 1e-5) + 1e-5`` (1 when ``num_layers`` is None)."""
    slopes = (2 ** (-8 / num_heads)) ** torch.arange(1, num_heads + 1, dtype=dtype, device=device)
    if num_layers is None:
        return slopes
    return slopes * (1 - layer_index / (num_layers - 1 + 1e-5) + 1e-5)


@register_attention_layer("lightning_attention", aliases=("lightning", "minimax_lightning"))
class LightningAttention(RecurrentLayer):
    """MiniMax-01's lightning attention (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Heads, one fixed decay each.
        head_dim: Width of each head's queries, keys and values; None: ``embed_dim // num_heads``.
        layer_index: The layer's place in its stack, from 0 (the stack fills it).
        num_layers: The stack's depth, for MiniMax's depth scaling of the slopes; None: no scaling.
        options: :class:`~zoo.attention.modules.recurrent.RecurrentLayer`'s (``conv_size`` 0 here, MiniMax's).

    Parameters of its own: ``gate`` (``embed_dim -> H * head_dim``, no bias), the sigmoid output
    gate; ``norm``, the RMSNorm over all heads' features.
    """

    silu = "always"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        head_dim: int | None = None,
        layer_index: int = 0,
        num_layers: int | None = None,
        **options: Unpack[RecurrentOptions],
    ) -> None:
        if head_dim is not None and (not isinstance(head_dim, int) or head_dim < 1):
            raise ValueError(f"LightningAttention: head_dim must be a positive int or None; got {head_dim!r}.")
        if not isinstance(layer_index, int) or layer_index < 0:
            raise ValueError(f"LightningAttention: layer_index must be 0 or more; got {layer_index!r}.")
        if num_layers is not None and (not isinstance(num_layers, int) or num_layers <= layer_index):
            raise ValueError(
                f"LightningAttention: num_layers ({num_layers!r}) must be an int above layer_index ({layer_index}), "
                "or None for no depth scaling."
            )
        width = num_heads * (embed_dim // num_heads if head_dim is None else head_dim)
        options.setdefault("conv_size", 0)  # MiniMax has none
        super().__init__(embed_dim, num_heads, key_dim=width, value_dim=width, **options)
        self.layer_index, self.num_layers = layer_index, num_layers
        self.gate = nn.Linear(embed_dim, width, bias=False)
        self.norm = nn.RMSNorm(width, eps=NORM_EPS)

    def log_decays(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        """``-s_h`` for each head, ``(H,)``: the log of the decay every step applies."""
        return -minimax_slopes(self.num_heads, self.layer_index, self.num_layers, dtype, device)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:
        log_decay = self.log_decays(queries.dtype, queries.device)[:, None, None]  # (H, 1, 1): every step
        return Recurrence(queries, keys, values, log_decay)

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        merged = output.transpose(1, 2).flatten(-2)  # (B, T, H * d): one norm over all heads
        normalized = F.rms_norm(merged, (merged.shape[-1],), self.norm.weight.to(merged.dtype), self.norm.eps)
        gated = normalized * torch.sigmoid(self.gate(layer_input).to(merged.dtype))
        return self.split_heads(gated)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, layer_index={self.layer_index}, num_layers={self.num_layers}"
