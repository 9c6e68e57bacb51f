"""The recurrent families (retention, gla, deltanet, gated_deltanet, mamba2) as layers against
per-token float64 loops of each paper's layer, written here from the layer's parameters (not with
its kernels): the projections, the short causal convolution (a sum over each channel's window),
the recurrence and the output gate and norm; every form, chunk sizes that do not divide the
length, right and left padding, gradients, decoding from the state and the convolution's window
in a GPT (hybrid stacks included), refusals, and 16k tokens in float32."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.layers import assert_chunkwise_gradients_equal, decode_after_prompt, run_layer
from tests.helpers.short_conv import convolved
from zoo.attention import AttentionContext
from zoo.attention.build.spec import layer_specs
from zoo.attention.contract.cache import StateCache, WindowCache
from zoo.attention.modules.recurrent import RecurrentLayer
from zoo.models import GPT

FAMILIES = ["retention", "gla", "deltanet", "gated_deltanet", "mamba2"]
EMBED, HEADS, LENGTH = 8, 2, 71  # 71 is a multiple of no chunk size below but 1
CHUNK_SIZES = (1, 7, 16, 64)
EPS = 1e-5  # the output norms'
#: every family with a convolution, retention too (off by default, as RetNet's); Mamba-2 with B
#: and C shared by both heads, at a state size of its own
OPTIONS = {"retention": {"conv_size": 4}, "mamba2": {"d_state": 6, "ngroups": 1}}


def layer(family: str, seed: int = 0, **kwargs) -> RecurrentLayer:
    """A float64 layer of ``family`` whose own parameters are moved off their initial values
    (norm scales of 1, ``D`` of 1 would hide mistakes)."""
    torch.manual_seed(seed)
    module = zoo.create_attention(family, embed_dim=EMBED, num_heads=HEADS, **(OPTIONS.get(family, {}) | kwargs))
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


# -- the papers' layers, token by token, in their orientation: a (dv, dk) state, o_t = S_t q_t ------


def heads(x: Tensor, count: int = HEADS) -> Tensor:
    """``(B, T, count * w)`` -> ``(B, count, T, w)``."""
    return x.unflatten(-1, (count, -1)).transpose(1, 2)


def rms_norm(x: Tensor, weight: Tensor) -> Tensor:
    return x / (x.square().mean(-1, keepdim=True) + EPS).sqrt() * weight


def reference(module: RecurrentLayer, x: Tensor, real: Tensor) -> Tensor:
    """The layer's output: its projections and convolutions, the family's recurrence per token (a
    padded token, where ``real`` ``(B, T)`` is False, leaves the state alone and reads zero), its
    norm and gates."""
    family = zoo.ATTENTION_REGISTRY.name_of(type(module))
    projected = [F.linear(x, p.weight, p.bias) for p in (module.q_proj, module.k_proj, module.v_proj)]
    q, k, v = (convolved(t, c, real) for t, c in zip(projected, (module.q_conv, module.k_conv, module.v_conv)))
    if module.q_conv is not None or family in ("deltanet", "gated_deltanet", "mamba2"):
        q, k, v = F.silu(q), F.silu(k), F.silu(v)
    groups = module.qk_heads
    q, k = (heads(t, groups).repeat_interleave(HEADS // groups, dim=1) for t in (q, k))
    v = heads(v)
    dk, dv = q.shape[-1], v.shape[-1]
    batch, length = x.shape[:2]
    eye = torch.eye(dk, dtype=x.dtype)
    state = x.new_zeros(batch, HEADS, dv, dk)
    outputs = torch.zeros_like(v)
    if family in ("deltanet", "gated_deltanet"):
        q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
        beta = torch.sigmoid(heads(x @ module.beta.weight.T))  # (B, H, T, 1)
    if family in ("gated_deltanet", "mamba2"):
        decay = module.decay
        dt = heads(F.softplus(x @ decay.proj.weight.T + decay.dt_bias))  # (B, H, T, 1)
        a = torch.exp(-dt * decay.A_log.exp()[:, None, None])
    if family == "gla":
        first, second = module.decay_gate
        alpha = torch.sigmoid(heads(x @ first.weight.T @ second.weight.T + second.bias)) ** (1 / 16)  # (B, H, T, dk)
    for t in range(length):
        q_t, k_t, v_t = q[:, :, t], k[:, :, t], v[:, :, t]
        write = v_t.unsqueeze(-1) * k_t.unsqueeze(-2)  # v_t k_t^T
        if family == "retention":
            gamma = 1 - 2.0 ** (-5 - torch.arange(HEADS, dtype=x.dtype))
            updated = gamma[:, None, None] * state + write
            read = updated @ q_t.unsqueeze(-1) / math.sqrt(dk)
        elif family == "gla":
            updated = state * alpha[:, :, t].unsqueeze(-2) + write  # Diag(alpha_t) on the key side
            read = updated @ q_t.unsqueeze(-1) / math.sqrt(dk)
        elif family in ("deltanet", "gated_deltanet"):
            b = beta[:, :, t].unsqueeze(-1)
            kept = a[:, :, t].unsqueeze(-1) * state if family == "gated_deltanet" else state
            updated = kept @ (eye - b * k_t.unsqueeze(-1) * k_t.unsqueeze(-2)) + b * write
            read = updated @ q_t.unsqueeze(-1) / math.sqrt(dk)
        else:  # mamba2: h_t = a_t h_{t-1} + B_t (dt_t x_t)^T, y_t = C_t h_t + D x_t (h kept as its transpose)
            updated = a[:, :, t].unsqueeze(-1) * state + dt[:, :, t].unsqueeze(-1) * write
            read = updated @ q_t.unsqueeze(-1) + module.D[:, None, None] * v_t.unsqueeze(-1)
        keep = real[:, t, None, None, None]
        state = torch.where(keep, updated, state)
        outputs[:, :, t] = torch.where(keep[..., 0], read.squeeze(-1), 0.0)
    if family in ("retention", "gla", "gated_deltanet"):
        outputs = rms_norm(outputs, module.norm.weight) * F.silu(heads(x @ module.gate.weight.T))
    elif family == "deltanet":
        outputs = rms_norm(outputs, module.norm.weight)
    else:  # the gated RMSNorm over each group of heads that shares B and C: here all of them
        gated = (outputs * F.silu(heads(x @ module.gate.weight.T))).transpose(1, 2).flatten(-2)
        return module.out_proj(rms_norm(gated, module.norm_weight))
    return module.out_proj(outputs.transpose(1, 2).flatten(-2))


# -- the forms against the references --------------------------------------------------------------


def padded(kind: str | None) -> tuple[dict, Tensor]:
    """The layer's mask arguments and the real tokens ``(B, T)``: right padding as lengths, left
    padding (the first 13 tokens of the second row) as attn_mask key columns."""
    steps = torch.arange(LENGTH)
    if kind == "right":
        lengths = torch.tensor([LENGTH, LENGTH - 20])
        return {"valid_lens": lengths}, steps < lengths[:, None]
    if kind == "left":
        real = steps >= torch.tensor([0, 13])[:, None]
        return {"attn_mask": real[:, None, :]}, real
    return {}, torch.ones(2, LENGTH, dtype=torch.bool)


FORMS = [("parallel", None), ("recurrent", None), ("auto", None), *(("chunkwise", size) for size in CHUNK_SIZES)]


@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_form_matches_the_papers_recurrence(family: str, padding: str | None) -> None:
    module = layer(family)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask, real = padded(padding)
    expected = reference(module, x, real)
    for mode, chunk_size in FORMS:
        module.mode, module.chunk_size = mode, chunk_size or 64
        with torch.no_grad():
            output = run_layer(module, x, is_causal=True, **mask).output
        form = f"{mode} {chunk_size or ''}"
        torch.testing.assert_close(
            output, expected, atol=1e-10, rtol=0, msg=lambda message, form=form: f"{form}: {message}"
        )


@pytest.mark.parametrize("family", FAMILIES)
def test_the_chunk_size_is_the_devices_unless_given(family: str) -> None:
    """16 steps on the CPU (64 for Mamba-2) and 64 elsewhere by default, and ``auto`` cuts at it:
    past the CPU's chunk the CPU runs chunkwise, equal to the parallel form."""
    module = layer(family)
    assert module.chunk_size is None
    cpu = 64 if family == "mamba2" else 16
    assert (module.chunk_length(torch.device("cpu")), module.chunk_length(torch.device("cuda"))) == (cpu, 64)
    assert layer(family, chunk_size=32).chunk_length(torch.device("cuda")) == 32
    assert module._form(cpu + 1, torch.device("cpu")) == "chunkwise"
    assert module._form(cpu, torch.device("cpu")) == module._form(40, torch.device("cuda")) == "parallel"
    x = torch.randn(2, max(LENGTH, cpu + 8), EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        chunked = run_layer(module, x, is_causal=True).output
        module.mode = "parallel"
        torch.testing.assert_close(chunked, run_layer(module, x, is_causal=True).output, atol=1e-10, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_decoding_from_a_chunkwise_prompt_matches_the_papers_recurrence(family: str) -> None:
    """A left-padded prompt of 40 tokens in chunks of 16, then one token at a time from the state."""
    module = layer(family, chunk_size=16)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    _, real = padded("left")
    expected = reference(module, x, real)
    decoded, cache = decode_after_prompt(module, x, real, prompt=40)
    torch.testing.assert_close(decoded, expected, atol=1e-10, rtol=0)
    assert isinstance(cache, StateCache) and cache.length == LENGTH
    assert cache.state.shape == (2, HEADS, module.key_head_dim, module.head_dim)
    assert [w.shape[1] for w in cache.extra] == [3, 3, 3]  # each convolution's last 3 inputs


@pytest.mark.parametrize("family", FAMILIES)
def test_chunkwise_gradients_equal_the_parallel_forms(family: str) -> None:
    x = torch.randn(2, 40, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    weights = torch.randn(2, 40, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    assert_chunkwise_gradients_equal(
        lambda mode: layer(family, mode=mode, chunk_size=7), x, weights, torch.tensor([40, 29])
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_weights_are_the_parallel_forms_and_zero_where_hidden(family: str) -> None:
    module = layer(family)
    x = torch.randn(2, 12, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        output, weights = run_layer(module, x, valid_lens=torch.tensor([12, 7]), is_causal=True, need_weights=True)
        plain = run_layer(module, x, valid_lens=torch.tensor([12, 7]), is_causal=True).output
    assert weights.shape == (2, HEADS, 12, 12)
    assert torch.equal(weights.triu(1), torch.zeros_like(weights)) and not weights[1, :, :, 7:].any()
    torch.testing.assert_close(output, plain, atol=1e-12, rtol=0)


# -- models and decoding ---------------------------------------------------------------------------


def gpt(attention, **kwargs) -> GPT:
    torch.manual_seed(0)
    options = {"d_model": 16, "num_heads": 2, "num_layers": 2, "block_size": 24} | kwargs
    return GPT(23, attention=attention, **options).double().eval()


def greedy(model: GPT, prompt: Tensor, steps: int, use_cache: bool) -> Tensor:
    return torch.stack(list(model.generate(prompt, steps, temperature=0, use_cache=use_cache)), dim=1)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_gpt_decodes_from_a_chunkwise_prompt_with_a_fixed_size_state(family: str) -> None:
    model = gpt(family, attention_kwargs={"chunk_size": 3})
    prompt = torch.randint(23, (2, 8), generator=torch.Generator().manual_seed(6))
    assert torch.equal(greedy(model, prompt, 12, True), greedy(model, prompt, 12, False))
    with torch.no_grad():
        _, short = model(prompt[:, :2], use_cache=True)
        _, long = model(prompt, use_cache=True)
    assert all(isinstance(c, StateCache) for c in long)
    assert [c.nbytes for c in short] == [c.nbytes for c in long] and long[0].length == 8


def test_a_hybrid_stack_decodes_each_layer_with_its_own_kind_of_cache() -> None:
    model = gpt([{"name": "local", "window": 4}, "gla"], num_layers=4)
    prompt = torch.randint(23, (2, 5), generator=torch.Generator().manual_seed(7))
    assert torch.equal(greedy(model, prompt, 15, True), greedy(model, prompt, 15, False))
    with torch.no_grad():
        _, caches = model(prompt, use_cache=True)
    assert [type(c) for c in caches] == [WindowCache, StateCache] * 2  # the window's keys, the recurrence's state


# -- refusals, one line each -----------------------------------------------------------------------


def refusal(call) -> str:
    with pytest.raises(zoo.IncompatibleAttentionError) as error:
        call()
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("family", FAMILIES)
def test_what_a_causal_recurrence_cannot_do_is_refused_in_one_line(family: str) -> None:
    module = layer(family)
    x = torch.randn(2, 6, EMBED, dtype=torch.float64)
    assert "is a causal recurrence" in refusal(lambda: module(x))
    per_query = torch.tensor([[6] * 6, [3] * 6])
    assert "key padding masks only" in refusal(lambda: run_layer(module, x, valid_lens=per_query, is_causal=True))
    assert "attending in both directions" in refusal(lambda: layer_specs(family, None, 2, role="an encoder"))
    assert "cannot be used by cross-attention" in refusal(lambda: zoo.CrossAttention(EMBED, HEADS, family))
    assert "it is an attention layer (it owns projections)" in refusal(lambda: zoo.SelfAttention(EMBED, HEADS, family))
    assert "takes a rotary scheme or none" in refusal(
        lambda: zoo.create_attention(
            family,
            embed_dim=EMBED,
            num_heads=HEADS,
            position=zoo.create_position("alibi", d_model=EMBED, num_heads=HEADS),
        )
    )


@pytest.mark.parametrize("rotary", [False, True], ids=["no_positions", "rotary"])
@pytest.mark.parametrize(("family", "conv_size"), [("gla", 4), ("gla", 0), ("deltanet", 4), ("deltanet", 0)])
def test_silu_acts_after_the_convolution_and_after_a_rotation(family: str, conv_size: int, rotary: bool) -> None:
    """What ``prepare`` receives: convolved, rotated, then SiLU where the family has it (GLA only
    after a convolution, DeltaNet always), whether the layer fuses SiLU into the convolution (no
    rotation, and always for values) or applies it after rotating queries and keys."""
    position = zoo.create_position("rope", d_model=EMBED, num_heads=HEADS) if rotary else None
    module = layer(family, conv_size=conv_size, position=position)
    seen: dict[str, Tensor] = {}
    prepare = module.prepare

    def recording(queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor):
        seen.update(q=queries, k=keys, v=values)
        return prepare(queries, keys, values, layer_input)

    module.prepare = recording  # type: ignore[method-assign]
    x = torch.randn(2, 9, EMBED, dtype=torch.float64)
    run_layer(module, x, is_causal=True)
    real = torch.ones(2, 9, dtype=torch.bool)
    projected = [F.linear(x, p.weight, p.bias) for p in (module.q_proj, module.k_proj, module.v_proj)]
    q, k, v = (convolved(t, c, real) for t, c in zip(projected, (module.q_conv, module.k_conv, module.v_conv)))
    q, k, v = heads(q, module.qk_heads), heads(k, module.qk_heads), heads(v)
    if rotary:
        positions = torch.arange(9)
        q, k = module.rotary(q, positions), module.rotary(k, positions)
    if conv_size or family == "deltanet":
        q, k, v = F.silu(q), F.silu(k), F.silu(v)
    for name, expected in zip("qkv", (q, k, v)):
        torch.testing.assert_close(seen[name], expected, msg=name)


def test_a_bad_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode must be one of auto, parallel, chunkwise, recurrent; got 'fast'"):
        zoo.create_attention("gla", embed_dim=EMBED, num_heads=HEADS, mode="fast")


# -- long inputs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_16k_tokens_in_float32_stay_finite_under_strong_decays(family: str) -> None:
    """Decays summed over 16k tokens reach exp(-10^5): they must underflow to zero weights, never
    to NaN or inf, forwards and backwards."""
    torch.manual_seed(0)
    module = zoo.create_attention(family, embed_dim=16, num_heads=2)
    attention = module
    with torch.no_grad():
        if family == "gla":
            attention.decay_gate[1].bias.fill_(-40.0)  # log decays of -2.5 per step and key dimension
        elif family in ("gated_deltanet", "mamba2"):
            attention.decay.A_log.fill_(math.log(16.0))
            attention.decay.dt_bias.fill_(5.0)  # log decays of about -80 per step
    x = torch.randn(1, 16384, 16, requires_grad=True)
    output = module(x, AttentionContext(is_causal=True)).output
    output.square().mean().backward()
    assert torch.isfinite(output).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters() if p.grad is not None)
