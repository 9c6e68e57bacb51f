"""Mamba-3 (``mamba3``), SISO and MIMO, against a per-token float64 loop of the paper's layer written
here from the layer's parameters (the rotation as complex multiplication, the trapezoid's two writes
as they are, not through the kernels): every form, right and left padding, decoding from the state,
the conformance kit, and a GPT that learns and decodes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.gpt import assert_cached_generation_matches, learn_repeating_sequence
from tests.helpers.layers import assert_chunkwise_gradients_equal, assert_every_form, decode_after_prompt, run_layer
from zoo.attention import RecurrentLayer
from zoo.attention.contract.cache import StateCache
from zoo.attention.variants.mamba3 import summed_angles
from zoo.models import GPT, RecallLM

EMBED, HEADS, STATE, LENGTH = 8, 2, 8, 37  # 37: a multiple of no chunk size below but 1
FORMS = [("parallel", 64), ("recurrent", 64), ("auto", 64), ("chunkwise", 4), ("chunkwise", 16)]
RANKS = [pytest.param({}, id="siso"), pytest.param({"mimo_rank": 2, "ngroups": 2}, id="mimo")]


def layer(seed: int = 0, **kwargs) -> RecurrentLayer:
    """A float64 layer with its parameters moved off their initial values (unit scales and biases,
    equal MIMO vectors would hide mistakes); larger steps, so the angles turn and the state forgets."""
    torch.manual_seed(seed)
    module = zoo.create_attention("mamba3", embed_dim=EMBED, num_heads=HEADS, d_state=STATE, **kwargs)
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
        module.dt_bias.add_(1.0)
        module.angles.weight.mul_(3.0)
    return module


def linear(x: Tensor, module: torch.nn.Linear) -> Tensor:
    return x @ module.weight.T + (0 if module.bias is None else module.bias)


def mamba3_reference(m: RecurrentLayer, x: Tensor, real: Tensor) -> Tensor:
    """The paper's layer one token at a time, a state ``h`` ``(N, P)`` per head::

    h_t = alpha_t h_{t-1} + beta_t sum_r B_{t-1,r}^T v_{t-1,r} + gamma_t sum_r B_{t,r}^T v_{t,r}
    y_t = sum_r m^o_r silu(z_t m^z_r) (C_{t,r} h_t + D v_{t,r}),        v_{t,r} = x_t m^x_r

    with ``B`` and ``C`` RMS-normed, biased per head and rank, and turned by the summed angles
    (each pair of features a complex number times ``exp(i theta_t)``); a padded token changes
    nothing and is a zero token to the next one."""
    batch, heads, rank, size = x.shape[0], HEADS, m.mimo_rank, STATE
    raw_dt, raw_a, raw_trap = (x @ m.steps.weight.T).chunk(3, dim=-1)  # (B, T, H) each
    dt = F.softplus(raw_dt + m.dt_bias)
    a = -torch.where(raw_a >= 0, 1 + raw_a, 1 / (1 - raw_a)).clamp(min=1e-4)
    alpha, lam = torch.exp(dt * a), torch.sigmoid(raw_trap)
    turn = math.pi * torch.tanh(x @ m.angles.weight.T)  # (B, T, n), shared by the heads

    def ranked(projection: torch.nn.Linear, weight: Tensor, bias: Tensor) -> Tensor:  # (B, T, H, R, N)
        y = linear(x, projection).unflatten(-1, (rank, m.ngroups, size))
        y = y / (y.square().mean(-1, keepdim=True) + 1e-5).sqrt() * weight
        return y.repeat_interleave(heads // m.ngroups, dim=-2).transpose(-3, -2) + bias

    c, b = ranked(m.q_proj, m.C_norm, m.C_bias), ranked(m.k_proj, m.B_norm, m.B_bias)
    x_heads = linear(x, m.v_proj).unflatten(-1, (heads, -1))  # (B, T, H, P)
    z = (x @ m.gate.weight.T).unflatten(-1, (heads, -1))
    ones = torch.ones(heads, rank, x_heads.shape[-1], dtype=x.dtype)
    mimo_x, mimo_z, mimo_o = (getattr(m, name, ones) for name in ("mimo_x", "mimo_z", "mimo_o"))
    values = x_heads.unsqueeze(-2) * mimo_x  # (B, T, H, R, P)

    pairs = m.angles.out_features
    theta = x.new_zeros(batch, heads, pairs)
    state = x.new_zeros(batch, heads, size, values.shape[-1])
    previous = (x.new_zeros(batch, heads, rank, size), x.new_zeros(batch, heads, rank, values.shape[-1]))
    outputs = x.new_zeros(*x_heads.shape)

    def turned(features: Tensor) -> Tensor:  # (B, H, R, N): the first 2 n features as n complex numbers
        complex_pairs = torch.view_as_complex(features[..., : 2 * pairs].unflatten(-1, (pairs, 2)).contiguous())
        rotated = torch.view_as_real(complex_pairs * torch.polar(torch.ones_like(theta), theta)[:, :, None])
        return torch.cat([rotated.flatten(-2), features[..., 2 * pairs :]], dim=-1)

    for t in range(x.shape[1]):
        keep = real[:, t, None, None]  # (B, 1, 1)
        theta = torch.where(keep, theta + turn[:, t, None, :] * dt[:, t, :, None], theta)
        c_t, b_t, v_t = turned(c[:, t]), turned(b[:, t]), values[:, t]
        beta = ((1 - lam[:, t]) * dt[:, t] * alpha[:, t])[..., None, None]
        gamma = (lam[:, t] * dt[:, t])[..., None, None]
        updated = alpha[:, t, :, None, None] * state + beta * previous[0].mT @ previous[1] + gamma * b_t.mT @ v_t
        state = torch.where(keep[..., None], updated, state)  # a padded token changes nothing
        reads = c_t @ state + m.D[:, None, None] * v_t  # (B, H, R, P)
        mixed = (reads * F.silu(z[:, t, :, None] * mimo_z) * mimo_o).sum(-2)
        outputs[:, t] = torch.where(keep, mixed, 0.0)
        previous = (b_t * keep[..., None], v_t * keep[..., None])  # a padded token is a zero token to the next
    return linear(outputs.flatten(-2), m.out_proj)


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


@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("options", RANKS)
def test_every_form_matches_the_papers_layer(options: dict, padding: str | None) -> None:
    module = layer(**options)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask, real = padded(padding)
    expected = mamba3_reference(module, x, real)
    assert_every_form(module, x, expected, FORMS, **mask)


@pytest.mark.parametrize("options", RANKS)
def test_the_angles_turn_and_the_trapezoid_reads_the_previous_token(options: dict) -> None:
    """The reference is not vacuous: the summed angles reach past pi (a sign flip of a pair), and
    the layer's output changes when only the previous token's write changes weight."""
    module = layer(**options)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    dt, _, trap = module._gates(x, torch.float64)
    turns = (math.pi * torch.tanh(x @ module.angles.weight.T)).unsqueeze(1) * dt.unsqueeze(-1)
    assert turns.cumsum(-2).abs().amax() > math.pi and (1 - trap).mean() > 0.2
    with torch.no_grad():
        before = run_layer(module, x, is_causal=True).output
        module.steps.weight[2 * HEADS :].add_(1.0)  # lambda: the previous token's share moves
        after = run_layer(module, x, is_causal=True).output
    assert (after - before).abs().amax() > 1e-3


@pytest.mark.parametrize("options", RANKS)
def test_decoding_from_a_chunkwise_prompt_matches_the_papers_layer(options: dict) -> None:
    """A left-padded prompt of 20 tokens in chunks of 4, then one token at a time from the state
    (the last token's B and values and the angles' sum carried in the cache)."""
    module = layer(chunk_size=4, **options)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    _, real = padded("left")
    expected = mamba3_reference(module, x, real)
    decoded, cache = decode_after_prompt(module, x, real, prompt=20)
    torch.testing.assert_close(decoded, expected, atol=1e-10, rtol=0)
    assert isinstance(cache, StateCache) and cache.length == LENGTH
    assert cache.state.shape == (2, HEADS, STATE, module.head_dim)
    rank = module.mimo_rank
    assert [t.shape for t in cache.extra] == [
        (2, HEADS, rank, STATE), (2, HEADS, rank, module.head_dim), (2, HEADS, STATE // 4)
    ]  # fmt: skip


@pytest.mark.parametrize("options", RANKS)
def test_chunkwise_gradients_equal_the_parallel_forms(options: dict) -> None:
    x = torch.randn(2, 20, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    weights = torch.randn(2, 20, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    assert_chunkwise_gradients_equal(
        lambda mode: layer(mode=mode, chunk_size=4, **options), x, weights, torch.tensor([20, 13])
    )


def test_siso_weights_times_the_values_are_the_recurrence() -> None:
    module = layer()
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    context = zoo.attention.AttentionContext(is_causal=True)
    with torch.no_grad():
        q, k, v, layer_input, _ = module._project(x, context, None)
        recurrence = module.prepare(q, k, v, layer_input)
        output, _ = recurrence.chunkwise(None, None, None)
        weights = recurrence.weights(None)
    torch.testing.assert_close(weights @ v[:, :, 1:, 0], output, atol=1e-12, rtol=0)
    assert torch.equal(weights.triu(1), torch.zeros_like(weights))


@pytest.mark.parametrize("options", RANKS)
def test_a_later_token_leaves_earlier_outputs_unchanged_in_float32(options: dict) -> None:
    """Causality by construction, not by cancellation: in float32, with the layer at its initial
    scales and unit-scale inputs, changing token ``j + 1`` (at a chunk's start, middle and end)
    leaves every output at ``<= j`` the same bit for bit, in every form. (Folding token ``j``'s second
    write into its key, as ``scale_j = gamma_j + shift_{j+1}``, and subtracting it back at ``j`` moved
    the read at ``j`` by rounding, about 1e-4 at these scales.)"""
    torch.manual_seed(0)
    module = zoo.create_attention("mamba3", embed_dim=32, num_heads=HEADS, d_state=16, **options).eval()
    x = torch.randn(2, 40, 32, generator=torch.Generator().manual_seed(8))
    for mode, chunk_size in FORMS:
        module.mode, module.chunk_size = mode, chunk_size
        with torch.no_grad():
            before = run_layer(module, x, is_causal=True).output
            for j in (3, 9, 15, 30):
                changed = x.clone()
                changed[:, j + 1] = torch.randn(2, 32, generator=torch.Generator().manual_seed(j))
                after = run_layer(module, changed, is_causal=True).output
                assert torch.equal(after[:, : j + 1], before[:, : j + 1]), (mode, chunk_size, j)
                assert not torch.equal(after[:, j + 1], before[:, j + 1])


@pytest.mark.parametrize("options", RANKS)
def test_mamba3_keeps_the_contract(options: dict) -> None:
    report = zoo.check_attention("mamba3", d_state=STATE, **options)
    assert {"causal", "padding", "gradients", "state_decoding", "state_size", "weights"} <= set(report.passed)


def test_a_gpt_learns_a_repeating_sequence_and_decodes_from_its_state() -> None:
    torch.manual_seed(0)
    attention = {"name": "mamba3", "d_state": 16, "mimo_rank": 2}
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=2, attention=attention)
    losses = learn_repeating_sequence(model, steps=40)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert_cached_generation_matches(model)


def test_the_recall_model_fits_a_fixed_batch() -> None:
    torch.manual_seed(0)
    model = RecallLM(16, block_size=32, d_model=32, attention={"name": "mamba3", "d_state": 16})
    tokens = torch.randint(16, (8, 33), generator=torch.Generator().manual_seed(7))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        logits, _ = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses


def test_bad_options_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"mimo_rank \(3\) must divide chunk_size \(64"):
        zoo.create_attention("mamba3", embed_dim=EMBED, num_heads=HEADS, mimo_rank=3)
    with pytest.raises(ValueError, match="mimo_rank must be a positive integer"):
        zoo.create_attention("mamba3", embed_dim=EMBED, num_heads=HEADS, mimo_rank=0)
    with pytest.raises(ValueError, match="rope_fraction must be 0.5 or 1.0"):
        zoo.create_attention("mamba3", embed_dim=EMBED, num_heads=HEADS, rope_fraction=0.25)
    with pytest.raises(ValueError, match="has no short convolution"):
        zoo.create_attention("mamba3", embed_dim=EMBED, num_heads=HEADS, conv_size=4)
    with pytest.raises(zoo.IncompatibleAttentionError, match="cannot take the rotary scheme"):
        zoo.AttentionSpec("mamba3", position=zoo.create_position("rope", d_model=EMBED, num_heads=HEADS))


def test_dt_range_sets_where_the_steps_and_so_the_turns_start() -> None:
    """``softplus(dt_bias)`` starts log-uniform in ``dt_range`` (Mamba-2's option, shared): a wider
    range starts some heads turning by up to ``pi`` a step; a range that is not ``0 < low <= high`` is refused."""
    torch.manual_seed(0)
    wide = zoo.create_attention("mamba3", embed_dim=64, num_heads=64, d_state=STATE, dt_range=(0.5, 1.0))
    dt = F.softplus(wide.dt_bias.detach())
    assert 0.5 * 0.999 <= dt.min() and dt.max() <= 1.0 * 1.001 and dt.max() > 0.9
    for bad in ((0.0, 0.1), (0.5, 0.1)):
        with pytest.raises(ValueError, match=r"dt_range is \(low, high\) with 0 < low <= high"):
            zoo.create_attention("mamba3", embed_dim=EMBED, num_heads=HEADS, dt_range=bad)


def test_the_angles_sum_stays_accurate_in_float32_over_16k_tokens() -> None:
    """Turns of about 1 a step summed over 16k steps reach 1e4, where one float32 running sum rounds
    to 1e-3 a step; summed in chunks, the angles stay within 3e-4 of float64's."""
    generator = torch.Generator().manual_seed(6)
    turn = math.pi * 0.7 * torch.rand(2, 3, 16384, 4, generator=generator, dtype=torch.float64)
    before = 6 * torch.rand(2, 3, 4, generator=generator, dtype=torch.float64)
    exact = before.unsqueeze(-2) + turn.cumsum(-2)

    def largest_error(angles: Tensor) -> float:
        wrapped = torch.remainder(angles.double() - exact[..., : angles.shape[-2], :] + math.pi, 2 * math.pi)
        return float((wrapped - math.pi).abs().max())

    assert largest_error(summed_angles(turn.float(), before.float())) < 3e-4
    assert largest_error(before.float().unsqueeze(-2) + turn.float().cumsum(-2)) > 1e-3  # what chunks avoid
    assert largest_error(summed_angles(turn[..., :100, :], before)) < 1e-12  # shorter than a chunk's multiple
