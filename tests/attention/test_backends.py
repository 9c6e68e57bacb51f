"""The backends behind the names: FlexAttention for the mask-defined variants and flash-linear-
attention's kernels for the recurrent families, held equal to the zoo's own forms on the CPU
(eager flex, forward only; fla through stand-ins of its ops), chosen as ``auto`` says, forced as
asked, and refused in one line where they cannot run a call."""

from __future__ import annotations

import pytest
import torch

import zoo
from tests.attention.kernels.test_fla_adapter import calls  # noqa: F401  (the fla stand-ins, a fixture)
from zoo.attention import AttentionContext
from zoo.attention.build.backends import BACKEND_ENV, BackendError, attention_backend, backend_of, requested_backend
from zoo.attention.kernels import fla as fla_module
from zoo.attention.kernels import flex
from zoo.attention.modules import recurrent as recurrent_module
from zoo.models import GPT, SequenceClassifier
from zoo.summary import attention_by_layer

pytest.importorskip("torch.nn.attention.flex_attention", reason="PyTorch before 2.5")

EMBED, HEADS = 64, 4  # heads of 16 features: what flex's kernels take
#: (name, arguments, causal): every variant flex runs, with its pattern's options
FLEX_CASES = [
    ("local", {"window": 24}, True),
    ("local", {"window": 24, "relative_bias": True}, False),
    ("longformer", {"window": 16, "global_tokens": 2}, False),
    ("longformer", {"window": 16, "global_tokens": [0, 40]}, True),
    ("sparse", {"block_size": 16, "summary": 3}, True),
    ("bigbird", {"block_size": 8, "num_random_blocks": 2}, False),
]


def _layer(name: str, options: dict, position: str | None = None) -> zoo.SelfAttention:
    torch.manual_seed(0)
    spec = zoo.AttentionSpec(name, options)
    if position is not None:
        spec = spec.with_position(zoo.create_position(position, d_model=EMBED, num_heads=HEADS))
    layer = zoo.SelfAttention(EMBED, HEADS, spec).eval()
    if options.get("relative_bias"):
        with torch.no_grad():
            layer.score_attention.relative_bias.normal_()
    return layer


def _run(layer: zoo.SelfAttention, backend: str, causal: bool, length: int = 90) -> torch.Tensor:
    x = torch.randn(3, length, EMBED, generator=torch.Generator().manual_seed(1))
    context = AttentionContext.build(3, length, valid_lens=torch.tensor([length, length - 31, 5]), is_causal=causal)
    with torch.no_grad(), attention_backend(backend):
        return layer(x, context).output


@pytest.mark.parametrize(("name", "options", "causal"), FLEX_CASES, ids=lambda c: str(c))
def test_flex_equals_the_variants_own_form_in_a_layer(name: str, options: dict, causal: bool, monkeypatch) -> None:
    layer = _layer(name, options)
    runs = []
    monkeypatch.setattr(flex, "flex_attend", lambda *a, _f=flex.flex_attend, **k: runs.append(1) or _f(*a, **k))
    expected = _run(layer, "zoo", causal)
    assert not runs
    torch.testing.assert_close(_run(layer, "flex", causal), expected, rtol=1e-5, atol=1e-5)
    assert runs == [1], "the flex backend was forced but did not run"


@pytest.mark.parametrize("position", ["alibi", "t5"])
def test_a_bias_scheme_runs_in_flex_as_a_table_over_distances(position: str) -> None:
    layer = _layer("dot_product", {}, position)
    with torch.no_grad():
        for parameter in layer.position.parameters():  # t5's table: not all zeros
            parameter.normal_()
    torch.testing.assert_close(_run(layer, "flex", True), _run(layer, "zoo", True), rtol=1e-5, atol=1e-5)


def test_one_block_mask_a_forward_for_every_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = SequenceClassifier(50, num_classes=2, d_model=EMBED, num_heads=HEADS, num_layers=3, attention="local",
                               attention_kwargs={"window": 16}, position="none").eval()  # fmt: skip
    built = []
    monkeypatch.setattr(flex, "build_block_mask", lambda *a, _f=flex.build_block_mask: built.append(1) or _f(*a))
    tokens, lengths = torch.randint(50, (2, 70)), torch.tensor([70, 40])
    with torch.no_grad():
        expected, _ = model(tokens, lengths)
        with attention_backend("flex"):
            flexed, _ = model(tokens, lengths)
            assert len(built) == 1, f"{len(built)} block masks for one forward of three layers"
            model(tokens, lengths)
    assert len(built) == 2  # the next forward builds its own
    torch.testing.assert_close(flexed, expected, rtol=1e-5, atol=1e-5)


def test_auto_runs_the_zoos_forms_on_the_cpu_and_says_so() -> None:
    assert requested_backend() == "auto"
    assert backend_of(_layer("local", {}), "cpu") == "zoo"
    assert backend_of(zoo.create_attention("gla", embed_dim=EMBED, num_heads=HEADS), "cpu") == "zoo"
    assert backend_of(_layer("linear", {}), "cpu") == "zoo"  # no fused backend at all
    with attention_backend("flex"):
        assert backend_of(_layer("local", {}), "cpu") == "zoo"  # forward only on the CPU: not for training


def test_a_forced_backend_that_cannot_run_a_call_is_refused_in_one_line() -> None:
    layer, x = _layer("local", {}), torch.randn(2, 20, EMBED)
    with attention_backend("flex"):
        with pytest.raises(BackendError, match="FlexAttention does not run torch.float32 on cpu with gradients"):
            layer(x, AttentionContext())  # gradients: the layer's parameters need them
        with torch.no_grad(), pytest.raises(BackendError, match="it returns no weights"):
            layer(x, AttentionContext(need_weights=True))
    with attention_backend("fla"), pytest.raises(BackendError, match="this variant runs on 'zoo' or 'flex'"):
        layer(x, AttentionContext())
    plain = _layer("dot_product", {})
    with torch.no_grad(), attention_backend("flex"), pytest.raises(BackendError, match="SDPA's fused kernel already"):
        plain(x, AttentionContext())


def test_the_backend_is_forced_by_the_environment_and_a_bad_name_is_one_line(monkeypatch) -> None:
    monkeypatch.setenv(BACKEND_ENV, "zoo")
    assert requested_backend() == "zoo"
    with attention_backend("auto"):
        assert requested_backend() == "auto"
    monkeypatch.setenv(BACKEND_ENV, "triton")
    with pytest.raises(BackendError, match=r"ZOO_ATTENTION_BACKEND: unknown attention backend 'triton'; choose one of"):
        requested_backend()


@pytest.mark.parametrize(
    "family", ["retention", "gla", "deltanet", "gated_deltanet", "mamba2", "kda", "rwkv7", "gated_deltaproduct"]
)
def test_fla_runs_the_chunkwise_form_behind_the_familys_name(family: str, calls, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setattr(recurrent_module, "fla_available", lambda device: True)
    torch.manual_seed(0)
    layer = zoo.create_attention(family, embed_dim=24, num_heads=2, chunk_size=16).double().eval()
    x = torch.randn(2, 50, 24, dtype=torch.float64)
    context = AttentionContext.build(2, 50, valid_lens=torch.tensor([50, 33]), is_causal=True)
    with torch.no_grad():
        with attention_backend("zoo"):
            expected = layer(x, context).output
        assert not calls
        with attention_backend("fla"):
            fused = layer(x, context).output  # the chunkwise form in (stand-ins of) fla's kernels
    assert calls, "the fla backend was forced but did not run"
    torch.testing.assert_close(fused, expected, rtol=1e-9, atol=1e-10)
    assert (backend_of(layer, "cuda"), backend_of(layer, "cpu")) == ("fla", "zoo")  # auto: fla on CUDA only


def test_fla_forced_runs_short_inputs_too_and_refuses_weights(calls, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setattr(recurrent_module, "fla_available", lambda device: True)
    layer = zoo.create_attention("gla", embed_dim=24, num_heads=2).double().eval()
    x = torch.randn(2, 10, 24, dtype=torch.float64)  # under chunk_size: the parallel form
    with torch.no_grad():
        layer(x, AttentionContext(is_causal=True))
        assert not calls  # auto keeps the parallel form on short inputs
        with attention_backend("fla"):
            layer(x, AttentionContext(is_causal=True))
            assert len(calls) == 1
            with pytest.raises(
                BackendError, match="'fla' is forced, but it cannot run this call: it returns no weights"
            ):
                layer(x, AttentionContext(is_causal=True, need_weights=True))


@pytest.mark.parametrize(
    ("family", "refused"),
    [("gated_deltanet", True), ("mamba2", True), ("gated_deltaproduct", True), ("gla", False), ("kda", False)],
)
def test_fla_s_gated_backward_is_refused_where_fla_refuses_it(family: str, refused: bool, calls, monkeypatch) -> None:  # noqa: F811
    """On Hopper under Triton < 3.7.1 fla raises in its gated kernels' backward: a call that needs
    it is refused in one line (``auto`` then runs the zoo's form); a forward without gradients runs."""
    monkeypatch.setattr(recurrent_module, "fla_available", lambda device: True)
    monkeypatch.setattr(fla_module, "_gated_backward_broken", lambda device: True)
    layer = zoo.create_attention(family, embed_dim=24, num_heads=2, chunk_size=16).double()
    x = torch.randn(2, 50, 24, dtype=torch.float64)
    with attention_backend("fla"):
        with torch.no_grad():
            layer(x, AttentionContext(is_causal=True))
        assert len(calls) == 1, "a forward without gradients runs in fla's kernels"
        if refused:
            with pytest.raises(BackendError, match=r"it cannot run this call: fla 0.6.0 refuses .* \(its issue #640\)"):
                layer(x, AttentionContext(is_causal=True))
        else:
            layer(x, AttentionContext(is_causal=True)).output.sum().backward()
            assert len(calls) == 2


def test_fla_is_refused_where_it_is_not_installed() -> None:
    layer = zoo.create_attention("gla", embed_dim=24, num_heads=2)
    with attention_backend("fla"), pytest.raises(BackendError, match="need the fla extra .* and a CUDA device"):
        layer(torch.randn(1, 80, 24), AttentionContext(is_causal=True))


def test_a_runs_summary_names_each_layers_fused_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recurrent_module, "fla_available", lambda device: True)
    model = GPT(11, d_model=32, num_heads=2, num_layers=3, attention=["gla", "local", "dot_product"])
    assert attention_by_layer(model, torch.device("cuda"), torch.bfloat16) == [
        "blocks.attention: gla [fla], local, dot_product"  # auto takes no flex yet; SDPA's kernel is dot_product's
    ]
    with attention_backend("flex"):
        assert attention_by_layer(model, torch.device("cuda"), torch.bfloat16) == [
            "blocks.attention: gla, local [flex], dot_product"
        ]
    assert (
        attention_by_layer(model, torch.device("cpu"))
        == attention_by_layer(model)
        == ["blocks.attention: gla, local, dot_product"]
    )
