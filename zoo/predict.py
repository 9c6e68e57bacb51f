"""``zoo predict --ckpt_path FILE`` without ``--model``, and ``zoo predict --pretrained DIR``:
predicting from a checkpoint, or an exported folder, alone.

LightningCLI's ``predict`` needs the model's data module, and so the training corpus, to build
its vocabulary. A zoo checkpoint carries what predicting needs (the weights, the
hyperparameters and the codec), and so does a folder ``zoo export`` wrote, so with only
``--ckpt_path`` the model is rebuilt with :func:`zoo.load_checkpoint`, with ``--pretrained`` (a
folder or a Hub model id) with :func:`zoo.from_pretrained`, and the inputs come from
``--data.predict_texts`` or ``--data.predict_file``, the flags of the Lightning path.
"""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from zoo.checkpoint import load_checkpoint
from zoo.errors import CheckpointError, DataError
from zoo.tasks import MODEL_REGISTRY, ZooTask
from zoo.text.inputs import predict_inputs

__all__ = ["format_row", "from_checkpoint_alone", "predict_from_checkpoint"]


def format_row(item: dict[str, Any]) -> str:
    """One prediction as a tab-separated line, floats to four decimals; a tab, newline or backslash
    inside a value is escaped (``\\t``, ``\\n``, ``\\\\``), so every prediction stays one line."""
    return "\t".join(_cell(value) for value in item.values())


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def from_checkpoint_alone(args: list[str]) -> bool:
    """``predict`` with ``--pretrained``, or with a ``--ckpt_path`` but neither ``--model`` nor ``--config``."""
    flags = {arg.split("=", 1)[0] for arg in args}
    if args[:1] != ["predict"]:
        return False
    return "--pretrained" in flags or ("--ckpt_path" in flags and not flags & {"--model", "--config", "-c"})


def _inputs(texts: str | None, file: str | None) -> list[Any]:
    """The raw inputs from a YAML/JSON list or from the non-blank lines of a file."""
    if texts is None:
        return predict_inputs(None, file)
    try:
        items = yaml.safe_load(texts)
    except yaml.YAMLError as exc:
        raise DataError(f"--data.predict_texts is not a JSON/YAML list: {exc}") from exc
    if not isinstance(items, list):
        raise DataError(
            f'--data.predict_texts must be a non-empty list, like \'["a text", "another"]\'; got {texts!r}.'
        )
    return predict_inputs(items, None)


def predict_from_checkpoint(args: list[str], chunk_size: int = 64) -> None:
    """``zoo predict (--ckpt_path FILE | --pretrained DIR) (--data.predict_texts LIST | --data.predict_file FILE)``.

    Prints one tab-separated line per input, as the Lightning path does. Inputs are texts
    (sentiment), English sentences (translation) or numbers (kernel regression), predicted
    ``chunk_size`` at a time.
    """
    parser = argparse.ArgumentParser(
        prog="zoo predict",
        description="Predict with a model rebuilt from its checkpoint or exported folder alone (no --model, no data).",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--ckpt_path", help="a checkpoint of a registered zoo model")
    source.add_argument("--pretrained", help="a folder written by zoo export, or a Hugging Face Hub model id")
    inputs = parser.add_mutually_exclusive_group(required=True)
    inputs.add_argument("--data.predict_texts", dest="texts", help="a JSON/YAML list of inputs")
    inputs.add_argument("--data.predict_file", dest="file", help="a UTF-8 file of inputs, one per line")
    options = parser.parse_args(args)
    items = _inputs(options.texts, options.file)
    if options.pretrained is not None:
        model = ZooTask.from_pretrained(options.pretrained)
    else:
        model = load_checkpoint(options.ckpt_path)
    if model.codecs and model.codec is None:
        raise CheckpointError(
            f"{options.ckpt_path!r} holds no codec (vocabulary or tokenizer) to read raw inputs with: it predates "
            f"them. Predict with --model {MODEL_REGISTRY.name_of(type(model))} and its --data options instead."
        )
    for start in range(0, len(items), chunk_size):
        for row in model.predict(items[start : start + chunk_size]):
            print(format_row(row))
