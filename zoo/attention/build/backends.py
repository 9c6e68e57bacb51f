"""Which kernels run a variant: the zoo's own forms, FlexAttention, or flash-linear-attention's.

Every variant has one exact meaning, its own PyTorch form (the ``zoo`` backend, which runs
everywhere and is what the tests hold every other backend to). Two fused backends compute the
same on a GPU:

* ``flex``: :func:`torch.nn.attention.flex_attention`, compiled from the variant's mask and score
  function (:mod:`zoo.attention.kernels.flex`), for the variants defined by a mask on positions
  and a bias (``local``, ``longformer``, ``sparse``, ``bigbird``, and ``dot_product`` with a bias
  scheme);
* ``fla``: flash-linear-attention's Triton chunk kernels (:mod:`zoo.attention.kernels.fla`, the
  ``fla`` extra), for the recurrent families' chunkwise form.

``auto`` (the default) takes a fused backend in :data:`AUTO_FUSED` where it is exact: on CUDA, in
a dtype the kernel takes, with no weights asked for (neither kernel has them; nor has flex
attention dropout, nor a mask but key padding); else the zoo's form. That is ``fla``, which a user
asks for by installing the ``fla`` extra, and not yet ``flex``: on the one H200 measured
(``docs/results/gpu.md``, the second lease), the zoo's block forms of ``local``, ``longformer``,
``sparse`` and ``bigbird`` ran in 2.8 to 13 ms at 16k tokens (forward and backward, bfloat16, five
times under SDPA's dense kernel), flex's compiled kernel took about 10 s to compile a case and
failed to compile one (ALiBi's bias table at heads of 64 in bfloat16: Triton's shared memory), and
its steady speed was not reached in the time lent; flex runs where it is forced until a measurement
shows it faster. On the CPU ``auto`` is always the zoo's form (flex runs eagerly there, forward
only, and fla not at all). A backend is forced for a block of code with :func:`attention_backend`
(as :func:`torch.nn.attention.sdpa_kernel` forces SDPA's) or for a process with
``ZOO_ATTENTION_BACKEND``; a forced backend that cannot run a call is refused in one line naming
why, never replaced silently (fla, for one, takes no signed decay: Mamba-2 with
``negative_eigenvalues`` runs the zoo's forms under ``auto``, and refuses a forced ``fla``).
:func:`backend_of` says which backend a module runs on a device and dtype, for ``zoo bench`` and a
run's model summary.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, get_args

import torch
from torch import nn

from zoo.errors import ZooError

__all__ = [
    "AUTO_FUSED",
    "BACKEND_ENV",
    "Backend",
    "BackendError",
    "attention_backend",
    "backend_of",
    "requested_backend",
]

Backend = Literal["auto", "zoo", "flex", "fla"]
"""A backend's name (see the module docstring)."""

#: the environment variable that forces a backend for a process (``auto`` when unset)
BACKEND_ENV = "ZOO_ATTENTION_BACKEND"

#: the fused backends ``auto`` takes where they run (the module docstring says why flex is not yet one)
AUTO_FUSED: frozenset[str] = frozenset({"fla"})

#: the backend :func:`attention_backend` forces now (a process-wide setting, as
#: :func:`torch.nn.attention.sdpa_kernel`'s is; a plain global, which ``torch.compile`` reads
#: without breaking its graph), or None
_forced: list[Backend | None] = [None]


class BackendError(ZooError, ValueError):
    """A forced backend cannot run a call (or is no backend)."""


def _checked(name: str, source: str) -> Backend:
    if name not in get_args(Backend):
        raise BackendError(
            f"{source}: unknown attention backend {name!r}; choose one of {', '.join(get_args(Backend))}."
        )
    return name  # type: ignore[return-value]


def requested_backend() -> Backend:
    """The backend asked for here: :func:`attention_backend`'s, else ``ZOO_ATTENTION_BACKEND``'s,
    else ``auto``."""
    forced = _forced[0]
    if forced is not None:
        return forced
    return _checked(os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto", BACKEND_ENV)


@contextmanager
def attention_backend(name: Backend) -> Iterator[None]:
    """Force ``name`` for every attention call inside the block (``auto`` lifts a forcing)."""
    previous, _forced[0] = _forced[0], _checked(name, "attention_backend")
    try:
        yield
    finally:
        _forced[0] = previous


def choose(fused: Literal["flex", "fla"], runs: str | None, *, fast_on: str = "cuda", device: torch.device) -> bool:
    """Whether a call takes its variant's ``fused`` backend, under the backend asked for.

    Args:
        fused: The variant's fused backend.
        runs: None where the fused kernel can run this call exactly, else why not (one clause).
        fast_on: The device type where ``auto`` takes the fused kernel.
        device: The call's device.

    Raises:
        BackendError: ``fused`` is forced and cannot run the call; or another fused backend is
            forced, which this variant has not.
    """
    requested = requested_backend()
    if requested == "zoo":
        return False
    if requested == "auto":
        return fused in AUTO_FUSED and runs is None and device.type == fast_on
    if requested != fused:
        raise BackendError(
            f"the attention backend {requested!r} is forced, but this variant runs on 'zoo' or {fused!r}; "
            f"force one of those, or 'auto'."
        )
    if runs is not None:
        raise BackendError(f"the attention backend {fused!r} is forced, but it cannot run this call: {runs}.")
    return True


def backend_of(module: nn.Module, device: torch.device | str, dtype: torch.dtype = torch.float32) -> str:
    """The backend ``module`` (a scoring attention or a layer, or a layer holding one) runs on
    ``device`` in ``dtype`` under the backend asked for, for a training call with no mask but
    key padding: ``zoo``, ``flex`` or ``fla``."""
    inner = getattr(module, "score_attention", module)
    probe = getattr(inner, "fused_backend", None)
    if probe is None:
        return "zoo"
    name, runs = probe(torch.device(device), dtype)
    try:
        return name if choose(name, runs, device=torch.device(device)) else "zoo"
    except BackendError:
        return "zoo"
