"""Run one ``python -m zoo ...`` child process and measure it: exit status, wall time, peak memory.

Peak memory is the child's peak resident set size as the kernel reports it when the child is
reaped (``os.wait4``'s ``ru_maxrss``, KiB on Linux): the process's own, per run, without psutil.

Ctrl-C in a terminal reaches the children with the comparison (one process group); SIGTERM, as a
scheduler or ``kill`` sends it, reaches the comparison alone. Inside :func:`stop_children_on_sigterm`
it is passed on to every running child, so each fit saves ``last.ckpt`` and stops as on its own
SIGTERM, and raised here as :class:`Terminated` once they are signalled; a child that ends after
it (a fit stops with status 0 once it has saved) ends its run with :class:`Terminated` too, so
nothing stopped is evaluated or recorded, and no child starts after it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

__all__ = ["ChildResult", "Terminated", "run_child", "stop_children_on_sigterm", "zoo_command"]

_running: set[subprocess.Popen] = set()  # the children run_child waits for, in any thread
_running_lock = threading.Lock()
_terminating = threading.Event()  # SIGTERM arrived inside stop_children_on_sigterm


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the comparison: raised where Ctrl-C's ``KeyboardInterrupt`` would be, so every
    launcher stops its runs the way it does on Ctrl-C."""


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
    if _terminating.is_set():
        raise Terminated
    env = os.environ | dict(env or {}) | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        child = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd
        )
        with _running_lock:
            _running.add(child)
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
        finally:
            with _running_lock:
                _running.discard(child)
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped by wait4: tell Popen
    if _terminating.is_set():  # stopped early, whatever its status says
        raise Terminated
    return ChildResult(child.returncode, time.perf_counter() - start, usage.ru_maxrss / 1024)


@contextmanager
def stop_children_on_sigterm() -> Iterator[None]:
    """While inside (in the main thread): SIGTERM is sent on to every running child and then
    raised as :class:`Terminated`; the previous handler comes back on the way out."""

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        _terminating.set()
        with _running_lock:
            children = list(_running)
        for child in children:  # not poll(): the waiting thread's wait4 reaps it
            with suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGTERM)
        raise Terminated

    if threading.current_thread() is not threading.main_thread():  # only the main thread takes signals
        yield
        return
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        _terminating.clear()
