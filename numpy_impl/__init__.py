"""twinformer's from-scratch witness: NumPy forward passes, hand-written backward passes.

Never imports torch. Each module mirrors ``torch_impl`` file for file.
"""

from .activations import GELU
from .attention import (
    CausalSelfAttention,
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
)
from .block import Block
from .dropout import Dropout
from .embedding import Embedding
from .ffn import FeedForward
from .gpt import GPT, GPTConfig
from .linear import Linear
from .loss import CrossEntropyLoss
from .module import Module, ModuleList, Parameter
from .norm import LayerNorm
from .optim import AdamW, clip_grad_norm_, configure_param_groups, cosine_lr
from .positional import LearnedPositionalEmbedding
from .sampling import filter_logits, generate
from .tokenizer import BPETokenizer, CharTokenizer, DecodeStream

__all__ = [
    "GELU",
    "GPT",
    "AdamW",
    "BPETokenizer",
    "Block",
    "CausalSelfAttention",
    "CharTokenizer",
    "CrossEntropyLoss",
    "DecodeStream",
    "Dropout",
    "Embedding",
    "FeedForward",
    "GPTConfig",
    "LayerNorm",
    "LearnedPositionalEmbedding",
    "Linear",
    "Module",
    "ModuleList",
    "Parameter",
    "clip_grad_norm_",
    "configure_param_groups",
    "cosine_lr",
    "filter_logits",
    "generate",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
]
