"""Freed memory stays in the process: glibc's heap serves and keeps a step's large temporaries."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

import zoo.commands
from zoo import allocator

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

#: allocates a tensor of ``argv[1]`` MiB (by default 64: twice glibc's largest mmap threshold),
#: frees it, and prints what glibc's ``mallinfo2`` says of the blocks it mapped for it and of its
#: heap's free bytes
HEAP = textwrap.dedent(
    """
    import ctypes, json, sys
    import torch
    from zoo.allocator import allocator_setting, retain_freed_memory
    applied = retain_freed_memory()
    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Mallinfo2
    before = libc.mallinfo2().hblkhd
    tensor = torch.empty(int(sys.argv[1]) << 18)
    mapped = (libc.mallinfo2().hblkhd - before) >> 20
    del tensor
    print(json.dumps({"applied": applied, "setting": allocator_setting(), "mapped_mib": mapped,
                      "free_in_heap_mib": libc.mallinfo2().fordblks >> 20}))
    """
)


def heap(mib: int = 64, **env: str) -> dict:
    """What a fresh process's glibc says of a tensor of ``mib`` MiB, with the zoo's setting unless
    ``env`` opts out."""
    ours = ("ZOO_MALLOC", "LD_PRELOAD", "GLIBC_TUNABLES")
    environment = {k: v for k, v in os.environ.items() if k not in ours and not k.startswith("MALLOC_")}
    result = subprocess.run(
        [sys.executable, "-c", HEAP, str(mib)], env=environment | env, capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


@pytest.fixture
def untuned(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """This process's environment without any allocator setting of the zoo's or glibc's."""
    for name in [n for n in os.environ if n.startswith("MALLOC_")] + ["ZOO_MALLOC", "LD_PRELOAD", "GLIBC_TUNABLES"]:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_a_large_tensor_comes_from_the_heap_and_stays_there_unless_opted_out() -> None:
    kept = heap()
    assert kept["applied"] and kept["setting"] == "retain"
    assert kept["mapped_mib"] == 0  # not mmap'd, however large
    assert kept["free_in_heap_mib"] >= 64  # freed into the heap, for the next step
    system = heap(ZOO_MALLOC="system")
    assert not system["applied"] and system["setting"] == "system (ZOO_MALLOC=system)"
    assert system["mapped_mib"] >= 64 and system["free_in_heap_mib"] < 64  # glibc's defaults: mapped, then unmapped


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_a_freed_block_over_two_gib_stays_in_the_heap_too() -> None:
    """Trimming is off, not only raised: mallopt's largest positive threshold (2 GiB - 1) still
    handed a free heap top over 2 GiB back to the kernel, and a long sequence's next step faulted it
    in again page by page (mamba1 at 16k tokens: 1-3 s of a 5 s step in the kernel)."""
    kept = heap(2560)
    assert kept["mapped_mib"] == 0 and kept["free_in_heap_mib"] >= 2560


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"ZOO_MALLOC": "system"}, "ZOO_MALLOC=system"),
        ({"LD_PRELOAD": "/usr/lib/libjemalloc.so"}, "LD_PRELOAD"),
        ({"MALLOC_ARENA_MAX": "2"}, "MALLOC_*"),
        ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, "GLIBC_TUNABLES"),
    ],
)
def test_an_allocator_tuned_otherwise_is_left_alone(untuned: pytest.MonkeyPatch, env: dict, why: str) -> None:
    untuned.setattr(allocator, "_applied", None)
    for name, value in env.items():
        untuned.setenv(name, value)
    assert allocator.retain_freed_memory() is False
    assert why in allocator.allocator_setting()


@pytest.mark.skipif(not GLIBC, reason="glibc's allocator only")
def test_the_variables_for_another_program_give_it_the_same_heap(untuned: pytest.MonkeyPatch) -> None:
    for mib in (64, 2560):  # glibc reads them at start; a free top over 2 GiB is kept as well
        tuned = heap(mib, ZOO_MALLOC="system", **allocator.glibc_environment())
        assert not tuned["applied"] and tuned["mapped_mib"] == 0 and tuned["free_in_heap_mib"] >= mib
    untuned.setenv("ZOO_MALLOC", "system")  # the zoo opted out: the other program is not tuned either
    assert allocator.glibc_environment() == {}


def test_every_command_sets_it_first(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(zoo.commands, "retain_freed_memory", lambda: calls.append("allocator"))
    monkeypatch.setattr(zoo.commands, "_run", lambda args: calls.append("command"))
    zoo.commands.main(["list"])
    assert calls == ["allocator", "command"]
