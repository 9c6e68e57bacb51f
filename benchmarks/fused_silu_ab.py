"""SiLU inside the short convolution's function against SiLU after it, training the GPT, side by side.

The recurrent layers apply SiLU inside ``causal_conv1d`` (``activation="silu"``), whose backward
sums the convolution again instead of keeping its output (RESULTS 34e). This times one AdamW step
of the default-size GPT (``gpt_layer_cost.training_step``) with each given attention both ways in
one process: as it is, and with ``causal_conv1d`` swapped for the convolution followed by a
separate ``F.silu`` (the form before), round-robin after warm-up rounds::

    python benchmarks/fused_silu_ab.py gla mamba2
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import torch.nn.functional as F
from gpt_layer_cost import training_step
from torch import Tensor

import zoo.attention.kernels.short_conv as short_conv
from zoo.bench.measure import time_round_robin

FUSED = short_conv.causal_conv1d


def separate_silu(*args: Any, activation: Literal["silu"] | None = None, **kwargs: Any) -> tuple[Tensor, Tensor]:
    """The convolution, then SiLU as its own autograd node (which keeps the convolution's output)."""
    y, after = FUSED(*args, **kwargs)
    return (F.silu(y) if activation else y), after


@contextmanager
def silu_after_the_convolution() -> Iterator[None]:
    short_conv.causal_conv1d = separate_silu
    try:
        yield
    finally:
        short_conv.causal_conv1d = FUSED


def separately(step: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        with silu_after_the_convolution():
            step()

    return run


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("attentions", nargs="+")
    options.add_argument("--batch", type=int, default=16)
    options.add_argument("--block-size", type=int, default=256)
    options.add_argument("--warmup", type=int, default=2)
    options.add_argument("--repeats", type=int, default=7)
    args = options.parse_args()
    calls = {}
    for name in args.attentions:
        calls[name] = (training_step(name, args.batch, args.block_size), None)
        calls[f"{name} (separate)"] = (separately(training_step(name, args.batch, args.block_size)), None)
    times = time_round_robin(calls, warmup=args.warmup, repeats=args.repeats)
    for name in args.attentions:
        fused, separate = times[name].median, times[f"{name} (separate)"].median
        print(
            f"{name}: fused {fused:.3f} s/step, separate {separate:.3f} s/step, fused / separate {fused / separate:.3f}"
        )


if __name__ == "__main__":
    main()
