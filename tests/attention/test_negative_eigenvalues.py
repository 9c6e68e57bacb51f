"""``negative_eigenvalues`` (Grazzi et al., 2025) on ``deltanet``, ``gated_deltanet``, ``kda`` and
``mamba2`` (``mamba1``'s in ``test_older_families``): the decay kernels' signed decay, one sign a
step or one per key dimension, against a per-step loop written here; Mamba-2's
signed layer against its own per-token loop; every form and token-by-token decoding equal, on
inputs that do reach negative eigenvalues; the option off computing the old equations with the old
parameters; and fla's routing (a signed decay refused in one line, ``beta`` in ``(0, 2)`` run)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import zoo
from tests.attention.kernels.inputs import padding_mask, qkv, uniform
from tests.attention.kernels.test_fla_adapter import calls  # noqa: F401  (the fla stand-ins, a fixture)
from tests.attention.test_recurrences_2025 import kda_reference
from tests.attention.test_recurrent import heads, layer, reference, rms_norm
from tests.helpers.layers import decode_after_prompt, run_layer
from tests.helpers.short_conv import convolved
from zoo.attention.build.backends import BackendError, attention_backend, backend_of
from zoo.attention.kernels.decay import decay_chunkwise, decay_recurrent, decay_weights
from zoo.attention.kernels.fla import SIGNED_DECAY_REFUSAL, fla_chunk, fla_refusal
from zoo.attention.kernels.state_scan import decay_scan
from zoo.attention.modules import recurrent as recurrent_module
from zoo.attention.modules.gating import positive_and_negative
from zoo.attention.modules.recurrence import Recurrence

LENGTH = 37  # a multiple of no chunk size below
#: each family with the option on; Mamba-2 with B and C shared by its two heads and with one group a head
VARIANTS = [
    pytest.param("deltanet", {}, id="deltanet"),
    pytest.param("gated_deltanet", {}, id="gated_deltanet"),
    pytest.param("kda", {}, id="kda"),
    pytest.param("mamba2", {}, id="mamba2-shared"),
    pytest.param("mamba2", {"ngroups": 2}, id="mamba2-per-head"),
]


def signed_layer(family: str, **options) -> recurrent_module.RecurrentLayer:
    """A float64 layer with the option on, its parameters moved off their initial values; Mamba-2's
    ``A`` raised so that many steps' ``exp(-dt A)`` fall below 1/2 (a negative ``a_t``)."""
    module = layer(family, negative_eigenvalues=True, **options)
    if family == "mamba2":
        with torch.no_grad():
            module.decay.A_log.add_(math.log(20.0))
    return module


def inputs(seed: int) -> Tensor:
    return torch.randn(2, LENGTH, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def assert_negative_eigenvalues(module: recurrent_module.RecurrentLayer, x: Tensor) -> None:
    """Some steps' transitions have a negative eigenvalue (``beta > 1``, ``a_t < 0``), and some not."""
    with torch.no_grad():
        if hasattr(module, "beta"):
            beta = module.beta.strengths(x, x.dtype)
            assert (beta > 1).any() and (beta < 1).any() and (beta > 0).all() and (beta < 2).all()
        else:
            a = 2 * module.decay(x, x.dtype)[1].exp() - 1
            assert (a < 0).any() and (a > 0).any()


# -- the kernels -----------------------------------------------------------------------------------


def signed_loop(q: Tensor, k: Tensor, v: Tensor, a: Tensor, state: Tensor, real: Tensor) -> tuple[Tensor, Tensor]:
    """``S_t = a_t S_{t-1} + k_t^T v_t``, ``o_t = q_t S_t`` per step, ``a_t`` signed ``(..., T)``;
    a padded step (``real`` False) leaves the state alone and reads zero."""
    outputs = []
    for t in range(q.shape[-2]):
        updated = a[..., t, None, None] * state + k[..., t, :, None] * v[..., t, None, :]
        state = torch.where(real[..., t, None, None], updated, state)
        outputs.append(torch.where(real[..., t, None], (q[..., t, None, :] @ state).squeeze(-2), 0.0))
    return torch.stack(outputs, -2), state


def signed_decays(shape: tuple[int, ...], generator: torch.Generator) -> Tensor:
    """Decays uniform in ``[-1, 1]`` with exact zeros and exact -1 among them."""
    a = uniform(*shape, low=-1.0, high=1.0, generator=generator)
    a[..., 3], a[..., 10], a[..., 11] = 0.0, -1.0, 0.0
    return a


@pytest.mark.parametrize("shared", [False, True], ids=["per-head", "shared-qk"])
def test_the_decay_kernels_signed_decay_is_the_per_step_loop(shared: bool) -> None:
    """Every form, from a state, under left and right padding, against the loop; the state
    returned continues exactly; the weights are the parallel form's."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = qkv(29, 5, 4, generator)
    if shared:  # Mamba-2's B and C, one per group: a head axis of 1 over the values' 3
        q, k = q[:, :1], k[:, :1]
    a = signed_decays((2, 3, 29), generator)
    initial = uniform(2, 3, 5, 4, low=-1.0, high=1.0, generator=generator)
    real = padding_mask(29)
    expected, expected_state = signed_loop(q, k, v, a, initial, real)
    tiny = torch.finfo(a.dtype).tiny  # a zero decay's log magnitude, clamped (as positive_and_negative does)
    log_decay, negative = a.abs().clamp_min(tiny).log().unsqueeze(-1), (a < 0).unsqueeze(-1)
    runs = {
        f"chunkwise {size}": lambda size=size: decay_chunkwise(
            q, k, v, log_decay, chunk_size=size, initial_state=initial, mask=real, negative=negative
        )
        for size in (None, 1, 5, 8, 64)
    }
    runs["recurrent"] = lambda: decay_recurrent(q, k, v, log_decay, state=initial, mask=real, negative=negative)
    for name, run in runs.items():
        output, state = run()
        torch.testing.assert_close(output, expected, atol=1e-10, rtol=0, msg=lambda m, name=name: f"{name}: {m}")
        torch.testing.assert_close(state, expected_state, atol=1e-10, rtol=0, msg=lambda m, name=name: f"{name}: {m}")

    first, state = decay_chunkwise(q[..., :17, :], k[..., :17, :], v[..., :17, :], log_decay[..., :17, :],
                                   chunk_size=5, initial_state=initial, mask=real[..., :17], negative=negative[..., :17, :])  # fmt: skip
    second, _ = decay_chunkwise(q[..., 17:, :], k[..., 17:, :], v[..., 17:, :], log_decay[..., 17:, :],
                                chunk_size=5, initial_state=state, mask=real[..., 17:], negative=negative[..., 17:, :])  # fmt: skip
    torch.testing.assert_close(torch.cat([first, second], -2), expected, atol=1e-10, rtol=0)

    weights = decay_weights(q, k, log_decay, mask=real, negative=negative)
    from_zero, _ = signed_loop(q, k, v, a, torch.zeros_like(initial), real)
    torch.testing.assert_close(weights @ v, from_zero, atol=1e-10, rtol=0)


def test_a_signed_decay_per_key_dimension_is_the_per_step_loop() -> None:
    """Mamba-1's signs, one per key dimension: every form (the chunks' weight blocks, the scan of
    states, the parallel form, the recurrent one) from a state under padding against the loop, and
    the state returned continues exactly."""
    generator = torch.Generator().manual_seed(5)
    q, k, v = qkv(29, 5, 2, generator)
    q, k = q[:, :1], k[:, :1]  # shared by the three heads, as Mamba's B and C by its channels
    a = signed_decays((2, 3, 5, 29), generator).transpose(-1, -2)  # (B, H, T, dk)
    initial = uniform(2, 3, 5, 2, low=-1.0, high=1.0, generator=generator)
    real = padding_mask(29)
    expected, state = [], initial
    for t in range(29):
        updated = a[..., t, :, None] * state + k[..., t, :, None] * v[..., t, None, :]
        state = torch.where(real[..., t, None, None], updated, state)
        expected.append(torch.where(real[..., t, None], (q[..., t, None, :] @ state).squeeze(-2), 0.0))
    expected, expected_state = torch.stack(expected, -2), state
    tiny = torch.finfo(a.dtype).tiny
    log_decay, negative = a.abs().clamp_min(tiny).log(), a < 0
    runs = {
        f"chunkwise {size}": lambda size=size: decay_chunkwise(
            q, k, v, log_decay, chunk_size=size, initial_state=initial, mask=real, negative=negative
        )
        for size in (None, 1, 5, 64)
    }
    for size in (1, 4, 29):
        runs[f"scan {size}"] = lambda size=size: decay_scan(
            q, k, v, log_decay, chunk_size=size, initial_state=initial, mask=real, negative=negative
        )
    runs["recurrent"] = lambda: decay_recurrent(q, k, v, log_decay, state=initial, mask=real, negative=negative)
    for name, run in runs.items():
        output, state = run()
        torch.testing.assert_close(output, expected, atol=1e-10, rtol=0, msg=lambda m, name=name: f"{name}: {m}")
        torch.testing.assert_close(state, expected_state, atol=1e-10, rtol=0, msg=lambda m, name=name: f"{name}: {m}")
    first, state = decay_scan(q[..., :17, :], k[..., :17, :], v[..., :17, :], log_decay[..., :17, :], chunk_size=4,
                              initial_state=initial, mask=real[..., :17], negative=negative[..., :17, :])  # fmt: skip
    second, _ = decay_chunkwise(q[..., 17:, :], k[..., 17:, :], v[..., 17:, :], log_decay[..., 17:, :],
                                chunk_size=5, initial_state=state, mask=real[..., 17:], negative=negative[..., 17:, :])  # fmt: skip
    torch.testing.assert_close(torch.cat([first, second], -2), expected, atol=1e-10, rtol=0)
    weights = decay_weights(q, k, log_decay, mask=real, negative=negative)
    torch.testing.assert_close(weights @ v, decay_chunkwise(q, k, v, log_decay, mask=real, negative=negative)[0])
    with pytest.raises(ValueError, match="the delta rule \\(beta\\) has none"):
        Recurrence(q, k, v, None, torch.ones(2, 3, 29), negative_decay=torch.zeros(2, 3, 29, 1, dtype=torch.bool))


def test_positive_and_negative_is_two_a_minus_one_and_finite_where_it_is_zero() -> None:
    near_one = -1e-9  # log(2 e^x - 1) = 2x - x^2 + O(x^3): the series, to float64 precision near |a| = 1
    log_decay = torch.cat(
        [
            -torch.rand(200, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * 5,
            torch.tensor([0.0, -math.log(2.0), near_one], dtype=torch.float64),
        ]
    )
    log_decay.requires_grad_()
    log_magnitude, negative = positive_and_negative(log_decay)
    a = 2 * log_decay.exp() - 1
    assert torch.equal(negative, a < 0)
    assert log_magnitude[-3] == 0.0 and abs(log_magnitude[-1] - (2 * near_one - near_one**2)) < 1e-24
    nonzero = a.abs() > 1e-6  # nearer zero, the reference's own 2 e^x - 1 cancels to a few digits
    torch.testing.assert_close(log_magnitude[nonzero], a[nonzero].abs().log(), atol=1e-12, rtol=0)
    assert abs(a[-2].item()) < 1e-15 and log_magnitude[-2] == math.log(torch.finfo(torch.float64).eps)  # clamped
    log_magnitude.sum().backward()
    assert torch.isfinite(log_decay.grad).all()


# -- the layers ------------------------------------------------------------------------------------


def mamba2_signed_reference(m: recurrent_module.RecurrentLayer, x: Tensor) -> Tensor:
    """Mamba-2 with ``a_t = 2 exp(-dt_t A) - 1``: ``h_t = a_t h_{t-1} + B_t^T (dt_t x_t)``,
    ``y_t = C_t h_t + D x_t``, gated RMSNorm over each group, token by token (no padding)."""
    real = torch.ones(x.shape[:2], dtype=torch.bool)
    projected = [F.linear(x, p.weight, p.bias) for p in (m.q_proj, m.k_proj, m.v_proj)]
    c, b, u = (F.silu(convolved(t, conv, real)) for t, conv in zip(projected, (m.q_conv, m.k_conv, m.v_conv)))
    c, b = (heads(t, m.qk_heads).repeat_interleave(m.num_heads // m.qk_heads, dim=1) for t in (c, b))
    u = heads(u)
    dt = heads(F.softplus(x @ m.decay.proj.weight.T + m.decay.dt_bias))  # (B, H, T, 1)
    a = 2 * torch.exp(-dt * m.decay.A_log.exp()[:, None, None]) - 1
    state = x.new_zeros(x.shape[0], m.num_heads, u.shape[-1], c.shape[-1])
    outputs = torch.zeros_like(u)
    for t in range(x.shape[1]):
        state = a[:, :, t, :, None] * state + dt[:, :, t, :, None] * u[:, :, t, :, None] * b[:, :, t, None, :]
        outputs[:, :, t] = (state @ c[:, :, t, :, None]).squeeze(-1) + m.D[:, None] * u[:, :, t]
    gated = (outputs * F.silu(heads(x @ m.gate.weight.T))).transpose(1, 2)  # (B, T, H, hd)
    groups = gated.reshape(*gated.shape[:2], m.ngroups, -1)
    normed = rms_norm(groups, 1.0).flatten(-2) * m.norm_weight
    return m.out_proj(normed)


@pytest.mark.parametrize("ngroups", [1, 2])
def test_mamba2_s_signed_decay_is_its_recurrence_with_two_a_minus_one(ngroups: int) -> None:
    module, x = signed_layer("mamba2", ngroups=ngroups), inputs(1)
    assert_negative_eigenvalues(module, x)
    for mode in ("parallel", "chunkwise"):
        module.mode, module.chunk_size = mode, 8
        with torch.no_grad():
            output = run_layer(module, x, is_causal=True).output
        torch.testing.assert_close(output, mamba2_signed_reference(module, x), atol=1e-10, rtol=0, msg=mode)


@pytest.mark.parametrize("padding", [None, "left"])
@pytest.mark.parametrize(("family", "options"), VARIANTS)
def test_every_form_and_decoding_agree_with_negative_eigenvalues(family: str, options: dict, padding: str) -> None:
    """Parallel, chunkwise (7, 16) and recurrent forms, and a prompt of 20 tokens (chunks of 7)
    followed by one token at a time from the cache: all the same output, gradients included."""
    module, x = signed_layer(family, **options), inputs(2)
    assert_negative_eigenvalues(module, x)
    real = torch.ones(2, LENGTH, dtype=torch.bool)
    if padding == "left":
        real[1, :9] = False
    mask = {"attn_mask": real[:, None, :]}
    module.mode = "recurrent"
    with torch.no_grad():
        expected = run_layer(module, x, is_causal=True, **mask).output
    for mode, chunk_size in (("parallel", None), ("chunkwise", 7), ("chunkwise", 16), ("auto", 16)):
        module.mode, module.chunk_size = mode, chunk_size
        with torch.no_grad():
            output = run_layer(module, x, is_causal=True, **mask).output
        torch.testing.assert_close(output, expected, atol=1e-10, rtol=0, msg=lambda m, f=mode: f"{f}: {m}")
    module.mode, module.chunk_size = "auto", 7
    decoded, _ = decode_after_prompt(module, x, real, prompt=20)
    torch.testing.assert_close(decoded, expected, atol=1e-10, rtol=0)

    gradients = []
    for mode in ("parallel", "chunkwise"):
        module.mode = mode
        module.zero_grad()
        leaf = x.clone().requires_grad_()
        run_layer(module, leaf, is_causal=True, **mask).output.square().sum().backward()
        gradients.append([leaf.grad, *(p.grad for p in module.parameters())])
    for parallel, chunkwise in zip(*gradients):
        torch.testing.assert_close(chunkwise, parallel, atol=1e-9, rtol=1e-8)


@pytest.mark.parametrize("family", ["deltanet", "gated_deltanet", "kda", "mamba2"])
def test_off_by_default_the_old_equations_on_the_old_parameters(family: str) -> None:
    """A default-built layer is one built with the option off: the same parameters (the keys a
    stored model has) and the same output, bit for bit, which is the papers' layer as the zoo
    computed it before the option (the references of the recurrent tests); the option on reads the
    same parameters and computes something else."""
    default, off, on = layer(family), layer(family, negative_eigenvalues=False), signed_layer(family)
    assert default.state_dict().keys() == on.state_dict().keys()
    assert all(torch.equal(value, off.state_dict()[key]) for key, value in default.state_dict().items())
    x, real = inputs(3), torch.ones(2, LENGTH, dtype=torch.bool)
    with torch.no_grad():
        output = run_layer(default, x, is_causal=True).output
        assert torch.equal(output, run_layer(off, x, is_causal=True).output)
        old = kda_reference(default, x, real) if family == "kda" else reference(default, x, real)
        torch.testing.assert_close(output, old, atol=1e-10, rtol=0)
        on.load_state_dict(default.state_dict())
        assert (run_layer(on, x, is_causal=True).output - output).abs().max() > 1e-3


# -- flash-linear-attention's routing --------------------------------------------------------------


def test_fla_refuses_a_signed_decay_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    module, x = signed_layer("mamba2"), inputs(4)
    with (
        attention_backend("fla"),
        pytest.raises(BackendError, match="it cannot run this call: its kernels take decays"),
    ):
        run_layer(module, x, is_causal=True)  # on the CPU too: the sign is the reason, before the device
    monkeypatch.setattr(recurrent_module, "fla_available", lambda device: True)
    assert backend_of(module, "cuda") == "zoo"  # auto falls back to the zoo's forms
    assert backend_of(layer("mamba2"), "cuda") == "fla"
    q, k, v = qkv(6, 4, 3, torch.Generator().manual_seed(5))
    recurrence = Recurrence(q, k, v, torch.zeros(2, 3, 6, 1), negative_decay=torch.ones(2, 3, 6, 1, dtype=torch.bool))
    assert fla_refusal(recurrence, None) == SIGNED_DECAY_REFUSAL
    with pytest.raises(ValueError, match="fla_chunk cannot run this recurrence: its kernels take decays in"):
        fla_chunk(recurrence)


@pytest.mark.parametrize("family", ["deltanet", "gated_deltanet", "kda"])
def test_fla_runs_the_delta_rule_with_beta_up_to_two(family: str, calls, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setattr(recurrent_module, "fla_available", lambda device: True)
    module, x = signed_layer(family, chunk_size=16), inputs(6)
    assert backend_of(module, "cuda") == "fla"
    with torch.no_grad():
        with attention_backend("zoo"):
            expected = run_layer(module, x, is_causal=True).output
        with attention_backend("fla"):
            fused = run_layer(module, x, is_causal=True).output  # (stand-ins of) fla's kernels
    assert calls, "the fla backend was forced but did not run"
    torch.testing.assert_close(fused, expected, rtol=1e-9, atol=1e-10)


# -- where the decays start ---------------------------------------------------------------------------


def test_mamba2_s_initial_ranges_follow_mamba_ssm_and_can_start_negative() -> None:
    """``dt_range`` and ``a_range`` set where ``softplus(dt_bias)`` and ``A`` start (mamba_ssm's
    ``dt_min``/``dt_max``, ``A_init_range``): the defaults draw the same numbers as before, and a
    wider step-size range starts some heads' signed transitions below zero, which the default's
    ``2 exp(-dt A) - 1`` (``dt A <= 1.6``) mostly does not."""

    def built(**options) -> torch.nn.Module:
        torch.manual_seed(0)
        return zoo.create_attention("mamba2", embed_dim=64, num_heads=64, d_state=4, **options)

    default, stated = built(), built(dt_range=(1e-3, 1e-1), a_range=(1.0, 16.0))
    assert all(torch.equal(value, stated.state_dict()[key]) for key, value in default.state_dict().items())
    wide = built(dt_range=(0.1, 1.0), a_range=(1.0, 2.0))
    dt = F.softplus(wide.decay.dt_bias.detach())
    assert 0.1 * 0.999 <= dt.min() and dt.max() <= 1.0 * 1.001
    assert 1.0 <= wide.decay.A_log.exp().min() and wide.decay.A_log.exp().max() <= 2.0
    start = 2 * torch.exp(-dt * wide.decay.A_log.detach().exp()) - 1
    assert (start < 0).float().mean() > 0.2
    for bad in ({"dt_range": (0.0, 0.1)}, {"dt_range": (0.5, 0.1)}, {"a_range": (-1.0, 2.0)}):
        with pytest.raises(ValueError, match=r"is \(low, high\) with 0 <=? low <= high"):
            built(**bad)
