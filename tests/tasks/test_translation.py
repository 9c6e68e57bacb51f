"""Translation on slices of the real fra-eng corpus: models learn, decoding and BLEU are exact."""

from __future__ import annotations

import random

import lightning as L
import pytest
import sacrebleu
import torch

from tests.helpers.cli import QUIET, SMALL, flags, latest_run, trainer_budget
from tests.helpers.training import mean, quiet_trainer, small_translator, train_translator
from zoo.commands import main
from zoo.datamodules import FraEngDataModule
from zoo.tasks.bleu import CorpusBLEU, reference_streams


@pytest.fixture
def fra_eng(shared_data, in_tmp) -> FraEngDataModule:
    return FraEngDataModule(path=str(shared_data / "fra-eng.zip"), batch_size=64, vocab_size=1000, limit_train=4000)


@pytest.mark.parametrize(
    ("kind", "attention"),
    [
        ("transformer", "dot_product"),
        pytest.param("transformer", "additive", marks=pytest.mark.slow),  # seq2seq's is the default run's
        ("seq2seq", "additive"),
        pytest.param("seq2seq", "dot_product", marks=pytest.mark.slow),
    ],
)
def test_short_run_lowers_the_loss(shared_data, in_tmp, kind, attention) -> None:
    """On 256 real pairs, 300 steps take the loss far below the unigram level (about 5.5
    nats here): the model must use the source, not only token frequencies."""
    data = FraEngDataModule(path=str(shared_data / "fra-eng.zip"), batch_size=32, vocab_size=1000, limit_train=256)
    losses = train_translator(kind, data, in_tmp, max_steps=300, attention=attention, label_smoothing=0.0)
    first, last = mean(losses[:8]), mean(losses[-8:])
    assert last < 0.5 * first and last < 4.0


@pytest.mark.parametrize("kind", ["transformer", "seq2seq"])
def test_greedy_equals_beam_size_one(fra_eng, kind) -> None:
    torch.manual_seed(1)
    task = small_translator(kind, fra_eng).eval()
    fra_eng.setup("validate")
    batch = next(iter(fra_eng.val_dataloader()))
    greedy = task.translate_ids(batch["src"], batch["src_lens"], beam_size=1)
    from zoo.models.decoding import DecodeLimits, beam_search

    limits = DecodeLimits(
        fra_eng.bos_idx, fra_eng.eos_idx, task._decode_limit(batch["src_lens"]), forbid=(0, fra_eng.bos_idx)
    )
    beam_one = beam_search(task.model, batch["src"], batch["src_lens"], limits, beam_size=1)
    assert greedy == beam_one
    assert any(len(row) > 0 for row in greedy)


def test_task_bleu_equals_sacrebleu_and_ignores_order(shared_data, in_tmp) -> None:
    data = FraEngDataModule(path=str(shared_data / "fra-eng.zip"), vocab_size=1000, limit_train=2000)
    items = data.splits.validation[:300]
    rng = random.Random(0)
    # Hypotheses of varied quality: a reference, a corrupted reference, or another source's reference.
    hypotheses = []
    for item in items:
        words = rng.choice(item.references).split()
        if rng.random() < 0.5 and len(words) > 2:
            words = words[:-1] + ["chose"]
        hypotheses.append(" ".join(words) if rng.random() < 0.8 else rng.choice(items).references[0])
    references = [item.references for item in items]
    expected = sacrebleu.corpus_bleu(hypotheses, reference_streams(references)).score
    assert 5 < expected < 95

    metric = CorpusBLEU()
    metric.update(hypotheses[:100], references[:100])
    metric.update(hypotheses[100:], references[100:])
    assert float(metric.compute()) == pytest.approx(expected, abs=1e-9)

    order = list(range(len(items)))
    rng.shuffle(order)
    permuted = CorpusBLEU()
    permuted.update([hypotheses[i] for i in order], [references[i] for i in order])
    assert float(permuted.compute()) == pytest.approx(expected, abs=1e-9)
    assert "tok:13a" in metric.signature() and "case:mixed" in metric.signature()


@pytest.mark.parametrize("model", [pytest.param("transformer", marks=pytest.mark.slow), "seq2seq"])
def test_cli_print_config_fit_test_predict(shared_data, in_tmp, capsys, model) -> None:
    data = flags("data", path=shared_data / "fra-eng.zip", limit_train=2000, vocab_size=600)
    with pytest.raises(SystemExit):
        main(["fit", "--model", model, *data, *SMALL[model], "--print_config"])
    config = in_tmp / "config.yaml"
    config.write_text(capsys.readouterr().out)
    main(["fit", "--config", str(config), *trainer_budget(5, 2), *QUIET])
    run = latest_run(model)
    assert (run / "images" / "cross_attention_example0.png").is_file()
    ckpt = str(run / "checkpoints" / "last.ckpt")
    main(["test", "--config", str(config), "--ckpt_path", ckpt, "--trainer.limit_test_batches", "2", *QUIET])
    out = capsys.readouterr().out
    assert "test/bleu" in out and "test/bleu_greedy" in out
    main(
        [
            "predict",
            "--config",
            str(config),
            "--ckpt_path",
            ckpt,
            "--data.predict_texts",
            '["Hello.", "I am cold."]',
            *QUIET,
        ]
    )
    lines = [
        line.split("\t")
        for line in capsys.readouterr().out.splitlines()
        if line.startswith(("Hello.\t", "I am cold.\t"))
    ]
    assert [line[0] for line in lines] == ["Hello.", "I am cold."]


@pytest.mark.parametrize(("texts", "message"), [('["  "]', "empty"), ('["' + "word " * 80 + '"]', "max_length")])
def test_cli_refuses_empty_or_too_long_sentences(shared_data, in_tmp, capsys, texts, message) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "predict",
                "--model",
                "transformer",
                *flags("data", path=shared_data / "fra-eng.zip", limit_train=1000, vocab_size=600),
                *SMALL["transformer"],
                *flags("data", predict_texts=texts),
                *QUIET,
            ]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_training_step_never_waits_for_the_device_and_throughput_is_logged(fra_eng, in_tmp, monkeypatch) -> None:
    """Reading a tensor's value on the host (``int``, ``float``, ``.item()``, ``.tolist()``)
    inside ``training_step`` would stall a GPU every step; ThroughputMonitor measures instead."""
    task = small_translator("transformer", fra_eng)
    monkeypatch.setattr(type(task), "throughput_window", 2)
    step = task.training_step

    def strict_step(batch, batch_idx):
        def refuse(*args, **kwargs):
            raise AssertionError("training_step read a tensor on the host")

        with monkeypatch.context() as patch:
            for name in ("__int__", "__float__", "__bool__", "item", "tolist"):
                patch.setattr(torch.Tensor, name, refuse)
            return step(batch, batch_idx)

    task.training_step = strict_step
    logger = L.pytorch.loggers.CSVLogger(in_tmp, name="run")
    trainer = quiet_trainer(in_tmp, max_steps=4, logger=logger, log_every_n_steps=1, limit_val_batches=0)
    trainer.fit(task, datamodule=fra_eng)
    import csv

    with open(f"{logger.log_dir}/metrics.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    tokens = [float(r["train/device/items_per_sec"]) for r in rows if r.get("train/device/items_per_sec")]
    sentences = [float(r["train/device/samples_per_sec"]) for r in rows if r.get("train/device/samples_per_sec")]
    padding = [float(r["train/padding"]) for r in rows if r.get("train/padding")]
    assert len(tokens) >= 2 and all(t > s > 0 for t, s in zip(tokens, sentences))  # several tokens per sentence
    assert len(padding) == 4 and all(0.0 < p < 1.0 for p in padding)
