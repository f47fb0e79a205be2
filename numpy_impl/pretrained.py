"""Pretrained GPT-2 and nanoGPT state dicts in this GPT's layout (chapter 17).

GPT-2 (Hugging Face's ``GPT2LMHeadModel``) and nanoGPT share key names, which map to ours as
``transformer.wte/wpe`` -> ``tok_emb/pos_emb``, ``transformer.h.N.*`` -> ``blocks.N.*``
(:data:`GPT2_BLOCK_MODULES`), ``transformer.ln_f`` -> ``ln_f``, ``lm_head`` -> ``head``.
The rest is shared: q, k, v stacked in that order, pre-norm blocks, a head without bias.
GPT-2's four projections are ``Conv1D``, ``x @ W + b`` with W ``(in, out)``: transposed to our
``nn.Linear`` layout ``(out, in)``; nanoGPT's are ``nn.Linear`` already.
NumPy only, so no twin: both backends load the result.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

#: (our module, GPT-2's module without "transformer.h.N.", a Conv1D in GPT-2?) for block N.
GPT2_BLOCK_MODULES = (
    ("ln1", "ln_1", False),
    ("attn.qkv_proj", "attn.c_attn", True),
    ("attn.out_proj", "attn.c_proj", True),
    ("ln2", "ln_2", False),
    ("ffn.fc1", "mlp.c_fc", True),
    ("ffn.fc2", "mlp.c_proj", True),
)
BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias")  # causal-mask buffers, not parameters
COMPILED_PREFIX = "_orig_mod."  # torch.compile's key prefix (nanoGPT saves it)


def check_keys(what: str, present: set[str], wanted: set[str]) -> None:
    """Raise ValueError unless ``present == wanted``, listing the missing and unexpected keys."""
    missing, unexpected = sorted(wanted - present), sorted(present - wanted)

    def listed(keys: list[str], limit: int = 10) -> str:
        return f"{keys[:limit]}" + (f" and {len(keys) - limit} more" if len(keys) > limit else "")

    if missing or unexpected:
        raise ValueError(
            f"{what}: missing keys {listed(missing)}, unexpected keys {listed(unexpected)} "
            "(does the config's n_layers and tie_weights match the weights?)"
        )


def check_tied_head(state: Mapping[str, np.ndarray], embedding: str, head: str) -> None:
    """Raise ValueError if ``state`` holds a ``head`` other than ``embedding`` (tied weights)."""
    if head in state and not np.array_equal(np.asarray(state[head]), np.asarray(state[embedding])):
        raise ValueError(
            f"{head}: the config ties it to {embedding}, but the weights hold a different one "
            "(transformers loads such a file untied: set tie_word_embeddings false)"
        )


def gpt2_key_table(
    n_layers: int, tied: bool = True, bias: bool = True
) -> list[tuple[str, str, bool]]:
    """``(our key, GPT-2's key, a Conv1D weight in GPT-2?)`` per parameter, in state dict order.

    ``tied``: the head is the token embedding (no ``lm_head.weight`` row). ``bias``: the Linear
    layers and LayerNorms have biases (nanoGPT's ``bias=False`` has none). A Conv1D's bias is
    marked False: a vector needs no transpose.
    """
    table = [
        ("tok_emb.weight", "transformer.wte.weight", False),
        ("pos_emb.weight", "transformer.wpe.weight", False),
    ]
    for n in range(n_layers):
        ### BEGIN SOLUTION ch17
        ### TODO: for each (ours, theirs, conv1d) of GPT2_BLOCK_MODULES, the weight's row
        ###   (f"blocks.{n}.{ours}.weight", f"transformer.h.{n}.{theirs}.weight", conv1d),
        ###   then, when bias, the bias's row (never transposed: conv1d False)
        for ours, theirs, conv1d in GPT2_BLOCK_MODULES:
            table.append(
                (f"blocks.{n}.{ours}.weight", f"transformer.h.{n}.{theirs}.weight", conv1d)
            )
            if bias:
                table.append((f"blocks.{n}.{ours}.bias", f"transformer.h.{n}.{theirs}.bias", False))
        ### END SOLUTION
    table.append(("ln_f.weight", "transformer.ln_f.weight", False))
    if bias:
        table.append(("ln_f.bias", "transformer.ln_f.bias", False))
    if not tied:
        table.append(("head.weight", "lm_head.weight", False))
    return table


def from_gpt2_state(
    hf_state: Mapping[str, np.ndarray],
    n_layers: int,
    tied: bool = True,
    bias: bool = True,
    conv1d: bool = True,
) -> dict[str, np.ndarray]:
    """GPT-2's (or nanoGPT's) state dict ``{key: array}`` as this GPT's, each C-contiguous.

    ``conv1d``: transpose GPT-2's Conv1D weights ``(in, out)``; False for nanoGPT. Causal-mask
    buffers are ignored, and so is ``lm_head.weight`` when ``tied``: ``head.weight`` is then the
    ``tok_emb.weight`` array. Raises ValueError: keys missing or unexpected, all listed.
    """
    table = gpt2_key_table(n_layers, tied, bias)
    present = {k for k in hf_state if not k.endswith(BUFFER_SUFFIXES)}
    if tied:
        check_tied_head(hf_state, "transformer.wte.weight", "lm_head.weight")
        present.discard("lm_head.weight")  # the same tensor as wte
    check_keys("GPT-2 state dict", present, {theirs for _, theirs, _ in table})
    state = {}
    for ours, theirs, is_conv1d in table:
        array = np.asarray(hf_state[theirs])
        ### BEGIN SOLUTION ch17
        ### TODO: state[ours] is the array, transposed from Conv1D's (in, out) to Linear's
        ###   (out, in) when it is a Conv1D weight and conv1d is on; C-contiguous either way
        ###   (np.ascontiguousarray: a transposed view would be slow for every matmul)
        state[ours] = np.ascontiguousarray(array.T if conv1d and is_conv1d else array)
        ### END SOLUTION
    if tied:
        state["head.weight"] = state["tok_emb.weight"]
    return state


def to_gpt2_state(
    state: Mapping[str, np.ndarray],
    n_layers: int,
    tied: bool = True,
    bias: bool = True,
    conv1d: bool = True,
) -> dict[str, np.ndarray]:
    """The inverse of :func:`from_gpt2_state` (``head.weight`` may be left out when tied).

    Raises ValueError: keys missing or unexpected, all listed.
    """
    table = gpt2_key_table(n_layers, tied, bias)
    present = set(state) - ({"head.weight"} if tied else set())
    check_keys("state dict", present, {ours for ours, _, _ in table})
    hf_state = {}
    for ours, theirs, is_conv1d in table:
        array = np.asarray(state[ours])
        ### BEGIN SOLUTION ch17
        ### TODO: the inverse of from_gpt2_state's step: hf_state[theirs] is the array,
        ###   transposed back to Conv1D's (in, out) when it is a Conv1D weight and conv1d is on
        hf_state[theirs] = np.ascontiguousarray(array.T if conv1d and is_conv1d else array)
        ### END SOLUTION
    if tied:
        hf_state["lm_head.weight"] = hf_state["transformer.wte.weight"]
    return hf_state


def strip_compiled_prefix(state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``state`` without ``torch.compile``'s ``_orig_mod.`` key prefix (nanoGPT saves it so).

    Raises ValueError: two keys that are the same once stripped.
    """
    out: dict[str, np.ndarray] = {}
    for key, value in state.items():
        name = key.removeprefix(COMPILED_PREFIX)
        if name in out:
            raise ValueError(f"state dict: {key!r} and {name!r} are the same tensor's names")
        out[name] = value
    return out
