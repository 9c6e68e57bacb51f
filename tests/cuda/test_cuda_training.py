"""Training, decoding and resuming on a GPU: every architecture trains a few steps in
``bf16-mixed`` through the CLI, the Transformer decodes the same with and without its cache,
and an interrupted run resumes on its trajectory.

Tests marked ``cuda`` are skipped without a GPU; those parametrized over ``cpu`` and ``cuda``
run their CPU twin in the default suite. Translation and sentiment read the real corpora
(``$ZOO_DATA_DIR`` or ``../shared/data``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.helpers.steplog import read_losses
from zoo.commands import main
from zoo.models.decoding import DecodeLimits, greedy_decode
from zoo.models.transformer import Transformer
from zoo.tasks import list_models

CUDA = pytest.param("cuda", marks=pytest.mark.cuda)
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]
#: per registered model: a small, quick version of its data and schedule ({data}: the corpora)
SMALL = {
    "nadaraya_watson": [],
    "classifier": [
        "--data",
        "sst2",
        "--data.path",
        "{data}/sst2",
        "--data.limit_train",
        "2000",
        "--model.warmup_steps",
        "5",
    ],
    "sentiment": ["--data.path", "{data}/sst2", "--data.limit_train", "2000", "--model.warmup_steps", "5"],
    "seq2seq": [
        "--data.path",
        "{data}/fra-eng.zip",
        "--data.limit_train",
        "3000",
        "--data.vocab_size",
        "500",
        "--model.warmup_steps",
        "5",
    ],
    "transformer": [
        "--data.path",
        "{data}/fra-eng.zip",
        "--data.limit_train",
        "3000",
        "--data.vocab_size",
        "500",
        "--model.warmup_steps",
        "5",
    ],
    "gpt": [
        *["--data.path", "{data}/tinyshakespeare/input.txt", "--data.block_size", "64", "--model.warmup_steps", "5"],
        *["--model.d_model", "64", "--model.num_heads", "4", "--model.num_layers", "2"],
    ],
    "recall": [
        *["--data.seq_len", "64", "--data.num_kv_pairs", "4", "--data.vocab_size", "128", "--data.num_train", "2560"],
        *["--data.num_test", "128", "--model.lr", "3e-3"],
    ],
}
STEPS = 40


def _fit(model: str, accelerator: str, log: Path, data: Path | None, *extra: str) -> list[str]:
    small = [arg.format(data=data) for arg in SMALL[model]]
    return ["fit", "--model", model, *small, "--trainer.accelerator", accelerator, "--trainer.devices", "1",
            "--trainer.precision", "bf16-mixed", "--trainer.limit_val_batches", "2", *QUIET,
            "--trainer.callbacks+=tests.helpers.steplog.StepLosses", "--trainer.callbacks.path", str(log), *extra]  # fmt: skip


def test_every_registered_model_has_a_small_recipe() -> None:
    assert set(list_models()) <= set(SMALL)


@pytest.mark.parametrize(
    ("model", "accelerator"),
    [("nadaraya_watson", "cpu"), *(pytest.param(model, "gpu", marks=pytest.mark.cuda) for model in SMALL)],
)
def test_each_architecture_trains_in_bf16_mixed(in_tmp, request, model: str, accelerator: str) -> None:
    data = request.getfixturevalue("data_dir") if any("{data}" in arg for arg in SMALL[model]) else None
    main(
        _fit(
            model,
            accelerator,
            in_tmp / "losses.jsonl",
            data,
            "--trainer.max_steps",
            str(STEPS),
            "--trainer.max_epochs",
            "1000",
        )
    )
    losses = [loss for _, loss in sorted(read_losses(in_tmp / "losses.jsonl").items())]
    assert len(losses) == STEPS and all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-5:]) < sum(losses[:5]), f"{model}: the loss did not fall in {STEPS} bf16-mixed steps: {losses}"
    assert (next((in_tmp / "runs" / model).glob("version_*")) / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.cuda
def test_a_gpt_trains_sharded_by_fsdp(in_tmp, data_dir) -> None:
    """FSDP (Lightning's ``fsdp`` strategy) on the GPUs there are: the model outgrowing one device
    is what it is for; here it only has to train as DDP would (docs/scaling.md)."""
    main(_fit("gpt", "gpu", in_tmp / "losses.jsonl", data_dir, "--trainer.max_steps", str(STEPS),
              "--trainer.strategy", "fsdp", "--trainer.devices", str(torch.cuda.device_count())))  # fmt: skip
    losses = [loss for _, loss in sorted(read_losses(in_tmp / "losses.jsonl").items())]
    assert len(losses) == STEPS and sum(losses[-5:]) < sum(losses[:5])


@pytest.mark.cuda
def test_an_interrupted_gpu_run_resumes_on_the_same_trajectory(in_tmp) -> None:
    epochs = ["--data.batch_size", "10", "--trainer.max_epochs", "4"]  # five steps an epoch, 20 in all
    main(
        _fit("nadaraya_watson", "gpu", in_tmp / "reference.jsonl", None, *epochs, "--trainer.logger.name", "reference")
    )
    reference = read_losses(in_tmp / "reference.jsonl")
    with pytest.raises(SystemExit):
        main(
            _fit(
                "nadaraya_watson",
                "gpu",
                in_tmp / "interrupted.jsonl",
                None,
                *epochs,
                "--trainer.callbacks.signal_after_step",
                "7",
            )
        )
    main(_fit("nadaraya_watson", "gpu", in_tmp / "resumed.jsonl", None, *epochs, "--ckpt_path", "last"))
    interrupted, resumed = read_losses(in_tmp / "interrupted.jsonl"), read_losses(in_tmp / "resumed.jsonl")
    assert max(interrupted) == 7 and min(resumed) == 8 and max(resumed) == 20
    for step, loss in (interrupted | resumed).items():
        assert loss == pytest.approx(reference[step], rel=1e-5), f"step {step}"


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("attention", ["dot_product", "local", "linear"])
def test_decoding_with_and_without_the_cache_agrees_with_teacher_forcing(device: str, attention: str) -> None:
    torch.manual_seed(0)
    model = Transformer(50, d_model=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, ffn_hidden=128,
                        attention=attention, norm_first=True, padding_idx=0).to(device).eval()  # fmt: skip
    src_lens = torch.tensor([9, 4, 1], device=device)
    src = torch.randint(4, 50, (3, 9), device=device).masked_fill(
        torch.arange(9, device=device) >= src_lens[:, None], 0
    )
    tgt_in = torch.cat([torch.full((3, 1), 2, device=device), torch.randint(4, 50, (3, 7), device=device)], dim=1)
    limits = DecodeLimits(bos=2, eos=3, max_len=12, forbid=(0, 2))
    for dtype, tolerance in ((torch.float32, 1e-4), (torch.bfloat16, 5e-2)):
        with torch.no_grad(), torch.autocast(device, dtype=dtype, enabled=dtype != torch.float32):
            teacher_forced = model(src, src_lens, tgt_in)[0].float()
            decoded = {}
            for use_cache in (True, False):
                model.use_cache = use_cache
                state, steps = model.encode(src, src_lens), []
                for t in range(tgt_in.shape[1]):
                    logits, state = model.decode_step(tgt_in[:, t], state)
                    steps.append(logits.float())
                torch.testing.assert_close(torch.stack(steps, 1), teacher_forced, atol=tolerance, rtol=tolerance)
                decoded[use_cache] = greedy_decode(model, src, src_lens, limits)
        assert all(len(tokens) > 0 for tokens in decoded[True])
        if dtype == torch.float32:  # in bfloat16 a near-tie may round either way
            assert decoded[True] == decoded[False]


@pytest.mark.cuda
def test_a_transformer_training_step_makes_no_host_sync() -> None:
    """A host sync per step (``.item()``, ``int(tensor)``, a data-dependent shape) stalls the GPU's
    queue; CUDA's sync debug mode turns each into an error."""
    torch.manual_seed(0)
    model = Transformer(
        50, d_model=64, num_heads=4, num_encoder_layers=2, num_decoder_layers=2, ffn_hidden=128, padding_idx=0
    ).cuda()
    src_lens = torch.tensor([9, 4, 1], device="cuda")
    src = torch.randint(4, 50, (3, 9), device="cuda")
    tgt_in, tgt_out = torch.randint(4, 50, (3, 7), device="cuda"), torch.randint(4, 50, (3, 7), device="cuda")
    model(src, src_lens, tgt_in)  # the first call may set up kernels and caches
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits, _ = model(src, src_lens, tgt_in)
        torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), tgt_out.flatten()).backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
