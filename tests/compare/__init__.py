"""Tests of zoo.compare."""
