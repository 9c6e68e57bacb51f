"""What a launcher is: where a comparison's runs execute and how many at once.

Every launcher runs :class:`~zoo.compare.run.RunSpec` s through the same
:func:`~zoo.compare.run.execute`, so the runs, their records and the report do not depend on
which one ran them, and a comparison started on one launcher resumes on another. ``local``
(:mod:`zoo.compare.local`) runs them as child processes of this one, ``ray``
(:mod:`zoo.compare.ray_tasks`) as Ray tasks, ``slurm`` (:mod:`zoo.compare.slurm`) as SLURM jobs
through submitit; the last two are optional extras, imported only when chosen.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from types import ModuleType, TracebackType
from typing import Any, ClassVar

from zoo.compare.run import RunFailed, RunSpec
from zoo.errors import ConfigurationError

__all__ = ["Launcher", "OnDone", "require_extra"]

#: Called with each finished run and its record, as soon as it finishes.
OnDone = Callable[[RunSpec, dict[str, Any]], None]


def require_extra(module: str, extra: str) -> ModuleType:
    """Import ``module``, which the zoo's optional extra ``extra`` installs; one line if it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ConfigurationError(
            f"--launcher {extra} needs the package {module!r}, which is not installed ({error}): "
            f"pip install 'attention-zoo[{extra}]'."
        ) from None


class Launcher(ABC):
    """Runs a comparison's runs; a context manager around everything it runs (Ray starts and stops there).

    Attributes:
        threads: Intra-op threads of each run's children.
        parallel: Runs at once, recorded with each run (None where the launcher cannot tell).
        fit_flags: Flags the launcher adds to every fit (what a scheduler reads while runs train).
    """

    name: ClassVar[str]
    threads: int
    parallel: int | None
    fit_flags: tuple[str, ...] = ()

    def __enter__(self) -> Launcher:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        return None

    @abstractmethod
    def run(self, specs: Sequence[RunSpec], on_done: OnDone) -> list[RunFailed]:
        """Run ``specs``, calling ``on_done`` as each finishes; return the runs that failed (after
        their retries), or raise the first failure where a failure stops the comparison (``local``).
        Ctrl-C stops every run that is running and raises ``KeyboardInterrupt``."""
