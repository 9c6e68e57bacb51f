"""RULER's needles and variable tracking: the layout re-derived from the tokens alone (each needle
``key = value ;`` found by its ``=``; the answer walked from the needles), the depth of the
answer's first needle, uniform training depths, seeds, the sets per (length, depth) and their
names, every refusal, the heatmap, and one fit through the command line."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.cli import QUIET, flags, latest_run
from tests.helpers.statistics import chi_square_p
from zoo.commands import main
from zoo.datamodules import DATAMODULE_REGISTRY
from zoo.datamodules.recall import NeedleDataModule, needles
from zoo.datamodules.recall.haystacks import BIND, NOISE, QUERY, SEPARATOR, noise_haystack, text_haystack
from zoo.datamodules.recall.needle_tasks import NEEDLE_KINDS, NeedleTask
from zoo.errors import DataError
from zoo.tasks import RecallModel
from zoo.tasks.needle_heatmap import depth_accuracies, needle_heatmap, save_needle_heatmap
from zoo.tasks.recall import _set_name

NOISE_TASK = {"haystack": noise_haystack(), "num_key_ids": 16, "num_value_ids": 24}


def _arrays(examples) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return examples.inputs.long().numpy(), examples.targets.long().numpy(), examples.scored.numpy()


def _needles_of(row: np.ndarray) -> list[tuple[int, int, int]]:
    """``(start, key, value)`` of every ``key = value ;`` in ``row``, in reading order."""
    found = [(p - 1, int(row[p - 1]), int(row[p + 1])) for p in np.flatnonzero(row == BIND)]
    assert all(row[start + 3] == SEPARATOR for start, _, _ in found)
    return found


def _filler_before(needles_found: list[tuple[int, int, int]], start: int) -> int:
    """Haystack tokens before the needle at ``start``: its place less the needles before it."""
    return start - 4 * sum(other < start for other, _, _ in needles_found)


def _questions(row: np.ndarray, target: np.ndarray, begin: int) -> list[tuple[int, list[int], list[int]]]:
    """Each question ``? key ...`` from ``begin``: its key, the inputs after the key up to the next
    question, and the targets there (the key's included)."""
    opens = [*np.flatnonzero(row[begin:] == QUERY) + begin, len(row)]
    return [
        (int(row[q + 1]), row[q + 2 : end].tolist(), target[q + 1 : end][target[q + 1 : end] != -100].tolist())
        for q, end in zip(opens, opens[1:])
    ]


@pytest.mark.parametrize("kind", list(NEEDLE_KINDS))
def test_each_question_is_answered_by_the_values_bound_to_its_key_and_the_first_sits_at_the_depth(kind) -> None:
    task = NeedleTask(kind, **NOISE_TASK)
    counts, length = NEEDLE_KINDS[kind], 160
    inputs, targets, scored = _arrays(needles(np.random.default_rng(0), 200, length, task, depth=0.5))
    haystack_end, filler = length - task.question_tokens, task.filler_tokens(length)
    assert (scored == (targets != -100)).all() and (targets[:, :haystack_end] == -100).all()
    assert scored.sum(axis=1).tolist() == [counts.queries * counts.values] * 200
    for row, target in zip(inputs, targets):
        found = _needles_of(row[:haystack_end])
        keys = [key for _, key, _ in found]
        assert len(found) == counts.keys * counts.values and len({value for *_, value in found}) == len(found)
        assert len(set(keys)) == counts.keys and all(keys.count(key) == counts.values for key in keys)
        questions = _questions(row, target, haystack_end)
        assert len(questions) == counts.queries and len({key for key, _, _ in questions}) == counts.queries
        for number, (key, given, answered) in enumerate(questions):
            bound = [value for _, k, value in found if k == key]  # the haystack's order
            assert answered == bound
            assert given == bound[: len(given)] and len(given) == counts.values - (number == counts.queries - 1)
        first = min(start for start, key, _ in found if key in {q for q, _, _ in questions})
        assert _filler_before(found, first) == round(0.5 * filler)
        assert abs(first / haystack_end - 0.5) <= 4 * len(found) / haystack_end  # the depth, up to the needles
        queried = {key for key, _, _ in questions}
        assert all(_filler_before(found, start) >= round(0.5 * filler) for start, key, _ in found if key in queried)
        if kind == "multikey":  # three distractor keys, none of them queried
            assert len(set(keys) - queried) == 3


def test_variable_tracking_answers_the_variables_chained_to_the_queried_value() -> None:
    task = NeedleTask("variable_tracking", **NOISE_TASK, num_chains=3, num_hops=4)
    length = 160
    inputs, targets, _ = _arrays(needles(np.random.default_rng(1), 200, length, task, depth=0.25))
    haystack_end = length - task.question_tokens
    for row, target in zip(inputs, targets):
        found = _needles_of(row[:haystack_end])
        assert len(found) == 15 and len({name for _, name, _ in found}) == 15  # distinct variables
        [(value, given, answered)] = _questions(row, target, haystack_end)
        chain, holding = [], value  # walk: the variable assigned what the last one holds, in reading order
        for start, name, assigned in found:
            if assigned == holding:
                chain.append((start, name))
                holding = name
        assert answered == [name for _, name in chain] and len(chain) == 5
        assert given == answered[:-1]
        assert _filler_before(found, chain[0][0]) == round(0.25 * task.filler_tokens(length))
        assert value >= task.first_value and all(name < task.first_value for _, name, _ in found)


def test_training_depths_are_uniform_over_the_haystack() -> None:
    task = NeedleTask("single", **NOISE_TASK)
    length = 48
    inputs, _, _ = _arrays(needles(np.random.default_rng(2), 6_000, length, task))
    filler = task.filler_tokens(length)
    before = [_filler_before(_needles_of(row), _needles_of(row)[0][0]) for row in inputs]
    assert chi_square_p(np.bincount(before, minlength=filler + 1), np.full(filler + 1, 1 / (filler + 1))) > 1e-3
    queried = inputs[:, -1] - task.first_key  # the last token is the queried key, uniform over the key ids
    assert chi_square_p(np.bincount(queried, minlength=16), np.full(16, 1 / 16)) > 1e-3


def test_the_noise_haystack_repeats_its_paragraph_and_a_text_is_read_from_drawn_windows(tmp_path: Path) -> None:
    inputs, _, _ = _arrays(needles(np.random.default_rng(3), 4, 64, NeedleTask("single", **NOISE_TASK), depth=1.0))
    units = noise_haystack().units
    words = [units[i - 3] for i in inputs[0, : 64 - 2 - 4]]  # depth 1: all filler first
    paragraph = NOISE.lower().replace(".", " .").split()
    assert words == (paragraph * 3)[: len(words)]  # from its first word, as RULER repeats it
    assert (inputs[:, : len(words)] == inputs[0, : len(words)]).all()  # every haystack the same stream
    text = "to be or not to be, that is the question.\n"
    path = tmp_path / "text.txt"
    path.write_text(text)
    haystack = text_haystack(str(path), "char")
    assert haystack.units == tuple(sorted(set(text)))
    task = NeedleTask("single", haystack, 8, 8)
    rows, _, _ = _arrays(needles(np.random.default_rng(4), 50, 100, task, depth=1.0))
    windows = ["".join(haystack.units[i - 3] for i in row[: task.filler_tokens(100)]) for row in rows]
    assert all(window in text * 4 for window in windows) and len(set(windows)) > 10  # drawn starts, wrapped
    assert text_haystack(str(path), "word").units == tuple(sorted(set(text.split())))


def _module(**options) -> NeedleDataModule:
    settings = {"seq_len": 48, "test_lengths": [48, 96], "depths": [0, 0.5, 1], "num_test": 4, "batch_size": 4}
    return NeedleDataModule(**{**settings, "train_batches": 3, "num_key_ids": 8, "num_value_ids": 8, **options})


def test_sets_per_length_and_depth_named_by_the_recall_task_and_fixed_by_the_seed() -> None:
    assert DATAMODULE_REGISTRY.get("needle") is NeedleDataModule
    data = _module()
    assert (data.vocab_size, data.block_size) == (3 + 21 + 8 + 8, 96)
    data.setup()
    names = list(dict.fromkeys(_set_name(batch) for batch in data.test_dataloader()))  # a set in one or more batches
    assert names == [f"length_{n}_depth_{d}" for n in (48, 96) for d in (0, 50, 100)]
    assert [_set_name(batch) for batch in data.val_dataloader()] == [f"length_48_depth_{d}" for d in (0, 50, 100)]
    assert _set_name({"inputs": torch.zeros(2, 8), "num_kv_pairs": torch.tensor([4, 4])}) == "num_kv_pairs_4"
    assert _set_name({"inputs": torch.zeros(2, 8)}) == "length_8"  # the other tasks' names unchanged

    again, other = _module(), _module(generator_seed=1)
    again.setup()
    other.setup()
    for a, b, c in zip(data.split("test"), again.split("test"), other.split("test")):
        assert torch.equal(a.inputs, b.inputs) and not torch.equal(a.inputs, c.inputs)
    batch = next(iter(data.train_dataloader()))
    assert batch["inputs"].shape == (4, 48) and "depth" not in batch
    assert torch.equal(batch["inputs"], next(iter(again.train_dataloader()))["inputs"])


def test_evaluation_batches_hold_a_training_batch_of_tokens_at_the_most() -> None:
    """Sixteen 16k-token examples at once are more than a layer that scores every pair can hold;
    by default a test batch holds no more tokens than a training one (4 x 48 here)."""
    data = _module(num_test=6)
    data.setup()
    assert [batch["inputs"].shape[0] for batch in data.test_dataloader()] == [4, 2] * 3 + [2, 2, 2] * 3
    assert [batch["inputs"].shape[0] for batch in data.val_dataloader()] == [4, 2] * 3
    unbounded = _module(num_test=6, eval_batch_tokens=10_000)
    unbounded.setup()
    assert [batch["inputs"].shape[0] for batch in unbounded.test_dataloader()] == [4, 2] * 6


def test_hyperparameters_saved_before_the_token_budget_rebuild_the_same_module() -> None:
    """A checkpoint written before ``eval_batch_tokens`` holds hyperparameters without it: the module
    they rebuild batches its evaluation as a training batch's tokens, and draws the same examples."""
    data = _module(num_test=6)
    earlier = {name: value for name, value in data.hparams.items() if name != "eval_batch_tokens"}
    rebuilt = NeedleDataModule(**earlier)
    assert rebuilt.eval_batch_tokens == data.eval_batch_tokens == 4 * 48
    data.setup()
    rebuilt.setup()
    ours, theirs = list(data.test_dataloader()), list(rebuilt.test_dataloader())
    assert [b["inputs"].shape for b in ours] == [b["inputs"].shape for b in theirs]
    assert all(torch.equal(a["inputs"], b["inputs"]) for a, b in zip(ours, theirs))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"seq_len": 6},
            r"single: the needles and questions take 6 tokens, leaving no haystack in seq_len=6; use a seq_len of at least 7",
        ),
        (
            {"kind": "variable_tracking", "num_hops": 8, "num_key_ids": 9, "seq_len": 40},
            r"variable_tracking: the needles and questions take 46 tokens, .* at least 47",
        ),
        ({"test_lengths": [32, 96]}, r"test length 32 is shorter than seq_len=48"),
        ({"depths": [0.5, 1.5]}, r"in \[0, 1\]; got 1.5"),
        ({"depths": [0.5, 0.501]}, "name one set twice"),
        ({"depths": []}, "at least one value"),
        (
            {"kind": "multivalue", "num_value_ids": 3},
            "num_value_ids=3 is too few for multivalue: each example draws 4",
        ),
        (
            {"kind": "variable_tracking", "num_key_ids": 4},
            "num_key_ids=4 is too few for variable_tracking with num_chains=1, num_hops=4: each example draws 5",
        ),
        ({"kind": "haystack"}, "kind is one of single, multikey"),
        ({"text_path": "missing.txt"}, "does not exist"),
        ({"text_path": __file__, "text_unit": "line"}, "text_unit is one of char, word"),
    ],
)
def test_bad_settings_are_refused_in_one_line(options, message) -> None:
    with pytest.raises((DataError, FileNotFoundError), match=message) as error:
        _module(**options)
    assert "\n" not in str(error.value)


def test_a_checkpoint_with_fewer_learned_positions_than_the_data_is_refused_in_one_line() -> None:
    short = RecallModel(vocab_size=40, block_size=48, d_model=16, num_heads=1, position="learned")
    long = RecallModel(vocab_size=40, block_size=96, d_model=16, num_heads=1, position="learned")
    checkpoint = {"hyper_parameters": dict(short.hparams), "state_dict": short.state_dict()}
    with pytest.raises(DataError, match="reaches 48 positions .* but the data go to 96 tokens") as error:
        long.on_load_checkpoint(checkpoint)
    assert "\n" not in str(error.value)
    unlearned = RecallModel(vocab_size=40, block_size=96, d_model=16, num_heads=1, position="none")
    built = RecallModel(vocab_size=40, block_size=48, d_model=16, num_heads=1, position="none")
    unlearned.on_load_checkpoint({"hyper_parameters": dict(built.hparams), "state_dict": built.state_dict()})


def test_the_heatmap_reads_the_metrics_and_averages_runs(tmp_path: Path) -> None:
    run = {f"test/accuracy/length_{n}_depth_{d}": d / 100 for n in (1024, 2048) for d in (0, 50, 100)}
    other = {
        **run,
        "test/accuracy/length_1024_depth_50": 0.9,
        "test/accuracy": 0.5,
        "val/accuracy/length_1024_depth_0": 1,
    }
    assert depth_accuracies(run)[(2048, 100)] == 1.0
    assert depth_accuracies([run, other])[(1024, 50)] == pytest.approx(0.7)
    assert len(depth_accuracies([run, other])) == 6  # neither the mean nor the validation's sets
    path = save_needle_heatmap([run, other], tmp_path / "heatmap.png")
    assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(DataError, match="No metric test/accuracy/length_<L>_depth_<D>"):
        depth_accuracies({"test/accuracy/length_1024": 1.0})


@pytest.mark.parametrize("lengths", [(512, 16384), (512, 2048, 8192, 16384)])
def test_a_long_title_wraps_inside_the_heatmap(lengths: tuple[int, ...]) -> None:
    """A row's whole setting as the title stays within the figure's edges, however few columns."""
    title = "softmax, conv_size 4, position=none: single needle, trained at 512, tested to 16k"
    figure = needle_heatmap({(n, d): 0.5 for n in lengths for d in (0, 50, 100)}, title=title)
    figure.draw_without_rendering()  # lays the figure out as saving it does
    box, edges = figure.axes[0].title.get_window_extent(), figure.bbox
    assert edges.x0 <= box.x0 and box.x1 <= edges.x1 and box.y1 <= edges.y1
    assert figure.axes[0].get_title().replace("\n", " ") == title


def test_a_fit_from_the_command_line_tests_every_length_and_depth(in_tmp: Path) -> None:
    data = flags("data", seq_len=48, test_lengths=[48, 96], depths=[0, 0.5, 1], num_test=8, batch_size=8,
                 train_batches=4, num_key_ids=8, num_value_ids=8, kind="multikey")  # fmt: skip
    main([
        "fit", "--model", "recall", "--data", "needle", *data, *flags("model", d_model=16, num_heads=1),
        "--trainer.max_epochs", "1", "--test_after_fit", "true", "--trainer.logger", "CSVLogger",
        "--trainer.logger.save_dir", "runs", *QUIET,
    ])  # fmt: skip
    with (latest_run("recall", in_tmp) / "metrics.csv").open(newline="") as handle:
        metrics = {key: float(value) for row in csv.DictReader(handle) for key, value in row.items() if value}
    tested = sorted(name for name in metrics if name.startswith("test/accuracy/"))
    assert tested == sorted(f"test/accuracy/length_{n}_depth_{d}" for n in (48, 96) for d in (0, 50, 100))
    assert all(0 <= metrics[name] <= 1 for name in tested)
    assert save_needle_heatmap(metrics, in_tmp / "heatmap.png").stat().st_size > 0
