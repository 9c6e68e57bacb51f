"""Tests of ``zoo.models``."""
