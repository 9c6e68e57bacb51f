"""PaTH's position encoding: dot products of queries with keys carried through data-dependent
Householder reflections (Yang et al., 2025, "PaTH Attention: Position Encoding via Accumulating
Householder Transformations", arXiv 2505.16381).

Per head, with unit vectors ``w_s`` and strengths ``beta_s`` in ``(0, 2)``, position ``s`` holds
the reflection-like map ``H_s = I - beta_s w_s w_s^T`` and the score of query ``i`` with key
``j <= i`` is

    A_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j          (A_ii = q_i . k_i)

``H_s`` is symmetric with eigenvalues 1 and ``1 - beta_s`` in ``(-1, 1)``, so no product grows and
float32 needs no rescaling at 16k tokens. A position with ``beta_s = 0`` is the identity: the
layers give padded positions that, so a hidden token moves no key of a visible one. Scores above
the diagonal (``j > i``) are returned as zeros: the caller masks them. Three forms that agree:

* :func:`path_scores` with ``chunk_size=None``: the naive ``O(T^2 d)`` form, one step per key
  position from the last to the first, carrying each query back through the ``H_s`` after it
  (``q_i <- H_s q_i`` for the queries ``i >= s``), so column ``j`` reads ``q_i^T H_i ... H_{j+1}``;
* :func:`path_scores` with a ``chunk_size`` ``C``: the paper's blockwise form
  (flash-linear-attention's ``fla/ops/path_attn/naive.py`` computes the same): within a chunk the
  product of its maps is written through the UT transform,
  ``H_i ... H_a = I - sum_{a <= s <= i} w_s y_s^T`` with ``Y = (I + L)^{-1} diag(beta) W`` and
  ``L`` the strictly lower part of ``diag(beta) W W^T``, and a key carried to its chunk's end is
  ``k_j - sum_{s > j} x_sj w_s`` with ``X = (I + L)^{-1} strict_lower(diag(beta) W K^T)``; between
  chunks the queries cross whole chunks, one matrix product per chunk (``T / C`` steps instead of
  ``T``);
* :func:`path_recurrent`: the paper's decoding form, a cache of keys already
  carried to the last position seen; each new position applies its ``H_t`` to every cached key,
  appends its own key and reads its row of scores.

Against the reference code: fla's ``naive.py`` is the blockwise form in chunks of 64 in float32
and its Triton kernels run it block by block, never forming ``A`` whole; here the chunk is the
caller's, the forms keep float64 when given it, and ``A`` is returned whole for the caller's
softmax (the per-position naive form and the decoding form are the zoo's, to check it against).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = [
    "PathChunks",
    "householder_step",
    "path_chunks",
    "path_keys_at_end",
    "path_recurrent",
    "path_score_rows",
    "path_scores",
]


def householder_step(rows: Tensor, w: Tensor, beta: Tensor) -> Tensor:
    """``H rows`` for ``H = I - beta w w^T``: ``rows`` ``(..., N, d)``, ``w`` ``(..., d)``, ``beta`` ``(...)``."""
    return rows - beta[..., None, None] * (rows @ w[..., :, None]) * w[..., None, :]


def _promoted(*tensors: Tensor) -> list[Tensor]:
    """``tensors`` in float32 at least (the triangular solves have no half-precision kernels)."""
    compute = torch.promote_types(tensors[0].dtype, torch.float32)
    return [t.to(compute) for t in tensors]


def path_scores(q: Tensor, k: Tensor, w: Tensor, beta: Tensor, *, chunk_size: int | None = None) -> Tensor:
    """PaTH's scores ``A`` ``(B, H, T, T)`` (zero above the diagonal) of ``q``, ``k``, ``w``
    ``(B, H, T, d)`` (``w`` of unit rows) and ``beta`` ``(B, H, T)``, in float32 at least; the
    naive form for ``chunk_size`` None, the blockwise one otherwise (see the module docstring)."""
    if chunk_size is None:
        return _naive_scores(*_promoted(q, k, w, beta))
    chunks = path_chunks(q, k, w, beta, chunk_size)
    return path_score_rows(chunks, 0, chunks.num_chunks)[..., : chunks.length, : chunks.length]


def _naive_scores(q: Tensor, k: Tensor, w: Tensor, beta: Tensor) -> Tensor:
    length = q.shape[-2]
    rows = torch.arange(length, device=q.device)[:, None]
    carried, columns = q, []
    for j in reversed(range(length)):
        columns.append((carried * k[..., j : j + 1, :]).sum(-1) * (rows[:, 0] >= j))
        carried = torch.where(rows >= j, householder_step(carried, w[..., j, :], beta[..., j]), carried)
    return torch.stack(columns[::-1], dim=-1)


@dataclass(frozen=True)
class PathChunks:
    """The blockwise form's terms per chunk of ``C`` positions (``N`` chunks, the input padded to
    ``N C`` with identity maps): ``carried`` ``(B, H, N C, d)``, each query carried back to its
    chunk's start; ``keys_at_end`` ``(B, H, N, C, d)``, each key carried to its chunk's end; ``w``
    and ``y`` ``(B, H, N, C, d)``, the chunk's product ``I - W^T Y``; ``local`` ``(B, H, N, C, C)``,
    the scores within each chunk; ``length`` the input's ``T``. Rows of scores are read from them
    by :func:`path_score_rows`, all at once or a block of queries at a time."""

    carried: Tensor
    keys_at_end: Tensor
    w: Tensor
    y: Tensor
    local: Tensor
    length: int

    @property
    def chunk_size(self) -> int:
        return self.local.shape[-1]

    @property
    def num_chunks(self) -> int:
        return self.local.shape[-3]


def path_chunks(q: Tensor, k: Tensor, w: Tensor, beta: Tensor, chunk_size: int) -> PathChunks:
    """The blockwise form's :class:`PathChunks` of ``q``, ``k``, ``w`` ``(B, H, T, d)`` and ``beta``
    ``(B, H, T)``, in float32 at least: ``O(T C d)`` work and memory, no ``(T, T)`` grid."""
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"path_scores: chunk_size must be a positive integer or None; got {chunk_size}.")
    q, k, w, beta = _promoted(q, k, w, beta)
    length = q.shape[-2]
    pad = -length % chunk_size
    if pad:  # padded positions: zero keys, queries and maps (beta = 0: the identity)
        q, k, w = (torch.nn.functional.pad(t, (0, 0, 0, pad)) for t in (q, k, w))
        beta = torch.nn.functional.pad(beta, (0, pad))
    chunks = q.shape[-2] // chunk_size
    qc, kc, wc = (t.unflatten(-2, (chunks, chunk_size)) for t in (q, k, w))  # (B, H, N, C, d)
    bw = wc * beta.unflatten(-1, (chunks, chunk_size))[..., None]  # diag(beta) W per chunk
    eye = torch.eye(chunk_size, dtype=q.dtype, device=q.device)
    strict = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril(-1)
    unit_lower = eye + (bw @ wc.transpose(-1, -2)) * strict  # I + L
    y = torch.linalg.solve_triangular(unit_lower, bw, upper=False, unitriangular=True)
    x = torch.linalg.solve_triangular(unit_lower, (bw @ kc.transpose(-1, -2)) * strict, upper=False, unitriangular=True)
    query_w = (qc @ wc.transpose(-1, -2)).tril()  # q_i . w_s for s <= i
    local = (qc @ kc.transpose(-1, -2)).tril() - query_w @ x  # (B, H, N, C, C)
    carried = (qc - query_w @ y).flatten(-3, -2)  # each query carried back to its chunk's start
    keys_at_end = kc - x.transpose(-1, -2) @ wc  # each key carried to its chunk's end
    return PathChunks(carried, keys_at_end, wc, y, local, length)


def path_score_rows(chunks: PathChunks, first: int, last: int) -> Tensor:
    """The scores of the queries in chunks ``first .. last - 1`` with the keys of chunks ``0 ..
    last - 1``, ``(B, H, (last - first) C, last C)`` (zero above the diagonal): the queries cross
    the earlier chunks one matrix product a chunk, from the last to the first."""
    size = chunks.chunk_size
    carried = chunks.carried[..., first * size : last * size, :]
    chunk_of_row = torch.arange(first, last, device=carried.device).repeat_interleave(size)
    blocks: list[Tensor] = [None] * last  # type: ignore[list-item]
    for c in reversed(range(last)):
        later = (chunk_of_row > c)[:, None]
        blocks[c] = (carried @ chunks.keys_at_end[..., c, :, :].transpose(-1, -2)) * later
        if c:  # carried across chunk c, for the rows after it
            crossed = carried - (carried @ chunks.w[..., c, :, :].transpose(-1, -2)) @ chunks.y[..., c, :, :]
            carried = torch.where(later, crossed, carried)
    earlier = torch.cat(blocks, dim=-1)  # every earlier chunk's block; the diagonal blocks next
    count = last - first
    same_chunk = torch.eye(count, dtype=carried.dtype, device=carried.device)[:, None, :, None]  # (n, 1, n, 1)
    local = chunks.local[..., first:last, :, :]
    diagonal = (local[..., None, :] * same_chunk).flatten(-4, -3).flatten(-2, -1)  # (B, H, n C, n C)
    return torch.cat([earlier[..., : first * size], earlier[..., first * size :] + diagonal], dim=-1)


def path_keys_at_end(chunks: PathChunks) -> Tensor:
    """Every key carried through the last position, ``H_T ... H_{j+1} k_j`` ``(B, H, T, d)``: the
    decoding form's cache after the input, from the blockwise form's terms. Each chunk's product
    ``I - W^T Y`` is applied to the keys of the chunks before it, then its own keys (already
    carried to its end) join them: ``O(T^2 d / 2)`` work in ``T / C`` steps."""
    held = chunks.keys_at_end[..., 0, :, :]
    for c in range(1, chunks.num_chunks):
        held = held - (held @ chunks.y[..., c, :, :].transpose(-1, -2)) @ chunks.w[..., c, :, :]
        held = torch.cat([held, chunks.keys_at_end[..., c, :, :]], dim=-2)
    return held[..., : chunks.length, :]


def path_recurrent(q: Tensor, k: Tensor, w: Tensor, beta: Tensor, keys: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The decoding form: new positions' queries ``q`` ``(B, H, T, d)`` and keys ``k``, ``w``
    ``(B, H_k, T, d)``, ``beta`` ``(B, H_k, T)`` after ``keys`` ``(B, H_k, S, d)``, the earlier keys
    carried through the last position seen (None: none); ``H`` a multiple of ``H_k`` (grouped
    query heads read their key head's keys). Returns the new rows of scores ``(B, H, T, S + T)``
    (zero where ``j > S + i``) and every key carried through the last new position
    ``(B, H_k, S + T, d)``, both in float32 at least."""
    q, k, w, beta = _promoted(q, k, w, beta)
    held = k[..., :0, :] if keys is None else keys.to(k.dtype)
    total, (batch, heads) = held.shape[-2] + q.shape[-2], q.shape[:2]
    grouped = q.unflatten(1, (k.shape[1], heads // k.shape[1]))  # (B, H_k, G, T, d)
    rows = []
    for t in range(q.shape[-2]):
        held = torch.cat([householder_step(held, w[..., t, :], beta[..., t]), k[..., t : t + 1, :]], dim=-2)
        row = (grouped[..., t, :] @ held.transpose(-1, -2)).reshape(batch, heads, -1)
        rows.append(torch.nn.functional.pad(row, (0, total - row.shape[-1])))
    return torch.stack(rows, dim=-2), held
