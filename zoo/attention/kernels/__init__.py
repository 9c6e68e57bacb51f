"""Tensor kernels that several attention variants share, apart from the variants themselves.

* :mod:`~zoo.attention.kernels.sdpa`: the fused softmax-attention call under the zoo's masks;
* :mod:`~zoo.attention.kernels.blocks`: rows by position and blocks laid out for the fused kernel;
* :mod:`~zoo.attention.kernels.prefix`: exclusive prefix sums along a sequence.
"""

from zoo.attention.kernels.blocks import block_attention, rows_from
from zoo.attention.kernels.prefix import sums_before
from zoo.attention.kernels.sdpa import fused_attention

__all__ = ["block_attention", "fused_attention", "rows_from", "sums_before"]
