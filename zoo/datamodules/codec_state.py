"""Reading a codec back from the plain data a checkpoint stores.

A codec (text to ids and back) travels inside every checkpoint so that a trained model can be
used without its data module. Rebuilding one must refuse two kinds of saved state rather than
produce a model that silently reads its inputs differently: state written by another version of
the text pipeline, and state with fields missing or of the wrong type (a hand-edited or foreign
checkpoint). Every codec's ``from_state_dict`` goes through :func:`codec_fields`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.errors import DataError

__all__ = ["codec_fields"]


def codec_fields(
    state: Mapping[str, Any], *, codec: str, pipeline: str, version: int, fields: Mapping[str, type]
) -> dict[str, Any]:
    """The ``fields`` of a saved codec ``state``, after checking its pipeline version and their types.

    Args:
        state: What the codec's ``state_dict`` returned, read back from a checkpoint.
        codec: The codec, as error messages name it ("The translation codec").
        pipeline: The text pipeline whose version ``state["tokenizer_version"]`` records
            ("subword tokenizer").
        version: The version this zoo's pipeline has.
        fields: Required field names and their types.

    Raises:
        DataError: another pipeline version, or a field missing or of another type.
    """
    saved = state.get("tokenizer_version")
    if saved != version:
        raise DataError(
            f"This model was trained with {pipeline} version {saved!r}; this zoo has version {version}, so it "
            f"would read its inputs differently. Use the zoo release the model was trained with, or retrain it."
        )
    wrong = [name for name, kind in fields.items() if not isinstance(state.get(name), kind)]
    if wrong:
        expected = ", ".join(f"{name} ({fields[name].__name__})" for name in wrong)
        raise DataError(f"{codec} saved in this checkpoint lacks {expected}: the checkpoint is damaged or was not written by the zoo.")
    return {name: state[name] for name in fields}
