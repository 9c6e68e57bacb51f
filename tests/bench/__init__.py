"""Tests of ``zoo.bench``."""
