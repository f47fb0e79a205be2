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
)
from .block import Block
from .dropout import Dropout
from .embedding import Embedding, check_token_ids
from .encoder import (
    EncoderBlock,
    MeanPool,
    SelfAttention,
    TransformerClassifier,
)
from .ffn import FeedForward
from .gpt import GPT, GPTConfig
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
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from .sampling import filter_logits, generate
from .seq2seq import CrossAttention, DecoderBlock, Seq2SeqTransformer

__all__ = [
    "GELU",
    "GPT",
    "AdamW",
    "Block",
    "CausalSelfAttention",
    "CrossEntropyLoss",
    "Dropout",
    "CrossAttention",
    "DecoderBlock",
    "Embedding",
    "EncoderBlock",
    "MeanPool",
    "SelfAttention",
    "Seq2SeqTransformer",
    "SinusoidalPositionalEncoding",
    "TransformerClassifier",
    "FeedForward",
    "GPTConfig",
    "LayerNorm",
    "LearnedPositionalEmbedding",
    "Linear",
    "attention_weights",
    "check_token_ids",
    "clip_grad_norm_",
    "configure_param_groups",
    "filter_logits",
    "generate",
    "make_lr_scheduler",
    "make_optimizer",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_explicit",
]
