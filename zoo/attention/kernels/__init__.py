"""Tensor kernels that several attention variants share, apart from the variants themselves.

Softmax attention:

* :mod:`~zoo.attention.kernels.sdpa`: the fused softmax-attention call under the zoo's masks;
* :mod:`~zoo.attention.kernels.blocks`: rows by position and blocks laid out for the fused kernel;
* :mod:`~zoo.attention.kernels.prefix`: exclusive prefix sums along a sequence.

Linear attention with a decaying or delta-rule state, each recurrence in three forms that agree
up to rounding: ``*_parallel`` (quadratic, also returns the ``(T, T)`` weights), ``*_chunkwise``
(for training and prefill) and ``*_recurrent`` (for decoding); all take an optional
``initial_state`` and ``mask`` and return the final state (:mod:`~zoo.attention.kernels.recurrence`
holds what they share):

* :mod:`~zoo.attention.kernels.scalar_decay`: a scalar decay per step (RetNet retention, Mamba-2's SSD);
* :mod:`~zoo.attention.kernels.vector_decay`: a decay per key dimension (gated linear attention);
* :mod:`~zoo.attention.kernels.delta_rule`: the delta rule, optionally decayed (DeltaNet, Gated DeltaNet).
"""

from zoo.attention.kernels.blocks import block_attention, rows_from
from zoo.attention.kernels.delta_rule import delta_rule_chunkwise, delta_rule_parallel, delta_rule_recurrent
from zoo.attention.kernels.prefix import sums_before
from zoo.attention.kernels.scalar_decay import scalar_decay_chunkwise, scalar_decay_parallel, scalar_decay_recurrent
from zoo.attention.kernels.sdpa import fused_attention
from zoo.attention.kernels.vector_decay import vector_decay_chunkwise, vector_decay_parallel, vector_decay_recurrent

__all__ = [
    "block_attention",
    "delta_rule_chunkwise",
    "delta_rule_parallel",
    "delta_rule_recurrent",
    "fused_attention",
    "rows_from",
    "scalar_decay_chunkwise",
    "scalar_decay_parallel",
    "scalar_decay_recurrent",
    "sums_before",
    "vector_decay_chunkwise",
    "vector_decay_parallel",
    "vector_decay_recurrent",
]
