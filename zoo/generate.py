"""``zoo generate (--ckpt_path FILE | --pretrained DIR) --prompt TEXT``: sample text from a
trained language model.

The model is rebuilt from its checkpoint alone (:func:`zoo.load_checkpoint`: the weights, the
hyperparameters and the codec) or from a folder written by ``zoo export``
(:func:`zoo.from_pretrained`), so no data is needed. The continuation is streamed to standard
output as it is drawn, one token a step through the layers' caches (keys and values, or a
recurrent state), as nanoGPT's ``sample.py`` prints its samples: several samples are separated by
a line of dashes.
"""

from __future__ import annotations

import argparse
import sys

import torch

from zoo.checkpoint import load_checkpoint
from zoo.errors import CheckpointError, ConfigurationError
from zoo.tasks import MODEL_REGISTRY, LanguageModel, ZooTask

__all__ = ["SEPARATOR", "generate_from_checkpoint", "parser"]

#: What nanoGPT's ``sample.py`` prints between samples.
SEPARATOR = "---------------"


def parser() -> argparse.ArgumentParser:
    """The arguments of ``zoo generate``."""
    root = argparse.ArgumentParser(prog="zoo generate", description="Sample text from a trained language model.")
    source = root.add_mutually_exclusive_group(required=True)
    source.add_argument("--ckpt_path", help="a checkpoint of a language model (model gpt)")
    source.add_argument("--pretrained", help="a folder written by zoo export, or a Hugging Face Hub model id")
    root.add_argument("--prompt", default="\n", help="the text to continue (default: a newline)")
    root.add_argument("--max_new_tokens", type=int, default=500, help="tokens to draw per sample")
    root.add_argument("--temperature", type=float, default=0.8, help="softmax temperature; 0 takes the most likely")
    root.add_argument("--top_k", type=int, default=200, help="sample among the k most likely tokens only")
    root.add_argument("--seed", type=int, default=0, help="seed of the sampling")
    root.add_argument("--num_samples", type=int, default=1, help="samples to draw")
    root.add_argument("--no_cache", action="store_true", help="run the whole context at every step (slow)")
    root.add_argument("--device", default="cpu", help="where the model runs (cpu, cuda, ...)")
    return root


def generate_from_checkpoint(args: list[str]) -> None:
    """Parse ``args``, load the model and stream each sample to standard output."""
    options = parser().parse_args(args)
    if options.max_new_tokens < 0 or options.num_samples < 1:
        raise ConfigurationError(
            f"--max_new_tokens must be 0 or more and --num_samples at least 1; got {options.max_new_tokens} "
            f"and {options.num_samples}."
        )
    if options.temperature < 0 or options.top_k < 1:
        raise ConfigurationError(
            f"--temperature must be 0 or more (0 takes the most likely token) and --top_k at least 1; got "
            f"{options.temperature:g} and {options.top_k}."
        )
    if options.ckpt_path is not None:
        model, source = load_checkpoint(options.ckpt_path, device=options.device), options.ckpt_path
    else:
        model, source = ZooTask.from_pretrained(options.pretrained, device=options.device), options.pretrained
    if not isinstance(model, LanguageModel):
        raise CheckpointError(
            f"{source!r} holds model {MODEL_REGISTRY.name_of(type(model))!r}, which does not generate text: give "
            "a language model's (python -m zoo fit --model gpt)."
        )
    model.encode_prompt(options.prompt)  # an unreadable prompt fails before anything is printed
    generator = torch.Generator(device=options.device).manual_seed(options.seed)
    for sample in range(options.num_samples):
        if sample:
            print(SEPARATOR, flush=True)
        sys.stdout.write(options.prompt)
        for piece in model.stream(
            options.prompt, options.max_new_tokens, temperature=options.temperature, top_k=options.top_k,
            generator=generator, use_cache=not options.no_cache,
        ):  # fmt: skip
            sys.stdout.write(piece)
            sys.stdout.flush()
        print(flush=True)
