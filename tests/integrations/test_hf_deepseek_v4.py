"""transformers' ``DeepseekV4Attention`` and the zoo's ``deepseek_v4``, weight for weight, on each of
DeepSeek-V4's layer types: sliding-window, heavily compressed (HCA) and compressed sparse (CSA).

DeepSeek-V4-Flash's config shrunk in width and depth only: hidden 4096, 64 heads of 512 (64 rotated),
query latent 1024, 8 output groups of 1024, window 128, 64 index heads of 128, as hidden 64, 16 heads
of 32 (4 rotated), query latent 16, 2 output groups of 16, window 128, 16 index heads of 8; its
compression rates (4 and 128) and its compressed layers' rotation (base 160000, YaRN factor 16 from
65536 positions) as they are; the indexer's top-k 512 as 16 (so that a few hundred tokens, 75 CSA
entries, are enough to select). Three layers, one of each type. The sequences run past the window and
past HCA's second window of 128, in the prompt and while decoding. transformers runs its eager kernel
with the ``cos`` and ``sin`` of its model's rotary module and a windowed causal mask written here, a
tensor at every step (its layer adds the compressor's per-query bias, and so CSA's selection, to a
tensor mask only); the zoo's layer computes its own. Outputs agree to float32 rounding (``1e-5``).

With 16 index heads no two index scores tie in these sequences: transformers' ``topk`` leaves ties to
the kernel where the zoo gives them to the earlier entry (with 4 index heads, entries whose every
head's ReLU is zero tie at 0 and the two pick differently).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from transformers import DeepseekV4Config, DynamicCache  # noqa: E402
from transformers.models.deepseek_v4.modeling_deepseek_v4 import (  # noqa: E402
    DeepseekV4Attention,
    DeepseekV4RotaryEmbedding,
)

from tests.helpers.hf_layers import assert_round_trip  # noqa: E402
from zoo import AttentionContext  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
LENGTH, PROMPT = 270, 250
SLIDING, HCA, CSA = 0, 1, 2
LAYERS = pytest.mark.parametrize("index", [SLIDING, HCA, CSA], ids=["sliding", "hca", "csa"])
YARN = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1}


def flash(**changes: object) -> DeepseekV4Config:
    sizes = dict(
        hidden_size=64, num_attention_heads=16, head_dim=32, q_lora_rank=16, o_groups=2, o_lora_rank=16,
        sliding_window=128, index_n_heads=16, index_head_dim=8, index_topk=16, num_hidden_layers=3, vocab_size=32,
        layer_types=["sliding_attention", "heavily_compressed_attention", "compressed_sparse_attention"],
        rope_parameters=dict(YARN), attn_implementation="eager",
    )  # fmt: skip
    return DeepseekV4Config(**(sizes | changes))


def hf_pair(config: DeepseekV4Config, index: int = SLIDING) -> DeepseekV4Attention:
    """transformers' layer, seeded: weights at ``1 / sqrt(fan-in)``, norm scales and sinks at
    ``1 + 0.3 N(0, 1)``."""
    torch.manual_seed(0)
    module = DeepseekV4Attention(config, index).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.dim() == 2:
                parameter.copy_(torch.randn_like(parameter) / parameter.shape[1] ** 0.5)
            else:
                parameter.copy_(1 + 0.3 * torch.randn_like(parameter))
    return module


def hf_forward(module: DeepseekV4Attention, x: torch.Tensor, first: int, cache: DynamicCache | None) -> torch.Tensor:
    """transformers' output for ``x`` at positions ``first ..``: an additive windowed causal mask
    written here over the keys its layer reads (those ``x`` brings, after the ``window - 1`` its
    cache keeps)."""
    rotary = DeepseekV4RotaryEmbedding(module.config)
    positions = torch.arange(first, first + x.shape[1])[None]
    angles = {kind: rotary(x, positions, kind) for kind in ("main", "compress")}
    keys = torch.arange(max(first - module.sliding_window + 1, 0), first + x.shape[1])
    offsets = positions[0, :, None] - keys
    mask = torch.where((offsets >= 0) & (offsets < module.sliding_window), 0.0, float("-inf"))
    return module(x, angles, positions, mask.expand(x.shape[0], 1, -1, -1), cache=cache)[0]


def inputs(config: DeepseekV4Config) -> torch.Tensor:
    return torch.randn(2, LENGTH, config.hidden_size, generator=torch.Generator().manual_seed(1))


@LAYERS
@torch.no_grad()
def test_the_full_forward_is_transformers(index: int) -> None:
    config = flash()
    module = hf_pair(config, index)
    layer = from_hf_layer(module, config).eval()
    x = inputs(config)
    expected = hf_forward(module, x, 0, None)
    torch.testing.assert_close(layer(x, AttentionContext(is_causal=True)).output, expected, **TOLERANCE)


@LAYERS
@torch.no_grad()
def test_decoding_token_by_token_is_transformers(index: int) -> None:
    """A prompt past the window, then one token at a time: transformers' DynamicCache (the window,
    and for a compressed layer the compressor's and indexer's running state) and the zoo's cache
    give the same outputs, and those of one pass."""
    config = flash()
    module = hf_pair(config, index)
    layer = from_hf_layer(module, config).eval()
    x = inputs(config)
    cache, zoo_cache = DynamicCache(config=config), None
    expected, outputs = [], []
    for first, last in [(0, PROMPT)] + [(t, t + 1) for t in range(PROMPT, LENGTH)]:
        expected.append(hf_forward(module, x[:, first:last], first, cache))
        output, zoo_cache = layer.attend_cached(x[:, first:last], zoo_cache)
        outputs.append(output)
    torch.testing.assert_close(torch.cat(outputs, 1), torch.cat(expected, 1), **TOLERANCE)
    torch.testing.assert_close(torch.cat(expected, 1), hf_forward(module, x, 0, None), **TOLERANCE)


@LAYERS
def test_the_weights_go_both_ways_bit_for_bit(index: int) -> None:
    config = flash()
    assert_round_trip(hf_pair(config, index), config)


def test_the_compressed_layers_take_their_type_and_rotation() -> None:
    config = flash()
    hca, csa = (from_hf_layer(hf_pair(config, index), config) for index in (HCA, CSA))
    assert (hca.compression, hca.compress_rate, hca.indexer) == ("hca", 128, None)
    assert (csa.compression, csa.compress_rate, csa.index_topk, csa.indexer.num_heads) == ("csa", 4, 16, 16)
    assert hca.rotary.base == 160000.0 and hca.rotary.scaling.factor == 16.0


def test_more_than_one_key_value_head_is_refused_in_one_line() -> None:
    config = flash()
    module = hf_pair(config, HCA)
    config.num_key_value_heads = 2
    with pytest.raises(ConfigurationError, match="num_key_value_heads other than 1"):
        from_hf_layer(module, config)
