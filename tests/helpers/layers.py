"""Calling an attention layer the way a model does: with the context built once from raw masks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from zoo.attention import MultiHeadAttention
from zoo.attention.contract.base import AttentionOutput
from zoo.attention.contract.context import AttentionContext

__all__ = ["assert_chunkwise_gradients_equal", "assert_every_form", "decode_after_prompt", "run_layer"]


def run_layer(layer: nn.Module, *inputs: Tensor, valid_lens: Tensor | None = None, **masks: Any) -> AttentionOutput:
    """``layer`` over ``inputs`` (``x``, ``(x, memory)`` or, for ``multi_head``, queries, keys and
    values) under raw masks (``valid_lens``, ``attn_mask``, ``is_causal``, ``need_weights``): a
    ``multi_head`` layer takes them as torch's does; any other gets the context a model would
    build from them (validated and merged once)."""
    if isinstance(layer, MultiHeadAttention):
        return layer(*inputs, valid_lens, **masks)
    context = AttentionContext.build(
        inputs[0].shape[0], inputs[0].shape[1], inputs[-1].shape[1], valid_lens=valid_lens,
        num_heads=getattr(layer, "num_heads", None), **masks,
    )  # fmt: skip
    return layer(*inputs, context)


@torch.no_grad()
def decode_after_prompt(layer: nn.Module, x: Tensor, real: Tensor, prompt: int) -> tuple[Tensor, Any]:
    """``layer`` decoding ``x`` ``(B, T, E)`` as a generator does: the first ``prompt`` positions in
    one call, then one token at a time from the cache, under the key padding ``real`` ``(B, T)``
    (True at real tokens); the outputs of every position ``(B, T, E)`` and the final cache."""
    output, cache = layer.attend_cached(
        x[:, :prompt], None, AttentionContext.for_keys(real[:, :prompt], is_causal=True)
    )
    outputs = [output]
    for t in range(prompt, x.shape[1]):
        context = AttentionContext.for_keys(real[:, : t + 1], is_causal=True, offset=t)
        output, cache = layer.attend_cached(x[:, t : t + 1], cache, context)
        outputs.append(output)
    return torch.cat(outputs, dim=1), cache


@torch.no_grad()
def assert_every_form(
    layer: nn.Module, x: Tensor, expected: Tensor, forms: Any, atol: float = 1e-10, **masks: Any
) -> None:
    """A recurrent ``layer`` over ``x`` in each of ``forms`` (``(mode, chunk_size)`` pairs), causally
    under the raw ``masks``, gives ``expected`` to ``atol``; a failure names the form."""
    for mode, chunk_size in forms:
        layer.mode, layer.chunk_size = mode, chunk_size
        output = run_layer(layer, x, is_causal=True, **masks).output
        torch.testing.assert_close(
            output, expected, atol=atol, rtol=0, msg=lambda message, m=mode, c=chunk_size: f"{m} {c}: {message}"
        )


def assert_chunkwise_gradients_equal(
    build: Callable[[str], nn.Module], x: Tensor, weights: Tensor, valid_lens: Tensor
) -> None:
    """The layers ``build("parallel")`` and ``build("chunkwise")`` (the same weights) give the same
    gradients, to ``x`` and to every parameter, of ``sum(output * weights)`` under key padding
    ``valid_lens``."""
    gradients = []
    for mode in ("parallel", "chunkwise"):
        module = build(mode)
        leaf = x.clone().requires_grad_()
        (run_layer(module, leaf, valid_lens=valid_lens, is_causal=True).output * weights).sum().backward()
        gradients.append([leaf.grad, *(p.grad for p in module.parameters())])
    assert all(g is not None for g in gradients[1])
    for parallel, chunkwise in zip(*gradients):
        torch.testing.assert_close(chunkwise, parallel, atol=1e-10, rtol=1e-8)
