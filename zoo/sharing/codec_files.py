"""``codec.json`` and the tokenizer files of an exported folder: what a text model reads and
writes text with.

A codec saves itself as plain data (:meth:`zoo.text.codecs.Codec.state_dict`). In a folder, each
field that holds a tokenizer (the translators' BPE, the classifiers' word vocabulary) becomes a
file of its own in the ``tokenizers`` library's JSON, ``tokenizer.json`` (``<field>.json`` for a
field of another name), which ``tokenizers.Tokenizer.from_file`` reads. The rest stays in
``codec.json``: the kind and version, the small fields (lengths, class names, a table of
characters), ``tokenizer_files`` naming each file, and, for a codec whose table is fixed by the
zoo's code (bytes, ListOps), ``tokens``, every id's token, for readers outside the zoo. Reading
joins the files back into the state the codec rebuilds from, and checks ``tokens`` against the
codec this zoo builds.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.errors import CheckpointError
from zoo.text.codecs import Codec, restore_codec

__all__ = ["CODEC_NAME", "codec_file_names", "read_codec", "write_codec"]

CODEC_NAME = "codec.json"
_FILES_KEY = "tokenizer_files"
_TOKENS_KEY = "tokens"


def codec_file_names(codec: Codec) -> dict[str, str]:
    """The file each tokenizer field of ``codec`` is written to, by field."""
    return {name: "tokenizer.json" if name == "tokenizer" else f"{name}.json" for name in codec.tokenizer_fields()}


def write_codec(folder: Path, codec: Codec) -> None:
    """Write ``codec`` into ``folder``: its tokenizer files and ``codec.json``."""
    state = codec.state_dict()
    files = codec_file_names(codec)
    for name, file in files.items():
        (folder / file).write_text(state.pop(name), encoding="utf-8")
    document: dict[str, Any] = {**state, _FILES_KEY: files}
    tokens = codec.token_table()
    if tokens is not None:
        document[_TOKENS_KEY] = tokens
    (folder / CODEC_NAME).write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read_codec(folder: Path, kind: str, kinds: Sequence[type[Codec]]) -> Codec:
    """The codec of ``kind`` that ``folder`` holds, among the classes ``kinds`` its task reads.

    Raises:
        CheckpointError: ``codec.json`` or a file it names is missing or unreadable, names a file
            outside the folder, is of another kind than ``config.json`` says, or its ``tokens``
            differ from the table of the codec this zoo builds.
        DataError: a state the codec refuses (another codec version, a field missing).
    """
    where = folder / CODEC_NAME
    state = _json_object(where)
    files = state.pop(_FILES_KEY, {})
    tokens = state.pop(_TOKENS_KEY, None)
    if state.get("codec_kind") != kind:
        raise CheckpointError(f"{where} holds a codec of kind {state.get('codec_kind')!r}; config.json says {kind!r}.")
    if not isinstance(files, dict):
        raise CheckpointError(f"{where}: {_FILES_KEY} must map fields to file names.")
    for name, file in files.items():
        if not isinstance(file, str) or Path(file).name != file or not file.endswith(".json"):
            raise CheckpointError(f"{where} names {file!r} for {name!r}: only a .json file in the folder itself.")
        path = folder / file
        if not path.is_file():
            raise CheckpointError(f"{where} names {file!r} for the codec's {name}, which the folder lacks.")
        state[name] = path.read_text(encoding="utf-8")
    codec = restore_codec(state, kinds)
    table = codec.token_table()
    if tokens is not None and tokens != table:
        first = next((i for i, pair in enumerate(zip(tokens, table or [])) if pair[0] != pair[1]), None)
        detail = f"first at id {first}" if first is not None else f"{len(tokens)} tokens, not {len(table or [])}"
        raise CheckpointError(
            f"{where}'s tokens differ from the {kind} codec of this zoo ({detail}): the model would read other ids."
        )
    return codec


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or a one-line error."""
    if not path.is_file():
        raise CheckpointError(f"{path.parent} has no {path.name}, which its config.json names for reading text.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path} is not readable JSON ({exc}).") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object.")
    return data
