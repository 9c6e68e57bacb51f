"""Plugins that are not installed: modules named with ``--import`` on the command line.

Installed packages reach the registries through entry points (:mod:`zoo.entry_points`). A module
that is not installed, such as a file being developed, can be named instead::

    python -m zoo fit --model transformer --import my_attention.py --model.attention cosine
    python -m zoo list --import my_package.attention

``--import`` takes a ``.py`` file or a dotted module name and may be repeated. The modules are
imported before the command line is parsed, so the names they register can be used in the same
command.

Every process of a multi-process run must import them too. Processes that do not run the
command line themselves (``ddp_spawn`` ranks, DataLoader workers under the spawn start method)
and those that run it rewritten (the ``ddp`` launcher re-runs the arguments ZooCLI hands to
Lightning, without ``--import``) inherit the environment, so the modules are also listed in
``ZOO_IMPORTS`` (separated by ``os.pathsep``), which ``import zoo`` honours. A file's directory
is appended to ``sys.path`` so that spawned children can unpickle the classes it defines.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from zoo.errors import PluginImportError
from zoo.registry import PluginLoadWarning

__all__ = ["ENV_VAR", "import_from_environment", "import_plugin", "import_plugins", "pop_import_flags"]

ENV_VAR = "ZOO_IMPORTS"
FLAG = "--import"


def pop_import_flags(args: list[str]) -> tuple[list[str], list[str]]:
    """Split ``--import X`` and ``--import=X`` (anywhere in ``args``) from the other arguments.

    Returns the remaining arguments and the named modules, in order.
    """
    rest: list[str] = []
    specs: list[str] = []
    arguments = iter(args)
    for arg in arguments:
        if arg == FLAG:
            spec = next(arguments, None)
            if spec is None:
                raise PluginImportError(f"{FLAG} needs a value: a .py file or a dotted module name.")
            specs.append(spec)
        elif arg.startswith(FLAG + "="):
            specs.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return rest, specs


def _is_file(spec: str) -> bool:
    return spec.endswith(".py") or os.sep in spec or (os.altsep is not None and os.altsep in spec)


def import_plugin(spec: str) -> ModuleType:
    """Import the module ``spec`` names: a ``.py`` file or a dotted module name.

    Importing the same module again returns it unchanged, so a process may meet a module both
    on its command line and in ``ZOO_IMPORTS``.

    Raises:
        PluginImportError: the file does not exist, the name is not a module name, or importing
            the module raised; the message names the module and the error.
    """
    if _is_file(spec):
        return _import_file(spec)
    if not all(part.isidentifier() for part in spec.split(".")):
        raise PluginImportError(
            f"Cannot import plugin {spec!r}: give a .py file or a dotted module name (my_package.attention)."
        )
    try:
        return importlib.import_module(spec)
    except Exception as exc:
        raise PluginImportError(f"Could not import plugin module {spec!r}: {type(exc).__name__}: {exc}") from exc


def _import_file(spec: str) -> ModuleType:
    """Import a ``.py`` file as the module named by its stem."""
    path = Path(spec).expanduser().resolve()
    if not path.is_file():
        raise PluginImportError(f"Cannot import plugin file {spec!r}: no such file.")
    name = path.stem
    if not name.isidentifier():
        raise PluginImportError(
            f"Cannot import plugin file {spec!r}: {name!r} is not a valid module name; rename the file."
        )
    existing = sys.modules.get(name)
    if existing is not None:
        if getattr(existing, "__file__", None) and Path(existing.__file__).resolve() == path:
            return existing
        raise PluginImportError(
            f"Cannot import plugin file {spec!r}: a module named {name!r} is already imported "
            f"(from {getattr(existing, '__file__', None) or 'a built-in'}); rename the file."
        )
    loader_spec = importlib.util.spec_from_file_location(name, path)
    assert loader_spec is not None and loader_spec.loader is not None  # a .py file always has one
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module  # before executing, as a normal import does (dataclasses, pickling)
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise PluginImportError(f"Could not import plugin file {spec!r}: {type(exc).__name__}: {exc}") from exc
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    return module


def import_plugins(specs: Iterable[str]) -> list[ModuleType]:
    """Import each module and add it to ``ZOO_IMPORTS``, so child processes import it too."""
    modules = [import_plugin(spec) for spec in specs]
    listed = [s for s in os.environ.get(ENV_VAR, "").split(os.pathsep) if s]
    for spec in specs:
        entry = str(Path(spec).expanduser().resolve()) if _is_file(spec) else spec
        if entry not in listed:
            listed.append(entry)
    if listed:
        os.environ[ENV_VAR] = os.pathsep.join(listed)
    return modules


def import_from_environment() -> None:
    """Import the modules listed in ``ZOO_IMPORTS``; warn about, and skip, any that fail.

    Called when ``zoo`` is imported. A failure warns instead of raising: the parent process
    already imported the same modules, and ``import zoo`` must not break.
    """
    for spec in os.environ.get(ENV_VAR, "").split(os.pathsep):
        if not spec:
            continue
        try:
            import_plugin(spec)
        except PluginImportError as exc:
            warnings.warn(f"Skipping {ENV_VAR} entry {spec!r}: {exc}", PluginLoadWarning, stacklevel=2)
