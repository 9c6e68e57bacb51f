"""Greedy and beam-search decoding for any encoder-decoder that follows :class:`EncoderDecoder`.

A model exposes three methods and the search works on it, whatever its architecture:

* ``encode(src, src_lens) -> state``: run the encoder once;
* ``decode_step(tokens, state) -> (logits, state)``: feed one token per row, get next-token
  logits ``(N, V)`` (a model with a cache extends it instead of re-reading the prefix);
* ``reorder_state(state, index) -> state``: pick rows of the batch (beam search).

Both searches return, per source, the output token ids without ``<bos>`` and ``<eos>``.
Beam search with ``beam_size=1`` returns exactly the greedy output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

__all__ = ["DecodeLimits", "EncoderDecoder", "beam_search", "greedy_decode", "length_penalty"]


class EncoderDecoder(Protocol):
    """What the searches need from a model."""

    def encode(self, src: Tensor, src_lens: Tensor) -> Any: ...

    def decode_step(self, tokens: Tensor, state: Any) -> tuple[Tensor, Any]: ...

    def reorder_state(self, state: Any, index: Tensor) -> Any: ...


@dataclass(frozen=True)
class DecodeLimits:
    """What every search needs besides the model and the sources (as a generation config holds
    them): the token each output starts from and the one that ends it, the longest output, and the
    tokens never produced (padding, ``<bos>``).
    """

    bos: int
    eos: int
    max_len: int
    forbid: Sequence[int] = ()


@torch.no_grad()
def greedy_decode(model: EncoderDecoder, src: Tensor, src_lens: Tensor, limits: DecodeLimits) -> list[list[int]]:
    """Pick the most likely token at every step, up to ``limits.max_len`` tokens or ``<eos>``."""
    bos, eos, forbid = limits.bos, limits.eos, limits.forbid
    state = model.encode(src, src_lens)
    batch = src.shape[0]
    tokens = torch.full((batch,), bos, dtype=torch.long, device=src.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    steps: list[Tensor] = []
    for _ in range(limits.max_len):
        logits, state = model.decode_step(tokens, state)
        tokens = _forbid(logits, forbid).argmax(-1).masked_fill(finished, eos)
        steps.append(tokens)
        finished |= tokens == eos
        if bool(finished.all()):
            break
    output = torch.stack(steps, 1).tolist() if steps else [[] for _ in range(batch)]
    return [_strip(row, eos) for row in output]


def length_penalty(length: Tensor | int, alpha: float) -> Tensor | float:
    """GNMT's length normalizer ``((5 + length) / 6) ** alpha``; ``alpha = 0`` disables it."""
    return ((5 + length) / 6) ** alpha


@torch.no_grad()
def beam_search(
    model: EncoderDecoder,
    src: Tensor,
    src_lens: Tensor,
    limits: DecodeLimits,
    *,
    beam_size: int = 4,
    alpha: float = 0.6,
) -> list[list[int]]:
    """Batched beam search; hypotheses are ranked by log-probability / ``length_penalty``.

    Each step expands every live beam, keeps the ``2 * beam_size`` best continuations, moves
    those among the ``beam_size`` best that end in ``<eos>`` to the finished list and
    continues with the best ``beam_size`` others. A source is done once it has ``beam_size``
    finished hypotheses; at ``limits.max_len`` its live beams compete with the finished ones.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}.")
    bos, eos, forbid = limits.bos, limits.eos, limits.forbid
    batch, k, device = src.shape[0], beam_size, src.device
    state = model.reorder_state(model.encode(src, src_lens), torch.arange(batch, device=device).repeat_interleave(k))
    scores = torch.full((batch, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: keep one
    history = torch.full((batch * k, 0), bos, dtype=torch.long, device=device)
    tokens = torch.full((batch * k,), bos, dtype=torch.long, device=device)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    done = [False] * batch

    for step in range(limits.max_len):
        logits, state = model.decode_step(tokens, state)
        log_probs = torch.log_softmax(_forbid(logits.float(), forbid), dim=-1)  # (batch * k, V)
        vocab = log_probs.shape[-1]
        candidates = (scores.reshape(-1, 1) + log_probs).reshape(batch, k * vocab)
        top_scores, top_index = candidates.topk(min(2 * k, k * vocab), dim=-1)  # (batch, 2k)
        beam_origin, next_token = top_index // vocab, top_index % vocab

        new_scores = torch.full((batch, k), float("-inf"), device=device)
        new_origin = torch.zeros((batch, k), dtype=torch.long, device=device)
        new_token = torch.full((batch, k), eos, dtype=torch.long, device=device)
        rows_scores, rows_origin, rows_token = top_scores.tolist(), beam_origin.tolist(), next_token.tolist()
        for b in range(batch):
            if done[b]:
                continue
            alive = 0
            for rank, (score, origin, token) in enumerate(zip(rows_scores[b], rows_origin[b], rows_token[b])):
                if score == float("-inf"):
                    break
                if token == eos:
                    # only an <eos> among the k best ends a hypothesis (as in fairseq), so
                    # that beam_size=1 is exactly greedy decoding
                    if rank < k and len(finished[b]) < k:
                        hypothesis = history[b * k + origin].tolist()
                        finished[b].append((score / length_penalty(step + 1, alpha), hypothesis))
                elif alive < k:
                    new_scores[b, alive], new_origin[b, alive], new_token[b, alive] = score, origin, token
                    alive += 1
                if alive == k and len(finished[b]) >= k:
                    break
            done[b] = len(finished[b]) >= k
        if all(done):
            break
        flat_origin = (torch.arange(batch, device=device).unsqueeze(1) * k + new_origin).reshape(-1)
        state = model.reorder_state(state, flat_origin)
        tokens = new_token.reshape(-1)
        history = torch.cat([history.index_select(0, flat_origin), tokens.unsqueeze(1)], dim=1)
        scores = new_scores

    results = []
    for b in range(batch):
        if not done[b]:  # max_len reached: live beams compete with what finished
            for beam in range(k):
                if scores[b, beam] > float("-inf"):
                    normalized = float(scores[b, beam]) / length_penalty(history.shape[1], alpha)
                    finished[b].append((normalized, history[b * k + beam].tolist()))
        results.append(max(finished[b], key=lambda item: item[0])[1])
    return results


def _forbid(logits: Tensor, tokens: Sequence[int]) -> Tensor:
    """``logits`` with the given token ids made impossible."""
    if not tokens:
        return logits
    logits = logits.clone()
    logits[:, list(tokens)] = float("-inf")
    return logits


def _strip(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos)] if eos in row else row
