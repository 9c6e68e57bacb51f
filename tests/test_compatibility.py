"""Checkpoints and state-dict keys written by older zoos still load and predict the same."""

from __future__ import annotations

import json

import pytest
import torch

import zoo
from tests.helpers import PROJECT_ROOT
from zoo.models import SequenceAutoEncoder, SequenceClassifier, Transformer

FIXTURES = PROJECT_ROOT / "tests" / "fixtures"


def test_a_sentiment_checkpoint_of_the_older_main_predicts_the_same() -> None:
    model = zoo.load_checkpoint(FIXTURES / "sentiment_8ffd6c0.ckpt")
    expected = json.loads((FIXTURES / "sentiment_8ffd6c0.json").read_text())
    predicted = model.predict([row["text"] for row in expected])
    assert [row["label"] for row in predicted] == [row["label"] for row in expected]
    assert [row["probability"] for row in predicted] == pytest.approx(
        [row["probability"] for row in expected], abs=1e-6
    )


KEYS = json.loads((FIXTURES / "state_dict_keys_8ffd6c0.json").read_text())


@pytest.mark.parametrize("case", sorted(KEYS))
def test_state_dict_keys_are_those_the_older_main_wrote(case: str) -> None:
    architecture, attention, position = case.split("/")
    if architecture == "classifier":
        extra = {
            "local": {"attention_kwargs": {"relative_bias": True}},
            "synthesizer": {"attention_kwargs": {"max_len": 16}},
        }
        model = SequenceClassifier(
            vocab_size=20, d_model=16, num_heads=2, num_layers=2, ffn_hidden=8, attention=attention,
            position=position, max_len=16, **extra.get(attention, {}),
        )  # fmt: skip
    else:
        model = Transformer(
            vocab_size=20, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=2, ffn_hidden=8,
            attention=attention, position=position, num_kv_heads=1,
        )  # fmt: skip
    assert list(model.state_dict()) == KEYS[case]


RECURRENT = "gpt_recurrent_91a790e"


def _continuation(model: zoo.tasks.LanguageModel, prompt: str) -> tuple[list[int], torch.Tensor]:
    tokens = torch.tensor([model.codec.encode(prompt)])
    with torch.no_grad():
        logits, _ = model.model(tokens)
        drawn = torch.stack(list(model.model.generate(tokens, 40, temperature=0)), 1)
    return drawn[0].tolist(), logits[0, -1]


@pytest.mark.parametrize("source", ["checkpoint", "folder"])
def test_recurrent_layers_saved_before_they_were_layers_generate_the_same(source: str, tmp_path) -> None:
    """Format 1: the five recurrent families as per-head scoring attentions, without convolutions.
    They rebuild in their old layout, generate the same text and give the same logits; exported
    again, the folder is of today's format and rebuilds the same model."""
    expected = json.loads((FIXTURES / f"{RECURRENT}.json").read_text())
    if source == "checkpoint":
        model = zoo.load_checkpoint(FIXTURES / f"{RECURRENT}.ckpt")
    else:
        model = zoo.from_pretrained(FIXTURES / RECURRENT)
    tokens, logits = _continuation(model, expected["prompt"])
    assert tokens == expected["greedy_40"]
    torch.testing.assert_close(logits, torch.tensor(expected["last_logits"]), atol=1e-5, rtol=0)
    assert [block.attention.conv_size for block in model.model.blocks[:5]] == [0] * 5
    model.save_pretrained(tmp_path / "again")
    saved = json.loads((tmp_path / "again" / "config.json").read_text())
    assert saved["zoo"]["format"] == 2 and saved["attention"][0] == {"name": "gla", "conv_size": 0, "expand_k": 1.0}
    assert _continuation(zoo.from_pretrained(tmp_path / "again"), expected["prompt"])[0] == tokens


def test_a_recall_checkpoint_written_before_backbones_loads_as_the_language_model_it_was() -> None:
    """e8c866a's recall checkpoint (no ``backbone`` hyperparameter; a Mamba-2 layer, now run by the
    shared-key path with 64-step chunks, and a softmax layer) gives the logits that commit gave."""
    model = zoo.load_checkpoint(FIXTURES / "recall_e8c866a.ckpt").eval()
    expected = json.loads((FIXTURES / "recall_e8c866a.json").read_text())
    assert model.hparams.backbone == "language_model" and not isinstance(model.model, SequenceAutoEncoder)
    with torch.no_grad():
        logits = model(torch.tensor(expected["tokens"]))[:, -8:]
    torch.testing.assert_close(logits, torch.tensor(expected["logits_last_8"]), atol=1e-5, rtol=1e-5)


def test_a_kda_checkpoint_written_before_the_bounded_gate_gives_the_same_logits() -> None:
    """a8a4a4b's recall checkpoint (``[kda, dot_product]``, no ``decay_lower_bound``) rebuilds with
    the report's unbounded gate and gives the logits that commit gave."""
    model = zoo.load_checkpoint(FIXTURES / "recall_kda_a8a4a4b.ckpt").eval()
    expected = json.loads((FIXTURES / "recall_kda_a8a4a4b.json").read_text())
    assert model.model.blocks[0].attention.decay.lower_bound is None
    with torch.no_grad():
        logits = model(torch.tensor(expected["tokens"]))[:, -8:]
    torch.testing.assert_close(logits, torch.tensor(expected["logits_last_8"]), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scheme", ["t5", "alibi"])
def test_a_relative_bias_checkpoint_written_before_the_distance_grid_gives_the_same_logits(scheme: str) -> None:
    """8359a34's recall checkpoints (two softmax layers under T5's bucketed bias or ALiBi), written
    before a relative bias was evaluated once per distance and laid out as a Toeplitz grid, give
    that commit's logits, in one forward and decoded token by token from a cache (the grid's
    decoding shape: one query against every key so far)."""
    model = zoo.load_checkpoint(FIXTURES / f"recall_{scheme}_8359a34.ckpt").eval()
    expected = json.loads((FIXTURES / f"recall_{scheme}_8359a34.json").read_text())
    tokens, wanted = torch.tensor(expected["tokens"]), torch.tensor(expected["logits_last_8"])
    with torch.no_grad():
        full = model(tokens)[:, -8:]
        _, caches = model.model(tokens[:, :-8], use_cache=True)
        steps = []
        for position in range(tokens.shape[1] - 8, tokens.shape[1]):
            logits, caches = model.model(tokens[:, position : position + 1], caches, use_cache=True)
            steps.append(logits[:, 0])
    torch.testing.assert_close(full, wanted, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.stack(steps, 1), wanted, atol=1e-5, rtol=1e-5)
