"""Pure tensor kernels of the linear-attention families with a decaying or delta-rule state.

Each recurrence comes in three forms that agree up to rounding: ``*_parallel`` (quadratic, also
returns the ``(T, T)`` weights), ``*_chunkwise`` (for training and prefill) and ``*_recurrent``
(for decoding). All take an optional ``initial_state`` and ``mask`` and return the final state.

* :mod:`~zoo.kernels.scalar_decay`: a scalar decay per step (RetNet retention, Mamba-2's SSD).
* :mod:`~zoo.kernels.vector_decay`: a decay per key dimension (gated linear attention).
* :mod:`~zoo.kernels.delta_rule`: the delta rule, optionally decayed (DeltaNet, Gated DeltaNet).
"""

from zoo.kernels.delta_rule import delta_rule_chunkwise, delta_rule_parallel, delta_rule_recurrent
from zoo.kernels.scalar_decay import scalar_decay_chunkwise, scalar_decay_parallel, scalar_decay_recurrent
from zoo.kernels.vector_decay import vector_decay_chunkwise, vector_decay_parallel, vector_decay_recurrent

__all__ = [
    "delta_rule_chunkwise",
    "delta_rule_parallel",
    "delta_rule_recurrent",
    "scalar_decay_chunkwise",
    "scalar_decay_parallel",
    "scalar_decay_recurrent",
    "vector_decay_chunkwise",
    "vector_decay_parallel",
    "vector_decay_recurrent",
]
