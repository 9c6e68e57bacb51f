"""``zoo.testing.check_attention``: every built-in keeps the contract, and broken variants are
caught by the check they break, with a message saying what went wrong."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import zoo
from tests.helpers.positions import KIT_OPTIONS, takes_position
from zoo.attention import AttentionOutput
from zoo.attention.contract.base import position_bias_grid
from zoo.attention.contract.masking import masked_softmax, with_causal
from zoo.testing import AttentionContractError, check_attention

BUILT_INS = [e.name for e in zoo.ATTENTION_REGISTRY.entries() if e.source == "attention-zoo"]
ALL_CHECKS = ("shape", "padding", "causal", "fully_masked", "weights", "float16", "bfloat16", "gradients")
#: what the kit adds for a variant that decodes with a fixed-size state
STATE_CHECKS = ("state_decoding", "state_size")
RECURRENT = [
    "retention", "gla", "deltanet", "gated_deltanet", "mamba2", "kda", "rwkv7", "gated_deltaproduct",
    "gated_deltanet2", "comba", "mesanet", "mamba3", "mamba1", "hgrn2", "rwkv6", "gsa", "based", "lightning_attention",
]  # fmt: skip
#: causal-only layers that decode from a growing cache (keys and values, or log-linear's levels)
#: and take key masks only
#: (and the default parallel hybrid: its softmax branch's cache beside Mamba-2's state)
CAUSAL_SPARSE = [
    "moba", "nsa", "msa", "path_attention", "deltaformer", "log_linear_mamba2", "log_linear_gated_deltanet",
    "parallel_hybrid",
]  # fmt: skip
#: causal-only variants that decode from every key and value (a key/value cache): checked causally
CAUSAL_ONLY = ["stick_breaking", "forgetting", "deepseek_v4"]
#: what a causal-only layer declares it cannot do, and is verified to refuse
RECURRENT_SKIPS = {
    "bidirectional": "declares supports_bidirectional=False (and refuses it): checked causally",
    "query_masks": "declares supports_query_mask=False (and refuses it): checked with key masks",
}


def test_the_built_ins_are_all_checked() -> None:
    assert {"additive", "dot_product", "gaussian_kernel", "average", "multi_head", "self", "cross"} <= set(BUILT_INS)


def test_a_layer_whose_parameters_need_longer_inputs_passes_with_its_defaults() -> None:
    """NSA compresses blocks of 8 keys: at the gradient check's 4 tokens its compression takes no
    part, so whether every parameter learns is checked at a longer input."""
    assert "gradients" in check_attention("nsa").passed


def _expected_checks(name: str) -> tuple[str, ...]:
    """The checks built-in ``name`` passes: every one but those of a capability it declares it lacks
    (causality, weights: verified to refuse them instead), and the state checks if it is recurrent."""
    variant = zoo.get_attention(name)
    lacks = {check for check, flag in (("causal", "supports_causal"), ("weights", "supports_weights"))
             if not getattr(variant, flag)}  # fmt: skip
    return tuple(check for check in ALL_CHECKS if check not in lacks) + (STATE_CHECKS if name in RECURRENT else ())


@pytest.mark.parametrize("name", BUILT_INS)
def test_every_built_in_keeps_the_contract(name: str) -> None:
    report = check_attention(name, **KIT_OPTIONS.get(name, {}))
    # a variant that is not causal (linformer's projections mix every position) is verified to refuse it
    not_causal = not zoo.get_attention(name).supports_causal
    # a recurrent variant is checked in a self-attention layer, causally, and for its decoding state
    recurrent = name in RECURRENT
    assert report.passed == _expected_checks(name)
    # a sliding window needs one sequence: checked on equal lengths, and it refuses two (a layer a stack
    # builds by name is fed one sequence anyway)
    variant = zoo.get_attention(name)
    layer = issubclass(variant, zoo.AttentionLayer) and variant.stack_layer
    one_sequence = not getattr(variant, "supports_cross_attention", True) and not layer
    skipped = {"two_sequences": "declares supports_cross_attention=False (and refuses it)"} if one_sequence else {}
    if not_causal:
        skipped["causal"] = "declares supports_causal=False (and refuses it)"
    if name in CAUSAL_ONLY:
        skipped["bidirectional"] = RECURRENT_SKIPS["bidirectional"]
    if recurrent or name in CAUSAL_SPARSE:
        skipped = dict(RECURRENT_SKIPS)
    if not variant.supports_weights:  # two parts with their own values (based) have no one weight matrix
        skipped["weights"] = "declares supports_weights=False (and refuses it)"
    assert report.skipped == skipped


def test_the_recurrent_built_ins_are_those_that_decode_with_a_state() -> None:
    causal_only = {name for name in BUILT_INS if not zoo.get_attention(name).supports_bidirectional}
    assert sorted(RECURRENT) == sorted(
        name for name in causal_only if getattr(zoo.get_attention(name), "fixed_state", False)
    )
    assert sorted(causal_only - set(RECURRENT)) == sorted(CAUSAL_SPARSE + CAUSAL_ONLY)


def test_a_one_sequence_variant_that_accepts_two_sequences_is_caught() -> None:
    class Window(zoo.DotProductAttention):
        """Declares it needs one sequence, yet silently scores queries against another's keys."""

        supports_cross_attention = False

    with pytest.raises(
        AttentionContractError, match=r"supports_cross_attention=False but accepted 5 queries over 7 keys"
    ):
        check_attention(Window)


@pytest.mark.parametrize(
    ("variant", "kwargs"),
    [
        ("gaussian_kernel", {"learnable": True, "bandwidth": 0.5}),
        ("additive", {"query_size": 3, "key_size": 9, "num_hiddens": 4}),
        ("multi_head", {"attention": "additive", "kdim": 6, "vdim": 3}),
        ("self", {"attention": "gaussian_kernel", "num_heads": 4}),
        ("cross", {"attention": "additive", "memory_dim": 5}),
        (zoo.DotProductAttention, {"scale": 0.3}),
    ],
)
def test_configured_variants_keep_the_contract(variant, kwargs) -> None:
    assert check_attention(variant, **kwargs).passed == ALL_CHECKS


def test_an_instance_can_be_checked_and_is_left_untouched() -> None:
    layer = zoo.create_attention("multi_head", embed_dim=12, num_heads=3, kdim=4).train()
    before = {k: v.clone() for k, v in layer.state_dict().items()}
    report = check_attention(layer, dtypes=())
    assert report.passed == ("shape", "padding", "causal", "fully_masked", "weights", "gradients")
    assert layer.training and all(torch.equal(before[k], v) for k, v in layer.state_dict().items())


def test_check_attention_leaves_the_global_random_state_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_attention("additive", dtypes=())
    assert torch.equal(torch.rand(3), expected)


# -- broken variants, each caught by the check it breaks --------------------------------------------


class _Cosine(zoo.Attention):
    """A correct plugin variant that the broken ones below start from."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        self.temperature = nn.Parameter(torch.tensor(3.0))

    def score(self, queries: Tensor, keys: Tensor) -> Tensor:
        q, k = nn.functional.normalize(queries, dim=-1), nn.functional.normalize(keys, dim=-1)
        return self.temperature * q @ k.transpose(-2, -1)


class _LeaksTheFuture(_Cosine):
    """Accepts is_causal but never masks: the bug the Hugging Face registry once shipped."""

    def forward(self, queries, keys, values, valid_lens=None, *, attn_mask=None, is_causal=False, need_weights=False):
        return super().forward(queries, keys, values, valid_lens, attn_mask=attn_mask, need_weights=need_weights)


class _IgnoresPadding(_Cosine):
    def forward(self, queries, keys, values, valid_lens=None, *, attn_mask=None, is_causal=False, need_weights=False):
        return super().forward(queries, keys, values, is_causal=is_causal, need_weights=need_weights)


class _IgnoresAttnMask(_Cosine):
    def forward(self, queries, keys, values, valid_lens=None, *, attn_mask=None, is_causal=False, need_weights=False):
        return super().forward(queries, keys, values, valid_lens, is_causal=is_causal, need_weights=need_weights)


class _NaNWhenNothingIsVisible(_Cosine):
    """The textbook masked softmax: fill with -inf, so a fully masked row is 0/0."""

    def attend(self, queries, keys, values, context):
        mask, is_causal, need_weights = context.mask, context.is_causal, context.need_weights
        mask = with_causal(mask, queries.shape[-2], keys.shape[-2]) if is_causal else mask
        scores = self.score(queries, keys)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return AttentionOutput(weights @ values, weights if need_weights else None)


class _UniformWhenNothingIsVisible(_Cosine):
    """Fills with a large negative number and forgets to zero rows with no visible key.

    Dot-product scores are used because a per-row shift changes nothing in the softmax: only the
    fully masked rows differ, where every key, hidden or not, gets the same weight."""

    def score(self, queries, keys):
        return queries @ keys.transpose(-2, -1)

    def attend(self, queries, keys, values, context):
        mask, is_causal, need_weights = context.mask, context.is_causal, context.need_weights
        mask = with_causal(mask, queries.shape[-2], keys.shape[-2]) if is_causal else mask
        scores = self.score(queries, keys)
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)
        weights = torch.softmax(scores, dim=-1)
        return AttentionOutput(weights @ values, weights if need_weights else None)


class _UnnormalizedWeights(_Cosine):
    """Returns the weights before normalizing them, though the output is right."""

    def attend(self, queries, keys, values, context):
        mask, is_causal, need_weights = context.mask, context.is_causal, context.need_weights
        mask = with_causal(mask, queries.shape[-2], keys.shape[-2]) if is_causal else mask
        weights = masked_softmax(self.score(queries, keys), mask=mask)
        return AttentionOutput(weights @ values, 2 * weights if need_weights else None)


class _SigmoidClaimingADistribution(_Cosine):
    """Sigmoid weights, each on its own, without saying that they are no distribution."""

    def weigh(self, scores: Tensor, mask: Tensor | None) -> Tensor:
        weights = torch.sigmoid(scores)
        return weights if mask is None else weights.masked_fill(~mask, 0.0)


class _SigmoidSeeingHiddenKeys(_SigmoidClaimingADistribution):
    """Says its weights are no distribution, and weighs the keys the mask hides too."""

    normalized_weights = False

    def weigh(self, scores: Tensor, mask: Tensor | None) -> Tensor:
        return torch.sigmoid(scores)


def test_weights_declared_no_distribution_are_checked_for_hidden_keys_only() -> None:
    class Sigmoid(_SigmoidClaimingADistribution):
        normalized_weights = False

    assert check_attention(Sigmoid).passed == ALL_CHECKS
    # a multi-head layer says what its heads' weights are
    assert check_attention("self", attention="sigmoid").passed == ALL_CHECKS


class _HalfPrecisionOverflow(_Cosine):
    """Multiplies scores by a constant that overflows float16."""

    def score(self, queries, keys):
        return 1e5 * super().score(queries, keys)


class _ReturnsFloat32(_Cosine):
    def forward(self, *args, **kwargs):
        output, weights = super().forward(*args, **kwargs)
        return AttentionOutput(output.float(), weights)


class _UnusedParameter(_Cosine):
    """A parameter the computation never uses: DistributedDataParallel would stop on it."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        self.forgotten = nn.Parameter(torch.ones(3))


class _DetachesValues(_Cosine):
    def attend(self, queries, keys, values, context):
        return super().attend(queries, keys, values.detach(), context)


class _WrongBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.exp()

    @staticmethod
    def backward(ctx, grad):
        return grad  # should be grad * exp(x)


class _BadCustomGradient(_Cosine):
    def score(self, queries, keys):
        return torch.log(_WrongBackward.apply(super().score(queries, keys)))


class _DropsAQuery(_Cosine):
    def forward(self, *args, **kwargs):
        output, weights = super().forward(*args, **kwargs)
        return AttentionOutput(output[..., :-1, :], weights)


class _ClaimsNoCausalButIgnoresIt(_LeaksTheFuture):
    """Declares it cannot mask the future, yet accepts is_causal=True silently."""

    supports_causal = False


class _GivesNoWeights(_Cosine):
    """Declares weights (the default) but never returns any: the kit once crashed on it."""

    def forward(self, queries, keys, values, valid_lens=None, *, attn_mask=None, is_causal=False, need_weights=False):
        return super().forward(queries, keys, values, valid_lens, attn_mask=attn_mask, is_causal=is_causal)


class _NoCausal(_Cosine):
    """Honest: cannot mask the future and refuses to (the base class raises)."""

    supports_causal = False


@pytest.mark.parametrize(
    ("variant", "check", "message"),
    [
        (
            _LeaksTheFuture,
            "causal",
            "with is_causal=True (7 queries, 7 keys), query 0 of sequence 0 changed when key/value 1, hidden from it, changed",
        ),
        (
            _IgnoresPadding,
            "padding",
            "with valid_lens of shape (B,), query 0 of sequence 2 changed when key/value 1, hidden from it, changed",
        ),
        (_IgnoresAttnMask, "padding", "with a boolean attn_mask, query"),
        (
            _NaNWhenNothingIsVisible,
            "fully_masked",
            "a query with no visible key (valid_lens 0) gives a non-finite output",
        ),
        (_UniformWhenNothingIsVisible, "padding", "with valid_lens of shape (B, Lq), query"),
        (_UnnormalizedWeights, "weights", "must sum to 1"),
        (_SigmoidClaimingADistribution, "weights", "must sum to 1"),
        (_SigmoidSeeingHiddenKeys, "padding", "hidden from it, changed"),
        (_HalfPrecisionOverflow, "float16", "the output in torch.float16 has NaN or inf"),
        (_ReturnsFloat32, "float16", "torch.float16 inputs gave a torch.float32 output"),
        (_UnusedParameter, "gradients", "the trainable parameter 'forgotten' gets no gradient"),
        (_DetachesValues, "gradients", "the values get no gradient"),
        (_BadCustomGradient, "gradients", "analytical gradients differ from finite differences"),
        (_DropsAQuery, "shape", "output has shape (3, 4, 5), expected (3, 5, 5)"),
        (_ClaimsNoCausalButIgnoresIt, "supports_causal", "declares supports_causal=False but accepted is_causal=True"),
        (_GivesNoWeights, "fully_masked", "need_weights=True returned no weights although the variant declares"),
    ],
)
def test_broken_variants_are_caught_by_the_check_they_break(variant, check, message) -> None:
    with pytest.raises(AttentionContractError) as info:
        check_attention(variant)
    text = str(info.value)
    assert text.startswith(f"{variant.__name__} fails the attention contract [{check}]: "), text
    assert message in text, text
    assert isinstance(info.value, AssertionError), "pytest reports it as a failed assertion"


def test_a_variant_declaring_no_causal_support_is_checked_for_the_rest() -> None:
    report = check_attention(_NoCausal)
    assert "causal" not in report.passed and report.skipped == {
        "causal": "declares supports_causal=False (and refuses it)"
    }
    assert {"padding", "fully_masked", "weights", "gradients"} <= set(report.passed)


def test_a_correct_plugin_passes_and_is_reachable_from_the_package() -> None:
    assert zoo.testing.check_attention is zoo.check_attention is check_attention
    assert check_attention(_Cosine).passed == ALL_CHECKS


def test_not_an_attention_is_refused() -> None:
    with pytest.raises(TypeError, match="subclass of zoo.Attention or zoo.AttentionLayer"):
        check_attention(nn.Linear)
    with pytest.raises(KeyError, match="Did you mean 'additive'"):
        check_attention("adittive")


# -- on a given device ----------------------------------------------------------------------------


def test_check_attention_moves_the_whole_kit_to_the_device_given() -> None:
    """Every input, mask and parameter reaches the variant on ``device``. The meta device stands in
    for one that is not here: it computes shapes only, so the run stops at the first comparison."""
    seen = []

    class Recording(_Cosine):
        def forward(self, queries, keys, values, valid_lens=None, **kwargs):
            tensors = (queries, keys, values, valid_lens, *kwargs.values(), *self.parameters())
            seen.append({t.device.type for t in tensors if isinstance(t, Tensor)})
            return super().forward(queries, keys, values, valid_lens, **kwargs)

    with pytest.raises(AttentionContractError, match="meta"):
        check_attention(Recording, device="meta", dtypes=())
    assert seen == [{"meta"}]


def test_check_attention_refuses_cuda_where_there_is_none() -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ValueError, match="CUDA is not available here; use device='cpu'"):
        check_attention("dot_product", device="cuda")


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["dot_product", "local", "linear", "multi_head", "self"])
def test_built_in_variants_keep_the_contract_on_cuda(name: str) -> None:
    report = check_attention(name, device="cuda")
    assert "gradients" in report.passed


# -- with positional schemes ---------------------------------------------------------------------


POSITIONED = [
    (name, position) for name in BUILT_INS for position in zoo.list_positions() if takes_position(name, position)
]


@pytest.mark.parametrize(("name", "position"), POSITIONED, ids=[f"{n}-{p}" for n, p in POSITIONED])
def test_every_built_in_keeps_the_contract_in_every_position_it_takes(name: str, position: str) -> None:
    report = check_attention(name, position=position, **KIT_OPTIONS.get(name, {}))
    assert report.passed == _expected_checks(name)
    assert report.variant.endswith(f"with position {position!r}")


def test_positions_a_variant_cannot_take_are_refused() -> None:
    assert ("linear", "rope") in POSITIONED and ("dot_product", "t5") in POSITIONED
    with pytest.raises(zoo.IncompatibleAttentionError, match="supports_position_bias=False"):
        check_attention("linear", position="alibi")
    with pytest.raises(ValueError, match="cross-attention takes no positions"):
        check_attention("cross", position="rope")


def test_a_bias_that_replaces_the_padding_mask_is_caught() -> None:
    class BiasInsteadOfMask(zoo.DotProductAttention):
        """Hands the bias to the kernel as its mask, dropping the padding mask it had."""

        supports_position_bias = True

        def attend(self, queries, keys, values, context):
            position_bias, is_causal = context.position_bias, context.is_causal
            if position_bias is None or context.need_weights:
                return super().attend(queries, keys, values, context)
            bias = position_bias_grid(position_bias, queries.shape[-2], keys.shape[-2], queries.device).to(
                queries.dtype
            )
            if is_causal:
                bias = bias.masked_fill(~with_causal(None, queries.shape[-2], keys.shape[-2]), float("-inf"))
            return AttentionOutput(
                torch.nn.functional.scaled_dot_product_attention(queries, keys, values, attn_mask=bias), None
            )

    assert check_attention(BiasInsteadOfMask, dtypes=()).passed  # without a bias it is plain dot_product
    with pytest.raises(AttentionContractError, match=r"\[padding\]"):
        check_attention(BiasInsteadOfMask, dtypes=(), position="alibi")


@pytest.mark.parametrize("position", ["rope", "alibi", "t5"])
def test_a_grouped_query_layer_keeps_the_contract_with_positions(position: str) -> None:
    assert (
        check_attention("self", position=position, num_heads=2, attention=zoo.AttentionSpec(num_kv_heads=1)).passed
        == ALL_CHECKS
    )


# -- windowed variants: a query whose whole window is padding sees nothing -----------------------


@pytest.mark.parametrize("window", [2, 3, 4, 5, 8])
def test_a_small_window_keeps_the_contract(window: int) -> None:
    """Windows narrower than the test sequence leave some queries with only padding in view: they
    get zero weights, which the weights check accepts (it once demanded a sum of 1 there)."""
    assert check_attention("local", window=window, dtypes=()).passed == tuple(c for c in ALL_CHECKS if "float" not in c)


def test_a_layer_over_a_small_window_keeps_the_contract() -> None:
    report = check_attention("self", attention=zoo.AttentionSpec("local", {"window": 3}), dtypes=())
    assert report.passed == ("shape", "padding", "causal", "fully_masked", "weights", "gradients")


def test_a_small_window_with_a_learned_relative_bias_keeps_the_contract() -> None:
    attention = zoo.create_attention("local", window=3, relative_bias=True)
    with torch.no_grad():
        attention.relative_bias.normal_()
    assert check_attention(attention, dtypes=()).passed == (
        "shape",
        "padding",
        "causal",
        "fully_masked",
        "weights",
        "gradients",
    )


class _UniformOverPaddingWhenBlind(zoo.LocalAttention):
    """Reports uniform weights over every key for a query whose window holds only padding though
    other keys are visible (its output stays right; a fully masked row is still all zero): the
    weights say it read keys it cannot see."""

    def attend(self, queries, keys, values, context):
        mask = context.mask
        output, weights = super().attend(queries, keys, values, context)
        if weights is not None and mask is not None:
            blind = (weights.sum(-1, keepdim=True) == 0) & mask.any(-1, keepdim=True)
            weights = torch.where(blind, 1 / keys.shape[-2], weights)
        return AttentionOutput(output, weights)


class _LeaksWeightOntoPadding(zoo.LocalAttention):
    """Moves a little weight onto masked keys and renormalises: every row that sees a key still
    sums to 1 (and one that sees none stays zero)."""

    def attend(self, queries, keys, values, context):
        mask = context.mask
        output, weights = super().attend(queries, keys, values, context)
        if weights is not None and mask is not None:
            leaked = weights + 1e-3 * (~mask & (weights.sum(-1, keepdim=True) > 0)).to(weights.dtype)
            weights = leaked / leaked.sum(-1, keepdim=True).clamp_min(1e-12)
        return AttentionOutput(output, weights)


class _ZeroWeightsForQueryZero(_Cosine):
    """Reports all-zero weights for query 0, which does read its keys: a blind row must not."""

    def attend(self, queries, keys, values, context):
        output, weights = super().attend(queries, keys, values, context)
        if weights is not None:
            weights = weights.clone()
            weights[..., 0, :] = 0
        return AttentionOutput(output, weights)


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        (_UniformOverPaddingWhenBlind, "exactly zero on keys a query cannot see"),
        (_LeaksWeightOntoPadding, "exactly zero on keys a query cannot see"),
        (
            _ZeroWeightsForQueryZero,
            "query 0 of sequence 0 has all-zero weights, yet its output changes with the keys and values",
        ),
    ],
)
def test_weights_a_window_cannot_give_are_caught(variant, message) -> None:
    kwargs = {"window": 3} if issubclass(variant, zoo.LocalAttention) else {}
    with pytest.raises(AttentionContractError) as info:
        check_attention(variant, dtypes=(), **kwargs)
    assert str(info.value).startswith(f"{variant.__name__} fails the attention contract [weights]: "), str(info.value)
    assert message in str(info.value), str(info.value)
