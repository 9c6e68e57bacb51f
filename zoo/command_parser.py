"""The argument parser of a ``python -m zoo`` command whose own module documents it (``board``,
``compare``, ``matrix``).

Each such command shows its module docstring as ``--help``, line breaks kept (the docstrings hold
example command lines), and takes no abbreviated flags: ``compare`` and ``matrix`` pass the flags
they do not know on to ``fit`` (or to each comparison), and with argparse's abbreviations a flag
meant for those that is the beginning of one of their own would be taken as their own.
"""

from __future__ import annotations

import argparse

__all__ = ["command_parser"]


def command_parser(command: str, doc: str | None) -> argparse.ArgumentParser:
    """An empty parser for ``python -m zoo COMMAND`` whose help is ``doc`` as written."""
    return argparse.ArgumentParser(
        prog=f"python -m zoo {command}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
