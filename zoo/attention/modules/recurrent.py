"""The recurrent families as attention layers: retention, GLA, DeltaNet, Gated DeltaNet, Mamba-2,
and those of 2025, Kimi Delta Attention, RWKV-7 and Gated DeltaProduct.

Each family is one layer that owns what its paper and flash-linear-attention give it: query, key
and value projections (their widths set by the family: GLA halves the keys, Mamba-2 widens the
values by ``expand`` and shares its ``B`` and ``C`` across groups of heads), a short causal
depthwise convolution on each of them (:mod:`zoo.attention.kernels.short_conv`, kernel 4, on by
default for GLA, DeltaNet, Gated DeltaNet and Mamba-2, off for retention, whose paper has none),
its gates, its output norm and its output projection. One forward of a layer::

    q, k, v = conv(x W_q), conv(x W_k), conv(x W_v)        # (B, T, width), causal, per channel
    q, k, v -> heads; q, k rotated (a rotary stack)        # (B, H, T, d)
    q, k, v = silu(q), silu(k), silu(v)                    # where the family has it (below)
    recurrence = family.prepare(q, k, v, x)                # normalizations, decays, write strengths
    o = recurrence(q, k, v)                                # one of three forms, below
    y = out_proj(family.finish(o, x))                      # output gate and norm

Each family keeps, per head, a state ``S`` of shape ``(dk, dv)`` that every step decays and
writes and every query reads, ``o_t = q_t S_t`` (:mod:`zoo.attention.kernels`, whose row-vector
orientation this follows). A family says two things (:class:`RecurrentLayer`):

* :meth:`~RecurrentLayer.prepare`: what its recurrence reads at each step, a :class:`Recurrence`:
  queries, keys and values per head (activated, normalized, scaled as the paper does) and its
  gates from the layer's input: a decay per step (a scalar, or one per key dimension) and, for
  the delta rule, a write strength ``beta`` (or, for the recurrences of 2025, a
  :class:`~zoo.attention.modules.recurrence.LowRankRecurrence` or a
  :class:`~zoo.attention.modules.recurrence.ProductRecurrence`, :mod:`zoo.attention.modules.recurrence`);
* :meth:`~RecurrentLayer.finish`: what it does to the output (a per-head norm, an output gate).

The convolution's activation is SiLU, which a family asks for once
(:attr:`RecurrentLayer.silu`): DeltaNet, Gated DeltaNet, Mamba-2, Kimi Delta Attention and Gated
DeltaProduct apply it to queries, keys and values with or without a convolution, GLA and retention
only after one, RWKV-7 never. The layer applies it inside the convolution's function (which then
keeps only the convolution's input for the backward: one saved tensor a projection, as without a
convolution), except on queries and keys a rotary scheme rotates, which it rotates first and
activates after, so that :meth:`~RecurrentLayer.prepare` receives activated inputs either way.

The recurrence runs in one of three forms, equal up to rounding (``mode``):

* ``parallel``: the whole ``(T, T)`` matrix of decayed scores at once (quadratic; the fastest on
  short inputs, and the form that gives weights for heatmaps);
* ``chunkwise``: quadratic within chunks of ``chunk_size`` steps, a state passed between them
  (``O(T * chunk_size)``; the form for training and for a prompt);
* ``recurrent``: one step at a time from a state (the form for decoding);
* ``auto`` (the default): ``parallel`` up to ``chunk_size`` steps, else ``chunkwise``; a single
  step, ``recurrent``. ``need_weights=True`` takes the parallel form.

``chunk_size`` defaults to the device's: 64 on a GPU (flash-linear-attention's chunk), and on the
CPU the layer's :attr:`~RecurrentLayer.cpu_chunk_size`, 16 (:data:`CPU_CHUNK_SIZE`), where the work
inside a chunk (per-dimension decays, sub-chunks) costs more than the loop between chunks: a
training step at MQAR's (256, 16) cell is 1.2-1.4x faster with 16 than with 64
(``benchmarks/chunk_speed.py``; ``docs/results/speed.md``, 16-step chunks on the CPU). Mamba-2 takes
64: its state is ``d_state`` (128) wide, so the pass between chunks costs more than the work inside
one, and its heads share their chunk states' products (:mod:`zoo.attention.kernels.decay`), which
makes the work inside a chunk cheap (1.03x faster than 32 at that cell, 1.08-1.14x at 1k-8k tokens;
``docs/results/speed.md``, each family's chunk on the CPU and Mamba-2's shared chunk-state
products).

On CUDA with the ``fla`` extra installed, the chunkwise form runs in flash-linear-attention's
Triton kernels (:mod:`zoo.attention.kernels.fla`; :mod:`zoo.attention.build.backends` says when, and
how to force either); decoding steps stay the zoo's recurrent form.

Decays are summed in log space within a chunk only, and only non-positive differences are
exponentiated, so 16k-token inputs neither overflow nor underflow in float32 (the kernels'
docstrings say how). Half-precision inputs run the recurrence in float32, outside autocast: the
state sums a whole sequence.

Masks: a key padding mask only: a padded step writes nothing, decays nothing and reads nothing
(its recurrence output is zero), and enters the convolution as zeros, which keeps left-padded
prompts exact. A mask that differs per query is refused in one line (``supports_query_mask = False``).

Decoding (:meth:`RecurrentLayer.attend_cached`): the layer's cache is a
:class:`~zoo.attention.contract.cache.StateCache` holding the ``(B, H, dk, dv)`` state after the positions
seen, and the convolutions' windows (their last ``conv_size - 1`` inputs), whatever the number of
positions. A prompt with no cache runs the form ``mode`` picks for its length (chunkwise past
``chunk_size``); each later token one recurrent step from the state.

Capabilities: causal only (``supports_bidirectional = False``: encoders and cross-attention
refuse these layers in one line naming those that work); key padding; weights (the parallel
form's decayed scores, which multiply the recurrence's values: not a distribution); rotary
schemes, no bias scheme (there are no scores to add it to).

Checkpoints written before the families were layers (zoo folder and checkpoint format 1: per-head
scoring attentions under a ``multi_head`` layer, no convolutions) load into these layers: their
keys are renamed here (:meth:`RecurrentLayer.legacy_state_dict`) and their hyperparameters are
given the layout they had (:func:`zoo.attention.compat.legacy.migrate_attention`).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import TypedDict

from zoo.attention.build.backends import choose, requested_backend
from zoo.attention.contract.base import AttentionOutput, IncompatibleAttentionError
from zoo.attention.contract.cache import LayerCache, StateCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer
from zoo.attention.kernels.fla import fla_available, fla_chunk, fla_refusal
from zoo.attention.modules.continuation import continued_request
from zoo.attention.modules.convolved import ShortConvolved
from zoo.attention.modules.gating import HeadNorm, StepDecay
from zoo.attention.modules.recurrence import Recurrence, RecurrenceForms
from zoo.attention.modules.rotation import rotate_heads
from zoo.positions import PositionScheme

__all__ = [
    "CHUNK_SIZE",
    "CPU_CHUNK_SIZE",
    "HeadNorm",
    "Mode",
    "Recurrence",
    "RecurrentLayer",
    "RecurrentOptions",
    "StepDecay",
]

Mode = Literal["auto", "parallel", "chunkwise", "recurrent"]
"""Which form runs the recurrence (see :mod:`zoo.attention.modules.recurrent`)."""

CHUNK_SIZE = 64
"""Steps per chunk by default on a GPU, flash-linear-attention's chunk."""

CPU_CHUNK_SIZE = 16
"""Steps per chunk by default on the CPU: one sub-chunk of the per-dimension decay kernel
(:data:`~zoo.attention.kernels.decay.SUB_CHUNK_SIZE`), so a chunk's weights need no sub-chunks."""


class RecurrentOptions(TypedDict, total=False):
    """The arguments every family's layer takes beside its own, as :class:`RecurrentLayer`
    documents them: a family's constructor takes them as ``**options: Unpack[RecurrentOptions]``
    and hands them on, so they are written once (and checked by name, as any argument is)."""

    conv_size: int
    mode: Mode
    chunk_size: int | None
    position: PositionScheme | None
    bias: bool


class RecurrentLayer(ShortConvolved, AttentionLayer):
    """Base class of the recurrent families' layers (see the module docstring).

    A subclass sizes the projections (``key_dim``, ``value_dim``, ``qk_heads``) in its
    constructor, builds its gates, and implements :meth:`prepare` (and :meth:`finish` if the
    paper changes the output).

    Args:
        embed_dim: The block's width: the layer's input and output size.
        num_heads: Value heads; each has its own state.
        key_dim: Width of the query and key projections (all their heads).
        value_dim: Width of the value projection; ``num_heads`` must divide it.
        qk_heads: Query and key heads, each shared by ``num_heads // qk_heads`` value heads
            (Mamba-2's ``ngroups``); ``None``: ``num_heads``.
        writes: Keys and values per token and head (DeltaProduct's Householder steps): the key and
            value projections (and their convolutions) are ``writes`` times as wide, each head's
            ``writes`` keys side by side.
        conv_size: Kernel of the short convolution on queries, keys and values; 0: none.
        conv_bias: Whether the convolution has a bias (Mamba-2's has).
        mode: ``auto``, ``parallel``, ``chunkwise`` or ``recurrent``: the form of training and
            full passes (and of a prompt when decoding).
        chunk_size: Steps per chunk of the chunkwise form; ``auto`` runs the parallel form up to it.
            None: the device's (:attr:`cpu_chunk_size` on the CPU, :data:`CHUNK_SIZE` elsewhere).
        position: The stack's rotary scheme, or None.
        bias: Biases in the query, key, value and output projections (the stack's ``bias``).
    """

    supports_bidirectional = False  # causal, key padding and weights: the contract's defaults
    supports_query_mask = False
    supports_rotary = True
    fixed_state = True
    #: why flash-linear-attention's kernels cannot run this family's recurrence (None: they can,
    #: :mod:`zoo.attention.kernels.fla`)
    fla_refusal: ClassVar[str | None] = None
    family = "recurrent"
    cost = "L"
    #: steps per chunk on the CPU when ``chunk_size`` is None (see the module docstring)
    cpu_chunk_size: ClassVar[int] = CPU_CHUNK_SIZE
    #: where SiLU acts on the queries, keys and values before :meth:`prepare`: ``"always"``,
    #: ``"convolved"`` (only after a short convolution) or ``"never"`` (see the module docstring)
    silu: ClassVar[Literal["always", "convolved", "never"]] = "never"

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        key_dim: int,
        value_dim: int,
        qk_heads: int | None = None,
        writes: int = 1,
        conv_size: int = 4,
        conv_bias: bool = False,
        mode: Mode = "auto",
        chunk_size: int | None = None,
        position: PositionScheme | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        qk_heads = num_heads if qk_heads is None else qk_heads
        self.require_positive(
            embed_dim=embed_dim, num_heads=num_heads, key_dim=key_dim, value_dim=value_dim, qk_heads=qk_heads,
            writes=writes, chunk_size=chunk_size,
        )  # fmt: skip
        if value_dim % num_heads or key_dim % qk_heads or num_heads % qk_heads:
            raise ValueError(
                f"{name}: num_heads ({num_heads}) must divide the value width ({value_dim}), and the query and key "
                f"heads ({qk_heads}) both the key width ({key_dim}) and num_heads."
            )
        if mode not in get_args(Mode):
            raise ValueError(f"{name}: mode must be one of {', '.join(get_args(Mode))}; got {mode!r}.")
        if position is not None and position.kind != "rotary":
            raise IncompatibleAttentionError(
                f"{name} takes a rotary scheme or none; a {position.kind} scheme has no scores to act on here."
            )
        self.embed_dim, self.num_heads, self.qk_heads = embed_dim, num_heads, qk_heads
        self.key_head_dim, self.head_dim = key_dim // qk_heads, value_dim // num_heads
        self.mode, self.chunk_size, self.conv_size, self.writes = mode, chunk_size, conv_size, writes
        self.rotary = None if position is None else position.for_head_dim(self.key_head_dim)
        self.q_proj = nn.Linear(embed_dim, key_dim, bias=bias)
        self.k_proj = nn.Linear(embed_dim, writes * key_dim, bias=bias)
        self.v_proj = nn.Linear(embed_dim, writes * value_dim, bias=bias)
        self.out_proj = nn.Linear(value_dim, embed_dim, bias=bias)
        self.add_convolutions(conv_size, bias=conv_bias)

    # -- what a family defines ----------------------------------------------------------------------

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> RecurrenceForms:
        """The recurrence's inputs from the per-head queries and keys ``(B, qk_heads, T, dk)`` and
        values ``(B, H, T, dv)`` (convolved, rotated, in the computation's dtype, float32 at least) and
        the layer's input ``(B, T, embed_dim)``."""
        raise NotImplementedError(f"{type(self).__name__} must implement prepare().")

    def finish(self, output: Tensor, layer_input: Tensor) -> Tensor:
        """The family's output ``(B, H, T, dv)`` from the recurrence's (none here: as it is)."""
        return output

    # -- shared ---------------------------------------------------------------------------------------

    def split_heads(self, x: Tensor) -> Tensor:
        """``(B, T, H * w)`` -> ``(B, H, T, w)``: a projection of the layer's input, per head."""
        return x.unflatten(-1, (self.num_heads, -1)).transpose(-3, -2)

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        """The whole sequence ``x`` ``(B, T, embed_dim)`` from a zero state: the output
        ``(B, T, embed_dim)`` and, if the context asks, the parallel form's weights
        ``(B, H, T, T)``; the context's mask marks the real tokens (key padding)."""
        steps = context.key_padding
        q, k, v, layer_input, _ = self._project(x, context, None)
        recurrence = self._prepare(q, k, v, layer_input)
        form = "parallel" if context.need_weights else self._form(x.shape[1], x.device)
        output, _ = self._run(recurrence, form, None, steps, weights=context.need_weights)
        weights = None
        if context.need_weights:
            with torch.autocast(x.device.type, enabled=False):
                weights = recurrence.weights(steps).to(x.dtype)
        return AttentionOutput(self._output(output, recurrence, steps, layer_input), weights)

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions ``x`` ``(B, Lq, embed_dim)`` after those in ``cache`` (a
        :class:`~zoo.attention.contract.cache.StateCache`, or None before the first): the output and the
        state and convolution windows after them.

        The context's mask (True = attend), if any, broadcasts to ``(B, 1 or H, Lq, L)`` over
        every position seen; the state holds the earlier ones already, so only its last ``Lq``
        key columns are read.
        """
        cache, context = continued_request(self, x, cache, StateCache, context)
        count, offset = x.shape[1], 0 if cache is None else cache.length
        steps = context.key_padding
        q, k, v, layer_input, windows = self._project(x, context, cache)
        recurrence = self._prepare(q, k, v, layer_input)
        output, state = self._run(
            recurrence, self._form(count, x.device), None if cache is None else cache.state, steps
        )
        return self._output(output, recurrence, steps, layer_input), StateCache(state, offset + count, windows)

    def _project(
        self, x: Tensor, context: AttentionContext, cache: StateCache | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor, tuple[Tensor, ...]]:
        """Queries, keys ``(B, qk_heads, T, dk)`` and values ``(B, H, T, dv)`` of the new positions
        ``x`` after ``cache`` (None: from position 0): projected, convolved after the cache's windows
        (the context's padded steps as zeros), split into heads, rotated from the cache's length; what
        :meth:`prepare` and :meth:`finish` read as the layer's input (``x`` here; a family whose
        gates read more, such as RWKV-7's token shift, says what); and the convolutions' windows
        after ``x`` (none without a convolution)."""
        offset = 0 if cache is None else cache.length
        activated = self.silu == "always" or (self.silu == "convolved" and self.convolves)
        qk_in_conv = self.convolves and self.rotary is None  # SiLU does not commute with a rotation
        act = "silu" if activated else None
        acts = [act if qk_in_conv else None] * 2 + [act]
        projected, windows = self.convolved_projections(x, None if cache is None else cache.extra, context, acts)
        q, k = (t.unflatten(-1, (self.qk_heads, -1)).transpose(1, 2) for t in projected[:2])
        q = rotate_heads(self.rotary, q, offset, context)
        k = k.unflatten(-1, (self.writes, -1)).transpose(-3, -2)  # (B, G, writes, T, dk): each write at its token
        k = rotate_heads(self.rotary, k, offset, context).transpose(-3, -2).flatten(-2)
        if activated and not qk_in_conv:  # after the rotation, where there is one
            q, k = F.silu(q), F.silu(k)
        return q, k, self.split_heads(projected[2]), x, windows or ()

    def chunk_length(self, device: torch.device) -> int:
        """Steps per chunk on ``device``: ``chunk_size``, or the device's default."""
        if self.chunk_size is not None:
            return self.chunk_size
        return self.cpu_chunk_size if device.type == "cpu" else CHUNK_SIZE

    def _form(self, length: int, device: torch.device) -> Mode:
        """The form for ``length`` steps: ``mode``, or for ``auto`` the fastest (see the module docstring)."""
        if self.mode != "auto":
            return self.mode
        if length == 1:
            return "recurrent"
        return "parallel" if length <= self.chunk_length(device) else "chunkwise"

    def _prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> RecurrenceForms:
        """:meth:`prepare` on queries, keys and values in float32 at least (the state's precision)."""
        dtype = torch.promote_types(queries.dtype, torch.float32)
        return self.prepare(queries.to(dtype), keys.to(dtype), values.to(dtype), layer_input)

    def _run(
        self,
        recurrence: RecurrenceForms,
        form: Mode,
        state: Tensor | None,
        steps: Tensor | None,
        *,
        weights: bool = False,
    ) -> tuple[Tensor, Tensor]:
        """The recurrence in ``form`` from ``state`` (zeros if None), outside autocast: the
        chunkwise form in flash-linear-attention's kernels where the backend takes them
        (:mod:`zoo.attention.build.backends`; forced, the parallel form too, unless ``weights`` are
        wanted, which they do not give)."""
        device = recurrence.q.device
        with torch.autocast(device.type, enabled=False):
            if form == "recurrent":
                return recurrence.recurrent(state, steps)
            refusal = (
                "it returns no weights" if weights else self._fla_refusal(device) or fla_refusal(recurrence, steps)
            )
            fused = choose("fla", refusal, device=device)
            if fused and (form == "chunkwise" or requested_backend() == "fla"):  # forced: the parallel form too
                return fla_chunk(recurrence, state, steps)
            return recurrence.chunkwise(None if form == "parallel" else self.chunk_length(device), state, steps)

    def fused_backend(self, device: torch.device, dtype: torch.dtype) -> tuple[str, str | None]:
        """``("fla", why not)``: flash-linear-attention's chunk kernels run the chunkwise form
        (:mod:`zoo.attention.build.backends`) where they are installed, on CUDA."""
        return "fla", self._fla_refusal(torch.device(device))

    def _fla_refusal(self, device: torch.device) -> str | None:
        """Why flash-linear-attention's kernels cannot run the chunkwise form here, or None."""
        if self.fla_refusal is not None:
            return self.fla_refusal
        if not fla_available(device):
            return "its kernels need the fla extra (pip install attention-zoo[fla]) and a CUDA device"
        return None

    def _output(self, output: Tensor, recurrence: RecurrenceForms, steps: Tensor | None, layer_input: Tensor) -> Tensor:
        """The skip connection (none at a padded step, which reads nothing), :meth:`finish` in the
        computation's dtype, the heads merged and projected back in the input's dtype."""
        if recurrence.skip is not None:
            skip = recurrence.skip
            output = output + (skip if steps is None else torch.where(steps.unsqueeze(-1), skip, skip.new_zeros(())))
        heads = self.finish(output, layer_input).to(layer_input.dtype)
        return self.out_proj(heads.transpose(1, 2).flatten(-2))

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        """Read a layer saved before the families were layers: its per-head attention's
        parameters sat under ``score_attention.`` (see :meth:`legacy_state_dict`)."""
        legacy = prefix + "score_attention."
        for key in [key for key in state_dict if key.startswith(legacy)]:
            state_dict[prefix + key[len(legacy) :]] = state_dict.pop(key)
        self.legacy_state_dict(state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args)

    @classmethod
    def legacy_layout(cls, embed_dim: int, num_heads: int) -> dict[str, Any]:
        """The arguments that rebuild a layer of this family saved before the families were
        layers (format 1), in a stack of that width and heads: no convolution, here."""
        return {"conv_size": 0}

    def legacy_state_dict(self, state_dict: dict[str, Any], prefix: str) -> None:
        """Rename or reshape, in place, what a family stored otherwise before it was a layer (none here)."""

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, conv_size={self.conv_size}, "
            f"mode={self.mode!r}, chunk_size={self.chunk_size}"
        )
