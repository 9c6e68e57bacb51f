"""Tests of ``zoo.sharing``: the exported folder's files."""
