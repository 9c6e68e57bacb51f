"""Attention layers as the unit a stack swaps: a layer registered by decorator trains a GPT and
keeps the contract, hybrid lists mix layers and scoring attentions, a spec refuses what a layer
cannot be given, and format-1 hyperparameters migrate to the layout they were saved with."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import zoo
from tests.helpers.gpt import learn_repeating_sequence
from zoo.attention.build.spec import AttentionSpec, layer_specs
from zoo.attention.compat.legacy import migrate_attention
from zoo.attention.contract.cache import KeyValueCache, StateCache
from zoo.attention.modules.recurrent import Recurrence, RecurrentLayer
from zoo.models import GPT
from zoo.summary import attention_by_layer


class ForgettingSum(RecurrentLayer):
    """A plugin's layer: linear attention whose state decays by a per-head gate of the input."""

    def __init__(self, embed_dim: int, num_heads: int, *, conv_size: int = 4, **options) -> None:
        super().__init__(embed_dim, num_heads, key_dim=embed_dim, value_dim=embed_dim, conv_size=conv_size, **options)
        self.forget = nn.Linear(embed_dim, num_heads)

    def prepare(self, queries: Tensor, keys: Tensor, values: Tensor, layer_input: Tensor) -> Recurrence:
        log_decay = F.logsigmoid(self.forget(layer_input)).to(queries.dtype).transpose(-1, -2).unsqueeze(-1)
        return Recurrence(F.silu(queries) * self.key_head_dim**-0.5, F.silu(keys), values, log_decay)


@pytest.fixture
def forgetting_sum() -> Iterator[str]:
    zoo.register_attention_layer("test_forgetting_sum")(ForgettingSum)
    yield "test_forgetting_sum"
    zoo.ATTENTION_REGISTRY.unregister("test_forgetting_sum")


def test_a_layer_registered_by_decorator_trains_a_gpt_and_keeps_the_contract(forgetting_sum: str) -> None:
    torch.manual_seed(0)
    model = GPT(8, block_size=24, d_model=16, num_heads=2, num_layers=2, attention=[forgetting_sum, "dot_product"])
    assert isinstance(model.blocks[0].attention, ForgettingSum) and isinstance(
        model.blocks[1].attention, zoo.SelfAttention
    )
    # a sequence that repeats every 6 tokens: a causal model that reads its context learns it
    losses = learn_repeating_sequence(model, steps=60)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    report = zoo.check_attention(forgetting_sum, dtypes=())
    assert report.passed[-2:] == ("state_decoding", "state_size")


def test_register_attention_layer_takes_layers_only() -> None:
    with pytest.raises(TypeError, match="register_attention_layer takes a subclass of zoo.AttentionLayer"):
        zoo.register_attention_layer("test_not_a_layer")(zoo.DotProductAttention)


def test_gated_deltanets_hybrid_mixes_layers_and_a_softmax_layer_and_decodes_each_with_its_cache() -> None:
    torch.manual_seed(0)
    model = GPT(23, block_size=24, d_model=16, num_heads=2, num_layers=4, position="rope",
                attention=["gated_deltanet", "gated_deltanet", "gated_deltanet", "dot_product"]).double().eval()  # fmt: skip
    prompt = torch.randint(23, (2, 6), generator=torch.Generator().manual_seed(1))
    cached = torch.stack(list(model.generate(prompt, 12, temperature=0)), 1)
    full = torch.stack(list(model.generate(prompt, 12, temperature=0, use_cache=False)), 1)
    assert torch.equal(cached, full)
    with torch.no_grad():
        _, caches = model(prompt, use_cache=True)
    assert [type(c) for c in caches] == [StateCache] * 3 + [KeyValueCache]
    assert [len(c.extra) for c in caches[:3]] == [3, 3, 3]  # the three convolutions' windows
    assert attention_by_layer(model) == [
        "blocks.attention: gated_deltanet, gated_deltanet, gated_deltanet, dot_product"
    ]


def test_a_spec_refuses_what_a_layer_cannot_be_given_in_one_line() -> None:
    def message(error: type[Exception], call) -> str:
        with pytest.raises(error) as info:
            call()
        assert "\n" not in str(info.value)
        return str(info.value)

    assert "embed_dim come from the model" in message(ValueError, lambda: AttentionSpec("gla", {"embed_dim": 8}))
    assert "is a multi-head layer, which a stack builds around a scoring attention" in message(
        zoo.IncompatibleAttentionError, lambda: AttentionSpec("multi_head")
    )
    refused = message(
        zoo.IncompatibleAttentionError, lambda: layer_specs(["gla", "dot_product"], None, 2, role="an encoder")
    )
    assert "encoder" in refused and "attending in both directions" in refused and "dot_product" in refused
    alibi = zoo.create_position("alibi", d_model=8, num_heads=2)
    assert "positions 'mamba2' takes: " in message(
        zoo.IncompatibleAttentionError, lambda: AttentionSpec("mamba2", position=alibi)
    )


def test_a_layers_arguments_reach_it_through_the_spec_and_the_model_fills_the_rest() -> None:
    model = GPT(11, d_model=16, num_heads=2, num_layers=1, bias=False, position="rope",
                attention="mamba2", attention_kwargs={"d_state": 4, "ngroups": 2, "conv_size": 3})  # fmt: skip
    layer = model.blocks[0].attention
    assert (layer.key_head_dim, layer.qk_heads, layer.conv_size, layer.q_proj.bias) == (4, 2, 3, None)
    assert layer.rotary.head_dim == 4  # the stack's rope, resized to Mamba-2's state


def test_format_1_hyperparameters_get_the_layout_they_were_saved_with() -> None:
    old = {"d_model": 16, "num_heads": 2, "attention": ["gla", {"name": "mamba2", "chunk_size": 8}, "local"]}
    migrated = migrate_attention(old, 1)
    assert migrated["attention"] == [
        {"name": "gla", "conv_size": 0, "expand_k": 1.0},
        {"name": "mamba2", "conv_size": 0, "expand": 1.0, "d_state": 8, "ngroups": 2, "chunk_size": 8},
        "local",
    ]
    single = migrate_attention({"attention": "deltanet", "attention_kwargs": {"mode": "chunkwise"}}, 1)
    assert single["attention_kwargs"] == {"conv_size": 0, "mode": "chunkwise"}
    assert migrate_attention(old, 2) is old and old["attention"][0] == "gla"


class _TakesAnything(ForgettingSum):
    """A layer whose constructor takes any keyword (a plain ``**kwargs``)."""

    def __init__(self, embed_dim: int, num_heads: int, **kwargs) -> None:
        super().__init__(embed_dim, num_heads, **kwargs)


def test_a_layer_taking_any_keyword_still_gets_the_stacks_position_and_bias() -> None:
    zoo.register_attention_layer("test_takes_anything")(_TakesAnything)
    try:
        model = GPT(
            11, d_model=16, num_heads=2, num_layers=1, bias=False, position="rope", attention="test_takes_anything"
        )
    finally:
        zoo.ATTENTION_REGISTRY.unregister("test_takes_anything")
    layer = model.blocks[0].attention
    assert layer.rotary is not None and layer.q_proj.bias is None


class _NoCache(zoo.AttentionLayer):
    """A causal layer with no attend_cached: a running mean of its input's projection."""

    supports_bidirectional = False
    supports_padding_mask = False
    supports_weights = False

    def __init__(self, embed_dim: int, num_heads: int) -> None:
        super().__init__()
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.proj = nn.Linear(embed_dim, embed_dim)

    def attend(self, x: Tensor, context: zoo.AttentionContext) -> zoo.AttentionOutput:
        counts = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=x.dtype)[:, None]
        return zoo.AttentionOutput(self.proj(x).cumsum(1) / counts)


def test_a_layer_without_attend_cached_declares_no_decoding_and_decoders_refuse_it() -> None:
    assert not _NoCache.supports_decoding and ForgettingSum.supports_decoding and zoo.SelfAttention.supports_decoding
    zoo.register_attention_layer("test_no_cache")(_NoCache)
    try:
        with pytest.raises(zoo.IncompatibleAttentionError, match="decoding from a cache") as error:
            layer_specs("test_no_cache", None, 2, causal=True, decoding=True, role="a decoder")
        assert "\n" not in str(error.value)
        model = GPT(11, block_size=8, d_model=16, num_heads=2, num_layers=1, attention="test_no_cache").eval()
    finally:
        zoo.ATTENTION_REGISTRY.unregister("test_no_cache")
    prompt = torch.randint(11, (2, 3))
    with pytest.raises(
        zoo.IncompatibleAttentionError, match=r"layer\(s\) \[1\] decodes from no cache.*use_cache=False"
    ):
        next(model.generate(prompt, 2))
    assert torch.cat(list(model.generate(prompt, 2, temperature=0, use_cache=False))).numel() == 4


def test_a_deep_stack_validates_its_attention_choice_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 12-layer GPT checks its spec when it is made (its kind, its arguments, what the stack needs)
    and copies it to each layer unchecked; the registry is scanned only to suggest names in an error."""
    from zoo.attention.build import factory, spec
    from zoo.attention.variants.differential import lambda_init
    from zoo.models import GPT

    calls = {"require_attention": 0, "check_kwargs": 0, "scans": 0}

    def counted(function, key):
        def call(*args, **kwargs):
            calls[key] += 1
            return function(*args, **kwargs)

        return call

    monkeypatch.setattr(spec, "require_attention", counted(spec.require_attention, "require_attention"))
    monkeypatch.setattr(spec, "check_kwargs", counted(spec.check_kwargs, "check_kwargs"))
    monkeypatch.setattr(factory.ATTENTION_REGISTRY, "entries", counted(factory.ATTENTION_REGISTRY.entries, "scans"))
    model = GPT(50, d_model=32, num_heads=2, num_layers=12, attention="differential")
    assert calls == {"require_attention": 2, "check_kwargs": 1, "scans": 0}  # 14, 13 and 14 before
    depths = [block.attention.lambda_init for block in model.blocks]  # each layer still gets its own depth
    assert depths == [pytest.approx(lambda_init(layer)) for layer in range(12)]
