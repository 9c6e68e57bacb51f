"""Mamba-2's layer with the scalar-decay kernel as an earlier commit had it against today's shared-key
path, at two chunk sizes, beside causal SDPA's floor: forward and backward over one causal
sequence, round-robin in one process (RESULTS 42b).

``before``: ``_chunked`` of ``zoo/attention/kernels/decay.py`` at ``--rev`` (read with ``git
show``, see ``revision_ab.py``), which forms a chunk's states head by head; ``shared``: today's,
which forms them once for the heads that share ``B`` and ``C``. ``cN``: ``N`` steps a chunk
(``Mamba2Attention.cpu_chunk_size``). Width 256, 8 heads, batch 1, Mamba-2's ``expand`` 2 and
``d_state`` 128::

    python benchmarks/shared_keys_ab.py --length 8192 --repeats 12 --setups "before c32" "shared c32" "shared c64"

Run it alone: medians after one warm-up round, and each setup's speed as a multiple of the floor's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from revision_ab import earlier_module, step

from zoo.attention import create_attention
from zoo.attention.context import AttentionContext
from zoo.attention.kernels import decay
from zoo.attention.variants.mamba2 import Mamba2Attention
from zoo.bench.attention import AttentionBenchConfig, attention_cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", default="e8c866a", help="the commit whose kernel is 'before'")
    parser.add_argument("--length", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--setups", nargs="+", default=["before c32", "shared c32", "shared c64"])
    args = parser.parse_args()
    kernels = {"before": earlier_module("zoo.attention.kernels.decay", args.rev)._chunked, "shared": decay._chunked}
    torch.manual_seed(0)
    layer = create_attention("mamba2", embed_dim=256, num_heads=8)
    x = torch.randn(1, args.length, 256, requires_grad=True)
    context = AttentionContext.build(1, args.length, valid_lens=None, is_causal=True)
    config = AttentionBenchConfig(batch=1, d_model=256, heads=8, causal=True, padding=False, lengths=[args.length])
    floor = {case.name: case for case in attention_cases()}["floor"].build(config, args.length, torch.device("cpu"))

    def setup(name: str) -> Callable[[], object]:
        kernel, chunk = name.split()

        def run() -> torch.Tensor:
            decay._chunked, Mamba2Attention.cpu_chunk_size = kernels[kernel], int(chunk.removeprefix("c"))
            return step(layer, x, context)

        return run

    def run_floor() -> None:
        floor.reset()
        floor.step()

    runs = {name: setup(name) for name in args.setups} | {"floor": run_floor}
    reference = runs[args.setups[0]]()
    for name in args.setups[1:]:
        print(f"{name}: largest output difference {(runs[name]() - reference).abs().max().item():.2e}")
    times: dict[str, list[float]] = {name: [] for name in runs}
    for repeat in range(args.repeats + 1):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            if repeat:  # the first round warms up
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, median in medians.items():
        print(f"{name} L={args.length}: {median * 1e3:.0f} ms, speed {medians['floor'] / median:.2f}x the floor's")


if __name__ == "__main__":
    main()
