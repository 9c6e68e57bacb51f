"""DeepSeek-V4's attention (``deepseek_v4``), its sliding-window layer and its compressed ones (HCA,
CSA): the layer against the equations written per query here (the heatmap ``need_weights`` gives
too), its decoding against one causal pass, the kit, and a small GPT that learns with it."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor

import zoo
from tests.helpers.gpt import learn_repeating_sequence
from tests.helpers.layers import decode_after_prompt, run_layer
from zoo import AttentionContext
from zoo.attention.modules.token_compression import CompressedCache, SharedWindow
from zoo.models import GPT

EMBED, HEADS, LENGTH, WINDOW = 16, 4, 11, 4
SIZES = {"head_dim": 6, "rope_head_dim": 4, "q_lora_rank": 5, "o_groups": 2, "o_lora_rank": 3, "window": WINDOW}
#: entries of 3 tokens (HCA) and of 2 overlapping 4 (CSA, 5 entries of which a query reads 2)
COMPRESSED = {
    "hca": {"compression": "hca", "compress_rate": 3},
    "csa": {"compression": "csa", "compress_rate": 2, "index_topk": 2, "index_heads": 3, "index_head_dim": 4},
}
KINDS = pytest.mark.parametrize("kind", [None, *COMPRESSED])


def layer(kind: str | None = None, **kwargs) -> zoo.AttentionLayer:
    """A float64 layer, its parameters moved off their initial values (zero sinks and unit norm
    scales would hide mistakes)."""
    torch.manual_seed(0)
    options = SIZES | COMPRESSED.get(kind, {}) | kwargs
    module = zoo.create_attention("deepseek_v4", embed_dim=EMBED, num_heads=HEADS, **options)
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def inputs(seed: int) -> Tensor:
    return torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def turn(v: Tensor, position: float, rotated: int) -> Tensor:
    """``v`` ``(..., d)`` with its first ``rotated`` features turned by ``position`` in pairs of
    halves (the angles in float32, as the zoo's)."""
    half = rotated // 2
    angles = position * 10000.0 ** (-torch.arange(half, dtype=torch.float32) * 2 / rotated)
    first, second = v[..., :half], v[..., half:rotated]
    cos, sin = angles.cos().double(), angles.sin().double()
    return torch.cat([first * cos - second * sin, first * sin + second * cos, v[..., rotated:]], -1)


def rms(v: Tensor, weight: Tensor | None = None) -> Tensor:
    v = v / (v.square().mean(-1, keepdim=True) + 1e-6).sqrt()
    return v if weight is None else v * weight


def pooled_entries(c, rate: int, rotated: int, x: Tensor, keep: Tensor, b: int) -> list:
    """The entries of compressor ``c`` over row ``b``, one window at a time: each entry with the
    share of each token it pools (its compression weights averaged over the features); None for an
    entry that pools no real token."""
    d = c.kv_norm.weight.shape[0]
    kv, gate = x[b] @ c.kv_proj.weight.T, x[b] @ c.gate_proj.weight.T
    entries = []
    for i in range(x.shape[1] // rate):
        if c.overlap:  # window i - 1's first series, window i's second (token, series, slot)
            slots = [(j, 0, j - (i - 1) * rate) for j in range(max(i - 1, 0) * rate, i * rate) if i > 0]
            slots += [(j, 1, j - i * rate) for j in range(i * rate, (i + 1) * rate)]
        else:
            slots = [(j, 0, j - i * rate) for j in range(i * rate, (i + 1) * rate)]
        slots = [(j, s, slot) for j, s, slot in slots if keep[b, j]]
        if not slots:
            entries.append(None)
            continue
        part = [slice(s * d, (s + 1) * d) for _, s, _ in slots]
        logits = torch.stack(
            [gate[j, f] + c.position_bias[slot, f] for (j, _, slot), f in zip(slots, part, strict=True)]
        )
        weights = logits.softmax(0)  # per feature, over the slots
        pooled = sum(w * kv[j, f] for w, (j, _, _), f in zip(weights, slots, part, strict=True))
        entry = turn(rms(pooled, c.kv_norm.weight), i * rate, rotated)
        entries.append((entry, {j: w.mean() for w, (j, _, _) in zip(weights, slots, strict=True)}))
    return entries


def index_scores(m, x: Tensor, b: int, t: int, keys: list[Tensor]) -> list[float]:
    """The CSA indexer's ``sum_h w_h ReLU(q_h . k_e) / sqrt(d_I)`` of query ``t`` over ``keys``."""
    ix, d, r = m.indexer, m.indexer.head_dim, m.rope_head_dim
    latent = rms(x[b, t] @ m.q_a_proj.weight.T, m.q_a_norm.weight) @ ix.q_b_proj.weight.T
    weights = x[b, t] @ ix.weights_proj.weight.T / ix.num_heads**0.5
    queries = [turn(latent[h * d : (h + 1) * d], t, r) for h in range(ix.num_heads)]
    return [float(sum(w * torch.relu(q @ k) / d**0.5 for w, q in zip(weights, queries, strict=True))) for k in keys]


def reference(m, x: Tensor, keep: Tensor) -> tuple[Tensor, Tensor]:
    """The module docstring's equations, one query and one head at a time: ``keep`` ``(B, L)``
    marks the real keys. The outputs, and the heatmap: each key's weight, plus each read entry's
    weight spread over the tokens it pools by their shares."""
    d, r, out = m.head_dim, m.rope_head_dim, torch.zeros_like(x)
    heat = torch.zeros(x.shape[0], m.num_heads, x.shape[1], x.shape[1], dtype=x.dtype)
    for b in range(x.shape[0]):
        kv = [turn(rms(x[b, j] @ m.kv_proj.weight.T, m.kv_norm.weight), j, r) for j in range(x.shape[1])]
        entries = [] if m.compressor is None else pooled_entries(m.compressor, m.compress_rate, r, x, keep, b)
        if m.indexer is not None:
            index = pooled_entries(m.indexer.compressor, m.compress_rate, r, x, keep, b)
            index_keys = [None if e is None else e[0] for e in index]
        for t in range(x.shape[1]):
            read = [i for i, e in enumerate(entries) if e is not None and (i + 1) * m.compress_rate <= t + 1]
            if m.indexer is not None and len(entries) > m.index_topk:
                scores = index_scores(m, x, b, t, [index_keys[i] for i in read])
                ranked = sorted(zip(scores, read, strict=True), key=lambda pair: (-pair[0], pair[1]))
                read = sorted(i for _, i in ranked[: m.index_topk])
            latent = rms(x[b, t] @ m.q_a_proj.weight.T, m.q_a_norm.weight) @ m.q_b_proj.weight.T
            heads = []
            for h in range(m.num_heads):
                q = turn(rms(latent[h * d : (h + 1) * d]), t, r)
                seen = [j for j in range(max(t - m.window + 1, 0), t + 1) if keep[b, j]]
                keys = [kv[j] for j in seen] + [entries[i][0] for i in read]
                logits = torch.stack([q @ k / d**0.5 for k in keys] + [m.sinks[h]])
                weights = logits.softmax(0)[:-1]
                mixed = sum((w * k for w, k in zip(weights, keys, strict=True)), torch.zeros(d, dtype=x.dtype))
                heads.append(turn(mixed, -t, r))
                for w, j in zip(weights, seen, strict=False):
                    heat[b, h, t, j] += w
                for w, i in zip(weights[len(seen) :], read, strict=True):
                    for j, share in entries[i][1].items():
                        heat[b, h, t, j] += w * share
            per_group = m.num_heads * d // m.o_groups
            stacked = torch.cat(heads)
            projected = [
                stacked[g * per_group : (g + 1) * per_group]
                @ m.o_a_proj.weight[g * m.o_lora_rank : (g + 1) * m.o_lora_rank].T
                for g in range(m.o_groups)
            ]
            out[b, t] = torch.cat(projected) @ m.o_b_proj.weight.T
    return out, heat


def left_padded() -> Tensor:
    keep = torch.ones(2, LENGTH, dtype=torch.bool)
    keep[1, :3] = False
    return keep


@pytest.mark.parametrize("window", [WINDOW, 64])
def test_the_layer_computes_the_papers_equations_per_query(window: int) -> None:
    module, x, keep = layer(window=window), inputs(1), left_padded()
    with torch.no_grad():
        got = run_layer(module, x, is_causal=True, attn_mask=keep[:, None, :]).output
        torch.testing.assert_close(got[keep], reference(module, x, keep)[0][keep], atol=1e-12, rtol=0)


@pytest.mark.parametrize("kind", list(COMPRESSED))
def test_the_compressed_layers_compute_the_equations_per_query(kind: str) -> None:
    """HCA and CSA over left-padded rows: the entries, which of them a query reads (complete at it;
    for CSA the indexer's top 2), and the heatmap of ``need_weights``."""
    module, x, keep = layer(kind), inputs(4), left_padded()
    with torch.no_grad():
        got = run_layer(module, x, is_causal=True, attn_mask=keep[:, None, :], need_weights=True)
        expected, heat = reference(module, x, keep)
    torch.testing.assert_close(got.output[keep], expected[keep], atol=1e-12, rtol=0)
    torch.testing.assert_close(got.weights, heat, atol=1e-12, rtol=0)
    assert heat[..., -1, :-WINDOW].sum() > 0  # the last query reads entries before its window


@KINDS
def test_decoding_from_the_cache_equals_one_causal_pass(kind: str | None) -> None:
    module, x, keep = layer(kind), inputs(2), left_padded()
    with torch.no_grad():
        expected = run_layer(module, x, is_causal=True, attn_mask=keep[:, None, :]).output
    decoded, cache = decode_after_prompt(module, x, keep, prompt=5)
    torch.testing.assert_close(decoded[keep], expected[keep], atol=1e-12, rtol=0)
    assert cache.length == LENGTH
    window = cache.window if isinstance(cache, CompressedCache) else cache
    assert isinstance(window, SharedWindow) and window.shared.shape[-2] == WINDOW - 1  # all a later query reaches
    if kind is not None:
        rate = module.compress_rate
        assert isinstance(cache, CompressedCache) and cache.compressor.entries.shape[1] == LENGTH // rate
        assert cache.compressor.pending_kv.shape[1] == LENGTH % rate


@KINDS
def test_the_decoding_cache_stops_growing_at_the_window_but_for_the_entries(kind: str | None) -> None:
    """DeepSeek-V4 decodes from the last ``w - 1`` shared keys-values (one tensor: the keys are the
    values), so a sliding layer's cache is the same size after 6 and 24 tokens, and a compressed
    layer's grows by one entry (and, for CSA, one index key) per ``m`` tokens."""
    module, sizes = layer(kind), []
    with torch.no_grad():
        for length in (6, 24):  # whole entries at both rates: nothing pending
            _, cache = module.attend_cached(torch.randn(1, length, EMBED, dtype=torch.float64), None)
            window = cache.window if isinstance(cache, CompressedCache) else cache
            assert window.nbytes == (WINDOW - 1) * module.head_dim * window.shared.element_size()
            sizes.append(cache.nbytes)
    if kind is None:
        assert sizes[0] == sizes[1]
    else:
        states = [state for state in (cache.compressor, cache.indexer) if state is not None]
        entry = sum((state.entries.nbytes + state.visible.nbytes) // state.entries.shape[1] for state in states)
        assert sizes[1] - sizes[0] == (24 // module.compress_rate - 6 // module.compress_rate) * entry


def test_the_sliding_layer_keeps_its_parameters_and_the_indexer_learns_from_its_loss_alone() -> None:
    sliding = {"q_a_proj.weight", "q_a_norm.weight", "q_b_proj.weight", "kv_proj.weight", "kv_norm.weight", "sinks",
               "o_a_proj.weight", "o_b_proj.weight"}  # fmt: skip
    assert set(layer().state_dict()) == sliding
    grads = []
    for weight in (0.0, 1.0):
        module, x = layer("csa", index_loss_weight=weight), inputs(5)
        run_layer(module, x, is_causal=True).output.square().sum().backward()
        grads.append({name: p.grad for name, p in module.named_parameters()})
    for name, grad in grads[1].items():
        if name.startswith("indexer."):
            assert grads[0][name] is None and grad.abs().sum() > 0, name
        else:
            torch.testing.assert_close(grads[0][name], grad, atol=0, rtol=0, msg=name)


def test_the_output_depends_on_positions_only_through_distances() -> None:
    """With the window covering the sequence, the same inputs read at positions 5 .. give the same
    outputs: the inverse rotation of the output leaves only relative rotations."""
    module, x = layer(window=64), inputs(3)
    with torch.no_grad():
        whole = run_layer(module, x, is_causal=True).output
        shifted = module(x, zoo.AttentionContext(is_causal=True, offset=5)).output
    torch.testing.assert_close(shifted, whole, atol=1e-6, rtol=0)  # the angles are float32
    assert (shifted - whole).abs().max() > 0  # the positions did change


def test_what_the_layer_cannot_take_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="num_heads=4 must be a multiple of o_groups=3"):
        layer(o_groups=3)
    with pytest.raises(ValueError, match=r"rope_head_dim must be even and in \(0, head_dim=6\]; got 3"):
        layer(rope_head_dim=3)
    with pytest.raises(ValueError, match="compress_rate needs compression='hca' or 'csa'"):
        layer(compress_rate=4)
    with pytest.raises(ValueError, match="index_topk, index_heads and index_head_dim need compression='csa'"):
        layer("hca", index_topk=4)
    with pytest.raises(ValueError, match="compression must be None, 'hca' or 'csa'; got 'nsa'"):
        layer(compression="nsa")
    with pytest.raises(ValueError, match="index_head_dim must be at least rope_head_dim=4; got 2"):
        layer("csa", index_head_dim=2)
    with pytest.raises(zoo.IncompatibleAttentionError, match="takes key padding masks only"):
        run_layer(layer("hca"), inputs(1), is_causal=True, attn_mask=torch.ones(2, LENGTH, LENGTH, dtype=torch.bool))
    assert zoo.get_attention("dsv4") is zoo.get_attention("deepseek_v4")


@KINDS
def test_the_layer_passes_the_kit(kind: str | None) -> None:
    options = SIZES | COMPRESSED.get(kind, {})
    report = zoo.check_attention("deepseek_v4", embed_dim=EMBED, num_heads=HEADS, **options)
    assert {"causal", "padding", "weights", "gradients"} <= set(report.passed)


def test_a_gpt_learns_a_repeating_sequence_and_decodes_from_its_cache() -> None:
    torch.manual_seed(0)
    attention = {"name": "deepseek_v4", "window": 8, "o_groups": 2}
    model = GPT(8, block_size=32, d_model=16, num_heads=2, num_layers=2, attention=attention, position="none")
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    model = model.double().eval()
    prompt = torch.randint(8, (2, 6), generator=torch.Generator().manual_seed(7))
    cached = torch.stack(list(model.generate(prompt, 10, temperature=0)), 1)
    assert torch.equal(cached, torch.stack(list(model.generate(prompt, 10, temperature=0, use_cache=False)), 1))


@pytest.mark.parametrize("compression", [None, "hca", "csa"])
def test_a_long_inputs_inference_scores_a_chunk_of_queries_at_a_time(
    monkeypatch: pytest.MonkeyPatch, compression: str | None
) -> None:
    """Without gradients or weights, the scores are held four queries at a time (all at once, 8 GiB
    at 16k tokens and 8 heads ran a 24 GiB machine out of memory): the output is the one pass's."""
    import zoo.attention.variants.deepseek_v4 as deepseek_v4

    torch.manual_seed(0)
    options = {} if compression is None else {"compression": compression, "compress_rate": 2}
    layer = zoo.create_attention("deepseek_v4", embed_dim=32, num_heads=4, window=5, **options).eval()
    x = torch.randn(2, 13, 32)
    with torch.no_grad():
        whole = layer(x, AttentionContext(is_causal=True)).output
        monkeypatch.setattr(deepseek_v4, "QUERY_CHUNK", 4)
        chunked = layer(x, AttentionContext(is_causal=True)).output
    torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=1e-6)
