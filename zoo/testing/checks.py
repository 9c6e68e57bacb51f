"""The contract's checks on shapes, masks, causality and weights: each perturbs inputs and watches
the outputs, so it holds whatever the implementation (explicit scores, a fused kernel, none)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from zoo.attention import causal_mask
from zoo.testing.harness import BATCH, LK, LQ, Harness
from zoo.testing.report import fail

__all__ = ["check_causal", "check_fully_masked", "check_padding", "check_shape", "check_weights", "close"]

#: float32 comparisons: a leak of a perturbed key is orders of magnitude above this
_ATOL, _RTOL = 1e-5, 1e-4


def close(a: Tensor, b: Tensor, atol: float = _ATOL, rtol: float = _RTOL) -> bool:
    """Equal within tolerance; NaN equals NaN here, so that NaN is reported by its own check."""
    return bool(torch.allclose(a.float(), b.float(), atol=atol, rtol=rtol, equal_nan=True))


@torch.no_grad()
def check_shape(h: Harness, g: torch.Generator) -> None:
    lq, lk = h.lengths
    module, inputs = h.module(), h.inputs(lq, lk, g)
    output, weights = h(module, inputs)
    expected = (BATCH, lq, h.out_dim)
    if tuple(output.shape) != expected:
        fail(f"output has shape {tuple(output.shape)}, expected {expected} for queries {tuple(inputs[0].shape)}.")
    if output.dtype != torch.float32 or not torch.isfinite(output).all():
        fail(f"output must be finite float32 for float32 inputs (dtype {output.dtype}).")
    if weights is not None:
        fail("weights were returned although need_weights=False.")
    every_position = torch.ones(BATCH, lk, dtype=torch.bool)
    changed, _ = h(module, h.perturb(inputs, every_position, g))
    if close(changed, output):
        fail("the output does not change when every key and value changes: it ignores its inputs.")


def _mask_cases(h: Harness, lq: int, lk: int, g: torch.Generator) -> list[tuple[str, dict[str, Any], Tensor]]:
    """Masks as the forward takes them, and the ``(B, Lq, Lk)`` pairs a query may see under them
    (causality included for a causal-only variant). A variant that takes key padding only gets
    key masks: lengths, and a boolean ``(B, 1, Lk)`` mask (left padding and holes)."""
    lengths = torch.tensor([lk, 3, 1])
    per_query = torch.randint(0, lk + 1, (BATCH, lq), generator=g)
    attn_mask = torch.rand(BATCH, 1 if h.key_masks_only else lq, lk, generator=g) > 0.4
    positions = torch.arange(lk)
    cases = [
        (
            "valid_lens of shape (B,)",
            {"valid_lens": lengths},
            (positions < lengths[:, None, None]).expand(BATCH, lq, lk),
        ),
        ("valid_lens of shape (B, Lq)", {"valid_lens": per_query}, positions < per_query[..., None]),
        ("a boolean attn_mask", {"attn_mask": attn_mask}, attn_mask.expand(BATCH, lq, lk)),
    ]
    if h.key_masks_only:
        cases = [(what.replace("attn_mask", "attn_mask (B, 1, Lk)"), mask, keep) for what, mask, keep in cases]
        del cases[1]
    return [(what, mask, h.visible(keep)) for what, mask, keep in cases]


@torch.no_grad()
def _check_hidden_keys(h: Harness, g: torch.Generator, lq: int, lk: int, what: str, keep: Tensor, **mask: Any) -> None:
    """Perturb one key position at a time; no query that cannot see it may change."""
    module, inputs = h.module(), h.inputs(lq, lk, g)
    baseline, _ = h(module, inputs, **mask)
    for j in range(lk):
        position = torch.zeros(BATCH, lk, dtype=torch.bool)
        position[:, j] = True
        changed, _ = h(module, h.perturb(inputs, position, g), **mask)
        hidden = ~keep[:, :, j]  # (B, Lq): queries that must not see key j
        if h.form == "x":
            hidden[:, j] = False  # position j is also a query, and it changed
        for b, i in hidden.nonzero().tolist():
            if not close(changed[b, i], baseline[b, i]):
                fail(
                    f"with {what}, query {i} of sequence {b} changed when key/value {j}, hidden from it, "
                    f"changed (max difference {float((changed[b, i] - baseline[b, i]).abs().max()):.3g})."
                )


def check_padding(h: Harness, g: torch.Generator) -> None:
    lq, lk = h.lengths
    for what, mask, keep in _mask_cases(h, lq, lk, g):
        _check_hidden_keys(h, g, lq, lk, what, keep, **mask)


def check_causal(h: Harness, g: torch.Generator) -> None:
    # fewer queries than keys (bottom-right) is decoding's shape: a causal-only recurrence takes it
    # through attend_cached (the state_decoding check), not a forward over one sequence
    shapes = [(LK, LK)] if h.form == "x" or h.causal_only else [(LK, LK), (LQ, LK)]
    for lq, lk in shapes:
        keep = causal_mask(lq, lk).expand(BATCH, lq, lk)
        _check_hidden_keys(h, g, lq, lk, f"is_causal=True ({lq} queries, {lk} keys)", keep, is_causal=True)


def _fully_masked_cases(h: Harness) -> list[tuple[str, int, int, dict[str, Any], Tensor]]:
    """Masks leaving some query with no visible key: ``(what, Lq, Lk, mask, rows)``."""
    lq, lk = h.lengths
    lengths = torch.tensor([0, 2, lk])
    empty_rows = torch.zeros(BATCH, lq, dtype=torch.bool)
    empty_rows[0] = True
    cases = [("valid_lens 0", lq, lk, {"valid_lens": lengths}, empty_rows)]
    empty_row = torch.zeros(BATCH, lq, dtype=torch.bool)
    if h.key_masks_only and h.causal_only:  # left padding: the queries before the first real key see none
        attn_mask = (torch.arange(lk) >= torch.tensor([0, 3, 0])[:, None]).unsqueeze(1)
        empty_row[1, :3] = True
        cases.append(("a left-padded row (attn_mask (B, 1, Lk))", lq, lk, {"attn_mask": attn_mask}, empty_row))
    elif not h.key_masks_only:
        attn_mask = torch.ones(BATCH, lq, lk, dtype=torch.bool)
        attn_mask[1, 2] = False
        empty_row[1, 2] = True
        cases.append(("an attn_mask row of False", lq, lk, {"attn_mask": attn_mask}, empty_row))
    if h.can.supports_causal and h.form != "x" and not h.causal_only:
        before_every_key = torch.zeros(BATCH, LK, dtype=torch.bool)
        before_every_key[:, : LK - LQ] = True
        cases.append(("is_causal with more queries than keys", LK, LQ, {"is_causal": True}, before_every_key))
    return cases


def _asked_weights(weights: Tensor | None) -> Tensor:
    """The weights a call with ``need_weights=True`` returned; a variant that gave none fails here."""
    if weights is None:
        fail(
            "need_weights=True returned no weights although the variant declares supports_weights (the "
            "default): return them, or declare supports_weights = False and raise IncompatibleAttentionError "
            "when context.need_weights asks for them."
        )
    return weights


@torch.no_grad()
def check_fully_masked(h: Harness, g: torch.Generator) -> None:
    module = h.module()
    for what, lq, lk, mask, rows in _fully_masked_cases(h):
        need_weights = h.can.supports_weights
        output, weights = h(module, h.inputs(lq, lk, g), need_weights=need_weights, **mask)
        if not torch.isfinite(output).all():
            fail(f"a query with no visible key ({what}) gives a non-finite output (NaN or inf).")
        if h.scoring and not torch.equal(output[rows], torch.zeros_like(output[rows])):
            fail(f"a query with no visible key ({what}) must get a zero output (zero weights), not an average.")
        if need_weights:
            weights = _asked_weights(weights)
            empty = weights[rows] if weights.dim() == 3 else weights.transpose(0, 1)[:, rows]
            if not torch.equal(empty, torch.zeros_like(empty)):
                fail(f"a query with no visible key ({what}) must get all-zero weights.")


@torch.no_grad()
def check_weights(h: Harness, g: torch.Generator) -> None:
    lq, lk = h.lengths
    module, inputs = h.module(), h.inputs(lq, lk, g)
    cases = _mask_cases(h, lq, lk, g) if h.can.supports_padding_mask else []
    for what, mask, keep in [("no mask", {}, h.visible(torch.ones(BATCH, lq, lk, dtype=torch.bool))), *cases]:
        output, weights = h(module, inputs, need_weights=True, **mask)
        plain, _ = h(module, inputs, **mask)
        weights = _asked_weights(weights)
        if weights.shape[0] != BATCH or tuple(weights.shape[-2:]) != (lq, lk) or weights.dim() not in (3, 4):
            fail(
                f"weights have shape {tuple(weights.shape)}, expected ({BATCH}, {lq}, {lk}) or ({BATCH}, heads, {lq}, {lk})."
            )
        keep_b = keep if weights.dim() == 3 else keep.unsqueeze(1)
        if (weights.masked_select(~keep_b.expand_as(weights)) != 0).any():
            fail(f"with {what}, weights must be exactly zero on keys a query cannot see.")
        sees = weights.ne(0).any(-1)  # the rows the variant gives any weight
        # a recurrent variant's weights are its decayed scores, which multiply the values, and a variant
        # that declares normalized_weights=False (sigmoid, softpick, a learned sink, a difference of two
        # softmax maps) maps its scores to weights that are no distribution either
        normalized = h.can.normalized_weights
        distribution = normalized and not h.recurrent
        if distribution and (weights < 0).any():
            fail(f"with {what}, weights must be non-negative.")
        if distribution and not close(weights.sum(-1), sees.to(weights.dtype)):
            fail(f"with {what}, each query's weights must sum to 1 (0 for a query that sees no key).")
        if normalized:  # else all-zero weights need not mean a query sees no key (softpick rectifies them)
            _check_blind_rows(h, module, inputs, output, sees if weights.dim() == 3 else sees.any(1), what, g, **mask)
        if not close(output, plain):
            fail(f"with {what}, need_weights=True changes the output (the explicit and the fast path disagree).")
        if h.scoring and not close(output, weights @ inputs[2].cpu()):
            fail(f"with {what}, the output is not weights @ values.")


def _check_blind_rows(
    h: Harness,
    module: nn.Module,
    inputs: tuple[Tensor, Tensor, Tensor],
    output: Tensor,
    sees: Tensor,
    what: str,
    g: torch.Generator,
    **mask: Any,
) -> None:
    """A query with all-zero weights sees no key (a window over padding, a fully masked row): then
    no key or value may change its output. Every position is perturbed at once but a blind query's
    own (a self-attention layer's queries are its keys)."""
    blind = ~sees  # (B, Lq), all heads
    if not blind.any():
        return
    positions = torch.ones(BATCH, inputs[1].shape[-2], dtype=torch.bool)
    if h.form == "x":
        positions &= ~blind
    changed, _ = h(module, h.perturb(inputs, positions, g), need_weights=True, **mask)
    for b, i in blind.nonzero().tolist():
        if not close(changed[b, i], output[b, i]):
            fail(
                f"with {what}, query {i} of sequence {b} has all-zero weights, yet its output changes with the keys and values."
            )
