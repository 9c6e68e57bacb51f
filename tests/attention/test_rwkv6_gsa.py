"""RWKV-6 (``rwkv6``) and Gated Slot Attention (``gsa``) as layers, against per-token float64 loops of
each paper's layer written here from the layer's parameters (not with its kernels): the token shift
or the convolution, the gates, the recurrence in the paper's orientation (RWKV-6's read before the
write with its bonus; GSA's two slot passes with the softmax between), the output norm and gate.
Every form, right and left padding, decoding from the state, the recurrences alone from a state,
their weights, the conformance kit, a GPT that learns, and 16k float32 tokens under strong decays."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.gpt import assert_cached_generation_matches, learn_repeating_sequence
from tests.helpers.layers import assert_every_form, decode_after_prompt
from tests.helpers.short_conv import convolved
from zoo.attention import RecurrentLayer
from zoo.attention.contract.cache import StateCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.modules.bonus_recurrence import BonusRecurrence
from zoo.attention.modules.slot_recurrence import SlotRecurrence
from zoo.models import GPT

FAMILIES = ["rwkv6", "gsa"]
EMBED, HEADS, LENGTH, SLOTS = 8, 2, 37, 3  # 37: a multiple of no chunk size below but 1
FORMS = [("parallel", 64), ("recurrent", 64), ("auto", 64), ("chunkwise", 7), ("chunkwise", 16)]
#: small low-rank maps and few slots
OPTIONS = {"rwkv6": {"mix_rank": 3, "decay_rank": 4}, "gsa": {"num_slots": SLOTS}}


def layer(family: str, seed: int = 0, **kwargs) -> RecurrentLayer:
    """A float64 layer whose parameters are moved off their initial values."""
    torch.manual_seed(seed)
    module = zoo.create_attention(family, embed_dim=EMBED, num_heads=HEADS, **(OPTIONS[family] | kwargs))
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def heads(x: Tensor) -> Tensor:
    """``(B, T, H * w)`` -> ``(B, H, T, w)``."""
    return x.unflatten(-1, (HEADS, -1)).transpose(1, 2)


def linear(x: Tensor, module: torch.nn.Linear) -> Tensor:
    return x @ module.weight.T + (0 if module.bias is None else module.bias)


def outer(a: Tensor, b: Tensor) -> Tensor:
    return a.unsqueeze(-1) * b.unsqueeze(-2)


def rwkv6_reference(m: RecurrentLayer, x: Tensor, real: Tensor) -> Tensor:
    """Finch: ``ddlerp`` mixes, ``w = exp(-exp(d))``, ``o_t = r_t (S_{t-1} + Diag(u) k_t^T v_t)``,
    ``S_t = Diag(w_t) S_{t-1} + k_t^T v_t``, ``y = W_o(SiLU(g) * GroupNorm(o))``."""
    x = x * real[..., None]
    delta = F.pad(x[:, :-1], (0, 0, 1, 0)) - x
    first = x + delta * m.shift_mix

    def lora(low_rank, inputs: Tensor) -> Tensor:
        return torch.tanh(inputs @ low_rank.down.weight.T) @ low_rank.up.weight.T + low_rank.bias

    mix_r, mix_w, mix_k, mix_v, mix_g = (x + delta * lora(low_rank, first) for low_rank in m.mix)
    r, k, v = heads(linear(mix_r, m.q_proj)), heads(linear(mix_k, m.k_proj)), heads(linear(mix_v, m.v_proj))
    w = torch.exp(-torch.exp(heads(lora(m.decay, mix_w))))
    gate = F.silu(mix_g @ m.gate.weight.T)
    state = x.new_zeros(x.shape[0], HEADS, r.shape[-1], v.shape[-1])
    normed = torch.zeros_like(v)
    for t in range(x.shape[1]):
        written = outer(k[:, :, t], v[:, :, t])
        keep = real[:, t, None, None, None]
        read = torch.einsum("bhi,bhij->bhj", r[:, :, t], state + m.bonus[..., None] * written)
        read = torch.where(keep[..., 0], read, 0.0)
        state = torch.where(keep, w[:, :, t, :, None] * state + written, state)
        centred = read - read.mean(-1, keepdim=True)
        normed[:, :, t] = centred / (centred.square().mean(-1, keepdim=True) + 64e-5).sqrt()
    normed = normed * m.norm_weight[:, None] + m.norm_bias[:, None]
    return linear(normed.transpose(1, 2).flatten(-2) * gate, m.out_proj)


def gsa_reference(m: RecurrentLayer, x: Tensor, real: Tensor) -> Tensor:
    """GSA: ``K~_t = K~_{t-1} Diag(a_t) + k_t^T (1 - a_t)``, ``V~_t = Diag(a_t) V~_{t-1} + (1 - a_t)^T v_t``,
    ``o_t = softmax(q_t K~_t) V~_t``, ``y = W_o(RMSNorm(SiLU(o)))``, ``a_t = sigmoid(x W_f) ** (1/8)``."""
    q, k, v = (
        heads(F.silu(convolved(linear(x, p), c, real)))
        for p, c in ((m.q_proj, m.q_conv), (m.k_proj, m.k_conv), (m.v_proj, m.v_conv))
    )
    forget = torch.sigmoid(heads(x @ m.forget_gate.weight.T)) ** (1 / 8)  # (B, H, T, m)
    slot_keys = x.new_zeros(x.shape[0], HEADS, q.shape[-1], SLOTS)
    slot_values = x.new_zeros(x.shape[0], HEADS, SLOTS, v.shape[-1])
    outputs = torch.zeros_like(v)
    for t in range(x.shape[1]):
        a, keep = forget[:, :, t], real[:, t, None, None, None]
        slot_keys = torch.where(keep, slot_keys * a[..., None, :] + outer(k[:, :, t], 1 - a), slot_keys)
        slot_values = torch.where(keep, a[..., None] * slot_values + outer(1 - a, v[:, :, t]), slot_values)
        read = torch.einsum("bhi,bhim->bhm", q[:, :, t], slot_keys).softmax(-1)
        outputs[:, :, t] = torch.where(keep[..., 0], torch.einsum("bhm,bhmj->bhj", read, slot_values), 0.0)
    merged = F.silu(outputs).transpose(1, 2).flatten(-2)
    return linear(merged / (merged.square().mean(-1, keepdim=True) + 1e-5).sqrt() * m.norm, m.out_proj)


REFERENCES = {"rwkv6": rwkv6_reference, "gsa": gsa_reference}


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
@pytest.mark.parametrize("family", FAMILIES)
def test_every_form_matches_the_papers_layer(family: str, padding: str | None) -> None:
    module = layer(family)
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
    decoded, cache = decode_after_prompt(module, x, real, prompt=20)
    torch.testing.assert_close(decoded, REFERENCES[family](module, x, real), atol=1e-10, rtol=0)
    assert isinstance(cache, StateCache) and cache.length == LENGTH
    size = module.head_dim
    assert cache.state.shape == ((2, HEADS, size, size) if family == "rwkv6" else (2, HEADS, SLOTS, 2 * size))


# -- the recurrences alone, from a state ---------------------------------------------------------------


def bonus_loop(r: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, u: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
    outputs = []
    for t in range(r.shape[-2]):
        written = outer(k[..., t, :], v[..., t, :])
        outputs.append(torch.einsum("bhi,bhij->bhj", r[..., t, :], state + u[..., None] * written))
        state = log_decay[..., t, :, None].exp() * state + written
    return torch.stack(outputs, -2), state


def slot_loop(q: Tensor, k: Tensor, v: Tensor, log_forget: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
    width = q.shape[-1]
    slot_keys, slot_values = state[..., :width].mT, state[..., width:]  # (dk, m), (m, dv)
    outputs = []
    for t in range(q.shape[-2]):
        a = log_forget[..., t, :].exp()
        slot_keys = slot_keys * a[..., None, :] + outer(k[..., t, :], 1 - a)
        slot_values = a[..., None] * slot_values + outer(1 - a, v[..., t, :])
        read = torch.einsum("bhi,bhim->bhm", q[..., t, :], slot_keys).softmax(-1)
        outputs.append(torch.einsum("bhm,bhmj->bhj", read, slot_values))
    return torch.stack(outputs, -2), torch.cat([slot_keys.mT, slot_values], -1)


def recurrence_and_loop(kind: str, length: int, seed: int = 4) -> tuple[BonusRecurrence | SlotRecurrence, tuple]:
    """A recurrence on random float64 inputs (strong decays included), a random state and its loop's results."""
    g = torch.Generator().manual_seed(seed)
    shape = (2, HEADS, length)
    q, k, v = (torch.randn(*shape, 5, dtype=torch.float64, generator=g) for _ in range(3))
    if kind == "bonus":
        log_decay = -torch.exp(2 * torch.randn(*shape, 5, dtype=torch.float64, generator=g))
        u = torch.randn(HEADS, 1, 5, dtype=torch.float64, generator=g)
        state = torch.randn(2, HEADS, 5, 5, dtype=torch.float64, generator=g)
        return BonusRecurrence(q, k, v, log_decay, u), (state, *bonus_loop(q, k, v, log_decay, u[:, 0], state))
    log_forget = F.logsigmoid(3 * torch.randn(*shape, SLOTS, dtype=torch.float64, generator=g))
    state = torch.randn(2, HEADS, SLOTS, 10, dtype=torch.float64, generator=g)
    return SlotRecurrence(q, k, v, log_forget), (state, *slot_loop(q, k, v, log_forget, state))


@pytest.mark.parametrize("kind", ["bonus", "slot"])
def test_each_form_continues_a_state_as_the_papers_loop(kind: str) -> None:
    recurrence, (state, expected, final) = recurrence_and_loop(kind, 23)
    results = [recurrence.recurrent(state, None)] + [recurrence.chunkwise(c, state, None) for c in (None, 4, 16)]
    for output, last in results:
        torch.testing.assert_close(output, expected, atol=1e-10, rtol=0)
        torch.testing.assert_close(last, final, atol=1e-10, rtol=0)


@pytest.mark.parametrize("kind", ["bonus", "slot"])
def test_weights_give_the_output_and_ignore_padded_tokens(kind: str) -> None:
    recurrence, _ = recurrence_and_loop(kind, 11)
    mask = (torch.arange(11) < torch.tensor([11, 6])[:, None]).unsqueeze(1)  # (B, 1, T)
    weights = recurrence.weights(mask)
    output, _ = recurrence.chunkwise(None, None, mask)
    torch.testing.assert_close(weights @ recurrence.v, output, atol=1e-12, rtol=0)
    assert torch.equal(weights.triu(1), torch.zeros_like(weights)) and not weights[1, :, :, 6:].any()
    assert not weights[1, :, 6:].any() and weights[0].diagonal(dim1=-2, dim2=-1).abs().min() > 0


# -- the contract, models and long inputs --------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_the_layer_passes_the_conformance_kit(family: str) -> None:
    report = zoo.testing.check_attention(family, embed_dim=EMBED, num_heads=HEADS, **OPTIONS[family])
    assert {"causal", "padding", "weights", "gradients", "state_decoding", "state_size"} <= set(report.passed)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_gpt_learns_a_repeating_sequence_and_decodes_from_its_state(family: str) -> None:
    torch.manual_seed(0)
    model = GPT(
        8, block_size=24, d_model=16, num_heads=2, num_layers=2, attention=family, attention_kwargs=OPTIONS[family]
    )
    losses = learn_repeating_sequence(model, steps=40)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert_cached_generation_matches(model)


@pytest.mark.parametrize("family", FAMILIES)
def test_16k_tokens_in_float32_stay_finite_under_strong_decays(family: str) -> None:
    """Log decays of about -150 a step (RWKV-6's ``exp(-exp(5))``; GSA's gate saturated) summed over
    16k tokens must underflow to zero weights, never to NaN or inf, forwards and backwards."""
    torch.manual_seed(0)
    module = zoo.create_attention(family, embed_dim=16, num_heads=2, **OPTIONS[family])
    with torch.no_grad():
        if family == "rwkv6":
            module.decay.bias.fill_(5.0)
        else:
            module.forget_gate.weight.mul_(400.0)
    x = torch.randn(1, 16384, 16, requires_grad=True)
    output = module(x, AttentionContext(is_causal=True)).output
    output.square().mean().backward()
    assert torch.isfinite(output).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters() if p.grad is not None)


def test_what_the_layers_cannot_take_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="RWKV6Attention has no short convolution"):
        zoo.create_attention("rwkv6", embed_dim=EMBED, num_heads=HEADS, conv_size=4)
    with pytest.raises(ValueError, match="mix_rank must be a positive integer"):
        zoo.create_attention("rwkv6", embed_dim=EMBED, num_heads=HEADS, mix_rank=0)
    with pytest.raises(ValueError, match="num_slots must be a positive integer"):
        zoo.create_attention("gsa", embed_dim=EMBED, num_heads=HEADS, num_slots=0)
    with pytest.raises(ValueError, match="gate_normalizer must be positive"):
        zoo.create_attention("gsa", embed_dim=EMBED, num_heads=HEADS, gate_normalizer=0)
    with pytest.raises(zoo.IncompatibleAttentionError, match="cannot take the rotary scheme"):
        zoo.AttentionSpec("rwkv6", position=zoo.create_position("rope", d_model=EMBED, num_heads=HEADS))
    assert zoo.attention.ATTENTION_REGISTRY.get("rwkv") is zoo.attention.ATTENTION_REGISTRY.get("rwkv7")
