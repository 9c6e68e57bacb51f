"""The runner: :func:`check_attention` builds the harness, runs each check the variant's
capabilities call for, and checks that it refuses the ones it declares it lacks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from zoo.attention import IncompatibleAttentionError
from zoo.testing.checks import check_causal, check_fully_masked, check_padding, check_shape, check_weights
from zoo.testing.decoding import check_state_decoding, check_state_size, decodes_with_state
from zoo.testing.harness import LQ, Harness, build_harness
from zoo.testing.numerics import check_gradients, half_precision_check
from zoo.testing.report import AttentionContractError, ContractReport

__all__ = ["check_attention"]


def check_attention(
    variant: str | type[nn.Module] | nn.Module,
    /,
    *,
    device: str | torch.device = "cpu",
    dtypes: Sequence[torch.dtype] = (torch.float16, torch.bfloat16),
    position: str | None = None,
    **kwargs: Any,
) -> ContractReport:
    """Check an attention variant against the zoo's attention contract (see :mod:`zoo.testing`).

    Args:
        variant: A registered name, a subclass of :class:`zoo.Attention` or
            :class:`zoo.AttentionLayer`, or an instance of one.
        device: Where every check runs (``"cuda"``, ``"cuda:1"``, ...): the variant's kernels on
            that device are what is checked.
        dtypes: Half-precision dtypes to run, on ``device``; ``()`` skips them.
        position: A registered positional scheme to run the checks with (see :mod:`zoo.testing`);
            one the variant cannot take raises :class:`~zoo.attention.IncompatibleAttentionError`.
        **kwargs: Constructor arguments (when ``variant`` is a name or a class). Constructors
            taking ``query_size``/``key_size`` (scoring) or ``embed_dim``/``num_heads`` (layers)
            get small defaults. A scoring attention that reads the layer's input is checked
            inside a ``self`` layer (``embed_dim`` 8 and ``num_heads`` 2 unless given here).

    Returns:
        A :class:`ContractReport` of the checks that passed and those skipped (capabilities the
        variant declares it lacks, which it was verified to refuse).

    Raises:
        AttentionContractError: an ``AssertionError`` naming the check that failed and how.
    """
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"check_attention: device {str(device)!r} asked for, but CUDA is not available here; use device='cpu'."
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        harness = build_harness(variant, kwargs, position)
    harness.device = device
    generator = torch.Generator().manual_seed(0)
    passed: list[str] = []
    skipped: dict[str, str] = {}
    checks: list[tuple[str, str | None, Callable[[Harness, torch.Generator], None]]] = [
        ("shape", None, check_shape),
        ("padding", "supports_padding_mask", check_padding),
        ("causal", "supports_causal", check_causal),
        ("fully_masked", "supports_padding_mask", check_fully_masked),
        ("weights", "supports_weights", check_weights),
        *((str(dtype).removeprefix("torch."), None, half_precision_check(dtype)) for dtype in dtypes),
        ("gradients", None, check_gradients),
    ]
    try:
        harness.recurrent = decodes_with_state(harness)
    except Exception as error:
        raise AttentionContractError(
            f"{harness.label} fails the attention contract [decoding]: attend_cached raised {type(error).__name__}: {error}"
        ) from error
    if harness.recurrent:
        checks += [("state_decoding", None, check_state_decoding), ("state_size", None, check_state_size)]
    one_sequence = harness.form != "x" and not harness.can.supports_cross_attention
    if one_sequence:  # the checks then use one sequence (a self-attention layer always does)
        _expect_refusal(harness, "supports_cross_attention", generator)
        skipped["two_sequences"] = "declares supports_cross_attention=False (and refuses it)"
    if harness.causal_only:  # the checks then run causally
        _expect_refusal(harness, "supports_bidirectional", generator)
        skipped["bidirectional"] = "declares supports_bidirectional=False (and refuses it): checked causally"
    if harness.key_masks_only:  # the checks then use key padding masks
        _expect_refusal(harness, "supports_query_mask", generator)
        skipped["query_masks"] = "declares supports_query_mask=False (and refuses it): checked with key masks"
    for name, flag, check in checks:
        if flag is not None and not getattr(harness.can, flag):
            _expect_refusal(harness, flag, generator)
            skipped[name] = f"declares {flag}=False (and refuses it)"
            continue
        try:
            check(harness, generator)
        except AttentionContractError as error:
            raise AttentionContractError(f"{harness.label} fails the attention contract [{name}]: {error}") from None
        except Exception as error:
            raise AttentionContractError(
                f"{harness.label} fails the attention contract [{name}]: it raised {type(error).__name__}: {error}"
            ) from error
        passed.append(name)
    return ContractReport(harness.label, tuple(passed), skipped)


def _expect_refusal(h: Harness, flag: str, g: torch.Generator) -> None:
    """A variant that declares it lacks a capability must refuse it, not ignore it silently."""
    lq, lk = h.lengths
    if flag == "supports_cross_attention":
        lq = LQ  # queries and keys of two sequences
    request = {
        "supports_cross_attention": (f"{lq} queries over {lk} keys", {}),
        "supports_padding_mask": ("valid_lens", {"valid_lens": torch.tensor([lk, 3, 1])}),
        "supports_query_mask": (
            "valid_lens of shape (B, Lq)",
            {"valid_lens": torch.tensor([[lk] * lq, [3] * lq, [1] * lq])},
        ),
        "supports_causal": ("is_causal=True", {"is_causal": True}),
        "supports_bidirectional": ("is_causal=False", {"is_causal": False}),
        "supports_weights": ("need_weights=True", {"need_weights": True}),
    }[flag]
    what, kwargs = request
    try:
        h(h.module(), h.inputs(lq, lk, g), **kwargs)
    except IncompatibleAttentionError:
        return
    raise AttentionContractError(
        f"{h.label} fails the attention contract [{flag}]: it declares {flag}=False but accepted "
        f"{what} without raising IncompatibleAttentionError."
    )
