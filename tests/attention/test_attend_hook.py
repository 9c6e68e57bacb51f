"""The ``attend`` hook: causality travels as a flag, and the fused causal path equals the explicit one."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from zoo.attention import Attention, AttentionOutput, DotProductAttention
from zoo.attention.contract.masking import causal_mask, masked_softmax
from zoo.attention.kernels import sdpa as sdpa_module
from zoo.models.transformer import Transformer


def explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Softmax attention written out, with ``keep`` (True = attend) already holding causality."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return masked_softmax(scores, mask=keep) @ v


SHAPES = [(6, 6, False), (6, 6, True), (3, 6, False), (3, 6, True), (1, 6, False), (1, 6, True)]


@pytest.mark.parametrize(("lq", "lk", "padded"), SHAPES)
def test_fused_causal_path_equals_explicit_one(lq: int, lk: int, padded: bool) -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, lq, 8), torch.randn(2, lk, 8), torch.randn(2, lk, 8)
    valid_lens = torch.tensor([lk, lk - 2]) if padded else None
    attention = DotProductAttention()
    fused = attention(q, k, v, valid_lens, is_causal=True).output
    with_weights = attention(q, k, v, valid_lens, is_causal=True, need_weights=True).output
    keep = causal_mask(lq, lk)
    if padded:
        keep = keep & (torch.arange(lk) < valid_lens[:, None, None])
    torch.testing.assert_close(fused, explicit(q, k, v, keep))
    torch.testing.assert_close(with_weights, explicit(q, k, v, keep))


def test_kernel_gets_the_causal_flag_and_no_mask_when_that_is_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    calls, kernel = [], F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append((kwargs["attn_mask"], kwargs["is_causal"]))
        return kernel(*args, **kwargs)

    monkeypatch.setattr(sdpa_module.F, "scaled_dot_product_attention", spy)
    attention, x = DotProductAttention(), torch.randn(2, 5, 4)
    attention(x, x, x, is_causal=True)  # square, no mask: the flag alone
    attention(x[:, -1:], x, x, is_causal=True)  # one cached query sees every key: nothing
    attention(x[:, -2:], x, x, is_causal=True)  # bottom-right alignment differs from the kernel's: a mask
    attention(x, x, x, torch.tensor([5, 3]), is_causal=True)  # padding: causality merged into it
    assert [(mask is None, flag) for mask, flag in calls] == [
        (True, True),
        (True, False),
        (False, False),
        (False, False),
    ]
    torch.testing.assert_close(calls[2][0], causal_mask(2, 5)[None])  # at the inputs' rank


class _Recorder(Attention):
    """Records what ``forward`` hands to ``attend``."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[torch.Tensor | None, bool]] = []

    def score(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return queries @ keys.transpose(-2, -1)

    def attend(self, queries, keys, values, context) -> AttentionOutput:
        self.seen.append((context.mask, context.is_causal))
        return super().attend(queries, keys, values, context)


def test_attend_gets_the_padding_mask_without_causality() -> None:
    recorder, x = _Recorder(), torch.randn(2, 4, 3)
    recorder(x, x, x, torch.tensor([4, 2]), is_causal=True)
    recorder(x, x, x, is_causal=True)
    (padding, causal), (none, causal_again) = recorder.seen
    assert causal and causal_again and none is None
    torch.testing.assert_close(padding, torch.tensor([[[True] * 4], [[True, True, False, False]]]))


def test_transformer_training_and_cached_decoding_equal_the_explicit_path(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = Transformer(
        vocab_size=20, d_model=16, num_heads=2, num_encoder_layers=1, num_decoder_layers=2, ffn_hidden=32, dropout=0.0
    ).eval()
    src, src_lens, tgt = torch.randint(1, 20, (2, 7)), torch.tensor([7, 4]), torch.randint(1, 20, (2, 5))

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        logits, _ = model(src, src_lens, tgt)
        state, steps = model.encode(src, src_lens), []
        for t in range(tgt.shape[1]):
            step, state = model.decode_step(tgt[:, t], state)
            steps.append(step)
        return logits, torch.stack(steps, 1)

    with torch.no_grad():
        fused_logits, fused_steps = run()
        monkeypatch.setattr(DotProductAttention, "attend", Attention.attend)  # the explicit softmax everywhere
        explicit_logits, explicit_steps = run()
    torch.testing.assert_close(fused_logits, explicit_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_steps, explicit_steps, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_steps, fused_logits, atol=1e-5, rtol=1e-5)
