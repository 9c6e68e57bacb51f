"""A transformers production layer and the zoo's layer with its weights, forward and backward side by
side on the CPU (``zoo.integrations.hf_layers``): seconds each and their ratio, per length; with
``--decode``, one decoded token after a prompt of each length instead.

Usage: python benchmarks/hf_layer_speed.py FAMILY [--lengths 4096] [--repeats 1] [--threads 1] [--decode]

FAMILY: the recurrent layers ``kimi_linear`` (KDA), ``qwen3_next`` (the gated delta net), ``mamba2``;
the softmax layers ``qwen3``, ``gpt_oss_sliding``, ``gpt_oss_full``, ``gemma3_sliding``,
``gemma3_full``, ``mimo_v2_flash_sliding``, ``mimo_v2_flash_full``, ``deepseek_v3`` (MLA).

Each family in :data:`FAMILIES` builds transformers' layer from its production config shrunk in
width only where the full width would not fit a CPU run (the head size kept); the zoo's layer is
``from_hf_layer`` of it, at the CPU's default chunk. transformers runs its reference PyTorch kernels
(no fla, no causal_conv1d on the CPU) and, on the softmax layers, the attention its model runs on
the CPU: SDPA (Qwen3, Gemma 3, DeepSeek-V3), or its eager softmax where the model refuses SDPA
(gpt-oss and MiMo-V2-Flash, whose sinks SDPA has no argument for). A softmax layer is called as
its model calls it (:class:`TransformersCall`): the model's rotary tables for the positions and
the model's causal mask (``create_causal_mask``, or ``create_sliding_window_causal_mask`` on a
sliding layer), built once per length and cache state and not timed, as the model builds them once
for all its layers; the zoo's layer gets ``AttentionContext(is_causal=True)`` and computes its own
rotation and window. The two sides run the same fused SDPA kernel on ``qwen3`` and ``gemma3_full``
only: on ``gemma3_sliding`` transformers masks all ``L x L`` pairs where the zoo runs its blockwise
window, and on ``deepseek_v3`` PyTorch runs transformers' call in its math kernel on the CPU (value
heads narrower than the keys) where the zoo pads the values to the fused one. Before timing, both
sides' outputs are asserted equal (to ``1e-4``) at :data:`CHECK_LENGTH` tokens, past every family's
window: the full forward, and with ``--decode`` one token after a prompt of that length, through
the paths that are timed.

One batch row, one warm-up each, then ``--repeats`` rounds timed in alternation and their medians
printed: the ratio holds under a shared machine's load better than either time. Decoding: each side
reads the prompt into its cache (transformers' ``DynamicCache``, which holds a sliding layer's
window as its model's does; the zoo's layer cache) without gradients, a softmax layer's in
:data:`PROMPT_CHUNK`-token pieces on transformers' side (its eager softmax would hold the prompt's
whole score matrix), decodes the prompt's last position untimed (the generation's first token),
then ``--repeats`` single tokens are timed in alternation from that cache (each from the same
state, so the length does not grow), the first a warm-up. The zoo's layer
decodes under one :class:`~zoo.AttentionContext`, which keeps the token's rotary tables as a zoo
model's context does for all its layers (:meth:`~zoo.AttentionContext.memoized`), as
transformers' tables are kept.

Memory: transformers' eager softmax (gpt-oss, MiMo-V2-Flash) keeps several ``heads x L x L``
float tensors for the backward pass, 8 GiB each for gpt-oss's 8 heads at 16k tokens and 16 GiB for
MiMo-V2-Flash's 16, more than a small machine holds; at 4k they are 16 times smaller.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import math
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from zoo import AttentionContext
from zoo.integrations.hf_layers import from_hf_layer

#: tokens at which both sides' outputs are asserted equal before timing (past Gemma 3's window of 1,024)
CHECK_LENGTH = 1100
#: the equality asserted there: float32 rounding over a thousand keys, far below any wrong weight
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
#: tokens per piece when transformers' softmax layer reads a decoding prompt
PROMPT_CHUNK = 2048


def kimi_linear() -> tuple[nn.Module, object]:
    """``KimiLinearDeltaAttention`` with Kimi Linear's head size (128) and key width 16/9 of the hidden
    size (4096 / 2304), 4 heads: hidden 288, keys and values 512 wide. ``A_log`` and ``dt_bias``, which
    its constructor leaves unset, drawn as its model initializes them."""
    from transformers import KimiLinearConfig
    from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention

    config = KimiLinearConfig(
        hidden_size=288, linear_num_heads=4, linear_head_dim=128, num_hidden_layers=1,
        layer_types=["linear_attention"], vocab_size=32, pad_token_id=None, bos_token_id=None, eos_token_id=None,
    )  # fmt: skip
    module = KimiLinearDeltaAttention(config, 0)
    gate = module.forget_gate
    with torch.no_grad():
        gate.A_log.uniform_(1.0, 16.0).log_()
        dt = torch.empty_like(gate.dt_bias).uniform_(math.log(1e-3), math.log(1e-1)).exp()
        gate.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
    return module, config


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


def qwen3() -> tuple[nn.Module, object]:
    """``Qwen3Attention`` under SDPA with Qwen3-8B's heads of 128, four query heads a key/value head
    (32 and 8), queries as wide as the hidden size, rotary base 1,000,000 and norm epsilon 1e-6 kept;
    4 heads and 1 key/value head: hidden 512 (4096 / 8)."""
    from transformers import Qwen3Config
    from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention

    config = Qwen3Config(
        hidden_size=512, num_attention_heads=4, num_key_value_heads=1, head_dim=128, num_hidden_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}, max_position_embeddings=40_960,
        vocab_size=32, attn_implementation="sdpa",
    )  # fmt: skip
    return Qwen3Attention(config, 0), config


def gpt_oss(layer_index: int) -> tuple[nn.Module, object]:
    """``GptOssAttention`` (layer 0 sliding, 1 full, as gpt-oss alternates them) under the eager
    softmax its model runs (gpt-oss refuses SDPA: no sinks), with gpt-oss's defaults kept (heads of
    64, eight query heads a key/value head, biases, window 128, YaRN by 32 over 4,096 positions at
    base 150,000) and hidden 2880 / 8: 8 heads and 1 key/value head, hidden 360. Sinks ~ N(0, 1)."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssAttention

    config = GptOssConfig(
        hidden_size=360, num_attention_heads=8, num_key_value_heads=1, num_hidden_layers=2, vocab_size=32,
        attn_implementation="eager",
    )  # fmt: skip
    module = GptOssAttention(config, layer_index)
    nn.init.normal_(module.sinks)  # torch.empty in transformers' constructor
    return module, config


def gemma3(layer_index: int) -> tuple[nn.Module, object]:
    """``Gemma3Attention`` (layer 0 sliding, 5 global, Gemma 3's five sliding layers to one global)
    under SDPA with Gemma 3 27B's heads of 128, two query heads a key/value head (32 and 16),
    ``query_pre_attn_scalar`` 168 (its hidden size over its heads), window 1,024, rotary bases 10,000
    (sliding) and 1,000,000 scaled linearly by 8 (global) and norm epsilon 1e-6 kept; 4 heads and 2
    key/value heads: hidden 672 (5376 / 8)."""
    from transformers import Gemma3TextConfig
    from transformers.models.gemma3.modeling_gemma3 import Gemma3Attention

    config = Gemma3TextConfig(
        hidden_size=672, num_attention_heads=4, num_key_value_heads=2, head_dim=128, query_pre_attn_scalar=168,
        sliding_window=1024, num_hidden_layers=6, vocab_size=32, attn_implementation="sdpa",
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
        },
    )  # fmt: skip
    return Gemma3Attention(config, layer_index), config


def mimo_v2_flash(layer_index: int) -> tuple[nn.Module, object]:
    """``MiMoV2FlashAttention`` (layer 0 full, 1 sliding, as its pattern starts) under the eager
    softmax its model runs (it refuses SDPA: no sinks), with its defaults kept (query and key heads of
    192, value heads of 128, sixteen query heads a key/value head on full layers and eight on sliding
    ones, window 129 with sinks, a third of each head rotated at bases 5,000,000 and 10,000, value
    scale 0.707 with the hidden size twice the heads' value width) and hidden 4096 / 4: 16 heads,
    1 key/value head (2 sliding), hidden 1024. Sinks ~ N(0, 1)."""
    from transformers import MiMoV2FlashConfig
    from transformers.models.mimo_v2_flash.modeling_mimo_v2_flash import MiMoV2FlashAttention

    config = MiMoV2FlashConfig(
        hidden_size=1024, num_attention_heads=16, num_key_value_heads=1, num_hidden_layers=2, vocab_size=32,
        attn_implementation="eager",
    )  # fmt: skip
    module = MiMoV2FlashAttention(config, layer_index)
    if module.sinks is not None:
        nn.init.normal_(module.sinks)  # torch.empty in transformers' constructor
    return module, config


def deepseek_v3() -> tuple[nn.Module, object]:
    """``DeepseekV3Attention`` (MLA) under SDPA with DeepSeek-V3's heads (128 + 64 rotary query and
    key features, 128 value features), latent ranks (queries 1536, keys and values 512), interleaved
    rotation and YaRN (by 40 over 4,096 positions, base 10,000, ``mscale`` 1) kept; 4 heads: hidden
    224 (7168 / 32). transformers caches each head's keys and values, the zoo the latent."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Attention

    yarn = {
        "rope_type": "yarn", "rope_theta": 10_000.0, "factor": 40.0, "original_max_position_embeddings": 4096,
        "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
    }  # fmt: skip
    config = DeepseekV3Config(
        hidden_size=224, num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=1, vocab_size=32,
        rope_parameters=yarn, max_position_embeddings=163_840, attn_implementation="sdpa",
    )  # fmt: skip
    return DeepseekV3Attention(config, 0), config


#: the families timed, by name: transformers' layer and its config
FAMILIES: dict[str, Callable[[], tuple[nn.Module, object]]] = {
    "kimi_linear": kimi_linear,
    "qwen3_next": qwen3_next,
    "mamba2": mamba2,
    "qwen3": qwen3,
    "gpt_oss_sliding": partial(gpt_oss, 0),
    "gpt_oss_full": partial(gpt_oss, 1),
    "gemma3_sliding": partial(gemma3, 0),
    "gemma3_full": partial(gemma3, 5),
    "mimo_v2_flash_sliding": partial(mimo_v2_flash, 1),
    "mimo_v2_flash_full": partial(mimo_v2_flash, 0),
    "deepseek_v3": deepseek_v3,
}


class TransformersCall:
    """transformers' layer called as its model calls it, ``hf(x, cache)`` -> its output. A recurrent
    layer takes ``x`` and the cache alone; a softmax layer (one whose forward takes
    ``position_embeddings``) also its model's rotary tables for the positions after those cached
    (for its layer type, where the model's rotary module takes one) and its model's causal mask,
    windowed on a sliding layer, sized by its own cache layer. Both are kept for the last cache state
    and length: the model builds them once for all its layers, so they are not the layer's time."""

    def __init__(self, module: nn.Module, config: Any) -> None:
        from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

        self.module, self.config = module, config
        self.softmax = "position_embeddings" in inspect.signature(module.forward).parameters
        if self.softmax:  # the model's rotary module: the ...RotaryEmbedding beside the layer's ...Attention
            name = type(module).__name__.removesuffix("Attention") + "RotaryEmbedding"
            self.rotary = getattr(sys.modules[type(module).__module__], name)(config)
            typed = "layer_type" in inspect.signature(self.rotary.forward).parameters
            self.rotary_options = {"layer_type": module.layer_type} if typed else {}
            sliding = getattr(module, "sliding_window", None) is not None
            self.masking = create_sliding_window_causal_mask if sliding else create_causal_mask
        self.prepared: tuple[tuple[bool, int, int], tuple[Any, Any]] | None = None

    def _tables_and_mask(self, x: Tensor, cache: Any) -> tuple[Any, Any]:
        index = self.module.layer_idx
        first = cache.get_seq_length(index) if cache is not None else 0
        key = (cache is None, first, x.shape[1])
        if self.prepared is None or self.prepared[0] != key:
            positions = torch.arange(first, first + x.shape[1])[None]
            tables = self.rotary(x, positions, **self.rotary_options)
            mask = self.masking(self.config, x, None, cache, position_ids=positions, layer_idx=index)
            self.prepared = (key, (tables, mask))
        return self.prepared[1]

    def __call__(self, x: Tensor, cache: Any = None) -> Tensor:
        if not self.softmax:
            return self.module(x, cache=cache)
        tables, mask = self._tables_and_mask(x, cache)
        return self.module(x, tables, mask, cache=cache)[0]

    def prefill(self, x: Tensor, cache: Any) -> None:
        """Read the prompt ``x`` into ``cache``: at once, or a softmax layer in :data:`PROMPT_CHUNK` pieces."""
        for piece in x.split(PROMPT_CHUNK if self.softmax else x.shape[1], dim=1):
            self(piece, cache)


def step(run: Callable[[Tensor], Tensor], x: Tensor) -> float:
    """Seconds of one forward and backward of ``run`` on ``x``."""
    x = x.detach().requires_grad_()
    start = time.perf_counter()
    run(x).square().mean().backward()
    return time.perf_counter() - start


def decode_steps(
    hf: TransformersCall, layer: nn.Module, x: Tensor, repeats: int
) -> tuple[dict[str, float], dict[str, Tensor]]:
    """Median seconds of one decoded token after the prompt ``x`` for transformers' layer and the
    zoo's, and the token's outputs. Both read all of ``x`` but its last position as the prompt and
    decode that one untimed (a generation's first token, after which the zoo's growing caches have
    room: :func:`zoo.attention.contract.cache.append_rows`); the tokens after it are timed."""
    from transformers import DynamicCache

    token = torch.randn(1, 1, x.shape[-1])
    prompt, first = x[:, :-1], x[:, -1:]
    with torch.no_grad():
        caches = {"transformers": DynamicCache(config=hf.config)}
        hf.prefill(prompt, caches["transformers"])
        hf(first, caches["transformers"])
        caches["zoo"] = layer.attend_cached(first, layer.attend_cached(prompt, None)[1])[1]
        context = AttentionContext(is_causal=True)  # its rotary tables kept, as transformers' are
        runs = {
            "transformers": lambda cache: hf(token, cache),
            "zoo": lambda cache: layer.attend_cached(token, cache, context)[0],
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        outputs: dict[str, Tensor] = {}
        for round_ in range(repeats + 1):
            for name, run in runs.items():
                cache = copy.deepcopy(caches[name])
                start = time.perf_counter()
                outputs[name] = run(cache)
                if round_:  # the first round warms up
                    times[name].append(time.perf_counter() - start)
    return {name: statistics.median(seconds) for name, seconds in times.items()}, outputs


def assert_equal(
    runs: dict[str, Callable[[Tensor], Tensor]], hf: TransformersCall, layer: nn.Module, decode: bool
) -> None:
    """Both sides' outputs at :data:`CHECK_LENGTH` tokens agree to :data:`TOLERANCE`: the full forward,
    and with ``decode`` one token after a prompt of that length."""
    x = torch.randn(1, CHECK_LENGTH, hf.config.hidden_size)
    with torch.no_grad():
        outputs = {name: run(x) for name, run in runs.items()}
    torch.testing.assert_close(outputs["zoo"], outputs["transformers"], **TOLERANCE)
    if decode:
        outputs = decode_steps(hf, layer, x, 1)[1]
        torch.testing.assert_close(outputs["zoo"], outputs["transformers"], **TOLERANCE)


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
    if args.decode:
        layer.eval()
    hf = TransformersCall(module, config)
    runs = {"transformers": hf, "zoo": lambda x: layer(x, AttentionContext(is_causal=True)).output}
    assert_equal(runs, hf, layer, args.decode)
    what = "ms a token after" if args.decode else "s forward and backward at"
    print(f"| {args.family}: {what} | transformers | zoo | transformers / zoo |")
    print("|---|---|---|---|")
    for length in args.lengths:
        x = torch.randn(1, length, config.hidden_size)
        if args.decode:
            seconds = decode_steps(hf, layer, x, args.repeats)[0]
            hf_time, zoo_time = seconds["transformers"], seconds["zoo"]
            print(f"| {length} | {hf_time * 1e3:.2f} | {zoo_time * 1e3:.2f} | {hf_time / zoo_time:.2f} |")
            continue
        times: dict[str, list[float]] = {name: [] for name in runs}
        for round_ in range(args.repeats + 1):
            for name, run in runs.items():
                seconds = step(run, x)
                if round_:  # the first round warms up
                    times[name].append(seconds)
        hf_time, zoo_time = (statistics.median(times[name]) for name in runs)
        print(f"| {length} | {hf_time:.2f} | {zoo_time:.2f} | {hf_time / zoo_time:.2f} |")


if __name__ == "__main__":
    main()
