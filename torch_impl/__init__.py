"""twinformer's PyTorch twin: every component written with idiomatic PyTorch and autograd.

Each module mirrors the file, class names, constructor arguments, parameter
names and parameter shapes of ``numpy_impl``, so state dicts move between
the two backends unchanged. Nothing here imports ``numpy_impl``.
"""

from .activations import GELU, ReLU, SiLU
from .attention import (
    SelfAttention,
    merge_heads,
    scaled_dot_product_attention,
    softmax,
    split_heads,
    use_sdpa_backend,
)
from .block import Block
from .dropout import Dropout
from .embedding import Embedding, check_token_ids
from .encoder import ClassifierHead, Encoder, MeanPool, TransformerClassifier
from .ffn import FeedForward, SwiGLUFeedForward, swiglu_hidden_dim
from .flash_attention import flash_attention
from .gpt import GPT, GPTConfig
from .kv_cache import KVCache, LayerKVCache
from .linear import Linear
from .loss import CrossEntropyLoss
from .masks import causal_attn_mask, key_padding_attn_mask, to_attn_mask
from .multihead_attention import MultiHeadAttention, merge_qkv_state_dict, split_qkv_state_dict
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
from .sampling import filter_logits, generate, sample_inverse_cdf
from .seq2seq import Decoder, DecoderBlock, Seq2SeqTransformer
from .tokenizer import BPETokenizer
from .tokenizer_files import DecodeStream

__all__ = [
    "AdamW",
    "apply_rope",
    "Block",
    "BPETokenizer",
    "causal_attn_mask",
    "check_token_ids",
    "ClassifierHead",
    "clip_grad_norm_",
    "configure_param_groups",
    "cosine_lr",
    "CrossEntropyLoss",
    "Decoder",
    "DecoderBlock",
    "DecodeStream",
    "Dropout",
    "Embedding",
    "Encoder",
    "FeedForward",
    "filter_logits",
    "flash_attention",
    "GELU",
    "generate",
    "GPT",
    "GPTConfig",
    "key_padding_attn_mask",
    "KVCache",
    "LayerKVCache",
    "LayerNorm",
    "LearnedPositionalEmbedding",
    "Linear",
    "MeanPool",
    "merge_heads",
    "merge_qkv_state_dict",
    "MultiHeadAttention",
    "permute_qkv_for_rope",
    "ReLU",
    "RMSNorm",
    "rope_cos_sin",
    "rope_permutation",
    "RotaryEmbedding",
    "sample_inverse_cdf",
    "scaled_dot_product_attention",
    "SelfAttention",
    "Seq2SeqTransformer",
    "SiLU",
    "SinusoidalPositionalEncoding",
    "softmax",
    "split_heads",
    "split_qkv_state_dict",
    "swiglu_hidden_dim",
    "SwiGLUFeedForward",
    "to_attn_mask",
    "TransformerClassifier",
    "use_sdpa_backend",
]
