"""The ``softmax`` layer's options (QK-norm, the output gate, learned sinks, a sliding window with
kept first tokens) against the equations written out here with loops in float64, its
StreamingLLM window cache, its named recipes, how a stack hands it the model's options, and a
tiny GPT and a Shakespeare fit that learn with it."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

import zoo
from tests.helpers.cli import flags, hparams, tiny_fit, trainer_budget
from tests.helpers.gpt import learn_repeating_sequence
from tests.helpers.short_conv import convolved
from zoo.attention import AttentionContext, AttentionSpec
from zoo.attention.contract.cache import ConvolvedCache, KeyValueCache, WindowCache
from zoo.attention.variants.softmax import SoftmaxAttention
from zoo.models.gpt import GPT
from zoo.models.transformer import Transformer
from zoo.positions import create_position
from zoo.summary import attention_by_layer

B, L, E, H = 3, 7, 16, 4


def rope(x: Tensor, positions: Tensor) -> Tensor:
    """Rotary positions as Su et al. write them, features ``i`` and ``i + d/2`` paired: ``(..., L, d)``."""
    half = x.shape[-1] // 2
    out = torch.empty_like(x)
    for i in range(half):
        angle = positions.to(x.dtype) * 10000.0 ** (-2 * i / x.shape[-1])
        a, b = x[..., i], x[..., i + half]
        out[..., i], out[..., i + half] = a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()
    return out


def rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@torch.no_grad()
def reference(layer: SoftmaxAttention, x: Tensor, keep: Tensor, causal: bool, rotary: bool) -> tuple[Tensor, Tensor]:
    """The layer's output and weights from its parameters, one query, head and key at a time.

    ``keep`` ``(B, L, L)``: the pairs the mask lets through (causality and the window are added here).
    """
    batch, length, _ = x.shape
    heads, kv_heads, d = layer.num_heads, layer.num_kv_heads, layer.head_dim
    real = keep.any(1)  # (B, L): the positions some query sees (key padding)

    def project(linear: torch.nn.Linear, conv: torch.nn.Conv1d | None, count: int) -> Tensor:
        p = convolved(x @ linear.weight.T + linear.bias, conv, real)
        return p.view(batch, length, count, d).transpose(1, 2)

    q, k, v = (
        project(layer.q_proj, layer.q_conv, heads),
        project(layer.k_proj, layer.k_conv, kv_heads),
        project(layer.v_proj, layer.v_conv, kv_heads),
    )
    if layer.q_norm is not None:
        q, k = rms(q, layer.q_norm.weight, 1e-6), rms(k, layer.k_norm.weight, 1e-6)
    if rotary:
        q, k = rope(q, torch.arange(length)), rope(k, torch.arange(length))
    out = torch.zeros(batch, heads, length, d, dtype=x.dtype)
    weights = torch.zeros(batch, heads, length, length, dtype=x.dtype)
    for b in range(batch):
        for h in range(heads):
            kh = h // (heads // kv_heads)
            for i in range(length):
                seen = []
                for j in range(length):
                    near = layer.window is None or abs(i - j) < layer.window or j < layer.sink_tokens
                    if keep[b, i, j] and near and (j <= i or not causal):
                        seen.append(j)
                logits = {j: float(q[b, h, i] @ k[b, kh, j]) / math.sqrt(d) for j in seen}
                denominator = sum(math.exp(z) for z in logits.values())
                if layer.sinks is not None:
                    denominator += math.exp(float(layer.sinks[h]))
                for j, z in logits.items():
                    weights[b, h, i, j] = math.exp(z) / denominator
                    out[b, h, i] += weights[b, h, i, j] * v[b, kh, j]
    if layer.gate == "elementwise":
        out = out * torch.sigmoid(x @ layer.gate_proj.weight.T + layer.gate_proj.bias).view(
            batch, length, heads, d
        ).transpose(1, 2)
    elif layer.gate == "headwise":
        out = out * torch.sigmoid(x @ layer.gate_proj.weight.T + layer.gate_proj.bias).transpose(1, 2)[..., None]
    merged = out.transpose(1, 2).reshape(batch, length, heads * d)
    return merged @ layer.out_proj.weight.T + layer.out_proj.bias, weights


def build(rotary: bool = False, **options) -> SoftmaxAttention:
    torch.manual_seed(0)
    position = create_position("rope", d_model=E, num_heads=H) if rotary else None
    layer = SoftmaxAttention(E, H, position=position, **options).double()
    with torch.no_grad():  # learned scales and sinks away from their initial values, so that they count
        for parameter in (layer.q_norm, layer.k_norm):
            if parameter is not None:
                parameter.weight.uniform_(0.5, 1.5)
        if layer.sinks is not None:
            layer.sinks.uniform_(-1.0, 1.0)
    return layer


OPTIONS = [
    {},
    {"qk_norm": True},
    {"gate": "elementwise"},
    {"gate": "headwise", "num_kv_heads": 2},
    {"sinks": True},
    {"window": 3, "sink_tokens": 0},
    {"window": 2, "sink_tokens": 2, "sinks": True, "qk_norm": True, "gate": "elementwise", "num_kv_heads": 1},
    {"conv_size": 3, "num_kv_heads": 2},
    {"conv_size": 2, "window": 3, "sink_tokens": 1, "qk_norm": True, "sinks": True},
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "plain")
@pytest.mark.parametrize(("causal", "rotary"), [(True, True), (False, False)])
def test_the_layer_computes_its_equations_with_and_without_padding(options, causal: bool, rotary: bool) -> None:
    layer = build(rotary, **options)
    x = torch.randn(B, L, E, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    lengths = torch.tensor([L, 4, 1])
    for valid_lens in (None, lengths):
        keep = (
            torch.ones(B, L, L, dtype=torch.bool)
            if valid_lens is None
            else (torch.arange(L) < lengths[:, None, None]).expand(B, L, L)
        )
        expected, expected_weights = reference(layer, x, keep, causal, rotary)
        context = AttentionContext.build(B, L, valid_lens=valid_lens, is_causal=causal)
        tolerance = 1e-6 if rotary else 1e-10  # the zoo's rotary tables are float32, whatever the inputs
        torch.testing.assert_close(layer(x, context).output, expected, rtol=tolerance, atol=tolerance)  # fused kernel
        output, weights = layer(x, context.replace(need_weights=True))  # explicit form
        torch.testing.assert_close(output, expected, rtol=tolerance, atol=tolerance)
        torch.testing.assert_close(weights, expected_weights, rtol=tolerance, atol=tolerance)


def decode(layer: SoftmaxAttention, x: Tensor, keep: Tensor | None, prompt: int) -> tuple[Tensor, list]:
    """A prompt, then one position at a time through ``attend_cached``: the outputs and the caches."""
    outputs, caches, cache = [], [], None
    for first, last in [(0, prompt), *((t, t + 1) for t in range(prompt, x.shape[1]))]:
        seen = None if keep is None else keep[:, :last]  # the mask over every position seen
        output, cache = layer.attend_cached(x[:, first:last], cache, AttentionContext.for_keys(seen, is_causal=True))
        outputs.append(output)
        caches.append(cache)
    return torch.cat(outputs, 1), caches


def test_without_a_window_decoding_through_the_key_value_cache_equals_the_full_forward() -> None:
    layer = build(True, sinks=True, qk_norm=True, gate="elementwise", num_kv_heads=2).eval()
    x = torch.randn(B, 9, E, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    keep = torch.arange(9) >= torch.tensor([0, 2, 5])[:, None]  # left-padded rows
    decoded, caches = decode(layer, x, keep, 3)
    full = layer(x, AttentionContext.for_keys(keep, is_causal=True)).output
    torch.testing.assert_close(decoded, full, rtol=1e-10, atol=1e-10)
    assert isinstance(caches[-1], KeyValueCache) and caches[-1].keys.shape == (B, 2, 9, E // H)


@pytest.mark.parametrize("window", [None, 3])
def test_the_short_convolution_decodes_from_its_windows_as_the_full_forward(window: int | None) -> None:
    """Left-padded prompts, then one token at a time: the convolutions continue from the last
    ``K - 1`` projections the cache holds (padded ones zero), so decoding equals the full forward."""
    layer = build(True, conv_size=4, qk_norm=True, num_kv_heads=2, window=window, sink_tokens=1).eval()
    x = torch.randn(B, 10, E, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    keep = torch.arange(10) >= torch.tensor([0, 2, 5])[:, None]
    decoded, caches = decode(layer, x, keep, 2)  # a prompt shorter than the kernel
    full = layer(x, AttentionContext.for_keys(keep, is_causal=True)).output
    torch.testing.assert_close(decoded, full, rtol=1e-10, atol=1e-10)
    cache = caches[-1]
    assert isinstance(cache, ConvolvedCache) and cache.length == 10
    assert isinstance(cache.inner, KeyValueCache if window is None else WindowCache)
    assert [w.shape for w in cache.windows] == [(B, 3, E), (B, 3, E // 2), (B, 3, E // 2)]
    assert torch.equal(cache.select(torch.tensor([1])).windows[0], cache.windows[0][[1]])
    with pytest.raises(TypeError, match="continues a (KeyValue|Window)Cache in a ConvolvedCache"):
        layer.attend_cached(x[:, :1], cache.inner)


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_a_window_cache_keeps_the_first_tokens_and_the_last_window_and_decodes_as_the_full_forward(position) -> None:
    torch.manual_seed(0)
    options = {"window": 3, "sink_tokens": 2, "sinks": True, "qk_norm": True, "gate": "headwise", "num_kv_heads": 2}
    scheme = create_position(position, d_model=E, num_heads=H)
    layer = SoftmaxAttention(E, H, position=scheme, **options).double().eval()
    length = 11
    x = torch.randn(B, length, E, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for keep in (None, torch.arange(length) >= torch.tensor([0, 2, 5])[:, None]):  # left-padded rows
        full = layer(x, AttentionContext.for_keys(keep, is_causal=True)).output
        decoded, caches = decode(layer, x, keep, 4)
        torch.testing.assert_close(decoded, full, rtol=1e-10, atol=1e-10)
        cache = caches[-1]
        assert isinstance(cache, WindowCache) and cache.length == length
        assert cache.positions.tolist() == [0, 1, 9, 10]  # two first tokens, the window's other two
        assert len({c.nbytes for c in caches}) == 1  # full from the prompt on: 2 + 3 - 1 positions, never more
        picked = cache.select(torch.tensor([2, 0]))
        assert torch.equal(picked.keys, cache.keys[[2, 0]]) and picked.length == length
    assert isinstance(layer.attend_cached(x[:, :2], None)[1], WindowCache)
    assert isinstance(build(sinks=True).attend_cached(x[:, :2], None)[1], KeyValueCache)  # no window: every key


@pytest.mark.parametrize("position", [None, "rope", "alibi"])
def test_the_options_together_keep_the_contract(position: str | None) -> None:
    options = {"qk_norm": True, "gate": "headwise", "sinks": True, "window": 2, "sink_tokens": 1, "num_kv_heads": 1}
    assert zoo.check_attention("softmax", position=position, **options).passed[-1] == "gradients"


def test_the_named_recipes_are_the_layer_with_other_defaults() -> None:
    def made(name: str, **options) -> SoftmaxAttention:
        return zoo.create_attention(name, embed_dim=E, num_heads=H, **options)

    assert made("qk_norm").q_norm is not None and made("qk_norm").gate is None
    assert made("gated_attention").gate == "elementwise" and made("gated_attention").gate_proj.out_features == E
    qwen3_next = made("gated_attention", qk_norm=True, gate="headwise")
    assert qwen3_next.q_norm is not None and qwen3_next.gate_proj.out_features == H
    sliding = made("sink_attention", window=128)
    assert sliding.sinks.shape == (H,) and (sliding.window, sliding.sink_tokens) == (128, 0)
    assert made("softmax", window=128).sink_tokens == 4  # StreamingLLM's first tokens by default
    assert (made("streaming").window, made("streaming").sink_tokens, made("streaming").sinks) == (128, 4, None)
    plain = made("softmax")
    assert not any(name.startswith(("q_norm", "gate", "sinks")) for name, _ in plain.named_parameters())


def test_bad_options_are_one_line_each() -> None:
    for options, message in [
        ({"gate": "channelwise"}, "gate must be 'elementwise', 'headwise' or None"),
        ({"window": 0}, "window must be a positive integer"),
        ({"sink_tokens": -1}, "sink_tokens must be 0 or a positive integer"),
        ({"conv_size": -1}, "conv_size must be 0 \\(no convolution\\) or a positive kernel size"),
    ]:
        with pytest.raises(ValueError, match=message) as error:
            SoftmaxAttention(E, H, **options)
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="num_kv_heads come from the model"):
        AttentionSpec("softmax", {"num_kv_heads": 2})


def test_the_stack_hands_the_layer_the_models_kv_heads_and_dropout_and_gpt_oss_alternates() -> None:
    model = GPT(11, block_size=16, d_model=E, num_heads=H, num_layers=4, num_kv_heads=1, attention_dropout=0.1,
                position="rope", attention=[{"name": "sink_attention", "window": 4}, "sink_attention"])  # fmt: skip
    layers = [block.attention for block in model.blocks]
    assert [layer.window for layer in layers] == [4, None, 4, None]
    assert all(layer.num_kv_heads == 1 and layer.k_proj.out_features == E // H for layer in layers)
    assert all(layer.score_attention.dropout.p == 0.1 and layer.rotary is not None for layer in layers)
    with torch.no_grad():
        prompt = torch.randint(11, (2, 5))
        cached = torch.stack(list(model.eval().generate(prompt, 9, temperature=0)), 1)
        uncached = torch.stack(list(model.generate(prompt, 9, temperature=0, use_cache=False)), 1)
    assert torch.equal(cached, uncached)
    _, caches = model(prompt, use_cache=True)
    assert [type(c) for c in caches] == [WindowCache, KeyValueCache] * 2
    assert attention_by_layer(model) == [
        "blocks.attention: " + ", ".join(["sink_attention(window=4), sink_attention"] * 2)
    ]


def test_a_transformer_takes_the_layer_for_its_self_attention_and_dot_product_across() -> None:
    model = Transformer(
        30, d_model=E, num_heads=H, num_encoder_layers=1, num_decoder_layers=1, attention="sink_attention"
    )
    block = model.decoder_blocks[0]
    assert type(block.self_attention).__name__ == "SinkAttention"
    assert block.cross_attention.attention_name == "dot_product"


def test_each_recipe_trains_a_tiny_gpt() -> None:
    torch.manual_seed(0)
    names = ["softmax", "qk_norm", "gated_attention", {"name": "sink_attention", "window": 8}]
    names.append({"name": "streaming", "window": 4})
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=5, position="rope", attention=names)
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert all(p.grad is not None for p in model.parameters())


def test_a_gated_attention_gpt_fits_shakespeare_from_the_command_line(shared_data, in_tmp) -> None:
    data = flags("data", path=shared_data / "tinyshakespeare" / "input.txt")
    attention = flags("model", attention="gated_attention", attention_kwargs={"qk_norm": True}, position="rope")
    run = tiny_fit("gpt", *data, *attention, *trainer_budget(8, 2))
    assert hparams(run)["attention"] == "gated_attention"
    layer = zoo.load_checkpoint(str(run / "checkpoints" / "last.ckpt")).model.blocks[0].attention
    assert type(layer).__name__ == "GatedAttention" and layer.q_norm is not None


@pytest.mark.parametrize("scores", ["sigmoid", "softpick", "stick_breaking"])
def test_scores_runs_another_scoring_attention_in_the_heads_with_the_options(scores: str) -> None:
    """With no option on, the layer over ``scores`` is the multi-head ``self`` layer over it; a
    convolution whose filters pass each input through unchanged changes nothing; with trained
    filters and QK-norm, decoding from the cache equals the full forward."""
    x = torch.randn(B, L, E, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    keep = torch.arange(L) >= torch.tensor([0, 2, 4])[:, None]  # left-padded rows
    context = AttentionContext.for_keys(keep, is_causal=True)
    plain = build(scores=scores)
    multi_head = zoo.create_attention("self", embed_dim=E, num_heads=H, attention=scores).double()
    multi_head.load_state_dict(plain.state_dict())
    expected = multi_head(x, context).output
    torch.testing.assert_close(plain(x, context).output, expected, rtol=1e-12, atol=1e-12)
    convolving = build(scores=scores, conv_size=3)
    convolving.load_state_dict(plain.state_dict(), strict=False)
    with torch.no_grad():
        for conv in (convolving.q_conv, convolving.k_conv, convolving.v_conv):
            conv.weight.zero_()[:, 0, -1] = 1.0  # y_t = x_t
    torch.testing.assert_close(convolving(x, context).output, expected, rtol=1e-12, atol=1e-12)
    layer = build(True, scores=scores, conv_size=3, qk_norm=True, gate="headwise").eval()
    with torch.no_grad():
        for conv in (layer.q_conv, layer.k_conv, layer.v_conv):
            conv.weight.normal_()
    decoded, _ = decode(layer, x, keep, 2)
    full = layer(x, context).output
    torch.testing.assert_close(decoded * keep[..., None], full * keep[..., None], rtol=1e-10, atol=1e-10)
    assert f"scores={scores!r}" in repr(layer)


def test_scores_that_cannot_do_what_is_asked_are_refused_when_the_model_is_built() -> None:
    with pytest.raises(ValueError, match="sinks and windows act on softmax over dot products"):
        SoftmaxAttention(E, H, scores="sigmoid", sinks=True)
    with pytest.raises(zoo.IncompatibleAttentionError, match="as the scores of 'softmax'.*both directions"):
        zoo.attention.layer_specs({"name": "softmax", "scores": "stick_breaking"}, None, 2, role="an encoder")
    with pytest.raises(zoo.IncompatibleAttentionError, match="not a scoring attention"):
        SoftmaxAttention(E, H, scores="gla")
