"""The chunk-level scan of log-linear attention's chunkwise form (:mod:`zoo.attention.kernels.log_linear`)
on inputs of many chunks, where the tree over the chunks has many levels: equal to the parallel
form (outputs and gradients) with rows of different real lengths, safe in float32 for the delta
rule too, and a graph that grows with the levels, not the chunks (no autograd node a chunk)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from zoo.attention.kernels.log_linear import log_linear_chunkwise

HEADS, WIDTH = 2, 4


def inputs(delta: bool, length: int, seed: int, dtype: torch.dtype = torch.float64) -> list[Tensor]:
    """Queries, keys, values, level weights (twelve levels, enough for 2048 steps), log decays and, for the delta rule, betas ``(2, H, T, ...)``."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, HEADS, length, WIDTH, generator=g, dtype=dtype) for _ in range(3))
    lam = 2 * torch.rand(2, HEADS, length, 12, generator=g, dtype=dtype)
    log_decay = -0.2 * torch.rand(2, HEADS, length, generator=g, dtype=dtype)
    extra = [torch.rand(2, HEADS, length, generator=g, dtype=dtype)] if delta else []
    return [q, F.normalize(k, dim=-1), v, lam, log_decay, *extra]


def graph_nodes(output: Tensor) -> int:
    """The autograd nodes ``output`` hangs from."""
    seen, stack = set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is not None and node not in seen:
            seen.add(node)
            stack.extend(parent for parent, _ in node.next_functions)
    return len(seen)


@pytest.mark.parametrize("delta", [False, True], ids=["decay", "delta_rule"])
def test_many_chunks_under_padding_match_the_parallel_form_with_their_gradients(delta: bool) -> None:
    """150 steps in chunks of 2: 75 chunks, seven levels of the tree over them; row 1 left-padded by
    19 steps, so its chunks and levels are not row 0's."""
    length = 150
    mask = (torch.arange(length) >= torch.tensor([0, 19])[:, None])[:, None]
    upstream = torch.randn(2, HEADS, length, WIDTH, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    runs = []
    for chunk_size in (None, 2):
        leaves = [x.requires_grad_() for x in inputs(delta, length, seed=2)]
        output, _ = log_linear_chunkwise(*leaves, chunk_size=chunk_size, mask=mask, final_state=False)
        (output * upstream).sum().backward()
        runs.append([output.detach(), *(leaf.grad for leaf in leaves)])
    for name, parallel, chunkwise in zip(["output", "q", "k", "v", "lambda", "log decay", "beta"], *runs):
        torch.testing.assert_close(chunkwise, parallel, atol=1e-10, rtol=1e-8, msg=name)
    assert (runs[1][0][1, :, :19] == 0).all()


def test_the_delta_rule_stays_finite_and_close_in_float32_on_long_strongly_decaying_inputs() -> None:
    """2048 steps decaying by down to exp(-8) a step: the chunks' transitions carry the levels
    between chunks, so nothing sums log decays beyond a chunk."""
    exact = inputs(True, 2048, seed=3)
    exact[4] = exact[4] * 40
    expected, _ = log_linear_chunkwise(*exact, chunk_size=64, final_state=False)
    single, _ = log_linear_chunkwise(*(x.float() for x in exact), chunk_size=64, final_state=False)
    assert torch.isfinite(single).all()
    torch.testing.assert_close(single.double(), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("delta", [False, True], ids=["decay", "delta_rule"])
def test_the_graph_grows_with_the_levels_not_with_the_chunks(delta: bool) -> None:
    """8, 16 and 128 chunks (three, four and seven levels over them): the scalar decay's tree adds
    the same nodes a level, the delta rule's scan none; no Python work a chunk is recorded."""
    nodes = []
    for length in (32, 64, 512):
        leaves = [x.requires_grad_() for x in inputs(delta, length, seed=4, dtype=torch.float32)]
        output, _ = log_linear_chunkwise(*leaves, chunk_size=4, final_state=False)
        nodes.append(graph_nodes(output))
    per_level = nodes[1] - nodes[0]
    assert nodes[2] - nodes[1] == 3 * per_level
    assert per_level == 0 if delta else 0 < per_level < 50
