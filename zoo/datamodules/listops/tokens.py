"""ListOps tokens (Long Range Arena): the benchmark's vocabulary, its tokenization, and the codec
that carries them into checkpoints. The vocabulary is fixed, so the codec stores only its class
names."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

import torch
from torch import Tensor

from zoo.errors import DataError
from zoo.text.codecs import ClassificationCodec, check_texts
from zoo.text.collators import PadCollator

__all__ = ["CLASS_NAMES", "CLOSE", "OPERATORS", "VOCABULARY", "ListOpsCodec", "encode"]

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
CLOSE = "]"
VOCABULARY = ("<pad>", *(str(digit) for digit in range(10)), *OPERATORS, CLOSE)
"""The benchmark's tokens; id 0 pads. Parentheses of the released files are dropped, as its tokenizer does."""
CLASS_NAMES = tuple(str(digit) for digit in range(10))
"""An expression's value, 0 to 9, is its label."""
PAD_ID = 0
_IDS = {token: i for i, token in enumerate(VOCABULARY)}


def encode(text: str) -> Tensor:
    """Token ids of an expression (``[MAX 2 9 ]``; ``(`` and ``)`` are skipped)."""
    tokens = [token for token in text.split() if token not in ("(", ")")]
    unknown = sorted(set(tokens) - _IDS.keys())
    if unknown:
        raise DataError(
            f"Not a ListOps expression: unknown tokens {unknown[:5]}; expected digits, {', '.join(OPERATORS)} and {CLOSE}."
        )
    return torch.tensor([_IDS[token] for token in tokens], dtype=torch.long)


class ListOpsCodec(ClassificationCodec):
    """ListOps expressions to token-id batches, ids back to tokens, labels to their digits."""

    codec_kind = "listops"
    label = "The ListOps codec"
    saved_fields = MappingProxyType({"class_names": list})

    def __init__(self, class_names: Sequence[str] = CLASS_NAMES) -> None:
        self.class_names = list(class_names)

    def batch(self, inputs: Sequence[str]) -> dict[str, Tensor]:
        """Expressions as one model-input batch: ``{"tokens", "valid_lens"}``.

        Raises:
            DataError: an empty expression or an unknown token.
        """
        check_texts(inputs, "expressions", action="evaluate")
        return PadCollator(PAD_ID)([{"tokens": encode(text)} for text in inputs])

    def id_to_token(self, ids: Sequence[int]) -> list[str]:
        """The benchmark's token of each id (attention heatmaps' labels)."""
        return [VOCABULARY[i] for i in ids]

    def token_table(self) -> list[str]:
        """The benchmark's vocabulary, in id order."""
        return list(VOCABULARY)

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """The expression of ``ids``, tokens separated by spaces, padding skipped."""
        return " ".join(VOCABULARY[int(i)] for i in ids if int(i) != PAD_ID)
