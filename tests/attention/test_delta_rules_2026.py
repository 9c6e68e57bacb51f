"""The delta rules of 2025-2026 as layers (``gated_deltanet2``, ``comba``) against per-token float64
loops of each paper's layer, written here from the layer's parameters (not with its kernels):
projections, the short convolution, gates, the recurrence in the paper's orientation, the output
norm and gate; every form, right and left padding, decoding from the state, gradients, the
conformance kit, and a GPT that learns."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.gpt import assert_cached_generation_matches, learn_repeating_sequence
from tests.helpers.layers import assert_chunkwise_gradients_equal, assert_every_form, decode_after_prompt, run_layer
from tests.helpers.short_conv import convolved
from zoo.attention import RecurrentLayer
from zoo.attention.contract.cache import StateCache
from zoo.models import GPT

FAMILIES = ["gated_deltanet2", "comba"]
EMBED, HEADS, LENGTH = 8, 2, 37  # 37: a multiple of no chunk size below but 1
EPS = 1e-5
FORMS = [("parallel", 64), ("recurrent", 64), ("auto", 64), ("chunkwise", 7), ("chunkwise", 16)]


def layer(family: str, seed: int = 0, **kwargs) -> RecurrentLayer:
    """A float64 layer whose parameters are moved off their initial values (zero maps, unit norm
    scales would hide mistakes)."""
    torch.manual_seed(seed)
    module = zoo.create_attention(family, embed_dim=EMBED, num_heads=HEADS, **kwargs).double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def heads(x: Tensor) -> Tensor:
    """``(B, T, H * w)`` -> ``(B, H, T, w)``."""
    return x.unflatten(-1, (HEADS, -1)).transpose(1, 2)


def linear(x: Tensor, module: torch.nn.Linear) -> Tensor:
    return x @ module.weight.T + (0 if module.bias is None else module.bias)


def rms_norm(x: Tensor, weight: Tensor) -> Tensor:
    return x / (x.square().mean(-1, keepdim=True) + EPS).sqrt() * weight


def outer(a: Tensor, b: Tensor) -> Tensor:
    return a.unsqueeze(-1) * b.unsqueeze(-2)


def activated(m: RecurrentLayer, x: Tensor, real: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values per head after the convolution and SiLU, not normalized."""
    q, k, v = (
        heads(F.silu(convolved(linear(x, p), c, real)))
        for p, c in ((m.q_proj, m.q_conv), (m.k_proj, m.k_conv), (m.v_proj, m.v_conv))
    )
    return q, k, v


def gated_deltanet2_reference(m: RecurrentLayer, x: Tensor, real: Tensor) -> Tensor:
    """Gated DeltaNet-2: ``S_t = (I - k_t (b_t * k_t)^T) Diag(alpha_t) S_{t-1} + k_t (w_t * v_t)^T``
    (``(dk, dv)``), ``o_t = S_t^T q_t``; ``y = W_o(RMSNorm(o) * sigmoid(x W_g1 W_g2 + b))``."""
    q, k, v = activated(m, x, real)
    q, k = F.normalize(q, dim=-1) / math.sqrt(q.shape[-1]), F.normalize(k, dim=-1)
    erase = torch.sigmoid(heads(x @ m.beta.weight.T)) * (2 if m.beta.negative_eigenvalues else 1)
    write = torch.sigmoid(heads(x @ m.write.weight.T))
    first, second = m.decay.proj
    inner = heads(x @ first.weight.T @ second.weight.T + m.decay.dt_bias)
    alpha = torch.exp(-m.decay.A_log.exp()[:, None, None] * F.softplus(inner))
    state = x.new_zeros(x.shape[0], HEADS, q.shape[-1], v.shape[-1])
    eye = torch.eye(q.shape[-1], dtype=x.dtype)
    outputs = torch.zeros_like(v)
    for t in range(x.shape[1]):
        k_t = k[:, :, t]
        updated = (eye - outer(k_t, erase[:, :, t] * k_t)) @ torch.diag_embed(alpha[:, :, t]) @ state
        updated = updated + outer(k_t, write[:, :, t] * v[:, :, t])
        keep = real[:, t, None, None, None]
        state = torch.where(keep, updated, state)
        outputs[:, :, t] = torch.where(keep[..., 0], torch.einsum("bhij,bhi->bhj", state, q[:, :, t]), 0.0)
    gate_down, gate_up = m.gate
    gate = torch.sigmoid(heads(linear(x @ gate_down.weight.T, gate_up)))
    return linear((rms_norm(outputs, m.norm.weight) * gate).transpose(1, 2).flatten(-2), m.out_proj)


def comba_reference(m: RecurrentLayer, x: Tensor, real: Tensor) -> Tensor:
    """Comba, as fla's kernels: ``S_t = S_{t-1} (a_t I - b_t p_t k_t^T) + b_t v_t k_t^T`` (``(dv, dk)``),
    ``p = k sigmoid(lambda)``, ``o_t = S_t (q_t - d p_t)`` with ``q``, ``k``, ``p`` L2-normalized (the
    corrected query after the correction); ``y = W_o(RMSNorm(o) * sigmoid(x W_g))``."""
    q, k, v = activated(m, x, real)
    scale = m.inner_decay.sigmoid()[:, None, None]
    p = F.normalize(k * scale, dim=-1)
    q = F.normalize(q - m.correction[:, None, None] * scale * k, dim=-1) / math.sqrt(q.shape[-1])
    k = F.normalize(k, dim=-1)
    beta = torch.sigmoid(heads(x @ m.beta.weight.T))  # (B, H, T, 1)
    decay = m.decay
    a = torch.exp(-F.softplus(heads(x @ decay.proj.weight.T + decay.dt_bias)) * decay.A_log.exp()[:, None, None])
    state = x.new_zeros(x.shape[0], HEADS, v.shape[-1], q.shape[-1])
    eye = torch.eye(q.shape[-1], dtype=x.dtype)
    outputs = torch.zeros_like(v)
    for t in range(x.shape[1]):
        b = beta[:, :, t, :, None]
        transition = a[:, :, t, :, None] * eye - b * outer(p[:, :, t], k[:, :, t])
        updated = state @ transition + b * outer(v[:, :, t], k[:, :, t])
        keep = real[:, t, None, None, None]
        state = torch.where(keep, updated, state)
        outputs[:, :, t] = torch.where(keep[..., 0], (state @ q[:, :, t].unsqueeze(-1)).squeeze(-1), 0.0)
    gate = torch.sigmoid(heads(x @ m.gate.weight.T))
    return linear((rms_norm(outputs, m.norm.weight) * gate).transpose(1, 2).flatten(-2), m.out_proj)


REFERENCES = {"gated_deltanet2": gated_deltanet2_reference, "comba": comba_reference}


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
    pytest.param("gated_deltanet2", {"negative_eigenvalues": True}, id="gated_deltanet2-negative"),
    pytest.param("comba", {"correction_factor": 0.02}, id="comba-small-correction"),
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


def test_gated_deltanet2_with_one_gate_a_head_is_kda() -> None:
    """The paper's reduction: erase and write gates equal to one scalar ``beta`` a head give KDA."""
    kda = layer("kda")
    gdn2 = layer("gated_deltanet2", seed=1)
    with torch.no_grad():
        shared = {name: value for name, value in kda.state_dict().items() if name != "beta.weight"}
        missing, unexpected = gdn2.load_state_dict(shared, strict=False)
        assert sorted(missing) == ["beta.weight", "write.weight"] and unexpected == []
        per_channel = kda.beta.weight.repeat_interleave(EMBED // HEADS, dim=0)  # each head's row, a row a channel
        gdn2.beta.weight.copy_(per_channel)
        gdn2.write.weight.copy_(per_channel)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = run_layer(kda, x, is_causal=True).output
        torch.testing.assert_close(run_layer(gdn2, x, is_causal=True).output, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_conformance_kit_passes(family: str) -> None:
    report = zoo.check_attention(family, position="rope")
    assert {"causal", "gradients", "state_decoding", "state_size"} <= set(report.passed)
    assert "query_masks" in report.skipped


@pytest.mark.parametrize("family", FAMILIES)
def test_a_gpt_learns_a_repeating_sequence_and_decodes_from_its_state(family: str) -> None:
    torch.manual_seed(0)
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=2, attention=family)
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert_cached_generation_matches(model)


def test_what_the_families_cannot_take_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="correction_factor must be a finite number"):
        zoo.create_attention("comba", embed_dim=EMBED, num_heads=HEADS, correction_factor=math.inf)
    with pytest.raises(TypeError, match="negative_eigenvalues"):
        zoo.create_attention("comba", embed_dim=EMBED, num_heads=HEADS, negative_eigenvalues=True)
    with pytest.raises(ValueError, match="decay_lower_bound must be a negative number"):
        zoo.create_attention("gated_deltanet2", embed_dim=EMBED, num_heads=HEADS, decay_lower_bound=5)
