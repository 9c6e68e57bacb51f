"""Attention residuals (Kimi Team, 2026, "Attention Residuals", arXiv 2603.15031): each sublayer's
input is a softmax-weighted mix over depth of the embedding and the earlier sublayers' outputs,
in place of the fixed residual sum.

A pre-norm stack sums every earlier output with weight one, ``h_l = v_0 + v_1 + ... + v_{l-1}``
(``v_0`` the embedding, ``v_i = f_i(norm(h_i))`` the i-th sublayer's output, attention and MLP
sublayers counted alike). Attention residuals give sublayer ``l`` a learned pseudo-query
``w_l`` (a vector of ``d`` numbers, one per sublayer, independent of the input) and attend over
the sources with their RMS norms as keys::

    k_i        = rmsnorm(v_i) * g_l                      (g_l: the key norm's learned scale)
    alpha_{il} = softmax_i(w_l . k_i)                   (over i = 0 .. l-1, for each token alone)
    h_l        = sum_i alpha_{il} v_i

The values are the raw outputs; the logits are not scaled (fla's ``scale=1``). ``w_l`` starts at
zero, so at initialization every sublayer's input is the mean of its sources. The sublayer still
applies its own pre-norm to ``h_l``; the model's final norm reads one more such mix over all
sources, with a query of its own.

Block attention residuals bound the sources: the sublayers are grouped in consecutive blocks of
``block_size``, each completed block enters as one source (the sum of its outputs), and the block
under way enters as its partial sum. Sublayer ``l`` reads::

    sources(l) = [v_0, B_0, B_1, ..., B_k]     B_j = sum of v_i, i in [j * block_size, (j + 1) * block_size) and i < l

``block_size=1`` is the full form above (every output its own source). The mixing is per token,
so cached decoding needs nothing beyond the current tokens' outputs.

Where the zoo follows and departs from fla (``fla/ops/attnres/naive.py``, and the ``attnres``
wiring of ``fla/models/*/modeling_*.py``, which this follows for the norm's place, the zero
initialization, a query for every attention and MLP sublayer and one before the final norm):

* fla's op folds the next pre-norm into the call (``output_rms_weight``); here the block applies
  its own norm, whatever the model's ``norm`` is (fla's models use RMS norms only).
* fla stores each query as a bias-free ``Linear(d, 1)`` (a matrix that a weight-decay rule for
  matrices decays); here it is a vector ``query`` of ``d`` numbers.
* fla's blocks must hold whole layers (an even ``attnres_block_size`` in sublayers, or 1); here
  any positive number of sublayers, so a stack without MLPs can use any block.
* fla gives the first sublayer a query it never uses (one source: the softmax is one); here that
  sublayer reads the embedding directly and has no query.
* fla computes in float32 and casts back; here in the inputs' dtype promoted to at least float32
  (float64 stays float64).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["DepthAttention", "DepthSources"]


class DepthAttention(nn.Module):
    """The input of one sublayer (or the final norm): softmax attention over depth with a learned
    pseudo-query against the RMS-normed sources (see the module docstring).

    Args:
        d_model: Feature size of every source.
        eps: Added to the key norm's mean square.
    """

    def __init__(self, d_model: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.query = nn.Parameter(torch.zeros(d_model))
        self.key_norm = nn.RMSNorm(d_model, eps=eps)

    def forward(self, sources: Sequence[Tensor]) -> Tensor:
        """``sources``: one or more tensors ``(..., d_model)`` of one shape; returns their mix
        ``(..., d_model)``, in their dtype."""
        return self.mix(sources)[0]

    def mix(self, sources: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        """The mix and its weights ``(S, ...)`` over the ``S`` sources (each position's sum to one)."""
        if not sources:
            raise ValueError("DepthAttention needs at least one source (the embedding).")
        dtype = torch.promote_types(sources[0].dtype, torch.float32)
        values = torch.stack(list(sources)).to(dtype)
        keys = F.rms_norm(values, (values.shape[-1],), self.key_norm.weight.to(dtype), self.key_norm.eps)
        weights = torch.softmax(keys @ self.query.to(dtype), dim=0)
        mixed = (weights.unsqueeze(-1) * values).sum(0)
        return mixed.to(sources[0].dtype), weights


class DepthSources:
    """What a stack's depth attentions read as it runs: the embedding, the sums of the completed
    blocks of ``block_size`` sublayers, and the partial sum of the block under way.

    Args:
        embedding: ``v_0``, the stack's input.
        block_size: Sublayers a block sums; 1: every output its own source (full attention
            residuals).
    """

    def __init__(self, embedding: Tensor, block_size: int) -> None:
        self.block_size = block_size
        self.blocks = [embedding]
        self.partial: Tensor | None = None
        self.count = 0

    def add(self, output: Tensor) -> None:
        """Adds the next sublayer's output to the block under way, and closes it when full."""
        self.partial = output if self.partial is None else self.partial + output
        self.count += 1
        if self.count % self.block_size == 0:
            self.blocks.append(self.partial)
            self.partial = None

    def sources(self) -> list[Tensor]:
        """The values the next sublayer attends over: the blocks so far, the partial one last."""
        return [*self.blocks] if self.partial is None else [*self.blocks, self.partial]
