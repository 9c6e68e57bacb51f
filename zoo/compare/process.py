"""Run one ``python -m zoo ...`` child process and measure it: exit status, wall time, peak memory.

Peak memory is the child's peak resident set size as the kernel reports it when the child is
reaped (``os.wait4``'s ``ru_maxrss``, KiB on Linux): the process's own, per run, without psutil.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ChildResult", "run_child", "zoo_command"]


def zoo_command(*args: str) -> list[str]:
    """``[python, -m, zoo, *args]`` with this interpreter."""
    return [sys.executable, "-m", "zoo", *args]


@dataclass(frozen=True)
class ChildResult:
    returncode: int
    seconds: float
    peak_rss_mib: float


def run_child(command: list[str], log: Path, threads: int) -> ChildResult:
    """Run ``command`` with its output in ``log`` and ``threads`` intra-op threads; wait for it.

    The child gets ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` (torch reads them at start), so
    children running side by side share the cores instead of oversubscribing them. An interrupt
    here (Ctrl-C) stops the child too.
    """
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except BaseException:
            child.kill()
            child.wait()
            raise
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: tell Popen
    return ChildResult(child.returncode, time.perf_counter() - start, usage.ru_maxrss / 1024)
