"""The command dispatcher: ``python -m zoo COMMAND`` (and the ``zoo`` console script).

* ``fit``, ``validate``, ``test``, ``predict``: Lightning's commands through :class:`zoo.cli.ZooCLI`
  (``predict --ckpt_path FILE`` alone rebuilds the model from the checkpoint, and
  ``predict --pretrained DIR`` from an exported folder, :mod:`zoo.predict`);
* ``generate (--ckpt_path FILE | --pretrained DIR) --prompt TEXT``: sample text from a language
  model, streamed (:mod:`zoo.generate`);
* ``export``: a checkpoint or run directory as a Hugging Face Hub folder, :mod:`zoo.export`;
* ``list [PATTERN]``: the registries (attention, positions, models, data modules), plugins included;
* ``bench``: the benchmarks of :mod:`zoo.bench` (attention kernels, training, decoding);
* ``compare``: a grid of runs over seeds with intervals, :mod:`zoo.compare`;
* ``matrix``: every family on every yardstick, resumably, through ``compare``, :mod:`zoo.matrix`;
* ``board --records DIR... --out DIR``: the records and benchmarks as a static leaderboard site,
  :mod:`zoo.board`;
* ``--version``; ``--help`` (or no command): every command, a line each (:data:`COMMANDS`).

Every command first keeps freed memory in the process (:func:`zoo.allocator.retain_freed_memory`:
glibc's allocator otherwise maps a CPU step's large temporaries anew each time; ``ZOO_MALLOC=system``
opts out). Errors the user fixes (:func:`user_errors`) end the command with one line and status 2;
``ZOO_DEBUG=1`` shows the traceback. Nothing imports this module but the entry points: the
commands it dispatches to build their runs with :mod:`zoo.cli`, each imported when it runs, so
that ``list``, ``--help`` and ``--version`` answer without importing Lightning.
"""

from __future__ import annotations

import importlib
import os
import shlex
import sys
from typing import Any

from zoo.allocator import retain_freed_memory
from zoo.errors import ConfigurationError, ZooError
from zoo.plugins import import_plugins, pop_import_flags
from zoo.version import __version__

__all__ = ["COMMANDS", "main", "print_help", "user_errors"]


#: Every command, with its line in ``python -m zoo --help`` (the module docstring says more).
COMMANDS: dict[str, str] = {
    "fit": "train a model (Lightning's command: --model NAME --config FILE ...; fit --help lists its options)",
    "validate": "evaluate a model on the validation split (Lightning's command)",
    "test": "evaluate a model on the test split (Lightning's command)",
    "predict": "predict with a model, or from --ckpt_path FILE or --pretrained DIR alone",
    "generate": "sample text from a language model: (--ckpt_path FILE | --pretrained DIR) --prompt TEXT",
    "export": "write a checkpoint or run directory as a Hugging Face Hub folder",
    "list": "the registered attention, positions, models and data modules, plugins included: list [PATTERN]",
    "bench": "benchmarks: attention kernels, training, decoding, classification, decoding from a state",
    "compare": "a grid of runs over seeds, with intervals, in one table",
    "matrix": "every family on every yardstick (configs/matrix), resumably: the zoo's verdict",
    "board": "the records and benchmarks as a static leaderboard site",
}


#: The commands that are one function of their own module, given the rest of the command line:
#: ``module:function``, imported only when its command runs (plotting and data only when benchmarking).
_OWN_MAIN: dict[str, str] = {
    "bench": "zoo.bench.cli:main",
    "compare": "zoo.compare.cli:main",
    "matrix": "zoo.matrix.cli:main",
    "board": "zoo.board.cli:main",
    "generate": "zoo.generate:generate_from_checkpoint",
    "export": "zoo.export:main",
}


def print_help(file: Any = None) -> None:
    """``python -m zoo --help``: every command, a line each."""
    width = max(map(len, COMMANDS))
    lines = [
        "usage: python -m zoo COMMAND [OPTIONS]   (or: zoo COMMAND ...; --import PLUGIN anywhere)",
        "",
        "commands:",
        *(f"  {name:<{width}}  {line}" for name, line in COMMANDS.items()),
        "",
        "python -m zoo COMMAND --help: a command's options; python -m zoo --version: the version.",
    ]
    print("\n".join(lines), file=file or sys.stdout)


def user_errors() -> tuple[type[BaseException], ...]:
    """Mistakes of configuration or input, shown as one line without a traceback: the zoo's own,
    a missing file and, once a command has imported Lightning, Lightning's (an invalid trainer
    setting; a command that never imported Lightning cannot have raised it)."""
    lightning = sys.modules.get("lightning.pytorch.utilities.exceptions")
    return (ZooError, FileNotFoundError) + ((lightning.MisconfigurationException,) if lightning else ())


def _user_error(error: BaseException) -> BaseException | None:
    """The first user error in ``error``'s chain (jsonargparse wraps constructor errors)."""
    errors = user_errors()
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, errors):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def main(args: list[str] | None = None) -> None:
    """Entry point of ``zoo`` and ``python -m zoo``.

    ``--import FILE_OR_MODULE`` (repeatable, anywhere) is handled first: the modules are
    imported, and listed in ``ZOO_IMPORTS`` for child processes, before anything is parsed.
    A reader that stops early (``python -m zoo list | head``) ends the command quietly with
    status 1, as Python's documentation recommends, instead of a ``BrokenPipeError`` traceback.
    """
    args = list(sys.argv[1:] if args is None else args)
    retain_freed_memory()
    try:
        try:
            _run(args)
        finally:  # on SystemExit too (--print_config): a closed pipe surfaces here, not at exit
            sys.stdout.flush()
    except BrokenPipeError:
        # Later flushes, the interpreter's own at exit included, would fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
    except Exception as error:
        cause = _user_error(error)
        if cause is None or os.environ.get("ZOO_DEBUG"):
            raise
        print(f"error: {cause}\n(set ZOO_DEBUG=1 to see the traceback)", file=sys.stderr)
        raise SystemExit(2) from None


def _run(args: list[str]) -> None:
    """Dispatch ``args`` to ``list``, ``bench``, ``compare``, ``matrix``, ``board``, ``generate``, ``export``,
    ``--version``, predicting from a checkpoint or exported folder alone, or :class:`ZooCLI`."""
    args, imports = pop_import_flags(args)
    import_plugins(imports)
    if args[:1] in (["-h"], ["--help"]):
        print_help()
    elif not args:
        print_help(sys.stderr)
        raise SystemExit(2)
    elif args[:1] == ["list"]:
        from zoo.listing import print_registries  # names alone: Lightning is not imported

        if len(args) > 2 or any(arg.startswith("-") for arg in args[1:]):
            raise ConfigurationError(
                f"list takes one name pattern (python -m zoo list '*delta*') and --import; got {shlex.join(args[1:])}."
            )
        print_registries(args[1] if len(args) > 1 else None)
    elif args[0] in _OWN_MAIN:
        module, function = _OWN_MAIN[args[0]].split(":")
        getattr(importlib.import_module(module), function)(args[1:])
    elif args[:1] == ["--version"]:
        print(__version__)
    else:
        _lightning_command(args)


def _lightning_command(args: list[str]) -> None:
    """``fit``, ``validate``, ``test`` and ``predict`` (from a checkpoint or exported folder alone, or through :class:`ZooCLI`)."""
    from zoo.cli import ZooCLI
    from zoo.predict import from_checkpoint_alone, predict_from_checkpoint

    if from_checkpoint_alone(args):
        predict_from_checkpoint(args[1:])
    else:
        ZooCLI(args)
