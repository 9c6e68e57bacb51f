"""The linear recurrences' recurrent forms (the decoding path) as they are against an earlier
commit's, side by side in one process, round-robin: ``decay_recurrent``, ``delta_rule_recurrent``
and ``dplr_recurrent`` from the same state and inputs, one head batch ``(1, 8)`` of width 64::

    python benchmarks/recurrent_forms_ab.py --rev 899186e --steps 1 64

``--steps 1`` is one decoded token per call. The earlier source is read from git
(:func:`revision_ab.earlier_module`); the two outputs must be equal to the bit. Run it alone: the
ratio is of medians after one warm-up round.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from collections.abc import Callable

import torch
from revision_ab import earlier_module

from zoo.allocator import retain_freed_memory

KERNELS = {
    "decay": "zoo.attention.kernels.decay",
    "delta_rule": "zoo.attention.kernels.delta_rule",
    "dplr": "zoo.attention.kernels.dplr",
}


def calls(steps: int) -> dict[str, Callable[[object], tuple[torch.Tensor, torch.Tensor]]]:
    """Each kernel's recurrent form over ``steps`` steps from one state, given its module."""
    torch.manual_seed(0)
    shape = (1, 8, steps)
    q, k, v = (torch.randn(*shape, 64) for _ in range(3))
    log_decay, beta = -torch.rand(*shape, 64), torch.rand(*shape)
    a, b = (torch.randn(*shape, 64) * 0.1 for _ in range(2))
    state = torch.randn(1, 8, 64, 64)
    return {
        "decay": lambda m: m.decay_recurrent(q, k, v, log_decay, state=state),
        "delta_rule": lambda m: m.delta_rule_recurrent(q, k, v, beta, log_decay[..., 0], state=state),
        "dplr": lambda m: m.dplr_recurrent(q, k, v, a, b, log_decay, state=state),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rev", required=True, help="the earlier commit")
    parser.add_argument("--steps", nargs="+", type=int, default=[1, 64], help="steps per call")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    retain_freed_memory()  # as every zoo command
    modules = {name: (earlier_module(path, args.rev), importlib.import_module(path)) for name, path in KERNELS.items()}
    for steps in args.steps:
        calls_per_round = max(1, 2000 // steps)
        for name, call in calls(steps).items():
            before, after = modules[name]
            if not all(torch.equal(x, y) for x, y in zip(call(before), call(after))):
                raise SystemExit(f"{name}: the two forms differ")
            times: dict[str, list[float]] = {"before": [], "after": []}
            for repeat in range(args.repeats + 1):
                for label, module in (("before", before), ("after", after)):
                    start = time.perf_counter()
                    for _ in range(calls_per_round):
                        call(module)
                    if repeat:  # the first round warms up
                        times[label].append((time.perf_counter() - start) / calls_per_round / steps * 1e6)
            old, new = (statistics.median(times[label]) for label in ("before", "after"))
            print(
                f"{name}, {steps} steps a call: before {old:.1f} us a step, after {new:.1f}, after/before {new / old:.3f}x"
            )


if __name__ == "__main__":
    main()
