"""attention-zoo: attention mechanisms behind one contract, selectable by registered name."""

from zoo.attention import (
    ATTENTION_REGISTRY,
    AdditiveAttention,
    Attention,
    AttentionContext,
    AttentionLayer,
    AttentionOutput,
    AttentionSpec,
    CrossAttention,
    DotProductAttention,
    GaussianKernelAttention,
    IncompatibleAttentionError,
    LinearAttention,
    LocalAttention,
    MultiHeadAttention,
    RecurrentLayer,
    SelfAttention,
    causal_mask,
    create_attention,
    get_attention,
    lengths_to_mask,
    list_attention,
    masked_softmax,
    register_attention,
    register_attention_layer,
    require_attention,
)
from zoo.errors import ZooError
from zoo.layers import AddNorm, PositionWiseFFN
from zoo.positions import (
    POSITION_REGISTRY,
    PositionalEncoding,
    PositionScheme,
    create_position,
    list_positions,
    register_position,
)
from zoo.registry import DuplicateNameError, Registry, UnknownArgumentError, UnknownNameError
from zoo.version import __version__
from zoo import testing
from zoo.testing import check_attention


__all__ = [
    "ATTENTION_REGISTRY",
    "AddNorm",
    "AdditiveAttention",
    "Attention",
    "AttentionContext",
    "AttentionLayer",
    "AttentionOutput",
    "AttentionSpec",
    "CrossAttention",
    "DotProductAttention",
    "DuplicateNameError",
    "GaussianKernelAttention",
    "IncompatibleAttentionError",
    "LinearAttention",
    "LocalAttention",
    "MultiHeadAttention",
    "POSITION_REGISTRY",
    "PositionScheme",
    "PositionWiseFFN",
    "PositionalEncoding",
    "Registry",
    "RecurrentLayer",
    "SelfAttention",
    "UnknownArgumentError",
    "UnknownNameError",
    "ZooError",
    "__version__",
    "causal_mask",
    "check_attention",
    "create_attention",
    "create_position",
    "get_attention",
    "lengths_to_mask",
    "list_attention",
    "list_models",
    "from_pretrained",
    "list_positions",
    "load_checkpoint",
    "masked_softmax",
    "register_attention",
    "register_attention_layer",
    "register_position",
    "require_attention",
    "testing",
]


def __getattr__(name: str) -> object:
    """``zoo.load_checkpoint``, ``zoo.from_pretrained`` and ``zoo.list_models`` import Lightning
    and the tasks on first use, not with ``import zoo``."""
    if name == "load_checkpoint":
        from zoo.checkpoint import load_checkpoint

        return load_checkpoint
    if name == "from_pretrained":
        from zoo.tasks import ZooTask

        return ZooTask.from_pretrained
    if name == "list_models":
        from zoo.tasks import list_models

        return list_models
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


# Last, once every name above exists: modules named by `--import` in a parent process (their
# list travels in ZOO_IMPORTS) are imported in this one too. See zoo.plugins.
from zoo.plugins import import_from_environment as _import_from_environment  # noqa: E402

_import_from_environment()
