"""Kimi Delta Attention's step with the report's unbounded decay gate and with fla's bounded one
(``decay_lower_bound``), side by side in one process, round-robin, at MQAR's (256, 16) size:
one layer's forward and backward over a batch of 64 sequences of 256 tokens, width 128, 2 heads::

    OMP_NUM_THREADS=1 python benchmarks/kda_bounded_gate_ab.py --repeats 8

Each gate runs twice: as initialized, and forced to forget hard (``dt_bias`` 3, ``A`` = e^2, so
``log alpha`` is about -22 a step unbounded, -5 bounded), as the trained gates of RESULTS 42d and
44b forget. Beside each time: the decay kernel's sub-chunk length in the layer's CPU chunks (the
unbounded gate's hard setting falls to short sub-chunks; the bound keeps 8 steps). Run it alone:
the times are medians after ``--warmup`` rounds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import zoo
from zoo.allocator import retain_freed_memory
from zoo.attention.context import AttentionContext
from zoo.attention.kernels.decay import SUB_CHUNK_SIZE, sub_chunk_length
from zoo.attention.kernels.recurrence import to_chunks

BATCH, LENGTH, WIDTH, HEADS = 64, 256, 128, 2


def build(bound: float | None, hard: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    layer = zoo.create_attention("kda", embed_dim=WIDTH, num_heads=HEADS, decay_lower_bound=bound)
    if hard:
        with torch.no_grad():
            layer.decay.dt_bias.fill_(3.0)
            layer.decay.A_log.fill_(2.0)
    return layer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    retain_freed_memory()
    x = torch.randn(BATCH, LENGTH, WIDTH, generator=torch.Generator().manual_seed(0))
    context = AttentionContext.build(BATCH, LENGTH, valid_lens=None, is_causal=True)
    setups = {(bound, hard): build(bound, hard) for bound in (None, -5.0) for hard in (False, True)}
    times: dict[tuple[float | None, bool], list[float]] = {key: [] for key in setups}
    for round_ in range(args.warmup + args.repeats):
        for key, layer in setups.items():
            leaf = x.clone().requires_grad_()
            start = time.perf_counter()
            layer(leaf, context).output.sum().backward()
            if round_ >= args.warmup:
                times[key].append(time.perf_counter() - start)
    print(f"torch threads {torch.get_num_threads()}, batch {BATCH}, {LENGTH} tokens, width {WIDTH}, {HEADS} heads")
    for (bound, hard), layer in setups.items():
        with torch.no_grad():
            cumulative = to_chunks(layer.decay(x, torch.float32), layer.cpu_chunk_size).cumsum(-2)
        sub = sub_chunk_length(cumulative, SUB_CHUNK_SIZE)
        gates = "forced to forget hard" if hard else "as initialized"
        label = "unbounded" if bound is None else f"bounded at {bound:g}"
        print(f"{label:16s} {gates:22s} sub-chunk {sub:2d}: {statistics.median(times[(bound, hard)]) * 1e3:6.0f} ms")


if __name__ == "__main__":
    main()
