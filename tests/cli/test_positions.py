"""``--model.position NAME`` on the command line: a smoke run of each architecture with a
non-default scheme, and one clear line for a bad name or a scheme the attention cannot take."""

from __future__ import annotations

import pytest

from tests.helpers.cli import QUIET, SMALL, flags, hparams, tiny_fit
from zoo.commands import main

TINY_TRANSFORMER = [*SMALL["transformer"], *flags("model", heatmap_examples=0)]


def _transformer_data(shared_data) -> list[str]:
    return flags("data", path=shared_data / "fra-eng.zip", limit_train=500, vocab_size=300)


def _sentiment_data(shared_data) -> list[str]:
    return flags("data", path=shared_data / "sst2", limit_train=300)


def test_transformer_fits_with_rope(shared_data, in_tmp) -> None:
    main(
        [
            "fit",
            "--model",
            "transformer",
            *_transformer_data(shared_data),
            *TINY_TRANSFORMER,
            "--model.position",
            "rope",
            "--trainer.fast_dev_run",
            "true",
            *QUIET,
        ]
    )


def test_sentiment_records_the_scheme_it_was_built_with(shared_data, in_tmp) -> None:
    run = tiny_fit(
        "sentiment",
        *_sentiment_data(shared_data),
        *flags("model", position="t5", position_kwargs={"num_buckets": 8, "max_distance": 16}, heatmap_examples=0),
        *flags("trainer", max_steps=2, limit_val_batches=1),
    )
    recorded = hparams(run)
    assert recorded["position"] == "t5" and recorded["position_kwargs"] == {"num_buckets": 8, "max_distance": 16}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model.position", "albi"], "Did you mean 'alibi'"),
        (["--model.position", "alibi", "--model.attention", "linear"], "Attention variants that do: "),
    ],
)
def test_bad_positions_are_one_clear_message(shared_data, in_tmp, capsys, extra, message) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model", "sentiment", *_sentiment_data(shared_data), *extra, *QUIET])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_zoo_list_shows_the_positions(capsys) -> None:
    main(["list"])
    out = capsys.readouterr().out
    section = out.split("positions:\n")[1].split("models:")[0]
    assert section.split() == [
        "alibi",
        "learned",
        "(aliases:",
        "learned_absolute)",
        "none",
        "(aliases:",
        "nope)",
        "rope",
        "(aliases:",
        "rotary)",
        "sinusoidal",
        "(aliases:",
        "sinusoid)",
        "t5",
        "(aliases:",
        "t5_bias)",
    ]
