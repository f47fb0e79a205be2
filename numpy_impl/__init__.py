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
from .module import Module, ModuleList, Parameter
from .norm import LayerNorm
from .optim import AdamW, clip_grad_norm_, configure_param_groups, cosine_lr
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from .sampling import filter_logits, generate
from .seq2seq import CrossAttention, DecoderBlock, Seq2SeqTransformer
from .tokenizer import CharTokenizer

__all__ = [
    "GELU",
    "GPT",
    "AdamW",
    "Block",
    "CausalSelfAttention",
    "CharTokenizer",
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
