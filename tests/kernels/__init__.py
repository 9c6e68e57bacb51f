"""Tests of ``zoo.kernels``."""
