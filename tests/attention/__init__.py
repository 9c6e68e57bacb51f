"""Tests of ``zoo.attention``."""
