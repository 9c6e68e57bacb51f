"""The block-selection kernel's two forms side by side: the selection masking the dense scores
(up to ``DENSE_KEYS`` keys) against the selected blocks gathered per query.

Usage: python benchmarks/selection_forms.py [--repeats 5] [--threads 1]

For ``moba`` and ``nsa`` (with the short convolution) at MQAR's shape (256 tokens, batch 64, width
64) and ``moba`` at 2,048 tokens (batch 4): one layer's forward and backward, each form in turn per
round after one untimed round, the median in milliseconds and the ratio gathered / masked
(benchmarks/RESULTS.md 38a).
"""

from __future__ import annotations

import argparse
from functools import partial

import torch

import zoo
from zoo.attention import AttentionContext
from zoo.attention.kernels import selection
from zoo.bench.measure import time_round_robin

CASES = [("moba", 1, 256, 64), ("nsa", 2, 256, 64), ("moba", 1, 2048, 4)]
FORMS = {"masked": selection.DENSE_KEYS, "gathered": 0}


def step(layer: torch.nn.Module, x: torch.Tensor, dense_keys: int) -> None:
    """One forward and backward of ``layer`` over ``x`` with the kernel's threshold at ``dense_keys``."""
    selection.DENSE_KEYS = dense_keys
    layer(x, AttentionContext(is_causal=True)).output.sum().backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for name, heads, length, batch in CASES:
        layer = zoo.create_attention(name, embed_dim=64, num_heads=heads, conv_size=4)
        x = torch.randn(batch, length, 64, requires_grad=True)
        calls = {form: (partial(step, layer, x, keys), None) for form, keys in FORMS.items()}
        times = time_round_robin(calls, warmup=1, repeats=args.repeats)
        masked, gathered = (times[form].median * 1000 for form in FORMS)
        print(
            f"{name} {length} tokens, batch {batch}: masked {masked:.0f} ms, gathered {gathered:.0f} ms, "
            f"gathered / masked {gathered / masked:.2f}"
        )
    selection.DENSE_KEYS = FORMS["masked"]


if __name__ == "__main__":
    main()
