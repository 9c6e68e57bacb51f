"""Conformance checks for attention variants: :func:`check_attention`.

A plugin author runs them in their own test suite::

    import zoo

    def test_cosine_attention_keeps_the_contract():
        zoo.testing.check_attention(CosineAttention)        # a class, a registered name or an instance

The checks treat the variant as a black box: they perturb inputs and watch the outputs, so they
hold whatever the implementation (explicit scores, a fused kernel, no score matrix at all):

* ``shape``: the output has shape ``(B, Lq, Dv)`` (``(B, Lq, embed_dim)`` for a layer), is
  finite, and depends on the values of visible keys; no weights unless asked.
* ``padding``: changing a key or value that ``valid_lens`` or ``attn_mask`` hides changes no
  output of a query it is hidden from.
* ``causal``: with ``is_causal=True`` changing a later key or value changes no earlier output
  (bottom-right alignment when there are more keys than queries).
* ``fully_masked``: a query with no visible key gets a finite output (zero for a scoring
  attention) and all-zero weights.
* ``weights``: the weights are non-negative, zero on hidden keys, sum to one over the visible
  ones, do not change the output, and give it as ``weights @ values`` (scoring attentions).
* ``float16`` / ``bfloat16``: the variant runs in half precision, stays finite forwards and
  backwards, and stays close to the same computation in float32.

Every check runs on the ``device`` given (``check_attention(CosineAttention, device="cuda")``
checks a variant's CUDA kernels, half precision included); inputs are drawn on the CPU from a
seeded generator and moved there, so a device sees the same numbers as the CPU.
* ``gradients``: queries, keys and values get finite gradients, every trainable parameter gets
  one (DistributedDataParallel fails on parameters that get none), and the gradients match
  finite differences in float64.

``check_attention(variant, position=NAME)`` runs the same checks with a positional scheme applied
as a model applies it: a layer that takes positions (``self``, ``multi_head``) is built with a
rotary or bias scheme; around a scoring attention the harness rotates queries and keys itself
(query ``i`` at ``Lk - Lq + i``, key ``j`` at ``j``) or hands the bias over as ``position_bias``;
an absolute scheme is added to the queries and keys. Masked keys and later positions must stay
invisible whatever the scheme adds.

A variant that declares it cannot do something (``supports_padding_mask``, ``supports_causal``,
``supports_weights`` set to False) is not tested for it, but must refuse it with
:class:`~zoo.attention.IncompatibleAttentionError` instead of silently ignoring the request. One
that declares ``supports_cross_attention = False`` (queries and keys must be one sequence, as
for a sliding window) is checked on equal lengths and must refuse unequal ones the same way.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.autograd.gradcheck import GradcheckError

from zoo.attention import (
    ATTENTION_REGISTRY,
    Attention,
    AttentionLayer,
    IncompatibleAttentionError,
    causal_mask,
)
from zoo.attention.base import POSITION_CAPABILITY
from zoo.positions import PositionScheme, create_position, get_position

__all__ = ["AttentionContractError", "ContractReport", "check_attention"]

Form = Literal["qkv", "x_memory", "x"]
#: float32 comparisons: a leak of a perturbed key is orders of magnitude above this
_ATOL, _RTOL = 1e-5, 1e-4
_HALF_TOL = {torch.float16: 1e-2, torch.bfloat16: 6e-2}
_BATCH, _LQ, _LK = 3, 5, 7


class AttentionContractError(AssertionError):
    """A variant broke the attention contract; the message names the check and what failed."""


@dataclass(frozen=True)
class ContractReport:
    """What :func:`check_attention` verified: the checks that passed, and those skipped with why."""

    variant: str
    passed: tuple[str, ...]
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass
class _Harness:
    """One variant under test: how to build it, feed it and read its output."""

    label: str
    prototype: nn.Module
    form: Form
    sizes: tuple[int, int, int]  # query, key and value feature sizes
    out_dim: int
    position: _Placement | None = None  # a scheme the harness applies around the variant
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def scoring(self) -> bool:
        return isinstance(self.prototype, Attention)

    @property
    def lengths(self) -> tuple[int, int]:
        """Query and key lengths of the non-causal checks: unequal where the variant takes two
        sequences, equal for a self-attention layer or a variant that declares
        ``supports_cross_attention = False`` (a sliding window needs one sequence)."""
        if self.form == "x" or not getattr(self.prototype, "supports_cross_attention", True):
            return _LK, _LK
        return _LQ, _LK

    def module(self, dtype: torch.dtype = torch.float32) -> nn.Module:
        return copy.deepcopy(self.prototype).to(device=self.device, dtype=dtype).eval()

    def inputs(self, lq: int, lk: int, generator: torch.Generator, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values; the same tensor where the layer's forward ties them."""
        dq, dk, dv = self.sizes
        q = torch.randn(_BATCH, lq, dq, generator=generator).to(self.device, dtype)
        if self.form == "x":
            return q, q, q
        k = torch.randn(_BATCH, lk, dk, generator=generator).to(self.device, dtype)
        if self.form == "x_memory":
            return q, k, k
        return q, k, torch.randn(_BATCH, lk, dv, generator=generator).to(self.device, dtype)

    def perturb(self, inputs: tuple[Tensor, Tensor, Tensor], positions: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """New inputs with the keys and values at ``positions`` (a ``(B, Lk)`` mask) replaced."""
        q, k, v = inputs

        def replace(t: Tensor) -> Tensor:
            noise = 5 + 10 * torch.randn(t.shape, generator=generator).to(t.device, t.dtype)
            return torch.where(positions.to(t.device).unsqueeze(-1), noise, t)

        if self.form == "x":
            x = replace(q)
            return x, x, x
        if self.form == "x_memory":
            memory = replace(k)
            return q, memory, memory
        return q, replace(k), replace(v)

    def __call__(self, module: nn.Module, inputs: tuple[Tensor, Tensor, Tensor], valid_lens: Tensor | None = None, **kwargs: Any) -> tuple[Tensor, Tensor | None]:
        """Run ``module``; masks go to the device, the output and weights come back to the CPU."""
        if self.position is not None:
            inputs, kwargs = self.position.apply(inputs, kwargs)
        q, k, v = inputs
        tensors = {"x": (q,), "x_memory": (q, k), "qkv": (q, k, v)}[self.form]
        valid_lens = valid_lens.to(self.device) if valid_lens is not None else None
        kwargs = {key: value.to(self.device) if isinstance(value, Tensor) else value for key, value in kwargs.items()}
        output, weights = module(*tensors, valid_lens, **kwargs)
        return output.cpu(), weights.cpu() if weights is not None else None


class _Placement:
    """A positional scheme applied around the variant the way a model applies it: absolute
    vectors added to queries and keys; for a scoring attention, queries and keys rotated or the
    bias handed over (a layer built with the scheme does those itself). One scheme per size."""

    def __init__(self, name: str, kind: str, on_scores: bool) -> None:
        self.name, self.kind, self.on_scores = name, kind, on_scores
        self.schemes: dict[int, PositionScheme] = {}

    def scheme(self, size: int) -> PositionScheme:
        if size not in self.schemes:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                self.schemes[size] = create_position(self.name, d_model=size, num_heads=1, max_len=64)
        return self.schemes[size]

    def apply(self, inputs: tuple[Tensor, Tensor, Tensor], kwargs: dict[str, Any]) -> tuple[tuple[Tensor, Tensor, Tensor], dict[str, Any]]:
        if self.kind == "bias":
            return inputs, {**kwargs, "position_bias": self.scheme(1).to(inputs[0].device)} if self.on_scores else kwargs
        if self.kind == "rotary" and not self.on_scores:
            return inputs, kwargs
        q, k, v = inputs
        key_first = max(0, q.shape[-2] - k.shape[-2])  # no negative positions when Lq > Lk
        first = key_first + k.shape[-2] - q.shape[-2]  # bottom-right: query i at key position Lk - Lq + i

        def place(t: Tensor, offset: int) -> Tensor:
            scheme = self.scheme(t.shape[-1]).to(t.device)
            if self.kind == "absolute":
                return scheme(t, offset)
            return scheme(t, torch.arange(offset, offset + t.shape[-2], device=t.device))

        return (place(q, first), place(k, key_first), v), kwargs  # values carry no positions: the weights check reads them


def check_attention(
    variant: str | type[nn.Module] | nn.Module,
    /,
    *,
    device: str | torch.device = "cpu",
    dtypes: Sequence[torch.dtype] = (torch.float16, torch.bfloat16),
    position: str | None = None,
    **kwargs: Any,
) -> ContractReport:
    """Check an attention variant against the zoo's attention contract (see the module doc).

    Args:
        variant: A registered name, a subclass of :class:`zoo.Attention` or
            :class:`zoo.AttentionLayer`, or an instance of one.
        device: Where every check runs (``"cuda"``, ``"cuda:1"``, ...): the variant's kernels on
            that device are what is checked.
        dtypes: Half-precision dtypes to run, on ``device``; ``()`` skips them.
        position: A registered positional scheme to run the checks with (see the module doc);
            one the variant cannot take raises :class:`~zoo.attention.IncompatibleAttentionError`.
        **kwargs: Constructor arguments (when ``variant`` is a name or a class). Constructors
            taking ``query_size``/``key_size`` (scoring) or ``embed_dim``/``num_heads`` (layers)
            get small defaults.

    Returns:
        A :class:`ContractReport` of the checks that passed and those skipped (capabilities the
        variant declares it lacks, which it was verified to refuse).

    Raises:
        AttentionContractError: an ``AssertionError`` naming the check that failed and how.
    """
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"check_attention: device {str(device)!r} asked for, but CUDA is not available here; use device='cpu'.")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        harness = _harness(variant, kwargs, position)
    harness.device = device
    generator = torch.Generator().manual_seed(0)
    passed: list[str] = []
    skipped: dict[str, str] = {}
    checks: list[tuple[str, str | None, Callable[[_Harness, torch.Generator], None]]] = [
        ("shape", None, _check_shape),
        ("padding", "supports_padding_mask", _check_padding),
        ("causal", "supports_causal", _check_causal),
        ("fully_masked", "supports_padding_mask", _check_fully_masked),
        ("weights", "supports_weights", _check_weights),
        *((str(dtype).removeprefix("torch."), None, _half_precision_check(dtype)) for dtype in dtypes),
        ("gradients", None, _check_gradients),
    ]
    if not getattr(harness.prototype, "supports_cross_attention", True):  # the checks then use one sequence
        _expect_refusal(harness, "supports_cross_attention", generator)
        skipped["two_sequences"] = "declares supports_cross_attention=False (and refuses it)"
    for name, flag, check in checks:
        if flag is not None and not getattr(harness.prototype, flag):
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


# -- building the variant ----------------------------------------------------------------------


def _harness(variant: str | type[nn.Module] | nn.Module, kwargs: dict[str, Any], position: str | None = None) -> _Harness:
    kind = get_position(position).kind if position is not None else None
    if isinstance(variant, nn.Module):
        module, label = variant, type(variant).__name__
        if isinstance(module, AttentionLayer) and kind in POSITION_CAPABILITY:
            raise TypeError(f"check_attention(position={position!r}): build the layer with position= and pass it without position.")
    else:
        cls = ATTENTION_REGISTRY.get(variant) if isinstance(variant, str) else variant
        label = repr(variant) if isinstance(variant, str) else cls.__name__
        if not (inspect.isclass(cls) and issubclass(cls, (Attention, AttentionLayer))):
            raise TypeError(f"check_attention takes a subclass of zoo.Attention or zoo.AttentionLayer, got {cls!r}.")
        kwargs = _constructor_defaults(cls, kwargs)
        if issubclass(cls, AttentionLayer) and kind in POSITION_CAPABILITY:
            if "position" not in inspect.signature(cls).parameters:
                raise TypeError(f"{label} takes no positions (cross-attention never gets them); check it without position=.")
            kwargs["position"] = create_position(position, d_model=kwargs["embed_dim"], num_heads=kwargs["num_heads"])  # type: ignore[arg-type]
        module = cls(**kwargs)
    if position is not None:
        label = f"{label} with position {position!r}"
    if isinstance(module, Attention):
        flag = POSITION_CAPABILITY.get(kind or "")
        if flag is not None and not getattr(module, flag):
            raise IncompatibleAttentionError(f"{label}: {type(module).__name__} declares {flag}=False.")
        dq, dk = getattr(module, "query_size", None), getattr(module, "key_size", None)
        if dq is None or dk is None:
            dq, dk = (8, 8) if module.requires_equal_qk_dims else (6, 4)
        placement = _Placement(position, kind, on_scores=True) if position is not None and kind is not None else None
        return _Harness(label, module, "qkv", (dq, dk, 5), out_dim=5, position=placement)
    if not isinstance(module, AttentionLayer):
        raise TypeError(f"check_attention takes an attention variant, got {type(module).__name__}.")
    embed_dim = getattr(module, "embed_dim", None)
    if embed_dim is None:
        raise TypeError(f"check_attention needs {label} to expose embed_dim (the query and output size).")
    form = _layer_form(module)
    if form == "x_memory" and position is not None:
        raise TypeError(f"{label}: cross-attention never gets positions; check it without position=.")
    dk = embed_dim if form == "x" else getattr(module, "kdim", embed_dim)
    dv = {"x": embed_dim, "x_memory": dk}.get(form, getattr(module, "vdim", embed_dim))
    placement = _Placement(position, kind, on_scores=False) if position is not None and kind == "absolute" else None
    return _Harness(label, module, form, (embed_dim, dk, dv), out_dim=embed_dim, position=placement)


def _constructor_defaults(cls: type[nn.Module], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Small sizes for the constructor arguments the contract's inputs need, unless given."""
    params = inspect.signature(cls).parameters
    if issubclass(cls, Attention):
        defaults = {"query_size": 8 if cls.requires_equal_qk_dims else 6, "key_size": 8 if cls.requires_equal_qk_dims else 4}
    else:
        defaults = {"embed_dim": 8, "num_heads": 2}
    return {**{k: v for k, v in defaults.items() if k in params}, **kwargs}


def _layer_form(module: nn.Module) -> Form:
    """How the layer's forward takes its inputs: ``(q, k, v)``, ``(x, memory)`` or ``(x)``."""
    required = [
        p for p in inspect.signature(module.forward).parameters.values()
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.default is inspect.Parameter.empty
    ]
    forms: dict[int, Form] = {1: "x", 2: "x_memory", 3: "qkv"}
    if len(required) not in forms:
        raise TypeError(f"check_attention cannot feed a layer whose forward takes {len(required)} required tensors.")
    return forms[len(required)]


# -- the checks ----------------------------------------------------------------------------------


def _fail(message: str) -> None:
    raise AttentionContractError(message)


def _close(a: Tensor, b: Tensor, atol: float = _ATOL, rtol: float = _RTOL) -> bool:
    """Equal within tolerance; NaN equals NaN here, so that NaN is reported by its own check."""
    return bool(torch.allclose(a.float(), b.float(), atol=atol, rtol=rtol, equal_nan=True))


@torch.no_grad()
def _check_shape(h: _Harness, g: torch.Generator) -> None:
    lq, lk = h.lengths
    module, inputs = h.module(), h.inputs(lq, lk, g)
    output, weights = h(module, inputs)
    expected = (_BATCH, lq, h.out_dim)
    if tuple(output.shape) != expected:
        _fail(f"output has shape {tuple(output.shape)}, expected {expected} for queries {tuple(inputs[0].shape)}.")
    if output.dtype != torch.float32 or not torch.isfinite(output).all():
        _fail(f"output must be finite float32 for float32 inputs (dtype {output.dtype}).")
    if weights is not None:
        _fail("weights were returned although need_weights=False.")
    every_position = torch.ones(_BATCH, lk, dtype=torch.bool)
    changed, _ = h(module, h.perturb(inputs, every_position, g))
    if _close(changed, output):
        _fail("the output does not change when every key and value changes: it ignores its inputs.")


def _mask_cases(h: _Harness, lq: int, lk: int, g: torch.Generator) -> list[tuple[str, dict[str, Any], Tensor]]:
    """Masks as the forward takes them, and the ``(B, Lq, Lk)`` pairs they let attend."""
    lengths = torch.tensor([lk, 3, 1])
    per_query = torch.randint(0, lk + 1, (_BATCH, lq), generator=g)
    attn_mask = torch.rand(_BATCH, lq, lk, generator=g) > 0.4
    positions = torch.arange(lk)
    return [
        ("valid_lens of shape (B,)", {"valid_lens": lengths}, (positions < lengths[:, None, None]).expand(_BATCH, lq, lk)),
        ("valid_lens of shape (B, Lq)", {"valid_lens": per_query}, positions < per_query[..., None]),
        ("a boolean attn_mask", {"attn_mask": attn_mask}, attn_mask),
    ]


@torch.no_grad()
def _check_hidden_keys(h: _Harness, g: torch.Generator, lq: int, lk: int, what: str, keep: Tensor, **mask: Any) -> None:
    """Perturb one key position at a time; no query that cannot see it may change."""
    module, inputs = h.module(), h.inputs(lq, lk, g)
    baseline, _ = h(module, inputs, **mask)
    for j in range(lk):
        position = torch.zeros(_BATCH, lk, dtype=torch.bool)
        position[:, j] = True
        changed, _ = h(module, h.perturb(inputs, position, g), **mask)
        hidden = ~keep[:, :, j]  # (B, Lq): queries that must not see key j
        if h.form == "x":
            hidden[:, j] = False  # position j is also a query, and it changed
        for b, i in hidden.nonzero().tolist():
            if not _close(changed[b, i], baseline[b, i]):
                _fail(
                    f"with {what}, query {i} of sequence {b} changed when key/value {j}, hidden from it, "
                    f"changed (max difference {float((changed[b, i] - baseline[b, i]).abs().max()):.3g})."
                )


def _check_padding(h: _Harness, g: torch.Generator) -> None:
    lq, lk = h.lengths
    for what, mask, keep in _mask_cases(h, lq, lk, g):
        _check_hidden_keys(h, g, lq, lk, what, keep, **mask)


def _check_causal(h: _Harness, g: torch.Generator) -> None:
    shapes = [(_LK, _LK)] if h.form == "x" else [(_LK, _LK), (_LQ, _LK)]
    for lq, lk in shapes:
        keep = causal_mask(lq, lk).expand(_BATCH, lq, lk)
        _check_hidden_keys(h, g, lq, lk, f"is_causal=True ({lq} queries, {lk} keys)", keep, is_causal=True)


def _fully_masked_cases(h: _Harness) -> list[tuple[str, int, int, dict[str, Any], Tensor]]:
    """Masks leaving some query with no visible key: ``(what, Lq, Lk, mask, rows)``."""
    lq, lk = h.lengths
    lengths = torch.tensor([0, 2, lk])
    attn_mask = torch.ones(_BATCH, lq, lk, dtype=torch.bool)
    attn_mask[1, 2] = False
    empty_rows = torch.zeros(_BATCH, lq, dtype=torch.bool)
    empty_rows[0] = True
    empty_row = torch.zeros(_BATCH, lq, dtype=torch.bool)
    empty_row[1, 2] = True
    cases = [
        ("valid_lens 0", lq, lk, {"valid_lens": lengths}, empty_rows),
        ("an attn_mask row of False", lq, lk, {"attn_mask": attn_mask}, empty_row),
    ]
    if h.prototype.supports_causal and h.form != "x":
        before_every_key = torch.zeros(_BATCH, _LK, dtype=torch.bool)
        before_every_key[:, : _LK - _LQ] = True
        cases.append(("is_causal with more queries than keys", _LK, _LQ, {"is_causal": True}, before_every_key))
    return cases


@torch.no_grad()
def _check_fully_masked(h: _Harness, g: torch.Generator) -> None:
    module = h.module()
    for what, lq, lk, mask, rows in _fully_masked_cases(h):
        need_weights = h.prototype.supports_weights
        output, weights = h(module, h.inputs(lq, lk, g), need_weights=need_weights, **mask)
        if not torch.isfinite(output).all():
            _fail(f"a query with no visible key ({what}) gives a non-finite output (NaN or inf).")
        if h.scoring and not torch.equal(output[rows], torch.zeros_like(output[rows])):
            _fail(f"a query with no visible key ({what}) must get a zero output (zero weights), not an average.")
        if need_weights:
            empty = weights[rows] if weights.dim() == 3 else weights.transpose(0, 1)[:, rows]
            if not torch.equal(empty, torch.zeros_like(empty)):
                _fail(f"a query with no visible key ({what}) must get all-zero weights.")


@torch.no_grad()
def _check_weights(h: _Harness, g: torch.Generator) -> None:
    lq, lk = h.lengths
    module, inputs = h.module(), h.inputs(lq, lk, g)
    cases = _mask_cases(h, lq, lk, g) if h.prototype.supports_padding_mask else []
    for what, mask, keep in [("no mask", {}, torch.ones(_BATCH, lq, lk, dtype=torch.bool)), *cases]:
        output, weights = h(module, inputs, need_weights=True, **mask)
        plain, _ = h(module, inputs, **mask)
        if weights is None:
            _fail("need_weights=True returned no weights although the variant declares supports_weights.")
        if weights.shape[0] != _BATCH or tuple(weights.shape[-2:]) != (lq, lk) or weights.dim() not in (3, 4):
            _fail(f"weights have shape {tuple(weights.shape)}, expected ({_BATCH}, {lq}, {lk}) or ({_BATCH}, heads, {lq}, {lk}).")
        keep_b = keep if weights.dim() == 3 else keep.unsqueeze(1)
        if (weights < 0).any() or (weights.masked_select(~keep_b.expand_as(weights)) != 0).any():
            _fail(f"with {what}, weights must be non-negative and exactly zero on keys a query cannot see.")
        sees = weights.ne(0).any(-1)  # the rows the variant gives any weight: they must sum to 1
        if not _close(weights.sum(-1), sees.to(weights.dtype)):
            _fail(f"with {what}, each query's weights must sum to 1 (0 for a query that sees no key).")
        _check_blind_rows(h, module, inputs, output, sees if weights.dim() == 3 else sees.any(1), what, g, **mask)
        if not _close(output, plain):
            _fail(f"with {what}, need_weights=True changes the output (the explicit and the fast path disagree).")
        if h.scoring and not _close(output, weights @ inputs[2]):
            _fail(f"with {what}, the output is not weights @ values.")


def _check_blind_rows(h: _Harness, module: nn.Module, inputs: tuple[Tensor, Tensor, Tensor], output: Tensor, sees: Tensor, what: str, g: torch.Generator, **mask: Any) -> None:
    """A query with all-zero weights sees no key (a window over padding, a fully masked row): then
    no key or value may change its output. Every position is perturbed at once but a blind query's
    own (a self-attention layer's queries are its keys)."""
    blind = ~sees  # (B, Lq), all heads
    if not blind.any():
        return
    positions = torch.ones(_BATCH, inputs[1].shape[-2], dtype=torch.bool)
    if h.form == "x":
        positions &= ~blind
    changed, _ = h(module, h.perturb(inputs, positions, g), need_weights=True, **mask)
    for b, i in blind.nonzero().tolist():
        if not _close(changed[b, i], output[b, i]):
            _fail(f"with {what}, query {i} of sequence {b} has all-zero weights, yet its output changes with the keys and values.")


def _half_precision_check(dtype: torch.dtype) -> Callable[[_Harness, torch.Generator], None]:
    def check(h: _Harness, g: torch.Generator) -> None:
        lq, lk = h.lengths
        module = h.module(dtype)
        reference = copy.deepcopy(module).float()  # the same rounded parameters, computed in float32
        kwargs: dict[str, Any] = {}
        valid_lens = None
        if h.prototype.supports_padding_mask:
            valid_lens = torch.tensor([lk, 3, 0])
        if h.prototype.supports_causal:
            kwargs["is_causal"] = True
        inputs = tuple(t.detach().requires_grad_() for t in _unique(h.inputs(lq, lk, g, dtype)))
        tied = _retie(h, inputs)
        output, _ = h(module, tied, valid_lens, **kwargs)
        expected, _ = h(reference, tuple(t.float() for t in tied), valid_lens, **kwargs)
        if output.dtype != dtype:
            _fail(f"{dtype} inputs gave a {output.dtype} output.")
        if not torch.isfinite(output).all():
            _fail(f"the output in {dtype} has NaN or inf (a fully masked row is included).")
        tol = _HALF_TOL[dtype]
        if not _close(output, expected, atol=tol, rtol=tol):
            _fail(f"the output in {dtype} differs from float32 by up to {float((output.float() - expected).abs().max()):.3g} (tolerance {tol}).")
        output.float().square().sum().backward()
        for name, tensor in (*(("an input", t) for t in inputs), *module.named_parameters()):
            if tensor.grad is not None and not torch.isfinite(tensor.grad).all():
                _fail(f"the gradient of {name} in {dtype} has NaN or inf.")

    return check


def _unique(tensors: tuple[Tensor, Tensor, Tensor]) -> tuple[Tensor, ...]:
    """The distinct tensors among queries, keys and values (one for ``x``, two for ``x_memory``)."""
    return tuple({id(t): t for t in tensors}.values())


def _retie(h: _Harness, distinct: tuple[Tensor, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values from the distinct tensors, tied as the layer's forward ties them."""
    if h.form == "x":
        return distinct[0], distinct[0], distinct[0]
    if h.form == "x_memory":
        return distinct[0], distinct[1], distinct[1]
    return distinct[0], distinct[1], distinct[2]


def _check_gradients(h: _Harness, g: torch.Generator) -> None:
    lq, lk = (4, 4) if h.lengths[0] == h.lengths[1] else (3, 4)  # small: gradcheck runs in float64
    module = h.module(torch.float64)
    inputs = tuple(t.detach().requires_grad_() for t in _unique(h.inputs(lq, lk, g, torch.float64)))
    valid_lens = torch.tensor([lk, 2, 0]) if h.prototype.supports_padding_mask else None
    output, _ = h(module, _retie(h, inputs), valid_lens)
    output.mul(torch.randn(output.shape, generator=g, dtype=torch.float64)).sum().backward()
    values = inputs[-1]
    if values.grad is None or not torch.any(values.grad != 0):
        _fail("the values get no gradient.")
    for tensor in inputs:
        if tensor.grad is not None and not torch.isfinite(tensor.grad).all():
            _fail("an input's gradient has NaN or inf (a fully masked row is included).")
    for name, param in module.named_parameters():
        if param.requires_grad and (param.grad is None or not torch.isfinite(param.grad).all()):
            _fail(f"the trainable parameter {name!r} gets {'no' if param.grad is None else 'a non-finite'} gradient.")
    fresh = tuple(t.detach().requires_grad_() for t in inputs)

    def forward(*tensors: Tensor) -> Tensor:
        return h(module, _retie(h, tensors), valid_lens)[0]

    try:
        torch.autograd.gradcheck(forward, fresh, eps=1e-6, atol=1e-5, rtol=1e-3, fast_mode=True)
    except GradcheckError as error:
        _fail(f"analytical gradients differ from finite differences in float64: {str(error).splitlines()[0]}")


def _expect_refusal(h: _Harness, flag: str, g: torch.Generator) -> None:
    """A variant that declares it lacks a capability must refuse it, not ignore it silently."""
    lq, lk = h.lengths
    if flag == "supports_cross_attention":
        lq = _LQ  # queries and keys of two sequences
    request = {
        "supports_cross_attention": (f"{lq} queries over {lk} keys", {}),
        "supports_padding_mask": ("valid_lens", {"valid_lens": torch.tensor([lk, 3, 1])}),
        "supports_causal": ("is_causal=True", {"is_causal": True}),
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
