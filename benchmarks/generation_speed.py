"""Tokens per second of ``GPT.generate`` with the layers' caches and without them (nanoGPT's way:
the whole window at every step), side by side: the runs alternate, after a warm-up of each.

The model has the recipe's sizes with weights as initialised (speed does not depend on what was
learned); each run draws ``--new-tokens`` tokens after a one-character prompt, sampled with
temperature 0.8 and top-k 200 from one seed, so both paths draw the same tokens within the first
window::

    python benchmarks/generation_speed.py --preset gpu --new-tokens 500 --repeats 3 \\
        --out benchmarks/results/generation_speed_gpu_recipe.json

``--preset cpu`` is nanoGPT's CPU command's model (4 layers, width 128, block 64), ``gpu`` its
recipe's (6 layers, width 384, block 256); ``--attention`` any causal variant.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from zoo.bench.report import environment, markdown_table
from zoo.models import GPT

PRESETS = {
    "cpu": {"block_size": 64, "d_model": 128, "num_heads": 4, "num_layers": 4},
    "gpu": {"block_size": 256, "d_model": 384, "num_heads": 6, "num_layers": 6},
}


def tokens_per_second(model: GPT, new_tokens: int, use_cache: bool, seed: int) -> float:
    """Tokens drawn per second by one ``generate`` call of ``new_tokens``."""
    generator = torch.Generator().manual_seed(seed)
    prompt = torch.zeros(1, 1, dtype=torch.long)
    start = time.perf_counter()
    for _ in model.generate(prompt, new_tokens, temperature=0.8, top_k=200, generator=generator, use_cache=use_cache):
        pass
    return new_tokens / (time.perf_counter() - start)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--preset", choices=sorted(PRESETS), default="gpu")
    options.add_argument("--attention", default="dot_product")
    options.add_argument("--new-tokens", type=int, default=500)
    options.add_argument("--repeats", type=int, default=3)
    options.add_argument("--out", type=Path)
    args = options.parse_args()
    torch.manual_seed(0)
    model = GPT(65, attention=args.attention, bias=False, **PRESETS[args.preset]).eval()
    paths = {"cache": True, "no cache": False}
    for use_cache in paths.values():  # warm-up: fresh memory, first calls
        tokens_per_second(model, min(args.new_tokens, 50), use_cache, seed=0)
    rates: dict[str, list[float]] = {name: [] for name in paths}
    for repeat in range(args.repeats):
        for name, use_cache in paths.items():
            rates[name].append(tokens_per_second(model, args.new_tokens, use_cache, seed=repeat))
    medians = {name: statistics.median(values) for name, values in rates.items()}
    rows = [[name, f"{medians[name]:.0f}", f"{medians[name] / medians['no cache']:.1f}x"] for name in paths]
    print(markdown_table(["path", "tokens/s (median)", "vs no cache"], rows))
    if args.out:
        payload = {
            "environment": environment(
                torch.device("cpu"), sys.argv[1:], program="python benchmarks/generation_speed.py"
            ),
            "config": {**PRESETS[args.preset], "attention": args.attention, "new_tokens": args.new_tokens},
            "tokens_per_second": rates,
        }
        args.out.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
