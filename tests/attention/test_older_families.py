"""The older families people compare against (``mamba1``, ``hgrn2``, ``based``) against per-token
float64 loops of each paper's layer, written here from the layer's parameters (not with its
kernels): every form, right and left padding, decoding from the cache, the conformance kit, the
recall model fitting a batch and a GPT decoding from its cache."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.layers import assert_every_form, decode_after_prompt, run_layer
from tests.helpers.short_conv import convolved
from zoo.attention import RecurrentLayer
from zoo.attention.contract.cache import StateCache
from zoo.attention.variants.based import taylor_features
from zoo.models import GPT, RecallLM

EMBED, HEADS, LENGTH = 8, 2, 37  # 37: a multiple of no chunk size below but 1
FORMS = [("parallel", 64), ("recurrent", 64), ("auto", 64), ("chunkwise", 7), ("chunkwise", 16)]
#: each family small, and the options that change its equations
VARIANTS = [
    pytest.param("mamba1", {"d_state": 4}, id="mamba1"),
    pytest.param("mamba1", {"d_state": 3, "expand": 1.5, "conv_size": 0, "dt_rank": 2}, id="mamba1-no-conv"),
    pytest.param("mamba1", {"d_state": 4, "negative_eigenvalues": True}, id="mamba1-negative-eigenvalues"),
    pytest.param("hgrn2", {}, id="hgrn2"),
    pytest.param("hgrn2", {"lower_bound": 0.3, "expand_ratio": 3, "conv_size": 4}, id="hgrn2-bounded-conv"),
    pytest.param("based", {"feature_dim": 3, "window": 5}, id="based"),
    pytest.param("based", {"feature_dim": 3, "window": 0}, id="based-taylor-only"),
    pytest.param("based", {"feature_dim": 2, "window": 64}, id="based-window-past-the-input"),
]


def layer(family: str, seed: int = 0, **kwargs) -> RecurrentLayer:
    """A float64 layer whose parameters are moved off their initial values (ones, zeros and S4D's
    ``A`` would hide mistakes)."""
    torch.manual_seed(seed)
    module = zoo.create_attention(family, embed_dim=EMBED, num_heads=HEADS, **kwargs).double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
        if kwargs.get("negative_eigenvalues"):  # steps near 0.3: decays on both sides of 1/2, so signs of both kinds
            module.dt_proj.bias.add_(-1.0 - module.dt_proj.bias.mean())
    return module


def linear(x: Tensor, module: torch.nn.Linear) -> Tensor:
    return x @ module.weight.T + (0 if module.bias is None else module.bias)


def heads(x: Tensor, count: int = HEADS) -> Tensor:
    """``(B, T, count * w)`` -> ``(B, count, T, w)``."""
    return x.unflatten(-1, (count, -1)).transpose(1, 2)


def mamba1_reference(m: RecurrentLayer, u: Tensor, real: Tensor) -> Tensor:
    """Mamba: ``h_t = exp(dt_t A) * h_{t-1} + dt_t B_t x_t`` per channel (``(channels, N)``),
    ``y_t = h_t C_t + D x_t``, ``out = (y * silu(z)) W_out``, as ``selective_scan_ref`` loops it;
    with negative eigenvalues the decay is ``2 exp(dt_t A) - 1``, as Grazzi et al.'s block maps it."""
    x = F.silu(convolved(linear(u, m.v_proj), m.v_conv, real))  # (B, T, channels)
    z = linear(u, m.gate)
    dt = F.softplus(linear(linear(x, m.dt_down), m.dt_proj))
    b, c = linear(x, m.k_proj), linear(x, m.q_proj)  # (B, T, N)
    a = -m.A_log.exp()  # (channels, N)
    h = u.new_zeros(u.shape[0], x.shape[-1], a.shape[-1])
    y = torch.zeros_like(x)
    for t in range(u.shape[1]):
        decay = torch.exp(dt[:, t, :, None] * a)
        decay = 2 * decay - 1 if m.negative_eigenvalues else decay
        updated = decay * h + (dt[:, t] * x[:, t])[..., None] * b[:, t, None, :]
        keep = real[:, t, None]
        h = torch.where(keep[..., None], updated, h)
        y[:, t] = torch.where(keep, (h * c[:, t, None, :]).sum(-1) + m.D * x[:, t], 0.0)
    return linear(y * F.silu(z), m.out_proj)


def hgrn2_reference(m: RecurrentLayer, x: Tensor, real: Tensor) -> Tensor:
    """HGRN2: ``f = lambda + (1 - lambda) sigmoid(x W_f)``, ``S_t = Diag(f_t) S_{t-1} + (1 - f_t)^T i_t``
    per head, ``o_t = silu(q_t) S_t / sqrt(dk)``, ``y = RMSNorm(o) W_o`` over the whole width."""
    q, f, i = (
        convolved(linear(x, p), c, real) for p, c in ((m.q_proj, m.q_conv), (m.k_proj, m.k_conv), (m.v_proj, m.v_conv))
    )
    q, i = heads(F.silu(q)), heads(i)
    forget = heads(m.lower_bound + (1 - m.lower_bound) * torch.sigmoid(f))
    state = x.new_zeros(x.shape[0], HEADS, q.shape[-1], i.shape[-1])
    outputs = torch.zeros_like(i)
    for t in range(x.shape[1]):
        f_t = forget[:, :, t]
        updated = f_t[..., None] * state + (1 - f_t)[..., None] * i[:, :, t, None, :]
        keep = real[:, t, None, None, None]
        state = torch.where(keep, updated, state)
        read = torch.einsum("bhk,bhkv->bhv", q[:, :, t], state) / math.sqrt(q.shape[-1])
        outputs[:, :, t] = torch.where(keep[..., 0], read, 0.0)
    merged = outputs.transpose(1, 2).flatten(-2)
    normed = merged / (merged.square().mean(-1, keepdim=True) + 1e-5).sqrt() * m.norm_weight
    return linear(normed, m.out_proj)


def based_reference(m: RecurrentLayer, x: Tensor, real: Tensor) -> Tensor:
    """Based, weights written out (no feature map): the Taylor part ``sum_j w_ij v_j / sum_j w_ij``
    with ``w_ij = 1 + s + s^2 / 2``, ``s = q_i . k_j / sqrt(d)``, over the real ``j <= i``; the window
    part softmax over the real ``i - W < j <= i``; each through its output map, summed."""
    q, k, v = heads(linear(x, m.q_proj)), heads(linear(x, m.k_proj)), heads(linear(x, m.v_proj))
    output = torch.zeros(*x.shape[:2], EMBED, dtype=x.dtype)
    taylor = torch.zeros_like(v)
    if m.window:
        wq, wk, wv = (heads(t) for t in linear(x, m.window_proj).chunk(3, dim=-1))
        windowed = torch.zeros_like(wv)
    for t in range(x.shape[1]):
        if not real[:, t].any():
            continue
        s = torch.einsum("bhd,bhjd->bhj", q[:, :, t], k[:, :, : t + 1]) / math.sqrt(q.shape[-1])
        w = (1 + s + s.square() / 2) * real[:, None, : t + 1]
        taylor[:, :, t] = torch.einsum("bhj,bhjd->bhd", w, v[:, :, : t + 1]) / w.sum(-1, keepdim=True)
        if m.window:
            first = max(0, t - m.window + 1)
            scores = torch.einsum("bhd,bhjd->bhj", wq[:, :, t], wk[:, :, first : t + 1]) / math.sqrt(wq.shape[-1])
            scores = scores.masked_fill(~real[:, None, first : t + 1], float("-inf"))
            windowed[:, :, t] = torch.einsum("bhj,bhjd->bhd", scores.softmax(-1), wv[:, :, first : t + 1])
    keep = real[:, None, :, None]
    output = linear(torch.where(keep, taylor, 0.0).transpose(1, 2).flatten(-2), m.out_proj)
    if m.window:
        output = output + linear(torch.where(keep, windowed, 0.0).transpose(1, 2).flatten(-2), m.window_out)
    return output


REFERENCES = {"mamba1": mamba1_reference, "hgrn2": hgrn2_reference, "based": based_reference}


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
@pytest.mark.parametrize(("family", "options"), VARIANTS)
def test_every_form_matches_the_papers_layer(family: str, options: dict, padding: str | None) -> None:
    module = layer(family, **options)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask, real = padded(padding)
    expected = REFERENCES[family](module, x, real)
    assert_every_form(module, x, expected, FORMS, **mask)


@pytest.mark.parametrize(("family", "options"), VARIANTS)
def test_decoding_from_a_chunkwise_prompt_matches_the_papers_layer(family: str, options: dict) -> None:
    """A left-padded prompt of 20 tokens in chunks of 7, then one token at a time from the cache,
    whose size stays that of the first token's."""
    module = layer(family, chunk_size=7, **options)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    _, real = padded("left")
    decoded, cache = decode_after_prompt(module, x, real, prompt=20)
    torch.testing.assert_close(decoded, REFERENCES[family](module, x, real), atol=1e-10, rtol=0)
    _, first = decode_after_prompt(module, x[:, :1], real[:, :1], prompt=1)
    assert isinstance(cache, StateCache) and cache.length == LENGTH and cache.nbytes == first.nbytes


def test_mamba1_keeps_a_state_per_channel_and_hgrn2_ties_its_keys_to_the_forget_gate() -> None:
    mamba = layer("mamba1", d_state=4, expand=1.5)
    x = torch.randn(2, 9, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    _, cache = decode_after_prompt(mamba, x, torch.ones(2, 9, dtype=torch.bool), prompt=9)
    assert cache.state.shape == (2, 12, 4, 1)  # (batch, channels, d_state, 1)
    hgrn = layer("hgrn2", lower_bound=0.5)
    recurrence = hgrn.prepare(*(torch.randn(2, HEADS, 9, 4, dtype=torch.float64) for _ in range(3)), x)
    forget = recurrence.log_decay.exp()
    assert forget.min() > 0.5 and forget.max() < 1
    torch.testing.assert_close(recurrence.k, 1 - forget, atol=1e-15, rtol=0)


def test_the_taylor_features_give_the_second_order_expansion_of_exp() -> None:
    q, k = torch.randn(2, 50, 16, dtype=torch.float64).unbind(0)
    s = (q * k).sum(-1) / 4
    torch.testing.assert_close((taylor_features(q) * taylor_features(k)).sum(-1), 1 + s + s.square() / 2)
    assert taylor_features(q).shape[-1] == 1 + 16 + 16 * 16


@pytest.mark.parametrize(
    ("family", "options"),
    [
        ("mamba1", {"d_state": 4}),
        ("hgrn2", {"lower_bound": 0.2, "conv_size": 4}),
        ("based", {"feature_dim": 4, "window": 3, "position": "rope"}),
    ],
)
def test_each_family_keeps_the_contract(family: str, options: dict) -> None:
    report = zoo.check_attention(family, **options)
    assert {"causal", "padding", "fully_masked", "gradients", "state_decoding", "state_size"} <= set(report.passed)


def test_what_the_families_cannot_take_is_refused_in_one_line() -> None:
    scheme = zoo.create_position("rope", d_model=EMBED, num_heads=HEADS)
    with pytest.raises(ValueError, match="lower_bound must be in"):
        zoo.create_attention("hgrn2", embed_dim=EMBED, num_heads=HEADS, lower_bound=1.0)
    with pytest.raises(ValueError, match="dt_rank must be a positive integer"):
        zoo.create_attention("mamba1", embed_dim=EMBED, num_heads=HEADS, dt_rank=0)
    with pytest.raises(ValueError, match="window must be a non-negative integer"):
        zoo.create_attention("based", embed_dim=EMBED, num_heads=HEADS, window=-1)
    for family in ("mamba1", "hgrn2"):
        with pytest.raises(zoo.IncompatibleAttentionError, match="cannot take the rotary scheme"):
            zoo.AttentionSpec(family, position=scheme)
    with pytest.raises(zoo.IncompatibleAttentionError):
        run_layer(layer("based", window=3), torch.randn(1, 4, EMBED, dtype=torch.float64), need_weights=True)


MODELS = [{"name": "mamba1", "d_state": 8}, {"name": "hgrn2"}, {"name": "based", "feature_dim": 4, "window": 4}]


@pytest.mark.parametrize("attention", MODELS, ids=lambda attention: attention["name"])
def test_the_recall_model_fits_a_fixed_batch(attention: dict) -> None:
    torch.manual_seed(0)
    model = RecallLM(16, block_size=32, d_model=16, num_heads=2, attention=attention)
    tokens = torch.randint(16, (8, 33), generator=torch.Generator().manual_seed(7))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(25):
        logits, _ = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0], losses  # a tenth in 25 steps (hgrn2, without a convolution, is the slowest)


@pytest.mark.parametrize("attention", MODELS, ids=lambda attention: attention["name"])
def test_a_gpt_decodes_from_its_cache_as_without_one(attention: dict) -> None:
    torch.manual_seed(0)
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=2, attention=attention).double().eval()
    prompt = torch.randint(8, (2, 5), generator=torch.Generator().manual_seed(5))
    cached = torch.stack(list(model.generate(prompt, 12, temperature=0)), 1)
    assert torch.equal(cached, torch.stack(list(model.generate(prompt, 12, temperature=0, use_cache=False)), 1))
