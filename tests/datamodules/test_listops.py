"""ListOps: generated values checked by an independent evaluator, lengths, the benchmark's TSV
format and tokenization, atomic writes, and a CLI fit on a tiny generated set."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader

from tests.helpers import PROJECT_ROOT
from zoo.datamodules import ListOpsDataModule
from zoo.datamodules.listops import VOCABULARY, encode, generate
from zoo.datamodules.listops.datamodule import SPLIT_FILES, read_tsv, write_tsv
from zoo.errors import DataError
from zoo.tasks import Classifier

SMALL = {"min_length": 10, "max_length": 80}


def stack_value(text: str, widths: list[int] | None = None) -> int:
    """Evaluate ``[MAX 2 [MIN 3 4 ] 9 ]`` with an explicit stack (independent of the generator's
    recursion); ``widths`` collects each operation's number of arguments."""
    stack: list[list] = [[]]
    for token in text.split():
        if token.startswith("["):
            stack.append([token])
        elif token == "]":
            operator, *values = stack.pop()
            if widths is not None:
                widths.append(len(values))
            ordered = sorted(values)
            middle = len(ordered) // 2
            median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) // 2
            stack[-1].append(
                {"[MIN": ordered[0], "[MAX": ordered[-1], "[MED": median, "[SM": sum(values) % 10}[operator]
            )
        else:
            stack[-1].append(int(token))
    (value,) = stack.pop()
    return value


def test_values_lengths_and_shape_of_generated_expressions() -> None:
    examples = generate(300, random.Random(3), max_depth=10, max_args=10, **SMALL)
    assert len({text for text, _ in examples}) == 300
    operators, widths = set(), []
    for text, value in examples:
        assert stack_value(text, widths) == value
        tokens = text.split()
        assert 10 < len(tokens) < 80 and tokens[0].startswith("[") and tokens[-1] == "]"
        operators |= {t for t in tokens if t.startswith("[")}
        depth = max_depth = 0
        for token in tokens:
            depth += token.startswith("[") - (token == "]")
            max_depth = max(max_depth, depth)
        assert max_depth <= 9  # operations sit above depth 10, where only digits are drawn
    assert operators == {"[MIN", "[MAX", "[MED", "[SM"}
    assert min(widths) == 2 and max(widths) == 10
    assert len({value for _, value in examples}) == 10


def test_same_seed_same_data_and_hand_written_cases() -> None:
    assert generate(20, random.Random(7), **SMALL) == generate(20, random.Random(7), **SMALL)
    assert stack_value("[MED 2 5 ]") == 3 and stack_value("[SM 9 8 [MAX 1 7 ] ]") == 4


def test_tokenization_is_the_benchmarks() -> None:
    ids = encode("[MAX 2 9 ]")
    assert [VOCABULARY[i] for i in ids] == ["[MAX", "2", "9", "]"]
    assert encode("( ( ( [MAX 2 ) 9 ) ] )").tolist() == ids.tolist()  # the released files' parentheses
    assert len(VOCABULARY) == 16 and VOCABULARY[0] == "<pad>"
    with pytest.raises(DataError, match=r"unknown tokens \['\[FIRST'\]"):
        encode("[FIRST 1 2 ]")


def test_tsv_round_trip_in_the_benchmarks_format(tmp_path: Path) -> None:
    examples = generate(25, random.Random(0), **SMALL)
    write_tsv(tmp_path / "basic_val.tsv", examples)
    lines = (tmp_path / "basic_val.tsv").read_text().splitlines()
    assert lines[0] == "Source\tTarget" and lines[1] == f"{examples[0][0]}\t{examples[0][1]}"
    assert read_tsv(tmp_path / "basic_val.tsv") == examples


def test_an_interrupted_write_leaves_the_old_file_and_no_partial_one(tmp_path: Path) -> None:
    target = tmp_path / "basic_train.tsv"
    write_tsv(target, [("[MIN 1 2 ]", 1)])

    def failing():
        yield ("[MAX 1 2 ]", 2)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_tsv(target, failing())
    assert read_tsv(target) == [("[MIN 1 2 ]", 1)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["basic_train.tsv"]


def test_data_module_generates_once_and_refuses_other_settings(tmp_path: Path) -> None:
    module = ListOpsDataModule(path=str(tmp_path), num_train=40, num_val=10, num_test=10, batch_size=8, **SMALL)
    module.prepare_data()
    module.setup("fit")
    rows = {split: read_tsv(tmp_path / file) for split, file in SPLIT_FILES.items()}
    assert [len(rows[s]) for s in ("train", "validation", "test")] == [40, 10, 10]
    texts = [text for split in rows.values() for text, _ in split]
    assert len(set(texts)) == 60  # no example in two splits
    batch = next(iter(module.train_dataloader()))
    assert batch["tokens"].shape[0] == 8 and batch["labels"].max() < 10
    assert set(batch["valid_lens"].tolist()) <= set(range(11, 80))
    before = (tmp_path / "basic_train.tsv").stat().st_mtime_ns
    ListOpsDataModule(path=str(tmp_path), num_train=40, num_val=10, num_test=10, **SMALL).prepare_data()
    assert (tmp_path / "basic_train.tsv").stat().st_mtime_ns == before
    with pytest.raises(DataError, match="generated with other settings"):
        ListOpsDataModule(path=str(tmp_path), num_train=41, num_val=10, num_test=10, **SMALL).prepare_data()
    with pytest.raises(DataError, match="max_length"):
        ListOpsDataModule(min_length=500, max_length=502)


def test_cli_fits_the_classifier_on_tiny_listops_with_its_configs(tmp_path: Path) -> None:
    data = tmp_path / "listops"
    command = [
        sys.executable,
        "-m",
        "zoo",
        "fit",
        "--model",
        "classifier",
        "--config",
        "configs/classifier_listops.yaml",
        "--config",
        "configs/classifier_listops_cpu.yaml",
        f"--data.path={data}",
        "--data.num_train=64",
        "--data.num_val=16",
        "--data.num_test=16",
        "--data.min_length=10",
        "--data.max_length=60",
        "--model.d_model=16",
        "--model.num_heads=2",
        "--model.num_layers=1",
        "--model.ffn_hidden=32",
        "--trainer.fast_dev_run=true",
        f"--trainer.default_root_dir={tmp_path}",
        f"--trainer.logger.init_args.save_dir={tmp_path / 'runs'}",
    ]
    env = os.environ | {"PYTHONPATH": str(PROJECT_ROOT)}
    result = subprocess.run(command, capture_output=True, text=True, cwd=PROJECT_ROOT, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "fast_dev_run" in result.stderr + result.stdout
    assert len(read_tsv(data / "basic_train.tsv")) == 64


def test_limit_train_predict_inputs_and_the_length_limit(tmp_path: Path) -> None:
    module = ListOpsDataModule(
        path=str(tmp_path),
        num_train=40,
        num_val=10,
        num_test=10,
        limit_train=12,
        predict_texts=["[MAX 2 9 ]", "( [SM 5 ) 7 ]"],
        **SMALL,
    )
    module.prepare_data()
    module.setup("fit")
    assert len(module._datasets["train"]) == 12
    batch = next(iter(module.predict_dataloader()))
    assert batch["texts"] == ["[MAX 2 9 ]", "( [SM 5 ) 7 ]"] and batch["valid_lens"].tolist() == [4, 4]
    assert module.codec.decode(batch["tokens"][1]) == "[SM 5 7 ]"
    task = Classifier(
        vocab_size=module.vocab_size, num_classes=module.num_classes, d_model=8, num_heads=2, num_layers=1, ffn_hidden=8
    )
    task._trainer = SimpleNamespace(datamodule=module)
    task.setup("fit")
    assert task.codec is module.codec  # the task adopts the ListOps codec, so heatmaps show its tokens
    with pytest.raises(DataError, match=r"expression of \d+ tokens, not below max_length=20"):
        ListOpsDataModule(
            path=str(tmp_path), predict_texts=["[SM " + "1 " * 30 + "]"], min_length=10, max_length=20
        ).predict_dataloader()


def test_evaluation_batches_expressions_of_similar_length(tmp_path: Path) -> None:
    module = ListOpsDataModule(path=str(tmp_path), num_train=8, num_val=48, num_test=8, batch_size=8, **SMALL)
    module.prepare_data()
    module.setup("validate")
    loader = module.val_dataloader()
    batches = list(loader)
    padded = sum(batch["tokens"].numel() - int(batch["valid_lens"].sum()) for batch in batches)
    lengths = [len(encode(text)) for text, _ in read_tsv(tmp_path / SPLIT_FILES["validation"])]
    assert sorted(int(n) for batch in batches for n in batch["valid_lens"]) == sorted(lengths)  # every row once
    in_file_order = sum(8 * max(lengths[i : i + 8]) - sum(lengths[i : i + 8]) for i in range(0, 48, 8))
    assert padded * 4 < in_file_order
    # Each row's logits are those of the same row batched in file order: the metrics do not change.
    torch.manual_seed(0)
    task = Classifier(
        vocab_size=module.vocab_size, num_classes=10, d_model=16, num_heads=2, num_layers=1, ffn_hidden=16
    )
    task.eval()
    in_order = DataLoader(loader.dataset, batch_size=8, collate_fn=module.collator)
    with torch.inference_mode():
        by_length = torch.cat([task(batch["tokens"], batch["valid_lens"]) for batch in batches])
        expected = torch.cat([task(batch["tokens"], batch["valid_lens"]) for batch in in_order])
    assert not torch.allclose(by_length, expected, atol=1e-3)  # the order did change
    torch.testing.assert_close(by_length, expected[loader.sampler.indices], rtol=1e-5, atol=1e-5)
