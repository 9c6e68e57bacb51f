"""What a training step of the ``gpt`` costs with each attention, side by side: time and peak memory.

The GPT at its code defaults (6 layers, 6 heads, width 384, 256 positions), a batch of random
tokens, one AdamW step (forward, backward, update) per call. The attentions are timed round-robin
(one step of each in turn) after warm-up steps, so their ratios are measured side by side; the
peak is the tensor memory a step holds above what it started with (``zoo.bench.measure``)::

    python benchmarks/gpt_layer_cost.py --attentions dot_product gla gated_deltanet mamba2 \\
        --batch 16 --warmup 2 --repeats 5 --out benchmarks/results/gpt_layer_cost.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from zoo.bench.measure import peak_memory, time_round_robin
from zoo.bench.report import environment
from zoo.models import GPT

VOCAB = 65  # Tiny Shakespeare's characters


def training_step(attention: str, batch: int, block_size: int) -> Callable[[], None]:
    """One AdamW step of a default-size GPT with ``attention`` on a fixed random batch."""
    torch.manual_seed(0)
    model = GPT(VOCAB, block_size=block_size, attention=attention)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(VOCAB, (batch, block_size + 1), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        logits, _ = model(tokens[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--attentions", nargs="+", default=["dot_product", "gla"])
    options.add_argument("--batch", type=int, default=16)
    options.add_argument("--block-size", type=int, default=256)
    options.add_argument("--warmup", type=int, default=2)
    options.add_argument("--repeats", type=int, default=5)
    options.add_argument("--out", type=Path)
    args = options.parse_args()
    steps = {name: training_step(name, args.batch, args.block_size) for name in args.attentions}
    calls = {name: (step, None) for name, step in steps.items()}
    times = time_round_robin(calls, warmup=args.warmup, repeats=args.repeats)
    peaks = {name: peak_memory(step, device=torch.device("cpu")) for name, step in steps.items()}
    base = args.attentions[0]
    rows = {}
    for name in args.attentions:
        rows[name] = {
            "seconds_per_step": times[name].median,
            "peak_mib": peaks[name] / 2**20,
            "time_ratio": times[name].median / times[base].median,
            "memory_ratio": peaks[name] / peaks[base],
        }
        print(f"{name:16s} {rows[name]['seconds_per_step']:.3f} s/step ({rows[name]['time_ratio']:.2f}x), "
              f"peak {rows[name]['peak_mib']:.0f} MiB ({rows[name]['memory_ratio']:.2f}x)", flush=True)  # fmt: skip
    if args.out:
        payload = {"environment": environment(torch.device("cpu"), sys.argv[1:], program="python benchmarks/gpt_layer_cost.py"),
                   "config": vars(args) | {"out": str(args.out)}, "results": rows}  # fmt: skip
        args.out.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
