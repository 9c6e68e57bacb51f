"""Freed memory stays in the process: glibc's heap keeps a step's temporaries for the next step."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

import zoo.commands
from zoo import allocator

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

#: frees twenty 8 MiB tensors, then prints how many MiB glibc's heap holds free (``mallinfo2``)
FREED_MIB = textwrap.dedent(
    """
    import ctypes, sys
    import torch
    from zoo.allocator import allocator_setting, retain_freed_memory
    print(retain_freed_memory(), allocator_setting())
    tensors = [torch.ones(2 << 20) for _ in range(20)]
    del tensors
    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Mallinfo2
    print(libc.mallinfo2().fordblks >> 20)
    """
)


def freed_mib(**env: str) -> tuple[str, int]:
    """The allocator's setting and the MiB glibc's heap holds free after the tensors are freed, in a fresh process."""
    environment = {
        k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "GLIBC_TUNABLES") and not k.startswith("MALLOC_")
    }
    result = subprocess.run(
        [sys.executable, "-c", FREED_MIB], env=environment | env, capture_output=True, text=True, check=True
    )
    setting, mib = result.stdout.splitlines()
    return setting, int(mib)


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_freed_tensors_stay_in_the_heap_unless_opted_out() -> None:
    setting, kept = freed_mib()
    assert setting == "True retain" and kept >= 160  # the 160 MiB freed are the heap's, for the next step
    setting, kept = freed_mib(ZOO_MALLOC="system")
    assert setting == "False system (ZOO_MALLOC=system)" and kept < 160  # glibc's defaults: mapped and unmapped


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"ZOO_MALLOC": "system"}, "ZOO_MALLOC=system"),
        ({"LD_PRELOAD": "/usr/lib/libjemalloc.so"}, "LD_PRELOAD"),
        ({"MALLOC_ARENA_MAX": "2"}, "MALLOC_*"),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, "GLIBC_TUNABLES"),
    ],
)
def test_an_allocator_tuned_otherwise_is_left_alone(monkeypatch: pytest.MonkeyPatch, env: dict, why: str) -> None:
    monkeypatch.setattr(allocator, "_applied", None)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert allocator.retain_freed_memory() is False
    assert why in allocator.allocator_setting()


def test_every_command_sets_it_first(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[str] = []
    monkeypatch.setattr(zoo.commands, "retain_freed_memory", lambda: calls.append("allocator"))
    monkeypatch.setattr(zoo.commands, "_run", lambda args: calls.append("command"))
    zoo.commands.main(["list"])
    assert calls == ["allocator", "command"]
