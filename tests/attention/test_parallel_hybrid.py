"""``parallel_hybrid``: attention and Mamba-2 side by side (Falcon-H1's block), checked against the
sum of its branches built separately with the same weights, with the multipliers where Falcon-H1
puts them (on each branch's input and output); every Mamba-2 form, decoding from the branches'
caches, the weights, refusals, the conformance kit, and a GPT that learns and decodes."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import zoo
from tests.helpers.gpt import assert_cached_generation_matches, learn_repeating_sequence
from tests.helpers.layers import decode_after_prompt, run_layer
from zoo.attention.build.spec import layer_specs
from zoo.attention.contract.cache import KeyValueCache, StateCache
from zoo.attention.variants.parallel_hybrid import BranchCaches, ParallelHybridAttention
from zoo.errors import UnknownNameError
from zoo.models import GPT

EMBED, HEADS, LENGTH = 8, 2, 19
MAMBA = {"name": "mamba2", "d_state": 4}
BRANCHES = ["softmax", MAMBA]
#: distinct multipliers, so that one applied at the wrong place or branch shows
INPUTS, OUTPUTS = (0.5, 2.0), (1.5, 0.25)


def moved(module: nn.Module, seed: int = 0) -> nn.Module:
    """``module`` in float64, evaluation mode, its parameters moved off their initial values."""
    torch.manual_seed(seed)
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def hybrid(branches: list = BRANCHES, **kwargs) -> ParallelHybridAttention:
    """The layer, float64, from the same seed: the same options give the same weights."""
    torch.manual_seed(0)
    layer = zoo.create_attention("parallel_hybrid", embed_dim=EMBED, num_heads=HEADS, branches=branches, **kwargs)
    return moved(layer)


def inputs(seed: int = 1) -> Tensor:
    return torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def separate_sum(layer: ParallelHybridAttention, x: Tensor, position=None, **masks) -> Tensor:
    """The composition written out: each branch built on its own by name, given the hybrid's
    weights, run on its scaled input, its output scaled and summed."""
    softmax = zoo.create_attention("softmax", embed_dim=EMBED, num_heads=HEADS, position=position).double()
    mamba = zoo.create_attention("mamba2", embed_dim=EMBED, num_heads=HEADS, d_state=4).double()
    softmax.load_state_dict(layer.branches[0].state_dict())
    mamba.load_state_dict(layer.branches[1].state_dict())
    attention = run_layer(softmax, x * INPUTS[0], **masks).output
    ssm = run_layer(mamba, x * INPUTS[1], **masks).output
    return OUTPUTS[0] * attention + OUTPUTS[1] * ssm


def test_the_layer_is_the_sum_of_its_branches_scaled_as_falcon_h1_scales_them() -> None:
    layer = hybrid(input_multipliers=INPUTS, output_multipliers=OUTPUTS)
    x, lengths = inputs(), torch.tensor([LENGTH, 11])
    for masks in ({}, {"valid_lens": lengths}):
        expected = separate_sum(layer, x, is_causal=True, **masks)
        torch.testing.assert_close(run_layer(layer, x, is_causal=True, **masks).output, expected, atol=1e-12, rtol=0)
    # an output multiplier is not an input one: softmax attention is not linear in its input
    swapped = hybrid(input_multipliers=OUTPUTS, output_multipliers=INPUTS)
    assert not torch.allclose(run_layer(swapped, x, is_causal=True).output, expected)


def test_rotary_positions_reach_the_branches_positioned_marks() -> None:
    rope = zoo.create_position("rope", d_model=EMBED, num_heads=HEADS)
    layer = hybrid(input_multipliers=INPUTS, output_multipliers=OUTPUTS, positioned=[True, False], position=rope)
    assert layer.branches[0].rotary is not None and layer.branches[1].rotary is None
    x = inputs(2)
    expected = separate_sum(layer, x, position=rope, is_causal=True)
    torch.testing.assert_close(run_layer(layer, x, is_causal=True).output, expected, atol=1e-12, rtol=0)
    assert hybrid(position=rope).branches[1].rotary is not None  # by default, each branch that takes it


def test_a_branch_may_have_its_own_heads() -> None:
    """Falcon-H1's Mamba-2 has more heads than its attention: the branch's ``num_heads`` is its own."""
    layer = hybrid(["softmax", {**MAMBA, "num_heads": 4}])
    assert layer.branches[0].num_heads == HEADS and layer.branches[1].num_heads == 4
    mamba = zoo.create_attention("mamba2", embed_dim=EMBED, num_heads=4, d_state=4).double()
    mamba.load_state_dict(layer.branches[1].state_dict())
    x = inputs(6)
    expected = run_layer(layer.branches[0], x, is_causal=True).output + run_layer(mamba, x, is_causal=True).output
    torch.testing.assert_close(run_layer(layer, x, is_causal=True).output, expected, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="parallel_hybrid branch 2: num_heads must be a positive integer"):
        hybrid(["softmax", {**MAMBA, "num_heads": 0}])


@pytest.mark.parametrize(("mode", "chunk_size"), [("recurrent", 64), ("chunkwise", 5), ("chunkwise", 8)])
def test_every_form_of_the_mamba2_branch_gives_the_parallel_form(mode: str, chunk_size: int) -> None:
    x, lengths = inputs(3), torch.tensor([LENGTH, 12])
    parallel = hybrid(["softmax", {**MAMBA, "mode": "parallel"}], output_multipliers=OUTPUTS)
    other = hybrid(["softmax", {**MAMBA, "mode": mode, "chunk_size": chunk_size}], output_multipliers=OUTPUTS)
    expected = run_layer(parallel, x, valid_lens=lengths, is_causal=True).output
    torch.testing.assert_close(
        run_layer(other, x, valid_lens=lengths, is_causal=True).output, expected, atol=1e-10, rtol=0
    )


def test_decoding_from_the_branches_caches_gives_the_full_forward() -> None:
    layer = hybrid(input_multipliers=INPUTS, output_multipliers=OUTPUTS)
    x = inputs(4)
    real = torch.ones(2, LENGTH, dtype=torch.bool)
    real[1, :3] = False  # a left-padded row
    full = run_layer(layer, x, attn_mask=real[:, None, :], is_causal=True).output
    decoded, cache = decode_after_prompt(layer, x, real, prompt=7)
    torch.testing.assert_close(decoded[real], full[real], atol=1e-10, rtol=0)
    assert isinstance(cache, BranchCaches) and cache.length == LENGTH
    assert isinstance(cache.caches[0], KeyValueCache) and isinstance(cache.caches[1], StateCache)
    assert cache.nbytes == cache.caches[0].nbytes + cache.caches[1].nbytes
    picked = cache.select(torch.tensor([1]))
    assert torch.equal(picked.caches[1].state, cache.caches[1].state[1:])
    with pytest.raises(TypeError, match="continues a BranchCaches of 2 caches"):
        layer.attend_cached(x[:, :1], cache.caches[1])


def test_the_weights_are_the_first_branchs() -> None:
    layer = hybrid()
    x = inputs(5)
    weights = run_layer(layer, x, is_causal=True, need_weights=True).weights
    assert torch.equal(weights, run_layer(layer.branches[0], x, is_causal=True, need_weights=True).weights)
    assert torch.allclose(weights.sum(-1), torch.ones((), dtype=torch.float64))


def test_capabilities_are_what_every_branch_serves() -> None:
    both_ways = hybrid(["dot_product", "softmax"]).capabilities
    assert both_ways.supports_bidirectional and both_ways.supports_query_mask
    with_mamba = hybrid().capabilities
    assert not with_mamba.supports_bidirectional and not with_mamba.supports_query_mask
    assert with_mamba.supports_weights and with_mamba.supports_decoding
    with pytest.raises(zoo.IncompatibleAttentionError, match="is a causal recurrence"):
        run_layer(hybrid(), inputs(), is_causal=False)


def test_bad_branches_are_refused_in_one_line() -> None:
    cases = [
        (
            UnknownNameError,
            "parallel_hybrid branch 2: Unknown attention 'mamab2'. Did you mean 'mamba2'",
            ["softmax", "mamab2"],
        ),
        (ValueError, "branches must be a list of two attention entries or more", ["softmax"]),
        (ValueError, "branches must be a list", "softmax"),
        (ValueError, "parallel_hybrid branch 2: an attention entry is a registered name or a mapping", ["softmax", 3]),
    ]
    for error, message, branches in cases:
        with pytest.raises(error, match=message) as raised:
            zoo.create_attention("parallel_hybrid", embed_dim=EMBED, num_heads=HEADS, branches=branches)
        assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match="input_multipliers must be 2 finite numbers, one per branch"):
        zoo.create_attention("parallel_hybrid", embed_dim=EMBED, num_heads=HEADS, input_multipliers=[1.0])
    with pytest.raises(ValueError, match="output_multipliers must be 2 finite numbers"):
        zoo.create_attention("parallel_hybrid", embed_dim=EMBED, num_heads=HEADS, output_multipliers=[1.0, "2"])
    rope = zoo.create_position("rope", d_model=EMBED, num_heads=HEADS)
    with pytest.raises(ValueError, match="positioned must be 2 booleans, one per branch; got \\[0, 0\\]"):
        zoo.create_attention("parallel_hybrid", embed_dim=EMBED, num_heads=HEADS, position=rope, positioned=[0, 0])
    with pytest.raises(ValueError, match=f"the rotary scheme {type(rope).__name__} reaches no branch"):
        zoo.create_attention(
            "parallel_hybrid", embed_dim=EMBED, num_heads=HEADS, position=rope, positioned=[False, False]
        )


def test_a_stack_refuses_a_branch_that_cannot_do_what_it_needs() -> None:
    """Checked with the stack's needs when the stack builds its specs, before any layer exists."""
    entry = {"name": "parallel_hybrid", "branches": ["softmax", "linformer"]}
    with pytest.raises(
        zoo.IncompatibleAttentionError, match="as branch 2 of 'parallel_hybrid': it does not support causal"
    ):
        layer_specs(entry, None, 2, causal=True, role="a GPT")
    with pytest.raises(UnknownNameError, match="parallel_hybrid branch 1: Unknown attention 'sofmax'"):
        layer_specs({"name": "parallel", "branches": ["sofmax", "mamba2"]}, None, 2, causal=True)
    with pytest.raises(zoo.IncompatibleAttentionError, match="as branch 2 of 'parallel_hybrid'.*attending in both"):
        layer_specs({"name": "parallel_hybrid", "branches": ["softmax", "mamba2"]}, None, 2, causal=False)


def test_it_keeps_the_attention_contract() -> None:
    report = zoo.check_attention("parallel_hybrid", branches=BRANCHES, position="rope", dtypes=(torch.bfloat16,))
    assert {"causal", "padding", "weights", "gradients"} <= set(report.passed)
    both_ways = zoo.check_attention("parallel", branches=["dot_product", "softmax"], dtypes=())
    assert {"bidirectional", "causal", "weights"} & set(both_ways.passed) == {"causal", "weights"}
    assert "bidirectional" not in both_ways.skipped and "query_masks" not in both_ways.skipped


def test_a_gpt_learns_a_repeating_sequence_and_decodes_from_its_caches() -> None:
    torch.manual_seed(0)
    attention = {"name": "parallel_hybrid", "branches": ["softmax", {"name": "mamba2", "d_state": 8}]}
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=2, attention=attention)
    losses = learn_repeating_sequence(model, steps=40)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert_cached_generation_matches(model)
