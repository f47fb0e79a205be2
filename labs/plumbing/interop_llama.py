"""Hugging Face interop, Llama: its weights into the project's layout and back
(``transformers`` needed by :func:`to_llama` and :func:`llama_config` only).

Llama (Touvron et al. 2023) as ``LlamaForCausalLM`` names it, and here (the
GPT configured with ``pos_emb="rope", norm="rmsnorm", ffn="swiglu", bias=False``)::

    model.embed_tokens.weight                 tok_emb.weight          (V, C)
    model.layers.N.input_layernorm.weight     blocks.N.ln1.weight     RMSNorm gain
    model.layers.N.self_attn.q_proj.weight    blocks.N.attn.qkv_proj.weight rows 0 .. C-1
    model.layers.N.self_attn.k_proj.weight    blocks.N.attn.qkv_proj.weight rows C .. 2C-1
    model.layers.N.self_attn.v_proj.weight    blocks.N.attn.qkv_proj.weight rows 2C .. 3C-1
    model.layers.N.self_attn.o_proj.weight    blocks.N.attn.out_proj.weight
    model.layers.N.post_attention_layernorm.* blocks.N.ln2.*
    model.layers.N.mlp.gate_proj.weight       blocks.N.ffn.w1.weight  (d_ff, C), SiLU'd
    model.layers.N.mlp.up_proj.weight         blocks.N.ffn.w3.weight  (d_ff, C)
    model.layers.N.mlp.down_proj.weight       blocks.N.ffn.w2.weight  (C, d_ff)
    model.norm.weight                         ln_f.weight
    lm_head.weight                            head.weight             (untied by default)

Nothing is transposed (``nn.Linear`` on both sides). HF keeps q, k and v in three
matrices, this project in one ``qkv_proj`` (``(H + 2 H_kv) d_k`` rows). HF rotates the
pairs (i, i + d_k/2) of each head (the "half" RoPE layout), Meta and this project's
default (2i, 2i + 1) ("interleaved"): the same model up to a permutation of each head's
q and k rows (:func:`numpy_impl.rope.rope_permutation`), applied on the way in and out.
Mistral (``sliding_window`` null) and Qwen2 (q, k, v biases) share the layout;
:func:`from_llama_config` refuses what differs, naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from numpy_impl.pretrained import check_tied_head

from .interop import _check_keys, _flag, _get, _has, _hf_model, _integer, _numpy, _optional

#: (our name, Llama's name without "model.layers.N.") for block N; q, k, v are apart.
_LLAMA_BLOCK_KEYS = (
    ("ln1.weight", "input_layernorm.weight"),
    ("attn.out_proj.weight", "self_attn.o_proj.weight"),
    ("ln2.weight", "post_attention_layernorm.weight"),
    ("ffn.w1.weight", "mlp.gate_proj.weight"),  # Meta's w1: the gate, SiLU'd
    ("ffn.w3.weight", "mlp.up_proj.weight"),  # w3: the linear "up" value
    ("ffn.w2.weight", "mlp.down_proj.weight"),  # w2: back to d_model
)
_LLAMA_QKV = ("q_proj", "k_proj", "v_proj")  # the row order inside our qkv_proj
#: GPTConfig fields that make the GPT a Llama (labs.commands.train.ARCHS["llama"] plus pre-norm).
_LLAMA_ARCH = {
    "pos_emb": "rope",
    "norm": "rmsnorm",
    "ffn": "swiglu",
    "bias": False,
    "norm_position": "pre",
}
#: model_type -> the defaults of its config class where they differ from LlamaConfig's.
FAMILIES = {
    "llama": {},
    "mistral": {"sliding_window": 4096},  # Mistral 7B v0.1's window; v0.2 on: null
    "qwen2": {"use_sliding_window": False, "rms_norm_eps": 1e-6},
}
#: LlamaConfig's defaults, for a config.json that leaves a field out.
LLAMA_DEFAULTS = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": None,
    "hidden_act": "silu",
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
    "pretraining_tp": 1,
    "head_dim": None,
}


def _llama_key_table(n_layers: int, tied: bool) -> list[tuple[str, str]]:
    """(our key, Llama's key) for every parameter but the fused qkv_proj."""
    table = [("tok_emb.weight", "model.embed_tokens.weight")]
    for n in range(n_layers):
        table += [(f"blocks.{n}.{ours}", f"model.layers.{n}.{theirs}") for ours, theirs in
                  _LLAMA_BLOCK_KEYS]  # fmt: skip
    table.append(("ln_f.weight", "model.norm.weight"))
    if not tied:
        table.append(("head.weight", "lm_head.weight"))
    return table


def _qkv_keys(n: int, kind: str = "weight") -> tuple[str, list[str]]:
    """Our fused key of block n and Llama's three, in the order q, k, v."""
    return f"blocks.{n}.attn.qkv_proj.{kind}", [
        f"model.layers.{n}.self_attn.{p}.{kind}" for p in _LLAMA_QKV
    ]


def _qkv_kinds(model_config: dict) -> list[tuple[int, str]]:
    """(block, "weight" or "bias") of every fused qkv_proj tensor (biases: Qwen2's)."""
    kinds = ("weight", "bias") if model_config.get("qkv_bias") else ("weight",)
    return [(n, kind) for n in range(model_config.get("n_layers", 4)) for kind in kinds]


def _rope(hf_config) -> tuple[float, dict | None]:
    """RoPE's base and scaling (None, or ``check_rope_scaling``'s dict) from a Llama config:
    ``rope_parameters`` (transformers 5) or ``rope_theta`` and ``rope_scaling`` (4.x), every
    section given saying the same (ValueError otherwise)."""
    from numpy_impl.rope import check_rope_scaling

    thetas: dict[str, object] = {}
    scalings: dict[str, dict | None] = {}
    for name in ("rope_parameters", "rope_scaling"):
        params = _optional(hf_config, name)
        if params is None:
            continue
        if not isinstance(params, Mapping):
            raise ValueError(f"{name}: expected an object or null, got {params!r}")
        kind = params.get("rope_type", params.get("type", "default"))
        rest = {k: v for k, v in params.items() if k not in ("rope_type", "type", "rope_theta")}
        if kind == "default" and rest:
            raise ValueError(f"{name}: the plain RoPE takes rope_theta only, got {sorted(rest)}")
        try:
            scalings[name] = (
                None if kind == "default" else check_rope_scaling({"rope_type": kind, **rest})
            )
        except ValueError as e:
            raise ValueError(f"{name}: {str(e).removeprefix('rope_scaling: ')}") from None
        if "rope_theta" in params:
            thetas[f"{name}.rope_theta"] = params["rope_theta"]
    if _has(hf_config, "rope_theta"):
        thetas["rope_theta"] = _get(hf_config, "rope_theta")
    if not thetas:
        raise ValueError("rope_theta: the config gives no RoPE base")
    for where, value in thetas.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}: expected a number, got {value!r}")
    if len({float(v) for v in thetas.values()}) > 1:
        given = ", ".join(f"{k} {v!r}" for k, v in thetas.items())
        raise ValueError(f"rope_theta: the config gives two RoPE bases ({given}); give one")
    if len({repr(v) for v in scalings.values()}) > 1:
        raise ValueError(f"rope_scaling: rope_parameters and rope_scaling differ: {scalings}")
    return float(next(iter(thetas.values()))), next(iter(scalings.values()), None)


def from_llama_config(hf_config, rope_layout: str = "half") -> dict:
    """The GPTConfig fields (a dict) of the model a Llama, Mistral or Qwen2 config (a
    ``transformers`` config or its ``to_dict()``) describes; ``rope_layout``: ``"half"``
    (HF's: the weights load unchanged) or ``"interleaved"`` (:func:`from_llama_state`
    permutes q and k).

    Raises:
        ValueError: a setting this GPT does not have, named (another activation, an
            o_proj or MLP bias, attention dropout, a sliding window, a RoPE scaling other
            than linear or llama3...); an unknown ``rope_layout``.
    """
    if rope_layout not in ("interleaved", "half"):
        raise ValueError(f"rope_layout: expected 'interleaved' or 'half', got {rope_layout!r}")
    model_type = _optional(hf_config, "model_type", "llama")
    if model_type not in FAMILIES:
        raise ValueError(f"model_type: expected one of {sorted(FAMILIES)}, got {model_type!r}")
    if isinstance(hf_config, Mapping):  # a config.json: the config class's defaults where silent
        hf_config = {**LLAMA_DEFAULTS, **FAMILIES[model_type], **hf_config}
        if not hf_config.get("rope_parameters") and "rope_theta" not in hf_config:
            hf_config["rope_theta"] = 10000.0
    d_model = _integer(hf_config, "hidden_size")
    n_heads = _integer(hf_config, "num_attention_heads")
    act = _get(hf_config, "hidden_act")
    if act not in ("silu", "swish"):
        raise ValueError(f"hidden_act: this GPT's SwiGLU gate uses 'silu', got {act!r}")
    qkv_bias = model_type == "qwen2" or _flag(hf_config, "attention_bias", False)
    if qkv_bias and model_type != "qwen2":  # Llama's attention_bias: o_proj's too
        raise ValueError("attention_bias: this GPT has q, k, v biases only (Qwen2's); got true")
    checks = [("mlp_bias", False), ("attention_dropout", 0.0), ("pretraining_tp", 1),
              ("use_sliding_window", False)]  # fmt: skip
    checks += [("sliding_window", None)] if model_type == "mistral" else []
    for name, wanted in checks:
        value = _optional(hf_config, name, wanted)
        if value != wanted:
            raise ValueError(f"{name}: this GPT needs {wanted!r}, got {value!r}")
    eps = _get(hf_config, "rms_norm_eps")
    if isinstance(eps, bool) or not isinstance(eps, int | float):
        raise ValueError(f"rms_norm_eps: expected a number, got {eps!r}")
    rope_base, rope_scaling = _rope(hf_config)
    kv_heads = _optional(hf_config, "num_key_value_heads")
    kv_heads = n_heads if kv_heads is None else kv_heads
    head_dim = _optional(hf_config, "head_dim")
    head_dim = d_model // n_heads if head_dim is None else head_dim
    return {
        "vocab_size": _integer(hf_config, "vocab_size"),
        "block_size": _integer(hf_config, "max_position_embeddings"),
        "n_layers": _integer(hf_config, "num_hidden_layers"),
        "n_heads": n_heads,
        "n_kv_heads": None if kv_heads == n_heads else kv_heads,  # None: the default
        "head_dim": None if head_dim * n_heads == d_model else head_dim,
        "d_model": d_model,
        "d_ff": _integer(hf_config, "intermediate_size"),
        "dropout": 0.0,
        "tie_weights": bool(_flag(hf_config, "tie_word_embeddings", False)),
        "rope_layout": rope_layout,
        "rope_base": rope_base,
        "rope_scaling": rope_scaling,
        "qkv_bias": bool(qkv_bias),
        "norm_eps": float(eps),
        **_LLAMA_ARCH,
    }


def llama_config_dict(model_config: dict) -> dict:
    """The ``config.json`` fields (``model_type`` and ``architectures`` included) of a
    ``LlamaForCausalLM`` (``Qwen2ForCausalLM`` with q, k, v biases) with these GPTConfig
    fields; ``dropout`` is not carried (the export is for inference).

    Raises:
        ValueError: a model that is not Llama-style, naming the field.
    """
    from numpy_impl.ffn import swiglu_hidden_dim

    defaults = {"pos_emb": "learned", "norm": "layernorm", "ffn": "gelu", "bias": True,
                "norm_position": "pre"}  # fmt: skip
    for name, wanted in _LLAMA_ARCH.items():
        value = model_config.get(name, defaults[name])
        if value != wanted:
            raise ValueError(f"{name}: a Llama needs {wanted!r}, this model has {value!r}")
    d_model = model_config.get("d_model", 128)
    d_ff = model_config.get("d_ff")
    rope_base = float(model_config.get("rope_base", 10000.0))
    scaling = model_config.get("rope_scaling")
    qwen2 = bool(model_config.get("qkv_bias"))  # q, k, v biases, no other: Qwen2's layout
    return {
        "model_type": "qwen2" if qwen2 else "llama",
        "architectures": ["Qwen2ForCausalLM" if qwen2 else "LlamaForCausalLM"],
        "vocab_size": model_config["vocab_size"],
        "hidden_size": d_model,
        "intermediate_size": swiglu_hidden_dim(d_model) if d_ff is None else d_ff,
        "num_hidden_layers": model_config.get("n_layers", 4),
        "num_attention_heads": model_config.get("n_heads", 4),
        "num_key_value_heads": model_config.get("n_kv_heads") or model_config.get("n_heads", 4),
        "head_dim": model_config.get("head_dim") or d_model // model_config.get("n_heads", 4),
        "max_position_embeddings": model_config.get("block_size", 64),
        "rms_norm_eps": model_config.get("norm_eps", 1e-5),
        "rope_theta": rope_base,  # transformers 4.x; 5.x reads rope_parameters (and this)
        "rope_scaling": scaling,
        "rope_parameters": {"rope_type": "default", **(scaling or {}), "rope_theta": rope_base},
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "pretraining_tp": 1,
        "initializer_range": 0.02,
        "tie_word_embeddings": model_config.get("tie_weights", True),
        # Llama's 1 and 2 are its SentencePiece ids; a char vocabulary has none
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }


def llama_config(model_config: dict):
    """The ``transformers`` config of :func:`llama_config_dict`'s fields (ValueError as
    there; ImportError without transformers)."""
    from transformers import AutoConfig

    fields = llama_config_dict(model_config)
    del fields["architectures"], fields["rope_scaling"]  # 5.x: another name of rope_parameters
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def _qkv_sizes(model_config: dict) -> list[int]:
    """Rows of q, k and v in qkv_proj: ``H d_k``, ``H_kv d_k``, ``H_kv d_k``."""
    H = model_config.get("n_heads", 4)
    d_k = model_config.get("head_dim") or model_config.get("d_model", 128) // H
    H_kv = model_config.get("n_kv_heads") or H
    return [H * d_k, H_kv * d_k, H_kv * d_k]


def _permute_qk(qkv: np.ndarray, model_config: dict, from_layout: str, to_layout: str):
    """qkv_proj's rows (weight or bias) with each q and k head's features reordered from one
    RoPE layout to the other (:func:`numpy_impl.rope.rope_permutation`); v as it is."""
    from numpy_impl.rope import rope_permutation  # numpy only: labs never needs torch here

    n_q, n_k, _ = _qkv_sizes(model_config)
    d_k = n_q // model_config.get("n_heads", 4)
    perm = rope_permutation(d_k, from_layout, to_layout)
    heads = np.arange(n_q + n_k).reshape(-1, d_k)  # (H + H_kv, d_k): q heads, then k heads
    rows = np.concatenate([heads[:, perm].reshape(-1), np.arange(n_q + n_k, len(qkv))])
    return qkv[rows]


def from_llama_state(hf_state: Mapping, model_config: dict) -> dict[str, np.ndarray]:
    """Llama's state dict (tensors or arrays) as this project's: q, k and v stacked into
    ``qkv_proj``, their rows permuted to an ``"interleaved"`` model's layout; a tied
    ``head.weight`` is the ``tok_emb.weight`` array.

    Raises:
        ValueError: keys missing or unexpected, all listed (old ``inv_freq`` buffers ignored).
    """
    tied = model_config.get("tie_weights", True)
    n_layers = model_config.get("n_layers", 4)
    table = _llama_key_table(n_layers, tied)
    wanted = {theirs for _, theirs in table}
    wanted |= {k for n, kind in _qkv_kinds(model_config) for k in _qkv_keys(n, kind)[1]}
    present = {k for k in hf_state if not k.endswith("rotary_emb.inv_freq")}
    if tied:
        check_tied_head(hf_state, "model.embed_tokens.weight", "lm_head.weight")
        present.discard("lm_head.weight")  # the same tensor as embed_tokens
    _check_keys("Llama state dict", present, wanted)
    state = {ours: np.ascontiguousarray(_numpy(hf_state[theirs])) for ours, theirs in table}
    for n, kind in _qkv_kinds(model_config):
        ours, theirs = _qkv_keys(n, kind)
        qkv = np.concatenate([_numpy(hf_state[k]) for k in theirs], axis=0)  # ((H+2H_kv) d_k, C)
        state[ours] = _permute_qk(qkv, model_config, "half", model_config["rope_layout"])
    if tied:
        state["head.weight"] = state["tok_emb.weight"]
    return state


def to_llama_state(state: Mapping, model_config: dict) -> dict[str, np.ndarray]:
    """The inverse of :func:`from_llama_state` (ValueError: keys missing or unexpected,
    all listed)."""
    tied = model_config.get("tie_weights", True)
    n_layers = model_config.get("n_layers", 4)
    table = _llama_key_table(n_layers, tied)
    wanted = {ours for ours, _ in table} | {_qkv_keys(*nk)[0] for nk in _qkv_kinds(model_config)}
    _check_keys("state dict", set(state) - ({"head.weight"} if tied else set()), wanted)
    hf_state = {theirs: np.ascontiguousarray(_numpy(state[ours])) for ours, theirs in table}
    layout = model_config.get("rope_layout", "interleaved")
    cuts = np.cumsum(_qkv_sizes(model_config))[:2]
    for n, kind in _qkv_kinds(model_config):
        ours, theirs = _qkv_keys(n, kind)
        qkv = _permute_qk(_numpy(state[ours]), model_config, layout, "half")
        for key, rows in zip(theirs, np.split(qkv, cuts, axis=0), strict=True):
            hf_state[key] = np.ascontiguousarray(rows)
    if tied:
        hf_state["lm_head.weight"] = hf_state["model.embed_tokens.weight"]
    return hf_state


def from_llama(hf_model, rope_layout: str = "half") -> tuple[dict, dict[str, np.ndarray]]:
    """``(model_config, state_dict)`` of a ``LlamaForCausalLM``, for ``make_backend`` or
    ``save_checkpoint`` (ValueError: as :func:`from_llama_config`, :func:`from_llama_state`)."""
    model_config = from_llama_config(hf_model.config, rope_layout)
    return model_config, from_llama_state(hf_model.state_dict(), model_config)


def to_llama(model_config: dict, state: Mapping, dtype=None):
    """A ``transformers`` Llama holding this project's weights (a state dict from either
    backend), in eval mode, in ``dtype`` (default: the weights').

    Raises:
        ImportError: transformers is not installed.
        ValueError: as :func:`llama_config` and :func:`to_llama_state`.
    """
    from transformers import AutoModelForCausalLM

    hf_config = llama_config(model_config)
    hf_state = to_llama_state(state, model_config)
    dtype = dtype or hf_state["model.embed_tokens.weight"].dtype
    model = AutoModelForCausalLM.from_config(hf_config)
    tied = model_config.get("tie_weights", True)
    return _hf_model(model, hf_state, dtype, ("rotary_emb.inv_freq",), tied)
