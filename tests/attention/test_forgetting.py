"""The Forgetting Transformer (``forgetting``) against its equations written out here with loops
in float64, causally and under padding, its decoding, its limit of softmax attention, and a tiny
GPT and a Shakespeare fit that learn with it."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

import zoo
from tests.helpers.cli import flags, hparams, tiny_fit, trainer_budget
from tests.helpers.gpt import learn_repeating_sequence
from tests.helpers.short_conv import convolved
from zoo.attention import AttentionContext, layer_specs
from zoo.attention.contract.cache import ConvolvedCache
from zoo.attention.modules import row_blocks
from zoo.attention.variants import forgetting
from zoo.attention.variants.forgetting import ForgetCache, ForgettingAttention
from zoo.models.gpt import GPT

B, L, E, H = 3, 7, 16, 4


@torch.no_grad()
def reference(layer: ForgettingAttention, x: Tensor, keep: Tensor) -> Tensor:
    """Lin et al.: ``softmax_j(q_i . k_j / sqrt(d) + sum_{j < l <= i} log f_l) v_j`` with
    ``f_l = sigmoid(w . x_l + b)``, one head and query at a time; a position ``keep`` ``(B, L, L)``
    hides from a query is neither read nor forgets for it. With the layer's sinks, if it has them."""
    batch, length, _ = x.shape
    heads, d = layer.num_heads, layer.head_dim
    real = keep[:, -1]  # (B, L): the positions a convolution reads (a key mask's)

    def project(linear: torch.nn.Linear, conv: torch.nn.Conv1d | None, count: int) -> Tensor:
        projected = convolved(x @ linear.weight.T + linear.bias, conv, real)
        return projected.view(batch, length, count, linear.out_features // count)

    q, k, v = (project(linear, conv, heads) for linear, conv in layer_projections(layer))
    forget = torch.sigmoid(x @ layer.forget_proj.weight.T + layer.forget_proj.bias)  # (B, L, H)
    out = torch.zeros(batch, length, heads, d, dtype=x.dtype)
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                seen = [j for j in range(i + 1) if keep[b, i, j]]
                logits = {
                    j: float(q[b, i, h] @ k[b, j, h]) / math.sqrt(d)
                    + sum(math.log(forget[b, m, h]) for m in range(j + 1, i + 1) if keep[b, i, m])
                    for j in seen
                }
                denominator = sum(math.exp(z) for z in logits.values())
                if layer.sinks is not None:
                    denominator += math.exp(float(layer.sinks[h]))
                for j, z in logits.items():
                    out[b, i, h] += math.exp(z) / denominator * v[b, j, h]
    return out.reshape(batch, length, -1) @ layer.out_proj.weight.T + layer.out_proj.bias


def layer_projections(layer: ForgettingAttention) -> list[tuple[torch.nn.Linear, torch.nn.Conv1d | None]]:
    return [(layer.q_proj, layer.q_conv), (layer.k_proj, layer.k_conv), (layer.v_proj, layer.v_conv)]


def built(**options) -> ForgettingAttention:
    torch.manual_seed(0)
    layer = ForgettingAttention(E, H, **options).double()
    with torch.no_grad():  # gates spread over (0, 1): some heads forget fast
        layer.forget_proj.weight.mul_(3.0)
        if layer.sinks is not None:
            layer.sinks.uniform_(-1.0, 1.0)
    return layer


@pytest.mark.parametrize("options", [{}, {"sinks": True}, {"conv_size": 3}])
def test_the_layer_computes_the_papers_equations_with_and_without_padding(options) -> None:
    layer = built(**options)
    x = torch.randn(B, L, E, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    holes = torch.rand(B, L, generator=torch.Generator().manual_seed(2)) > 0.3  # key padding with holes
    per_query = torch.rand(B, L, L, generator=torch.Generator().manual_seed(3)) > 0.3  # a mask per query
    cases = [
        (AttentionContext(is_causal=True), torch.ones(B, L, L, dtype=torch.bool)),
        (AttentionContext.for_keys(holes, is_causal=True), holes[:, None, :].expand(B, L, L)),
    ]
    if "conv_size" not in options:  # a convolution mixes neighbours: a mask must hide a key from every query
        cases.append((AttentionContext.build(B, L, attn_mask=per_query, is_causal=True), per_query))
    for context, keep in cases:
        expected = reference(layer, x, keep)
        torch.testing.assert_close(layer(x, context).output, expected, rtol=1e-10, atol=1e-10)  # fused kernel
        explicit = layer(x, context.replace(need_weights=True)).output
        torch.testing.assert_close(explicit, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("options", [{}, {"sinks": True, "gate": "headwise"}, {"conv_size": 3, "qk_norm": True}])
def test_a_long_input_runs_a_block_of_queries_at_a_time_with_the_whole_grids_output_and_gradients(
    options, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the grid size, blocks of four queries under checkpointing, each over the keys up to
    its last query: rotated, padded with holes or masked per query, the output and every gradient
    are the whole grid's."""
    rope = zoo.create_position("rope", d_model=E, num_heads=H)
    layer = built(position=rope, **options)
    x = torch.randn(B, 11, E, generator=torch.Generator().manual_seed(4), dtype=torch.float64, requires_grad=True)
    holes = torch.rand(B, 11, generator=torch.Generator().manual_seed(5)) > 0.3
    contexts = [AttentionContext(is_causal=True), AttentionContext.for_keys(holes, is_causal=True)]
    if "conv_size" not in options:
        per_query = torch.rand(B, 11, 11, generator=torch.Generator().manual_seed(6)) > 0.3
        contexts.append(AttentionContext.build(B, 11, attn_mask=per_query, is_causal=True))
    seen, decay = [], ForgettingAttention.decay

    def spy(self: ForgettingAttention, gates: Tensor, context: AttentionContext, first: int) -> Tensor:
        seen.append((first, gates.shape[-1]))
        return decay(self, gates, context, first)

    for context in contexts:

        def run(context: AttentionContext = context) -> tuple[Tensor, ...]:
            output = layer(x, context).output
            return (output, *torch.autograd.grad(output.square().sum(), (x, *layer.parameters())))

        monkeypatch.undo()
        whole = run()
        monkeypatch.setattr(row_blocks, "ROW_BLOCK_ELEMENTS", B * H * 11 * 11 - 1)
        monkeypatch.setattr(forgetting, "QUERY_CHUNK", 4)
        monkeypatch.setattr(ForgettingAttention, "decay", spy)
        seen.clear()
        blocked = run()
        assert seen == [(0, 4), (4, 8), (8, 11), (8, 11), (4, 8), (0, 4)], "three blocks, recomputed last first"
        for got, expected in zip(blocked, whole, strict=True):
            torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def test_with_every_gate_at_one_it_is_softmax_attention() -> None:
    layer = built()
    with torch.no_grad():
        layer.forget_proj.weight.zero_()
        layer.forget_proj.bias.fill_(60.0)  # log sigmoid(60) = -9e-27: no forgetting in float64
    softmax = zoo.create_attention("softmax", embed_dim=E, num_heads=H).double()
    softmax.load_state_dict({k: v for k, v in layer.state_dict().items() if not k.startswith("forget_proj")})
    x = torch.randn(B, L, E, dtype=torch.float64)
    context = AttentionContext(is_causal=True)
    torch.testing.assert_close(layer(x, context).output, softmax(x, context).output, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("conv_size", [0, 3])
def test_decoding_token_by_token_equals_the_full_forward(conv_size: int) -> None:
    rope = zoo.create_position("rope", d_model=E, num_heads=H)
    layer = built(qk_norm=True, gate="elementwise", position=rope, conv_size=conv_size).eval()
    x = torch.randn(B, 10, E, dtype=torch.float64)
    keep = torch.arange(10) >= torch.tensor([0, 2, 5])[:, None]  # left-padded rows
    full = layer(x, AttentionContext.for_keys(keep, is_causal=True)).output
    outputs, cache = [], None
    for first, last in [(0, 4), *((t, t + 1) for t in range(4, 10))]:
        output, cache = layer.attend_cached(
            x[:, first:last], cache, AttentionContext.for_keys(keep[:, :last], is_causal=True)
        )
        outputs.append(output)
    torch.testing.assert_close(torch.cat(outputs, 1), full, rtol=1e-10, atol=1e-10)
    assert cache.length == 10 and cache.select(torch.tensor([1])).length == 10
    if conv_size:  # the keys, values and gates beside the convolutions' last conv_size - 1 inputs
        assert isinstance(cache, ConvolvedCache) and [w.shape for w in cache.windows] == [(B, conv_size - 1, E)] * 3
        with pytest.raises(TypeError, match="continues a ForgetCache in a ConvolvedCache"):
            layer.attend_cached(x[:, :1], cache.inner)
        cache = cache.inner
    assert isinstance(cache, ForgetCache) and cache.log_forget.shape == (B, H, 10)
    assert torch.equal(cache.select(torch.tensor([1])).log_forget, cache.log_forget[[1]])


def test_it_is_causal_only_and_refuses_a_window() -> None:
    assert not zoo.get_attention("forgetting").supports_bidirectional
    with pytest.raises(zoo.IncompatibleAttentionError, match="attending in both directions"):
        layer_specs("forgetting", None, 2, role="an encoder")
    with pytest.raises(TypeError, match="window"):
        zoo.AttentionSpec("forgetting", {"window": 8})


def test_the_forgetting_transformer_trains_a_tiny_gpt() -> None:
    torch.manual_seed(0)
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=2, position="none", attention="forgetting")
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert model.blocks[0].attention.forget_proj.weight.grad.abs().sum() > 0


def test_a_forgetting_gpt_fits_shakespeare_from_the_command_line(shared_data, in_tmp) -> None:
    data = flags("data", path=shared_data / "tinyshakespeare" / "input.txt")
    run = tiny_fit("gpt", *data, *flags("model", attention="fox", position="none"), *trainer_budget(8, 2))
    assert hparams(run)["attention"] == "fox"
    layer = zoo.load_checkpoint(str(run / "checkpoints" / "last.ckpt")).model.blocks[0].attention
    assert isinstance(layer, ForgettingAttention)


def test_with_a_short_convolution_it_passes_the_kit_and_refuses_a_mask_per_query() -> None:
    report = zoo.check_attention("forgetting", conv_size=4, position="rope")
    assert "causal" in report.passed and "gradients" in report.passed
    assert "query_masks" in report.skipped
    layer = ForgettingAttention(E, H, conv_size=4)
    assert layer.capabilities.supports_query_mask is False and layer.q_conv.kernel_size == (4,)
    assert ForgettingAttention(E, H, conv_size=0).capabilities.supports_query_mask is True
    assert not layer.capabilities.supports_bidirectional and not layer.capabilities.supports_cross_attention


def test_forget_bias_starts_the_gates_open_so_far_keys_are_read() -> None:
    """With PyTorch's default bias the gates start near 0.5 and a key 40 positions back gets no
    weight; with ``forget_bias=5`` every gate starts at sigmoid(5) and the layer reads it as
    softmax attention nearly does."""
    torch.manual_seed(0)
    x = torch.randn(1, 41, E, dtype=torch.float64)
    default, opened = (ForgettingAttention(E, H, forget_bias=bias).double() for bias in (None, 5.0))
    with torch.no_grad():
        opened.forget_proj.weight.zero_()
        default.forget_proj.weight.zero_()  # the gate is sigmoid(bias) at every position
    assert torch.equal(opened.forget_proj.bias, torch.full((H,), 5.0, dtype=torch.float64))
    context = AttentionContext(is_causal=True, need_weights=True)
    with torch.no_grad():
        far = [float(layer(x, context).weights[0, :, -1, 0].max()) for layer in (default, opened)]
    assert far[0] < 1e-6 < 1e-3 < far[1]
