"""DeepSeek Sparse Attention (``dsa``) against DeepSeek-V3.2's equations written here from the
layer's parameters: the lightning indexer's scores, the top-k keys per query (ties to the earlier
key) and MLA's softmax over them, in float64; exactly ``mla`` when no query has more keys than
``index_topk``; decoding from its cache equal to one pass; the indexer's gradient is that of the
KL to the main attention, and nothing else's; the kit; a GPT learns with it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.gpt import learn_repeating_sequence
from tests.helpers.layers import decode_after_prompt, run_layer
from zoo.attention.contract.cache import ConvolvedCache
from zoo.attention.variants.dsa import IndexedLatentCache
from zoo.models import GPT

EMBED, HEADS, LENGTH, TOPK = 16, 4, 11, 3
SIZES = {"kv_lora_rank": 6, "q_lora_rank": 5, "qk_nope_head_dim": 3, "qk_rope_head_dim": 4, "v_head_dim": 5}
INDEX = {"index_heads": 3, "index_head_dim": 6}


def layer(name: str = "dsa", seed: int = 0, **kwargs) -> zoo.AttentionLayer:
    """A float64 layer, its parameters moved off their initial values (unit norm scales would hide
    mistakes); ``name="mla"`` builds the same latent attention without an indexer."""
    options = SIZES | (INDEX | {"index_topk": TOPK} if name == "dsa" else {}) | kwargs
    torch.manual_seed(seed)
    module = zoo.create_attention(name, embed_dim=EMBED, num_heads=HEADS, **options).double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def rope(x: Tensor) -> Tensor:
    """RoPE on pairs of halves, position ``t`` on axis -2, base 10000 (angles in float32, as the zoo's)."""
    half = x.shape[-1] // 2
    positions = torch.arange(x.shape[-2], dtype=torch.float32)[:, None]
    angles = positions * 10000.0 ** (-torch.arange(half, dtype=torch.float32) * 2 / x.shape[-1])
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], -1)


def rms(x: Tensor, norm: torch.nn.RMSNorm) -> Tensor:
    return x / (x.square().mean(-1, keepdim=True) + norm.eps).sqrt() * norm.weight


def index_scores(m, x: Tensor) -> Tensor:
    """The paper's equation 1: ``I[b, t, s] = sum_j w_tj ReLU(q_tj . k_s / sqrt(d))``, ``q`` from
    the normalized query latent (``x`` without one), ``k = LayerNorm(x W^IK)``, the leading
    ``qk_rope_head_dim`` features of both rotated."""
    ix, dr = m.indexer, m.qk_rope_head_dim
    source = x if m.q_lora_rank is None else rms(x @ m.q_down.weight.T, m.q_norm)
    q = (source @ ix.q_proj.weight.T).unflatten(-1, (ix.num_heads, ix.head_dim)).transpose(1, 2)  # (B, J, L, d)
    k = F.layer_norm(x @ ix.k_proj.weight.T, (ix.head_dim,), ix.k_norm.weight, ix.k_norm.bias, 1e-6)
    q = torch.cat([rope(q[..., :dr]), q[..., dr:]], -1)
    k = torch.cat([rope(k[..., :dr]), k[..., dr:]], -1)
    w = x @ ix.weights_proj.weight.T / ix.num_heads**0.5  # (B, L, J)
    relu = torch.einsum("bjtd,bsd->bjts", q, k).div(ix.head_dim**0.5).clamp_min(0)
    return torch.einsum("btj,bjts->bts", w, relu)


def reference(m, x: Tensor, *, causal: bool, keep: Tensor, topk: int) -> tuple[Tensor, Tensor]:
    """DSA per the paper: each query's ``topk`` visible keys of highest index score (a list sorted
    per query, the earlier key first among equals), then DeepSeek-V2's MLA (equations 9 to 19)
    with its softmax over them only; the output and the weights ``(B, H, L, L)``."""
    dn, dr, r = m.qk_nope_head_dim, m.qk_rope_head_dim, m.kv_lora_rank
    batch, length, _ = x.shape
    scores_i = index_scores(m, x)
    selected = torch.zeros(batch, length, length, dtype=torch.bool)
    for b in range(batch):
        for t in range(length):
            seen = [s for s in range(length) if keep[b, s] and (s <= t or not causal)]
            for s in sorted(seen, key=lambda s: (-scores_i[b, t, s].item(), s))[:topk]:
                selected[b, t, s] = True
    q = (rms(x @ m.q_down.weight.T, m.q_norm) @ m.q_up.weight.T).unflatten(-1, (HEADS, dn + dr)).transpose(1, 2)
    q = torch.cat([q[..., :dn], rope(q[..., dn:])], -1)  # (B, H, L, dn + dr)
    compressed = x @ m.kv_down.weight.T
    kv = (rms(compressed[..., :r], m.kv_norm) @ m.kv_up.weight.T).unflatten(-1, (HEADS, dn + m.v_head_dim))
    kv = kv.transpose(1, 2)  # (B, H, L, dn + dv)
    k = torch.cat([kv[..., :dn], rope(compressed[..., r:]).unsqueeze(1).expand(-1, HEADS, -1, -1)], -1)
    logits = q @ k.transpose(-1, -2) / (dn + dr) ** 0.5
    weights = logits.masked_fill(~selected[:, None], float("-inf")).softmax(-1).nan_to_num()
    output = (weights @ kv[..., dn:]).transpose(1, 2).flatten(-2) @ m.out_proj.weight.T
    return output, weights


def left_padded() -> Tensor:
    return torch.arange(LENGTH) >= torch.tensor([0, 4])[:, None]


def inputs(seed: int) -> Tensor:
    return torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("mode", ["naive", "absorbed"])
@pytest.mark.parametrize("causal", [True, False])
def test_the_top_k_keys_of_the_indexer_and_mla_over_them_match_the_papers_equations(mode: str, causal: bool) -> None:
    module, x, keep = layer(mode=mode), inputs(1), left_padded()
    with torch.no_grad():
        output, weights = run_layer(module, x, is_causal=causal, need_weights=True, attn_mask=keep[:, None, :])
    expected, expected_weights = reference(module, x, causal=causal, keep=keep, topk=TOPK)
    torch.testing.assert_close(output, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=0)
    # each real query attends to min(TOPK, keys it sees) keys: zeros elsewhere, for the heatmaps
    seen = keep.sum(1, keepdim=True) if not causal else (keep.cumsum(1))
    assert torch.equal((weights[:, 0] > 0).sum(-1)[keep], seen.expand(-1, LENGTH).clamp_max(TOPK)[keep])


def test_without_query_compression_the_index_queries_are_read_from_x() -> None:
    module, x, keep = layer(q_lora_rank=None), inputs(2), torch.ones(2, LENGTH, dtype=torch.bool)
    assert module.indexer.q_proj.in_features == EMBED
    with torch.no_grad():
        _, weights = run_layer(module, x, is_causal=True, need_weights=True)
    # the keys with weight are the top 3 of the indexer's scores, its queries read from x
    chosen = torch.zeros(2, LENGTH, LENGTH, dtype=torch.bool)
    scores = index_scores(module, x)
    for b in range(2):
        for t in range(LENGTH):
            for s in sorted(range(t + 1), key=lambda s: (-scores[b, t, s].item(), s))[:TOPK]:
                chosen[b, t, s] = True
    assert torch.equal(weights[:, 0] > 0, chosen & keep[:, None, :])


@pytest.mark.parametrize("topk", [LENGTH, 2048])
def test_with_no_more_keys_than_index_topk_it_is_mla_with_the_same_weights(topk: int) -> None:
    sparse = layer(index_topk=topk, conv_size=3)
    dense = layer("mla", conv_size=3)
    state = {key: value for key, value in sparse.state_dict().items() if not key.startswith("indexer.")}
    dense.load_state_dict(state)
    x, keep = inputs(3), left_padded()
    for grad in (False, True):  # with gradients, the indexer's loss rides along and changes nothing forwards
        with torch.set_grad_enabled(grad):
            ours = run_layer(sparse, x, is_causal=True, need_weights=True, attn_mask=keep[:, None, :])
            theirs = run_layer(dense, x, is_causal=True, need_weights=True, attn_mask=keep[:, None, :])
        assert torch.equal(ours.output, theirs.output) and torch.equal(ours.weights, theirs.weights)


@pytest.mark.parametrize(("mode", "conv_size"), [("auto", 0), ("naive", 0), ("absorbed", 3)])
def test_decoding_from_the_indexed_latent_cache_equals_one_causal_pass(mode: str, conv_size: int) -> None:
    """A left-padded prompt of 5, then one token at a time: each decoded token scores every cached
    index key and attends to its top 3."""
    module, x, keep = layer(mode=mode, conv_size=conv_size), inputs(4), left_padded()
    with torch.no_grad():
        expected = run_layer(module, x, is_causal=True, attn_mask=keep[:, None, :]).output
    decoded, cache = decode_after_prompt(module, x, keep, prompt=5)
    torch.testing.assert_close(decoded[keep], expected[keep], atol=1e-12, rtol=0)
    if not conv_size:  # the reference has no convolution
        torch.testing.assert_close(
            expected, reference(module, x, causal=True, keep=keep, topk=TOPK)[0], atol=1e-12, rtol=0
        )
    else:
        assert isinstance(cache, ConvolvedCache)
        cache = cache.inner
    assert isinstance(cache, IndexedLatentCache) and cache.length == LENGTH
    per_position = SIZES["kv_lora_rank"] + SIZES["qk_rope_head_dim"] + INDEX["index_head_dim"]
    assert cache.nbytes == 2 * LENGTH * per_position * 8 and module.cache_width == per_position
    picked = cache.select(torch.tensor([1]))
    assert torch.equal(picked.index_keys, cache.index_keys[1:]) and picked.nbytes * 2 == cache.nbytes


def indexer_kl(module, x: Tensor, topk: int) -> Tensor:
    """The paper's L^I, the mean over queries: KL from the main attention's weights summed over
    heads (normalized, a constant) to the softmax of the index scores, over each query's selection."""
    with torch.no_grad():
        _, weights = reference(module, x, causal=True, keep=torch.ones(x.shape[:2], dtype=torch.bool), topk=topk)
    p = weights.sum(1) / weights.sum(1).sum(-1, keepdim=True)
    log_q = index_scores(module, x).masked_fill(p == 0, float("-inf")).log_softmax(-1)
    return torch.where(p > 0, p * (p.log() - log_q), 0).sum(-1).mean()


@pytest.mark.parametrize("topk", [TOPK, 2048])
def test_the_indexer_learns_the_kl_to_the_main_attention_and_changes_no_other_gradient(topk: int) -> None:
    """Sparse (``topk`` 3) and dense (2048: the warm-up's loss over every key): a backward pass
    gives the indexer ``0.5 * dL^I`` and every other parameter what it gets without the indexer's loss."""
    module, x = layer(index_topk=topk, index_loss_weight=0.5), inputs(5)
    direction = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    run_layer(module, x, is_causal=True).output.mul(direction).sum().backward()
    got = {name: p.grad.clone() for name, p in module.named_parameters()}
    module.zero_grad()
    module.index_loss_weight = 0.0
    run_layer(module, x, is_causal=True).output.mul(direction).sum().backward()
    indexer = dict(module.indexer.named_parameters())
    expected = torch.autograd.grad(0.5 * indexer_kl(module, x, topk), list(indexer.values()))
    for (name, _), grad in zip(indexer.items(), expected, strict=True):
        torch.testing.assert_close(got[f"indexer.{name}"], grad, atol=1e-12, rtol=0)
        assert module.indexer.get_parameter(name).grad is None  # without the loss, no gradient reaches it
    for name, parameter in module.named_parameters():
        if not name.startswith("indexer."):
            torch.testing.assert_close(got[name], parameter.grad, atol=1e-12, rtol=0)


@pytest.mark.parametrize("mode", ["naive", "absorbed"])
def test_a_long_input_runs_a_chunk_of_queries_at_a_time_with_the_whole_inputs_loss_and_gradients(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the chunk size, four queries at a time over the keys up to the last of them (the first
    chunk selecting from no more than ``index_topk`` + 1 keys), under checkpointing: left-padded,
    with the indexer learning, the output and every gradient, the indexer's included, are the
    whole input's; without gradients the chunks run plainly."""
    import zoo.attention.variants.dsa as dsa

    module, x, keep = layer(mode=mode, index_loss_weight=0.5), inputs(7).requires_grad_(), left_padded()

    def run() -> tuple[Tensor, ...]:
        output = run_layer(module, x, is_causal=True, attn_mask=keep[:, None, :]).output
        return (output, *torch.autograd.grad(output.square().sum(), (x, *module.parameters())))

    whole = run()
    monkeypatch.setattr(dsa, "QUERY_CHUNK", 4)
    scored, scores = [], module.indexer.scores
    monkeypatch.setattr(module.indexer, "scores", lambda x, *args: scored.append(x.shape[1]) or scores(x, *args))
    chunked = run()
    assert scored == [4, 4, 3, 3, 4, 4], "three chunks, recomputed in the backward pass last first"
    for got, expected in zip(chunked, whole, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    with torch.no_grad():
        torch.testing.assert_close(run_layer(module, x, is_causal=True, attn_mask=keep[:, None, :]).output, whole[0])


def test_what_dsa_cannot_take_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="index_topk must be a positive integer, got 0"):
        layer(index_topk=0)
    with pytest.raises(ValueError, match=r"index_head_dim must be at least qk_rope_head_dim \(4\).*got 2"):
        layer(index_head_dim=2)
    with pytest.raises(ValueError, match="index_loss_weight must be 0 or more"):
        layer(index_loss_weight=-1.0)
    assert layer(index_head_dim=2, rope=False).indexer.rope_dim == 0  # nothing rotated: any width
    assert zoo.get_attention("deepseek_sparse_attention") is zoo.get_attention("dsa")


def test_dsa_passes_the_kit_with_a_selection_and_a_convolution() -> None:
    report = zoo.check_attention("dsa", embed_dim=EMBED, num_heads=HEADS, conv_size=3, **SIZES, **INDEX, index_topk=2)
    assert {"causal", "padding", "weights", "gradients"} <= set(report.passed)


def test_a_gpt_learns_a_repeating_sequence_and_decodes_from_its_caches() -> None:
    torch.manual_seed(0)
    model = GPT(8, block_size=32, d_model=16, num_heads=2, num_layers=2, attention={"name": "dsa", "index_topk": 4})
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    model = model.double().eval()
    prompt = torch.randint(8, (2, 6), generator=torch.Generator().manual_seed(7))
    cached = torch.stack(list(model.generate(prompt, 10, temperature=0)), 1)
    assert torch.equal(cached, torch.stack(list(model.generate(prompt, 10, temperature=0, use_cache=False)), 1))


def test_the_top_k_selection_breaks_ties_toward_the_earlier_key() -> None:
    """Scores of four values (most keys tied) against each row's visible keys sorted by (score
    descending, position): the first ``k`` are chosen; a row seeing fewer than ``k`` keeps them all."""
    from zoo.attention.modules.lightning_indexer import top_k_selection

    generator = torch.Generator().manual_seed(0)
    for k in (1, 3, 8, 30):
        scores = torch.randint(0, 4, (2, 6, 25), generator=generator).double()
        visible = torch.rand(2, 6, 25, generator=generator) > 0.4
        chosen = top_k_selection(scores, visible, k)[:, 0]
        for b in range(2):
            for t in range(6):
                seen = [s for s in range(25) if visible[b, t, s]]
                expected = sorted(seen, key=lambda s: (-scores[b, t, s].item(), s))[:k]
                got = [s for s in range(25) if chosen[b, t, s] and visible[b, t, s]]
                assert got == sorted(expected)
                if len(seen) >= k:
                    assert int(chosen[b, t].sum()) == k
