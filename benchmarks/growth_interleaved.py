"""Growth exponents of attention layers' forward and backward, with the lengths interleaved.

``python -m zoo bench attention`` times every case at one length before any at the next, so a
drift of the machine's speed during a run goes into the exponent between two lengths
(``docs/results/speed.md``, ``--flops`` and ``--interleave``: 0.79-1.51 for the same layers in two
runs). Here each repeat times every length in turn (round-robin, after one warm-up round), and the
exponent between neighbouring lengths is ``log(t2 / t1) / log(L2 / L1)`` of the medians::

    python benchmarks/growth_interleaved.py --cases gla deltanet gated_deltanet mamba2 kda rwkv7 gated_deltaproduct \\
        --lengths 4096 8192 16384 --repeats 5 --out benchmarks/results/growth_interleaved.json

Each layer at width 256, 8 heads, batch 1, causal, as the bench builds it. Run it alone.
``python -m zoo bench attention --interleave`` has done the same since, for all its cases in one
round-robin (``docs/results/speed.md``, the recurrent layers' arithmetic against their time).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from zoo.attention import create_attention
from zoo.attention.contract.context import AttentionContext
from zoo.bench.report import environment, write_json


def layer_times(name: str, lengths: list[int], repeats: int) -> dict[int, list[float]]:
    """Seconds of one forward and backward at each length, ``repeats`` rounds after a warm-up round."""
    torch.manual_seed(0)
    layer = create_attention(name, embed_dim=256, num_heads=8)
    inputs = {length: torch.randn(1, length, 256, requires_grad=True) for length in lengths}
    contexts = {length: AttentionContext.build(1, length, valid_lens=None, is_causal=True) for length in lengths}
    times: dict[int, list[float]] = {length: [] for length in lengths}
    for round_ in range(repeats + 1):
        for length in lengths:
            started = time.perf_counter()
            layer(inputs[length], contexts[length]).output.sum().backward()
            if round_:
                times[length].append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", required=True)
    parser.add_argument("--lengths", nargs="+", type=int, default=[4096, 8192, 16384])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = []
    for name in args.cases:
        medians = {length: statistics.median(t) for length, t in layer_times(name, args.lengths, args.repeats).items()}
        exponents = [
            math.log(medians[b] / medians[a]) / math.log(b / a) for a, b in zip(args.lengths, args.lengths[1:])
        ]
        results.append(
            {"case": name, "median_ms": {str(k): v * 1e3 for k, v in medians.items()}, "exponents": exponents}
        )
        times = "  ".join(f"{length}: {medians[length] * 1e3:7.0f} ms" for length in args.lengths)
        print(f"{name:20} {times}  exponents {', '.join(f'{e:.2f}' for e in exponents)}", flush=True)
    if args.out:
        info = environment(torch.device("cpu"), sys.argv[1:], program="python benchmarks/growth_interleaved.py")
        write_json(args.out, {"environment": info, "lengths": args.lengths, "repeats": args.repeats, "cases": results})


if __name__ == "__main__":
    main()
