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
import statistics
import time

import torch
import torch.nn.functional as F
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


def step(layer: torch.nn.Module, prepare, x: Tensor, context: AttentionContext) -> Tensor:  # noqa: ANN001
    """One forward and backward of ``layer`` with ``prepare`` as its family's; the output."""
    type(layer).prepare = prepare
    x.grad = None
    output = layer(x, context).output
    output.sum().backward()
    return output.detach()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=["deltanet", "gated_deltanet"])
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    for name in args.cases:
        torch.manual_seed(0)
        layer = create_attention(name, embed_dim=256, num_heads=8)
        after = type(layer).prepare
        x = torch.randn(1, args.length, 256, requires_grad=True)
        context = AttentionContext.build(1, args.length, valid_lens=None, is_causal=True)
        difference = (step(layer, prepare_before, x, context) - step(layer, after, x, context)).abs().max().item()
        times: dict[str, list[float]] = {"before": [], "after": []}
        for round_ in range(args.repeats + 1):
            for label, prepare in (("before", prepare_before), ("after", after)):
                started = time.perf_counter()
                step(layer, prepare, x, context)
                if round_:
                    times[label].append(time.perf_counter() - started)
        type(layer).prepare = after
        before, now = (statistics.median(times[k]) * 1e3 for k in ("before", "after"))
        print(f"{name:16} before {before:7.0f} ms  after {now:7.0f} ms  after/before {now / before:.3f}  "
              f"largest output difference {difference:.1e}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
