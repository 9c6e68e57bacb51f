"""The harness: one variant under test, a scoring attention or an attention layer, built with
small sizes (and a positional scheme where asked), fed seeded inputs on a device, and read back
on the CPU.

A layer a stack builds by name (a recurrent family, a plugin's layer) is built with ``embed_dim``
8 and ``num_heads`` 2 unless given, and a rotary or bias scheme as its ``position``. A causal-only
variant (``supports_bidirectional = False``) is called with ``is_causal=True`` unless a check
says otherwise, and what a query may see is then the causal mask with the padding mask.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor, nn

from zoo.attention import (
    ATTENTION_REGISTRY,
    Attention,
    AttentionLayer,
    Capabilities,
    IncompatibleAttentionError,
    capabilities,
)
from zoo.attention.build.spec import POSITION_CAPABILITY, AttentionSpec
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.masking import causal_mask
from zoo.positions import create_position, get_position
from zoo.testing.placement import Placement

__all__ = ["BATCH", "LK", "LQ", "Form", "Harness", "build_harness"]

Form = Literal["qkv", "x_memory", "x"]
#: batch size, query and key lengths of the checks' inputs
BATCH, LQ, LK = 3, 5, 7


@dataclass
class Harness:
    """One variant under test: how to build it, feed it and read its output."""

    label: str
    prototype: nn.Module
    form: Form
    sizes: tuple[int, int, int]  # query, key and value feature sizes
    out_dim: int
    position: Placement | None = None  # a scheme the harness applies around the variant
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    recurrent: bool = False  # decodes with a fixed-size state (a StateCache), set by check_attention

    @property
    def scoring(self) -> bool:
        return isinstance(self.prototype, Attention)

    @property
    def can(self) -> Capabilities:
        """What the variant under test serves (:func:`zoo.attention.capabilities`)."""
        return capabilities(self.prototype)

    @property
    def causal_only(self) -> bool:
        """The variant attends to earlier positions only: every call is causal unless a check says not."""
        return not self.can.supports_bidirectional

    @property
    def key_masks_only(self) -> bool:
        """The variant takes key padding masks only, the same for every query."""
        return not self.can.supports_query_mask

    def visible(self, keep: Tensor) -> Tensor:
        """What a query may see, ``(B, Lq, Lk)``: ``keep`` (the masks), and causality for a
        causal-only variant."""
        return keep & causal_mask(*keep.shape[-2:]) if self.causal_only else keep

    @property
    def lengths(self) -> tuple[int, int]:
        """Query and key lengths of the non-causal checks: unequal where the variant takes two
        sequences, equal for a self-attention layer or a variant that declares
        ``supports_cross_attention = False`` (a sliding window needs one sequence)."""
        if self.form == "x" or not self.can.supports_cross_attention:
            return LK, LK
        return LQ, LK

    def module(self, dtype: torch.dtype = torch.float32) -> nn.Module:
        return copy.deepcopy(self.prototype).to(device=self.device, dtype=dtype).eval()

    def inputs(
        self, lq: int, lk: int, generator: torch.Generator, dtype: torch.dtype = torch.float32
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Queries, keys and values; the same tensor where the layer's forward ties them."""
        dq, dk, dv = self.sizes
        q = torch.randn(BATCH, lq, dq, generator=generator).to(self.device, dtype)
        if self.form == "x":
            return q, q, q
        k = torch.randn(BATCH, lk, dk, generator=generator).to(self.device, dtype)
        if self.form == "x_memory":
            return q, k, k
        return q, k, torch.randn(BATCH, lk, dv, generator=generator).to(self.device, dtype)

    def perturb(
        self, inputs: tuple[Tensor, Tensor, Tensor], positions: Tensor, generator: torch.Generator
    ) -> tuple[Tensor, Tensor, Tensor]:
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

    def __call__(
        self, module: nn.Module, inputs: tuple[Tensor, Tensor, Tensor], valid_lens: Tensor | None = None, **kwargs: Any
    ) -> tuple[Tensor, Tensor | None]:
        """Run ``module``; masks go to the device, the output and weights come back to the CPU."""
        if self.causal_only:
            kwargs.setdefault("is_causal", True)
        if self.position is not None:
            inputs, kwargs = self.position.apply(inputs, kwargs)
        q, k, v = inputs
        tensors = {"x": (q,), "x_memory": (q, k), "qkv": (q, k, v)}[self.form]
        valid_lens = valid_lens.to(self.device) if valid_lens is not None else None
        kwargs = {key: value.to(self.device) if isinstance(value, Tensor) else value for key, value in kwargs.items()}
        if self.form == "qkv":  # raw masks, validated by the call (a scoring attention, torch's multi-head layer)
            output, weights = module(*tensors, valid_lens, **kwargs)
        else:  # a layer reads the context a model builds once a forward
            output, weights = module(
                *tensors, self.context(module, q.shape[1], tensors[-1].shape[1], valid_lens, **kwargs)
            )
        return output.cpu(), weights.cpu() if weights is not None else None

    def context(
        self, module: nn.Module, lq: int, lk: int, valid_lens: Tensor | None = None, **masks: Any
    ) -> AttentionContext:
        """The context a model would build for a layer's call over ``lq`` queries and ``lk`` keys
        from raw masks (``attn_mask``, ``is_causal``, ``need_weights``)."""
        return AttentionContext.build(
            BATCH, lq, lk, valid_lens=valid_lens, num_heads=getattr(module, "num_heads", None),
            owner=type(module).__name__, **masks,
        )  # fmt: skip


def build_harness(
    variant: str | type[nn.Module] | nn.Module, kwargs: dict[str, Any], position: str | None = None
) -> Harness:
    """The harness for ``variant`` (a name, a class built with ``kwargs`` and small defaults, or an
    instance), with ``position`` built into a layer or placed around a scoring attention."""
    kind = get_position(position).kind if position is not None else None
    if isinstance(variant, nn.Module):
        module, label = variant, type(variant).__name__
        if isinstance(module, AttentionLayer) and kind in POSITION_CAPABILITY:
            raise TypeError(
                f"check_attention(position={position!r}): build the layer with the position in its AttentionSpec and "
                "pass it without position=."
            )
    else:
        cls = ATTENTION_REGISTRY.get(variant) if isinstance(variant, str) else variant
        label = repr(variant) if isinstance(variant, str) else cls.__name__
        if not (inspect.isclass(cls) and issubclass(cls, (Attention, AttentionLayer))):
            raise TypeError(f"check_attention takes a subclass of zoo.Attention or zoo.AttentionLayer, got {cls!r}.")
        kwargs = _constructor_defaults(cls, kwargs)
        if issubclass(cls, AttentionLayer) and kind in POSITION_CAPABILITY:  # the layer refuses what it cannot take
            scheme = create_position(position, d_model=kwargs["embed_dim"], num_heads=kwargs["num_heads"])  # type: ignore[arg-type]
            if cls.stack_layer:
                flag = POSITION_CAPABILITY[kind]
                if not getattr(cls, flag):
                    raise IncompatibleAttentionError(
                        f"{label} with position {position!r}: {cls.__name__} declares {flag}=False."
                    )
                kwargs["position"] = scheme
            else:
                spec = kwargs.get("attention", "dot_product")
                kwargs["attention"] = (AttentionSpec(spec) if isinstance(spec, str) else spec).with_position(scheme)
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
        placement = Placement(position, kind, on_scores=True) if position is not None and kind is not None else None
        return Harness(label, module, "qkv", (dq, dk, 5), out_dim=5, position=placement)
    return _layer_harness(module, label, position, kind)


def _layer_harness(module: nn.Module, label: str, position: str | None, kind: str | None) -> Harness:
    """The harness of an attention layer: fed ``(q, k, v)``, ``(x, memory)`` or ``(x)`` as its forward takes them."""
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
    placement = Placement(position, kind, on_scores=False) if position is not None and kind == "absolute" else None
    return Harness(label, module, form, (embed_dim, dk, dv), out_dim=embed_dim, position=placement)


def _constructor_defaults(cls: type[nn.Module], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Small sizes for the constructor arguments the contract's inputs need, unless given: a
    scoring attention runs on one head of 8 features, a layer is 8 wide with 2 heads."""
    params = inspect.signature(cls).parameters
    if issubclass(cls, Attention):
        defaults = {
            "query_size": 8 if cls.requires_equal_qk_dims else 6,
            "key_size": 8 if cls.requires_equal_qk_dims else 4,
        }
    else:
        defaults = {"embed_dim": 8, "num_heads": 2}
    return {**{k: v for k, v in defaults.items() if k in params}, **kwargs}


def _layer_form(module: nn.Module) -> Form:
    """How the layer's forward takes its inputs: ``(q, k, v)``, ``(x, memory)`` or ``(x)``."""
    required = [
        p
        for p in inspect.signature(module.forward).parameters.values()
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.default is inspect.Parameter.empty
    ]
    forms: dict[int, Form] = {1: "x", 2: "x_memory", 3: "qkv"}
    if len(required) not in forms:
        raise TypeError(f"check_attention cannot feed a layer whose forward takes {len(required)} required tensors.")
    return forms[len(required)]
