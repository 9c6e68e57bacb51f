"""Multi-head latent attention (``mla``) against DeepSeek-V2's equations written here from the layer's
parameters: both forms (naive and absorbed) equal them in float64 and each other in float32,
decoding from the latent cache equals one pass, the cache is at most a quarter of a multi-head
layer's, positions come from the stack's rotary scheme, the layer's own or none, and a GPT learns
and decodes with it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.gpt import learn_repeating_sequence
from tests.helpers.layers import run_layer
from tests.helpers.short_conv import convolved
from zoo.attention import AttentionContext
from zoo.attention.contract.cache import ConvolvedCache, KeyValueCache, LatentCache, StateCache
from zoo.models import GPT

EMBED, HEADS, LENGTH = 16, 4, 11
SIZES = {"kv_lora_rank": 6, "q_lora_rank": 5, "qk_nope_head_dim": 3, "qk_rope_head_dim": 4, "v_head_dim": 5}


def layer(seed: int = 0, dtype: torch.dtype = torch.float64, moved: bool = True, **kwargs) -> zoo.AttentionLayer:
    """An ``mla`` layer, its parameters ``moved`` off their initial values (unit norm scales would
    hide mistakes)."""
    torch.manual_seed(seed)
    module = zoo.create_attention("mla", embed_dim=EMBED, num_heads=HEADS, **(SIZES | kwargs)).to(dtype).eval()
    with torch.no_grad():
        for parameter in module.parameters() if moved else ():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def rope(x: Tensor, positions: Tensor) -> Tensor:
    """Rotate feature ``i`` with feature ``i + d/2`` by ``position * 10000^(-2i/d)`` (RoPE, halves
    paired), the angles in float32 as the zoo's ``rope`` forms them."""
    half = x.shape[-1] // 2
    angles = positions[:, None].float() * 10000.0 ** (-torch.arange(half, dtype=torch.float32) * 2 / x.shape[-1])
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], -1)


def rms_norm(x: Tensor, norm: torch.nn.RMSNorm) -> Tensor:
    return x / (x.square().mean(-1, keepdim=True) + norm.eps).sqrt() * norm.weight


def reference(m, x: Tensor, *, causal: bool, keep: Tensor | None = None, rotate: bool = True) -> Tensor:
    """DeepSeek-V2's equations 9 to 19: latents, their norms, up-projections per head, decoupled
    rotary parts (a shared key), softmax over scores divided by ``sqrt(dn + dr)``; ``keep``
    ``(B, L)`` marks real keys. With a convolution, it runs on ``x W^DQ`` (or ``x W^Q``) and
    ``x W^DKV``, padded positions entering it as zeros."""
    dn, dr, r = m.qk_nope_head_dim, m.qk_rope_head_dim, m.kv_lora_rank
    length = x.shape[1]
    positions = torch.arange(length)
    real = torch.ones(x.shape[:2], dtype=torch.bool) if keep is None else keep
    if m.q_lora_rank:
        c_q = rms_norm(convolved(x @ m.q_down.weight.T, m.q_conv, real), m.q_norm)
        q = c_q @ m.q_up.weight.T
    else:
        q = convolved(x @ m.q_proj.weight.T, m.q_conv, real)
    q = q.unflatten(-1, (HEADS, dn + dr))
    q_nope, q_rope = q[..., :dn], q[..., dn:]  # (B, L, H, d)
    compressed = convolved(x @ m.kv_down.weight.T, m.kv_conv, real)
    c_kv, k_rope = rms_norm(compressed[..., :r], m.kv_norm), compressed[..., r:]  # (B, L, r), (B, L, dr)
    if rotate:
        q_rope, k_rope = rope(q_rope.transpose(1, 2), positions).transpose(1, 2), rope(k_rope, positions)
    kv = (c_kv @ m.kv_up.weight.T).unflatten(-1, (HEADS, -1))  # (B, L, H, dn + dv)
    k_nope, v = kv[..., :dn], kv[..., dn:]
    scores = torch.einsum("bihd,bjhd->bhij", q_nope, k_nope) + torch.einsum("bihd,bjd->bhij", q_rope, k_rope)
    scores = scores / (dn + dr) ** 0.5
    visible = torch.ones(length, length, dtype=torch.bool)
    if causal:
        visible = visible.tril()
    if keep is not None:
        visible = visible & keep[:, None, None, :]
    weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1).nan_to_num()
    output = torch.einsum("bhij,bjhd->bihd", weights, v).flatten(-2)
    return output @ m.out_proj.weight.T


def left_padded() -> tuple[dict, Tensor]:
    keep = torch.arange(LENGTH) >= torch.tensor([0, 4])[:, None]
    return {"attn_mask": keep[:, None, :]}, keep


@pytest.mark.parametrize("conv_size", [0, 3])
@pytest.mark.parametrize("mode", ["naive", "absorbed"])
@pytest.mark.parametrize("causal", [True, False])
def test_both_forms_match_the_papers_equations_in_float64(mode: str, causal: bool, conv_size: int) -> None:
    module = layer(mode=mode, conv_size=conv_size)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask, keep = left_padded()
    with torch.no_grad():
        output, weights = run_layer(module, x, is_causal=causal, need_weights=True, **mask)
        expected = reference(module, x, causal=causal, keep=keep)
    torch.testing.assert_close(output, expected, atol=1e-12, rtol=0)
    assert weights.shape == (2, HEADS, LENGTH, LENGTH) and not weights[1, :, :, :4].any()
    torch.testing.assert_close(weights.sum(-1)[0], torch.ones(HEADS, LENGTH, dtype=torch.float64))


def test_the_absorbed_form_equals_the_naive_one_to_1e_5_in_float32() -> None:
    """At DeepSeek-like proportions (latent four times a head), without query compression, as initialized."""
    kwargs = {"kv_lora_rank": 64, "q_lora_rank": None, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}
    naive = layer(dtype=torch.float32, moved=False, mode="naive", **kwargs)
    absorbed = layer(dtype=torch.float32, moved=False, mode="absorbed", **kwargs)
    x = torch.randn(3, 40, EMBED, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = run_layer(naive, x, is_causal=True).output
        output = run_layer(absorbed, x, is_causal=True).output
    assert expected.abs().max() > 0.1, expected.abs().max()
    torch.testing.assert_close(output, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize(("mode", "conv_size"), [("auto", 0), ("naive", 0), ("absorbed", 0), ("auto", 3)])
def test_decoding_from_the_latent_cache_equals_one_causal_pass(mode: str, conv_size: int) -> None:
    """A left-padded prompt of 5, then one token at a time: the cache holds each position's latent
    and rotary key only (and with a convolution, its last inputs beside them)."""
    module = layer(mode=mode, conv_size=conv_size)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    _, keep = left_padded()
    expected = reference(module, x, causal=True, keep=keep)
    with torch.no_grad():
        output, cache = module.attend_cached(x[:, :5], None, AttentionContext.for_keys(keep[:, :5], is_causal=True))
        outputs = [output]
        for t in range(5, LENGTH):
            context = AttentionContext.for_keys(keep[:, : t + 1], is_causal=True, offset=t)
            output, cache = module.attend_cached(x[:, t : t + 1], cache, context)
            outputs.append(output)
    torch.testing.assert_close(torch.cat(outputs, dim=1)[keep], expected[keep], atol=1e-12, rtol=0)
    if conv_size:  # the windows of the query latent's and W^DKV's convolutions, beside the latents
        widths = [SIZES["q_lora_rank"], SIZES["kv_lora_rank"] + SIZES["qk_rope_head_dim"]]
        assert isinstance(cache, ConvolvedCache) and [w.shape for w in cache.windows] == [(2, 2, n) for n in widths]
        with pytest.raises(TypeError, match="continues a LatentCache in a ConvolvedCache"):
            module.attend_cached(x[:, :1], cache.inner)
        cache = cache.inner
    assert isinstance(cache, LatentCache) and cache.length == LENGTH
    assert cache.nbytes == 2 * LENGTH * (SIZES["kv_lora_rank"] + SIZES["qk_rope_head_dim"]) * 8
    picked = cache.select(torch.tensor([1]))
    assert torch.equal(picked.latent, cache.latent[1:]) and picked.nbytes * 2 == cache.nbytes


def test_the_cache_per_token_is_at_most_a_quarter_of_multi_heads_at_the_same_width() -> None:
    """At the Shakespeare CPU recipe's width (128, 4 heads) and at the recall suite's (64)."""
    for width in (128, 64):
        caches = {}
        for attention in ("mla", "dot_product"):
            model = GPT(11, block_size=32, d_model=width, num_heads=4, num_layers=2, attention=attention).eval()
            with torch.no_grad():
                _, caches[attention] = model(torch.randint(11, (1, 20)), use_cache=True)
        assert isinstance(caches["mla"][0], LatentCache) and isinstance(caches["dot_product"][0], KeyValueCache)
        ratio = sum(c.nbytes for c in caches["mla"]) / sum(c.nbytes for c in caches["dot_product"])
        assert ratio <= 0.25, (width, ratio)
        assert ratio == pytest.approx((width // 4 + width // 8) / (2 * width))  # kv_lora_rank + dr over 2 * width


def test_positions_come_from_the_stacks_rotary_scheme_the_layers_own_or_none() -> None:
    x = torch.randn(1, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    order = torch.randperm(LENGTH, generator=torch.Generator().manual_seed(5))
    scheme = zoo.create_position("rope", d_model=EMBED, num_heads=HEADS)
    for kwargs, rotates in (({}, True), ({"position": scheme}, True), ({"rope": False}, False)):
        module = layer(**kwargs)
        with torch.no_grad():
            output = run_layer(module, x).output
            shuffled = run_layer(module, x[:, order]).output
        torch.testing.assert_close(output, reference(module, x, causal=False, rotate=rotates), atol=1e-12, rtol=0)
        # without positions, attention both ways commutes with a permutation of the tokens
        assert torch.allclose(shuffled, output[:, order], atol=1e-12) is not rotates
    assert layer(position=scheme).rotary.head_dim == SIZES["qk_rope_head_dim"]


def test_what_mla_cannot_take_is_refused_in_one_line() -> None:
    alibi = zoo.create_position("alibi", d_model=EMBED, num_heads=HEADS)
    rope_scheme = zoo.create_position("rope", d_model=EMBED, num_heads=HEADS)
    with pytest.raises(zoo.IncompatibleAttentionError, match="cannot take the bias scheme"):
        zoo.AttentionSpec("mla", position=alibi)
    with pytest.raises(zoo.IncompatibleAttentionError, match="and none with rope=False"):
        layer(position=rope_scheme, rope=False)
    with pytest.raises(ValueError, match="qk_rope_head_dim must be even"):
        layer(qk_rope_head_dim=3)
    with pytest.raises(ValueError, match="mode must be one of auto, naive, absorbed"):
        layer(mode="fast")
    with pytest.raises(ValueError, match="kv_lora_rank must be a positive integer, got 0"):
        layer(kv_lora_rank=0)
    with pytest.raises(ValueError, match="q_lora_rank must be a positive integer, got -2"):
        layer(q_lora_rank=-2)
    with pytest.raises(ValueError, match="qk_rope_head_dim must be 0 or more, got -2"):
        layer(qk_rope_head_dim=-2)


def test_a_gpt_learns_a_repeating_sequence_and_a_kimi_linear_stack_decodes_from_its_caches() -> None:
    torch.manual_seed(0)
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=2, attention="mla")
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    # Kimi Linear's pattern: three Kimi Delta Attention layers to one MLA without positions
    torch.manual_seed(0)
    hybrid = GPT(23, block_size=24, d_model=16, num_heads=2, num_layers=4, position="none",
                 attention=["kda", "kda", "kda", {"name": "mla", "rope": False}]).double().eval()  # fmt: skip
    prompt = torch.randint(23, (2, 6), generator=torch.Generator().manual_seed(6))
    cached = torch.stack(list(hybrid.generate(prompt, 10, temperature=0)), 1)
    assert torch.equal(cached, torch.stack(list(hybrid.generate(prompt, 10, temperature=0, use_cache=False)), 1))
    with torch.no_grad():
        _, caches = hybrid(prompt, use_cache=True)
    assert [type(c) for c in caches] == [StateCache] * 3 + [LatentCache]


@pytest.mark.parametrize("mode", ["naive", "absorbed"])
def test_a_prompt_reaches_the_fused_kernel_with_one_width_and_no_mask(mode: str, monkeypatch) -> None:
    """PyTorch's flash kernels take queries, keys and values of one width, else the math kernel
    holds every score: MLA's values reach the kernel padded to its keys' width
    (:func:`~zoo.attention.kernels.sdpa.masked_sdpa`), and an unpadded causal prompt keeps
    causality in the kernel (no ``(Lq, Lk)`` mask formed)."""
    kernel = F.scaled_dot_product_attention
    calls = []

    def recording(queries: Tensor, keys: Tensor, values: Tensor, attn_mask: Tensor | None = None, **options) -> Tensor:
        calls.append((queries.shape[-1], keys.shape[-1], values.shape[-1], attn_mask, options["is_causal"]))
        return kernel(queries, keys, values, attn_mask=attn_mask, **options)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    module = layer(mode=mode)
    with torch.no_grad():
        run_layer(module, torch.randn(2, LENGTH, EMBED, dtype=torch.float64), is_causal=True)
    ((width_q, width_k, width_v, mask, is_causal),) = calls
    assert width_q == width_k == width_v and mask is None and is_causal


def test_with_a_short_convolution_mla_passes_the_kit() -> None:
    report = zoo.check_attention("mla", embed_dim=EMBED, num_heads=HEADS, conv_size=4, **SIZES)
    assert {"causal", "padding", "gradients"} <= set(report.passed) and "query_masks" in report.skipped
    assert "conv_size=4" in repr(layer(conv_size=4))


def test_without_query_compression_the_convolution_runs_on_the_queries() -> None:
    module = layer(conv_size=3, q_lora_rank=None)
    assert module.q_conv.in_channels == HEADS * (SIZES["qk_nope_head_dim"] + SIZES["qk_rope_head_dim"])
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    mask, keep = left_padded()
    with torch.no_grad():
        output = run_layer(module, x, is_causal=True, **mask).output
    torch.testing.assert_close(output, reference(module, x, causal=True, keep=keep), atol=1e-12, rtol=0)
