"""``zoo.integrations.transformers``: zoo attentions as transformers' ``attn_implementation``.

Every model is built from a tiny config, offline (nothing is downloaded), and compared with the
same weights under transformers' own ``sdpa`` (or ``eager``, for weights).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")

from transformers import AutoModel, AutoModelForCausalLM, BertConfig, LlamaConfig  # noqa: E402
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask  # noqa: E402
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface  # noqa: E402

import zoo  # noqa: E402
import zoo.integrations.transformers as zoo_hf  # noqa: E402
from zoo.errors import ConfigurationError  # noqa: E402
from zoo.integrations import MissingExtraError  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 32
#: what a causal Llama with rotary positions can run, and what it refuses
LLAMA_VARIANTS = [
    "additive",
    "average",
    "dot_product",
    "gaussian_kernel",
    "linear",
    "local",
    "longformer",
    "performer",
    "sigmoid",
    "softpick",
    "sparse",
    "stick_breaking",
]
LLAMA_REFUSED = {
    "bigbird": "causal masking",
    "linformer": "causal masking",
    "sinkhorn": "rotary",
    "reformer": "rotary",
    "synthesizer": "rotary",
}
#: attention layers own their projections: a Hugging Face model's layer owns them there, so these
#: are no attention function of it
ZOO_LAYERS = [
    "retention", "gla", "deltanet", "gated_deltanet", "mamba2",
    "softmax", "qk_norm", "gated_attention", "sink_attention", "streaming", "differential", "forgetting",
]  # fmt: skip


def llama(attention: str, **config: object) -> torch.nn.Module:
    """A tiny Llama (2 layers, hidden 64, 4 query heads sharing 2 key/value heads), seeded, in eval mode."""
    torch.manual_seed(0)
    settings = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    model = AutoModelForCausalLM.from_config(LlamaConfig(**settings | config), attn_implementation=attention)
    return model.eval()


def bert(attention: str, **config: object) -> torch.nn.Module:
    """A tiny BERT encoder (2 layers, hidden 32, 4 heads), seeded, in eval mode."""
    torch.manual_seed(0)
    settings = dict(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    return AutoModel.from_config(BertConfig(**settings | config), attn_implementation=attention).eval()


def tokens(batch: int = 2, length: int = 10, left_padding: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random token ids and their attention mask; the last sequence starts with ``left_padding`` pads."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(1, VOCAB, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    mask[-1, :left_padding] = 0
    return ids.masked_fill(mask == 0, 0), mask


def test_import_zoo_does_not_import_transformers() -> None:
    code = "import sys, zoo; assert 'transformers' not in sys.modules, 'import zoo imported transformers'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_without_transformers_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # what an absent package looks like to import
    monkeypatch.delitem(sys.modules, "zoo.integrations.transformers")
    with pytest.raises(MissingExtraError, match=r"pip install 'attention-zoo\[hf\]'") as error:
        importlib.import_module("zoo.integrations.transformers")
    assert isinstance(error.value, ImportError) and "\n" not in str(error.value)


def test_every_scoring_attention_is_registered_with_its_mask_format_idempotently() -> None:
    scoring = [name for name in zoo.list_attention() if issubclass(zoo.get_attention(name), zoo.Attention)]
    assert zoo_hf.register() == zoo_hf.register() == [f"zoo_{name}" for name in scoring]
    for name in scoring:
        assert ALL_ATTENTION_FUNCTIONS[f"zoo_{name}"] is zoo_hf.attention_function(name)
        assert ALL_MASK_ATTENTION_FUNCTIONS[f"zoo_{name}"] is sdpa_mask
    assert "zoo_multi_head" not in ALL_ATTENTION_FUNCTIONS  # a layer, not a scoring attention


def test_register_takes_a_plugin_and_refuses_layers_and_unknown_names(monkeypatch: pytest.MonkeyPatch) -> None:
    for interface in (AttentionInterface, AttentionMaskInterface):
        monkeypatch.setattr(interface, "_global_mapping", dict(interface._global_mapping))

    @zoo.register_attention("hf_test_cosine")
    class Cosine(zoo.Attention):
        def score(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
            return 8 * torch.nn.functional.normalize(queries, dim=-1) @ torch.nn.functional.normalize(keys, dim=-1).mT

    try:
        assert zoo_hf.register("hf_test_cosine") == ["zoo_hf_test_cosine"]
        ids, mask = tokens(left_padding=3)
        assert torch.isfinite(llama("zoo_hf_test_cosine")(ids, attention_mask=mask).logits).all()
    finally:
        zoo.ATTENTION_REGISTRY.unregister("hf_test_cosine")
    with pytest.raises(zoo.IncompatibleAttentionError, match="attention layer"):
        zoo_hf.register(["multi_head"])
    with pytest.raises(zoo.UnknownNameError, match="dot_product"):
        zoo_hf.register(["dot_prodcut"])


@pytest.mark.parametrize("left_padding", [0, 4])
def test_dot_product_gives_sdpa_logits_on_llama(left_padding: int) -> None:
    """Causal, 4 query heads over 2 key/value heads, with and without left padding in the batch."""
    model = llama("sdpa")
    ids, mask = tokens(left_padding=left_padding)
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
        model.set_attn_implementation("zoo_dot_product")
        actual = model(ids, attention_mask=mask).logits
    assert model.model.layers[0].self_attn.zoo_attention["dot_product"].supports_grouped_kv
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)


def test_a_mask_that_is_not_causal_padding_reaches_the_variant_as_it_is() -> None:
    """Two sequences packed in one row (positions restart, no padding mask): a block-diagonal causal mask."""
    model = llama("sdpa")
    ids, _ = tokens(batch=1)
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4, 5]])
    with torch.no_grad():
        expected = model(ids, position_ids=positions).logits
        model.set_attn_implementation("zoo_dot_product")
        actual = model(ids, position_ids=positions).logits
        unpacked = model(ids).logits
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)
    assert not torch.allclose(actual[0, 4:], unpacked[0, 4:], atol=1e-3)


def test_dot_product_gives_sdpa_outputs_on_bert_with_padding() -> None:
    model = bert("sdpa")
    ids, mask = tokens(length=9, left_padding=0)
    mask[-1, 6:] = 0  # right padding, as BERT's tokenizers pad
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).last_hidden_state
        model.set_attn_implementation("zoo_dot_product")
        actual = model(ids, attention_mask=mask).last_hidden_state
        unmasked = model(ids).last_hidden_state
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)
    assert not torch.allclose(unmasked[-1, :6], actual[-1, :6], atol=1e-3)  # the padding mask reached the variant


def test_the_modules_scaling_reaches_the_variant() -> None:
    model = llama("sdpa")
    for layer in model.model.layers:
        layer.self_attn.scaling = 0.3
    ids, mask = tokens(left_padding=2)
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
        model.set_attn_implementation("zoo_dot_product")
        actual = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=0)


def test_weights_match_eager_when_the_model_asks_for_them() -> None:
    model = llama("eager")
    ids, mask = tokens(left_padding=3)
    with torch.no_grad():
        expected = model(ids, attention_mask=mask, output_attentions=True).attentions
        model.set_attn_implementation("zoo_dot_product")
        actual = model(ids, attention_mask=mask, output_attentions=True).attentions
    valid = mask.bool()[:, None, :, None]  # eager gives the padded queries' rows uniform weights, the zoo zeros
    for got, want in zip(actual, expected, strict=True):
        torch.testing.assert_close(got * valid, want * valid, atol=1e-5, rtol=0)


@pytest.mark.parametrize(("attention", "kwargs"), [("dot_product", {}), ("local", {"window": 3})])
def test_cached_greedy_generation_equals_the_argmax_of_the_uncached_forward(attention: str, kwargs: dict) -> None:
    """With the dynamic cache (one query per step, left padding) and a static one (empty key slots)."""
    model = zoo_hf.attach(llama(f"zoo_{attention}"), **kwargs)
    ids, mask = tokens(length=6, left_padding=2)
    generated = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    static = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, cache_implementation="static")
    with torch.no_grad():
        logits = model(generated, attention_mask=torch.cat([mask, torch.ones_like(generated[:, 6:])], 1)).logits
    assert torch.equal(logits[:, 5:-1].argmax(-1), generated[:, 6:])
    assert torch.equal(static, generated)


@pytest.mark.parametrize(("attention", "kwargs"), [("local", {"window": 4, "relative_bias": True}), ("performer", {})])
def test_a_llama_trains_on_a_repeated_pattern_and_generates(attention: str, kwargs: dict) -> None:
    model = zoo_hf.attach(llama(f"zoo_{attention}"), **kwargs).train()
    variants = [layer.self_attn.zoo_attention[attention] for layer in model.model.layers]
    variant_parameters = {id(p) for variant in variants for p in variant.parameters()}
    assert variant_parameters <= {id(p) for p in model.parameters()}  # attached before the optimizer sees them
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    pattern = torch.tensor([[5, 6, 7, 8, 9] * 4])
    losses = []
    for _ in range(12):
        loss = model(pattern, labels=pattern).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for variant in variants for p in variant.parameters())
    generated = model.eval().generate(pattern[:, :7], max_new_tokens=5, do_sample=False)
    assert generated.shape == (1, 12)


def test_a_variant_with_parameters_must_be_attached_before_training() -> None:
    model = llama("zoo_additive")
    ids, mask = tokens()
    with pytest.raises(ConfigurationError, match=r"attach\(model\)"):
        model(ids, attention_mask=mask)
    zoo_hf.attach(model)
    assert any("zoo_attention.additive" in name for name, _ in model.named_parameters())
    assert torch.isfinite(model(ids, attention_mask=mask).logits).all()


def test_dropout_is_the_models_and_follows_its_training_flag() -> None:
    model = llama("zoo_dot_product", attention_dropout=0.5).train()
    ids, _ = tokens()
    first, second = model(ids).logits, model(ids).logits
    assert model.model.layers[0].self_attn.zoo_attention["dot_product"].dropout.p == 0.5
    assert not torch.allclose(first, second)
    model.eval()
    torch.testing.assert_close(model(ids).logits, model(ids).logits, atol=0, rtol=0)


@pytest.mark.parametrize("attention", LLAMA_VARIANTS)
def test_llama_runs_every_causal_rotary_variant(attention: str) -> None:
    model = zoo_hf.attach(llama(f"zoo_{attention}"))
    ids, mask = tokens(left_padding=3)
    assert torch.isfinite(model(ids, attention_mask=mask).logits).all()


@pytest.mark.parametrize(("attention", "missing"), LLAMA_REFUSED.items())
def test_llama_refuses_a_variant_that_cannot_serve_it_with_the_zoos_message(attention: str, missing: str) -> None:
    model = llama(f"zoo_{attention}")
    ids, _ = tokens()
    for build in (lambda: zoo_hf.attach(model), lambda: model(ids)):  # when attached, or at the first call
        with pytest.raises(zoo.IncompatibleAttentionError, match=missing) as error:
            build()
        message = str(error.value)
        assert f"'zoo_{attention}'" in message and "\n" not in message
        assert "Compatible attn_implementation names: " + ", ".join(f"zoo_{n}" for n in LLAMA_VARIANTS) in message


@pytest.mark.parametrize("layer", ZOO_LAYERS)
def test_attention_layers_are_no_attention_function(layer: str) -> None:
    assert layer not in zoo_hf.scoring_attention_names()
    with pytest.raises(zoo.IncompatibleAttentionError, match="it is an attention layer") as error:
        zoo_hf.register(layer)
    assert "\n" not in str(error.value)


def test_bert_runs_a_variant_llama_refuses() -> None:
    """Bidirectional and without rotary positions, BERT takes ``bigbird`` and ``synthesizer``."""
    ids, mask = tokens(length=24)
    mask[-1, 17:] = 0
    for attention, kwargs in (("bigbird", {"block_size": 2}), ("synthesizer", {"max_len": 32})):
        model = zoo_hf.attach(bert(f"zoo_{attention}"), **kwargs)
        assert torch.isfinite(model(ids, attention_mask=mask).last_hidden_state).all()


def test_a_float_mask_is_refused_in_one_line() -> None:
    model = llama("zoo_dot_product")
    ids, _ = tokens()
    additive = torch.zeros(2, 1, 10, 10)
    with pytest.raises(zoo.IncompatibleAttentionError, match="boolean masks"):
        model(ids, attention_mask=additive)


def test_attach_refuses_a_model_without_zoo_attention() -> None:
    with pytest.raises(ConfigurationError, match="attn_implementation='zoo_<name>'"):
        zoo_hf.attach(llama("sdpa"))
