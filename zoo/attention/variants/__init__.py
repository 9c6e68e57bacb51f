"""The attention variants, one per file: scoring attentions a multi-head layer runs per head, and
the recurrent families' layers. The machinery they are written against lives beside them in
:mod:`zoo.attention`'s ``contract/``, ``build/``, ``modules/`` and ``kernels/``.

Importing this package imports every module in it, which registers the built-in variants:
:data:`MODULES` holds them, in the order they register (by name).
"""

import importlib
import pkgutil

#: the variants' modules, each imported (and so registered) in the order of their names: a new
#: variant's file is found here, and its registration is all that lists it
MODULES = tuple(
    importlib.import_module(f"{__name__}.{module.name}")
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda module: module.name)
)

__all__ = ["MODULES"]
