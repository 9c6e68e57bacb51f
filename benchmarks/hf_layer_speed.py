"""A transformers production layer and the zoo's layer with its weights, forward and backward side by
side on the CPU (``zoo.integrations.hf_layers``): seconds each and their ratio, per length.

Usage: python benchmarks/hf_layer_speed.py kimi_linear [--lengths 4096] [--repeats 1] [--threads 1]

Each family in :data:`FAMILIES` builds transformers' layer from its production config shrunk in
width only where the full width would not fit a CPU run (the head size kept); the zoo's layer is
``from_hf_layer`` of it, at the CPU's default chunk. transformers runs its reference PyTorch kernels
(no fla, no causal_conv1d on the CPU). One batch row, one warm-up each, then ``--repeats`` rounds
timed in alternation and their medians printed: the ratio holds under a shared machine's load better
than either time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from zoo import AttentionContext
from zoo.integrations.hf_layers import from_hf_layer


def kimi_linear() -> tuple[nn.Module, object]:
    """``KimiLinearDeltaAttention`` with Kimi Linear's head size (128) and key width 16/9 of the hidden
    size (4096 / 2304), 4 heads: hidden 288, keys and values 512 wide."""
    from transformers import KimiLinearConfig
    from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention

    config = KimiLinearConfig(
        hidden_size=288, linear_num_heads=4, linear_head_dim=128, num_hidden_layers=1,
        layer_types=["linear_attention"], vocab_size=32, pad_token_id=None, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    return KimiLinearDeltaAttention(config, 0), config


#: the families timed, by name: transformers' layer and its config
FAMILIES: dict[str, Callable[[], tuple[nn.Module, object]]] = {"kimi_linear": kimi_linear}


def step(run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> float:
    """Seconds of one forward and backward of ``run`` on ``x``."""
    x = x.detach().requires_grad_()
    start = time.perf_counter()
    run(x).square().mean().backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=sorted(FAMILIES))
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    module, config = FAMILIES[args.family]()
    layer = from_hf_layer(module, config)
    runs = {
        "transformers": lambda x: module(x),
        "zoo": lambda x: layer(x, AttentionContext(is_causal=True)).output,
    }
    print(f"| {args.family} tokens | transformers s | zoo s | transformers / zoo |")
    print("|---|---|---|---|")
    for length in args.lengths:
        x = torch.randn(1, length, config.hidden_size)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for round_ in range(args.repeats + 1):
            for name, run in runs.items():
                seconds = step(run, x)
                if round_:  # the first round warms up
                    times[name].append(seconds)
        hf, zoo = (statistics.median(times[name]) for name in runs)
        print(f"| {length} | {hf:.2f} | {zoo:.2f} | {hf / zoo:.2f} |")


if __name__ == "__main__":
    main()
