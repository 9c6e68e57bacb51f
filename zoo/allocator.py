"""The C library's allocator for CPU training: freed memory stays with the process.

On the CPU PyTorch allocates tensors with ``malloc``. glibc's ``malloc`` serves a block over its
mmap threshold with a fresh ``mmap`` and unmaps it when it is freed; the threshold adapts to what
the process frees, but never past 32 MiB on 64-bit. A training step frees and allocates the same
large temporaries every iteration, so each step the kernel maps them anew, one page fault and one
zero-filled 4 KiB page at a time. A softmax recall model at MQAR's (256, 16) cell (width 64, batch
64) took 8.9 million page faults in a 60-step fit, 34 GiB mapped anew, and spent 28 of its 87
seconds in the kernel (``docs/results/speed.md``, the CPU allocator).

PyTorch's CPU performance guide answers this by preloading jemalloc or TCMalloc, configured to keep
freed pages; neither installs with pip. :func:`retain_freed_memory` sets glibc's own knobs
(``mallopt``) to the same end: no block is served by ``mmap`` (every one comes from the heap,
whatever its size), the heap grows 256 MiB at a time and is never trimmed. The process then keeps
its peak memory for the next step, as the GPU's caching allocator does. Raising the mmap threshold
alone, to its 32 MiB limit, is not enough: tensors of 32 MiB and more are still mapped anew
(``docs/results/speed.md`` measures both). The zoo's commands call it at start;
``ZOO_MALLOC=system`` leaves glibc's defaults, and so does an allocator of one's own
(``LD_PRELOAD``) or glibc's own tuning (``MALLOC_*`` variables, ``GLIBC_TUNABLES``), which glibc
reads itself. A script that trains with the zoo as a library may call :func:`retain_freed_memory`
itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["TOP_PAD", "allocator_setting", "glibc_environment", "retain_freed_memory"]

TOP_PAD = 256 << 20
"""Extra memory the heap takes whenever it grows, so a growing step does not extend it page by page."""

# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
# mallopt(3): -1 turns trimming off. Its largest positive value, 2**31 - 1, does not: a free heap
# top over 2 GiB (a 16k-token step's) went back to the kernel and was faulted in again next step.
_NEVER_TRIM = -1
# The same as an environment variable, which glibc reads as a size: the largest one.
_NEVER_TRIM_SIZE = ctypes.c_size_t(-1).value
_NO_MMAP = 0  # at most this many blocks served by mmap at once

_applied: bool | None = None


def _why_not() -> str | None:
    """Why the allocator is left as it is, or None."""
    if os.environ.get("ZOO_MALLOC", "retain") == "system":
        return "ZOO_MALLOC=system"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "not glibc"
    if os.environ.get("LD_PRELOAD"):
        return "an allocator of one's own may be preloaded (LD_PRELOAD)"
    if any(name.startswith("MALLOC_") for name in os.environ) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return "glibc's malloc is tuned already (MALLOC_* or GLIBC_TUNABLES)"
    return None


def retain_freed_memory() -> bool:
    """Keep freed memory in the process (see the module docstring); once a process.

    Returns:
        True where glibc's settings were changed, False where they are left alone (not glibc, or
        opted out).
    """
    global _applied
    if _applied is None:
        _applied = False
        if _why_not() is None:
            libc = ctypes.CDLL(ctypes.util.find_library("c"))
            settings = ((_M_MMAP_MAX, _NO_MMAP), (_M_TRIM_THRESHOLD, _NEVER_TRIM), (_M_TOP_PAD, TOP_PAD))
            _applied = all([bool(libc.mallopt(parameter, value)) for parameter, value in settings])
    return _applied


def glibc_environment() -> dict[str, str]:
    """The same settings as the variables glibc reads at a process's start: for a program the zoo
    runs that is not the zoo (nanoGPT's ``train.py`` in ``benchmarks/nanogpt_parity.py``), so that
    both sides of a comparison run on the same allocator. Empty where the zoo's commands would
    leave the allocator alone (``ZOO_MALLOC=system``, another allocator or glibc tuned already)."""
    if _why_not() is not None:
        return {}
    return {
        "MALLOC_MMAP_MAX_": str(_NO_MMAP),
        "MALLOC_TRIM_THRESHOLD_": str(_NEVER_TRIM_SIZE),
        "MALLOC_TOP_PAD_": str(TOP_PAD),
    }


def allocator_setting() -> str:
    """What a result's record says of the allocator: ``retain`` (set by this module) or why not."""
    return "retain" if _applied else f"system ({_why_not() or 'not set in this process'})"
