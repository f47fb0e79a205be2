"""Hugging Face interop, GPT-2: its weights into the project's layout and back
(``transformers`` needed by :func:`to_gpt2` and :func:`gpt2_config` only).

GPT-2 (Radford et al. 2019) as ``GPT2LMHeadModel`` names it, and here::

    transformer.wte.weight              tok_emb.weight           (V, C)
    transformer.wpe.weight              pos_emb.weight           (block_size, C)
    transformer.h.N.ln_1.*              blocks.N.ln1.*
    transformer.h.N.attn.c_attn.*       blocks.N.attn.qkv_proj.*  weight transposed
    transformer.h.N.attn.c_proj.*       blocks.N.attn.out_proj.*  weight transposed
    transformer.h.N.ln_2.*              blocks.N.ln2.*
    transformer.h.N.mlp.c_fc.*          blocks.N.ffn.fc1.*        weight transposed
    transformer.h.N.mlp.c_proj.*        blocks.N.ffn.fc2.*        weight transposed
    transformer.ln_f.*                  ln_f.*
    lm_head.weight                      head.weight              (tied to wte by default)

GPT-2's four projections are ``Conv1D``, ``weight`` stored ``(in, out)``: the transpose
of ``nn.Linear``'s. The renames and transposes are ``numpy_impl/pretrained.py``'s
(chapter 17); this module adds the configs and the ``transformers`` models.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from numpy_impl import pretrained

from .interop import _flag, _get, _has, _hf_model, _integer, _numpy

_GELU = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}
#: GPT2Config's defaults, for a config.json that leaves a field out (the hub's gpt2 has no
#: tie_word_embeddings, for one).
GPT2_DEFAULTS = {
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_inner": None,
    "activation_function": "gelu_new",
    "resid_pdrop": 0.1,
    "embd_pdrop": 0.1,
    "attn_pdrop": 0.1,
    "layer_norm_epsilon": 1e-5,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}


def from_gpt2_config(hf_config) -> dict:
    """The GPTConfig fields (a dict) of the model a ``GPT2Config`` (or its ``to_dict()``)
    describes.

    Raises:
        ValueError: a setting this project's GPT does not have (named): another
            activation, a LayerNorm epsilon other than 1e-5, unscaled or
            layer-scaled attention scores, cross-attention, or three different
            dropout probabilities (this GPT has one).
    """
    if isinstance(hf_config, Mapping):
        model_type = hf_config.get("model_type", "gpt2")
        if model_type != "gpt2":
            raise ValueError(f"model_type: expected 'gpt2', got {model_type!r}")
        hf_config = {**GPT2_DEFAULTS, **hf_config}
    activation = _get(hf_config, "activation_function")
    if activation not in _GELU:
        raise ValueError(
            f"activation_function: expected one of {sorted(_GELU)} (GELU), got {activation!r}"
        )
    eps = _get(hf_config, "layer_norm_epsilon")
    if isinstance(eps, bool) or not isinstance(eps, int | float) or eps != 1e-5:
        raise ValueError(f"layer_norm_epsilon: this GPT's LayerNorm uses 1e-5, got {eps!r}")
    for name, wanted in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
    ):
        value = _get(hf_config, name) if _has(hf_config, name) else wanted
        if not isinstance(value, bool) or value != wanted:  # "false" is not False
            raise ValueError(f"{name}: this GPT needs {wanted}, got {value!r}")
    drops = {k: _get(hf_config, k) for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")}
    if len(set(drops.values())) != 1:
        raise ValueError(
            f"resid_pdrop, embd_pdrop, attn_pdrop: this GPT has one dropout, got {drops}"
        )
    tied = _flag(hf_config, "tie_word_embeddings", True)
    return {
        "vocab_size": _integer(hf_config, "vocab_size"),
        "block_size": _integer(hf_config, "n_positions"),
        "n_layers": _integer(hf_config, "n_layer"),
        "n_heads": _integer(hf_config, "n_head"),
        "d_model": _integer(hf_config, "n_embd"),
        "d_ff": _get(hf_config, "n_inner"),  # None: 4 * d_model in both
        "dropout": float(drops["resid_pdrop"]),
        "bias": True,  # GPT-2 has every bias
        "tie_weights": bool(tied),
        "gelu_approximate": _GELU[activation],
    }


def gpt2_config_dict(model_config: dict) -> dict:
    """The ``config.json`` fields (``model_type`` and ``architectures`` included) of a
    ``GPT2LMHeadModel`` with these GPTConfig fields.

    Raises:
        ValueError: a model without biases, or not GPT-2-style, naming the field.
    """
    if not model_config.get("bias", True):
        raise ValueError("bias: GPT-2 has biases everywhere; this model has none")
    # A post-norm model has exactly GPT-2's weights: without this check it would export
    # without an error and compute something else (a silent wrong answer).
    for name, wanted in (("pos_emb", "learned"), ("norm", "layernorm"), ("ffn", "gelu"),
                         ("norm_position", "pre")):  # fmt: skip
        value = model_config.get(name, wanted)
        if value != wanted:
            raise ValueError(f"{name}: GPT-2 needs {wanted!r}, this model has {value!r}")
    gelu = model_config.get("gelu_approximate", "tanh")
    dropout = float(model_config.get("dropout", 0.0))
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": model_config["vocab_size"],
        "n_positions": model_config.get("block_size", 64),
        "n_embd": model_config.get("d_model", 128),
        "n_layer": model_config.get("n_layers", 4),
        "n_head": model_config.get("n_heads", 4),
        "n_inner": model_config.get("d_ff"),
        "activation_function": "gelu_new" if gelu == "tanh" else "gelu",
        "resid_pdrop": dropout,
        "embd_pdrop": dropout,
        "attn_pdrop": dropout,
        "layer_norm_epsilon": 1e-5,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "tie_word_embeddings": model_config.get("tie_weights", True),
        # GPT-2's 50256 is its BPE's <|endoftext|>; a char vocabulary has none
        "bos_token_id": None,
        "eos_token_id": None,
    }


def gpt2_config(model_config: dict):
    """The ``transformers.GPT2Config`` of :func:`gpt2_config_dict`'s fields (ValueError as
    there; ImportError without transformers)."""
    from transformers import GPT2Config

    fields = gpt2_config_dict(model_config)
    del fields["model_type"], fields["architectures"]
    return GPT2Config(**fields)


def _shape_args(model_config: dict) -> dict:
    return {
        "n_layers": model_config.get("n_layers", 4),
        "tied": model_config.get("tie_weights", True),
        "bias": model_config.get("bias", True),
    }


def from_gpt2_state(hf_state: Mapping, model_config: dict) -> dict[str, np.ndarray]:
    """GPT-2's state dict (tensors or arrays) as this project's
    (:func:`numpy_impl.pretrained.from_gpt2_state`; ValueError: keys missing or unexpected,
    all listed, the causal-mask buffers ignored)."""
    arrays = {k: _numpy(v) for k, v in hf_state.items()}
    return pretrained.from_gpt2_state(arrays, **_shape_args(model_config))


def to_gpt2_state(state: Mapping, model_config: dict) -> dict[str, np.ndarray]:
    """The inverse of :func:`from_gpt2_state`."""
    arrays = {k: _numpy(v) for k, v in state.items()}
    return pretrained.to_gpt2_state(arrays, **_shape_args(model_config))


def from_gpt2(hf_model) -> tuple[dict, dict[str, np.ndarray]]:
    """``(model_config, state_dict)`` of a ``GPT2LMHeadModel``, for ``make_backend`` or
    ``save_checkpoint`` (ValueError: as :func:`from_gpt2_config`, :func:`from_gpt2_state`)."""
    model_config = from_gpt2_config(hf_model.config)
    return model_config, from_gpt2_state(hf_model.state_dict(), model_config)


def to_gpt2(model_config: dict, state: Mapping, dtype=None):
    """A ``transformers.GPT2LMHeadModel`` holding this project's weights (a state dict from
    either backend), in eval mode, in ``dtype`` (default: the weights').

    Raises:
        ImportError: transformers is not installed.
        ValueError: as :func:`gpt2_config` and :func:`to_gpt2_state`.
    """
    from transformers import GPT2LMHeadModel

    hf_config = gpt2_config(model_config)  # first: a wrong architecture is named as such
    hf_state = to_gpt2_state(state, model_config)
    dtype = dtype or hf_state["transformer.wte.weight"].dtype
    tied = model_config.get("tie_weights", True)  # the causal-mask buffers stay the model's
    return _hf_model(GPT2LMHeadModel(hf_config), hf_state, dtype, pretrained.BUFFER_SUFFIXES, tied)
