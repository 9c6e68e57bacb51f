"""The recurrent families as a ``gpt``'s layers, every one of them in one stack and in Gated
DeltaNet's hybrid (three recurrent layers to one softmax layer), end to end from the command line:
a fit whose loss falls, a fit interrupted (SIGTERM) and resumed with ``--ckpt_path last`` on the
same losses as one straight run, ``zoo generate`` from the checkpoint, and ``zoo export`` to a
folder that generates the same text."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import QUIET, flags, latest_run
from tests.helpers.steplog import read_losses
from zoo.commands import main

ATTENTION = {
    "every_family": "[retention, gla, deltanet, gated_deltanet, mamba2, dot_product]",
    "gated_deltanet_hybrid": "[gated_deltanet, gated_deltanet, gated_deltanet, dot_product]",
}
TEXT = "a small state remembers the gist; a window remembers the words.\n" * 60


def _fit(corpus: Path, attention: str, log: Path, steps: int, *extra: str) -> list[str]:
    return [
        "fit", "--model", "gpt", "--data", "zoo.datamodules.text.TextDataModule",
        *flags("data", path=corpus, block_size=16, batch_size=4),
        *flags("model", d_model=16, num_heads=2, num_layers=attention.count(",") + 1, lr=1e-2, warmup_steps=2),
        "--model.attention", attention, "--trainer.max_steps", str(steps), "--trainer.limit_val_batches", "2",
        "--trainer.callbacks+=tests.helpers.steplog.StepLosses", "--trainer.callbacks.path", str(log), *QUIET, *extra,
    ]  # fmt: skip


@pytest.mark.parametrize("case", sorted(ATTENTION))
def test_a_recurrent_gpt_trains_resumes_generates_and_exports(case: str, in_tmp: Path, capsys) -> None:
    corpus = in_tmp / "corpus.txt"
    corpus.write_text(TEXT)
    attention = ATTENTION[case]
    main(_fit(corpus, attention, in_tmp / "straight.jsonl", 12, "--trainer.logger.name", "straight"))
    straight = read_losses(in_tmp / "straight.jsonl")
    assert straight[12] < straight[1] - 0.15, straight  # the loss falls on a repeated sentence

    interrupt = ["--trainer.callbacks.signal_after_step", "6"]
    with pytest.raises(SystemExit):  # SIGTERM after step 6: last.ckpt is saved, the fit stops
        main(_fit(corpus, attention, in_tmp / "first.jsonl", 12, *interrupt))
    main(_fit(corpus, attention, in_tmp / "resumed.jsonl", 12, "--ckpt_path", "last"))
    resumed = read_losses(in_tmp / "first.jsonl") | read_losses(in_tmp / "resumed.jsonl")
    assert sorted(resumed) == list(range(1, 13))
    for step in resumed:
        assert resumed[step] == pytest.approx(straight[step], rel=1e-5), f"step {step}"

    run = latest_run("gpt", in_tmp)
    capsys.readouterr()
    generate = ["--prompt", "a small", "--max_new_tokens", "24", "--temperature", "0"]
    main(["generate", "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), *generate])
    from_checkpoint = capsys.readouterr().out
    assert from_checkpoint.startswith("a small") and len(from_checkpoint) >= len("a small") + 24
    main(["export", "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), "--out", str(in_tmp / "exported")])
    capsys.readouterr()
    main(["generate", "--pretrained", str(in_tmp / "exported"), *generate])
    assert capsys.readouterr().out == from_checkpoint
