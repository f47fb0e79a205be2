"""twinformer's from-scratch witness: NumPy forward passes, hand-written backward passes.

Never imports torch. Each module mirrors ``torch_impl`` file for file.
"""

from .activations import GELU, ReLU, SiLU
from .attention import (
    CausalSelfAttention,
    MultiHeadAttention,
    merge_qkv_state_dict,
    scaled_dot_product_attention,
    scaled_dot_product_attention_backward,
    split_qkv_state_dict,
)
from .block import Block
from .char_tokenizer import CharTokenizer
from .dropout import Dropout
from .embedding import Embedding
from .encoder import (
    EncoderBlock,
    MeanPool,
    SelfAttention,
    TransformerClassifier,
)
from .ffn import FeedForward, SwiGLUFeedForward, swiglu_hidden_dim
from .flash_attention import flash_attention, flash_attention_backward
from .gpt import GPT, GPTConfig
from .kv_cache import KVCache, LayerKVCache
from .linear import Linear
from .loss import CrossEntropyLoss
from .module import Module, ModuleList, Parameter
from .norm import LayerNorm, RMSNorm
from .optim import AdamW, clip_grad_norm_, configure_param_groups, cosine_lr
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from .rope import (
    RotaryEmbedding,
    apply_rope,
    permute_qkv_for_rope,
    rope_cos_sin,
    rope_permutation,
)
from .sampling import filter_logits, generate
from .seq2seq import CrossAttention, DecoderBlock, Seq2SeqTransformer
from .tokenizer import BPETokenizer
from .tokenizer_files import DecodeStream

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
    "KVCache",
    "LayerKVCache",
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
    "flash_attention",
    "flash_attention_backward",
    "generate",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "ReLU",
    "SiLU",
    "MultiHeadAttention",
    "merge_qkv_state_dict",
    "split_qkv_state_dict",
    "SwiGLUFeedForward",
    "swiglu_hidden_dim",
    "RMSNorm",
    "RotaryEmbedding",
    "apply_rope",
    "permute_qkv_for_rope",
    "rope_cos_sin",
    "rope_permutation",
]
