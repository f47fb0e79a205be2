"""Pretrained weights in this GPT's layout (chapter 17): GPT-2's and nanoGPT's state dicts.

OpenAI's GPT-2 (as Hugging Face's ``GPT2LMHeadModel`` names it) and Karpathy's
nanoGPT (``model.py``, which kept GPT-2's names so that it could load OpenAI's
weights) name every tensor the same way, and this GPT names them its own way::

    GPT-2 / nanoGPT                     here                     GPT-2 Conv1D?
    transformer.wte.weight              tok_emb.weight           (V, C)
    transformer.wpe.weight              pos_emb.weight           (block_size, C)
    transformer.h.N.ln_1.*              blocks.N.ln1.*
    transformer.h.N.attn.c_attn.*       blocks.N.attn.qkv_proj.*  yes: (C, 3C) there
    transformer.h.N.attn.c_proj.*       blocks.N.attn.out_proj.*  yes: (C, C)
    transformer.h.N.ln_2.*              blocks.N.ln2.*
    transformer.h.N.mlp.c_fc.*          blocks.N.ffn.fc1.*        yes: (C, 4C) there
    transformer.h.N.mlp.c_proj.*        blocks.N.ffn.fc2.*        yes: (4C, C) there
    transformer.ln_f.*                  ln_f.*
    lm_head.weight                      head.weight              (tied to wte)

The one difference that is not a name: GPT-2's four projections are ``Conv1D``
modules, which compute ``x @ weight + bias`` with ``weight`` stored ``(in,
out)``, while nanoGPT's are ``nn.Linear`` (``x @ weight.T + bias``, ``weight``
stored ``(out, in)``), the layout of both backends here. So a GPT-2 weight is
transposed on the way in and out, a nanoGPT weight is not. Both compute the
same map: ``x @ W_conv1d == x @ W_linear.T`` with ``W_conv1d == W_linear.T``.

The rest is the same in all three: q, k and v stacked in that order inside
``c_attn`` (rows of ``qkv_proj``), the heads split as ``(B, T, C) -> (B, T,
n_heads, d_k)``, pre-norm blocks, the LM head without bias. nanoGPT with
``bias=False`` has no bias in its Linear layers and LayerNorms, exactly this
GPT's ``bias=False``.

Everything here works on NumPy arrays (a state dict of torch tensors is
converted by the caller), so it has no twin in ``torch_impl/``: both backends
load the result. ``labs/plumbing/interop_gpt2.py`` (a ``transformers`` model),
``labs/plumbing/hf_files.py`` (a Hugging Face directory) and
``labs/plumbing/nanogpt.py`` (nanoGPT's ``ckpt.pt``) call it.
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
#: Non-trainable buffers GPT-2 and nanoGPT may keep in a state dict (the causal mask).
BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias")
#: The prefix ``torch.compile`` puts before every key of the model it wraps (nanoGPT saves it).
COMPILED_PREFIX = "_orig_mod."


def check_keys(what: str, present: set[str], wanted: set[str]) -> None:
    """Raise unless ``present == wanted``, listing the keys missing and unexpected.

    Raises:
        ValueError: ``"<what>: missing keys [...], unexpected keys [...]"`` (the first ten
            of each, sorted, and how many more).
    """
    missing, unexpected = sorted(wanted - present), sorted(present - wanted)

    def listed(keys: list[str], limit: int = 10) -> str:
        return f"{keys[:limit]}" + (f" and {len(keys) - limit} more" if len(keys) > limit else "")

    if missing or unexpected:
        raise ValueError(
            f"{what}: missing keys {listed(missing)}, unexpected keys {listed(unexpected)} "
            "(does the config's n_layers and tie_weights match the weights?)"
        )


def gpt2_key_table(
    n_layers: int, tied: bool = True, bias: bool = True
) -> list[tuple[str, str, bool]]:
    """``(our key, GPT-2's key, a Conv1D weight in GPT-2?)`` for every parameter.

    Args:
        n_layers: blocks.
        tied: the LM head is the token embedding (then ``lm_head.weight`` has no row).
        bias: the model has biases (in its Linear layers and LayerNorms); nanoGPT's
            ``bias=False`` has none.

    Returns:
        the rows in the state dict's order: the two embeddings, then per block
        each module of :data:`GPT2_BLOCK_MODULES` (its ``weight``, then its
        ``bias`` when ``bias``), then ``ln_f``, then (untied) the head. Only a
        Conv1D module's ``weight`` is marked True: its bias is a vector, the
        same either way.
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
    """GPT-2's (or nanoGPT's) state dict as this GPT's.

    Args:
        hf_state: ``{GPT-2 key: array}`` (:func:`gpt2_key_table`'s names; the
            causal-mask buffers of :data:`BUFFER_SUFFIXES` are ignored, and so is
            ``lm_head.weight`` when ``tied``: it is the embedding).
        n_layers, tied, bias: the model's (see :func:`gpt2_key_table`).
        conv1d: the projections are GPT-2's ``Conv1D`` (``(in, out)``: transposed
            here); False for nanoGPT, whose ``nn.Linear`` weights are ``(out, in)``
            already.

    Returns:
        ``{our key: array}``, each C-contiguous; with ``tied``, ``head.weight``
        is the ``tok_emb.weight`` array (one array, two names, as a state dict
        of a tied model lists it).

    Raises:
        ValueError: keys missing or unexpected, all listed.
    """
    table = gpt2_key_table(n_layers, tied, bias)
    present = {k for k in hf_state if not k.endswith(BUFFER_SUFFIXES)}
    if tied:
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
    """The inverse of :func:`from_gpt2_state`: this GPT's state dict as GPT-2's
    (``conv1d``: the projections' weights transposed back to ``(in, out)``; with
    ``tied``, ``lm_head.weight`` is the ``transformer.wte.weight`` array).

    Raises:
        ValueError: keys missing or unexpected, all listed (``head.weight`` may be
            left out when tied).
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
    """``state`` with ``torch.compile``'s ``_orig_mod.`` removed from the front of its keys
    (nanoGPT saves the compiled model's state dict as it is).

    Raises:
        ValueError: two keys that are the same once stripped.
    """
    out: dict[str, np.ndarray] = {}
    for key, value in state.items():
        name = key.removeprefix(COMPILED_PREFIX)
        if name in out:
            raise ValueError(f"state dict: {key!r} and {name!r} are the same tensor's names")
        out[name] = value
    return out
