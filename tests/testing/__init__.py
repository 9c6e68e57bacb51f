"""Tests of ``zoo.testing``."""
