"""twinformer's PyTorch twin: every component written with idiomatic PyTorch and autograd.

Each module mirrors the file, class names, constructor arguments, parameter
names and parameter shapes of ``numpy_impl``, so state dicts move between
the two backends unchanged. Nothing here imports ``numpy_impl``.
"""

from .activations import GELU
from .attention import (
    CausalSelfAttention,
    attention_weights,
    scaled_dot_product_attention,
    scaled_dot_product_attention_explicit,
    use_sdpa_backend,
)
from .block import Block
from .dropout import Dropout
from .embedding import Embedding, check_token_ids
from .ffn import FeedForward
from .flash_attention import flash_attention
from .gpt import GPT, GPTConfig
from .kv_cache import KVCache, LayerKVCache
from .linear import Linear
from .loss import CrossEntropyLoss
from .norm import LayerNorm
from .optim import (
    AdamW,
    clip_grad_norm_,
    configure_param_groups,
    make_lr_scheduler,
    make_optimizer,
)
from .positional import LearnedPositionalEmbedding
from .sampling import filter_logits, generate, sample_inverse_cdf

__all__ = [
    "GELU",
    "GPT",
    "AdamW",
    "Block",
    "CausalSelfAttention",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "FeedForward",
    "GPTConfig",
    "KVCache",
    "LayerKVCache",
    "LayerNorm",
    "LearnedPositionalEmbedding",
    "Linear",
    "attention_weights",
    "check_token_ids",
    "clip_grad_norm_",
    "configure_param_groups",
    "filter_logits",
    "flash_attention",
    "generate",
    "make_lr_scheduler",
    "make_optimizer",
    "sample_inverse_cdf",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_explicit",
    "use_sdpa_backend",
]
