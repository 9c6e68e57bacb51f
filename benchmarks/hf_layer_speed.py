"""A transformers production layer and the zoo's layer with its weights, forward and backward side by
side on the CPU (``zoo.integrations.hf_layers``): seconds each and their ratio, per length; with
``--decode``, one decoded token after a prompt of each length instead.

Usage: python benchmarks/hf_layer_speed.py kimi_linear [--lengths 4096] [--repeats 1] [--threads 1] [--decode]

Each family in :data:`FAMILIES` builds transformers' layer from its production config shrunk in
width only where the full width would not fit a CPU run (the head size kept); the zoo's layer is
``from_hf_layer`` of it, at the CPU's default chunk. transformers runs its reference PyTorch kernels
(no fla, no causal_conv1d on the CPU). One batch row, one warm-up each, then ``--repeats`` rounds
timed in alternation and their medians printed: the ratio holds under a shared machine's load better
than either time. Decoding: each side reads the prompt into its cache (transformers' ``DynamicCache``,
the zoo's layer cache) without gradients, then ``--repeats`` single tokens are timed in alternation
from that cache (each from the prompt's state, so the length does not grow), the first a warm-up.
"""

from __future__ import annotations

import argparse
import copy
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


def qwen3_next() -> tuple[nn.Module, object]:
    """``Qwen3NextGatedDeltaNet`` with Qwen3-Next's head size (128) and its two value heads a key head,
    2 key heads and 4 value heads: hidden 256, keys 256 and values 512 wide."""
    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    config = Qwen3NextConfig(
        hidden_size=256, linear_num_key_heads=2, linear_key_head_dim=128, linear_num_value_heads=4,
        linear_value_head_dim=128, num_hidden_layers=1, layer_types=["linear_attention"], vocab_size=32,
    )  # fmt: skip
    return Qwen3NextGatedDeltaNet(config, 0), config


def mamba2() -> tuple[nn.Module, object]:
    """``Mamba2Mixer`` with Mamba-2's head size (64) and state (128), 8 heads, one group: hidden 256."""
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer

    config = Mamba2Config(
        hidden_size=256, num_heads=8, head_dim=64, state_size=128, n_groups=1, num_hidden_layers=1, vocab_size=32
    )
    return Mamba2Mixer(config, 0), config


#: the families timed, by name: transformers' layer and its config
FAMILIES: dict[str, Callable[[], tuple[nn.Module, object]]] = {
    "kimi_linear": kimi_linear,
    "qwen3_next": qwen3_next,
    "mamba2": mamba2,
}


def step(run: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> float:
    """Seconds of one forward and backward of ``run`` on ``x``."""
    x = x.detach().requires_grad_()
    start = time.perf_counter()
    run(x).square().mean().backward()
    return time.perf_counter() - start


def decode_steps(
    module: nn.Module, layer: nn.Module, config: object, x: torch.Tensor, repeats: int
) -> tuple[float, float]:
    """Median seconds of one decoded token after the prompt ``x`` for transformers' layer and the zoo's."""
    from transformers import DynamicCache

    token = torch.randn(1, 1, x.shape[-1])
    with torch.no_grad():
        hf_cache = DynamicCache(config=config)
        module(x, cache=hf_cache)
        _, zoo_cache = layer.attend_cached(x, None)
        times: dict[str, list[float]] = {"transformers": [], "zoo": []}
        for round_ in range(repeats + 1):
            for name in times:
                cache = copy.deepcopy(hf_cache if name == "transformers" else zoo_cache)
                start = time.perf_counter()
                module(token, cache=cache) if name == "transformers" else layer.attend_cached(token, cache)
                if round_:
                    times[name].append(time.perf_counter() - start)
    return statistics.median(times["transformers"]), statistics.median(times["zoo"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family", choices=sorted(FAMILIES))
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--decode", action="store_true", help="time one decoded token after each length")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    module, config = FAMILIES[args.family]()
    layer = from_hf_layer(module, config)
    runs = {
        "transformers": lambda x: module(x),
        "zoo": lambda x: layer(x, AttentionContext(is_causal=True)).output,
    }
    what = "ms a token after" if args.decode else "s forward and backward at"
    print(f"| {args.family}: {what} | transformers | zoo | transformers / zoo |")
    print("|---|---|---|---|")
    for length in args.lengths:
        x = torch.randn(1, length, config.hidden_size)
        if args.decode:
            hf, zoo = decode_steps(module, layer.eval(), config, x, args.repeats)
            print(f"| {length} | {hf * 1e3:.2f} | {zoo * 1e3:.2f} | {hf / zoo:.2f} |")
            continue
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
