"""What :func:`~zoo.testing.check_attention` reports: the error a broken contract raises, and
the record of what a variant passed."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AttentionContractError", "ContractReport", "fail"]


class AttentionContractError(AssertionError):
    """A variant broke the attention contract; the message names the check and what failed."""


@dataclass(frozen=True)
class ContractReport:
    """What :func:`check_attention` verified: the checks that passed, and those skipped with why."""

    variant: str
    passed: tuple[str, ...]
    skipped: dict[str, str] = field(default_factory=dict)


def fail(message: str) -> None:
    """Stop the running check; :func:`~zoo.testing.check_attention` adds the variant and check."""
    raise AttentionContractError(message)
