"""Tests of ``zoo.layers``."""
