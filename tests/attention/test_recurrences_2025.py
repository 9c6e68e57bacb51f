"""The linear recurrences of 2025 as layers (``kda``, ``rwkv7``, ``gated_deltaproduct``) against
per-token float64 loops of each paper's layer, written here from the layer's parameters (not with
its kernels): projections, the short convolution or the token shift, gates, the recurrence in the
paper's orientation, the output norm and gate; every form, right and left padding, decoding from
the state, a GPT that learns, decodes and keeps its state's size."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.gpt import assert_cached_generation_matches, learn_repeating_sequence
from tests.helpers.layers import assert_chunkwise_gradients_equal, assert_every_form, decode_after_prompt
from tests.helpers.short_conv import convolved
from zoo.attention import RecurrentLayer
from zoo.attention.contract.cache import StateCache
from zoo.attention.kernels.chunking import to_chunks
from zoo.attention.kernels.decay import SUB_CHUNK_SIZE, sub_chunk_length
from zoo.models import GPT

FAMILIES = ["kda", "rwkv7", "gated_deltaproduct"]
EMBED, HEADS, LENGTH = 8, 2, 37  # 37: a multiple of no chunk size below but 1
EPS = 1e-5
FORMS = [("parallel", 64), ("recurrent", 64), ("auto", 64), ("chunkwise", 7), ("chunkwise", 16)]
#: small low-rank maps for RWKV-7 (its defaults are at least 32 wide)
OPTIONS = {"rwkv7": {"decay_rank": 3, "icl_rank": 3, "gate_rank": 5}, "gated_deltaproduct": {"householder_steps": 3}}


def layer(family: str, seed: int = 0, **kwargs) -> RecurrentLayer:
    """A float64 layer whose parameters are moved off their initial values (zero maps, unit norm
    scales would hide mistakes)."""
    torch.manual_seed(seed)
    module = zoo.create_attention(family, embed_dim=EMBED, num_heads=HEADS, **(OPTIONS.get(family, {}) | kwargs))
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def heads(x: Tensor, count: int = HEADS) -> Tensor:
    """``(B, T, count * w)`` -> ``(B, count, T, w)``."""
    return x.unflatten(-1, (count, -1)).transpose(1, 2)


def linear(x: Tensor, module: torch.nn.Linear) -> Tensor:
    return x @ module.weight.T + (0 if module.bias is None else module.bias)


def rms_norm(x: Tensor, weight: Tensor) -> Tensor:
    return x / (x.square().mean(-1, keepdim=True) + EPS).sqrt() * weight


def outer(a: Tensor, b: Tensor) -> Tensor:
    return a.unsqueeze(-1) * b.unsqueeze(-2)


def kda_reference(m: RecurrentLayer, x: Tensor, real: Tensor) -> Tensor:
    """Kimi Linear: ``S_t = (I - b_t k_t k_t^T) Diag(alpha_t) S_{t-1} + b_t k_t v_t^T`` (``(dk, dv)``),
    ``o_t = S_t^T q_t``; ``y = W_o(RMSNorm(o) * sigmoid(x W_g1 W_g2 + b))``."""
    q, k, v = (
        F.silu(convolved(linear(x, p), c, real))
        for p, c in ((m.q_proj, m.q_conv), (m.k_proj, m.k_conv), (m.v_proj, m.v_conv))
    )
    q, k, v = heads(q), heads(k), heads(v)
    q, k = F.normalize(q, dim=-1) / math.sqrt(q.shape[-1]), F.normalize(k, dim=-1)
    beta = torch.sigmoid(heads(x @ m.beta.weight.T))  # (B, H, T, 1)
    first, second = m.decay.proj
    inner = heads(x @ first.weight.T @ second.weight.T + m.decay.dt_bias)
    a = m.decay.A_log.exp()[:, None, None]
    if m.decay.lower_bound is None:  # the report's gate
        alpha = torch.exp(-a * F.softplus(inner))  # (B, H, T, dk)
    else:  # fla's bounded gate
        alpha = torch.exp(m.decay.lower_bound * torch.sigmoid(a * inner))
    state = x.new_zeros(x.shape[0], HEADS, q.shape[-1], v.shape[-1])
    eye = torch.eye(q.shape[-1], dtype=x.dtype)
    outputs = torch.zeros_like(v)
    for t in range(x.shape[1]):
        b = beta[:, :, t].unsqueeze(-1)
        updated = (eye - b * outer(k[:, :, t], k[:, :, t])) @ torch.diag_embed(alpha[:, :, t]) @ state
        updated = updated + b * outer(k[:, :, t], v[:, :, t])
        keep = real[:, t, None, None, None]
        state = torch.where(keep, updated, state)
        outputs[:, :, t] = torch.where(keep[..., 0], torch.einsum("bhij,bhi->bhj", state, q[:, :, t]), 0.0)
    first, second = m.gate
    gate = torch.sigmoid(heads(linear(x @ first.weight.T, second)))
    return linear((rms_norm(outputs, m.norm.weight) * gate).transpose(1, 2).flatten(-2), m.out_proj)


def rwkv7_reference(m: RecurrentLayer, x: Tensor, real: Tensor) -> Tensor:
    """RWKV-7: the token shift, ``wkv_t = wkv_{t-1} (Diag(w_t) - kappa^T (a * kappa)) + v^T k~``
    (``(dv, dk)``), ``p = GroupNorm(wkv r) + (r . rho k~) v``, ``y = W_o(g * p)``."""
    x = x * real[..., None]
    before = F.pad(x[:, :-1], (0, 0, 1, 0))
    mixed = [x + (before - x) * mu for mu in m.mix]  # r, w, k, v, a, g

    def low_rank(lora, inputs: Tensor, activation) -> Tensor:
        inner = inputs @ lora.down.weight.T
        return (activation(inner) if activation else inner) @ lora.up.weight.T + (0 if lora.bias is None else lora.bias)

    r, k, v = heads(linear(mixed[0], m.q_proj)), heads(linear(mixed[2], m.k_proj)), heads(linear(mixed[3], m.v_proj))
    w = torch.exp(-math.exp(-0.5) * torch.sigmoid(heads(low_rank(m.decay, mixed[1], torch.tanh))))
    a = torch.sigmoid(heads(low_rank(m.icl, mixed[4], None)))
    g = low_rank(m.gate, mixed[5], torch.sigmoid)
    kappa = F.normalize(k * heads(m.key_scale[None, None]), dim=-1)
    written = k * (1 + (a - 1) * heads(m.key_mix[None, None]))
    size = r.shape[-1]
    state = x.new_zeros(x.shape[0], HEADS, size, size)
    p = torch.zeros_like(v)
    for t in range(x.shape[1]):
        kappa_t = kappa[:, :, t]
        transition = torch.diag_embed(w[:, :, t]) - outer(kappa_t, a[:, :, t] * kappa_t)
        updated = state @ transition + outer(v[:, :, t], written[:, :, t])
        keep = real[:, t, None, None, None]
        state = torch.where(keep, updated, state)
        y = torch.where(keep[..., 0], (state @ r[:, :, t].unsqueeze(-1)).squeeze(-1), 0.0)  # (B, H, dv)
        normed = (y - y.mean(-1, keepdim=True)) / (y.var(-1, unbiased=False, keepdim=True) + 1e-5 * size).sqrt()
        bonus = (r[:, :, t] * m.bonus * written[:, :, t]).sum(-1, keepdim=True) * v[:, :, t]
        p[:, :, t] = normed * m.norm_weight + m.norm_bias + torch.where(keep[..., 0], bonus, 0.0)
    return linear(p.transpose(1, 2).flatten(-2) * g, m.out_proj)


def gated_deltaproduct_reference(m: RecurrentLayer, x: Tensor, real: Tensor) -> Tensor:
    """Gated DeltaProduct: ``H_0 = a_t S_{t-1}``, ``H_j = H_{j-1} (I - b_j k_j k_j^T) + b_j v_j k_j^T``
    (``(dv, dk)``), ``S_t = H_n``, ``o_t = S_t q_t``; ``y = W_o(RMSNorm(o) * silu(x W_g))``."""
    steps = m.writes
    q, k, v = (
        F.silu(convolved(linear(x, p), c, real))
        for p, c in ((m.q_proj, m.q_conv), (m.k_proj, m.k_conv), (m.v_proj, m.v_conv))
    )
    q = F.normalize(heads(q), dim=-1) / math.sqrt(m.key_head_dim)
    k = F.normalize(heads(k).unflatten(-1, (steps, -1)), dim=-1)  # (B, H, T, n, dk)
    v = heads(v).unflatten(-1, (steps, -1))
    beta = 2 * torch.sigmoid(heads(x @ m.beta.weight.T))  # (B, H, T, n)
    decay = m.decay
    a = torch.exp(-F.softplus(heads(x @ decay.proj.weight.T + decay.dt_bias)) * decay.A_log.exp()[:, None, None])
    state = x.new_zeros(x.shape[0], HEADS, v.shape[-1], q.shape[-1])
    eye = torch.eye(q.shape[-1], dtype=x.dtype)
    outputs = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=x.dtype)
    for t in range(x.shape[1]):
        updated = a[:, :, t].unsqueeze(-1) * state
        for j in range(steps):
            b = beta[:, :, t, j, None, None]
            k_j = k[:, :, t, j]
            updated = updated @ (eye - b * outer(k_j, k_j)) + b * outer(v[:, :, t, j], k_j)
        keep = real[:, t, None, None, None]
        state = torch.where(keep, updated, state)
        outputs[:, :, t] = torch.where(keep[..., 0], (state @ q[:, :, t].unsqueeze(-1)).squeeze(-1), 0.0)
    gate = F.silu(heads(x @ m.gate.weight.T))
    return linear((rms_norm(outputs, m.norm.weight) * gate).transpose(1, 2).flatten(-2), m.out_proj)


REFERENCES = {"kda": kda_reference, "rwkv7": rwkv7_reference, "gated_deltaproduct": gated_deltaproduct_reference}


def padded(kind: str | None) -> tuple[dict, Tensor]:
    """The mask arguments and the real tokens ``(B, T)``: right padding as lengths, left padding as
    attn_mask key columns."""
    steps = torch.arange(LENGTH)
    if kind == "right":
        lengths = torch.tensor([LENGTH, LENGTH - 11])
        return {"valid_lens": lengths}, steps < lengths[:, None]
    if kind == "left":
        real = steps >= torch.tensor([0, 9])[:, None]
        return {"attn_mask": real[:, None, :]}, real
    return {}, torch.ones(2, LENGTH, dtype=torch.bool)


#: each family as built by default, and the options that change its equations
VARIANTS = [pytest.param(family, {}, id=family) for family in FAMILIES] + [
    pytest.param("kda", {"decay_lower_bound": -5.0}, id="kda-bounded")
]


@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize(("family", "options"), VARIANTS)
def test_every_form_matches_the_papers_layer(family: str, options: dict, padding: str | None) -> None:
    module = layer(family, **options)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask, real = padded(padding)
    expected = REFERENCES[family](module, x, real)
    assert_every_form(module, x, expected, FORMS, **mask)


@pytest.mark.parametrize("family", FAMILIES)
def test_decoding_from_a_chunkwise_prompt_matches_the_papers_layer(family: str) -> None:
    """A left-padded prompt of 20 tokens in chunks of 7, then one token at a time from the state."""
    module = layer(family, chunk_size=7)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    _, real = padded("left")
    expected = REFERENCES[family](module, x, real)
    decoded, cache = decode_after_prompt(module, x, real, prompt=20)
    torch.testing.assert_close(decoded, expected, atol=1e-10, rtol=0)
    assert isinstance(cache, StateCache) and cache.length == LENGTH
    assert cache.state.shape == (2, HEADS, module.key_head_dim, module.head_dim)


@pytest.mark.parametrize("family", FAMILIES)
def test_chunkwise_gradients_equal_the_parallel_forms(family: str) -> None:
    x = torch.randn(2, 20, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    weights = torch.randn(2, 20, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    assert_chunkwise_gradients_equal(
        lambda mode: layer(family, mode=mode, chunk_size=6), x, weights, torch.tensor([20, 13])
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_a_gpt_learns_a_repeating_sequence_decodes_from_its_state_and_keeps_its_size(family: str) -> None:
    torch.manual_seed(0)
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=2, attention=family)
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert_cached_generation_matches(model)  # the model is now in float64 and evaluation mode
    prompt = torch.randint(8, (2, 5), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        _, short = model(prompt[:, :1], use_cache=True)
        _, long = model(prompt, use_cache=True)
    assert all(isinstance(c, StateCache) for c in long) and [c.nbytes for c in short] == [c.nbytes for c in long]


def test_kda_with_a_bounded_decay_keeps_the_decay_kernels_sub_chunks_long() -> None:
    """Inputs that make the report's gate forget hard send the decay kernel to one-step sub-chunks;
    with fla's bound of -5 a step, 40 / 5 = 8 steps still fit in one."""
    x = 30 * torch.randn(2, 64, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    lengths = {}
    for bound in (None, -5.0):
        module = layer("kda", decay_lower_bound=bound)
        log_decay = module.decay(x, torch.float64)
        if bound is not None:
            assert log_decay.min() >= bound and log_decay.max() <= 0
        lengths[bound] = sub_chunk_length(to_chunks(log_decay, module.cpu_chunk_size).cumsum(-2), SUB_CHUNK_SIZE)
    assert lengths == {None: 1, -5.0: 8}


def test_what_the_families_cannot_take_is_refused_in_one_line() -> None:
    scheme = zoo.create_position("rope", d_model=EMBED, num_heads=HEADS)
    with pytest.raises(ValueError, match="RWKV7Attention has no short convolution"):
        zoo.create_attention("rwkv7", embed_dim=EMBED, num_heads=HEADS, conv_size=4)
    with pytest.raises(zoo.IncompatibleAttentionError, match="cannot take the rotary scheme"):
        zoo.AttentionSpec("rwkv7", position=scheme)
    with pytest.raises(ValueError, match="decay_lower_bound must be a negative number"):
        zoo.create_attention("kda", embed_dim=EMBED, num_heads=HEADS, decay_lower_bound=5)
    with pytest.raises(ValueError, match="householder_steps must be a positive integer"):
        zoo.create_attention("gated_deltaproduct", embed_dim=EMBED, num_heads=HEADS, householder_steps=0)
