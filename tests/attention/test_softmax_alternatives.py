"""Sigmoid attention, softpick and stick-breaking attention, the scoring attentions that replace
the softmax: each against its paper's equations written out here in float64 (loops over
queries and keys), causally and under padding, decoding through a multi-head layer's cache as
the full forward, and training a tiny GPT and a Shakespeare fit."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

import zoo
from tests.helpers.cli import flags, hparams, tiny_fit, trainer_budget
from tests.helpers.gpt import learn_repeating_sequence
from zoo.attention import AttentionContext, AttentionSpec
from zoo.models.gpt import GPT

B, LQ, LK, D = 3, 5, 7, 8


def sigmoid_weights(z: list[float], seq_len: int) -> list[float]:
    """Ramapuram et al.: ``sigmoid(z_j - log n)``, each weight on its own."""
    return [1.0 / (1.0 + math.exp(-(s - math.log(seq_len)))) for s in z]


def softpick_weights(z: list[float]) -> list[float]:
    """Zuhri et al.: ``ReLU(exp(z_j) - 1) / (sum_l |exp(z_l) - 1| + eps)``; their code adds ``eps``
    after dividing both sums by ``exp(m)``, ``m`` the largest score (at least 0 here): ``eps exp(m)``."""
    denominator = sum(abs(math.exp(s) - 1.0) for s in z) + 1e-8 * math.exp(max([0.0, *z]))
    return [max(math.exp(s) - 1.0, 0.0) / denominator for s in z]


def expected(name: str, q: Tensor, k: Tensor, v: Tensor, keep: Tensor, causal: bool) -> tuple[Tensor, Tensor]:
    """Output and weights, one query at a time: ``keep`` ``(B, Lq, Lk)`` the pairs the mask allows."""
    batch, num_queries, num_keys = keep.shape
    weights = torch.zeros(batch, num_queries, num_keys, dtype=torch.float64)
    for b in range(batch):
        for i in range(num_queries):
            own = num_keys - num_queries + i  # the query's position among the keys (bottom-right)
            seen = [j for j in range(num_keys) if keep[b, i, j] and (j <= own or not causal)]
            z = [float(q[b, i] @ k[b, j]) / math.sqrt(q.shape[-1]) for j in seen]
            if name == "sigmoid":
                row = sigmoid_weights(z, 16)
            elif name == "softpick":
                row = softpick_weights(z)
            else:  # stick-breaking, from the nearest earlier key backwards; the rest of the stick to the query's own
                beta = {j: 1.0 / (1.0 + math.exp(-s)) for j, s in zip(seen, z)}
                earlier = [j for j in seen if j < own]
                row = []
                for j in seen:
                    if j == own:
                        row.append(math.prod(1.0 - beta[m] for m in earlier))
                    else:
                        row.append(beta[j] * math.prod(1.0 - beta[m] for m in earlier if m > j))
            for j, w in zip(seen, row):
                weights[b, i, j] = w
    return weights @ v, weights


VARIANTS = {"sigmoid": {"seq_len": 16}, "softpick": {}, "stick_breaking": {}}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_computes_its_papers_equations_causally_and_under_masks(name: str) -> None:
    attention = zoo.create_attention(name, **VARIANTS[name])
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, n, D, generator=g, dtype=torch.float64) * 1.5 for n in (LQ, LK, LK))
    lengths = torch.tensor([LK, 4, 1])
    per_query = torch.randint(0, LK + 1, (B, LQ), generator=g)
    cases = [
        ({}, torch.ones(B, LQ, LK, dtype=torch.bool)),
        ({"valid_lens": lengths}, (torch.arange(LK) < lengths[:, None, None]).expand(B, LQ, LK)),
        ({"valid_lens": per_query}, torch.arange(LK) < per_query[..., None]),
    ]
    for causal in (True, False):
        if causal is False and name == "stick_breaking":  # causal only: refused the other way
            with pytest.raises(zoo.IncompatibleAttentionError, match="causal"):
                attention(q, k, v)
            continue
        for masks, keep in cases:
            output, weights = attention(q, k, v, **masks, is_causal=causal, need_weights=True)
            want, want_weights = expected(name, q, k, v, keep, causal)
            torch.testing.assert_close(weights, want_weights, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(output, want, rtol=1e-10, atol=1e-12)


def test_softpick_gives_no_weight_to_negative_scores_yet_passes_them_gradients() -> None:
    attention = zoo.create_attention("softpick")
    q = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]], dtype=torch.float64)
    k = torch.tensor([[[2.0, 0.0], [-1.0, 0.0]]], dtype=torch.float64, requires_grad=True)
    output, weights = attention(q, k, torch.eye(2, dtype=torch.float64)[None], need_weights=True)
    assert weights[0, 0, 1] == 0 and 0 < weights[0, 0, 0] < 1  # the negative score weighs nothing
    assert torch.equal(weights[0, 1, 0], torch.tensor(0.0, dtype=torch.float64))  # nor a query's negative score
    output[0, 0, 0].backward()
    assert k.grad[0, 1].abs().sum() > 0  # the key scored negatively still learns, through the denominator


@pytest.mark.parametrize("name", list(VARIANTS))
def test_decoding_through_a_multi_head_cache_equals_the_full_forward(name: str) -> None:
    torch.manual_seed(0)
    position = zoo.create_position("rope", d_model=16, num_heads=2)
    layer = zoo.SelfAttention(16, 2, AttentionSpec(name, VARIANTS[name], position=position)).double().eval()
    x = torch.randn(B, 9, 16, dtype=torch.float64)
    keep = torch.arange(9) >= torch.tensor([0, 2, 5])[:, None]  # left-padded rows
    full = layer(x, AttentionContext.for_keys(keep, is_causal=True)).output
    outputs, cache = [], None
    for first, last in [(0, 3), *((t, t + 1) for t in range(3, 9))]:
        context = AttentionContext.for_keys(keep[:, :last], is_causal=True)
        output, cache = layer.attend_cached(x[:, first:last], cache, context)
        outputs.append(output)
    real = keep[:, :, None]  # padded queries see nothing real: compare the real ones
    torch.testing.assert_close(torch.cat(outputs, 1) * real, full * real, rtol=1e-10, atol=1e-10)


def test_sigmoid_bias_is_minus_log_n_and_the_capabilities_are_honest() -> None:
    assert zoo.create_attention("sigmoid", seq_len=2048).bias == pytest.approx(
        -7.6246, abs=1e-4
    )  # the paper's -ln 2048
    for name in VARIANTS:
        variant = zoo.get_attention(name)
        assert not variant.normalized_weights and variant.supports_rotary
    assert (
        zoo.get_attention("sigmoid").supports_position_bias
        and not zoo.get_attention("stick_breaking").supports_position_bias
    )
    assert not zoo.get_attention("stick_breaking").supports_bidirectional
    with pytest.raises(zoo.IncompatibleAttentionError, match="stick_breaking"):
        GPT(11, d_model=16, num_heads=2, num_layers=1, position="alibi", attention="stick_breaking")


def test_each_trains_a_tiny_gpt() -> None:
    torch.manual_seed(0)
    attention = [{"name": "sigmoid", "seq_len": 24}, "softpick", "stick_breaking"]
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=3, position="none", attention=attention)
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]


@pytest.mark.parametrize(
    ("name", "kwargs", "position"),
    [("sigmoid", {"seq_len": 32}, "rope"), ("softpick", {}, "rope"), ("stick_breaking", {}, "none")],
)
def test_a_gpt_fits_shakespeare_from_the_command_line(shared_data, in_tmp, name, kwargs, position) -> None:
    data = flags("data", path=shared_data / "tinyshakespeare" / "input.txt")
    options = flags("model", attention=name, attention_kwargs=kwargs, position=position)
    run = tiny_fit("gpt", *data, *options, *trainer_budget(8, 2))
    assert hparams(run)["attention"] == name
    layer = zoo.load_checkpoint(str(run / "checkpoints" / "last.ckpt")).model.blocks[0].attention
    assert layer.attention_name == name
