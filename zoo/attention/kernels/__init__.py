"""Tensor kernels that several attention variants share, apart from the variants themselves.

Softmax attention:

* :mod:`~zoo.attention.kernels.sdpa`: the fused softmax-attention call under the zoo's masks;
* :mod:`~zoo.attention.kernels.blocks`: rows by position and blocks laid out for the fused kernel;
* :mod:`~zoo.attention.kernels.window`: a sliding window with the first positions kept, and
  learned sink logits, on the fused kernel (the ``softmax`` layer's);
* :mod:`~zoo.attention.kernels.explicit_softmax`: softmax written out where the fused kernel
  serves badly: a few queries over grouped heads (decoding), a sink in the denominator;
* :mod:`~zoo.attention.kernels.prefix`: exclusive prefix sums along a sequence;
* :mod:`~zoo.attention.kernels.householder`: PaTH's scores, queries read keys carried through
  data-dependent Householder maps (naive, blockwise and decoding forms);
* :mod:`~zoo.attention.kernels.corrected_values`: DeltaFormer's delta-corrected values, a
  triangular solve over softmax weights (parallel, chunkwise and decoding forms).

Linear attention with a decaying or delta-rule state, each recurrence in three forms that agree
up to rounding: the parallel form (``*_chunkwise`` with ``chunk_size=None``: quadratic, one chunk;
``*_weights`` gives its ``(T, T)`` weights for heatmaps), the chunkwise form (for training and
prefill) and ``*_recurrent`` (for decoding); all take an optional
state to start from and a ``mask``, and return the final state (:mod:`~zoo.attention.kernels.chunking`
holds what they share):

* :mod:`~zoo.attention.kernels.decay`: a decay per step, scalar (RetNet retention, Mamba-2's SSD)
  or per key dimension (gated linear attention);
* :mod:`~zoo.attention.kernels.delta_rule`: the delta rule, optionally decayed (DeltaNet, Gated DeltaNet);
* :mod:`~zoo.attention.kernels.dplr`: the generalized delta rule, a decay per key dimension plus a
  rank-one correction (Kimi Delta Attention, RWKV-7);
* :mod:`~zoo.attention.kernels.delta_product`: several delta-rule steps per token (Gated DeltaProduct);
* :mod:`~zoo.attention.kernels.mesa`: two decayed sums read through a ridge regression per token,
  solved by :mod:`~zoo.attention.kernels.conjugate_gradient` (MesaNet);
* :mod:`~zoo.attention.kernels.log_linear`: a Fenwick tree (:mod:`~zoo.attention.kernels.fenwick`)
  of decaying or delta-rule states, read with a weight per level (log-linear Mamba-2 and Gated
  DeltaNet; its state grows as ``log T``);
* :mod:`~zoo.attention.kernels.chunk_scan`: the pass between chunks that the chunkwise forms of the
  first three end in, one autograd function with its adjoint written out.

What the recurrent layers put in front of their recurrence:

* :mod:`~zoo.attention.kernels.short_conv`: a short causal depthwise convolution that continues
  from a window of earlier inputs.

Fused backends, imported from their modules (not re-exported here: each needs what not every
installation has):

* :mod:`~zoo.attention.kernels.flex`: the mask-defined variants' masks and biases as
  FlexAttention's mask and score functions, and the compiled call (PyTorch 2.5 or later);
* :mod:`~zoo.attention.kernels.fla`: the recurrences in flash-linear-attention's Triton chunk
  kernels (the ``fla`` extra, on CUDA).
"""

from zoo.attention.kernels.blocks import block_attention, rows_from
from zoo.attention.kernels.corrected_values import corrected_values, corrected_values_recurrent
from zoo.attention.kernels.delta_rule import delta_rule_chunkwise, delta_rule_recurrent, delta_rule_weights
from zoo.attention.kernels.prefix import sums_before
from zoo.attention.kernels.sdpa import fused_attention
from zoo.attention.kernels.decay import decay_chunkwise, decay_recurrent, decay_weights
from zoo.attention.kernels.delta_product import delta_product_chunkwise, delta_product_recurrent, delta_product_weights
from zoo.attention.kernels.dplr import dplr_chunkwise, dplr_recurrent, dplr_weights
from zoo.attention.kernels.householder import path_recurrent, path_scores
from zoo.attention.kernels.log_linear import log_linear_chunkwise, log_linear_recurrent, log_linear_weights
from zoo.attention.kernels.mesa import mesa_chunkwise, mesa_recurrent, mesa_weights
from zoo.attention.kernels.short_conv import causal_conv1d, convolve_projections, short_convolutions

__all__ = [
    "block_attention",
    "causal_conv1d",
    "convolve_projections",
    "corrected_values",
    "corrected_values_recurrent",
    "decay_chunkwise",
    "decay_recurrent",
    "decay_weights",
    "delta_product_chunkwise",
    "delta_product_recurrent",
    "delta_product_weights",
    "delta_rule_chunkwise",
    "delta_rule_recurrent",
    "delta_rule_weights",
    "dplr_chunkwise",
    "dplr_recurrent",
    "dplr_weights",
    "fused_attention",
    "log_linear_chunkwise",
    "log_linear_recurrent",
    "log_linear_weights",
    "mesa_chunkwise",
    "mesa_recurrent",
    "mesa_weights",
    "path_recurrent",
    "path_scores",
    "rows_from",
    "short_convolutions",
    "sums_before",
]
