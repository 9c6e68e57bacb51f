"""Where a registered layer's time grows with length: one layer's forward and backward (batch 1,
width 256, 8 heads, causal) under ``torch.profiler`` at two lengths, each op's self CPU time at
both, their ratio and the time beyond doubling::

    python benchmarks/layer_profile.py rwkv7 --lengths 8192 16384

A layer whose time is linear in length doubles every op; an op whose ratio is well above 2 (or
whose ``extra`` is large) is where a growth exponent above 1 comes from. Run it alone: the wall
time of one unprofiled step at each length is printed first, after two warm-up steps.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

import zoo
from zoo.allocator import retain_freed_memory
from zoo.attention.contract.context import AttentionContext


def self_times(step: Callable[[], None]) -> dict[str, float]:
    """Milliseconds of self CPU time per op name in one profiled call of ``step``."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        step()
    totals: dict[str, float] = defaultdict(float)
    for event in profiler.key_averages():
        totals[event.key] += event.self_cpu_time_total / 1e3
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("layer", help="a registered attention layer (zoo list)")
    parser.add_argument("--lengths", type=int, nargs=2, default=[8192, 16384])
    parser.add_argument("--rows", type=int, default=20)
    args = parser.parse_args()
    retain_freed_memory()
    torch.manual_seed(0)
    layer = zoo.create_attention(args.layer, embed_dim=256, num_heads=8)
    profiles = {}
    for length in args.lengths:
        x = torch.randn(1, length, 256, requires_grad=True)
        context = AttentionContext.build(1, length, valid_lens=None, is_causal=True)

        def step(x=x, context=context) -> None:
            layer(x, context).output.sum().backward()

        step()
        step()
        start = time.perf_counter()
        step()
        print(f"{length} tokens: {(time.perf_counter() - start) * 1e3:.0f} ms a step (not profiled)")
        profiles[length] = self_times(step)
    short, long = (profiles[length] for length in args.lengths)
    print(f"{'op':44s} {args.lengths[0]:>9} {args.lengths[1]:>9}  ratio  extra (ms)")
    for name in sorted(set(short) | set(long), key=lambda key: -long.get(key, 0.0))[: args.rows]:
        a, b = short.get(name, 0.0), long.get(name, 0.0)
        print(f"{name[:44]:44s} {a:9.1f} {b:9.1f} {b / max(a, 1e-9):6.2f} {b - 2 * a:8.1f}")


if __name__ == "__main__":
    main()
