"""DeepSeek-V4's sliding-window attention (``deepseek_v4``): the layer against the equations written
per query here, its decoding against one causal pass, the kit, and a small GPT that learns with it."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import zoo
from tests.helpers.gpt import learn_repeating_sequence
from tests.helpers.layers import decode_after_prompt, run_layer
from zoo.attention.contract.cache import KeyValueCache
from zoo.models import GPT

EMBED, HEADS, LENGTH, WINDOW = 16, 4, 11, 4
SIZES = {"head_dim": 6, "rope_head_dim": 4, "q_lora_rank": 5, "o_groups": 2, "o_lora_rank": 3, "window": WINDOW}


def layer(**kwargs) -> zoo.AttentionLayer:
    """A float64 layer, its parameters moved off their initial values (zero sinks and unit norm
    scales would hide mistakes)."""
    torch.manual_seed(0)
    module = zoo.create_attention("deepseek_v4", embed_dim=EMBED, num_heads=HEADS, **(SIZES | kwargs))
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def inputs(seed: int) -> Tensor:
    return torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def turn(v: Tensor, position: float, rotated: int) -> Tensor:
    """``v`` ``(..., d)`` with its first ``rotated`` features turned by ``position`` in pairs of
    halves (the angles in float32, as the zoo's)."""
    half = rotated // 2
    angles = position * 10000.0 ** (-torch.arange(half, dtype=torch.float32) * 2 / rotated)
    first, second = v[..., :half], v[..., half:rotated]
    cos, sin = angles.cos().double(), angles.sin().double()
    return torch.cat([first * cos - second * sin, first * sin + second * cos, v[..., rotated:]], -1)


def rms(v: Tensor, weight: Tensor | None = None) -> Tensor:
    v = v / (v.square().mean(-1, keepdim=True) + 1e-6).sqrt()
    return v if weight is None else v * weight


def reference(m, x: Tensor, keep: Tensor) -> Tensor:
    """The module docstring's equations, one query and one head at a time: ``keep`` ``(B, L)``
    marks the real keys."""
    d, r, out = m.head_dim, m.rope_head_dim, torch.zeros_like(x)
    for b in range(x.shape[0]):
        kv = [turn(rms(x[b, j] @ m.kv_proj.weight.T, m.kv_norm.weight), j, r) for j in range(x.shape[1])]
        for t in range(x.shape[1]):
            latent = rms(x[b, t] @ m.q_a_proj.weight.T, m.q_a_norm.weight) @ m.q_b_proj.weight.T
            heads = []
            for h in range(m.num_heads):
                q = turn(rms(latent[h * d : (h + 1) * d]), t, r)
                seen = [j for j in range(max(t - m.window + 1, 0), t + 1) if keep[b, j]]
                logits = torch.stack([q @ kv[j] / d**0.5 for j in seen] + [m.sinks[h]])
                weights = logits.softmax(0)[:-1]
                mixed = sum((w * kv[j] for w, j in zip(weights, seen, strict=True)), torch.zeros(d, dtype=x.dtype))
                heads.append(turn(mixed, -t, r))
            per_group = m.num_heads * d // m.o_groups
            stacked = torch.cat(heads)
            projected = [
                stacked[g * per_group : (g + 1) * per_group]
                @ m.o_a_proj.weight[g * m.o_lora_rank : (g + 1) * m.o_lora_rank].T
                for g in range(m.o_groups)
            ]
            out[b, t] = torch.cat(projected) @ m.o_b_proj.weight.T
    return out


def left_padded() -> Tensor:
    keep = torch.ones(2, LENGTH, dtype=torch.bool)
    keep[1, :3] = False
    return keep


@pytest.mark.parametrize("window", [WINDOW, 64])
def test_the_layer_computes_the_papers_equations_per_query(window: int) -> None:
    module, x, keep = layer(window=window), inputs(1), left_padded()
    with torch.no_grad():
        got = run_layer(module, x, is_causal=True, attn_mask=keep[:, None, :]).output
        torch.testing.assert_close(got[keep], reference(module, x, keep)[keep], atol=1e-12, rtol=0)


def test_decoding_from_the_cache_equals_one_causal_pass() -> None:
    module, x, keep = layer(), inputs(2), left_padded()
    with torch.no_grad():
        expected = run_layer(module, x, is_causal=True, attn_mask=keep[:, None, :]).output
    decoded, cache = decode_after_prompt(module, x, keep, prompt=5)
    torch.testing.assert_close(decoded[keep], expected[keep], atol=1e-12, rtol=0)
    assert isinstance(cache, KeyValueCache) and cache.length == LENGTH and cache.keys is cache.values


def test_the_output_depends_on_positions_only_through_distances() -> None:
    """With the window covering the sequence, the same inputs read at positions 5 .. give the same
    outputs: the inverse rotation of the output leaves only relative rotations."""
    module, x = layer(window=64), inputs(3)
    with torch.no_grad():
        whole = run_layer(module, x, is_causal=True).output
        shifted = module(x, zoo.AttentionContext(is_causal=True, offset=5)).output
    torch.testing.assert_close(shifted, whole, atol=1e-6, rtol=0)  # the angles are float32
    assert (shifted - whole).abs().max() > 0  # the positions did change


def test_what_the_layer_cannot_take_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="num_heads=4 must be a multiple of o_groups=3"):
        layer(o_groups=3)
    with pytest.raises(ValueError, match=r"rope_head_dim must be even and in \(0, head_dim=6\]; got 3"):
        layer(rope_head_dim=3)
    assert zoo.get_attention("dsv4") is zoo.get_attention("deepseek_v4")


def test_the_layer_passes_the_kit() -> None:
    report = zoo.check_attention("deepseek_v4", embed_dim=EMBED, num_heads=HEADS, **SIZES)
    assert {"causal", "padding", "weights", "gradients"} <= set(report.passed)


def test_a_gpt_learns_a_repeating_sequence_and_decodes_from_its_cache() -> None:
    torch.manual_seed(0)
    attention = {"name": "deepseek_v4", "window": 8, "o_groups": 2}
    model = GPT(8, block_size=32, d_model=16, num_heads=2, num_layers=2, attention=attention, position="none")
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    model = model.double().eval()
    prompt = torch.randint(8, (2, 6), generator=torch.Generator().manual_seed(7))
    cached = torch.stack(list(model.generate(prompt, 10, temperature=0)), 1)
    assert torch.equal(cached, torch.stack(list(model.generate(prompt, 10, temperature=0, use_cache=False)), 1))
