"""Tests of ``zoo.text``."""
