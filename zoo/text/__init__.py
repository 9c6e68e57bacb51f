"""Text handling shared by the data modules and the tasks: tokenizers, codecs, datasets, collators.

Nothing here imports ``datasets`` or Lightning, so tasks (and ``zoo predict`` from a checkpoint)
use codecs without loading any corpus machinery.

* :mod:`zoo.text.words`: the SST-style word tokenizer and :class:`Vocabulary` (``tokenizers`` WordLevel).
* :mod:`zoo.text.subwords`: the joint English+French BPE :class:`SubwordTokenizer`.
* :mod:`zoo.text.codecs`: the :class:`Codec` base (saved as plain data, written once), the
  classification codecs' base and the word and translation codecs checkpoints carry.
* :mod:`zoo.text.bytes`: text as UTF-8 bytes, the Long Range Arena's byte codec.
* :mod:`zoo.text.language`: the language models' codecs (characters, bytes, byte-level BPE from
  :mod:`zoo.text.byte_bpe`), each naming the unit one id is.
* :mod:`zoo.text.datasets`, :mod:`zoo.text.collators`: encoded rows and their padded batches.
* :mod:`zoo.text.inputs`: raw inputs to predict, from a list or a file.
"""

from zoo.text.bytes import ByteCodec
from zoo.text.codecs import CODEC_VERSION, ClassificationCodec, Codec, TextClassificationCodec, TranslationCodec
from zoo.text.language import LANGUAGE_CODECS, BPECodec, ByteLevelCodec, CharCodec, LanguageCodec
from zoo.text.subwords import SubwordTokenizer
from zoo.text.words import Vocabulary, tokenize

__all__ = [
    "CODEC_VERSION",
    "LANGUAGE_CODECS",
    "BPECodec",
    "ByteCodec",
    "ByteLevelCodec",
    "CharCodec",
    "ClassificationCodec",
    "Codec",
    "LanguageCodec",
    "SubwordTokenizer",
    "TextClassificationCodec",
    "TranslationCodec",
    "Vocabulary",
    "tokenize",
]
