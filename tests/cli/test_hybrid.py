"""Hybrid stacks on the command line: ``--model.attention`` as a list trains, prints which
attention each layer holds, round-trips through ``--print_config``, resumes, tests, rebuilds from
its checkpoint, and a wrong entry is one line naming the layer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from tests.helpers.cli import QUIET, SMALL, flags, hparams, latest_run, tiny_fit
from zoo.commands import main

HYBRID = "[local, {name: dot_product, scale: 0.5}]"
SENTIMENT = [*flags("model", num_layers=4, heatmap_examples=0), "--model.attention", HYBRID]


def _sentiment_data(shared_data: Path) -> list[str]:
    return flags("data", path=shared_data / "sst2", limit_train=192)  # three whole batches: the fit ends an epoch


def _layers(task: zoo.AttentionLayer) -> list[tuple[str, dict]]:
    return [(block.attention.spec.name, dict(block.attention.spec.kwargs)) for block in task.model.blocks]


def test_a_hybrid_sentiment_stack_trains_resumes_tests_and_rebuilds(shared_data, in_tmp, capsys) -> None:
    data = _sentiment_data(shared_data)
    budget = flags("trainer", max_steps=3, limit_val_batches=1, enable_progress_bar=False)
    main(["fit", "--model", "sentiment", *SMALL["sentiment"], *data, *SENTIMENT, *budget])  # the model summary on
    run = latest_run("sentiment")
    out = capsys.readouterr().out
    layers = "local, dot_product(scale=0.5), local, dot_product(scale=0.5)"
    assert f"attention by layer:\n  blocks.attention: {layers}\n" in out
    assert hparams(run)["attention"] == ["local", {"name": "dot_product", "scale": 0.5}]
    model = zoo.load_checkpoint(run / "checkpoints" / "last.ckpt")
    assert _layers(model) == [("local", {}), ("dot_product", {"scale": 0.5})] * 2
    # resume the run for two more steps, then test its checkpoint
    main(["fit", "--model", "sentiment", *SMALL["sentiment"], *data, *SENTIMENT, *QUIET,
          *flags("trainer", max_steps=5, limit_val_batches=1), "--ckpt_path", "last"])  # fmt: skip
    resumed = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert resumed["global_step"] == 5 and resumed["hyper_parameters"]["attention"][1]["scale"] == 0.5
    main(["test", "--config", str(run / "config.yaml"), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"),
          *flags("trainer", limit_test_batches=1), *QUIET])  # fmt: skip
    assert "test/acc" in capsys.readouterr().out


def test_print_config_round_trips_a_hybrid_stack(shared_data, in_tmp, capsys) -> None:
    args = ["fit", "--model", "sentiment", *SMALL["sentiment"], *_sentiment_data(shared_data), *SENTIMENT]
    with pytest.raises(SystemExit):
        main([*args, "--print_config"])
    Path("printed.yaml").write_text(capsys.readouterr().out)
    with pytest.raises(SystemExit):
        main(["fit", "--config", "printed.yaml", "--print_config"])
    again = capsys.readouterr().out
    assert again == Path("printed.yaml").read_text()
    assert "attention:\n    - local\n    - name: dot_product\n      scale: 0.5\n" in again


def test_a_hybrid_transformer_trains_with_its_own_cross_attention(shared_data, in_tmp) -> None:
    run = tiny_fit(
        "transformer",
        *flags("data", path=shared_data / "fra-eng.zip", limit_train=300, vocab_size=300),
        *flags("model", num_encoder_layers=2, num_decoder_layers=2, heatmap_examples=0),
        "--model.attention",
        "[local, linear]",
        *flags("trainer", max_steps=2, limit_val_batches=1),
    )
    model = zoo.load_checkpoint(run / "checkpoints" / "last.ckpt").model
    assert [b.attention.attention_name for b in model.encoder_blocks] == ["local", "linear"]
    assert [b.self_attention.attention_name for b in model.decoder_blocks] == ["local", "linear"]
    # local works within one sequence only, so its layer's cross-attention is dot_product; linear's is linear
    assert [b.cross_attention.attention_name for b in model.decoder_blocks] == ["dot_product", "linear"]


@pytest.mark.parametrize(
    ("attention", "message"),
    [
        ("[local, linformr]", "layers 2, 4: Unknown attention 'linformr'. Did you mean 'linformer'"),
        (
            "[local, {name: linear, window: 3}]",
            "layers 2, 4: attention 'linear' got unexpected keyword argument(s) 'window'",
        ),
        ("[local, dot_product, linear]", "a list of 3 attention entries neither gives one per layer"),
        (
            "[local, multi_head]",
            "layers 2, 4: Attention 'multi_head' cannot be used by a stack's attention: it is a multi-head layer",
        ),
    ],
)
def test_a_wrong_entry_is_one_line_naming_the_layer(shared_data, in_tmp, capsys, attention, message) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--model", "sentiment", *_sentiment_data(shared_data), *flags("model", num_layers=4),
              "--model.attention", attention, *QUIET])  # fmt: skip
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and "Traceback" not in err and len(err.splitlines()) == 2
