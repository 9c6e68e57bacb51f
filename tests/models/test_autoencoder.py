"""MAD's auto-encoder (:class:`zoo.models.SequenceAutoEncoder`): every position is decoded from the
encoder's last hidden state alone, as the equations written here compute it, at the positions
asked; :meth:`GPT.forward_features` is the forward without its output projection."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.attention.contract.context import AttentionContext
from zoo.models import GPT, RecallLM, SequenceAutoEncoder
from zoo.positions import sinusoidal_table


def _autoencoder(attention: str = "gated_deltanet") -> SequenceAutoEncoder:
    torch.manual_seed(0)
    encoder = RecallLM(vocab_size=16, block_size=12, d_model=32, num_heads=2, attention=attention, position="none")
    model = SequenceAutoEncoder(encoder).double().eval()
    for parameter in model.parameters():  # norms away from one, so that a missed norm shows
        parameter.data.add_(0.1 * torch.randn_like(parameter))
    return model


def _rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x / (x.pow(2).mean(-1, keepdim=True) + torch.finfo(x.dtype).eps).sqrt() * weight


def test_every_position_is_read_from_the_last_hidden_state_alone() -> None:
    model = _autoencoder()
    tokens = torch.randint(0, 15, (3, 12))
    tokens[:, -1] = 15
    logits, _ = model(tokens)
    hidden = model.encoder.final_norm(_hidden_states(model.encoder, tokens))[:, -1]  # (B, D)
    norm1, w1, _, norm2, w2, _ = model.decoder
    norm3, out = model.unembed
    x = hidden[:, None] + sinusoidal_table(12, 32).double()  # (B, L, D)
    z = F.gelu(F.linear(_rms_norm(x, norm1.weight), w1.weight, w1.bias))
    z = F.gelu(F.linear(_rms_norm(z, norm2.weight), w2.weight, w2.bias))
    expected = F.linear(_rms_norm(z, norm3.weight), out.weight, out.bias)
    torch.testing.assert_close(logits, expected)


def _hidden_states(gpt: GPT, tokens: torch.Tensor) -> torch.Tensor:
    """The blocks' output, run here one block at a time (the encoder's own loop not used)."""
    x = gpt.position.embed(gpt.embedding(tokens), 0)
    for block in gpt.blocks:
        x, _ = block(x, AttentionContext(is_causal=True))
    return x


def test_changing_an_input_changes_the_code_and_so_every_position() -> None:
    model = _autoencoder()
    tokens = torch.randint(0, 15, (1, 12))
    other = tokens.clone()
    other[0, 0] = (tokens[0, 0] + 1) % 15  # the first token: only the pooled last position carries it
    first, second = model(tokens)[0], model(other)[0]
    assert (first - second).abs().amax(-1).min() > 0  # every decoded position moved


def test_the_output_mask_decodes_only_its_positions_in_row_major_order() -> None:
    model = _autoencoder("dot_product")
    tokens = torch.randint(0, 16, (2, 12))
    mask = torch.rand(2, 12) < 0.4
    full, _ = model(tokens)
    masked, _ = model(tokens, output_mask=mask)
    torch.testing.assert_close(masked, full[mask])


def test_forward_features_is_the_forward_without_its_head() -> None:
    torch.manual_seed(0)
    gpt = GPT(vocab_size=20, block_size=10, d_model=16, num_heads=2, num_layers=2).eval()
    tokens = torch.randint(0, 20, (2, 10))
    hidden = gpt.forward_features(tokens)
    torch.testing.assert_close(gpt.head(hidden), gpt(tokens)[0])
    assert hidden.shape == (2, 10, 16)
