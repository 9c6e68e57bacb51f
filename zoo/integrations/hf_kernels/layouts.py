"""What the zoo's stand-ins for transformers' kernel functions share: the compute dtype, the layouts
(transformers' ``(B, T, H, D)`` to the zoo's ``(B, H, T, D)`` and back), fla's L2 normalization and
the refusal of packed sequences."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from zoo.errors import ConfigurationError

__all__ = ["L2_EPS", "compute_dtype", "heads_first", "l2norm", "refuse_packed", "returned", "state_in"]

L2_EPS = 1e-6  # transformers' and fla's l2norm: x / sqrt(|x|^2 + eps)


def compute_dtype(x: Tensor) -> torch.dtype:
    """float32 for float32 and lower inputs (transformers' choice), float64 for float64."""
    return torch.promote_types(x.dtype, torch.float32)


def refuse_packed(kwargs: dict[str, Any]) -> None:
    """Packed sequences need the boundaries inside the kernel, which the zoo's kernels do not take."""
    for name in ("cu_seqlens", "seq_idx"):
        if kwargs.get(name) is not None:
            raise ConfigurationError(
                f"the zoo's kernels do not keep packed sequences apart ({name} given): pad the batch instead, "
                "or undo the routing."
            )


def heads_first(x: Tensor, dtype: torch.dtype) -> Tensor:
    """``(B, T, H, ...)`` to ``(B, H, T, ...)`` in ``dtype``."""
    return x.transpose(1, 2).to(dtype)


def l2norm(x: Tensor) -> Tensor:
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + L2_EPS)


def returned(output: Tensor, state: Tensor, dtype: torch.dtype, keep_state: bool) -> tuple[Tensor, Tensor | None]:
    """The output back to ``(B, T, H, dv)`` in the input's dtype; the state if asked for."""
    return output.transpose(1, 2).contiguous().to(dtype), state if keep_state else None


def state_in(state: Tensor | None, like: Tensor) -> Tensor | None:
    return None if state is None else state.to(like.dtype)
