"""twinformer's PyTorch twin: every component written with idiomatic PyTorch and autograd.

Each module mirrors the file, class names, constructor arguments, parameter
names and parameter shapes of ``numpy_impl``, so state dicts move between
the two backends unchanged. Nothing here imports ``numpy_impl``.
"""

from .activations import GELU, ReLU, SiLU
from .attention import (
    CausalSelfAttention,
    MultiHeadAttention,
    attention_weights,
    merge_qkv_state_dict,
    scaled_dot_product_attention,
    scaled_dot_product_attention_explicit,
    split_qkv_state_dict,
    use_sdpa_backend,
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
from .ffn import FeedForward, SwiGLUFeedForward, swiglu_hidden_dim
from .flash_attention import flash_attention
from .gpt import GPT, GPTConfig
from .kv_cache import KVCache, LayerKVCache
from .linear import Linear
from .loss import CrossEntropyLoss
from .norm import LayerNorm, RMSNorm
from .optim import (
    AdamW,
    clip_grad_norm_,
    configure_param_groups,
    make_lr_scheduler,
    make_optimizer,
)
from .positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from .rope import (
    RotaryEmbedding,
    apply_rope,
    permute_qkv_for_rope,
    rope_cos_sin,
    rope_permutation,
)
from .sampling import filter_logits, generate, sample_inverse_cdf
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
