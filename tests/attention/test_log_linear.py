"""Log-linear attention (``log_linear_mamba2``, ``log_linear_gated_deltanet``) against the paper's
definition written here from scratch in float64: each query's prefix cut into Fenwick buckets by
the tree's own walk (not the kernels' ``bit_length(i XOR j)``), the decayed score of every key (a
product of step decays, or of the gated delta rule's transition matrices) times the query's weight
for its bucket's level. Then every form equal, decoding from the tree of states equal to one pass
with a logarithmic number of levels, left padding, the refusals, the conformance kit and a GPT."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.layers import decode_after_prompt, run_layer
from zoo.attention.contract.context import AttentionContext
from zoo.attention.kernels.decay import decay_chunkwise
from zoo.attention.kernels.log_linear import log_linear_chunkwise, log_linear_recurrent, log_linear_weights
from zoo.attention.modules.log_linear_layer import LevelCache
from zoo.errors import ConfigurationError
from zoo.models import GPT, RecallLM

FAMILIES = ["log_linear_mamba2", "log_linear_gated_deltanet"]
EMBED, HEADS, LENGTH = 8, 2, 37  # 37 steps: six Fenwick levels, no whole number of chunks
OPTIONS = {"log_linear_mamba2": {"d_state": 4, "expand": 1.0}}


def fenwick_buckets(i: int) -> dict[int, int]:
    """Level of each position of query ``i``'s prefix, by the tree's walk: the token itself at level
    0, then from ``end = i`` down, the block ``[end - low, end)`` with ``low`` the lowest set bit of
    ``end``, at level ``log2(low) + 1``."""
    levels, end = {i: 0}, i
    while end > 0:
        low = end & -end
        levels.update({j: int(math.log2(low)) + 1 for j in range(end - low, end)})
        end -= low
    return levels


def paper_outputs(q: Tensor, k: Tensor, v: Tensor, lam: Tensor, log_decay: Tensor, beta: Tensor | None) -> Tensor:
    """``o_i = sum_{j <= i} lambda_i^(level(i, j)) W_ij v_j`` for one head ``(T, d)``, with ``W_ij`` the
    decayed score: ``(q_i . k_j) a_{j+1} ... a_i`` (a scalar decay), or ``beta_j q_i A_i ... A_{j+1}
    k_j^T`` with ``A_t = a_t (I - beta_t k_t^T k_t)`` (the gated delta rule, row vectors)."""
    length, dk = k.shape
    decay = log_decay.exp()
    output = torch.zeros(length, v.shape[-1], dtype=v.dtype)
    for i in range(length):
        for j, level in fenwick_buckets(i).items():
            if beta is None:
                score = (q[i] @ k[j]) * torch.prod(decay[j + 1 : i + 1])
            else:
                carried = torch.eye(dk, dtype=q.dtype)
                for t in range(i, j, -1):  # A_i ... A_{j+1}
                    carried = carried @ (decay[t] * (torch.eye(dk, dtype=q.dtype) - beta[t] * torch.outer(k[t], k[t])))
                score = beta[j] * (q[i] @ carried @ k[j])
            output[i] += lam[i, level] * score * v[j]
    return output


def kernel_inputs(delta: bool, seed: int = 0, length: int = LENGTH) -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, HEADS, length, 4, generator=g, dtype=torch.float64) for _ in range(3))
    k = F.normalize(k, dim=-1)
    lam = torch.rand(2, HEADS, length, 7, generator=g, dtype=torch.float64) * 2
    log_decay = -0.4 * torch.rand(2, HEADS, length, generator=g, dtype=torch.float64)
    beta = torch.rand(2, HEADS, length, generator=g, dtype=torch.float64) if delta else None
    return q, k, v, lam, log_decay, beta


@pytest.mark.parametrize("delta", [False, True], ids=["decay", "delta_rule"])
def test_every_form_is_the_papers_definition(delta: bool) -> None:
    q, k, v, lam, log_decay, beta = kernel_inputs(delta)
    expected = torch.stack(
        [
            torch.stack([paper_outputs(*(x[b, h] for x in (q, k, v, lam, log_decay)), beta if beta is None else beta[b, h]) for h in range(HEADS)])
            for b in range(2)
        ]
    )  # fmt: skip
    forms = {
        "weights": log_linear_weights(q, k, lam, log_decay, beta) @ v,
        "parallel": log_linear_chunkwise(q, k, v, lam, log_decay, beta, chunk_size=None)[0],
        "chunkwise 4": log_linear_chunkwise(q, k, v, lam, log_decay, beta, chunk_size=4)[0],
        "chunkwise 16": log_linear_chunkwise(q, k, v, lam, log_decay, beta, chunk_size=16)[0],
        "recurrent": log_linear_recurrent(q, k, v, lam, log_decay, beta)[0],
    }
    for form, output in forms.items():
        torch.testing.assert_close(output, expected, atol=1e-10, rtol=1e-9, msg=form)


def test_with_every_level_weight_one_it_is_the_recurrence_itself() -> None:
    q, k, v, _, log_decay, _ = kernel_inputs(False)
    ones = torch.ones(*q.shape[:-1], 7, dtype=q.dtype)
    plain, _ = decay_chunkwise(q, k, v, log_decay.unsqueeze(-1), chunk_size=None)
    torch.testing.assert_close(log_linear_chunkwise(q, k, v, ones, log_decay, chunk_size=8)[0], plain)


@pytest.mark.parametrize("delta", [False, True], ids=["decay", "delta_rule"])
def test_the_forms_agree_under_padding_and_hand_over_the_same_tree(delta: bool) -> None:
    """Left padding and a hole: padded steps are identity steps that do not advance the counter,
    so a padded row computes what its real tokens alone do; every form ends in the same level states."""
    q, k, v, lam, log_decay, beta = kernel_inputs(delta, seed=1)
    real = (torch.arange(LENGTH) >= torch.tensor([0, 6])[:, None]) & (torch.arange(LENGTH) != 20)
    mask = real[:, None]
    runs = {
        "parallel": log_linear_chunkwise(q, k, v, lam, log_decay, beta, chunk_size=None, mask=mask),
        "chunkwise": log_linear_chunkwise(q, k, v, lam, log_decay, beta, chunk_size=8, mask=mask),
        "recurrent": log_linear_recurrent(q, k, v, lam, log_decay, beta, mask=mask),
    }
    for form, (output, state) in runs.items():
        torch.testing.assert_close(output, runs["recurrent"][0], atol=1e-11, rtol=1e-9, msg=form)
        torch.testing.assert_close(state, runs["recurrent"][1], atol=1e-11, rtol=1e-9, msg=form)
        assert (output.transpose(1, 2)[~real] == 0).all()
    kept = real[1]  # row 1 alone, its padding removed
    alone = log_linear_recurrent(
        *(x[1:, :, kept] for x in (q, k, v, lam, log_decay)), None if beta is None else beta[1:, :, kept]
    )[0]
    torch.testing.assert_close(runs["chunkwise"][0][1:, :, kept], alone, atol=1e-11, rtol=1e-9)


@pytest.mark.parametrize("delta", [False, True], ids=["decay", "delta_rule"])
def test_the_chunkwise_forms_gradients_are_the_parallel_forms(delta: bool) -> None:
    inputs = [x for x in kernel_inputs(delta, seed=4, length=21) if x is not None]
    mask = (torch.arange(21) >= torch.tensor([0, 4])[:, None])[:, None]
    weights = torch.randn(2, HEADS, 21, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    gradients = []
    for chunk_size in (None, 4):
        leaves = [x.clone().requires_grad_() for x in inputs]
        q, k, v, lam, log_decay, *beta = leaves
        output, _ = log_linear_chunkwise(
            q, k, v, lam, log_decay, *beta, chunk_size=chunk_size, mask=mask, final_state=False
        )
        (output * weights).sum().backward()
        gradients.append([leaf.grad for leaf in leaves])
    for parallel, chunkwise in zip(*gradients):
        torch.testing.assert_close(chunkwise, parallel, atol=1e-10, rtol=1e-8)


def layer(family: str, seed: int = 0, **kwargs) -> torch.nn.Module:
    """A float64 layer whose parameters are moved off their initial values (the level scales all
    one would hide a level mixed up with another)."""
    torch.manual_seed(seed)
    module = zoo.create_attention(family, embed_dim=EMBED, num_heads=HEADS, **(OPTIONS.get(family, {}) | kwargs))
    module = module.double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


@pytest.mark.parametrize("family", FAMILIES)
def test_the_layers_forms_agree_and_decoding_keeps_a_logarithmic_tree(family: str) -> None:
    x = torch.randn(3, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    real = torch.arange(LENGTH) >= torch.tensor([0, 3, 9])[:, None]
    valid = real.sum(-1)
    outputs = {}
    for mode, chunk in [("parallel", None), ("chunkwise", 4), ("chunkwise", 16), ("recurrent", None)]:
        module = layer(family, mode=mode, chunk_size=chunk)
        context = AttentionContext.for_keys(real, is_causal=True)
        outputs[f"{mode} {chunk}"] = module(x, context).output
    for form, output in outputs.items():
        torch.testing.assert_close(output, outputs["parallel None"], atol=1e-11, rtol=1e-9, msg=form)
    module = layer(family, chunk_size=8)  # auto: the chunkwise form for the prompt
    decoded, cache = decode_after_prompt(module, x, real, prompt=11)
    torch.testing.assert_close(decoded, outputs["parallel None"], atol=1e-11, rtol=1e-9)
    assert (
        isinstance(cache, LevelCache) and cache.length == LENGTH and cache.counts.flatten().tolist() == valid.tolist()
    )
    assert cache.levels == math.ceil(math.log2(int(valid.max()))) + 1  # 37 real tokens: 6 levels
    alone = module(x[2:, 9:], AttentionContext(is_causal=True)).output  # the padded row's tokens alone
    torch.testing.assert_close(outputs["parallel None"][2:, 9:], alone, atol=1e-11, rtol=1e-9)
    levels, cache = [], None
    for t in range(130):  # the tree grows as the logarithm of the positions seen
        _, cache = module.attend_cached(x[:1, t % LENGTH : t % LENGTH + 1], cache)
        levels.append(cache.levels)
    assert levels == [math.ceil(math.log2(t)) + 1 for t in range(1, 131)]


@pytest.mark.parametrize("family", FAMILIES)
def test_what_the_layers_cannot_take_is_refused_in_one_line(family: str) -> None:
    module = zoo.create_attention(family, embed_dim=EMBED, num_heads=HEADS, num_levels=3, **OPTIONS.get(family, {}))
    x = torch.randn(1, 5, EMBED)
    with pytest.raises(ConfigurationError, match="over 5 positions needs 4 Fenwick levels, but num_levels is 3: raise"):
        run_layer(module, x, is_causal=True)
    _, cache = module.attend_cached(x[:, :4], None)  # four positions fit three levels; the fifth does not
    with pytest.raises(ConfigurationError, match="over 5 positions needs 4 Fenwick levels"):
        module.attend_cached(x[:, 4:], cache)
    with pytest.raises(ValueError, match="chunk_size must be a power of two .* got 12: use 8 or 16"):
        zoo.create_attention(family, embed_dim=EMBED, num_heads=HEADS, chunk_size=12)
    with pytest.raises(ValueError, match="num_levels must be a positive integer"):
        zoo.create_attention(family, embed_dim=EMBED, num_heads=HEADS, num_levels=0)


def test_log_linear_mamba2_refuses_negative_eigenvalues() -> None:
    with pytest.raises(ValueError, match="negative_eigenvalues is not supported"):
        zoo.create_attention("log_linear_mamba2", embed_dim=EMBED, num_heads=HEADS, negative_eigenvalues=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_layers_keep_the_attention_contract(family: str) -> None:
    report = zoo.testing.check_attention(family, embed_dim=EMBED, num_heads=HEADS, **OPTIONS.get(family, {}))
    assert {"padding", "causal", "weights", "gradients"} <= set(report.passed)


def test_the_chunkwise_form_stays_finite_and_close_in_float32_on_long_strongly_decaying_inputs() -> None:
    q, k, v, lam, log_decay, beta = (
        None if x is None else x[:1, :1] for x in kernel_inputs(False, seed=3, length=2048)
    )
    log_decay = log_decay * 40  # down to exp(-16) a step: decays summed naively would underflow
    lam = F.pad(lam, (0, 6))
    exact, _ = log_linear_chunkwise(q, k, v, lam, log_decay, chunk_size=64, final_state=False)
    single, _ = log_linear_chunkwise(*(x.float() for x in (q, k, v, lam, log_decay)), chunk_size=64, final_state=False)
    assert torch.isfinite(single).all()
    torch.testing.assert_close(single.double(), exact, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("model_class", [GPT, RecallLM])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_gpt_and_the_recall_model_learn_a_repeating_sequence_and_decode_from_the_tree(
    family: str, model_class: type[GPT]
) -> None:
    torch.manual_seed(0)
    model = model_class(8, block_size=16, d_model=16, num_heads=2, num_layers=2, attention=family)
    tokens = torch.arange(17).remainder(6).repeat(8, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        logits, _ = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    model = model.double().eval()
    prompt = torch.randint(8, (2, 5), generator=torch.Generator().manual_seed(5))
    cached = torch.stack(list(model.generate(prompt, 10, temperature=0)), 1)
    assert torch.equal(cached, torch.stack(list(model.generate(prompt, 10, temperature=0, use_cache=False)), 1))
