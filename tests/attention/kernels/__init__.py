"""Tests of ``zoo.attention.kernels``."""
