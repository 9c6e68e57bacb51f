"""DeepSeek-V4's token compression (DeepSeek-AI, 2026, DeepSeek-V4): every ``m`` tokens of a
sequence pooled into one key-value entry by learned softmax weights, per feature, and the lightning
indexer that scores those entries for compressed sparse attention. The layer that appends the
entries to its window's keys is :mod:`zoo.attention.variants.deepseek_v4`, whose docstring has the
equations; this module holds the pieces and their decoding state.

A :class:`TokenCompressor` projects each token ``x_s`` to ``c`` series of ``w`` features, values
``C_s = x_s W^KV`` and gate logits ``Z_s = x_s W^Z`` (``c = 1`` without overlap, ``c = 2`` with it),
adds a learned bias ``B_{s mod m}`` to the gate by the token's slot in its window, and pools each
complete window: entry ``i`` is ``RMSNorm(sum_s softmax_s(Z_s + B)_f C_s,f)`` over the slots ``s``
of its window, for every feature ``f`` on its own. With overlap the slots of entry ``i`` are the
first series of window ``i - 1`` and the second series of window ``i`` (``2m`` tokens, stride ``m``;
window ``-1`` has no tokens). Entries are rotated at the position of their window's first token.

A hidden token (key padding) takes no weight in any entry; an entry with no real token is zero and
hidden. Decoding keeps a :class:`CompressorState`: the entries so far, the tokens after the last
complete window, and (with overlap) that window's first series, so each token is pooled once; the
layer's window keeps the last ``w - 1`` positions' shared key-value (:class:`SharedWindow`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.attention.contract.context import AttentionContext
from zoo.attention.modules.rotation import rotate_heads
from zoo.positions.rotary import RotaryEmbedding

__all__ = [
    "CompressedCache", "CompressedIndexer", "CompressorState", "Pooled", "SharedWindow", "TokenCompressor", "entry_visibility"
]  # fmt: skip


def entry_visibility(first: int, num_queries: int, num_entries: int, rate: int, device: torch.device) -> Tensor:
    """``(Lq, E)`` True where a query at stream index ``first + i`` may read entry ``e``: once every
    token the entry pools is at or before the query, ``(e + 1) m <= first + i + 1``."""
    queries = torch.arange(first, first + num_queries, device=device).unsqueeze(-1)
    return (torch.arange(num_entries, device=device) + 1) * rate <= queries + 1


@dataclass(frozen=True)
class Pooled:
    """Entries pooled from complete windows: ``entries`` ``(B, n, w)`` (normalized and rotated),
    ``visible`` ``(B, n)`` (the entry pools a real token), ``shares`` ``(B, n, slots)`` (each slot's
    compression weight averaged over the features: where a heatmap puts the entry's weight)."""

    entries: Tensor
    visible: Tensor
    shares: Tensor


@dataclass(frozen=True)
class CompressorState:
    """A :class:`TokenCompressor`'s decoding state after the tokens seen: the ``entries`` ``(B, E, w)``
    and their ``visible`` flags ``(B, E)``; the values and gate logits (bias not added, hidden
    tokens' gates ``-inf``) of the tokens after the last complete window, ``pending_kv`` and
    ``pending_gate`` ``(B, P < m, c w)``; with overlap, that window's first series with its bias,
    ``previous_kv`` and ``previous_gate`` ``(B, m, w)`` (a window of no tokens before the first)."""

    entries: Tensor
    visible: Tensor
    pending_kv: Tensor
    pending_gate: Tensor
    previous_kv: Tensor | None
    previous_gate: Tensor | None

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self._tensors() if t is not None)

    def select(self, index: Tensor) -> CompressorState:
        return CompressorState(*(None if t is None else t.index_select(0, index) for t in self._tensors()))

    def _tensors(self) -> tuple[Tensor | None, ...]:
        return (self.entries, self.visible, self.pending_kv, self.pending_gate, self.previous_kv, self.previous_gate)


class TokenCompressor(nn.Module):
    """Pools every ``rate`` tokens into one entry of ``width`` features (see the module docstring).

    Parameters: ``kv_proj`` and ``gate_proj`` (``embed_dim -> c width``), ``position_bias``
    (``(rate, c width)``, zeros: uniform pooling at initialization), ``kv_norm`` (``width``).
    """

    def __init__(self, embed_dim: int, width: int, rate: int, *, overlap: bool, eps: float) -> None:
        super().__init__()
        self.width, self.rate, self.overlap = width, rate, overlap
        series = 2 if overlap else 1
        self.kv_proj = nn.Linear(embed_dim, series * width, bias=False)
        self.gate_proj = nn.Linear(embed_dim, series * width, bias=False)
        self.position_bias = nn.Parameter(torch.zeros(rate, series * width))
        self.kv_norm = nn.RMSNorm(width, eps=eps)

    def initial(self, x: Tensor) -> CompressorState:
        """The state before any token, for a batch like ``x`` ``(B, L, embed_dim)``."""
        batch, series = x.shape[0], 2 if self.overlap else 1
        empty = x.new_zeros(batch, 0, series * self.width)
        previous = (x.new_zeros(batch, self.rate, self.width), x.new_full((batch, self.rate, self.width), -torch.inf))
        return CompressorState(
            x.new_zeros(batch, 0, self.width), torch.ones(batch, 0, dtype=torch.bool, device=x.device), empty, empty,
            *(previous if self.overlap else (None, None)),
        )  # fmt: skip

    def _pool(
        self, kv: Tensor, gate: Tensor, state: CompressorState, rotary: RotaryEmbedding, first: int
    ) -> tuple[Pooled, CompressorState]:
        """The entries of the complete windows of ``kv`` and ``gate`` ``(B, n m, c w)`` after those
        of ``state``, the first of them at stream position ``first``; the state's overlap updated."""
        width, rate = self.width, self.rate
        kv = kv.unflatten(1, (-1, rate))
        gate = gate.unflatten(1, (-1, rate)) + self.position_bias.to(gate.dtype)
        if self.overlap:  # entry i: window i - 1's first series, then window i's second
            kv_a = torch.cat([state.previous_kv.unsqueeze(1), kv[:, :, :, :width]], dim=1)
            gate_a = torch.cat([state.previous_gate.unsqueeze(1), gate[:, :, :, :width]], dim=1)
            state = replace(state, previous_kv=kv_a[:, -1], previous_gate=gate_a[:, -1])
            kv = torch.cat([kv_a[:, :-1], kv[..., width:]], dim=2)
            gate = torch.cat([gate_a[:, :-1], gate[..., width:]], dim=2)
        hidden = gate.isneginf().all(dim=2, keepdim=True)
        weights = gate.masked_fill(hidden, 0.0).softmax(dim=2, dtype=torch.promote_types(gate.dtype, torch.float32))
        weights = weights.to(kv.dtype)
        entries = self.kv_norm((kv * weights).sum(dim=2)).masked_fill(hidden.squeeze(2), 0.0)
        count = entries.shape[1]
        positions = first + torch.arange(count, device=kv.device) * rate
        entries = rotary.rotate(entries, *rotary.angles(positions))
        return Pooled(entries, ~hidden[:, :, 0, 0], weights.mean(dim=-1)), state

    def extend(
        self, state: CompressorState, x: Tensor, real: Tensor | None, rotary: RotaryEmbedding, offset: int = 0
    ) -> tuple[Pooled, CompressorState]:
        """The entries of the windows that the new tokens ``x`` ``(B, L, embed_dim)`` complete (their
        key padding ``real`` ``(B, L)``, None: all real) after ``state``, rotated at ``offset`` plus
        their stream position, and the state after them."""
        gate = self.gate_proj(x)
        if real is not None:
            gate = gate.masked_fill(~real.unsqueeze(-1), -torch.inf)
        kv = torch.cat([state.pending_kv, self.kv_proj(x)], dim=1)
        gate = torch.cat([state.pending_gate, gate], dim=1)
        usable = kv.shape[1] // self.rate * self.rate
        first = offset + state.entries.shape[1] * self.rate
        pooled, state = self._pool(kv[:, :usable], gate[:, :usable], state, rotary, first)
        state = replace(
            state,
            entries=torch.cat([state.entries, pooled.entries], dim=1),
            visible=torch.cat([state.visible, pooled.visible], dim=1),
            pending_kv=kv[:, usable:],
            pending_gate=gate[:, usable:],
        )
        return pooled, state

    def attribution(self, pooled: Pooled, length: int) -> Tensor:
        """``(B, n, length)``: each entry's ``shares`` placed on the tokens it pools (entry ``i``'s
        slots start at token ``(i - 1) m`` with overlap, ``i m`` without; tokens before 0 dropped)."""
        batch, count, slots = pooled.shares.shape
        start = torch.arange(count, device=pooled.shares.device) * self.rate + (self.rate - (slots - self.rate))
        columns = (start.unsqueeze(-1) + torch.arange(slots, device=start.device)).expand(batch, -1, -1)
        placed = pooled.shares.new_zeros(batch, count, length + self.rate)
        return placed.scatter_add_(-1, columns, pooled.shares)[..., self.rate :]


class CompressedIndexer(nn.Module):
    """Compressed sparse attention's lightning indexer: its own overlapping :class:`TokenCompressor`
    of ``head_dim`` features gives the index keys ``K^I``; ``H_I`` index queries per token, read from
    the attention's query latent, score them by ``sum_h w_h ReLU(q_h . K^I_e) / sqrt(head_dim)`` with
    ``w = x W^w / sqrt(H_I)``. The leading features of queries and keys are rotated as the layer's.

    Parameters: ``compressor`` (:class:`TokenCompressor`), ``q_b_proj`` (``query_dim -> H_I
    head_dim``), ``weights_proj`` (``embed_dim -> H_I``). No biases.
    """

    def __init__(self, embed_dim: int, query_dim: int, num_heads: int, head_dim: int, rate: int, eps: float) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, head_dim
        self.compressor = TokenCompressor(embed_dim, head_dim, rate, overlap=True, eps=eps)
        self.q_b_proj = nn.Linear(query_dim, num_heads * head_dim, bias=False)
        self.weights_proj = nn.Linear(embed_dim, num_heads, bias=False)

    def scores(
        self, x: Tensor, latent: Tensor, keys: Tensor, rotary: RotaryEmbedding, offset: int, context: AttentionContext
    ) -> Tensor:
        """``(B, Lq, E)``: the query tokens ``x`` at positions ``offset ..`` (their query ``latent``)
        against the index ``keys`` ``(B, E, head_dim)``, in float32 or the inputs' wider precision."""
        dtype = torch.promote_types(x.dtype, torch.float32)
        queries = self.q_b_proj(latent).unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)
        queries = rotate_heads(rotary, queries, offset, context).to(dtype)
        logits = F.relu(torch.einsum("bhqd,bed->bhqe", queries, keys.to(dtype))) * self.head_dim**-0.5
        weights = self.weights_proj(x).to(dtype) * self.num_heads**-0.5
        return torch.einsum("bqh,bhqe->bqe", weights, logits)


@dataclass(frozen=True)
class SharedWindow:
    """A ``deepseek_v4`` layer's window when decoding: the rotated shared key-value ``(B, 1, n, d)``
    of the last ``n <= w - 1`` positions, all that a later query's window of ``w`` reaches, and
    ``length``, every position seen. The keys are the values (one tensor, counted once), and the
    cache stops growing at ``w - 1`` positions, as transformers' sliding-window cache does."""

    shared: Tensor
    length: int

    @property
    def nbytes(self) -> int:
        return self.shared.nbytes

    def extend(self, shared: Tensor, window: int) -> tuple[Tensor, SharedWindow]:
        """What new positions' ``shared`` ``(B, 1, Lq, d)`` attend over (the window held, then
        them), and the window a later position needs: the last ``window - 1``, copied so that the
        prompt's keys are freed."""
        reach = torch.cat([self.shared, shared], dim=-2)
        kept = reach[..., reach.shape[-2] - min(window - 1, reach.shape[-2]) :, :]
        return reach, SharedWindow(
            kept.clone() if kept.shape[-2] < reach.shape[-2] else kept, self.length + shared.shape[-2]
        )

    def select(self, index: Tensor) -> SharedWindow:
        return SharedWindow(self.shared.index_select(0, index), self.length)


@dataclass(frozen=True)
class CompressedCache:
    """A compressed ``deepseek_v4`` layer's positions seen so far: its :class:`SharedWindow`, the
    compressor's state and, for compressed sparse attention, the indexer's compressor's. It grows by
    one entry (and one index key) per ``m`` tokens."""

    window: SharedWindow
    compressor: CompressorState
    indexer: CompressorState | None

    @property
    def length(self) -> int:
        return self.window.length

    @property
    def nbytes(self) -> int:
        return self.window.nbytes + self.compressor.nbytes + (0 if self.indexer is None else self.indexer.nbytes)

    def select(self, index: Tensor) -> CompressedCache:
        indexer = None if self.indexer is None else self.indexer.select(index)
        return CompressedCache(self.window.select(index), self.compressor.select(index), indexer)
