"""``--model.position NAME`` on the command line: a smoke run of each architecture with a
non-default scheme, and one clear line for a bad name or a scheme the attention cannot take."""

from __future__ import annotations

import pytest
import yaml

from zoo.cli import main

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
TINY_TRANSFORMER = [
    "--model.d_model",
    "32",
    "--model.num_heads",
    "2",
    "--model.num_encoder_layers",
    "1",
    "--model.num_decoder_layers",
    "1",
    "--model.ffn_hidden",
    "64",
    "--model.heatmap_examples",
    "0",
]


def _transformer_data(shared_data) -> list[str]:
    return ["--data.path", str(shared_data / "fra-eng.zip"), "--data.limit_train", "500", "--data.vocab_size", "300"]


def _sentiment_data(shared_data) -> list[str]:
    return ["--data.path", str(shared_data / "sst2"), "--data.limit_train", "300"]


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
    main(
        [
            "fit",
            "--model",
            "sentiment",
            *_sentiment_data(shared_data),
            "--model.d_model",
            "32",
            "--model.position",
            "t5",
            "--model.position_kwargs",
            '{"num_buckets": 8, "max_distance": 16}',
            "--trainer.max_steps",
            "2",
            "--trainer.limit_val_batches",
            "1",
            "--model.heatmap_examples",
            "0",
            *QUIET,
        ]
    )
    run = max((in_tmp / "runs" / "sentiment").glob("version_*"))
    hparams = yaml.safe_load((run / "hparams.yaml").read_text())
    assert hparams["position"] == "t5" and hparams["position_kwargs"] == {"num_buckets": 8, "max_distance": 16}


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
