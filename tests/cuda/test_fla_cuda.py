"""flash-linear-attention's kernels on a GPU: :func:`zoo.attention.kernels.fla.fla_chunk` against the
zoo's own chunkwise form, for each recurrent family, in float32, forward and backward, with a
random starting state and left- and right-padded rows, over 1000 steps (not a multiple of fla's
chunks). Tolerances are those of fla's own tests: a relative root-mean-square error of 0.005 on
outputs and states (0.006 for the delta rule), 0.008 on the gradients of queries, keys, values
and state, 0.02 on those that pass through the gates. Skipped without ``fla-core``; the CPU twin,
with stand-ins for fla's ops, is ``tests/attention/kernels/test_fla_adapter.py``.
"""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.attention.kernels.inputs import padding_mask
from zoo.attention.kernels.fla import fla_available, fla_chunk, fla_refusal

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not fla_available("cuda"), reason="fla-core (and Triton) not installed, or no CUDA device"),
]

BATCH, STEPS, EMBED, HEADS = 2, 1000, 256, 4

#: family -> its arguments (head sizes of 32 to 128, as fla's kernels take them)
FAMILIES = {
    "retention": {},
    "gla": {"expand_k": 0.5},
    "deltanet": {},
    "gated_deltanet": {},
    "mamba2": {"ngroups": 2, "d_state": 64},
    "kda": {},
    "rwkv7": {},
    "gated_deltaproduct": {},
}


def _ratio(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Root-mean-square error relative to the reference's (fla's ``get_err_ratio``)."""
    actual, expected = actual.detach().float(), expected.detach().float()
    return float((actual - expected).square().mean().sqrt() / (expected.square().mean().sqrt() + 1e-8))


def _recurrence(name: str):
    """A family's recurrence on the GPU from random per-head inputs, and those inputs (leaves)."""
    torch.manual_seed(0)
    layer = zoo.create_attention(name, embed_dim=EMBED, num_heads=HEADS, **FAMILIES[name]).cuda()
    shapes = [  # Gated DeltaProduct writes n keys and values a token; RWKV-7 reads each token with the one before
        (BATCH, layer.qk_heads, STEPS, layer.key_head_dim),
        (BATCH, layer.qk_heads, STEPS, layer.key_head_dim * layer.writes),
        (BATCH, HEADS, STEPS, layer.head_dim * layer.writes),
        (BATCH, STEPS, 2, EMBED) if name == "rwkv7" else (BATCH, STEPS, EMBED),
        (BATCH, HEADS, layer.key_head_dim, layer.head_dim),
    ]
    q, k, v, x, state = (torch.randn(*shape, device="cuda").requires_grad_() for shape in shapes)
    return layer.prepare(q, k, v, x), state, (q, k, v, x, state)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_fla_kernels_equal_the_zoo_chunkwise_form(name: str) -> None:
    mask = padding_mask(STEPS)[:, :1].cuda()
    recurrence, state, leaves = _recurrence(name)
    upstream = torch.randn_like(recurrence.v)
    # where fla refuses the backward (its gated kernels on Hopper under Triton < 3.7.1), forward only
    backward = fla_refusal(recurrence, mask) is None
    results = {}
    for form, run in (("fla", fla_chunk), ("zoo", lambda r, s, m: r.chunkwise(64, s, m))):
        with torch.set_grad_enabled(backward):
            output, final = run(recurrence, state, mask)
        loss = (output * upstream).sum() + final.square().sum()
        grads = torch.autograd.grad(loss, leaves, retain_graph=True, allow_unused=True) if backward else ()
        results[form] = (output, final, grads)
    (output, final, grads), (expected, expected_final, expected_grads) = results["fla"], results["zoo"]
    tolerance = 0.006 if getattr(recurrence, "beta", None) is not None or hasattr(recurrence, "a") else 0.005
    assert torch.isfinite(output).all() and torch.isfinite(final).all()
    assert _ratio(output, expected) < tolerance, "output"
    assert _ratio(final, expected_final) < tolerance, "final state"
    for label, grad, reference in zip(("q", "k", "v", "x", "state"), grads, expected_grads):
        if reference is not None:
            assert _ratio(grad, reference) < (0.02 if label == "x" else 0.008), f"d{label}"


def test_deltanet_in_bfloat16_takes_fla_s_delta_rule() -> None:
    """The ungated delta rule in 16 bits goes to ``chunk_delta_rule`` (float32 to the gated op)."""
    recurrence, state, _ = _recurrence("deltanet")
    with torch.no_grad():
        output, final = fla_chunk(recurrence, state, dtype=torch.bfloat16)
        expected, expected_final = recurrence.chunkwise(64, state, None)
    assert output.dtype == torch.float32
    assert _ratio(output, expected) < 0.02 and _ratio(final, expected_final) < 0.02  # bfloat16 inputs
