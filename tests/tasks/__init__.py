"""Tests of ``zoo.tasks``."""
