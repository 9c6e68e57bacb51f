"""Attention on a GPU: the contract on ``cuda``, CUDA against the CPU in float32, float16 and
bfloat16 (pure and autocast), and no NaN for a query with nothing to attend to in any fused
SDPA kernel (flash, memory-efficient, cuDNN, math).

Tests marked ``cuda`` are skipped without a GPU; a test parametrized over ``cpu`` and ``cuda``
runs its CPU twin in the default suite, so its own logic is checked everywhere.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import zoo
from tests.cuda.device_parity import compare_with_cpu, parity_cases
from tests.helpers.positions import KIT_OPTIONS, takes_position

#: (dtype, autocast): float32 alone, and each half precision pure and under autocast
PRECISIONS = [
    (torch.float32, False),
    (torch.float16, False),
    (torch.bfloat16, False),
    (torch.float16, True),
    (torch.bfloat16, True),
]
PRECISION_IDS = ["float32", "float16", "bfloat16", "float16-autocast", "bfloat16-autocast"]


#: every variant alone (position None), and with every position scheme it takes
CONTRACT_CASES = [
    (variant, position)
    for variant in zoo.list_attention()
    for position in (None, *zoo.list_positions())
    if position is None or takes_position(variant, position)
]


@pytest.mark.cuda
@pytest.mark.parametrize(("variant", "position"), CONTRACT_CASES, ids=[f"{v}-{p}" for v, p in CONTRACT_CASES])
def test_every_variant_keeps_the_contract_on_cuda(variant: str, position: str | None) -> None:
    options = KIT_OPTIONS.get(variant, {}) | ({} if position is None else {"position": position})
    report = zoo.check_attention(variant, device="cuda", dtypes=(torch.float16, torch.bfloat16), **options)
    assert {"shape", "float16", "bfloat16", "gradients"} <= set(report.passed)


@pytest.mark.cuda
@pytest.mark.parametrize(("dtype", "autocast"), PRECISIONS, ids=PRECISION_IDS)
@pytest.mark.parametrize(("score", "case"), parity_cases())
def test_cuda_matches_the_cpu(score: str, case: str, dtype: torch.dtype, autocast: bool) -> None:
    parity = compare_with_cpu(score, case, "cuda", dtype, autocast=autocast)
    assert parity.finite, (
        f"{score} on CUDA in {dtype} (autocast={autocast}) gives NaN or inf ({case}, a query with no visible key included)"
    )
    assert parity.ok, (
        f"{score} on CUDA in {dtype} (autocast={autocast}) differs from the CPU by {parity.error:.3g} > {parity.tolerance} ({case})"
    )


def _backends(device: str) -> list[SDPBackend]:
    if device == "cpu":
        return [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION]  # the CPU has a flash kernel too
    return [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]


def _sdpa_cases() -> list:
    cases = []
    for device in ("cpu", "cuda"):
        for backend in _backends(device):
            for dtype in (torch.float32, torch.float16, torch.bfloat16):
                marks = [pytest.mark.cuda] if device == "cuda" else []
                cases.append(
                    pytest.param(
                        device, backend, dtype, marks=marks, id=f"{device}-{backend.name.lower()}-{str(dtype)[6:]}"
                    )
                )
    return cases


@pytest.mark.parametrize(("device", "backend", "dtype"), _sdpa_cases())
def test_no_sdpa_kernel_gives_nan_to_a_query_with_nothing_to_attend_to(
    device: str, backend: SDPBackend, dtype: torch.dtype
) -> None:
    """The fused path (``need_weights=False``) with one kernel allowed, against the explicit
    path of the same layer (``need_weights=True``: the zoo's masked softmax, zero weights where
    no key is visible), forwards and backwards."""
    torch.manual_seed(0)
    layer = (
        zoo.create_attention("multi_head", embed_dim=128, num_heads=2).to(device, dtype).eval()
    )  # head size 64: every kernel's
    x = torch.randn(3, 16, 128, device=device, dtype=dtype, requires_grad=True)
    valid_lens = torch.tensor([16, 5, 0], device=device)
    expected, _ = layer(x, x, x, valid_lens, need_weights=True)
    try:
        with sdpa_kernel([backend]):
            output, _ = layer(x, x, x, valid_lens)
            (gradient,) = torch.autograd.grad(output.float().square().sum(), x)
    except RuntimeError as error:
        if "No available kernel" not in str(error):
            raise
        pytest.skip(f"{backend.name} does not take a boolean mask in {dtype} on this device")
    assert torch.isfinite(output).all() and torch.isfinite(gradient).all()
    tolerance = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(output, expected, atol=tolerance, rtol=tolerance)
    torch.testing.assert_close(output[2], expected[2], atol=0, rtol=0)  # nothing visible: the output projection's bias


@pytest.mark.cuda
def test_causal_self_attention_runs_in_the_flash_kernel() -> None:
    layer = zoo.create_attention("self", embed_dim=128, num_heads=2).to("cuda", torch.bfloat16).eval()
    x = torch.randn(2, 64, 128, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        output, _ = layer(x, zoo.AttentionContext(is_causal=True))
    expected, _ = layer(x, zoo.AttentionContext(is_causal=True, need_weights=True))
    torch.testing.assert_close(output, expected, atol=2e-2, rtol=2e-2)
