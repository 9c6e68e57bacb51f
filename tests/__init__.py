"""Tests of attention-zoo, laid out like the ``zoo`` package they test."""
