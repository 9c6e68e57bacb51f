"""transformers' ``MiniMaxM3VLAttention`` and the zoo's ``msa`` (its sparse layers) and ``qk_norm`` (its
full-attention layers), weight for weight.

The layers are built from ``MiniMaxM3VLTextConfig``'s defaults (MiniMax-M3's text model: 64 heads
of 128 over 4 key-value heads beside 6144, 4 index heads of 128, ``rotary_dim`` 64 of 128, given
here as ``partial_rotary_factor`` 0.5, which is what transformers' layer reads) shrunk in width and
depth with the ratios kept: 32 heads of 16 over 2 key-value heads beside 384, 2 index heads of 16,
8 features rotated, two layers (a full-attention one, then a sparse one). The selection keeps
MiniMax-M3's 16 blocks with one local block, of 4 keys (for its 128), so that at the 96 tokens here
the late queries drop a third of their blocks. Weights are seeded at 1/sqrt(fan-in), norm scales at
0.3 N(0, 1) on a grid of 2^-6 (so that the ``1 + w`` shift is exact both ways); transformers runs
its eager kernel (the selection an additive mask) with ``cos`` and ``sin`` from
``MiniMaxM3VLRotaryEmbedding``; the zoo's layer computes its own. Outputs agree to float32
rounding (``1e-5``) in one pass and token by token with transformers' cache (on the sparse layer
it holds the index keys beside the keys and values).
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

pytest.importorskip("transformers")

from transformers import DynamicCache  # noqa: E402
from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import MiniMaxM3VLTextConfig  # noqa: E402
from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import (  # noqa: E402
    MiniMaxM3VLAttention,
    MiniMaxM3VLRotaryEmbedding,
)

from tests.helpers.hf_layers import assert_round_trip, assert_steps_like_transformers  # noqa: E402
from zoo import AttentionContext  # noqa: E402
from zoo.attention.variants.msa import MiniMaxSparseAttention  # noqa: E402
from zoo.attention.variants.softmax_recipes import QKNormAttention  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations.hf_layers import from_hf_layer  # noqa: E402

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
LENGTH, PROMPT, BLOCK, TOPK = 96, 70, 4, 16
DENSE, SPARSE = 0, 1


def config(**changes: object) -> MiniMaxM3VLTextConfig:
    """MiniMax-M3's text config shrunk (see the module docstring)."""
    options = {
        "hidden_size": 384, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 16,
        "index_n_heads": 2, "index_head_dim": 16, "index_block_size": BLOCK, "index_topk_blocks": TOPK,
        "index_local_blocks": 1, "num_hidden_layers": 2, "layer_types": ["full_attention", "minimax_m3_sparse"],
        "rope_parameters": {"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5},
        "bos_token_id": None, "eos_token_id": None, "attn_implementation": "eager",
    }  # fmt: skip
    return MiniMaxM3VLTextConfig(**(options | changes))


def hf_pair(layer: int = SPARSE, **changes: object) -> tuple[MiniMaxM3VLAttention, MiniMaxM3VLRotaryEmbedding, object]:
    settings = config(**changes)
    torch.manual_seed(0)
    module = MiniMaxM3VLAttention(settings, layer).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.dim() == 1:  # a norm's scale, on a grid of 2^-6: ``1 + w`` is exact both ways
                parameter.copy_((0.3 * torch.randn_like(parameter) * 64).round() / 64)
            else:
                parameter.copy_(torch.randn_like(parameter) * parameter.shape[1] ** -0.5)
    return module, MiniMaxM3VLRotaryEmbedding(settings), settings


def hf_forward(module, rotary, x: torch.Tensor, first: int, cache: DynamicCache | None) -> torch.Tensor:
    """transformers' output at positions ``first ..``: with no mask given, its sparse layer builds the
    causal one beside the selection from the positions; its full-attention layer gets an additive one."""
    positions = torch.arange(first, first + x.shape[1])[None]
    mask = None
    if module.indexer is None and x.shape[1] > 1:
        mask = torch.where(positions[0, :, None] >= torch.arange(first + x.shape[1]), 0.0, float("-inf"))[None, None]
    return module(x, rotary(x, positions), mask, cache=cache, position_ids=positions)[0]


def inputs(settings: MiniMaxM3VLTextConfig) -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(2, LENGTH, settings.hidden_size)


def test_the_sparse_layer_is_transformers_and_its_selection_drops_blocks() -> None:
    module, rotary, settings = hf_pair()
    layer = from_hf_layer(module, settings).eval()
    assert isinstance(layer, MiniMaxSparseAttention) and (layer.block_size, layer.topk_blocks) == (BLOCK, TOPK)
    x = inputs(settings)
    with torch.no_grad():
        expected = hf_forward(module, rotary, x, 0, None)
        output, weights = layer(x, AttentionContext(is_causal=True, need_weights=True))
    torch.testing.assert_close(output, expected, **TOLERANCE)
    # the last query reads 16 blocks of 4 keys of its 96: the heatmap is zero outside them
    assert torch.equal((weights[:, :, -1] > 0).sum(-1), torch.full((2, 32), TOPK * BLOCK))
    layer.topk_blocks = LENGTH // BLOCK  # every block: another output
    with torch.no_grad():
        dense = layer(x, AttentionContext(is_causal=True)).output
    assert (dense - expected).abs().max() > 1e-2


def test_the_full_attention_layer_is_transformers_as_qk_norm() -> None:
    module, rotary, settings = hf_pair(DENSE)
    layer = from_hf_layer(module, settings).eval()
    assert type(layer) is QKNormAttention
    x = inputs(settings)
    with torch.no_grad():
        output = layer(x, AttentionContext(is_causal=True)).output
        torch.testing.assert_close(output, hf_forward(module, rotary, x, 0, None), **TOLERANCE)


@pytest.mark.parametrize("kind", [DENSE, SPARSE])
def test_decoding_token_by_token_is_transformers(kind: int) -> None:
    """A prompt, then one token at a time: transformers' cache (on the sparse layer its sparse cache
    layer: keys, values and index keys) and the zoo's give the same outputs."""
    module, rotary, settings = hf_pair(kind)
    layer = from_hf_layer(module, settings).eval()
    x = inputs(settings)
    cache = DynamicCache(config=settings)
    zoo_cache = assert_steps_like_transformers(layer, partial(hf_forward, module, rotary), x[:, :LENGTH], PROMPT, cache)
    if kind == SPARSE:
        torch.testing.assert_close(zoo_cache.index_keys, cache.layers[SPARSE].idx_keys.squeeze(1), **TOLERANCE)


@pytest.mark.parametrize("layer", [DENSE, SPARSE])
def test_the_map_keeps_every_tensor_both_ways(layer: int) -> None:
    module, _, settings = hf_pair(layer)
    assert_round_trip(module, settings)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"index_n_heads": 4}, "index_n_heads 4 beside num_key_value_heads 2"),
        ({"index_local_blocks": 17}, "index_local_blocks 17 above index_topk_blocks 16"),
        ({"index_head_dim": 4}, "index_head_dim 4 below the 8 rotated features"),
        ({"attention_dropout": 0.1}, "attention_dropout"),
        ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 5e6, "factor": 4.0}}, "rope_type"),
    ],
)
def test_what_the_zoo_lacks_is_refused_in_one_line(changes: dict, named: str) -> None:
    module, _, settings = hf_pair(**changes)
    with pytest.raises(ConfigurationError, match=named) as caught:
        from_hf_layer(module, settings)
    assert "\n" not in str(caught.value)


def test_an_unknown_layer_type_is_refused_in_one_line() -> None:
    module, _, settings = hf_pair(DENSE)
    settings.layer_types = ["sliding_attention", "minimax_m3_sparse"]
    with pytest.raises(ConfigurationError, match="layer 0's type 'sliding_attention'"):
        from_hf_layer(module, settings)
