"""A tiny transformers model's forward and backward with its PyTorch fallback kernels and with the
zoo's (``zoo.integrations.hf_kernels.use_zoo_kernels``), side by side on the CPU: seconds each and
their ratio, per length.

Usage: python benchmarks/hf_kernels_speed.py [--families qwen3_next kimi_linear] [--lengths 1024 4096]
[--repeats 3] [--threads 1]

Each model is one linear-attention layer with its family's production head size (128) and two heads,
hidden 256, a vocabulary of 64, dense MLP. One batch row; one warm-up round, then ``--repeats``
rounds timed in alternation (round-robin over the two kernels), medians printed: the ratio holds
under a shared machine's load better than either time.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from zoo.integrations.hf_kernels import use_zoo_kernels


def qwen3_next() -> nn.Module:
    """Qwen3-Next's Gated DeltaNet shape: 2 key heads and 2 value heads of 128."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    config = Qwen3NextConfig(
        hidden_size=256, linear_num_key_heads=2, linear_key_head_dim=128, linear_num_value_heads=2,
        linear_value_head_dim=128, num_attention_heads=2, num_key_value_heads=1, head_dim=128, intermediate_size=512,
        num_experts=0, mlp_only_layers=[0], num_hidden_layers=1, layer_types=["linear_attention"], vocab_size=64,
    )  # fmt: skip
    return Qwen3NextForCausalLM(config)


def kimi_linear() -> nn.Module:
    """Kimi Linear's KDA shape: 2 heads of 128."""
    from transformers import KimiLinearConfig, KimiLinearForCausalLM

    config = KimiLinearConfig(
        hidden_size=256, linear_num_heads=2, linear_head_dim=128, num_hidden_layers=1,
        layer_types=["linear_attention"], mlp_layer_types=["dense"], intermediate_size=512, vocab_size=64,
        pad_token_id=None, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    return KimiLinearForCausalLM(config)


#: the families timed, by name
FAMILIES: dict[str, Callable[[], nn.Module]] = {"qwen3_next": qwen3_next, "kimi_linear": kimi_linear}


def step(model: nn.Module, ids: torch.Tensor, zoo: bool) -> float:
    """Seconds of one forward and backward of ``model`` on ``ids``, with the zoo's kernels or not."""
    model.zero_grad()
    start = time.perf_counter()
    if zoo:
        with use_zoo_kernels(model):
            model(ids, labels=ids, use_cache=False).loss.backward()
    else:
        model(ids, labels=ids, use_cache=False).loss.backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", choices=sorted(FAMILIES), nargs="+", default=sorted(FAMILIES))
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| model | tokens | transformers s | zoo s | transformers / zoo |")
    print("|---|---|---|---|---|")
    for family in args.families:
        torch.manual_seed(0)
        model = FAMILIES[family]()
        for length in args.lengths:
            ids = torch.randint(0, 64, (1, length))
            times: dict[bool, list[float]] = {False: [], True: []}
            for round_ in range(args.repeats + 1):
                for zoo in times:
                    seconds = step(model, ids, zoo)
                    if round_:  # the first round warms up
                        times[zoo].append(seconds)
            hf, zoo_s = (statistics.median(times[zoo]) for zoo in (False, True))
            print(f"| {family} | {length} | {hf:.2f} | {zoo_s:.2f} | {hf / zoo_s:.2f} |")


if __name__ == "__main__":
    main()
