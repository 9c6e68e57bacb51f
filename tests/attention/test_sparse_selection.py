"""Sparse attention with a learned selection (``moba``, ``nsa``) against dense float64 attention
written here, query by query, that applies the same selection as a mask: MoBA's gate over
mean-pooled key blocks, and NSA's compressed, selected and window branches mixed by their gates;
the weights (the selection shows in them), decoding from the cache and a GPT."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.gpt import learn_repeating_sequence
from tests.helpers.layers import decode_after_prompt, run_layer
from tests.helpers.short_conv import convolved
from zoo.attention.contract.cache import ConvolvedCache, KeyValueCache
from zoo.models import GPT

EMBED, HEADS, LENGTH = 8, 2, 30
MOBA = {"block_size": 4, "top_k": 3}
NSA = {"compress_block": 4, "compress_stride": 2, "select_block": 4, "select_count": 4, "window": 5}


def layer(name: str, seed: int = 0, **kwargs) -> zoo.AttentionLayer:
    """A float64 layer whose parameters are moved off their initial values."""
    torch.manual_seed(seed)
    options = (MOBA if name == "moba" else NSA) | kwargs
    module = zoo.create_attention(name, embed_dim=EMBED, num_heads=HEADS, **options).double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def heads(x: Tensor) -> Tensor:
    """``(B, L, h * d)`` -> ``(B, h, L, d)``, head size ``EMBED // HEADS``."""
    return x.unflatten(-1, (-1, EMBED // HEADS)).transpose(1, 2)


def projections(module, x: Tensor, real: Tensor) -> list[Tensor]:
    """The queries, keys and values ``(B, L, width)``, through the layer's short convolutions when
    it has them (padded positions entering them as zeros)."""
    pairs = [(module.q_proj, module.q_conv), (module.k_proj, module.k_conv), (module.v_proj, module.v_conv)]
    return [convolved(linear(x), conv, real) for linear, conv in pairs]


def attend(q: Tensor, k: Tensor, v: Tensor, visible: Tensor) -> tuple[Tensor, Tensor]:
    """One query's softmax over the visible keys ``(L,)``: its output and weights (zero if none)."""
    if not visible.any():
        return torch.zeros_like(v[0]), torch.zeros(len(k), dtype=q.dtype)
    scores = (k @ q / q.shape[-1] ** 0.5).masked_fill(~visible, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def moba_reference(module, x: Tensor, real: Tensor) -> tuple[Tensor, Tensor]:
    """MoBA: query ``t`` in block ``c`` scores each earlier block with a real key by its dot
    product with the block's mean real key, and attends to its own block (up to ``t``) and the
    ``top_k - 1`` best. Returns the output and the weights ``(B, H, L, L)``."""
    q, k, v = (heads(t) for t in projections(module, x, real))
    size, top = module.block_size, module.top_k
    outputs, weights = torch.zeros_like(q), torch.zeros(*q.shape[:-1], q.shape[-2], dtype=x.dtype)
    position = torch.arange(x.shape[1])
    for b in range(x.shape[0]):
        for h in range(HEADS):
            for t in range(x.shape[1]):
                own = t // size
                scores = {}
                for i in range(own):
                    members = (position // size == i) & real[b]
                    if members.any():
                        scores[i] = float(q[b, h, t] @ k[b, h][members].mean(0))
                chosen = {own, *sorted(scores, key=scores.get, reverse=True)[: top - 1]}
                visible = torch.isin(position // size, torch.tensor(sorted(chosen))) & (position <= t) & real[b]
                outputs[b, h, t], weights[b, h, t] = attend(q[b, h, t], k[b, h], v[b, h], visible)
    return module.out_proj(outputs.transpose(1, 2).flatten(-2)), weights


def nsa_reference(module, x: Tensor, real: Tensor) -> tuple[Tensor, Tensor]:
    """NSA: per query, the compressed branch over the blocks of ``l`` keys every ``d`` positions
    (``phi`` on each, blocks with a padded key hidden), the selected branch over the first, the
    two local and the best blocks of ``l'`` by the compressed probabilities summed over the group's
    heads and weighted by each block's overlap in strides, and the window over the last ``w`` keys;
    mixed by the gates. Returns the output and the weights, each branch's (the compressed one's
    spread over its blocks' keys) mixed by the gates over the branches that see a key."""
    length = x.shape[1]
    projected_q, projected_k, projected_v = projections(module, x, real)
    q, keys, values = heads(projected_q), heads(projected_k).chunk(3, dim=1), heads(projected_v).chunk(3, dim=1)
    block, stride = module.compress_keys.length, module.compress_keys.stride
    size, count, width = module.select_block, module.select_count, module.window.window
    starts = list(range(0, length - block + 1, stride))
    zeroed = [t * real[:, None, :, None] for t in (keys[0], values[0])]
    phi = lambda module_, t, s: module_.mlp((t[..., s : s + block, :] + module_.position).flatten(-2))  # noqa: E731
    compressed_k = torch.stack([phi(module.compress_keys, zeroed[0], s) for s in starts], dim=-2)
    compressed_v = torch.stack([phi(module.compress_values, zeroed[1], s) for s in starts], dim=-2)
    gates = torch.sigmoid(module.gate(x)).unflatten(-1, (3, HEADS))  # (B, L, 3, H)
    position = torch.arange(length)
    outputs = torch.zeros_like(q)
    weights = torch.zeros(x.shape[0], HEADS, length, length, dtype=x.dtype)
    for b in range(x.shape[0]):
        for t in range(length):
            sees = torch.tensor([s + block - 1 <= t and bool(real[b, s : s + block].all()) for s in starts])
            compressed = [attend(q[b, h, t], compressed_k[b, 0], compressed_v[b, 0], sees) for h in range(HEADS)]
            group = sum(p for _, p in compressed)
            own = t // size
            scores = {}
            for j in range(own + 1):
                if (position // size == j)[real[b]].any() and j not in (0, own, own - 1):
                    overlap = [
                        len(set(range(s, s + block)) & set(range(j * size, j * size + size))) / stride for s in starts
                    ]
                    scores[j] = float(group @ torch.tensor(overlap, dtype=x.dtype))
            chosen = {0, own, own - 1} - {-1} | set(
                sorted(scores, key=scores.get, reverse=True)[: count - 3 + (own < 2)]
            )
            selected_visible = torch.isin(position // size, torch.tensor(sorted(chosen))) & (position <= t) & real[b]
            window_visible = (position <= t) & (position > t - width) & real[b]
            for h in range(HEADS):
                selected = attend(q[b, h, t], keys[1][b, 0], values[1][b, 0], selected_visible)
                window = attend(q[b, h, t], keys[2][b, 0], values[2][b, 0], window_visible)
                g = gates[b, t, :, h]
                outputs[b, h, t] = g[0] * compressed[h][0] + g[1] * selected[0] + g[2] * window[0]
                spread = sum(
                    p * ((position >= s) & (position < s + block)) / block for p, s in zip(compressed[h][1], starts)
                )
                branch = [torch.as_tensor(spread, dtype=x.dtype), selected[1], window[1]]
                seen = sum(g[c] * bool(branch[c].any()) for c in range(3))
                weights[b, h, t] = sum(g[c] * branch[c] for c in range(3)) / (seen if seen > 0 else 1.0)
    return module.out_proj(outputs.transpose(1, 2).flatten(-2)), weights


REFERENCES = {"moba": moba_reference, "nsa": nsa_reference}


def padded(kind: str | None) -> tuple[dict, Tensor]:
    steps = torch.arange(LENGTH)
    if kind == "left":
        real = steps >= torch.tensor([0, 7])[:, None]
        return {"attn_mask": real[:, None, :]}, real
    if kind == "right":
        lengths = torch.tensor([LENGTH, 19])
        return {"valid_lens": lengths}, steps < lengths[:, None]
    return {}, torch.ones(2, LENGTH, dtype=torch.bool)


@pytest.fixture(params=["masked", "gathered"])
def selection_form(request, monkeypatch) -> str:
    """Both of the kernel's forms: the selection masking the dense scores (``DENSE_KEYS`` and
    fewer keys) and the selected blocks gathered per query (forced here with ``DENSE_KEYS`` 0)."""
    if request.param == "gathered":
        monkeypatch.setattr("zoo.attention.kernels.selection.DENSE_KEYS", 0)
    return request.param


@pytest.mark.parametrize("conv_size", [0, 3])
@pytest.mark.parametrize("padding", [None, "left", "right"])
@pytest.mark.parametrize("name", ["moba", "nsa"])
def test_the_layer_equals_dense_attention_under_its_selection(
    name: str, padding: str | None, conv_size: int, selection_form: str
) -> None:
    shared = {"kv_heads": 1} if name == "nsa" else {}  # NSA: both heads share one selection
    module = layer(name, conv_size=conv_size, **shared)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask, real = padded(padding)
    with torch.no_grad():
        output, weights = run_layer(module, x, is_causal=True, need_weights=True, **mask)
        plain = run_layer(module, x, is_causal=True, **mask).output
        expected_output, expected_weights = REFERENCES[name](module, x, real)
    if conv_size:  # a padded query convolves zeros only: its gate scores every block 0, a tie the kernel breaks
        output, plain, expected_output = (t * real[..., None] for t in (output, plain, expected_output))
        weights, expected_weights = (t * real[:, None, :, None] for t in (weights, expected_weights))
    torch.testing.assert_close(output, expected_output, atol=1e-12, rtol=0)
    torch.testing.assert_close(plain, output, atol=1e-12, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=1e-12, rtol=0)


def test_the_selection_shows_in_the_weights_as_blocks() -> None:
    """Without padding, each of MoBA's queries past its third block spreads its weights over
    exactly ``top_k`` blocks, its own among them; the rest is zero."""
    module = layer("moba")
    x = torch.randn(1, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        weights = run_layer(module, x, is_causal=True, need_weights=True).weights
    blocks = F.pad(weights, (0, -LENGTH % 4)).unflatten(-1, (-1, MOBA["block_size"])).ne(0).any(-1)  # (1, H, L, N)
    for t in range(3 * MOBA["block_size"], 28):
        assert int(blocks[0, :, t].sum(-1).min()) == int(blocks[0, :, t].sum(-1).max()) == MOBA["top_k"]
        assert blocks[0, :, t, t // MOBA["block_size"]].all()


@pytest.mark.parametrize("conv_size", [0, 3])
@pytest.mark.parametrize("name", ["moba", "nsa"])
def test_decoding_from_the_cache_equals_one_causal_pass(name: str, conv_size: int, selection_form: str) -> None:
    module = layer(name, conv_size=conv_size)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    mask, real = padded("left")
    with torch.no_grad():
        expected = run_layer(module, x, is_causal=True, **mask).output
    decoded, cache = decode_after_prompt(module, x, real, prompt=12)
    torch.testing.assert_close(decoded, expected, atol=1e-12, rtol=0)
    assert cache.length == LENGTH
    if conv_size:  # the keys and values beside each convolution's last conv_size - 1 inputs
        assert isinstance(cache, ConvolvedCache) and all(w.shape[:2] == (2, conv_size - 1) for w in cache.windows)
        with pytest.raises(TypeError, match="continues a KeyValueCache in a ConvolvedCache"):
            module.attend_cached(x[:, :1], cache.inner)
        cache = cache.inner
    assert isinstance(cache, KeyValueCache)


@pytest.mark.parametrize("name", ["moba", "nsa"])
def test_a_gpt_learns_a_repeating_sequence_and_decodes_from_its_cache(name: str) -> None:
    torch.manual_seed(0)
    small = {"moba": {"block_size": 4}, "nsa": {"compress_block": 4, "compress_stride": 2, "select_block": 4}}
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=2, attention=name, attention_kwargs=small[name])
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    model = model.double().eval()
    prompt = torch.randint(8, (2, 5), generator=torch.Generator().manual_seed(4))
    cached = torch.stack(list(model.generate(prompt, 14, temperature=0)), 1)
    assert torch.equal(cached, torch.stack(list(model.generate(prompt, 14, temperature=0, use_cache=False)), 1))


def test_what_the_sparse_layers_cannot_take_is_refused_in_one_line() -> None:
    with pytest.raises(zoo.IncompatibleAttentionError, match="causal"):
        run_layer(layer("moba"), torch.randn(1, 6, EMBED, dtype=torch.float64))
    with pytest.raises(ValueError, match="compress_stride .* must divide"):
        zoo.create_attention("nsa", embed_dim=EMBED, num_heads=HEADS, compress_block=6, compress_stride=4)
    with pytest.raises(ValueError, match="select_count must be at least 3"):
        zoo.create_attention("nsa", embed_dim=EMBED, num_heads=HEADS, select_count=2)


@pytest.mark.parametrize("name", ["moba", "nsa"])
def test_with_a_short_convolution_the_layer_passes_the_kit(name: str) -> None:
    report = zoo.check_attention(name, conv_size=4, position="rope", **(MOBA if name == "moba" else NSA))
    assert {"causal", "padding", "gradients"} <= set(report.passed)
    assert "conv_size=4" in repr(zoo.create_attention(name, embed_dim=EMBED, num_heads=HEADS, conv_size=4))


def test_the_two_forms_of_the_kernel_agree_with_grouped_heads_and_their_gradients(monkeypatch) -> None:
    from zoo.attention.kernels import selection

    generator = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 9, 5, generator=generator, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, 2, 23, 5, generator=generator, dtype=torch.float64, requires_grad=True) for _ in range(2))
    blocks = torch.rand(2, 2, 9, 6, generator=generator).argsort(-1)[..., :3]  # distinct, as top_blocks gives
    blocks = blocks.masked_fill(torch.rand(2, 2, 9, 3, generator=generator) < 0.2, -1)  # and some "none"
    padding = torch.rand(2, 1, 23, generator=generator) > 0.2
    results = []
    for dense_keys in (selection.DENSE_KEYS, 0):
        monkeypatch.setattr(selection, "DENSE_KEYS", dense_keys)
        output, weights = selection.selected_block_attention(
            q, k, v, blocks, block_size=4, key_padding=padding, scale=0.5, need_weights=True
        )
        plain, _ = selection.selected_block_attention(q, k, v, blocks, block_size=4, key_padding=padding, scale=0.5)
        grads = torch.autograd.grad(plain.square().sum(), (q, k, v))
        results.append((output, weights, plain, *grads))
    for masked, gathered in zip(*results):
        torch.testing.assert_close(masked, gathered, atol=1e-12, rtol=0)
