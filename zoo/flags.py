"""Reading ``--flag VALUE`` and ``--flag=VALUE`` out of a command line, as argparse and jsonargparse accept them.

Shared by the CLI (which rewrites names before parsing) and ``zoo compare`` (which reads the config
files a child command names), neither of which can ask the parser: the first runs before it, the
second never parses the child's arguments.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["flag_values"]


def flag_values(args: list[str], *flags: str) -> Iterator[tuple[int, str, bool]]:
    """``(index, value, joined)`` for each ``FLAG VALUE`` or ``FLAG=VALUE`` in ``args``."""
    for i, arg in enumerate(args):
        for flag in flags:
            if arg == flag and i + 1 < len(args):
                yield i + 1, args[i + 1], False
            elif arg.startswith(flag + "="):
                yield i, arg.split("=", 1)[1], True
