"""A plugin for one experiment: DeltaNet whose write strength is computed in bfloat16.

Grazzi et al. train parity under bfloat16 autocast, where flash-linear-attention's DeltaNet computes
``beta = 2 sigmoid(x w)`` in bfloat16: the sigmoid rounds to exactly 1 once its logit passes about
6.2, so ``beta`` reaches exactly 2 and a flip is an exact reflection. The zoo computes ``beta`` in
float32, where a trained write strength stays at 1.95-1.99 and the count fades over long inputs
(docs/results/state_tracking.md, "Parity: validated at 40-256"). This module registers
``deltanet_bf16_beta``: the zoo's ``deltanet`` with only that one computation in bfloat16 (the
projection's output and its sigmoid, gradients included), everything else in float32, so a run
isolates the rounding from the rest of mixed precision. Measured (that page, "Parity: the write
strength computed in bfloat16"): it changes nothing measurable, one seed of three solves 256 in
either precision. The run::

    python -m zoo compare --model recall --config configs/recall_parity.yaml --evaluate test \\
        --import benchmarks/bfloat16_write_strength.py --data.train_batches 6000 ... \\
        --grid 'model.attention=[{name: deltanet_bf16_beta, negative_eigenvalues: true}]'
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from zoo.attention import register_attention_layer
from zoo.attention.modules.gating import WriteStrength
from zoo.attention.variants.deltanet import DeltaNetAttention


class BFloat16WriteStrength(WriteStrength):
    """:class:`WriteStrength` whose logit and sigmoid are computed in bfloat16, then cast."""

    def strengths(self, layer_input: Tensor, dtype: torch.dtype) -> Tensor:
        beta = self(layer_input).to(torch.bfloat16).sigmoid().to(dtype)
        return 2 * beta if self.negative_eigenvalues else beta


@register_attention_layer("deltanet_bf16_beta")
class BFloat16BetaDeltaNet(DeltaNetAttention):
    """DeltaNet with its write strength computed in bfloat16 (see the module docstring)."""

    def __init__(self, embed_dim: int, num_heads: int, *, negative_eigenvalues: bool = False, **options: Any) -> None:
        super().__init__(embed_dim, num_heads, negative_eigenvalues=negative_eigenvalues, **options)
        self.beta = BFloat16WriteStrength(embed_dim, num_heads, negative_eigenvalues)
