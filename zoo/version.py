"""The zoo's version, written once: ``zoo.__version__`` re-exports it and pyproject.toml reads it.

A module of its own, importing nothing, so that what records it (:mod:`zoo.provenance`) need not
import the package's root, which imports everything."""

__version__ = "0.1.0"
