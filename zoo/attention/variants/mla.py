"""Multi-head latent attention (MLA; DeepSeek-AI, 2024, DeepSeek-V2; used by DeepSeek-V3 and by Kimi
Linear's full-attention layers): softmax attention whose keys and values are read from one
low-rank latent per position, so that a decoder caches the latent instead of every head's keys
and values.

For a token ``x_t`` (the paper's equations 9 to 19, its notation)::

    c^Q_t = RMSNorm(x_t W^DQ)                        (q_lora_rank; none: q_t = x_t W^Q)
    [q^C_t,h ; q^R_t,h] = c^Q_t W^UQ                 (per head: qk_nope_head_dim and qk_rope_head_dim)
    q^R_t,h <- RoPE(q^R_t,h)
    [c^KV_t ; k^R_t] = x_t W^DKV                     (kv_lora_rank, and one rotary key for all heads)
    c^KV_t <- RMSNorm(c^KV_t),   k^R_t <- RoPE(k^R_t)
    [k^C_t,h ; v^C_t,h] = c^KV_t W^UKV               (per head: qk_nope_head_dim and v_head_dim)
    o_t,h = sum_j softmax_j([q^C_t,h ; q^R_t,h] . [k^C_j,h ; k^R_j] / sqrt(dn + dr)) v^C_j,h
    y_t = [o_t,1 ; ... ; o_t,H] W^O

Decoupled rotary sub-heads: the rotation cannot act on ``k^C`` without preventing the absorption
below, so positions enter through a separate ``dr``-wide part of every query head and one rotary
key shared by all heads. A decoder caches ``c^KV`` and ``k^R`` only, ``kv_lora_rank +
qk_rope_head_dim`` numbers a position (:class:`~zoo.attention.contract.cache.LatentCache`), against a
multi-head layer's ``2 * embed_dim``.

Two forms, equal up to rounding (:mod:`zoo.attention.kernels.latent`): ``naive`` up-projects every
cached latent to each head's keys and values; ``absorbed`` folds ``W^UK`` into the queries and
``W^UV`` into the output, so the heads attend over the latents as they are (one key and one value
head, ``kv_lora_rank + qk_rope_head_dim`` and ``kv_lora_rank`` wide). ``mode="auto"`` takes the
naive form for a pass with no cache (training, a prompt: as many queries as keys) and the absorbed
one for decoding after a cache, as DeepSeek-V3's inference code absorbs when it decodes.

Positions: the rotary sub-heads take the stack's rotary scheme where it has one (``--model.position
rope``), sized to ``qk_rope_head_dim``; without one (an absolute or no scheme), the layer rotates
them with its own RoPE (the zoo's ``rope``: pairs of halves, base ``rope_base``), since MLA's
``q^R`` and ``k^R`` exist to carry positions. ``rope=False`` leaves them unrotated: MLA without
positions, as Kimi Linear's full-attention layers (NoPE; its ``k^R`` stays a shared key part).
A bias scheme (``alibi``, ``t5``) is refused: MLA has no per-head score bias in the papers.

What follows the paper and DeepSeek-V3's ``inference/model.py``: the projections and their
layout (``W^UKV``'s rows head by head, ``dn`` key rows then ``dv`` value rows), the RMSNorms on
both latents (``eps`` 1e-6), no biases, the scale ``1 / sqrt(dn + dr)``. Where the zoo differs:
the defaults are sized for its widths rather than DeepSeek's (``kv_lora_rank = embed_dim // 4``, as
DeepSeek-V2-Lite's 512 of 2048; ``qk_nope_head_dim = v_head_dim = embed_dim // num_heads`` and
``qk_rope_head_dim`` half of it, as DeepSeek's 128 and 64; no query compression by default, as
DeepSeek-V2-Lite and Kimi Linear, DeepSeek-V3's ``q_lora_rank`` is 1536 of 7168); DeepSeek's RoPE
rotates adjacent pairs where the zoo's rotates halves (a fixed permutation of the rotary
features). YaRN's long-context scaling comes with the rotary scheme (the stack's, or
``rope_scaling`` for the layer's own); as in DeepSeek-V3's inference code, a YaRN rule with
``mscale_all_dim`` also multiplies the softmax scale by ``(0.1 mscale_all_dim ln s + 1)^2``.

``conv_size`` ``K`` (0 by default: neither paper has one) puts a short causal depthwise
convolution, as the ``softmax`` layer's, on what the layer projects down: the queries (their
latent ``x W^DQ`` with ``q_lora_rank``, else ``x W^Q``) and ``x W^DKV``, before the norms, the
rotation and the cache, so each position's latent and rotary key carry its predecessors (what
one softmax layer needs to recall on MQAR without first learning a previous-token head,
``docs/results/recall.md``, the previous-token head). The cache then holds each convolution's last
``K - 1`` inputs beside the latents (a :class:`~zoo.attention.contract.cache.ConvolvedCache`), and
the absorbed form is unchanged: the convolution comes before ``W^UKV``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal, get_args

from torch import Tensor, nn

from zoo.attention.build.factory import register_attention_layer
from zoo.attention.contract.base import AttentionOutput, IncompatibleAttentionError
from zoo.attention.contract.cache import ConvolvedCache, LatentCache, LayerCache
from zoo.attention.contract.context import AttentionContext
from zoo.attention.contract.layer import AttentionLayer
from zoo.attention.kernels.latent import latent_attention_absorbed, latent_attention_naive, latent_attention_weights
from zoo.attention.modules.convolved import ShortConvolved
from zoo.attention.modules.rotation import rotate_heads
from zoo.positions import PositionScheme
from zoo.positions.rope_scaling import RopeScaling, YarnScaling, yarn_mscale
from zoo.positions.rotary import RotaryEmbedding

__all__ = ["LatentMode", "MultiHeadLatentAttention"]

LatentMode = Literal["auto", "naive", "absorbed"]
"""Which form computes the attention (see :mod:`zoo.attention.variants.mla`)."""


def softmax_temperature(scaling: RopeScaling | None) -> float:
    """DeepSeek-V3's factor on the softmax scale's square root under YaRN with ``mscale_all_dim``; 1 otherwise."""
    if isinstance(scaling, YarnScaling) and scaling.mscale_all_dim:
        return yarn_mscale(scaling.factor, scaling.mscale_all_dim)
    return 1.0


@register_attention_layer("mla", aliases=("multi_head_latent", "latent_attention"))
class MultiHeadLatentAttention(ShortConvolved, AttentionLayer):
    """Multi-head latent attention (see the module docstring).

    Args:
        embed_dim: The block's width.
        num_heads: Query heads.
        kv_lora_rank: Width of the key-value latent ``c^KV``; None: ``embed_dim // 4``.
        q_lora_rank: Width of the query latent ``c^Q``; None: no query compression.
        qk_nope_head_dim: Each head's query and key features read from the latent; None:
            ``embed_dim // num_heads``.
        qk_rope_head_dim: Each head's rotary query features, and the shared rotary key's; None:
            half of ``embed_dim // num_heads`` (even, at least 2).
        v_head_dim: Each head's value features; None: ``embed_dim // num_heads``.
        rope: Rotate the rotary sub-heads (the stack's rotary scheme, or the layer's own); False:
            no positions in the layer (Kimi Linear's MLA).
        rope_base: The own RoPE's wavelength base, when the stack has no rotary scheme.
        rope_scaling: The own RoPE's frequency scaling (:mod:`zoo.positions.rope_scaling`: a rule
            or a mapping naming one), when the stack has no rotary scheme; None: none.
        mode: ``auto``, ``naive`` or ``absorbed`` (see the module docstring).
        conv_size: Kernel of a short causal convolution on the down-projections (see the module
            docstring); 0, the papers', for none.
        position: The stack's rotary scheme, or None.

    Parameters: ``q_proj`` (``embed_dim -> H (dn + dr)``) or ``q_down``, ``q_norm`` and ``q_up``;
    ``kv_down`` (``embed_dim -> kv_lora_rank + dr``), ``kv_norm``, ``kv_up`` (``kv_lora_rank -> H (dn +
    dv)``); ``out_proj`` (``H dv -> embed_dim``). No biases.
    """

    family = "latent"
    cost = "L²"

    supports_rotary = True
    supports_position_bias = False
    conv_names = ("q_conv", "kv_conv")
    #: what :meth:`attend_cached` holds between calls; :meth:`_hold` extends it, :meth:`_read` reads it
    cache_type: ClassVar[type] = LatentCache

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kv_lora_rank: int | None = None,
        q_lora_rank: int | None = None,
        qk_nope_head_dim: int | None = None,
        qk_rope_head_dim: int | None = None,
        v_head_dim: int | None = None,
        rope: bool = True,
        rope_base: float = 10000.0,
        rope_scaling: RopeScaling | Mapping[str, Any] | None = None,
        mode: LatentMode = "auto",
        conv_size: int = 0,
        position: PositionScheme | None = None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        self.require_positive(embed_dim=embed_dim, num_heads=num_heads, q_lora_rank=q_lora_rank)
        head_dim = max(embed_dim // num_heads, 1)
        sizes = {
            "kv_lora_rank": max(embed_dim // 4, 1) if kv_lora_rank is None else kv_lora_rank,
            "qk_nope_head_dim": head_dim if qk_nope_head_dim is None else qk_nope_head_dim,
            "qk_rope_head_dim": max(head_dim // 4 * 2, 2) if qk_rope_head_dim is None else qk_rope_head_dim,
            "v_head_dim": head_dim if v_head_dim is None else v_head_dim,
        }
        self.require_positive(**{label: value for label, value in sizes.items() if label != "qk_rope_head_dim"})
        if not isinstance(sizes["qk_rope_head_dim"], int) or sizes["qk_rope_head_dim"] < 0:
            raise ValueError(f"{name}: qk_rope_head_dim must be 0 or more, got {sizes['qk_rope_head_dim']!r}.")
        if mode not in get_args(LatentMode):
            raise ValueError(f"{name}: mode must be one of {', '.join(get_args(LatentMode))}; got {mode!r}.")
        rank, nope, rope_dim, value = (
            sizes[key] for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        )
        if position is not None and (position.kind != "rotary" or not rope):
            raise IncompatibleAttentionError(
                f"{name} takes the stack's rotary scheme for its rotary sub-heads, and none with rope=False; "
                f"got a {position.kind} scheme{'' if rope else ' with rope=False'}."
            )
        if rope and rope_dim % 2:
            raise ValueError(f"{name}: qk_rope_head_dim must be even to be rotated (or rope=False); got {rope_dim}.")
        self.embed_dim, self.num_heads, self.mode = embed_dim, num_heads, mode
        self.kv_lora_rank, self.q_lora_rank = rank, q_lora_rank
        self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim = nope, rope_dim, value
        self.rotary: PositionScheme | None = None
        if rope and rope_dim:
            self.rotary = (
                RotaryEmbedding(rope_dim, rope_base, scaling=rope_scaling)
                if position is None
                else position.for_head_dim(rope_dim)
            )
        self.scale = (nope + rope_dim) ** -0.5 * softmax_temperature(getattr(self.rotary, "scaling", None)) ** 2
        query_width = num_heads * (nope + rope_dim)
        if q_lora_rank is None:
            self.q_proj = nn.Linear(embed_dim, query_width, bias=False)
        else:
            self.q_down = nn.Linear(embed_dim, q_lora_rank, bias=False)
            self.q_norm = nn.RMSNorm(q_lora_rank, eps=1e-6)
            self.q_up = nn.Linear(q_lora_rank, query_width, bias=False)
        self.kv_down = nn.Linear(embed_dim, rank + rope_dim, bias=False)
        self.kv_norm = nn.RMSNorm(rank, eps=1e-6)
        self.kv_up = nn.Linear(rank, num_heads * (nope + value), bias=False)
        self.out_proj = nn.Linear(num_heads * value, embed_dim, bias=False)
        down = self.q_proj if q_lora_rank is None else self.q_down
        self.add_convolutions(conv_size, (down.out_features, rank + rope_dim))

    @property
    def cache_width(self) -> int:
        """Numbers a decoder caches per position: ``kv_lora_rank + qk_rope_head_dim``."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    def _up(self) -> tuple[Tensor, Tensor]:
        """``W^UK`` ``(H, dn, r)`` and ``W^UV`` ``(H, dv, r)``, views of ``kv_up``'s weight."""
        weight = self.kv_up.weight.view(self.num_heads, self.qk_nope_head_dim + self.v_head_dim, self.kv_lora_rank)
        return weight[:, : self.qk_nope_head_dim], weight[:, self.qk_nope_head_dim :]

    def _down(
        self, x: Tensor, context: AttentionContext, windows: tuple[Tensor, ...] | None
    ) -> tuple[Tensor, Tensor, tuple[Tensor, ...] | None]:
        """``x`` projected down: the queries (their latent with ``q_lora_rank``) and ``x W^DKV``,
        through the convolutions after ``windows`` when the layer has them; and their windows
        after ``x`` (None without)."""
        queries = self.q_proj(x) if self.q_lora_rank is None else self.q_down(x)
        (queries, latents), windows = self.convolve([queries, self.kv_down(x)], windows, context)
        return queries, latents, windows

    def _queries(self, queries: Tensor, offset: int, context: AttentionContext) -> tuple[Tensor, Tensor]:
        """``q^C`` ``(B, H, L, dn)`` and ``q^R`` ``(B, H, L, dr)`` of the down-projected
        ``queries``, rotated at ``offset ..``."""
        projected = queries if self.q_lora_rank is None else self.q_up(self.q_norm(queries))
        heads = projected.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)
        nope, rope = heads.split([self.qk_nope_head_dim, self.qk_rope_head_dim], dim=-1)
        return nope, rotate_heads(self.rotary, rope, offset, context)

    def _latents(self, down: Tensor, offset: int, context: AttentionContext) -> tuple[Tensor, Tensor]:
        """The normalized latents ``(B, L, r)`` and rotated keys ``(B, L, dr)`` of ``x W^DKV``."""
        latent, rope_key = down.split([self.kv_lora_rank, self.qk_rope_head_dim], dim=-1)
        return self.kv_norm(latent), rotate_heads(self.rotary, rope_key.unsqueeze(1), offset, context).squeeze(1)

    def _attend(
        self, queries: Tensor, latent: Tensor, rope_key: Tensor, offset: int, context: AttentionContext, absorbed: bool
    ) -> AttentionOutput:
        """The new positions' down-projected ``queries`` over every position's ``latent`` and
        ``rope_key``: the output ``(B, Lq, embed_dim)`` and, if the context asks, the weights
        ``(B, H, Lq, Lk)``."""
        qn, qr = self._queries(queries, offset, context)
        key_up, value_up = self._up()
        form = latent_attention_absorbed if absorbed else latent_attention_naive
        options = {"is_causal": context.is_causal, "scale": self.scale}
        heads = form(qn, qr, latent, rope_key, key_up, value_up, context.mask, **options)
        weights = None
        if context.need_weights:
            weights = latent_attention_weights(qn, qr, latent, rope_key, key_up, context.mask, **options)
        return AttentionOutput(self.out_proj(heads.transpose(1, 2).flatten(-2)), weights)

    def attend(self, x: Tensor, context: AttentionContext) -> AttentionOutput:
        queries, down, _ = self._down(x, context, None)
        latent, rope_key = self._latents(down, context.offset, context)
        return self._attend(queries, latent, rope_key, context.offset, context, absorbed=self.mode == "absorbed")

    def attend_cached(
        self, x: Tensor, cache: LayerCache | None, context: AttentionContext | None = None
    ) -> tuple[Tensor, LayerCache]:
        """New positions ``x`` ``(B, Lq, embed_dim)`` after those in ``cache`` (a :attr:`cache_type`,
        :class:`~zoo.attention.contract.cache.LatentCache` here, in a
        :class:`~zoo.attention.contract.cache.ConvolvedCache` when the layer convolves; None before
        the first), causal: the output and the cache extended by :meth:`_hold`. The context's mask, if any, broadcasts to
        ``(B, 1 or H, Lq, L)`` over every position seen."""
        held, windows = self.unwrap_cache(cache, self.cache_type)
        context = AttentionContext(is_causal=True) if context is None else context
        self.check_request(context)
        offset = 0 if held is None else held.length
        queries, down, windows = self._down(x, context, windows)
        latent, rope_key = self._latents(down, offset, context)
        held = self._hold(held, x, latent, rope_key, offset, context)
        absorbed = self.mode == "absorbed" or (self.mode == "auto" and offset > 0)
        output = self._read(x, queries, held, offset, context.replace(need_weights=False), absorbed)
        return output, ConvolvedCache.wrap(held, windows)

    def _hold(
        self,
        held: LatentCache | None,
        x: Tensor,
        latent: Tensor,
        rope_key: Tensor,
        offset: int,
        context: AttentionContext,
    ) -> LatentCache:
        """``held`` (None before the first call) extended by the new positions' ``latent`` and
        ``rope_key`` (``x``, their input, for a subclass that caches more of it)."""
        return LatentCache(latent, rope_key) if held is None else held.extend(latent, rope_key)

    def _read(
        self, x: Tensor, queries: Tensor, held: LatentCache, offset: int, context: AttentionContext, absorbed: bool
    ) -> Tensor:
        """The output of the new positions (input ``x``, down-projected ``queries``) over every
        position ``held``."""
        return self._attend(queries, held.latent, held.rope_key, offset, context, absorbed).output

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kv_lora_rank={self.kv_lora_rank}, "
            f"q_lora_rank={self.q_lora_rank}, qk_nope_head_dim={self.qk_nope_head_dim}, "
            f"qk_rope_head_dim={self.qk_rope_head_dim}, v_head_dim={self.v_head_dim}, mode={self.mode!r}"
            + self.conv_repr()
        )
