"""Hugging Face interop, GPT-2: its weights into the project's layout and back.

``transformers`` is needed by :func:`to_gpt2` and :func:`gpt2_config` only
(``pip install -e ".[interop]"``); the conversions work on NumPy arrays.

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

The four projections are ``Conv1D`` modules in GPT-2, which compute
``x @ weight + bias`` with ``weight`` stored as ``(in_features, out_features)``:
the transpose of ``nn.Linear``'s ``(out, in)``, the layout of both backends
here. Everything else is the same, including the order q, k, v inside
``c_attn`` and the head split (``(B, T, C) -> (B, T, n_heads, d_k)``).

The architectures agree when GPT-2's config asks for what this project
builds: the tanh GELU (``activation_function="gelu_new"``, Hendrycks & Gimpel
2016; GPT-2's default), LayerNorm epsilon 1e-5 (GPT-2's default), scores scaled
by 1/sqrt(d_k) and no cross-attention. :func:`from_gpt2_config` refuses the rest.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .interop import _check_keys, _get, _has, _numpy

#: (our name, GPT-2's name without "transformer.", transposed?) for block N.
_BLOCK_KEYS = (
    ("ln1.weight", "ln_1.weight", False),
    ("ln1.bias", "ln_1.bias", False),
    ("attn.qkv_proj.weight", "attn.c_attn.weight", True),
    ("attn.qkv_proj.bias", "attn.c_attn.bias", False),
    ("attn.out_proj.weight", "attn.c_proj.weight", True),
    ("attn.out_proj.bias", "attn.c_proj.bias", False),
    ("ln2.weight", "ln_2.weight", False),
    ("ln2.bias", "ln_2.bias", False),
    ("ffn.fc1.weight", "mlp.c_fc.weight", True),
    ("ffn.fc1.bias", "mlp.c_fc.bias", False),
    ("ffn.fc2.weight", "mlp.c_proj.weight", True),
    ("ffn.fc2.bias", "mlp.c_proj.bias", False),
)
#: Non-trainable buffers some transformers versions keep in GPT-2's state dict.
_BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias")
_GELU = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}


def _key_table(n_layers: int, tied: bool) -> list[tuple[str, str, bool]]:
    """(our key, GPT-2's key, transposed?) for every parameter."""
    table = [
        ("tok_emb.weight", "transformer.wte.weight", False),
        ("pos_emb.weight", "transformer.wpe.weight", False),
    ]
    for n in range(n_layers):
        table += [(f"blocks.{n}.{ours}", f"transformer.h.{n}.{theirs}", t) for ours, theirs, t in
                  _BLOCK_KEYS]  # fmt: skip
    table += [
        ("ln_f.weight", "transformer.ln_f.weight", False),
        ("ln_f.bias", "transformer.ln_f.bias", False),
    ]
    if not tied:
        table.append(("head.weight", "lm_head.weight", False))
    return table


def from_gpt2_config(hf_config) -> dict:
    """The GPTConfig fields (a dict) of the model a GPT-2 config describes.

    Args:
        hf_config: a ``transformers.GPT2Config`` or its ``to_dict()``.

    Returns:
        ``{"vocab_size", "block_size", "n_layers", "n_heads", "d_model", "d_ff",
        "dropout", "bias", "tie_weights", "gelu_approximate"}``.

    Raises:
        ValueError: a setting this project's GPT does not have (named): another
            activation, a LayerNorm epsilon other than 1e-5, unscaled or
            layer-scaled attention scores, cross-attention, or three different
            dropout probabilities (this GPT has one).
    """
    activation = _get(hf_config, "activation_function")
    if activation not in _GELU:
        raise ValueError(
            f"activation_function: expected one of {sorted(_GELU)} (GELU), got {activation!r}"
        )
    eps = _get(hf_config, "layer_norm_epsilon")
    if eps != 1e-5:
        raise ValueError(f"layer_norm_epsilon: this GPT's LayerNorm uses 1e-5, got {eps}")
    for name, wanted in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
    ):
        value = _get(hf_config, name) if _has(hf_config, name) else wanted
        if bool(value) != wanted:
            raise ValueError(f"{name}: this GPT needs {wanted}, got {value!r}")
    drops = {k: _get(hf_config, k) for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop")}
    if len(set(drops.values())) != 1:
        raise ValueError(
            f"resid_pdrop, embd_pdrop, attn_pdrop: this GPT has one dropout, got {drops}"
        )
    tied = (
        _get(hf_config, "tie_word_embeddings") if _has(hf_config, "tie_word_embeddings") else True
    )
    return {
        "vocab_size": int(_get(hf_config, "vocab_size")),
        "block_size": int(_get(hf_config, "n_positions")),
        "n_layers": int(_get(hf_config, "n_layer")),
        "n_heads": int(_get(hf_config, "n_head")),
        "d_model": int(_get(hf_config, "n_embd")),
        "d_ff": _get(hf_config, "n_inner"),  # None: 4 * d_model in both
        "dropout": float(drops["resid_pdrop"]),
        "bias": True,  # GPT-2 has every bias
        "tie_weights": bool(tied),
        "gelu_approximate": _GELU[activation],
    }


def gpt2_config(model_config: dict):
    """The ``transformers.GPT2Config`` of a model with these GPTConfig fields.

    Raises:
        ImportError: transformers is not installed (``pip install -e ".[interop]"``).
        ValueError: a model without biases (GPT-2 always has them), or one that is not
            GPT-2-style, naming the field (``pos_emb`` "learned", ``norm`` "layernorm",
            ``ffn`` "gelu", ``norm_position`` "pre" are needed).
    """
    from transformers import GPT2Config

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
    return GPT2Config(
        vocab_size=model_config["vocab_size"],
        n_positions=model_config.get("block_size", 64),
        n_embd=model_config.get("d_model", 128),
        n_layer=model_config.get("n_layers", 4),
        n_head=model_config.get("n_heads", 4),
        n_inner=model_config.get("d_ff"),
        activation_function="gelu_new" if gelu == "tanh" else "gelu",
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=model_config.get("tie_weights", True),
        bos_token_id=None,  # GPT-2's 50256 is its BPE's <|endoftext|>; a char vocabulary has none
        eos_token_id=None,
    )


def from_gpt2_state(hf_state: Mapping, model_config: dict) -> dict[str, np.ndarray]:
    """GPT-2's state dict (``GPT2LMHeadModel.state_dict()``, torch tensors or
    arrays) as this project's state dict.

    The four Conv1D weights are transposed here, from GPT-2's ``(in, out)`` to
    ``nn.Linear``'s ``(out, in)``; the rest is renamed only. With tied weights,
    ``head.weight`` is the ``tok_emb.weight`` array, as a state dict lists it.

    Raises:
        ValueError: keys missing or unexpected (all listed; GPT-2's causal-mask
            buffers are ignored).
    """
    tied = model_config.get("tie_weights", True)
    table = _key_table(model_config.get("n_layers", 4), tied)
    wanted = {theirs for _, theirs, _ in table}
    present = {k for k in hf_state if not k.endswith(_BUFFER_SUFFIXES)}
    if tied:
        present.discard("lm_head.weight")  # the same tensor as wte
    _check_keys("GPT-2 state dict", present, wanted)
    state = {}
    for ours, theirs, transposed in table:
        array = _numpy(hf_state[theirs])
        state[ours] = np.ascontiguousarray(array.T if transposed else array)
    if tied:
        state["head.weight"] = state["tok_emb.weight"]
    return state


def to_gpt2_state(state: Mapping, model_config: dict) -> dict[str, np.ndarray]:
    """The inverse of :func:`from_gpt2_state`: this project's state dict as
    GPT-2's (Conv1D weights transposed back to ``(in, out)``; with tied
    weights ``lm_head.weight`` is ``transformer.wte.weight``)."""
    tied = model_config.get("tie_weights", True)
    table = _key_table(model_config.get("n_layers", 4), tied)
    wanted = {ours for ours, _, _ in table}
    _check_keys("state dict", set(state) - ({"head.weight"} if tied else set()), wanted)
    hf_state = {}
    for ours, theirs, transposed in table:
        array = _numpy(state[ours])
        hf_state[theirs] = np.ascontiguousarray(array.T if transposed else array)
    if tied:
        hf_state["lm_head.weight"] = hf_state["transformer.wte.weight"]
    return hf_state


def from_gpt2(hf_model) -> tuple[dict, dict[str, np.ndarray]]:
    """``(model_config, state_dict)`` of a ``GPT2LMHeadModel``, ready for
    ``make_backend(name, model_config).load_state_dict(state_dict)`` or
    :func:`labs.plumbing.checkpoint.save_checkpoint`.

    Raises:
        ValueError: as :func:`from_gpt2_config` and :func:`from_gpt2_state`.
    """
    model_config = from_gpt2_config(hf_model.config)
    return model_config, from_gpt2_state(hf_model.state_dict(), model_config)


def to_gpt2(model_config: dict, state: Mapping, dtype=None):
    """A ``transformers.GPT2LMHeadModel`` holding this project's weights, in eval mode.

    Args:
        model_config: GPTConfig fields.
        state: a state dict from either backend (or a checkpoint).
        dtype: torch dtype of the HF model (default: the weights' dtype).

    Raises:
        ImportError: transformers is not installed.
        ValueError: as :func:`gpt2_config` and :func:`to_gpt2_state`.
    """
    import torch
    from transformers import GPT2LMHeadModel

    hf_config = gpt2_config(model_config)  # first: a wrong architecture is named as such
    hf_state = to_gpt2_state(state, model_config)
    if dtype is None:
        dtype = torch.from_numpy(np.zeros(0, hf_state["transformer.wte.weight"].dtype)).dtype
    model = GPT2LMHeadModel(hf_config).to(dtype)
    tensors = {k: torch.from_numpy(v.copy()).to(dtype) for k, v in hf_state.items()}
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    # only the causal-mask buffers may be left to the model's own values
    missing = [k for k in missing if not k.endswith(_BUFFER_SUFFIXES)]
    if missing or unexpected:
        raise ValueError(f"GPT-2 model: missing keys {missing}, unexpected keys {unexpected}")
    if model_config.get("tie_weights", True):
        model.tie_weights()
    return model.eval()
