"""MesaNet (``mesanet``) against its paper's equations written here per token, with the ridge
system solved exactly (``torch.linalg.solve``) from the layer's parameters: every form, with and
without padding; the forms equal each other however few conjugate-gradient steps; decoding from
the ``[H | G]`` state; the solver's gradient equal to the exact solve's; float32 at 16k tokens;
the conformance kit; a GPT that learns and decodes from its state."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.helpers.gpt import assert_cached_generation_matches, learn_repeating_sequence
from tests.helpers.layers import assert_every_form, decode_after_prompt, run_layer
from tests.helpers.short_conv import convolved
from zoo.attention.contract.cache import StateCache
from zoo.attention.kernels.mesa import mesa_chunkwise, mesa_recurrent, mesa_weights
from zoo.attention.variants.mesanet import MesaNetAttention
from zoo.models import GPT

EMBED, HEADS, LENGTH = 8, 2, 29  # 29: a multiple of no chunk size below but 1
EPS = 1e-5
CONVERGED = 12  # conjugate-gradient steps that solve a 4-dimensional system to float64's precision
FORMS = [("parallel", 64), ("recurrent", 64), ("auto", 64), ("chunkwise", 5), ("chunkwise", 16)]


def layer(seed: int = 0, **kwargs) -> MesaNetAttention:
    """A float64 layer with its parameters moved off their initial values."""
    torch.manual_seed(seed)
    module = zoo.create_attention("mesanet", embed_dim=EMBED, num_heads=HEADS, **kwargs).double().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return module


def heads(x: Tensor) -> Tensor:
    return x.unflatten(-1, (HEADS, -1)).transpose(1, 2)


def linear(x: Tensor, module: torch.nn.Linear) -> Tensor:
    return x @ module.weight.T + (0 if module.bias is None else module.bias)


def paper_layer(m: MesaNetAttention, x: Tensor, real: Tensor) -> Tensor:
    """Per token: ``H_t = gamma_t H_{t-1} + beta_t k_t k_t^T``, ``G_t = gamma_t G_{t-1} + beta_t
    k_t v_t^T`` (column vectors), ``o_t = G_t^T (H_t + Diag(lam))^{-1} q_t`` by an exact solve;
    ``y = W_o(RMSNorm(o) [* silu(x W_g)])``; a padded token leaves the sums and reads zero."""
    q, k, v = (
        heads(F.silu(convolved(linear(x, p), c, real)))
        for p, c in ((m.q_proj, m.q_conv), (m.k_proj, m.k_conv), (m.v_proj, m.v_conv))
    )
    q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
    beta = torch.sigmoid(linear(x, m.beta_proj)).transpose(1, 2)  # (B, H, T)
    gamma = torch.sigmoid(linear(x, m.decay_proj)).transpose(1, 2)
    lam = torch.diag_embed((F.softplus(m.lambda_params) + m.lambda_lower_bound).view(HEADS, -1))
    dk = q.shape[-1]
    h = x.new_zeros(x.shape[0], HEADS, dk, dk)
    g = x.new_zeros(x.shape[0], HEADS, dk, v.shape[-1])
    outputs = torch.zeros_like(v)
    for t in range(x.shape[1]):
        keep = real[:, t, None, None, None]
        b, a = beta[:, :, t, None, None], gamma[:, :, t, None, None]
        h = torch.where(keep, a * h + b * k[:, :, t, :, None] * k[:, :, t, None, :], h)
        g = torch.where(keep, a * g + b * k[:, :, t, :, None] * v[:, :, t, None, :], g)
        solved = torch.linalg.solve(h + lam, q[:, :, t].unsqueeze(-1))  # (B, H, dk, 1)
        outputs[:, :, t] = torch.where(keep[..., 0], (g.mT @ solved).squeeze(-1), 0.0)
    normed = outputs / (outputs.square().mean(-1, keepdim=True) + EPS).sqrt() * m.norm.weight
    if m.gate is not None:
        normed = normed * F.silu(heads(x @ m.gate.weight.T))
    return linear(normed.transpose(1, 2).flatten(-2), m.out_proj)


def padded(kind: str | None) -> tuple[dict, Tensor]:
    """The mask arguments and the real tokens ``(B, T)``."""
    steps = torch.arange(LENGTH)
    if kind == "right":
        lengths = torch.tensor([LENGTH, LENGTH - 9])
        return {"valid_lens": lengths}, steps < lengths[:, None]
    if kind == "left":
        real = steps >= torch.tensor([0, 7])[:, None]
        return {"attn_mask": real[:, None, :]}, real
    return {}, torch.ones(2, LENGTH, dtype=torch.bool)


@pytest.mark.parametrize("padding", [None, "right", "left"])
@pytest.mark.parametrize("options", [{}, {"output_gate": True}], ids=["plain", "gated"])
def test_every_form_solves_the_papers_ridge_regression(options: dict, padding: str | None) -> None:
    module = layer(cg_steps=CONVERGED, **options)
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    mask, real = padded(padding)
    expected = paper_layer(module, x, real)
    assert_every_form(module, x, expected, FORMS, **mask)


def kernel_inputs(length: int, dtype: torch.dtype = torch.float64, seed: int = 0) -> tuple[Tensor, ...]:
    """Queries, keys (unit), values, betas, log decays (strong and weak) and the ridge of 3 heads."""
    gen = torch.Generator().manual_seed(seed)
    q, k = (F.normalize(torch.randn(1, 3, length, 4, generator=gen, dtype=dtype), dim=-1) for _ in range(2))
    v = torch.randn(1, 3, length, 5, generator=gen, dtype=dtype)
    beta = torch.rand(1, 3, length, generator=gen, dtype=dtype)
    log_decay = F.logsigmoid(4 * torch.randn(1, 3, length, generator=gen, dtype=dtype) + 2)
    lam = 0.25 + torch.rand(3, 4, generator=gen, dtype=dtype)
    return q, k, v, beta, log_decay, lam


def test_the_forms_are_one_computation_even_before_the_solver_converges() -> None:
    """Two conjugate-gradient steps are far from the solution, yet every form takes the same two,
    from a given state, with a padded step: parallel == chunkwise == recurrent == weights @ v."""
    q, k, v, beta, log_decay, lam = kernel_inputs(23)
    state = torch.randn(1, 3, 4, 4 + 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    state[..., :4] = state[..., :4] @ state[..., :4].mT  # H_0 symmetric, positive semi-definite
    mask = torch.ones(1, 1, 23, dtype=torch.bool)
    mask[..., 6] = False
    parallel, final = mesa_chunkwise(
        q, k, v, beta, log_decay, lam, steps=2, chunk_size=None, initial_state=state, mask=mask
    )
    for size in (1, 4, 7):
        chunked, chunked_final = mesa_chunkwise(
            q, k, v, beta, log_decay, lam, steps=2, chunk_size=size, initial_state=state, mask=mask
        )
        torch.testing.assert_close(chunked, parallel, atol=1e-12, rtol=0)
        torch.testing.assert_close(chunked_final, final, atol=1e-12, rtol=0)
    stepped, stepped_final = mesa_recurrent(q, k, v, beta, log_decay, lam, steps=2, state=state, mask=mask)
    torch.testing.assert_close(stepped, parallel, atol=1e-12, rtol=0)
    torch.testing.assert_close(stepped_final, final, atol=1e-12, rtol=0)
    assert parallel[..., 6, :].abs().max() == 0
    weights = mesa_weights(q, k, beta, log_decay, lam, steps=2, mask=mask)
    from_zero, _ = mesa_chunkwise(q, k, v, beta, log_decay, lam, steps=2, chunk_size=None, mask=mask)
    torch.testing.assert_close(weights @ v, from_zero, atol=1e-12, rtol=0)
    converged, _ = mesa_chunkwise(q, k, v, beta, log_decay, lam, steps=CONVERGED, chunk_size=None, mask=mask)
    assert (converged - from_zero).abs().max() > 1e-3  # two steps are not the solution


def exact(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, log_decay: Tensor, lam: Tensor) -> Tensor:
    """``o_t = q_t (H_t + Diag(lam))^{-1} G_t`` with ``H_t``, ``G_t`` summed in full ``(T, T)``
    decay matrices and the systems solved by ``torch.linalg.solve``."""
    cum = log_decay.cumsum(-1)
    decay = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).tril().exp().tril() * beta.unsqueeze(-2)  # (.., t, j)
    h = torch.einsum("...tj,...jd,...je->...tde", decay, k, k) + torch.diag_embed(lam).unsqueeze(-3)
    g = torch.einsum("...tj,...jd,...je->...tde", decay, k, v)
    solved = torch.linalg.solve(h, q.unsqueeze(-1))
    return (solved.mT @ g).squeeze(-2)


def test_the_solvers_gradients_are_the_exact_solutions() -> None:
    inputs = kernel_inputs(19, seed=4)
    weights = torch.randn(1, 3, 19, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    gradients = []
    for run in (
        lambda *xs: mesa_chunkwise(*xs, steps=CONVERGED, chunk_size=6)[0],
        lambda *xs: mesa_recurrent(*xs, steps=CONVERGED)[0],
        exact,
    ):
        leaves = [x.clone().requires_grad_() for x in inputs]
        (run(*leaves) * weights).sum().backward()
        gradients.append([leaf.grad for leaf in leaves])
    for chunked, stepped, expected in zip(*gradients):
        torch.testing.assert_close(chunked, expected, atol=1e-9, rtol=1e-8)
        torch.testing.assert_close(stepped, expected, atol=1e-9, rtol=1e-8)


def test_float32_holds_at_16k_tokens_under_strong_decays() -> None:
    inputs = kernel_inputs(16384, seed=6)
    expected, _ = mesa_chunkwise(*inputs, steps=CONVERGED, chunk_size=64)
    output, _ = mesa_chunkwise(*(x.float() for x in inputs), steps=CONVERGED, chunk_size=64)
    assert torch.isfinite(output).all()
    torch.testing.assert_close(output.double(), expected, atol=1e-4, rtol=0)


def test_decoding_from_a_chunkwise_prompt_equals_the_full_forward() -> None:
    module = layer(chunk_size=6)  # the default 30 steps, in every form
    x = torch.randn(2, LENGTH, EMBED, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    mask, real = padded("left")
    with torch.no_grad():
        expected = run_layer(module, x, is_causal=True, **mask).output
    decoded, cache = decode_after_prompt(module, x, real, prompt=15)
    torch.testing.assert_close(decoded, expected, atol=1e-10, rtol=0)
    assert isinstance(cache, StateCache) and cache.length == LENGTH
    assert cache.state.shape == (2, HEADS, module.key_head_dim, module.key_head_dim + module.head_dim)


def test_it_passes_the_conformance_kit() -> None:
    report = zoo.check_attention("mesanet")
    assert {"causal", "padding", "gradients", "state_decoding", "state_size", "weights"} <= set(report.passed)


def test_a_gpt_learns_a_repeating_sequence_and_decodes_from_its_state() -> None:
    torch.manual_seed(0)
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=2, attention="mesanet")
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert_cached_generation_matches(model)


def test_bad_options_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="cg_steps must be a positive integer"):
        zoo.create_attention("mesanet", embed_dim=EMBED, num_heads=HEADS, cg_steps=0)
    with pytest.raises(ValueError, match=r"lambda_lower_bound must be in \[0, 1.0\)"):
        zoo.create_attention("mesanet", embed_dim=EMBED, num_heads=HEADS, lambda_lower_bound=1.5)
