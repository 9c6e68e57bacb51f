"""The C library's allocator for CPU training: freed memory stays with the process.

On the CPU PyTorch allocates tensors with ``malloc``. glibc's ``malloc`` hands memory back to the
system as soon as it can: a block over its mmap threshold is unmapped when freed, and free memory
over its trim threshold at the top of the heap is returned. Both thresholds adapt to what the
process frees, but a training step that frees and allocates the same few-megabyte temporaries
every iteration keeps crossing them, and each time the kernel maps the pages again, one page
fault and one zero-filled 4 KiB page at a time. Measured on a layer's forward and backward at
16k tokens (``benchmarks/RESULTS.md`` section 40), ``mamba2`` took 619,000 page faults a step
with glibc's defaults and 355,000 with these settings, ``rwkv7`` 79,000 and 8,000.

PyTorch's CPU performance guide answers this by preloading jemalloc or TCMalloc, configured to
keep freed pages; neither installs with pip. :func:`retain_freed_memory` sets glibc's own knobs
(``mallopt``) to the same end: blocks up to 32 MiB (the largest threshold glibc accepts) come
from the heap, and the heap is never trimmed, so the process keeps its peak memory, as the GPU's
caching allocator does. The zoo's commands call it at start; ``ZOO_MALLOC=system`` leaves glibc's
defaults, and so does an allocator of one's own (``LD_PRELOAD``) or glibc's own tuning
(``MALLOC_*`` variables, ``GLIBC_TUNABLES``), which glibc reads itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

__all__ = ["MMAP_THRESHOLD", "TOP_PAD", "allocator_setting", "glibc_environment", "retain_freed_memory"]

MMAP_THRESHOLD = 32 << 20
"""Blocks larger than this still come from ``mmap`` (glibc refuses a larger threshold on 64-bit)."""

TOP_PAD = 256 << 20
"""Extra memory the heap takes whenever it grows, so a growing step does not extend it page by page."""

# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_NEVER_TRIM = 2**31 - 1  # an int: the largest value mallopt takes

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
            settings = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, _NEVER_TRIM), (_M_TOP_PAD, TOP_PAD))
            _applied = all([bool(libc.mallopt(parameter, value)) for parameter, value in settings])
    return _applied


def glibc_environment() -> dict[str, str]:
    """The same settings as the variables glibc reads at a process's start: for a program the zoo
    runs that is not the zoo (nanoGPT's ``train.py`` in ``benchmarks/nanogpt_parity.py``), so that
    both sides of a comparison run on the same allocator."""
    return {
        "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
        "MALLOC_TRIM_THRESHOLD_": str(_NEVER_TRIM),
        "MALLOC_TOP_PAD_": str(TOP_PAD),
    }


def allocator_setting() -> str:
    """What a result's record says of the allocator: ``retain`` (set by this module) or why not."""
    return "retain" if _applied else f"system ({_why_not() or 'not set in this process'})"
