"""``synthesizer``, ``sinkhorn`` and ``reformer`` train in ``sentiment`` from the CLI on the real SST-2 data, and
draw their attention heatmaps; a decoder refuses ``sinkhorn``, which is not causal."""

from __future__ import annotations

import pytest

from tests.helpers.cli import flags, hparams, tiny_fit, trainer_budget
from zoo.attention import IncompatibleAttentionError
from zoo.models import Transformer

VARIANTS = {
    "synthesizer": {"max_len": 256},
    "synthesizer-dense": {"max_len": 256, "mode": "dense"},
    "sinkhorn": {"block_size": 4, "sinkhorn_iters": 4},
    "reformer": {"bucket_size": 4},
}


@pytest.mark.parametrize("case", list(VARIANTS))
def test_sentiment_fits_from_the_cli(shared_data, in_tmp, case: str) -> None:
    attention = case.split("-")[0]
    run = tiny_fit(
        "sentiment",
        *flags("data", path=shared_data / "sst2", limit_train=300),
        *flags("model", attention=attention, attention_kwargs=VARIANTS[case]),
        *trainer_budget(3, 1),
    )
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "images" / "attention_example0.png").is_file()
    assert hparams(run)["attention"] == attention and hparams(run)["attention_kwargs"] == VARIANTS[case]


def test_transformer_refuses_sinkhorn_with_the_compatible_names() -> None:
    with pytest.raises(
        IncompatibleAttentionError,
        match=r"'sinkhorn' cannot be used by the Transformer's decoder .* causal masking\. Compatible .*synthesizer",
    ):
        Transformer(vocab_size=50, d_model=16, num_heads=2, attention="sinkhorn")
