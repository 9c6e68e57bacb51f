"""Run one attention variant on a device and on the CPU, and say how far apart the two are.

The CUDA tests (``test_cuda_*.py``) use it to compare a GPU in float32, float16 and bfloat16
(pure, and under autocast) with the CPU in float32; ``test_device_parity.py`` runs the same
helper with ``device="cpu"`` in the default suite, so the helper itself is tested without a GPU.

Every scoring attention runs per head inside ``multi_head`` (as the architectures run it):
the layer's projections, head split and mask plumbing are exercised on the device too. The
inputs leave one sequence with no visible key (``valid_lens`` 0), the case the zoo answers with
zero weights and that a fused kernel may answer with NaN.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor, nn

import zoo

__all__ = ["CASES", "TOLERANCE", "Parity", "compare_with_cpu", "parity_cases", "scoring_attentions"]

Case = Literal["padding", "causal"]
#: ``padding``: two sequences, the last with no visible key; ``causal``: self-attention with
#: ``is_causal=True`` over right-padded rows
CASES: tuple[Case, ...] = ("padding", "causal")
#: largest difference from the CPU's float32, relative to the output's scale
TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}
_BATCH, _LQ, _LK, _EMBED, _HEADS = 3, 6, 9, 32, 4


def scoring_attentions() -> list[str]:
    """Every registered scoring attention (plugins included): what runs inside a head."""
    return [name for name in zoo.list_attention() if issubclass(zoo.get_attention(name), zoo.Attention)]


def parity_cases() -> list[tuple[str, Case]]:
    """``(score, case)`` for every scoring attention and the cases it supports (``causal`` needs
    ``supports_causal``, ``padding`` ``supports_bidirectional``: a causal recurrence has no other)."""
    needs = {"padding": "supports_bidirectional", "causal": "supports_causal"}
    return [
        (name, case) for name in scoring_attentions() for case in CASES if getattr(zoo.get_attention(name), needs[case])
    ]


@dataclass(frozen=True)
class Parity:
    """How a device's output compares with the CPU's float32 output of the same parameters."""

    error: float  # max |device - cpu| / max(1, max |cpu|)
    finite: bool  # the device's output and input gradients have no NaN or inf
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.finite and self.error <= self.tolerance


def _layer(score: str, seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return zoo.create_attention("multi_head", embed_dim=_EMBED, num_heads=_HEADS, attention=score).eval()


def _inputs(score: str, case: Case, seed: int) -> tuple[Tensor, Tensor, dict]:
    """Queries, keys/values and the mask arguments of ``case`` on the CPU, in float32."""
    generator = torch.Generator().manual_seed(seed)
    one_sequence = case == "causal" or not zoo.get_attention(score).supports_cross_attention
    lq, lk = (_LK, _LK) if one_sequence else (_LQ, _LK)
    queries = torch.randn(_BATCH, lq, _EMBED, generator=generator)
    keys = queries if one_sequence else torch.randn(_BATCH, lk, _EMBED, generator=generator)
    valid_lens = torch.tensor([lk, 4, 0]) if zoo.get_attention(score).supports_padding_mask else None
    return queries, keys, {"valid_lens": valid_lens, "is_causal": case == "causal"}


def _run(
    layer: nn.Module,
    queries: Tensor,
    keys: Tensor,
    mask: dict,
    device: torch.device,
    dtype: torch.dtype,
    autocast: bool,
) -> tuple[Tensor, Tensor]:
    """The output (float32) and the input gradients (flattened, float32), computed on ``device``."""
    precision = torch.float32 if autocast else dtype
    q = queries.to(device, precision).requires_grad_()
    k = q if keys is queries else keys.to(device, precision).requires_grad_()
    valid_lens = mask["valid_lens"]
    arguments = {"valid_lens": None if valid_lens is None else valid_lens.to(device), "is_causal": mask["is_causal"]}
    with torch.autocast(device.type, dtype=dtype, enabled=autocast):
        output, _ = layer(q, k, k, **arguments)
    output.float().square().sum().backward()
    grads = [t.grad.flatten() for t in {id(t): t for t in (q, k)}.values() if t.grad is not None]
    return output.detach().float().cpu(), torch.cat(grads).float().cpu()


def compare_with_cpu(
    score: str, case: Case, device: str | torch.device, dtype: torch.dtype, *, autocast: bool, seed: int = 0
) -> Parity:
    """Run ``multi_head`` with ``score`` heads on ``device`` in ``dtype`` (pure: parameters and
    inputs cast; autocast: float32 parameters, ``dtype`` compute) and on the CPU in float32 with
    the same (rounded, when pure) parameters; compare outputs, and check the device's output and
    gradient are finite."""
    device = torch.device(device)
    layer = _layer(score, seed)
    if not autocast:
        layer = layer.to(dtype)  # the reference below then has the same rounded parameters
    reference_layer = copy.deepcopy(layer).float()
    queries, keys, mask = _inputs(score, case, seed)
    if not autocast:  # the same rounded inputs on both sides
        tied = keys is queries
        queries = queries.to(dtype).float()
        keys = queries if tied else keys.to(dtype).float()
    output, grad = _run(layer.to(device), queries, keys, mask, device, dtype, autocast)
    expected, _ = _run(reference_layer, queries, keys, mask, torch.device("cpu"), torch.float32, False)
    finite = bool(torch.isfinite(output).all() and torch.isfinite(grad).all())
    error = float((output - expected).abs().max()) / max(1.0, float(expected.abs().max()))
    return Parity(error=error, finite=finite, tolerance=TOLERANCE[dtype])
