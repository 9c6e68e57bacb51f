"""The matrix arithmetic of one call, counted with :class:`torch.utils.flop_counter.FlopCounterMode`.

A time ratio between two layers says how much faster one ran on this machine; the ratio of their
floating-point operations says how much faster it *could* run at the same efficiency. Where the
two agree, a layer is as efficient per operation as its baseline and only less arithmetic makes it
faster; where the time ratio falls short of the arithmetic one, the difference is work the count
leaves out (elementwise operations, copies, a Python loop), which a better kernel can remove
(``docs/results/speed.md`` reads the recurrent layers' arithmetic against their time this way).

The counter sees every matrix product, batched product and convolution that ATen runs, inside
custom autograd functions too, but not elementwise work. PyTorch 2.13 registers formulas for the
CUDA attention kernels only; :func:`_register_cpu_sdpa` adds the CPU flash kernel and its backward
with torch's own counts, and, for ``is_causal``, only the query-key pairs at or below the diagonal
(``L (L + 1) / 2`` of ``L^2``), the work the CPU kernel does when it skips the blocks above it.
(Torch's CUDA formulas count every pair, causal or not.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import (
    FlopCounterMode,
    flop_registry,
    register_flop_formula,
    sdpa_backward_flop_count,
    sdpa_flop_count,
)

__all__ = ["count_flops"]

_CPU_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_CPU_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


def _causal_share(query_shape: tuple[int, ...], key_shape: tuple[int, ...], is_causal: bool) -> float:
    """The share of query-key pairs a causal kernel computes: those at or below the diagonal
    (aligned at the top left, as SDPA's ``is_causal`` is)."""
    if not is_causal:
        return 1.0
    queries, keys = query_shape[-2], key_shape[-2]
    square = min(queries, keys)  # sum over the queries i of min(i + 1, keys)
    return (square * (square + 1) // 2 + (queries - square) * keys) / (queries * keys)


def _register_cpu_sdpa() -> None:
    """Count the CPU flash kernel as torch counts the CUDA ones (skipped where torch already does)."""
    if _CPU_FLASH not in flop_registry:

        @register_flop_formula(_CPU_FLASH)
        def _forward(
            query: Any, key: Any, value: Any, dropout_p: float = 0.0, is_causal: bool = False, **_: Any
        ) -> int:
            return round(sdpa_flop_count(query, key, value) * _causal_share(query, key, is_causal))

    if _CPU_FLASH_BACKWARD not in flop_registry:

        @register_flop_formula(_CPU_FLASH_BACKWARD)
        def _backward(
            grad_out: Any, query: Any, key: Any, value: Any, *args: Any, is_causal: bool = False, **_: Any
        ) -> int:
            causal = bool(args[3]) if len(args) > 3 else is_causal  # out, logsumexp, dropout_p, is_causal
            share = _causal_share(query, key, causal)
            return round(sdpa_backward_flop_count(grad_out, query, key, value) * share)


_register_cpu_sdpa()


def count_flops(step: Callable[[], object], reset: Callable[[], None] | None = None) -> int:
    """The floating-point operations of one call of ``step`` (after ``reset``, uncounted): a
    multiply and an add count two, as :class:`~torch.utils.flop_counter.FlopCounterMode` counts."""
    if reset is not None:
        reset()
    counter = FlopCounterMode(display=False)
    with counter:
        step()
    return counter.get_total_flops()
