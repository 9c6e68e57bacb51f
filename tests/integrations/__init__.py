"""Tests of ``zoo.integrations``: the zoo inside other libraries (Hugging Face transformers)."""
