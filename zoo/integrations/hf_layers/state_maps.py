"""How a transformers layer's state dict maps onto a zoo layer's: fused tensors split by rows, the
rest renamed, every tensor accounted for in both directions; and the one-line refusal of a config
the zoo's layer has no option for. Each family's module in this package states its map with these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from zoo.errors import ConfigurationError

__all__ = ["Fused", "LayerPair", "fused_conv", "refuse"]


@dataclass(frozen=True)
class Fused:
    """One transformers tensor holding several of the zoo's along its first axis: ``groups`` blocks,
    each the ``parts`` side by side (``(zoo name, rows per block)``); a zoo tensor is its rows of
    every block, in block order."""

    hf: str
    parts: tuple[tuple[str, int], ...]
    groups: int = 1

    def split(self, tensor: Tensor) -> dict[str, Tensor]:
        """The zoo's tensors from transformers' ``tensor``."""
        pieces = tensor.unflatten(0, (self.groups, -1)).split([rows for _, rows in self.parts], dim=1)
        return {name: piece.flatten(0, 1) for (name, _), piece in zip(self.parts, pieces)}

    def join(self, state: Mapping[str, Tensor]) -> Tensor:
        """transformers' tensor from the zoo's in ``state``."""
        return torch.cat([state[name].unflatten(0, (self.groups, -1)) for name, _ in self.parts], 1).flatten(0, 1)


@dataclass(frozen=True)
class LayerPair:
    """The map between a transformers layer's state dict and the zoo layer's: ``fused`` tensors
    split and joined, the others ``renamed`` (``(transformers name, zoo name)``)."""

    name: str
    fused: tuple[Fused, ...]
    renamed: tuple[tuple[str, str], ...]

    def to_zoo(self, hf_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """The zoo layer's state dict from transformers'."""
        self._check(hf_state, [f.hf for f in self.fused] + [hf for hf, _ in self.renamed], "transformers")
        state = {zoo: hf_state[hf] for hf, zoo in self.renamed}
        for fused in self.fused:
            state.update(fused.split(hf_state[fused.hf]))
        return state

    def from_zoo(self, zoo_state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """transformers' state dict from the zoo layer's."""
        zoo_names = [name for f in self.fused for name, _ in f.parts] + [zoo for _, zoo in self.renamed]
        self._check(zoo_state, zoo_names, "zoo")
        state = {hf: zoo_state[zoo] for hf, zoo in self.renamed}
        state.update({fused.hf: fused.join(zoo_state) for fused in self.fused})
        return state

    def _check(self, state: Mapping[str, Tensor], expected: list[str], side: str) -> None:
        """Every key mapped and no other, or one line naming the difference."""
        missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
        if missing or extra:
            raise ConfigurationError(
                f"{self.name}: the {side} state dict lacks {missing} and has unmapped {extra}; "
                f"pass the state dict of the layer built from the same config."
            )


def refuse(name: str, problem: str | None) -> None:
    """One line naming what of the config the zoo cannot compute, if anything."""
    if problem:
        raise ConfigurationError(
            f"{name}: {problem}; the zoo's layer has no such option (run transformers' layer for it)."
        )


def fused_conv(prefix: str, parts: tuple[tuple[str, int], ...], bias: bool) -> tuple[Fused, ...]:
    """transformers' one ``conv1d`` over the channels ``parts`` as the zoo's per-projection convolutions."""
    suffixes = ("weight", "bias") if bias else ("weight",)
    return tuple(Fused(f"{prefix}.{s}", tuple((f"{zoo}.{s}", rows) for zoo, rows in parts)) for s in suffixes)
