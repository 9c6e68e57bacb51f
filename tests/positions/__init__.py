"""Tests of ``zoo.positions``."""
