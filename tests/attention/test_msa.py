"""MiniMax Sparse Attention (``msa``) against its equations written here per query from the layer's
parameters, in float64: the index scores, their maximum over each block, the local blocks, the
top blocks per key-value head and the softmax over their keys, with and without left padding;
decoding from its cache equal to one pass; the indexer's gradient that of its KL loss and nothing
else's; a long prompt scored a chunk of queries at a time; refusals; the kit; a GPT learns with it and decodes from its caches."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import zoo
from tests.helpers.gpt import assert_cached_generation_matches, learn_repeating_sequence
from tests.helpers.layers import decode_after_prompt
from zoo import AttentionContext
from zoo.attention.variants.msa import IndexedKeyValueCache
from zoo.models import GPT
from zoo.positions.rotary import RotaryEmbedding

EMBED, HEADS, GROUPS, HEAD, LENGTH, ROTATED = 24, 4, 2, 8, 23, 4
BLOCK, TOPK, LOCAL = 4, 3, 2
OPTIONS = {
    "num_kv_heads": GROUPS, "head_dim": HEAD, "block_size": BLOCK, "topk_blocks": TOPK, "local_blocks": LOCAL,
    "index_head_dim": 6,
}  # fmt: skip


def layer(seed: int = 0, **kwargs) -> zoo.AttentionLayer:
    """A float64 layer rotating half of each head, its parameters moved off their initial values."""
    torch.manual_seed(seed)
    position = RotaryEmbedding(HEAD, fraction=ROTATED / HEAD)
    module = zoo.create_attention("msa", embed_dim=EMBED, num_heads=HEADS, position=position, **OPTIONS | kwargs)
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def rope(x: Tensor) -> Tensor:
    """RoPE on the first ``ROTATED`` features in pairs of halves, position ``t`` on axis -2, base 10000."""
    half = ROTATED // 2
    positions = torch.arange(x.shape[-2], dtype=torch.float32)[:, None]
    angles = positions * 10000.0 ** (-torch.arange(half, dtype=torch.float32) * 2 / ROTATED)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second, rest = x[..., :half], x[..., half:ROTATED], x[..., ROTATED:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos, rest], -1)


def rms(x: Tensor, norm: torch.nn.RMSNorm) -> Tensor:
    return x / (x.square().mean(-1, keepdim=True) + norm.eps).sqrt() * norm.weight


def heads(x: Tensor, projection: torch.nn.Linear, width: int) -> Tensor:
    return projection(x).unflatten(-1, (-1, width)).transpose(1, 2)


def reference(m, x: Tensor, keep: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """MSA per query: the output, the weights ``(B, H, L, L)`` and the indexer's loss (a function of
    its parameters: the mean over queries and groups of the KL of its softmax over the selected keys
    from the group's weights)."""
    q, k = rope(rms(heads(x, m.q_proj, HEAD), m.q_norm)), rope(rms(heads(x, m.k_proj, HEAD), m.k_norm))
    v, ix = heads(x, m.v_proj, HEAD), m.indexer
    index_q = rope(rms(heads(x, ix.q_proj, ix.head_dim), ix.q_norm))  # (B, G, L, d_I)
    index_k = rope(rms(ix.k_proj(x), ix.k_norm))  # (B, L, d_I)
    batch, per_group = x.shape[0], HEADS // GROUPS
    weights = torch.zeros(batch, HEADS, LENGTH, LENGTH, dtype=x.dtype)
    divergences = []
    for b in range(batch):
        for g in range(GROUPS):
            for t in range(LENGTH):
                seen = [s for s in range(t + 1) if keep[b, s]]
                scores = {s: (index_q[b, g, t] @ index_k[b, s]) for s in seen}
                best = {s // BLOCK: max(scores[u].item() for u in seen if u // BLOCK == s // BLOCK) for s in seen}
                local = [j for j in range(t // BLOCK - LOCAL + 1, t // BLOCK + 1) if j >= 0]
                ranked = sorted((j for j in best if j not in local), key=lambda j: -best[j])
                chosen = set(local) | set(ranked[: TOPK - len(local)])
                read = [s for s in seen if s // BLOCK in chosen]
                if not read:
                    continue
                for h in range(g * per_group, (g + 1) * per_group):
                    logits = torch.stack([q[b, h, t] @ k[b, g, s] for s in read]) / HEAD**0.5
                    weights[b, h, t, read] = logits.softmax(0)
                target = weights[b, g * per_group : (g + 1) * per_group, t, read].detach().sum(0)
                target = target / target.sum()
                log_index = torch.stack([scores[s] for s in read]).log_softmax(0)
                divergences.append((target * (target.log() - log_index)).sum())
    output = m.out_proj((weights @ v.repeat_interleave(per_group, 1)).transpose(1, 2).flatten(-2))
    return output, weights, torch.stack(divergences).mean()


def inputs(seed: int = 1) -> Tensor:
    return torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def real_keys(padded: bool) -> Tensor:
    """Every key real, or the second row's first five padding (left padding)."""
    return torch.arange(LENGTH) >= torch.tensor([0, 5 if padded else 0])[:, None]


@pytest.mark.parametrize("padded", [False, True])
def test_the_selected_blocks_and_the_softmax_over_them_match_the_equations(padded: bool) -> None:
    m, x, keep = layer(), inputs(), real_keys(padded)
    with torch.no_grad():
        output, weights = m(x, AttentionContext.for_keys(keep, is_causal=True, need_weights=True))
        expected, expected_weights, _ = reference(m, x, keep)
    torch.testing.assert_close(weights, expected_weights, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-12)
    # the selection acts: the last query reads 3 blocks of 4 of its 6
    assert torch.equal((weights[0, :, -1] > 0).sum(-1), torch.full((HEADS,), TOPK * BLOCK - 1))


def test_decoding_from_its_cache_equals_one_pass() -> None:
    m, x, keep = layer(), inputs(2), real_keys(True)
    with torch.no_grad():
        expected = m(x, AttentionContext.for_keys(keep, is_causal=True)).output
    outputs, cache = decode_after_prompt(m, x, keep, prompt=9)
    torch.testing.assert_close(outputs, expected, rtol=1e-10, atol=1e-12)
    assert isinstance(cache, IndexedKeyValueCache) and cache.length == LENGTH
    assert cache.index_keys.shape == (2, LENGTH, 6) and cache.select(torch.tensor([1])).keys.shape[0] == 1


@pytest.mark.parametrize("padded", [False, True])
def test_a_long_prompt_is_scored_a_chunk_of_queries_at_a_time(monkeypatch: pytest.MonkeyPatch, padded: bool) -> None:
    """Without the indexer's loss or the weights, the index scores are computed five queries at a
    time (the whole ``(Lq, Lk)`` would be 8 GiB at 16k tokens): the output is the equations'."""
    import zoo.attention.variants.msa as msa

    m, x, keep = layer(), inputs(), real_keys(padded)
    monkeypatch.setattr(msa, "QUERY_CHUNK", 5)
    scored, scores = [], m.indexer.scores
    monkeypatch.setattr(m.indexer, "scores", lambda x, *args: scored.append(x.shape[1]) or scores(x, *args))
    with torch.no_grad():
        output = m(x, AttentionContext.for_keys(keep, is_causal=True)).output
        expected = reference(m, x, keep)[0]
    assert max(scored) == 5 and sum(scored) == LENGTH
    torch.testing.assert_close(output, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("padded", [False, True])
def test_training_on_a_long_input_runs_a_chunk_of_queries_at_a_time(
    monkeypatch: pytest.MonkeyPatch, padded: bool
) -> None:
    """While the indexer learns, a chunk of five queries at a time under checkpointing (its index
    scores again in the backward pass): the output, the KL over all the queries (divided once)
    and every gradient, the indexer's included, are the whole input's."""
    import zoo.attention.variants.msa as msa

    x, keep = inputs(3).requires_grad_(), real_keys(padded)
    context = AttentionContext.for_keys(keep, is_causal=True)
    m = layer(index_loss_weight=0.5)

    def run() -> tuple[Tensor, ...]:
        output = m(x, context).output
        return (output, *torch.autograd.grad(output.square().sum(), (x, *m.parameters())))

    whole = run()
    monkeypatch.setattr(msa, "QUERY_CHUNK", 5)
    scored, scores = [], m.indexer.scores
    monkeypatch.setattr(m.indexer, "scores", lambda x, *args: scored.append(x.shape[1]) or scores(x, *args))
    chunked = run()
    assert scored == [3, 5, 5, 5, 5] + [5, 5, 5, 5, 3], (
        "five chunks, the last first; recomputed in the backward pass from the first"
    )
    for got, expected in zip(chunked, whole, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_the_indexer_learns_its_kl_loss_and_changes_no_other_gradient() -> None:
    x, keep = inputs(3), real_keys(False)
    context = AttentionContext.for_keys(keep, is_causal=True)
    learning, still = layer(index_loss_weight=0.5), layer(index_loss_weight=0.0)
    for m in (learning, still):
        m(x, context).output.square().sum().backward()
    for (name, learned), (_, kept) in zip(learning.named_parameters(), still.named_parameters()):
        if name.startswith("indexer."):
            assert kept.grad is None
        else:
            torch.testing.assert_close(learned.grad, kept.grad, rtol=1e-12, atol=1e-12)
    _, _, loss = reference(learning, x, keep)
    indexer = list(learning.indexer.parameters())
    for grad, parameter in zip(torch.autograd.grad(0.5 * loss, indexer), indexer):
        torch.testing.assert_close(parameter.grad, grad, rtol=1e-9, atol=1e-12)


def test_what_msa_cannot_take_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"local_blocks \(4\) must be at most topk_blocks \(3\)"):
        layer(local_blocks=4)
    with pytest.raises(ValueError, match="index_head_dim must be at least the 4 features the rotation turns; got 2"):
        layer(index_head_dim=2)
    with pytest.raises(ValueError, match=r"num_kv_heads \(3\) must divide num_heads \(4\)"):
        layer(num_kv_heads=3)
    with pytest.raises(ValueError, match="block_size must be a positive integer, got 0"):
        layer(block_size=0)
    with pytest.raises(ValueError, match="index_loss_weight must be 0 or more"):
        layer(index_loss_weight=-1.0)
    with pytest.raises(zoo.IncompatibleAttentionError, match="bidirectional|causal"):
        layer()(inputs(), AttentionContext(is_causal=False))
    assert zoo.get_attention("minimax_sparse_attention") is zoo.get_attention("msa")


def test_msa_passes_the_kit_with_a_selection() -> None:
    report = zoo.check_attention("msa", embed_dim=8, num_heads=2, block_size=2, topk_blocks=2)
    assert {"causal", "padding", "weights", "gradients"} <= set(report.passed)


def test_a_gpt_learns_a_repeating_sequence_and_decodes_from_its_caches() -> None:
    torch.manual_seed(0)
    attention = {"name": "msa", "block_size": 4, "topk_blocks": 2}
    model = GPT(8, block_size=32, d_model=16, num_heads=2, num_layers=2, attention=attention)
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert_cached_generation_matches(model)
