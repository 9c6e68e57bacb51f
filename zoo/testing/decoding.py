"""The contract's checks of a recurrent layer's decoding: a layer whose ``attend_cached`` keeps a
fixed-size state (:class:`~zoo.attention.contract.cache.StateCache`) instead of every key and value.

* ``state_decoding``: a prompt, then one position at a time through ``attend_cached``, gives
  the outputs of one causal forward pass over the whole sequence (the parallel form), in float64,
  with and without left-padded rows;
* ``state_size``: the cache holds as many bytes after a long prompt and many steps as after a
  short prompt, and counts the positions it has seen.

Both call the module directly: a positional scheme the layer holds acts in both passes (offset by
the cache's length when decoding); one the kit places around a scoring attention plays no part.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.attention import IncompatibleAttentionError
from zoo.attention.contract.cache import LayerCache, StateCache
from zoo.attention.contract.context import AttentionContext
from zoo.testing.harness import BATCH, Harness
from zoo.testing.report import fail

__all__ = ["check_state_decoding", "check_state_size", "decodes_with_state"]

#: positions of the decoding checks: a prompt of PROMPT, then one at a time up to LENGTH
PROMPT, LENGTH = 3, 9
#: float64: the forms differ by rounding only
_ATOL, _RTOL = 1e-9, 1e-7


def _inputs(h: Harness, length: int, g: torch.Generator, dtype: torch.dtype) -> Tensor:
    """The layer's input ``x`` of one sequence."""
    return h.inputs(length, length, g, dtype)[0]


def _forward(module: nn.Module, x: Tensor, keep: Tensor | None) -> Tensor:
    """One causal pass over the whole sequence; ``keep`` ``(B, L)`` marks the real tokens."""
    return module(x, AttentionContext.for_keys(None if keep is None else keep.to(x.device), is_causal=True)).output


def _decode(
    module: nn.Module, x: Tensor, first: int, last: int, cache: LayerCache | None, keep: Tensor | None
) -> tuple[Tensor, LayerCache]:
    """Positions ``first .. last - 1`` after ``cache``; ``keep`` ``(B, L)`` marks the real tokens."""
    seen = None if keep is None else keep[:, :last].to(x.device)  # over every position seen
    return module.attend_cached(x[:, first:last], cache, AttentionContext.for_keys(seen, is_causal=True, offset=first))


@torch.no_grad()
def decodes_with_state(h: Harness) -> bool:
    """Whether the variant decodes with a fixed-size state: the kind of cache ``attend_cached``
    returns for a short prompt. Only a causal self-attention layer decodes (a scoring attention
    decodes inside a multi-head layer, from its keys and values); one that refuses to is not recurrent."""
    module = h.module()
    if h.scoring or h.form != "x" or not h.can.supports_causal:
        return False
    g = torch.Generator().manual_seed(0)
    try:
        _, cache = _decode(module, _inputs(h, 2, g, torch.float32), 0, 2, None, None)
    except (IncompatibleAttentionError, NotImplementedError):
        return False
    return isinstance(cache, StateCache)


@torch.no_grad()
def check_state_decoding(h: Harness, g: torch.Generator) -> None:
    module = h.module(torch.float64)
    x = _inputs(h, LENGTH, g, torch.float64)
    cases: list[tuple[str, Tensor | None]] = [("no mask", None)]
    if h.can.supports_padding_mask:
        cases.append(("left-padded rows", torch.arange(LENGTH) >= torch.tensor([0, 2, 5])[:, None]))
    for what, keep in cases:
        expected = _forward(module, x, keep).cpu()
        outputs, cache = [], None
        for first, last in [(0, PROMPT), *((t, t + 1) for t in range(PROMPT, LENGTH))]:
            output, cache = _decode(module, x, first, last, cache, keep)
            outputs.append(output.cpu())
        decoded = torch.cat(outputs, dim=-2)
        if not torch.allclose(decoded, expected, atol=_ATOL, rtol=_RTOL):
            worst = int((decoded - expected).abs().amax(dim=(0, -1)).argmax())
            fail(
                f"with {what}, a prompt of {PROMPT} then one position at a time through attend_cached differs from one "
                f"causal pass by up to {float((decoded - expected).abs().max()):.3g} in float64 (worst at position "
                f"{worst})."
            )


@torch.no_grad()
def check_state_size(h: Harness, g: torch.Generator) -> None:
    module = h.module()
    x = _inputs(h, LENGTH, g, torch.float32)
    _, short = _decode(module, x, 0, 1, None, None)
    _, cache = _decode(module, x, 0, PROMPT, None, None)
    for t in range(PROMPT, LENGTH):
        _, cache = _decode(module, x, t, t + 1, cache, None)
    if cache.nbytes != short.nbytes:
        fail(
            f"the cache holds {short.nbytes} bytes after 1 position and {cache.nbytes} after {LENGTH}: a recurrent "
            "state must not grow with the length."
        )
    if cache.length != LENGTH:
        fail(f"the cache counts {cache.length} positions after {LENGTH}.")
    rows = cache.select(torch.tensor([BATCH - 1, 0], device=h.device))
    if rows.nbytes * BATCH != cache.nbytes * 2 or rows.length != LENGTH:
        fail("select() on the batch does not keep the rows it picks (beam search reorders caches with it).")
