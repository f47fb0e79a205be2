"""Real models in: a Hugging Face GPT-2 or Llama directory, or nanoGPT's ``ckpt.pt``, as
an ordinary twinformer checkpoint (``python -m labs import``).

Each ``import_*`` reads its source without ``transformers`` (``hf_files.py``,
``nanogpt.py``), maps the config onto GPTConfig (refusing what does not fit, the field
named), renames the weights and returns an :class:`Imported`; :func:`write_run` checks
it and writes the checkpoint into a new directory, all at once.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from numpy_impl import pretrained

from .checkpoint_format import check_declared_size, layers_in
from .hf_files import fit_vocabulary, read_hf_config, read_hf_tokenizer, read_hf_weights

KINDS = ("gpt2", "llama", "nanogpt")


@dataclasses.dataclass
class Imported:
    """A model read from elsewhere, in this project's terms."""

    model_config: dict  # GPTConfig fields
    state: dict[str, np.ndarray]  # our names, float32
    tokenizer: object  # numpy_impl's CharTokenizer or BPETokenizer
    source: dict  # recorded in config.json as "imported_from"
    notes: list[str] = dataclasses.field(default_factory=list)  # said to the user


def _tokenizer_of(directory: Path, vocab_size: int, notes: list[str]):
    tokenizer = read_hf_tokenizer(directory)
    if tokenizer is None:
        raise FileNotFoundError(
            f"{directory}: no tokenizer.json and no vocab.json + merges.txt; a run needs the "
            "tokenizer its model was trained with"
        )
    tokenizer, n_reserved = fit_vocabulary(tokenizer, vocab_size)
    if n_reserved:
        notes.append(
            f"the model has {vocab_size} token rows and the tokenizer {vocab_size - n_reserved} "
            f"ids: ids {vocab_size - n_reserved} .. {vocab_size - 1} became the special tokens "
            "<|reserved_N|> (encoding never produces them)"
        )
    return tokenizer


def _untie_if_different(model_config: dict, weights: dict, embedding: str, notes: list[str]):
    """Untie a config that ties the head when the file holds another ``lm_head.weight``
    (as transformers loads it: the head is never silently dropped)."""
    head = weights.get("lm_head.weight")
    if model_config["tie_weights"] and head is not None:
        if not np.array_equal(head, weights.get(embedding)):
            model_config["tie_weights"] = False
            notes.append(
                "config.json ties the head to the embedding, but the weights hold a different "
                "lm_head.weight: imported untied, as transformers loads it"
            )


def _with_gpt2_prefix(weights: dict[str, np.ndarray], notes: list[str]) -> dict:
    """GPT-2's keys as ``GPT2LMHeadModel`` names them (the hub's ``gpt2`` has none of the
    ``transformer.`` prefixes)."""
    if any(k.startswith("transformer.") for k in weights):
        return weights
    notes.append("the weights' keys have no 'transformer.' prefix (GPT2Model's names): added")
    return {k if k == "lm_head.weight" else f"transformer.{k}": v for k, v in weights.items()}


def import_gpt2(directory: str | Path) -> Imported:
    """A Hugging Face GPT-2 directory (``config.json``, ``model.safetensors``, the tokenizer).

    Raises:
        FileNotFoundError: a file missing (named).
        ValueError: a config this GPT cannot run (the field named), weights that do not
            match it (the keys listed), a tokenizer that is not byte-level BPE.
    """
    from .interop_gpt2 import from_gpt2_config

    directory = Path(directory)
    config = read_hf_config(directory)
    model_config = from_gpt2_config(config)
    notes: list[str] = []
    weights = _with_gpt2_prefix(read_hf_weights(directory), notes)
    _untie_if_different(model_config, weights, "transformer.wte.weight", notes)
    check_declared_size(model_config, str(directory / "config.json"), layers_in(weights))
    state = pretrained.from_gpt2_state(
        weights, model_config["n_layers"], model_config["tie_weights"], bias=True
    )
    tokenizer = _tokenizer_of(directory, model_config["vocab_size"], notes)
    source = {"kind": "gpt2", "path": str(directory.resolve())}
    return Imported(model_config, state, tokenizer, source, notes)


def import_llama(directory: str | Path, rope_layout: str = "half") -> Imported:
    """A Hugging Face Llama, Mistral or Qwen2 directory (raises as :func:`import_gpt2`)."""
    from .interop_llama import from_llama_config, from_llama_state

    directory = Path(directory)
    config = read_hf_config(directory)
    model_config = from_llama_config(config, rope_layout)
    weights = read_hf_weights(directory)
    notes: list[str] = []
    _untie_if_different(model_config, weights, "model.embed_tokens.weight", notes)
    check_declared_size(model_config, str(directory / "config.json"), layers_in(weights))
    state = from_llama_state(weights, model_config)
    if rope_layout == "interleaved":
        notes.append("q and k rows permuted from HF's 'half' RoPE layout to 'interleaved'")
    tokenizer = _tokenizer_of(directory, model_config["vocab_size"], notes)
    source = {"kind": "llama", "path": str(directory.resolve()), "rope_layout": rope_layout}
    return Imported(model_config, state, tokenizer, source, notes)


def import_nanogpt(
    ckpt: str | Path, meta: str | Path | None = None, tokenizer_dir: str | Path | None = None
) -> Imported:
    """nanoGPT's ``ckpt.pt``, with its tokenizer: the characters of its ``meta.pkl``, or
    GPT-2's BPE files in ``tokenizer_dir`` (tiktoken's ``gpt2``; a padded vocabulary fits).

    Raises:
        ValueError: both or neither tokenizer source, an unreadable or refused pickle,
            a model_args field this GPT lacks, weights that do not match, a character
            vocabulary of another size than the model's.
    """
    from numpy_impl.char_tokenizer import CharTokenizer

    from . import nanogpt

    if (meta is None) == (tokenizer_dir is None):
        raise ValueError(
            "tokenizer: ckpt.pt holds no tokenizer; give --meta meta.pkl (a character-level "
            "run) or --tokenizer DIR (GPT-2's tokenizer.json or vocab.json + merges.txt), one"
        )
    ckpt = Path(ckpt)
    model_args, raw, info = nanogpt.read_ckpt(ckpt)
    notes: list[str] = []
    weights = pretrained.strip_compiled_prefix(raw)
    if any(k.startswith(pretrained.COMPILED_PREFIX) for k in raw):
        notes.append("torch.compile's '_orig_mod.' prefix removed from the keys")
    head, wte = weights.get("lm_head.weight"), weights.get("transformer.wte.weight")
    tied = head is None or (wte is not None and np.array_equal(head, wte))
    model_config = nanogpt.model_config(model_args, tied)
    check_declared_size(model_config, f"{ckpt}: model_args", layers_in(weights))
    state = pretrained.from_gpt2_state(
        weights, model_config["n_layers"], tied, model_config["bias"], conv1d=False
    )
    V = model_config["vocab_size"]
    if meta is not None:
        chars = nanogpt.read_meta(meta)
        if len(chars) != V:
            raise ValueError(
                f"vocab_size: the model has {V} token rows, {meta} has {len(chars)} characters"
            )
        tokenizer = CharTokenizer(chars)
        perm = nanogpt.char_permutation(chars)
        if perm is not None:  # our ids are the sorted characters
            notes.append("meta.pkl's characters are not in sorted order: embedding rows reordered")
            state["tok_emb.weight"] = np.ascontiguousarray(state["tok_emb.weight"][perm])
            if tied:
                state["head.weight"] = state["tok_emb.weight"]
            else:
                state["head.weight"] = np.ascontiguousarray(state["head.weight"][perm])
    else:
        tokenizer = _tokenizer_of(Path(tokenizer_dir), V, notes)
    source = {"kind": "nanogpt", "path": str(ckpt.resolve()), **info}
    if meta is not None:
        source["meta"] = str(Path(meta).resolve())
    return Imported(model_config, state, tokenizer, source, notes)


def write_run(out: str | Path, imported: Imported) -> Path:
    """Write ``imported`` as a twinformer checkpoint in the new directory ``out``, all at
    once, after every check (GPTConfig's, every key and shape against the config).

    Raises:
        FileExistsError: ``out`` exists (nothing written).
        ValueError: a config or state that does not fit, weights that are not floating
            point, or a weight that is NaN or infinite (nothing written).
    """
    from numpy_impl.gpt import GPTConfig

    from .checkpoint import save_checkpoint
    from .checkpoint_files import new_directory
    from .checkpoint_format import _mismatches, expected_shapes, first_nonfinite
    from .tokenization import tokenizer_config

    out = Path(out)
    if out.exists() or out.is_symlink():
        raise FileExistsError(f"{out} already exists (nothing was written; choose a new name)")
    model_config = dataclasses.asdict(GPTConfig.from_dict(dict(imported.model_config)))
    for k, v in imported.state.items():  # integers would be cast silently: not weights
        if np.asarray(v).dtype.kind != "f":
            raise ValueError(
                f"{k}: the weights are stored as {np.asarray(v).dtype}, not as floating point "
                "numbers (float16, bfloat16, float32 or float64); nothing was written"
            )
    state = {k: np.asarray(v, dtype=np.float32) for k, v in imported.state.items()}
    if model_config["tie_weights"]:
        state["head.weight"] = state["tok_emb.weight"]
    if problems := _mismatches("the imported model", state, expected_shapes(model_config)):
        raise ValueError("; ".join(problems))
    if bad := first_nonfinite(state):
        raise ValueError(
            f"{bad[0]}: the weights hold {bad[1]} NaN or infinite value(s) (as float32), and "
            "a model with them computes NaN; nothing was written"
        )
    section, files = tokenizer_config(imported.tokenizer)
    config = {"model": model_config, "tokenizer": section}
    meta = {"step": 0, "imported_from": imported.source}
    with new_directory(out) as tmp:
        save_checkpoint(tmp, state, config, None, meta=meta, extra_files=files)
    return out


def count_parameters(state: dict[str, np.ndarray], tied: bool) -> dict[str, int]:
    """Parameters by component: ``embeddings`` (token, position), ``attention``, ``ffn``,
    ``norms``, ``head`` (0 when tied: it is the token embedding) and ``total``."""
    counts = dict.fromkeys(("embeddings", "attention", "ffn", "norms", "head"), 0)
    for name, array in state.items():
        if name == "head.weight":
            counts["head"] += 0 if tied else array.size
        elif name.startswith(("tok_emb.", "pos_emb.")):
            counts["embeddings"] += array.size
        elif ".attn." in name:
            counts["attention"] += array.size
        elif ".ffn." in name:
            counts["ffn"] += array.size
        else:  # ln1, ln2, ln_f
            counts["norms"] += array.size
    counts["total"] = sum(counts.values())
    return counts
