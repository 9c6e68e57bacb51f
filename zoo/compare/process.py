"""Run one ``python -m zoo ...`` child process and measure it: exit status, wall time, peak memory.

Peak memory is the child's peak resident set size as the kernel reports it when the child is
reaped (``os.wait4``'s ``ru_maxrss``, KiB on Linux): the process's own, per run, without psutil.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ChildResult", "run_child", "zoo_command"]

#: How often a waiting run looks whether its child has ended: an interrupt (Ctrl-C, or a launcher
#: that cancels the run, as ``ray.cancel`` does) is seen within this time.
POLL_SECONDS = 0.05


def zoo_command(*args: str) -> list[str]:
    """``[python, -m, zoo, *args]`` with this interpreter."""
    return [sys.executable, "-m", "zoo", *args]


@dataclass(frozen=True)
class ChildResult:
    returncode: int
    seconds: float
    peak_rss_mib: float


def run_child(
    command: list[str],
    log: Path,
    threads: int,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    poll: Callable[[], None] | None = None,
) -> ChildResult:
    """Run ``command`` with its output in ``log`` and ``threads`` intra-op threads; wait for it.

    The child gets ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` (torch reads them at start), so
    children running side by side share the cores instead of oversubscribing them, and ``env``
    on top of this process's environment. An interrupt here (Ctrl-C) stops the child too: the
    wait polls instead of blocking in ``wait4``, because an interrupt raised from another thread
    (``_thread.interrupt_main``, how Ray cancels a task) is only seen between two bytecodes.
    ``poll`` is called at each look while the child runs, and once after it ends (a scheduler
    reads its progress there); an exception from it stops the child too.
    """
    env = os.environ | dict(env or {}) | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        child = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd
        )
        try:
            while True:
                pid, status, usage = os.wait4(child.pid, os.WNOHANG)
                if poll is not None:
                    poll()
                if pid:
                    break
                time.sleep(POLL_SECONDS)
        except BaseException:
            child.kill()
            child.wait()
            raise
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: tell Popen
    return ChildResult(child.returncode, time.perf_counter() - start, usage.ru_maxrss / 1024)
