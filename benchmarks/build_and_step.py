"""Time building a deep GPT and one training step of nanoGPT's CPU command's model, for the
checkout this runs from (``docs/results/speed.md``, building a stack and a GPT step: run it from two
checkouts in turn, ``PYTHONPATH=<checkout> python benchmarks/build_and_step.py``, and compare the
medians).

Prints one line: the median milliseconds of a build and of a step, one thread.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from zoo.models import GPT


def _median_ms(call: Callable[[], object], warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12, help="layers of the GPT built (default: 12)")
    parser.add_argument("--width", type=int, default=32, help="its width (default: 32; heads of 16)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    def build() -> GPT:
        return GPT(65, d_model=args.width, num_heads=args.width // 16, num_layers=args.layers)

    model = GPT(65, block_size=64, d_model=128, num_heads=4, num_layers=4)  # nanoGPT's CPU command
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens, targets = torch.randint(65, (12, 64)), torch.randint(65, (12, 64))

    def step() -> None:
        logits, _ = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    build_ms = _median_ms(build, warmup=3, repeats=40)
    step_ms = _median_ms(step, warmup=20, repeats=60)
    print(f"build {build_ms:.2f} ms, step {step_ms:.2f} ms")


if __name__ == "__main__":
    main()
