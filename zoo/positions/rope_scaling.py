"""Rotary frequency scaling: the rules that let a model rotated by RoPE read past the length it was
trained at, by changing each pair's inverse frequency ``theta_i`` (and, for YaRN, the scores' scale).

With ``r`` rotated features, base ``b`` and ``theta_i = b^(-2i / r)``, pair ``i`` turns once every
``lambda_i = 2 pi / theta_i`` positions. A scaling rule keeps the short wavelengths (they resolve
nearby tokens and were trained at every offset) and stretches the long ones (they never turned
through a whole period in training) by the context ``factor`` ``s``:

* ``linear`` (Chen et al., 2023, position interpolation; transformers' ``"linear"``):
  ``theta_i' = theta_i / s`` for every pair, the same as reading position ``m`` as ``m / s``.
* ``llama3`` (Llama 3.1's rule; transformers' ``"llama3"``): with the original context ``L``,
  ``lambda_low = L / low_freq_factor`` and ``lambda_high = L / high_freq_factor``, pairs with
  ``lambda_i < lambda_high`` keep ``theta_i``, pairs with ``lambda_i > lambda_low`` take
  ``theta_i / s``, and between them ``theta_i' = (1 - g) theta_i / s + g theta_i`` with
  ``g = (L / lambda_i - low_freq_factor) / (high_freq_factor - low_freq_factor)``.
* ``yarn`` (Peng et al., 2023, YaRN; transformers' ``"yarn"``): the pair index where a wavelength
  turns ``n`` times in ``L`` positions is ``d(n) = r ln(L / (2 pi n)) / (2 ln b)``; from
  ``lo = d(beta_fast)`` to ``hi = d(beta_slow)`` (floored and ceiled with ``truncate``, clipped to
  ``[0, r - 1]``) a ramp ``rho_i = clip((i - lo) / (hi - lo), 0, 1)`` mixes
  ``theta_i' = rho_i theta_i / s + (1 - rho_i) theta_i``, and both the cosines and the sines are
  multiplied by the attention factor ``0.1 ln s + 1`` (with DeepSeek's ``mscale`` and
  ``mscale_all_dim``: ``(0.1 mscale ln s + 1) / (0.1 mscale_all_dim ln s + 1)``), so every score of
  rotated features is multiplied by its square.

Each rule is a frozen dataclass; :func:`rope_scaling` builds one from a mapping (``{"type":
"yarn", "factor": 32, "original_max_len": 4096}``), which is how a config or the command line
names it (``--model.position_kwargs '{scaling: {type: linear, factor: 4}}'``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from zoo.errors import ConfigurationError

__all__ = ["Llama3Scaling", "LinearScaling", "RopeScaling", "YarnScaling", "rope_scaling"]


@dataclass(frozen=True)
class RopeScaling:
    """A rule changing RoPE's inverse frequencies by a context ``factor``; subclasses set
    :attr:`kind` and :meth:`scale`."""

    #: the name a mapping gives in ``type``
    kind: ClassVar[str]
    factor: float

    def __post_init__(self) -> None:
        if not self.factor >= 1.0:
            raise ConfigurationError(
                f"rope scaling {self.kind!r} needs a factor of 1 or more; got {self.factor!r}. "
                "Pass the ratio of the context to read to the context trained."
            )

    def scale(self, inverse_frequency: Tensor, base: float) -> Tensor:
        """The scaled inverse frequencies of pairs ``0 .. r/2 - 1`` (``inverse_frequency``, float32)."""
        raise NotImplementedError

    @property
    def amplitude(self) -> float:
        """What the cosines and sines are multiplied by: 1 but for YaRN."""
        return 1.0


@dataclass(frozen=True)
class LinearScaling(RopeScaling):
    """Position interpolation: every pair's frequency divided by ``factor``."""

    kind: ClassVar[str] = "linear"

    def scale(self, inverse_frequency: Tensor, base: float) -> Tensor:
        return inverse_frequency / self.factor


@dataclass(frozen=True)
class Llama3Scaling(RopeScaling):
    """Llama 3.1's rule: long wavelengths divided by ``factor``, short ones kept, a blend between."""

    kind: ClassVar[str] = "llama3"
    original_max_len: int
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0

    def scale(self, inverse_frequency: Tensor, base: float) -> Tensor:
        wavelength = 2 * math.pi / inverse_frequency
        blend = (self.original_max_len / wavelength - self.low_freq_factor) / (
            self.high_freq_factor - self.low_freq_factor
        )
        blended = (1 - blend) * inverse_frequency / self.factor + blend * inverse_frequency
        scaled = torch.where(
            wavelength > self.original_max_len / self.low_freq_factor, inverse_frequency / self.factor, blended
        )
        return torch.where(wavelength < self.original_max_len / self.high_freq_factor, inverse_frequency, scaled)


@dataclass(frozen=True)
class YarnScaling(RopeScaling):
    """YaRN: a ramp over the pairs from kept to divided frequencies, and the scores' temperature.

    ``attention_factor`` set by hand replaces the :attr:`amplitude` that ``factor`` (with ``mscale``
    and ``mscale_all_dim``, DeepSeek's) gives.
    """

    kind: ClassVar[str] = "yarn"
    original_max_len: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    attention_factor: float | None = None

    def scale(self, inverse_frequency: Tensor, base: float) -> Tensor:
        rotary_dim = 2 * inverse_frequency.numel()

        def pair_turning(turns: float) -> float:
            return rotary_dim * math.log(self.original_max_len / (turns * 2 * math.pi)) / (2 * math.log(base))

        low, high = pair_turning(self.beta_fast), pair_turning(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, rotary_dim - 1)
        span = high - low if high != low else 0.001  # transformers' guard against a zero-width ramp
        ramp = (
            (torch.arange(rotary_dim // 2, dtype=torch.float32, device=inverse_frequency.device) - low) / span
        ).clamp(0, 1)
        return ramp * inverse_frequency / self.factor + (1 - ramp) * inverse_frequency

    @property
    def amplitude(self) -> float:
        if self.attention_factor is not None:
            return self.attention_factor
        if self.mscale and self.mscale_all_dim:
            return yarn_mscale(self.factor, self.mscale) / yarn_mscale(self.factor, self.mscale_all_dim)
        return yarn_mscale(self.factor)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's temperature ``0.1 mscale ln s + 1`` for a context factor ``s`` (1 for ``s <= 1``);
    DeepSeek-V3 also multiplies its softmax scale by the square of ``yarn_mscale(s, mscale_all_dim)``."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


SCALINGS: dict[str, type[RopeScaling]] = {rule.kind: rule for rule in (LinearScaling, Llama3Scaling, YarnScaling)}


def rope_scaling(spec: RopeScaling | Mapping[str, Any] | None) -> RopeScaling | None:
    """The rule ``spec`` names: a :class:`RopeScaling` as it is, a mapping with ``type`` and the rule's
    fields, or None (no scaling). Unknown types and fields fail in one line with the closest names."""
    if spec is None or isinstance(spec, RopeScaling):
        return spec
    fields = dict(spec)
    kind = fields.pop("type", None)
    if kind not in SCALINGS:
        close = difflib.get_close_matches(str(kind), list(SCALINGS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ConfigurationError(
            f"unknown rope scaling type {kind!r}; {hint}choose one of {', '.join(sorted(SCALINGS))} in scaling.type."
        )
    rule = SCALINGS[kind]
    known = [field.name for field in dataclasses.fields(rule)]
    for key in fields:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigurationError(
                f"rope scaling {kind!r} has no field {key!r}; {hint}its fields: {', '.join(known)}."
            )
    try:
        return rule(**fields)
    except TypeError as error:  # a required field left out
        raise ConfigurationError(f"rope scaling {kind!r}: {error}; its fields: {', '.join(known)}.") from None
