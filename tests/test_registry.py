"""Tests of the generic :class:`zoo.registry.Registry` and of the global attention registry."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
import torch
from typing_extensions import TypedDict, Unpack

import zoo
from tests.helpers import write_distribution
from tests.helpers.fresh_import import fresh_import_facts
from zoo.registry import (
    DuplicateNameError,
    Entry,
    PluginLoadWarning,
    Registry,
    UnknownArgumentError,
    UnknownNameError,
    accepted_keywords,
    check_kwargs,
)


class Base:
    pass


class Alpha(Base):
    def __init__(self, size: int, scale: float = 1.0) -> None:
        self.size, self.scale = size, scale


class Beta(Base):
    pass


class Gamma(Base):
    pass


class Outsider:
    pass


@pytest.fixture
def registry() -> Registry:
    return Registry("widget")


# -- registration -------------------------------------------------------------------------


def test_register_decorator_returns_the_class_and_registers_it(registry: Registry) -> None:
    @registry.register("first_widget")
    class FirstWidget:
        pass

    assert registry.get("first_widget") is FirstWidget
    assert "first_widget" in registry
    assert len(registry) == 1


def test_register_decorator_defaults_to_snake_case_class_name(registry: Registry) -> None:
    @registry.register()
    class FancyWidget:
        pass

    assert registry.list() == ["fancy_widget"]


def test_add_registers_under_name_and_records_entry(registry: Registry) -> None:
    registry.add("alpha", Alpha, aliases=("first",))
    entry = registry.entry("alpha")
    assert isinstance(entry, Entry)
    assert (entry.name, entry.obj, entry.aliases) == ("alpha", Alpha, ("first",))
    assert entry.source == __name__


def test_aliases_resolve_to_canonical_name(registry: Registry) -> None:
    registry.add("alpha", Alpha, aliases=("first", "a1"))
    assert registry.resolve("first") == "alpha"
    assert registry.resolve("a1") == "alpha"
    assert registry.get("first") is Alpha
    assert registry.list() == ["alpha"]
    assert registry.list(include_aliases=True) == ["a1", "alpha", "first"]


@pytest.mark.parametrize("spelling", ["Dot_Product", "DOT-PRODUCT", "dot-product", "  dot_product "])
def test_lookup_normalizes_case_and_dashes(registry: Registry, spelling: str) -> None:
    registry.add("dot_product", Alpha)
    assert registry.resolve(spelling) == "dot_product"
    assert registry.get(spelling) is Alpha
    assert spelling in registry


@pytest.mark.parametrize("bad", ["Bad Name", "BadName", "bad-name", "1abc", "_hidden", "", "naïve"])
def test_invalid_names_raise_value_error(registry: Registry, bad: str) -> None:
    with pytest.raises(ValueError, match="snake case"):
        registry.add(bad, Alpha)
    assert len(registry) == 0


def test_invalid_alias_raises_value_error(registry: Registry) -> None:
    with pytest.raises(ValueError, match="Invalid widget name 'Bad Alias'"):
        registry.add("alpha", Alpha, aliases=("Bad Alias",))
    assert "alpha" not in registry, "nothing is registered when an alias is invalid"


def test_taken_name_raises_duplicate_name_error(registry: Registry) -> None:
    registry.add("thing", Alpha)
    with pytest.raises(DuplicateNameError, match="'thing' is already registered.*override=True") as info:
        registry.add("thing", Beta)
    assert isinstance(info.value, ValueError)
    assert registry.get("thing") is Alpha, "a failed registration changes nothing"


def test_override_replaces_a_taken_name(registry: Registry) -> None:
    registry.add("thing", Alpha, aliases=("old_alias",))
    registry.add("thing", Beta, override=True)
    assert registry.get("thing") is Beta
    assert "old_alias" not in registry, "the replaced entry's aliases go with it"


def test_same_object_again_is_a_no_op(registry: Registry) -> None:
    registry.add("alpha", Alpha, aliases=("first",))
    registry.add("alpha", Alpha)
    registry.add("alpha", Alpha, aliases=("first",))
    registry.register("alpha")(Alpha)
    assert registry.list(include_aliases=True) == ["alpha", "first"]
    assert registry.entry("alpha").aliases == ("first",)


def test_alias_colliding_with_another_name_raises(registry: Registry) -> None:
    registry.add("alpha", Alpha)
    with pytest.raises(DuplicateNameError, match="'alpha'"):
        registry.add("beta", Beta, aliases=("alpha",))
    assert "beta" not in registry


def test_alias_colliding_with_another_alias_raises(registry: Registry) -> None:
    registry.add("alpha", Alpha, aliases=("shared",))
    with pytest.raises(DuplicateNameError, match="alias of 'alpha'"):
        registry.add("beta", Beta, aliases=("shared",))
    assert registry.get("shared") is Alpha


def test_name_colliding_with_an_alias_raises(registry: Registry) -> None:
    registry.add("alpha", Alpha, aliases=("shared",))
    with pytest.raises(DuplicateNameError):
        registry.add("shared", Beta)


def test_override_can_take_over_an_alias(registry: Registry) -> None:
    registry.add("alpha", Alpha, aliases=("shared", "first"))
    registry.add("beta", Beta, aliases=("shared",), override=True)
    assert registry.get("shared") is Beta
    assert registry.entry("alpha").aliases == ("first",)


def test_unregister_removes_name_and_aliases(registry: Registry) -> None:
    registry.add("alpha", Alpha, aliases=("first",))
    registry.add("beta", Beta)
    registry.unregister("first")  # by alias
    assert registry.list(include_aliases=True) == ["beta"]
    with pytest.raises(UnknownNameError):
        registry.unregister("alpha")


def test_base_class_is_enforced() -> None:
    registry = Registry("widget", base=Base)
    registry.add("alpha", Alpha)
    with pytest.raises(ValueError, match="subclass of Base"):
        registry.add("outsider", Outsider)
    with pytest.raises(ValueError, match="subclass of Base"):
        registry.add("factory", lambda: Alpha(1))
    assert registry.list() == ["alpha"]


def test_tuple_of_bases_accepts_either() -> None:
    registry = Registry("widget", base=(Alpha, Outsider))
    registry.add("outsider", Outsider)
    registry.add("alpha", Alpha)
    with pytest.raises(ValueError, match="Alpha or Outsider"):
        registry.add("beta", Beta)


# -- lookup errors ------------------------------------------------------------------------


def test_unknown_name_is_a_key_error_with_suggestions(registry: Registry) -> None:
    for name, obj in (("additive", Alpha), ("dot_product", Beta), ("gaussian_kernel", Gamma)):
        registry.add(name, obj)
    with pytest.raises(UnknownNameError) as info:
        registry.get("adtive")
    error = info.value
    assert isinstance(error, KeyError)
    message = str(error)
    assert "Did you mean 'additive'" in message
    assert "Registered: additive, dot_product, gaussian_kernel" in message
    assert not message.startswith(("'", '"')), "str() is the plain message, not a quoted KeyError repr"


def test_unknown_name_is_caught_by_except_key_error(registry: Registry) -> None:
    registry.add("alpha", Alpha)
    try:
        registry.get("nothing_like_it")
    except KeyError as error:
        assert "Unknown widget 'nothing_like_it'" in str(error)
        assert "Did you mean" not in str(error)
    else:  # pragma: no cover
        pytest.fail("no KeyError raised")


def test_an_unknown_name_suggests_and_lists_only_the_candidates_given(registry: Registry) -> None:
    """Where only some names would serve (a causal slot, the heads of a layer), the suggestions
    and the list are those, aliases included."""
    registry.add("deltanet", Alpha, aliases=("delta_net",))
    registry.add("delta_graph", Beta)
    registry.add("gamma", Gamma)
    with pytest.raises(UnknownNameError) as info:
        registry.get("deltanett", candidates=["deltanet", "gamma"])
    message = str(info.value)
    assert "Did you mean 'deltanet', 'delta_net'?" in message
    assert "delta_graph" not in message
    assert message.endswith("Names that would serve here: deltanet, gamma.")
    assert registry.get("delta_graph", candidates=["gamma"]) is Beta  # a registered name resolves as ever


def test_suggestions_include_aliases(registry: Registry) -> None:
    registry.add("gaussian_kernel", Alpha, aliases=("nadaraya_watson",))
    with pytest.raises(KeyError, match="nadaraya_watson"):
        registry.get("nadaraya_watsn")


def test_non_string_name_raises_type_error(registry: Registry) -> None:
    with pytest.raises(TypeError, match="must be a string"):
        registry.get(3)  # type: ignore[arg-type]
    assert 3 not in registry


# -- listing ------------------------------------------------------------------------------


def test_list_sorts_naturally(registry: Registry) -> None:
    for index, name in enumerate(["head10", "head2", "head1", "alpha", "head20"]):
        registry.add(name, type(f"W{index}", (), {}))
    assert registry.list() == ["alpha", "head1", "head2", "head10", "head20"]
    assert list(registry) == registry.list()
    assert [e.name for e in registry.entries()] == registry.list()


def test_list_with_wildcard_also_matches_aliases(registry: Registry) -> None:
    registry.add("multi_head", Alpha)
    registry.add("head10", Beta)
    registry.add("head2", Gamma)
    registry.add("mha", Outsider, aliases=("grouped_head_attention",))
    registry.add("additive", type("Other", (), {}))
    assert registry.list("*head*") == ["head2", "head10", "mha", "multi_head"]
    assert registry.list("head?") == ["head2"]
    assert registry.list("ADD*") == ["additive"]
    assert registry.list("nothing*") == []


# -- create -------------------------------------------------------------------------------


def test_create_instantiates_with_keywords(registry: Registry) -> None:
    registry.add("alpha", Alpha)
    widget = registry.create("alpha", size=3, scale=0.5)
    assert isinstance(widget, Alpha)
    assert (widget.size, widget.scale) == (3, 0.5)


def test_create_with_misspelt_keyword_names_closest(registry: Registry) -> None:
    registry.add("alpha", Alpha)
    with pytest.raises(UnknownArgumentError, match=r"'sise' \(did you mean 'size'\?\)") as info:
        registry.create("alpha", sise=3)
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, ValueError)
    assert "Accepted: size, scale" in str(info.value)


def test_create_with_unknown_name_suggests(registry: Registry) -> None:
    registry.add("alpha", Alpha)
    with pytest.raises(UnknownNameError, match="'alpha'"):
        registry.create("alpah", size=1)


# -- the global attention registry ----------------------------------------------------------

BUILT_INS = ["additive", "dot_product", "gaussian_kernel", "multi_head", "self", "cross", "average"]


def test_built_in_attention_names_are_listed() -> None:
    names = zoo.list_attention()
    for name in BUILT_INS:
        assert name in names


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [("bahdanau", "additive"), ("scaled_dot_product", "dot_product"), ("nadaraya_watson", "gaussian_kernel")],
)
def test_built_in_aliases_resolve(alias: str, canonical: str) -> None:
    assert zoo.ATTENTION_REGISTRY.resolve(alias) == canonical
    assert zoo.get_attention(alias) is zoo.get_attention(canonical)


def test_list_attention_wildcard() -> None:
    assert zoo.list_attention("dot*") == ["dot_product"]
    assert "gaussian_kernel" in zoo.list_attention("nadaraya*"), "patterns match aliases too"


def test_built_ins_come_from_the_zoo() -> None:
    for name in BUILT_INS:
        assert zoo.ATTENTION_REGISTRY.entry(name).source == "attention-zoo"


def test_create_attention_misspelt_keyword() -> None:
    with pytest.raises(UnknownArgumentError, match="num_heads"):
        zoo.create_attention("multi_head", embed_dim=8, num_head=2)


def test_create_attention_unknown_name() -> None:
    with pytest.raises(KeyError, match="Did you mean 'additive'"):
        zoo.create_attention("adtive")


class _NegativeDistanceAttention(zoo.Attention):
    """Scores ``-|q - k|_1``: a test variant unlike every built-in."""

    requires_equal_qk_dims = True

    def score(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return -(queries.unsqueeze(-2) - keys.unsqueeze(-3)).abs().sum(-1)


@pytest.fixture
def my_attn() -> Iterator[type[zoo.Attention]]:
    cls = zoo.register_attention("my_attn")(_NegativeDistanceAttention)
    yield cls
    zoo.ATTENTION_REGISTRY.unregister("my_attn")


def test_registered_plugin_is_listed_and_created(my_attn: type[zoo.Attention]) -> None:
    assert "my_attn" in zoo.list_attention()
    attention = zoo.create_attention("my_attn")
    assert type(attention) is my_attn
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 5, 4), torch.randn(2, 5, 6)
    out, weights = attention(q, k, v, torch.tensor([2, 5]), need_weights=True)
    scores = -(q[:, :, None] - k[:, None]).abs().sum(-1)
    padding = torch.arange(5) >= torch.tensor([2, 5])[:, None, None]
    expected = torch.softmax(scores.masked_fill(padding, float("-inf")), dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ v)


def test_unregistered_after_fixture() -> None:
    assert "my_attn" not in zoo.ATTENTION_REGISTRY


def _heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)


def _manual_multi_head(layer: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Multi-head attention with the layer's projections and negative-L1 scores per head."""
    h = layer.num_heads
    qh, kh, vh = _heads(layer.q_proj(q), h), _heads(layer.k_proj(k), h), _heads(layer.v_proj(v), h)
    scores = -(qh[..., :, None, :] - kh[..., None, :, :]).abs().sum(-1)
    heads = torch.softmax(scores, dim=-1) @ vh
    return layer.out_proj(heads.transpose(1, 2).flatten(-2))


def test_plugin_runs_per_head_inside_multi_head(my_attn: type[zoo.Attention]) -> None:
    layer = zoo.create_attention("multi_head", embed_dim=8, num_heads=2, attention="my_attn")
    assert type(layer.score_attention) is my_attn
    q, kv = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    torch.testing.assert_close(layer(q, kv, kv).output, _manual_multi_head(layer, q, kv, kv))


def test_plugin_runs_per_head_inside_self(my_attn: type[zoo.Attention]) -> None:
    layer = zoo.create_attention("self", embed_dim=8, num_heads=4, attention="my_attn")
    assert type(layer.score_attention) is my_attn
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(layer(x).output, _manual_multi_head(layer, x, x, x))


def test_plugin_runs_per_head_inside_cross(my_attn: type[zoo.Attention]) -> None:
    layer = zoo.create_attention("cross", embed_dim=8, num_heads=2, memory_dim=6, attention="my_attn")
    assert type(layer.score_attention) is my_attn
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 7, 6)
    torch.testing.assert_close(layer(x, memory).output, _manual_multi_head(layer, x, memory, memory))


@pytest.fixture
def restore_additive() -> Iterator[None]:
    saved = zoo.ATTENTION_REGISTRY.entry("additive")
    yield
    zoo.ATTENTION_REGISTRY.add(saved.name, saved.obj, aliases=saved.aliases, source=saved.source, override=True)
    assert zoo.get_attention("bahdanau") is zoo.AdditiveAttention


def test_registering_a_taken_built_in_name_raises(restore_additive: None) -> None:
    with pytest.raises(DuplicateNameError, match="'additive' is already registered"):
        zoo.register_attention("additive")(_NegativeDistanceAttention)
    with pytest.raises(DuplicateNameError, match="alias of 'dot_product'"):
        zoo.register_attention("my_other", aliases=("scaled_dot_product",))(_NegativeDistanceAttention)
    assert zoo.get_attention("additive") is zoo.AdditiveAttention
    assert "my_other" not in zoo.ATTENTION_REGISTRY


def test_override_replaces_a_built_in_on_purpose(restore_additive: None) -> None:
    zoo.register_attention("additive", override=True)(_NegativeDistanceAttention)
    assert zoo.get_attention("additive") is _NegativeDistanceAttention


def test_global_registry_enforces_attention_base() -> None:
    with pytest.raises(ValueError, match="subclass of Attention or AttentionLayer"):
        zoo.register_attention("not_attention")(torch.nn.Linear)
    assert "not_attention" not in zoo.ATTENTION_REGISTRY


# -- entry-point plugins ------------------------------------------------------------------

GOOD_MODULE = "zoo_test_plugin_good"
BROKEN_MODULE = "zoo_test_plugin_broken"


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path`` holding a working and a broken ``zoo.attention`` plugin."""
    site = tmp_path / "site"
    site.mkdir()
    write_distribution(
        site,
        "zoo-test-plugin",
        {
            GOOD_MODULE: """
        import torch
        import zoo


        class CosineAttention(zoo.Attention):
            def score(self, queries, keys):
                q = torch.nn.functional.normalize(queries, dim=-1)
                k = torch.nn.functional.normalize(keys, dim=-1)
                return q @ k.transpose(-2, -1)
        """
        },
        {"zoo.attention": {"plugin_cosine": f"{GOOD_MODULE}:CosineAttention"}},
    )
    write_distribution(
        site,
        "zoo-broken-plugin",
        {
            BROKEN_MODULE: """
        raise ImportError("this plugin needs a package that is not installed")
        """
        },
        {"zoo.attention": {"plugin_broken": f"{BROKEN_MODULE}:Nothing"}},
    )
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    for module in (GOOD_MODULE, BROKEN_MODULE):
        sys.modules.pop(module, None)


def test_metadata_sees_the_plugin_distribution(plugin_site: Path) -> None:
    names = {ep.name for ep in metadata.entry_points(group="zoo.attention")}
    assert {"plugin_cosine", "plugin_broken"} <= names


def test_fresh_registry_loads_entry_points_lazily(plugin_site: Path) -> None:
    registry = Registry("attention", base=zoo.Attention, entry_point_group="zoo.attention")
    assert GOOD_MODULE not in sys.modules, "nothing is imported before the first lookup"
    with pytest.warns(PluginLoadWarning, match=r"'plugin_broken' from 'zoo-broken-plugin'.*ImportError"):
        names = registry.list()
    assert "plugin_cosine" in names
    entry = registry.entry("plugin_cosine")
    assert entry.source == "zoo-test-plugin"
    assert entry.obj.__module__ == GOOD_MODULE
    assert issubclass(entry.obj, zoo.Attention)


def test_broken_plugin_is_skipped_and_recorded(plugin_site: Path) -> None:
    registry = Registry("attention", base=zoo.Attention, entry_point_group="zoo.attention")
    with pytest.warns(PluginLoadWarning) as record:
        assert "plugin_cosine" in registry
    assert len(record) == 1, "a broken plugin is reported once"
    assert "plugin_broken" not in registry
    assert set(registry.failed_plugins) == {"plugin_broken"}
    assert "not installed" in registry.failed_plugins["plugin_broken"]
    with pytest.raises(UnknownNameError, match="Plugins that failed to load: plugin_broken"):
        registry.get("plugin_brokn")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning on later lookups
        attention = registry.create("plugin_cosine")
    q, k, v = torch.randn(1, 2, 3), torch.randn(1, 4, 3), torch.randn(1, 4, 5)
    assert attention(q, k, v).output.shape == (1, 2, 5)


def test_plugin_with_a_taken_name_is_skipped(plugin_site: Path) -> None:
    registry = Registry("attention", base=zoo.Attention, entry_point_group="zoo.attention")
    registry.add("plugin_cosine", zoo.DotProductAttention)
    with pytest.warns(PluginLoadWarning) as record:
        assert registry.get("plugin_cosine") is zoo.DotProductAttention
    messages = sorted(str(w.message) for w in record)
    assert len(messages) == 2  # the broken plugin, and the one whose name is taken
    assert "'plugin_cosine'" in messages[1] and "already registered" in messages[1]
    assert "plugin_cosine" in registry.failed_plugins


@pytest.fixture
def global_reload(plugin_site: Path) -> Iterator[None]:
    yield
    for name in ("plugin_cosine", "plugin_broken"):
        if name in zoo.ATTENTION_REGISTRY:
            zoo.ATTENTION_REGISTRY.unregister(name)
    zoo.ATTENTION_REGISTRY.failed_plugins.clear()


def test_global_registry_reload_plugins(global_reload: None) -> None:
    with pytest.warns(PluginLoadWarning, match="plugin_broken"):
        zoo.ATTENTION_REGISTRY.reload_plugins()
    assert zoo.ATTENTION_REGISTRY.entry("plugin_cosine").source == "zoo-test-plugin"
    assert "plugin_broken" in zoo.ATTENTION_REGISTRY.failed_plugins
    for name in BUILT_INS:
        assert name in zoo.list_attention()
    layer = zoo.create_attention("self", embed_dim=8, num_heads=2, attention="plugin_cosine")
    assert layer(torch.randn(2, 3, 8)).output.shape == (2, 3, 8)


def test_global_registry_clean_after_plugin_tests() -> None:
    assert "plugin_cosine" not in zoo.ATTENTION_REGISTRY
    assert not zoo.ATTENTION_REGISTRY.failed_plugins


# -- entry points that point nowhere, or claim one name twice -------------------------------

TWIN_SOURCE = """
import zoo


class Twin(zoo.Attention):
    def score(self, queries, keys):
        return queries @ keys.transpose(-2, -1)
"""


@pytest.fixture
def bad_plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Entry points to a missing module and a missing attribute, and two distributions that
    claim the same name, beside one good plugin."""
    site = tmp_path / "site"
    site.mkdir()
    write_distribution(
        site, "zoo-nomodule-plugin", {}, {"zoo.attention": {"plugin_nomodule": "zoo_test_no_such_module:Attention"}}
    )
    write_distribution(
        site,
        "zoo-noattr-plugin",
        {"zoo_test_noattr": TWIN_SOURCE},
        {"zoo.attention": {"plugin_noattr": "zoo_test_noattr:Missing"}},
    )
    write_distribution(
        site, "zoo-twin-a", {"zoo_test_twin_a": TWIN_SOURCE}, {"zoo.attention": {"plugin_twin": "zoo_test_twin_a:Twin"}}
    )
    write_distribution(
        site, "zoo-twin-b", {"zoo_test_twin_b": TWIN_SOURCE}, {"zoo.attention": {"plugin_twin": "zoo_test_twin_b:Twin"}}
    )
    write_distribution(
        site,
        "zoo-good-plugin",
        {"zoo_test_good": TWIN_SOURCE},
        {"zoo.attention": {"plugin_good": "zoo_test_good:Twin"}},
    )
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    yield site
    for module in ("zoo_test_noattr", "zoo_test_twin_a", "zoo_test_twin_b", "zoo_test_good"):
        sys.modules.pop(module, None)


def _fresh_attention_registry() -> Registry:
    return Registry("attention", base=zoo.Attention, entry_point_group="zoo.attention")


def test_entry_points_that_point_nowhere_are_reported_by_name_and_skipped(bad_plugin_site: Path) -> None:
    registry = _fresh_attention_registry()
    with pytest.warns(PluginLoadWarning) as record:
        names = registry.list()
    messages = " | ".join(str(w.message) for w in record)
    assert (
        "'plugin_nomodule' from 'zoo-nomodule-plugin' (entry point 'zoo_test_no_such_module:Attention'): ModuleNotFoundError"
        in messages
    )
    assert (
        "'plugin_noattr' from 'zoo-noattr-plugin' (entry point 'zoo_test_noattr:Missing'): AttributeError" in messages
    )
    assert "plugin_good" in names and "dot_product" not in names
    assert not {"plugin_nomodule", "plugin_noattr"} & set(names)
    with pytest.raises(UnknownNameError, match="'plugin_noattr' is installed but could not be loaded: AttributeError"):
        registry.get("plugin_noattr")
    with pytest.raises(KeyError, match="'plugin_nomodule' is installed but could not be loaded: ModuleNotFoundError"):
        registry.create("plugin-nomodule")
    assert type(registry.create("plugin_good")).__name__ == "Twin", "the rest keeps working"


def test_two_distributions_claiming_one_name_is_an_error_naming_both(bad_plugin_site: Path) -> None:
    registry = _fresh_attention_registry()
    with pytest.warns(PluginLoadWarning) as record:
        names = registry.list()
    twin = [str(w.message) for w in record if "'plugin_twin'" in str(w.message)]
    assert len(twin) == 1 and "claimed by zoo-twin-a (zoo_test_twin_a:Twin) and zoo-twin-b" in twin[0]
    assert "plugin_twin" not in names and "plugin_good" in names
    assert "zoo_test_twin_a" not in sys.modules and "zoo_test_twin_b" not in sys.modules, "neither claimant is imported"
    with pytest.raises(DuplicateNameError) as info:
        registry.get("plugin_twin")
    message = str(info.value)
    assert "zoo-twin-a (zoo_test_twin_a:Twin)" in message and "zoo-twin-b (zoo_test_twin_b:Twin)" in message
    assert "Uninstall all but one" in message
    assert registry.conflicts["plugin_twin"] == (
        "zoo-twin-a (zoo_test_twin_a:Twin)",
        "zoo-twin-b (zoo_test_twin_b:Twin)",
    )
    assert "plugin_twin" in registry.failed_plugins, "zoo list shows it with its problem"
    assert "plugin_twin" not in registry


def test_plugin_that_registers_itself_on_import_is_credited_to_its_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    source = TWIN_SOURCE.replace("class Twin", '@zoo.register_attention("plugin_selfreg")\nclass Twin')
    write_distribution(
        site,
        "zoo-selfreg-plugin",
        {"zoo_test_selfreg": source},
        {"zoo.attention": {"plugin_selfreg": "zoo_test_selfreg:Twin"}},
    )
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    try:
        zoo.ATTENTION_REGISTRY.reload_plugins()
        assert zoo.ATTENTION_REGISTRY.entry("plugin_selfreg").source == "zoo-selfreg-plugin"
        assert not zoo.ATTENTION_REGISTRY.failed_plugins
    finally:
        zoo.ATTENTION_REGISTRY.unregister("plugin_selfreg")
        sys.modules.pop("zoo_test_selfreg", None)


def test_model_registry_is_full_where_it_is_imported_from() -> None:
    """The tasks fill the model registry, and it lives beside them: never seen half empty."""
    models = fresh_import_facts()["models"]
    assert models == ["classifier", "gpt", "nadaraya_watson", "recall", "sentiment", "seq2seq", "transformer"]


def test_loading_the_figures_leaves_the_plotting_backend_alone() -> None:
    """``zoo.load_checkpoint`` imports the tasks and their figures: a notebook's backend stays."""
    assert fresh_import_facts()["backend"] == "svg"


class _SharedOptions(TypedDict, total=False):
    depth: int
    width: int


def _with_shared_options(name: str, *, scale: float = 1.0, **options: Unpack[_SharedOptions]) -> None:
    """Takes its own arguments and the shared ones, as a recurrent family does (PEP 692)."""


def test_check_kwargs_reads_the_options_a_typed_dict_unpacks() -> None:
    assert accepted_keywords(_with_shared_options) == ["name", "scale", "depth", "width"]
    check_kwargs(_with_shared_options, {"scale": 2.0, "depth": 3}, what="f")
    with pytest.raises(UnknownArgumentError, match=r"'widht' \(did you mean 'width'\?\)"):
        check_kwargs(_with_shared_options, {"widht": 3}, what="f")
    assert accepted_keywords(lambda **anything: None) is None  # a plain **kwargs takes any
