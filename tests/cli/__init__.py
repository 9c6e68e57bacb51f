"""Tests of the command line (``python -m zoo``, ``zoo.cli``): configs, flags and short training runs."""
