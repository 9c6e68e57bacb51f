"""``python -m zoo export``: a trained model as a Hugging Face Hub folder (:mod:`zoo.sharing`).

::

    python -m zoo export --ckpt_path runs/transformer/version_0 --out exports/transformer-fra-eng
    python -m zoo export --ckpt_path runs/sentiment/version_3/checkpoints/last.ckpt --out exports/sst2 --overwrite

``--ckpt_path`` is a checkpoint file or a run directory; of a run directory, its best checkpoint
by the metric its checkpoints track, else its ``last.ckpt``. The checkpoint is read safely and
the model rebuilt from it as :func:`zoo.load_checkpoint` rebuilds it, then written by its
``save_pretrained`` (:mod:`zoo.tasks.hub`), with a card of the run that trained it
(:mod:`zoo.sharing.runs`): into a temporary sibling of ``--out``, renamed into place when
complete. A non-empty ``--out`` is refused unless ``--overwrite`` is given.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from zoo.checkpoint import read_checkpoint, task_from_checkpoint
from zoo.errors import CheckpointError
from zoo.sharing.runs import best_checkpoint_name, describe_run

__all__ = ["checkpoint_of", "export_checkpoint", "main"]


def checkpoint_of(source: Path) -> Path:
    """The checkpoint ``source`` names: a file as it is; of a run directory, the best checkpoint
    its ``last.ckpt`` records (if that file is still there), else ``last.ckpt``, else its only one.

    Raises:
        FileNotFoundError: nothing at ``source``.
        CheckpointError: a run directory without checkpoints, or with several and no ``last.ckpt``
            to tell the best.
    """
    if source.is_file():
        return source
    if not source.is_dir():
        raise FileNotFoundError(f"No checkpoint file or run directory at {str(source)!r}.")
    checkpoints = source / "checkpoints"
    last = checkpoints / "last.ckpt"
    if last.is_file():
        best = best_checkpoint_name(read_checkpoint(last))
        return checkpoints / best if best and (checkpoints / best).is_file() else last
    found = sorted(checkpoints.glob("*.ckpt"))
    if len(found) != 1:
        names = ", ".join(path.name for path in found) or "none"
        raise CheckpointError(
            f"{str(source)!r} has no checkpoints/last.ckpt to tell its best checkpoint (checkpoints: {names}): "
            f"pass --ckpt_path the file to export."
        )
    return found[0]


def export_checkpoint(source: Path, out: Path, *, overwrite: bool = False) -> Path:
    """Write the model of checkpoint or run directory ``source`` as a Hub folder at ``out``.

    Returns:
        The checkpoint exported.

    Raises:
        FileNotFoundError, CheckpointError: no usable checkpoint at ``source``.
        DataError: ``out`` holds something and ``overwrite`` is false.
        ConfigurationError: a text model whose checkpoint holds no codec.
    """
    path = checkpoint_of(source)
    checkpoint = read_checkpoint(path)
    task = task_from_checkpoint(checkpoint, path)
    task.save_pretrained(out, overwrite=overwrite, model_card_kwargs={"run": describe_run(path, checkpoint)})
    return path


def main(args: list[str]) -> None:
    """``zoo export --ckpt_path FILE_OR_RUN --out DIR [--overwrite]``; prints what it exported where."""
    parser = argparse.ArgumentParser(
        prog="zoo export",
        description="Write a trained model as a Hugging Face Hub folder: config.json, model.safetensors, its "
        "codec's files and a model card (README.md). Load it with zoo.from_pretrained(DIR) or predict --pretrained.",
    )
    parser.add_argument(
        "--ckpt_path",
        required=True,
        help="a checkpoint, or a run directory (runs/<model>/version_N: its best checkpoint, else last.ckpt)",
    )
    parser.add_argument("--out", required=True, help="the folder to write (refused if it holds anything)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it holds something")
    options = parser.parse_args(args)
    exported = export_checkpoint(Path(options.ckpt_path), Path(options.out), overwrite=options.overwrite)
    print(f"exported {exported} to {options.out}")
