"""PaTH attention (``path_attention``) and DeltaFormer (``deltaformer``): their papers' equations
written out here in float64 (each product of Householder maps built as a matrix; each corrected
value from the ones before it), their forms equal to each other, decoding equal to the full
forward, their limits (every map the identity: ``forgetting`` or ``softmax``; no write:
``softmax``), the conformance kit, and a GPT and the recall model that learn with them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.gpt import learn_repeating_sequence
from tests.helpers.short_conv import convolved
from zoo.attention import AttentionContext
from zoo.attention.contract.cache import ConvolvedCache
from zoo.attention.kernels.corrected_values import corrected_values, corrected_values_recurrent
from zoo.attention.kernels.householder import path_chunks, path_keys_at_end, path_recurrent, path_scores
from zoo.attention.modules import row_blocks
from zoo.attention.variants import path_attention
from zoo.attention.variants.deltaformer import DeltaFormer
from zoo.attention.variants.path_attention import PathAttention, PathCache
from zoo.models import GPT, RecallLM

B, L, E, H = 2, 9, 16, 4
F64 = torch.float64


def inputs(length: int = L, seed: int = 1) -> Tensor:
    return torch.randn(B, length, E, generator=torch.Generator().manual_seed(seed), dtype=F64)


def heads(t: Tensor, count: int) -> Tensor:
    """``(B, T, count * d)`` -> ``(B, T, count, d)``."""
    return t.view(*t.shape[:2], count, -1)


def linear(module: torch.nn.Linear, x: Tensor) -> Tensor:
    return x @ module.weight.T + (0 if module.bias is None else module.bias)


# -- PaTH ---------------------------------------------------------------------------------------------


def built_path(**options) -> PathAttention:
    torch.manual_seed(0)
    layer = PathAttention(E, H, **options).double()
    with torch.no_grad():  # strengths over all of (0, 2), reflections included; gates spread out
        layer.beta_proj.weight.mul_(4.0)
        if layer.forget_proj is not None:
            layer.forget_proj.weight.mul_(3.0)
    return layer


@torch.no_grad()
def path_reference(layer: PathAttention, x: Tensor, real: Tensor) -> Tensor:
    """Yang et al.: ``softmax_j(q_i^T H_i ... H_{j+1} k_j / sqrt(d) + D_ij) v_j`` over the real
    ``j <= i``, each product built as a ``d x d`` matrix, ``H_s = I - beta_s w_s w_s^T`` with
    ``w_s = normalize(silu(conv(x_s W_1 W_2)))``, ``beta_s = 2 sigmoid(x_s w_b + c)`` (the
    identity at a padded ``s``), ``D_ij`` the forget gates' log-sum over real ``j < l <= i``."""
    kv_heads, d = layer.num_kv_heads, layer.head_dim
    q = heads(linear(layer.q_proj, x), H)
    k, v = heads(linear(layer.k_proj, x), kv_heads), heads(linear(layer.v_proj, x), kv_heads)
    low_rank, up = layer.w_proj
    w = F.normalize(heads(F.silu(convolved(x @ low_rank.weight.T @ up.weight.T, layer.w_conv, real)), kv_heads), dim=-1)
    beta = 2 * torch.sigmoid(linear(layer.beta_proj, x)) * real[..., None]
    forget = None if layer.forget_proj is None else torch.sigmoid(linear(layer.forget_proj, x))
    eye, groups = torch.eye(d, dtype=F64), H // kv_heads
    out = torch.zeros(B, L, H, d, dtype=F64)
    for b in range(B):
        for h in range(H):
            g = h // groups
            for i in range(L):
                seen = [j for j in range(i + 1) if real[b, j]]
                logits = []
                for j in seen:
                    product = eye
                    for s in range(j + 1, i + 1):
                        product = (eye - beta[b, s, g] * torch.outer(w[b, s, g], w[b, s, g])) @ product
                    decay = 0.0 if forget is None else sum(math.log(forget[b, m, h]) for m in seen if j < m <= i)
                    logits.append(float(q[b, i, h] @ product @ k[b, j, g]) / math.sqrt(d) + decay)
                if seen:
                    weights = torch.softmax(torch.tensor(logits, dtype=F64), 0)
                    out[b, i, h] = sum(p * v[b, j, g] for p, j in zip(weights, seen))
    return linear(layer.out_proj, out.reshape(B, L, -1))


@pytest.mark.parametrize(
    "options", [{}, {"forget_gate": True, "num_kv_heads": 2}, {"forget_gate": True, "w_conv_size": 4}]
)
def test_path_attention_computes_the_papers_equations_in_every_form(options) -> None:
    x = inputs()
    holes = torch.rand(B, L, generator=torch.Generator().manual_seed(2)) > 0.3
    holes[:, -1] = True
    for real, context in [
        (torch.ones(B, L, dtype=torch.bool), AttentionContext(is_causal=True)),
        (holes, AttentionContext.for_keys(holes, is_causal=True)),
    ]:
        layer = built_path(**options)
        expected = path_reference(layer, x, real)
        for chunk_size in (None, 4, 64):  # the naive form, blocks that do not divide L, one block
            layer.chunk_size = chunk_size
            output = layer(x, context).output
            torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-10)


def test_the_householder_kernels_three_forms_agree_and_continue_a_cache() -> None:
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 37, 8, generator=gen, dtype=F64)  # 4 query heads over 2 key heads
    k = torch.randn(2, 2, 37, 8, generator=gen, dtype=F64)
    w = F.normalize(torch.randn(2, 2, 37, 8, generator=gen, dtype=F64), dim=-1)
    beta = 2 * torch.rand(2, 2, 37, generator=gen, dtype=F64)
    repeated = [t.repeat_interleave(2, dim=1) for t in (k, w, beta)]
    naive = path_scores(q, *repeated)
    for chunk_size in (1, 5, 16, 64):
        torch.testing.assert_close(path_scores(q, *repeated, chunk_size=chunk_size), naive, rtol=1e-11, atol=1e-11)
    first, keys = path_recurrent(q[..., :20, :], k[..., :20, :], w[..., :20, :], beta[..., :20])
    rest, keys = path_recurrent(q[..., 20:, :], k[..., 20:, :], w[..., 20:, :], beta[..., 20:], keys)
    torch.testing.assert_close(torch.cat([F.pad(first, (0, 17)), rest], -2), naive, rtol=1e-11, atol=1e-11)
    assert keys.shape == (2, 2, 37, 8)
    for chunk_size in (1, 5, 64):  # the cache after the input, from the blockwise form's terms
        carried = path_keys_at_end(path_chunks(q, *repeated, chunk_size))[:, ::2]
        torch.testing.assert_close(carried, keys, rtol=1e-11, atol=1e-11)


def test_householder_scores_in_float32_hold_at_two_thousand_tokens() -> None:
    """Every map has eigenvalues in (-1, 1]: no product grows, the blockwise form stays exact."""
    gen = torch.Generator().manual_seed(4)
    q, k = (torch.randn(1, 1, 2048, 16, generator=gen, dtype=F64) for _ in range(2))
    w = F.normalize(torch.randn(1, 1, 2048, 16, generator=gen, dtype=F64), dim=-1)
    beta = 2 * torch.rand(1, 1, 2048, generator=gen, dtype=F64)
    exact = path_scores(q, k, w, beta, chunk_size=64)
    single = path_scores(*(t.float() for t in (q, k, w, beta)), chunk_size=64)
    assert single.dtype == torch.float32 and (single.double() - exact).abs().max() < 1e-5 * exact.abs().max()


@pytest.mark.parametrize(
    "options", [{"forget_gate": True, "num_kv_heads": 2, "gate": "headwise", "chunk_size": 2}, {"conv_size": 3}]
)
def test_path_decoding_token_by_token_equals_the_full_forward(options) -> None:
    """The prompt of five runs the blockwise form (three chunks of two in the first case) and
    leaves its keys carried to its end; each token after it runs the recurrent form."""
    layer = built_path(sinks=True, **options).eval()
    x = inputs(12)
    keep = torch.arange(12) >= torch.tensor([0, 3])[:, None]  # a left-padded row
    full = layer(x, AttentionContext.for_keys(keep, is_causal=True)).output
    outputs, cache = [], None
    for first, last in [(0, 5), *((t, t + 1) for t in range(5, 12))]:
        context = AttentionContext.for_keys(keep[:, :last], is_causal=True)
        output, cache = layer.attend_cached(x[:, first:last], cache, context)
        outputs.append(output)
    torch.testing.assert_close(torch.cat(outputs, 1), full, rtol=1e-10, atol=1e-10)
    held = cache.inner if isinstance(cache, ConvolvedCache) else cache
    assert isinstance(held, PathCache) and held.length == 12 and held.keys.shape == (B, layer.num_kv_heads, 12, 4)
    assert (held.log_forget is None) == ("forget_gate" not in options)
    picked = cache.select(torch.tensor([1]))
    picked = picked.inner if isinstance(picked, ConvolvedCache) else picked
    assert torch.equal(picked.keys, held.keys[[1]]) and torch.equal(picked.values, held.values[[1]])


@pytest.mark.parametrize(
    "options", [{"forget_gate": True, "num_kv_heads": 2, "sinks": True}, {"gate": "elementwise", "conv_size": 3}]
)
def test_a_long_input_runs_a_block_of_queries_at_a_time_with_the_whole_grids_output_and_gradients(
    options, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the grid size the scores run in blocks of whole chunks under checkpointing: padded,
    gated, with sinks or the short convolutions, the output and every gradient are the whole
    grid's; each block scores only the keys up to its last query."""
    layer = built_path(chunk_size=3, **options).train()
    x = inputs(17).requires_grad_()
    keep = torch.arange(17) >= torch.tensor([0, 4])[:, None]  # a left-padded row
    context = AttentionContext.for_keys(keep, is_causal=True)

    def run() -> tuple[Tensor, ...]:
        output = layer(x, context).output
        return (output, *torch.autograd.grad(output.square().sum(), (x, *layer.parameters())))

    whole = run()
    monkeypatch.setattr(row_blocks, "ROW_BLOCK_ELEMENTS", B * H * 17 * 17 - 1)
    monkeypatch.setattr(path_attention, "QUERY_CHUNK", 6)  # two chunks of 3 a block: 6, 6 and 5 queries
    rows = []
    score_rows = path_attention.path_score_rows

    def spy(chunks, first: int, last: int) -> Tensor:
        rows.append((first, last))
        return score_rows(chunks, first, last)

    monkeypatch.setattr(path_attention, "path_score_rows", spy)
    blocked = run()
    assert rows == [(0, 2), (2, 4), (4, 6), (4, 6), (2, 4), (0, 2)], "three blocks, recomputed last first"
    for got, expected in zip(blocked, whole, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("forget_gate", [False, True])
def test_with_every_map_the_identity_path_is_forgetting_or_softmax_attention(forget_gate: bool) -> None:
    """``beta = 2 sigmoid(-60)``: no map moves a key, and the decay enters unscaled, as FoX's."""
    layer = built_path(forget_gate=forget_gate)
    with torch.no_grad():
        layer.beta_proj.weight.zero_()
        layer.beta_proj.bias.fill_(-60.0)
    other = zoo.create_attention("forgetting" if forget_gate else "softmax", embed_dim=E, num_heads=H).double()
    shared = other.state_dict().keys()
    other.load_state_dict({k: v for k, v in layer.state_dict().items() if k in shared})  # strict: all of other's
    x = inputs()
    context = AttentionContext(is_causal=True)
    torch.testing.assert_close(layer(x, context).output, other(x, context).output, rtol=1e-12, atol=1e-12)


# -- DeltaFormer -------------------------------------------------------------------------------------


def built_deltaformer(**options) -> DeltaFormer:
    torch.manual_seed(0)
    layer = DeltaFormer(E, H, **options).double()
    with torch.no_grad():
        layer.beta_proj.weight.mul_(3.0)
    return layer


@torch.no_grad()
def deltaformer_reference(layer: DeltaFormer, x: Tensor, real: Tensor) -> Tensor:
    """Zhong et al.: ``u_i = v_i - beta_i sum_{j < i} softmax_j(k_i . k_j / sqrt(d)) u_j`` one
    position at a time, then ``o_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(d)) u_j``, over the
    real ``j``; ``beta_i = sigmoid(x_i w_b + c)``."""
    kv_heads, d = layer.num_kv_heads, layer.head_dim
    q = heads(linear(layer.q_proj, x), H)
    k, v = heads(linear(layer.k_proj, x), kv_heads), heads(linear(layer.v_proj, x), kv_heads)
    beta = torch.sigmoid(linear(layer.beta_proj, x))
    u = torch.zeros_like(v)
    out = torch.zeros(B, L, H, d, dtype=F64)
    for b in range(B):
        for g in range(kv_heads):
            for i in range(L):
                earlier = [j for j in range(i) if real[b, j]]
                u[b, i, g] = v[b, i, g]
                if earlier:
                    p = torch.softmax(torch.stack([k[b, i, g] @ k[b, j, g] for j in earlier]) / math.sqrt(d), 0)
                    u[b, i, g] -= beta[b, i, g] * sum(pj * u[b, j, g] for pj, j in zip(p, earlier))
        for h in range(H):
            g = h // (H // kv_heads)
            for i in range(L):
                seen = [j for j in range(i + 1) if real[b, j]]
                if seen:
                    p = torch.softmax(torch.stack([q[b, i, h] @ k[b, j, g] for j in seen]) / math.sqrt(d), 0)
                    out[b, i, h] = sum(pj * u[b, j, g] for pj, j in zip(p, seen))
    return linear(layer.out_proj, out.reshape(B, L, -1))


@pytest.mark.parametrize("options", [{}, {"num_kv_heads": 2}])
def test_deltaformer_computes_the_papers_equations_in_every_form(options) -> None:
    x = inputs()
    holes = torch.rand(B, L, generator=torch.Generator().manual_seed(5)) > 0.3
    holes[:, -1] = True
    layer = built_deltaformer(**options)
    for real, context in [
        (torch.ones(B, L, dtype=torch.bool), AttentionContext(is_causal=True)),
        (holes, AttentionContext.for_keys(holes, is_causal=True)),
    ]:
        expected = deltaformer_reference(layer, x, real)
        for chunk_size in (None, 4, 1):
            layer.chunk_size = chunk_size
            output = layer(x, context.replace(need_weights=chunk_size == 4)).output
            torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-10)


def test_the_corrected_values_three_forms_agree_and_continue() -> None:
    gen = torch.Generator().manual_seed(6)
    read, keys, values = (torch.randn(2, 3, 30, 8, generator=gen, dtype=F64) for _ in range(3))
    beta = torch.rand(2, 3, 30, generator=gen, dtype=F64)
    visible = torch.rand(2, 1, 1, 30, generator=gen) > 0.2
    options = {"scale": 0.35, "visible": visible}
    parallel = corrected_values(read, keys, values, beta, **options)
    torch.testing.assert_close(corrected_values(read, keys, values, beta, chunk_size=7, **options), parallel)
    torch.testing.assert_close(corrected_values_recurrent(read, keys, values, beta, **options), parallel)
    start = corrected_values(read[..., :11, :], keys[..., :11, :], values[..., :11, :], beta[..., :11], **options)
    rest = corrected_values_recurrent(
        read[..., 11:, :], keys, values[..., 11:, :], beta[..., 11:], earlier=start, **options
    )
    torch.testing.assert_close(torch.cat([start, rest], -2), parallel)


@pytest.mark.parametrize("conv_size", [0, 3])
def test_deltaformer_decoding_token_by_token_equals_the_full_forward(conv_size: int) -> None:
    rope = zoo.create_position("rope", d_model=E, num_heads=H)
    layer = built_deltaformer(qk_norm=True, num_kv_heads=2, position=rope, conv_size=conv_size).eval()
    x = inputs(12)
    keep = torch.arange(12) >= torch.tensor([0, 4])[:, None]
    full = layer(x, AttentionContext.for_keys(keep, is_causal=True)).output
    outputs, cache = [], None
    for first, last in [(0, 5), *((t, t + 1) for t in range(5, 12))]:
        output, cache = layer.attend_cached(
            x[:, first:last], cache, AttentionContext.for_keys(keep[:, :last], is_causal=True)
        )
        outputs.append(output)
    torch.testing.assert_close(torch.cat(outputs, 1), full, rtol=1e-10, atol=1e-10)
    assert cache.length == 12 and cache.select(torch.tensor([1])).length == 12


def test_without_a_write_deltaformer_is_softmax_attention() -> None:
    layer = built_deltaformer()
    with torch.no_grad():
        layer.beta_proj.weight.zero_()
        layer.beta_proj.bias.fill_(-60.0)  # beta = 9e-27: u = v
    softmax = zoo.create_attention("softmax", embed_dim=E, num_heads=H).double()
    softmax.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith("beta_proj")})
    x, context = inputs(), AttentionContext(is_causal=True)
    torch.testing.assert_close(layer(x, context).output, softmax(x, context).output, rtol=1e-12, atol=1e-12)


# -- both ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("path_attention", {"forget_gate": True, "num_kv_heads": 2, "sinks": True}),
        ("deltaformer", {"position": "rope", "conv_size": 3}),
    ],
)
def test_the_conformance_kit_passes(name: str, options: dict) -> None:
    report = zoo.check_attention(name, embed_dim=E, num_heads=H, **options)
    assert {"padding", "causal", "fully_masked", "weights", "gradients", "float16"} <= set(report.passed)
    assert "query_masks" in report.skipped


@pytest.mark.parametrize("name", ["path_attention", "deltaformer"])
def test_a_gpt_learns_a_repeating_sequence_and_decodes_from_its_cache(name: str) -> None:
    torch.manual_seed(0)
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=2, position="none", attention=name)
    losses = learn_repeating_sequence(model, steps=40)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    model = model.double().eval()
    prompt = torch.randint(8, (2, 5), generator=torch.Generator().manual_seed(5))
    cached = torch.stack(list(model.generate(prompt, 8, temperature=0)), 1)
    assert torch.equal(cached, torch.stack(list(model.generate(prompt, 8, temperature=0, use_cache=False)), 1))


@pytest.mark.parametrize("name", ["path_attention", "deltaformer"])
def test_the_recall_model_fits_a_fixed_batch(name: str) -> None:
    torch.manual_seed(0)
    model = RecallLM(16, block_size=32, d_model=32, attention=name)
    gen = torch.Generator().manual_seed(7)
    tokens = torch.randint(16, (8, 33), generator=gen)
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


def test_what_the_layers_cannot_take_is_refused_in_one_line() -> None:
    scheme = zoo.create_position("rope", d_model=E, num_heads=H)
    with pytest.raises(zoo.IncompatibleAttentionError, match="cannot take the rotary scheme"):
        zoo.AttentionSpec("path_attention", position=scheme)
    with pytest.raises(TypeError, match="window"):
        zoo.AttentionSpec("deltaformer", {"window": 8})
    with pytest.raises(ValueError, match="w_rank must be a positive integer"):
        PathAttention(E, H, w_rank=0)
    with pytest.raises(ValueError, match="forget_bias=5.0 needs forget_gate=True"):
        PathAttention(E, H, forget_bias=5.0)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        DeltaFormer(E, H, chunk_size=0)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        PathAttention(E, H, chunk_size=0)
    assert zoo.get_attention("path") is PathAttention and zoo.get_attention("delta_former") is DeltaFormer
