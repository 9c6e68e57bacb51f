"""GPUs of one machine shared out between a comparison's runs, as Ray places tasks on a cluster's.

A run is given its devices through ``CUDA_VISIBLE_DEVICES``, so every run sees its own as
``cuda:0`` (and its ``--trainer.devices`` counts among them). ``--gpus_per_run`` says how many:
a whole number of devices each, or a share ``1/N`` of one, so that N small runs train on each
device at once (Ray's ``num_gpus`` reads the same way).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from zoo.errors import ConfigurationError

__all__ = ["DevicePool", "check_gpus_per_run", "visible_gpus"]


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, named as ``CUDA_VISIBLE_DEVICES`` names them."""
    import torch

    count = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(index) for index in range(count)]
    return [name.strip() for name in listed.split(",") if name.strip()][:count]


def check_gpus_per_run(gpus_per_run: float) -> None:
    """A whole number of devices, or a share ``1/N`` of one."""
    whole = gpus_per_run >= 1 and gpus_per_run == int(gpus_per_run)
    share = 0 < gpus_per_run < 1 and abs(1 / gpus_per_run - round(1 / gpus_per_run)) < 1e-6
    if gpus_per_run != 0 and not (whole or share):
        raise ConfigurationError(
            f"--gpus_per_run {gpus_per_run:g}: give a whole number of GPUs, or a share 1/N of one "
            "(0.5, 0.25, ...) for N runs on each GPU."
        )


class DevicePool:
    """Hands out devices to runs, ``gpus_per_run`` whole devices each or a share ``1/N`` of one.

    A shared device goes to the run that finds it least busy, so runs spread over the devices
    before they double up.

    Args:
        devices: The devices' names (``CUDA_VISIBLE_DEVICES`` entries).
        gpus_per_run: Devices per run (checked by :func:`check_gpus_per_run`, above 0).
    """

    def __init__(self, devices: Sequence[str], gpus_per_run: float) -> None:
        check_gpus_per_run(gpus_per_run)
        self.width = max(1, int(gpus_per_run))
        self.shares = round(1 / gpus_per_run) if gpus_per_run < 1 else 1
        if self.width > len(devices):
            raise ConfigurationError(
                f"--gpus_per_run {gpus_per_run:g} is more GPUs than this machine shows ({len(devices)}: "
                f"{', '.join(devices) or 'none'}): ask for fewer."
            )
        self.devices = list(devices)
        self._free = dict.fromkeys(self.devices, self.shares)
        self._changed = threading.Condition()

    @property
    def capacity(self) -> int:
        """Runs that can hold devices at once."""
        return len(self.devices) // self.width * self.shares

    def _pick(self) -> list[str] | None:
        if self.width == 1:
            device = max(self.devices, key=lambda name: self._free[name])  # the first of the least busy
            return [device] if self._free[device] else None
        idle = [name for name in self.devices if self._free[name] == self.shares]
        return idle[: self.width] if len(idle) >= self.width else None

    def acquire(self) -> list[str]:
        """Devices for one run, waiting until some are free."""
        with self._changed:
            self._changed.wait_for(lambda: self._pick() is not None)
            devices = self._pick() or []
            for name in devices:
                self._free[name] -= 1
            return devices

    def release(self, devices: Sequence[str]) -> None:
        with self._changed:
            for name in devices:
                self._free[name] += 1
            self._changed.notify_all()
