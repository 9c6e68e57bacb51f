"""MAD's auto-encoder for its compression task (Poli et al., 2024; ``mad/model/auto_encoder.py`` of
athms/mad-lab): a sequence model encodes the whole input into the hidden state of its last
position, and a small MLP decodes every position from that one vector.

With ``h`` the encoder's final hidden state at the last position ``L - 1`` (MAD's
``global_pool="last"``: the compression token, which a causal stack lets see every input),
``p_t`` a fixed sinusoidal position vector and ``N`` an RMSNorm,

    z_t = GELU(W_2 N(GELU(W_1 N(h + p_t))))        decoder (MAD's, not widened: D -> D -> D)
    logits_t = W_o N(z_t)                           unembedding, not tied to the input embedding

so position ``t``'s id must be read back from ``h`` alone: the encoder has to compress the
sequence into ``D`` numbers, which is what the task measures of a sequence mixer. A causal
language model that read the inputs would copy them, which is why MAD switches compression to
this backbone.

Where the zoo differs from MAD's code: the encoder is :class:`~zoo.models.GPT` (pre-norm blocks
and a final LayerNorm, MAD's encoder pre-RMSNorm residual blocks without a final norm, the
decoder's first norm following either way); the position table is the zoo's interleaved sinusoid
(:func:`~zoo.positions.sinusoidal_table`; MAD concatenates its sines and cosines, a permutation of
the same kind of table, which the learned ``W_1`` absorbs).
"""

from __future__ import annotations

from torch import Tensor, nn

from zoo.models.gpt import GPT, INIT_STD
from zoo.positions import sinusoidal_table

__all__ = ["SequenceAutoEncoder"]


class SequenceAutoEncoder(nn.Module):
    """Encode with ``encoder``, pool its last position, decode every position (module docstring).

    Its ``forward`` has :class:`~zoo.models.GPT`'s signature for training, so a task drives either
    backbone the same way: logits ``(B, L, V)``, or ``(N, V)`` at the positions of ``output_mask``.
    The decoder's and unembedding's weights start as MAD's: normal with standard deviation 0.02,
    biases zero, norms one.

    Args:
        encoder: The sequence model whose final hidden states are pooled (its tied output head is
            not used).
    """

    def __init__(self, encoder: GPT) -> None:
        super().__init__()
        width = encoder.embedding.embedding_dim
        self.encoder = encoder
        self.register_buffer("positions", sinusoidal_table(encoder.block_size, width), persistent=False)
        self.decoder = nn.Sequential(
            nn.RMSNorm(width), nn.Linear(width, width), nn.GELU(), nn.RMSNorm(width), nn.Linear(width, width), nn.GELU()
        )
        self.unembed = nn.Sequential(nn.RMSNorm(width), nn.Linear(width, encoder.vocab_size))
        for module in (*self.decoder, *self.unembed):
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=INIT_STD)
                nn.init.zeros_(module.bias)

    @property
    def vocab_size(self) -> int:
        return self.encoder.vocab_size

    def encode(self, tokens: Tensor) -> Tensor:
        """The code ``(B, D)`` of ``tokens`` ``(B, L)``: the encoder's final hidden state at ``L - 1``."""
        last = tokens.new_zeros(tokens.shape, dtype=bool)
        last[:, -1] = True
        return self.encoder.forward_features(tokens, output_mask=last)

    def decode(self, code: Tensor, output_mask: Tensor) -> Tensor:
        """Logits ``(N, V)`` at the True positions ``(b, t)`` of ``output_mask`` ``(B, L)``, each
        read from ``code[b]`` and position ``t`` alone."""
        rows, steps = output_mask.nonzero(as_tuple=True)
        return self.unembed(self.decoder(code[rows] + self.positions[steps]))

    def forward(self, tokens: Tensor, *, output_mask: Tensor | None = None) -> tuple[Tensor, None]:
        """Logits ``(B, L, V)`` reconstructing ``tokens`` ``(B, L)``; with ``output_mask``
        (booleans ``(B, L)``), ``(N, V)`` at its True positions in row-major order."""
        code = self.encode(tokens)
        if output_mask is None:
            return self.decode(code, tokens.new_ones(tokens.shape, dtype=bool)).view(*tokens.shape, -1), None
        return self.decode(code, output_mask), None
