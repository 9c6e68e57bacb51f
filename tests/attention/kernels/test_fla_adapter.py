"""The adapter to flash-linear-attention's chunk kernels, on the CPU: fla's Triton kernels cannot run
here, so the ``fla.ops`` modules it imports are replaced by references written below from fla's
documentation (a loop over tokens in fla's layout and conventions: ``(B, T, H, d)`` inputs, a
``(B, H, dk, dv)`` state read as ``o_t = scale * q_t S_t``, log decays per step, ``scale``
``dk ** -0.5`` unless given), which also keep fla's own checks (shapes, ``chunk_delta_rule``'s
refusal of float32). Each family's recurrence then gives, through the adapter, the output, final
state and gradients of the zoo's own chunkwise form in float64: what the layout, scale, gate,
group and padding conversions must preserve. The real kernels meet the same comparison on a GPU
(``tests/cuda/test_fla_cuda.py``).
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

import zoo
from tests.attention.kernels.inputs import padding_mask
from zoo.attention.kernels.fla import fla_available, fla_chunk

BATCH, STEPS, EMBED = 2, 70, 24  # 70 steps: not a multiple of any chunk


def _loop(q, k, v, scale, initial_state, output_final_state, step):
    """fla's recurrences token by token in its layout: ``step(S, t) -> S_t``, ``o_t = scale q_t S_t``."""
    batch, steps, heads, dk = q.shape
    state = q.new_zeros(batch, heads, dk, v.shape[-1]) if initial_state is None else initial_state.to(q.dtype)
    scale = dk**-0.5 if scale is None else scale
    outputs = []
    for t in range(steps):
        state = step(state, t)
        outputs.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], state))
    return torch.stack(outputs, 1), state if output_final_state else None


def chunk_simple_gla(q, k, v, g=None, g_gamma=None, scale=None, initial_state=None, output_final_state=False, **kw):
    assert (g is None) != (g_gamma is None), "one of g (B, T, H) or g_gamma (H,)"
    assert g is None or g.shape == q.shape[:3]
    assert g_gamma is None or g_gamma.shape == q.shape[2:3]

    def step(state, t):
        decay = (g[:, t] if g is not None else g_gamma.expand(q.shape[0], -1)).exp()
        return decay[..., None, None] * state + k[:, t, :, :, None] * v[:, t, :, None, :]

    return _loop(q, k, v, scale, initial_state, output_final_state, step)


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False, **kw):
    assert q.shape == k.shape == g.shape, "q, k, g must have the same shape."

    def step(state, t):
        return g[:, t, :, :, None].exp() * state + k[:, t, :, :, None] * v[:, t, :, None, :]

    return _loop(q, k, v, scale, initial_state, output_final_state, step)


def _delta_step(k, v, beta, g):
    def step(state, t):
        if g is not None:
            state = g[:, t, :, None, None].exp() * state
        new_value = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhk,bhkv->bhv", k[:, t], state))
        return state + k[:, t, :, :, None] * new_value[:, :, None, :]

    return step


def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None, output_final_state=False, **kw):
    assert q.dtype != torch.float32, "ChunkDeltaRuleFunction does not support float32. Please use bfloat16."
    assert beta.shape == q.shape[:3]
    assert not kw.get("use_qk_l2norm_in_kernel", False)
    return _loop(q, k, v, scale, initial_state, output_final_state, _delta_step(k, v, beta, None))


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False, **kw):
    assert g.shape == beta.shape == q.shape[:3]
    assert not kw.get("use_qk_l2norm_in_kernel", False)
    return _loop(q, k, v, scale, initial_state, output_final_state, _delta_step(k, v, beta, g))


def chunk_dplr_delta_rule(q, k, v, a, b, gk, scale=None, initial_state=None, output_final_state=False, **kw):
    """fla's reference (``naive.py``): ``S_t = exp(gk_t) S_{t-1} + b_t^T (a_t S_{t-1}) + k_t^T v_t``."""
    assert q.shape == k.shape == a.shape == b.shape == gk.shape

    def step(state, t):
        read = torch.einsum("bhk,bhkv->bhv", a[:, t], state)
        return (
            gk[:, t, :, :, None].exp() * state
            + b[:, t, :, :, None] * read[:, :, None, :]
            + (k[:, t, :, :, None] * v[:, t, :, None, :])
        )

    return _loop(q, k, v, scale, initial_state, output_final_state, step)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[str, ...]]]:
    """The references in place of ``fla.ops``; each call recorded as (op, gate keywords given)."""
    record: list[tuple[str, tuple[str, ...]]] = []

    def recorded(function):
        def call(*args, **kwargs):
            record.append((function.__name__, tuple(sorted(n for n in ("g", "g_gamma") if kwargs.get(n) is not None))))
            return function(*args, **kwargs)

        return call

    packages = {"fla": None, "fla.ops": None}
    modules = {
        "fla.ops.simple_gla": chunk_simple_gla,
        "fla.ops.gla": chunk_gla,
        "fla.ops.delta_rule": chunk_delta_rule,
        "fla.ops.gated_delta_rule": chunk_gated_delta_rule,
        "fla.ops.generalized_delta_rule": chunk_dplr_delta_rule,
    }
    for name in packages:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    for name, function in modules.items():
        module = types.ModuleType(name)
        setattr(module, function.__name__, recorded(function))
        monkeypatch.setitem(sys.modules, name, module)
    return record


#: family -> (arguments, the op and gate keywords expected without padding, and with it)
FAMILIES = {
    "retention": ({"expand_v": 2.0}, ("chunk_simple_gla", ("g_gamma",)), ("chunk_simple_gla", ("g",))),
    "gla": ({"expand_k": 0.5}, ("chunk_gla", ()), ("chunk_gla", ())),
    "deltanet": ({}, ("chunk_gated_delta_rule", ()), ("chunk_gated_delta_rule", ())),
    "gated_deltanet": ({}, ("chunk_gated_delta_rule", ()), ("chunk_gated_delta_rule", ())),
    "mamba2": (
        {"ngroups": 2, "d_state": 6, "expand": 2.0},
        ("chunk_simple_gla", ("g",)),
        ("chunk_simple_gla", ("g",)),
    ),
    "kda": ({}, ("chunk_dplr_delta_rule", ()), ("chunk_dplr_delta_rule", ())),
    "rwkv7": ({}, ("chunk_dplr_delta_rule", ()), ("chunk_dplr_delta_rule", ())),
    "gated_deltaproduct": ({}, ("chunk_gated_delta_rule", ()), ("chunk_gated_delta_rule", ())),
}


def _recurrence(name: str, options: dict, seed: int, requires_grad: bool = False):
    """A family's recurrence from random per-head inputs, and the inputs (float64); the layer
    and the inputs drawn from ``seed``."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    layer = zoo.create_attention(name, embed_dim=EMBED, num_heads=4 if name == "mamba2" else 3, **options).double()
    shapes = {  # Gated DeltaProduct writes n keys and values a token; RWKV-7 reads each token with the one before
        "q": (BATCH, layer.qk_heads, STEPS, layer.key_head_dim),
        "k": (BATCH, layer.qk_heads, STEPS, layer.key_head_dim * layer.writes),
        "v": (BATCH, layer.num_heads, STEPS, layer.head_dim * layer.writes),
        "x": (BATCH, STEPS, 2, EMBED) if name == "rwkv7" else (BATCH, STEPS, EMBED),
    }
    inputs = {
        key: torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_(requires_grad)
        for key, shape in shapes.items()
    }
    state = torch.randn(BATCH, layer.num_heads, layer.key_head_dim, layer.head_dim, generator=generator,
                        dtype=torch.float64).requires_grad_(requires_grad)  # fmt: skip
    return layer.prepare(inputs["q"], inputs["k"], inputs["v"], inputs["x"]), state, [*inputs.values(), state]


@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_each_family_equals_the_zoo_chunkwise_form(calls, name: str, padded: bool) -> None:
    options, unpadded_op, padded_op = FAMILIES[name]
    recurrence, state, _ = _recurrence(name, options, 0)
    mask = padding_mask(STEPS)[:, :1] if padded else None  # (B, 1, T): right- and left-padded rows
    with torch.no_grad():
        output, final = fla_chunk(recurrence, state, mask)
        expected, expected_final = recurrence.chunkwise(16, state, mask)
    assert calls == [padded_op if padded else unpadded_op]
    assert output.dtype == final.dtype == torch.float64
    torch.testing.assert_close(output, expected, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(final, expected_final, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_gradients_reach_what_the_recurrence_reads(calls, name: str) -> None:
    options = FAMILIES[name][0]
    mask = padding_mask(STEPS)[:, :1]
    upstream = torch.randn(BATCH, 4 if name == "mamba2" else 3, STEPS, 1, dtype=torch.float64)
    grads = []
    for form in ("fla", "zoo"):
        recurrence, state, leaves = _recurrence(name, options, 1, requires_grad=True)
        output, final = fla_chunk(recurrence, state, mask) if form == "fla" else recurrence.chunkwise(16, state, mask)
        loss = (output * upstream).sum() + final.square().sum()
        grads.append(torch.autograd.grad(loss, leaves, allow_unused=True))
    for label, ours, theirs in zip(("q", "k", "v", "x", "state"), *grads):
        if theirs is None:
            assert ours is None
        else:
            torch.testing.assert_close(ours, theirs, atol=1e-9, rtol=1e-9, msg=f"d{label}")


def test_a_learned_per_head_decay_goes_as_a_gate_per_step(calls) -> None:
    """fla gives ``g_gamma`` no gradient, so a per-head decay that needs one is passed as ``g``."""
    recurrence, state, _ = _recurrence("retention", {}, 2)
    decay = recurrence.log_decay.clone().requires_grad_()
    learned = type(recurrence)(recurrence.q, recurrence.k, recurrence.v, decay)
    output, _ = fla_chunk(learned, state)
    (grad,) = torch.autograd.grad(output.sum(), decay)
    (expected,) = torch.autograd.grad(learned.chunkwise(16, state, None)[0].sum(), decay)
    assert calls == [("chunk_simple_gla", ("g",))]
    torch.testing.assert_close(grad, expected, atol=1e-9, rtol=1e-9)


def test_an_ungated_delta_rule_in_bfloat16_takes_chunk_delta_rule(calls) -> None:
    recurrence, state, _ = _recurrence("deltanet", {}, 3)
    with torch.no_grad():
        output, final = fla_chunk(recurrence, state, dtype=torch.bfloat16)
        expected, expected_final = recurrence.chunkwise(16, state, None)
    assert calls == [("chunk_delta_rule", ())]
    assert output.dtype == torch.float64  # the recurrence's dtype, whatever the kernels read
    for actual, reference in ((output, expected), (final, expected_final)):  # bfloat16 inputs: 3 digits
        assert (actual - reference).norm() <= 2e-2 * reference.norm()


def test_a_mask_that_differs_per_query_is_refused(calls) -> None:
    recurrence, state, _ = _recurrence("gla", {"expand_k": 0.5}, 4)
    with pytest.raises(ValueError, match="key padding mask"):
        fla_chunk(recurrence, state, torch.ones(BATCH, 1, STEPS, STEPS, dtype=torch.bool))
    assert calls == []


def test_fla_needs_a_cuda_device() -> None:
    assert not fla_available("cpu")
