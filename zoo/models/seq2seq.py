"""GRU encoder-decoder with Bahdanau attention, for translation-style sequence-to-sequence tasks.

The encoder reads the source once; the decoder emits one token per step and, before every step,
looks back at the whole source through a registered scoring attention:

    src (B, Ls) -> embed -> GRU encoder -> memory (B, Ls, H), hidden (num_layers, B, H)

    for each target step t:
        query    = hidden[-1]                         (B, 1, H)  what the decoder knows so far
        context  = attention(query, memory, memory)   (B, 1, H)  padding of the source masked
        hidden   = GRU([embed(token_t), context], hidden)
        logits_t = project(hidden[-1])                (B, V)

Source and target share one (joint) vocabulary, so the decoder's output projection can reuse the
embedding matrix. The model follows :class:`zoo.models.decoding.EncoderDecoder`: ``encode`` /
``decode_step`` / ``reorder_state`` run exactly the computation of :meth:`Seq2SeqAttention.forward`
one step at a time, so greedy and beam search score a prefix as teacher forcing does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from zoo.attention import create_scoring_attention, lengths_to_mask, require_attention

__all__ = ["Seq2SeqAttention"]

#: The decoding state: ``memory`` (N, Ls, H) encoder outputs, ``memory_mask`` (N, 1, Ls) True on
#: real source tokens (built once per source, not per step), ``hidden`` (num_layers, N, H)
#: decoder GRU state. Plain tensors, so beam search can reorder rows.
State = dict[str, Tensor]


class Seq2SeqAttention(nn.Module):
    """GRU encoder + GRU decoder with (Bahdanau) attention over the encoder outputs.

    Args:
        vocab_size: Size of the joint source/target vocabulary.
        embed_dim: Token embedding size.
        hidden_size: GRU hidden size (encoder and decoder); also the attention's query/key size.
        num_layers: Stacked GRU layers in the encoder and in the decoder.
        dropout: Dropout on embeddings, between GRU layers and before the output layer.
        attention: Registered scoring-attention name; it must take padding masks, return
            weights and attend over another sequence (``additive`` and ``dot_product`` do;
            ``local`` does not).
        attention_kwargs: Extra keyword arguments for the attention's constructor.
        padding_idx: Token id of padding.
        tie_embeddings: Project decoder states to ``embed_dim`` and score the vocabulary against
            the embedding matrix (shared weights) instead of a separate ``Linear(hidden, vocab)``.
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int = 256,
        hidden_size: int = 256,
        num_layers: int = 2,
        dropout: float = 0.2,
        attention: str = "additive",
        attention_kwargs: dict[str, Any] | None = None,
        padding_idx: int = 0,
        tie_embeddings: bool = True,
    ) -> None:
        super().__init__()
        require_attention(
            attention, padding=True, weights=True, cross=True, bidirectional=True, role="the GRU decoder (Bahdanau)"
        )
        for label, size in (
            ("vocab_size", vocab_size),
            ("embed_dim", embed_dim),
            ("hidden_size", hidden_size),
            ("num_layers", num_layers),
        ):
            if not isinstance(size, int) or size <= 0:
                raise ValueError(f"Seq2SeqAttention: {label} must be a positive integer, got {size!r}.")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"Seq2SeqAttention: dropout must be in [0, 1), got {dropout}.")
        if not 0 <= padding_idx < vocab_size:
            raise ValueError(f"padding_idx {padding_idx} is outside the vocabulary of {vocab_size} tokens.")
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.padding_idx = padding_idx
        rnn_dropout = dropout if num_layers > 1 else 0.0

        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=padding_idx)
        self.dropout = nn.Dropout(dropout)
        self.encoder = nn.GRU(embed_dim, hidden_size, num_layers, batch_first=True, dropout=rnn_dropout)
        self.attention = create_scoring_attention(attention, head_dim=hidden_size, **(attention_kwargs or {}))
        self.decoder = nn.GRU(embed_dim + hidden_size, hidden_size, num_layers, batch_first=True, dropout=rnn_dropout)
        if tie_embeddings:
            # hidden -> embedding space, then scores against the (shared) embedding matrix; the
            # padding row then learns through the output layer too (harmless: pad is never fed
            # to the encoder, and a padded decoder input only follows the positions that count)
            self.output_proj: nn.Module = nn.Linear(hidden_size, embed_dim)
            self.output_bias: nn.Parameter | None = nn.Parameter(torch.zeros(vocab_size))
        else:
            self.output_proj = nn.Linear(hidden_size, vocab_size)
            self.output_bias = None
        self.tie_embeddings = tie_embeddings

    # ------------------------------------------------------------------ teacher forcing

    def forward(
        self, src: Tensor, src_lens: Tensor, tgt_in: Tensor, *, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """Teacher-forced logits for every target position.

        Args:
            src: ``(B, Ls)`` source token ids, padded after ``src_lens``.
            src_lens: ``(B,)`` source lengths, each in ``[1, Ls]``.
            tgt_in: ``(B, Lt)`` decoder inputs (``<bos>`` + target).
            need_weights: Also return the attention weights.

        Returns:
            logits ``(B, Lt, V)`` and, if ``need_weights``, weights ``(B, 1, Lt, Ls)`` (one "head",
            so they read like multi-head weights), else None.
        """
        src_lens = self._check_source(src, src_lens)
        self._check_tokens(tgt_in, "tgt_in", "(batch, target_length)")
        if tgt_in.shape[0] != src.shape[0]:
            raise ValueError(
                f"Seq2SeqAttention: src and tgt_in must have the same batch size; got {src.shape[0]} and {tgt_in.shape[0]}."
            )
        state = self._encode(src, src_lens)
        embedded = self.dropout(self.embedding(tgt_in))  # (B, Lt, E)
        outputs, weights = [], []
        for t in range(tgt_in.shape[1]):
            output, state, step_weights = self._step(embedded[:, t : t + 1], state, need_weights)  # (B, 1, H)
            outputs.append(output)
            weights.append(step_weights)
        logits = self._logits(torch.cat(outputs, dim=1))  # (B, Lt, V)
        if not need_weights:
            return logits, None
        return logits, torch.cat(weights, dim=1).unsqueeze(1)  # (B, Lt, Ls) -> (B, 1, Lt, Ls)

    # ------------------------------------------------------------------ the EncoderDecoder protocol

    def encode(self, src: Tensor, src_lens: Tensor) -> State:
        """Run the encoder once; return the initial decoding state (see :data:`State`)."""
        return self._encode(src, self._check_source(src, src_lens))

    def _encode(self, src: Tensor, src_lens: Tensor) -> State:
        embedded = self.dropout(self.embedding(src))  # (B, Ls, E)
        # packing keeps padding out of the recurrence: the final hidden state is that of the last
        # real token of each row, and outputs past a row's length come back as zeros
        packed = pack_padded_sequence(embedded, src_lens.cpu(), batch_first=True, enforce_sorted=False)
        packed_memory, hidden = self.encoder(packed)  # hidden: (num_layers, B, H)
        memory, _ = pad_packed_sequence(packed_memory, batch_first=True, total_length=src.shape[1])  # (B, Ls, H)
        memory_mask = lengths_to_mask(src_lens, src.shape[1]).unsqueeze(1)  # (B, 1, Ls)
        return {"memory": memory, "memory_mask": memory_mask, "hidden": hidden}

    def decode_step(self, tokens: Tensor, state: State) -> tuple[Tensor, State]:
        """Feed one token per row ``(N,)``; return next-token logits ``(N, V)`` and the new state."""
        if not isinstance(tokens, Tensor) or tokens.dim() != 1 or tokens.shape[0] != state["memory"].shape[0]:
            shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
            raise ValueError(
                f"Seq2SeqAttention.decode_step: tokens must have shape (N,) = ({state['memory'].shape[0]},), "
                f"one token per row of the state; got {shape}."
            )
        embedded = self.dropout(self.embedding(tokens.unsqueeze(1)))  # (N, 1, E)
        output, state, _ = self._step(embedded, state, need_weights=False)
        return self._logits(output).squeeze(1), state  # (N, V)

    def reorder_state(self, state: State, index: Tensor) -> State:
        """Pick rows ``index`` of the batch (beam search); ``hidden`` has the batch on axis 1."""
        return {
            "memory": state["memory"].index_select(0, index),
            "memory_mask": state["memory_mask"].index_select(0, index),
            "hidden": state["hidden"].index_select(1, index),
        }

    # ------------------------------------------------------------------ one decoder step

    def _step(self, embedded: Tensor, state: State, need_weights: bool) -> tuple[Tensor, State, Tensor | None]:
        """One decoder step from embedded inputs ``(B, 1, E)``: the only place the decoder runs.

        Returns the top-layer output ``(B, 1, H)``, the new state and, if asked, weights ``(B, 1, Ls)``.
        """
        memory, memory_mask, hidden = state["memory"], state["memory_mask"], state["hidden"]
        query = hidden[-1].unsqueeze(1)  # (B, 1, H): the decoder state before this step
        context, weights = self.attention(
            query, memory, memory, attn_mask=memory_mask, need_weights=need_weights
        )  # (B, 1, H)
        output, hidden = self.decoder(torch.cat([embedded, context], dim=-1), hidden)  # (B, 1, H), (num_layers, B, H)
        return output, {"memory": memory, "memory_mask": memory_mask, "hidden": hidden}, weights

    def _logits(self, output: Tensor) -> Tensor:
        """Decoder outputs ``(..., H)`` -> vocabulary logits ``(..., V)``."""
        projected = self.output_proj(self.dropout(output))
        if self.output_bias is None:
            return projected
        return F.linear(projected, self.embedding.weight, self.output_bias)  # tied with the embedding

    # ------------------------------------------------------------------ input checks

    def _check_tokens(self, tokens: Tensor, label: str, shape: str) -> None:
        if not isinstance(tokens, Tensor):
            raise TypeError(
                f"Seq2SeqAttention: {label} must be a tensor of token ids {shape}, got {type(tokens).__name__}."
            )
        if tokens.dim() != 2:
            raise ValueError(f"Seq2SeqAttention: {label} must have shape {shape}; got {tuple(tokens.shape)}.")
        if tokens.is_floating_point() or tokens.dtype == torch.bool:
            raise ValueError(f"Seq2SeqAttention: {label} must hold integer token ids, got dtype {tokens.dtype}.")

    def _check_source(self, src: Tensor, src_lens: Tensor) -> Tensor:
        """Validate ``src`` / ``src_lens``; return the lengths as a long tensor on ``src``'s device."""
        self._check_tokens(src, "src", "(batch, source_length)")
        batch, length = src.shape
        if not isinstance(src_lens, Tensor) or tuple(src_lens.shape) != (batch,):
            shape = tuple(src_lens.shape) if isinstance(src_lens, Tensor) else type(src_lens).__name__
            raise ValueError(
                f"Seq2SeqAttention: src_lens must have shape (batch,) = ({batch},), one length per source; got {shape}."
            )
        if src_lens.is_floating_point() or src_lens.dtype == torch.bool:
            raise ValueError(f"Seq2SeqAttention: src_lens must be an integer tensor, got dtype {src_lens.dtype}.")
        if batch and (int(src_lens.min()) < 1 or int(src_lens.max()) > length):
            raise ValueError(
                f"Seq2SeqAttention: src_lens must lie in [1, {length}] (the padded source length); got values "
                f"from {int(src_lens.min())} to {int(src_lens.max())}."
            )
        return src_lens.to(device=src.device, dtype=torch.long)
