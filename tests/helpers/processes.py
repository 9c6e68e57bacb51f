"""Which processes are running: for tests that stop a command and check that nothing it started is left."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import PROJECT_ROOT

__all__ = ["processes_mentioning", "sigterm_once_training"]


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


def sigterm_once_training(args: list[str], watched: Path, timeout: float = 180) -> tuple[int, str]:
    """Run ``python -m zoo ARGS`` from the project root, send it SIGTERM (as a scheduler does)
    once a ``metrics.csv`` appears under ``watched`` (a fit is training), and return its status and
    standard error."""
    command = subprocess.Popen(
        [sys.executable, "-m", "zoo", *args],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not list(watched.rglob("metrics.csv")):
        time.sleep(0.2)
    command.send_signal(signal.SIGTERM)
    _, stderr = command.communicate(timeout=60)
    return command.returncode, stderr
