"""Tiny Shakespeare: the character-level corpus of char-rnn and nanoGPT's ``shakespeare_char``, as
:class:`~zoo.datamodules.text.TextDataModule` reads any text.

The corpus is char-rnn's ``data/tinyshakespeare/input.txt`` (1,115,394 characters, 65 distinct),
downloaded once into ``cache_dir`` and checked against its SHA-256, or a local copy given with
``--data.path`` (taken as it is). With the defaults (``char``, ``val_fraction=0.1``) it follows
nanoGPT's ``prepare.py`` exactly: the vocabulary is the 65 distinct characters of the whole text,
the first 1,003,854 characters train and the last 111,540 validate, so validation losses compare
with nanoGPT's published ones. The corpus has no test split: the test stage reads validation.
"""

from __future__ import annotations

from typing import Any

from zoo.datamodules.registry import register_datamodule
from zoo.datamodules.text import TextDataModule

__all__ = ["TINY_SHAKESPEARE_SHA256", "TINY_SHAKESPEARE_URL", "ShakespeareDataModule"]

TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"


@register_datamodule("shakespeare")
class ShakespeareDataModule(TextDataModule):
    """Tiny Shakespeare for language models (see the module docstring); ``gpt``'s default data.

    Args:
        path: A local copy of ``input.txt``; ``None`` downloads the public copy into ``cache_dir``.
        kwargs: The other arguments of :class:`~zoo.datamodules.text.TextDataModule`
            (``tokenizer``, ``block_size``, ``val_fraction``, ``batch_size``, ``train_windows``, ...).
    """

    name = "shakespeare"
    download_url = TINY_SHAKESPEARE_URL
    download_sha256 = TINY_SHAKESPEARE_SHA256
    local_copy = "FILE (char-rnn's data/tinyshakespeare/input.txt)"

    def __init__(self, path: str | None = None, **kwargs: Any) -> None:
        super().__init__(path=path, dataset=None, column="text", **kwargs)
