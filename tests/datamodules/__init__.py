"""Tests of ``zoo.datamodules``."""
