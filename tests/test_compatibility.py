"""Checkpoints and state-dict keys written before the attention spec still load and predict the same."""

from __future__ import annotations

import json

import pytest

import zoo
from tests.helpers import PROJECT_ROOT
from zoo.models import SequenceClassifier, Transformer

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
