"""``deltanet`` and ``gated_deltanet`` layers against themselves as they were before RESULTS 40a,
side by side in one process: forward and backward over one causal sequence, round-robin.

"Before" is the layer with its ``prepare`` as it was: ``F.normalize(x) * scale`` for queries and
keys, and DeltaNet's missing decay passed as zero log decays (so its chunks multiply by their
exponentials). "After" is the layer as it is: :func:`~zoo.attention.kernels.l2_norm.l2_normalize`
and no decay terms. Width 256, 8 heads, batch 1::

    python benchmarks/delta_rule_ab.py --cases deltanet gated_deltanet --length 8192 --repeats 7

Run it alone: the ratio is of medians after one warm-up round.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn.functional as F
from revision_ab import side_by_side
from torch import Tensor

from zoo.attention import create_attention
from zoo.attention.context import AttentionContext
from zoo.attention.recurrence import Recurrence


def prepare_before(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:  # noqa: ANN001
    """DeltaNet's ``prepare`` before 40a."""
    q = F.normalize(queries, dim=-1) * self.key_head_dim**-0.5
    k = F.normalize(keys, dim=-1)
    beta = self.beta(layer_input).to(queries.dtype).sigmoid().transpose(-1, -2)
    log_decay = self.log_decay(layer_input, queries.dtype)
    return Recurrence(q, k, values, q.new_zeros(q.shape[:-1]) if log_decay is None else log_decay, beta)


@contextmanager
def prepared_before(layer: torch.nn.Module) -> Iterator[None]:
    """``layer``'s family with its ``prepare`` as before 40a while the block runs."""
    after = type(layer).prepare
    type(layer).prepare = prepare_before
    try:
        yield
    finally:
        type(layer).prepare = after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=["deltanet", "gated_deltanet"])
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    for name in args.cases:
        torch.manual_seed(0)
        layer = create_attention(name, embed_dim=256, num_heads=8)
        x = torch.randn(1, args.length, 256, requires_grad=True)
        context = AttentionContext.build(1, args.length, valid_lens=None, is_causal=True)
        print(f"{name:16} {side_by_side(layer, x, context, partial(prepared_before, layer), args.repeats)}", flush=True)


if __name__ == "__main__":
    main()
