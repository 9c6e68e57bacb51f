"""Which processes are running: for tests that stop a command and check that nothing it started is left."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["processes_mentioning"]


def processes_mentioning(text: str, cwd: Path | None = None) -> list[int]:
    """The processes whose command line holds ``text`` (and that run in ``cwd``, if given)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if not entry.name.isdigit() or (cwd is not None and Path(os.readlink(entry / "cwd")) != cwd):
                continue
            if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(entry.name))
    return found
