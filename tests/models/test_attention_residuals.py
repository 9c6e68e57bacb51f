"""Attention residuals (:mod:`zoo.layers.attention_residuals`) and the GPT's ``residual="attention"``:
the depth mixing and the block sources against the paper's equations written here (float64), a
whole GPT against a forward written here from the equations, training, cached generation, and a
default GPT left as it was."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from zoo.attention import AttentionContext
from zoo.errors import DataError
from zoo.layers.attention_residuals import DepthAttention, DepthSources
from zoo.models import GPT

VOCAB, BLOCK = 23, 24


def paper_mix(sources: list[torch.Tensor], query: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """``sum_i softmax_i(w . rmsnorm(v_i) * g) v_i``, one source at a time, one token at a time."""
    logits = []
    for v in sources:
        key = v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + eps) * scale
        logits.append((key * query).sum(-1))
    exp = [torch.exp(logit) for logit in logits]
    total = sum(exp)
    return sum(e.unsqueeze(-1) / total.unsqueeze(-1) * v for e, v in zip(exp, sources))


def block_sources(embedding: torch.Tensor, outputs: list[torch.Tensor], block_size: int) -> list[torch.Tensor]:
    """The embedding and, for each block of ``block_size`` sublayers begun so far, the sum of its outputs."""
    groups = [outputs[start : start + block_size] for start in range(0, len(outputs), block_size)]
    return [embedding] + [sum(group) for group in groups]


def randomized(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` with every depth query and key scale drawn at random (they start at 0 and 1)."""
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if "query" in name or "key_norm" in name:
                parameter.normal_()
    return module


def test_depth_attention_is_the_papers_softmax_over_normed_sources() -> None:
    torch.manual_seed(0)
    module = randomized(DepthAttention(16, eps=1e-6)).double()
    sources = [torch.randn(3, 5, 16, dtype=torch.float64) * (i + 1) for i in range(4)]
    mixed, weights = module.mix(sources)
    expected = paper_mix(sources, module.query, module.key_norm.weight, 1e-6)
    torch.testing.assert_close(mixed, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(weights.sum(0), torch.ones(3, 5, dtype=torch.float64))
    torch.testing.assert_close(module(sources[:1]), sources[0])  # one source: itself


def test_a_zero_query_mixes_uniformly_and_low_precision_is_mixed_in_float32() -> None:
    torch.manual_seed(0)
    module = DepthAttention(8)
    sources = [torch.randn(2, 8) for _ in range(3)]
    torch.testing.assert_close(module(sources), sum(sources) / 3)
    half = [source.to(torch.bfloat16) for source in sources]
    expected = paper_mix([s.float() for s in half], module.query, module.key_norm.weight, module.key_norm.eps)
    assert torch.equal(module(half), expected.to(torch.bfloat16))


@pytest.mark.parametrize("block_size", [1, 2, 3, 5])
def test_sources_are_the_embedding_and_the_blocks_partial_sums(block_size: int) -> None:
    torch.manual_seed(0)
    embedding, outputs = torch.randn(4), [torch.randn(4) for _ in range(7)]
    sources = DepthSources(embedding, block_size)
    for count, output in enumerate(outputs, start=1):
        sources.add(output)
        expected = block_sources(embedding, outputs[:count], block_size)
        assert len(sources.sources()) == len(expected)
        for got, want in zip(sources.sources(), expected):
            torch.testing.assert_close(got, want)


def paper_gpt_logits(model: GPT, tokens: torch.Tensor, block_size: int) -> torch.Tensor:
    """The GPT's logits from the equations: every sublayer reads the mix of the embedding and the
    block sums of the earlier outputs, the final norm reads one more mix."""
    embedding = model.position.embed(model.embedding(tokens), 0)
    context, outputs, h = AttentionContext(is_causal=True), [], embedding
    queries = iter(model.depth_attention)

    def next_input(output: torch.Tensor) -> torch.Tensor:
        outputs.append(output)
        query = next(queries)
        sources = block_sources(embedding, outputs, block_size)
        return paper_mix(sources, query.query, query.key_norm.weight, query.key_norm.eps)

    for block in model.blocks:
        h = next_input(block.attention(block.add_norm1.norm(h), context)[0])
        if block.ffn is not None:
            h = next_input(block.ffn(block.add_norm2.norm(h)))
    return model.final_norm(h) @ model.embedding.weight.T


@pytest.mark.parametrize(("block_size", "ffn_hidden"), [(1, None), (2, None), (3, None), (2, 0)])
def test_gpt_equals_the_papers_equations(block_size: int, ffn_hidden: int | None) -> None:
    torch.manual_seed(0)
    model = GPT(
        VOCAB, block_size=BLOCK, d_model=16, num_heads=2, num_layers=3, ffn_hidden=ffn_hidden,
        residual="attention", residual_block_size=block_size,
    )  # fmt: skip
    model = randomized(model).double().eval()
    assert len(model.depth_attention) == 3 * (1 if ffn_hidden == 0 else 2)
    tokens = torch.randint(0, VOCAB, (2, 9))
    expected = paper_gpt_logits(model, tokens, block_size)
    torch.testing.assert_close(model(tokens)[0], expected, rtol=1e-10, atol=1e-10)


def test_the_loss_falls_and_the_depth_queries_learn() -> None:
    torch.manual_seed(0)
    model = GPT(VOCAB, block_size=BLOCK, d_model=16, num_heads=2, num_layers=2, residual="attention")
    tokens = torch.randint(0, VOCAB, (4, 17))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(25):
        logits, _ = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert all(module.query.abs().max() > 1e-3 for module in model.depth_attention)


@pytest.mark.parametrize(
    ("attention", "options"),
    [
        ("dot_product", {"residual_block_size": 2}),
        ("additive", {"canon": "AC"}),
        ("mla", {"residual_block_size": 3}),
        ("gated_deltanet", {"position": "none", "ffn_hidden": 0, "residual_block_size": 2}),
    ],
)
def test_cached_generation_equals_uncached(attention: str, options: dict) -> None:
    torch.manual_seed(0)
    model = GPT(
        VOCAB, block_size=BLOCK, d_model=16, num_heads=2, num_layers=2, attention=attention,
        residual="attention", **options,
    )  # fmt: skip
    model = randomized(model).eval()
    prompt = torch.randint(0, VOCAB, (2, 5))
    cached = torch.stack(list(model.generate(prompt, 12, temperature=0)), dim=1)
    uncached = torch.stack(list(model.generate(prompt, 12, temperature=0, use_cache=False)), dim=1)
    assert torch.equal(cached, uncached)
    tokens = torch.cat([prompt, cached], dim=1)
    full, _ = model(tokens)
    _, caches = model(tokens[:, :5], use_cache=True)
    stepped, _ = model(tokens[:, 5:6], caches, use_cache=True)
    torch.testing.assert_close(stepped[:, 0], full[:, 5], rtol=1e-5, atol=1e-5)


def test_default_gpt_keeps_its_parameters_and_seeded_weights() -> None:
    torch.manual_seed(0)
    default = GPT(VOCAB, block_size=BLOCK, d_model=16, num_heads=2, num_layers=2)
    torch.manual_seed(0)
    mixed = GPT(VOCAB, block_size=BLOCK, d_model=16, num_heads=2, num_layers=2, residual="attention")
    assert default.depth_attention is None
    assert not any("depth_attention" in key for key in default.state_dict())
    extra = set(mixed.state_dict()) - set(default.state_dict())
    assert extra == {f"depth_attention.{i}.{name}" for i in range(4) for name in ("query", "key_norm.weight")}
    for key, value in default.state_dict().items():  # the queries draw no random numbers
        assert torch.equal(value, mixed.state_dict()[key]), key


def test_unknown_residual_and_bad_block_sizes_are_refused() -> None:
    with pytest.raises(DataError, match="unknown residual 'hyper'; choose one of sum, attention"):
        GPT(VOCAB, d_model=8, num_heads=2, num_layers=1, residual="hyper")
    with pytest.raises(DataError, match="residual_block_size=0"):
        GPT(VOCAB, d_model=8, num_heads=2, num_layers=1, residual="attention", residual_block_size=0)
    with pytest.raises(DataError, match="only with residual='attention'"):
        GPT(VOCAB, d_model=8, num_heads=2, num_layers=1, residual_block_size=2)
