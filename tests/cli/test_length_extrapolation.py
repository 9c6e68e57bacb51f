"""Length extrapolation from the command line: train on short pairs, score on longer sources,
and a scheme that cannot extrapolate (``learned``) refused in one line."""

from __future__ import annotations

import pytest

from zoo.commands import main

QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
TINY = [
    "--model", "transformer", "--model.d_model", "32", "--model.num_heads", "2", "--model.num_encoder_layers", "1",
    "--model.num_decoder_layers", "1", "--model.ffn_hidden", "64", "--model.heatmap_examples", "0",
    "--data.limit_train", "500", "--data.vocab_size", "300",
]  # fmt: skip


def test_train_short_then_test_on_longer_sources(shared_data, in_tmp, capsys) -> None:
    data = ["--data.path", str(shared_data / "fra-eng.zip"), "--data.max_train_length", "8"]
    main(["fit", *TINY, *data, "--model.position", "alibi", "--trainer.max_steps", "2",
          "--trainer.limit_val_batches", "0", "--trainer.num_sanity_val_steps", "0", *QUIET])  # fmt: skip
    ckpt = next((in_tmp / "runs").rglob("last.ckpt"))
    main(["test", *TINY, *data, "--model.position", "alibi", "--ckpt_path", str(ckpt),
          "--data.eval_sources_longer_than", "8", "--data.batch_size", "8", "--trainer.limit_test_batches", "2",
          "--model.beam_size", "1", *QUIET])  # fmt: skip
    assert "test/bleu_greedy" in capsys.readouterr().out


def test_learned_positions_refuse_to_extrapolate(shared_data, in_tmp, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *TINY, "--data.path", str(shared_data / "fra-eng.zip"), "--data.max_train_length", "8",
              "--model.position", "learned", "--trainer.fast_dev_run", "true", *QUIET])  # fmt: skip
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Position 'learned' cannot extrapolate" in err and "max_train_length=8" in err and "Traceback" not in err
