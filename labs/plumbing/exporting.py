"""Real models out: a twinformer checkpoint as a Hugging Face directory (``labs export``),
a ``GPT2LMHeadModel`` or a ``LlamaForCausalLM`` as the config says (anything else refused,
the field named), and its tokenizer (a character vocabulary as a BPE without merges).
Nothing here imports ``transformers``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from .checkpoint import load_checkpoint
from .checkpoint_format import expected_shapes
from .hf_files import hf_tokenizer_files, write_hf_directory
from .tokenization import load_tokenizer

TARGETS = ("hf",)


def hf_architecture(model_config: dict) -> str:
    """``"llama"`` for a RoPE model, else ``"gpt2"`` (what each then refuses is named)."""
    return "llama" if model_config.get("pos_emb", "learned") == "rope" else "gpt2"


def hf_export(model_config: dict, state: dict[str, np.ndarray]) -> tuple[dict, dict, list[str]]:
    """``(config.json fields, HF state dict, notes)`` of a model, by :func:`hf_architecture`
    (ValueError: what it cannot express, named). No biases: zero biases, the same function."""
    from numpy_impl.gpt import GPTConfig

    from .interop_gpt2 import gpt2_config_dict, to_gpt2_state
    from .interop_llama import llama_config_dict, to_llama_state

    model_config = dataclasses.asdict(GPTConfig.from_dict(dict(model_config)))
    notes: list[str] = []
    state = {k: np.asarray(v, dtype=np.float32) for k, v in state.items()}
    if hf_architecture(model_config) == "llama":
        hf_config = llama_config_dict(model_config)
        hf_state = to_llama_state(state, model_config)
    else:
        if not model_config["bias"]:
            gpt2_config_dict({**model_config, "bias": True})  # anything else refused first
            model_config = {**model_config, "bias": True}
            for name, shape in expected_shapes(model_config).items():
                if name not in state:
                    state[name] = np.zeros(shape, np.float32)
            notes.append("the model has no biases: exported with zero biases (the same function)")
        hf_config = gpt2_config_dict(model_config)
        hf_state = to_gpt2_state(state, model_config)
    if model_config["tie_weights"]:
        del hf_state["lm_head.weight"]  # as save_pretrained does: HF ties it on loading
    hf_config["torch_dtype"] = "float32"
    return hf_config, hf_state, notes


def export_run(run: str | Path, out: str | Path, to: str = "hf") -> tuple[Path, dict, list[str]]:
    """Write the checkpoint in ``run`` as a new Hugging Face directory ``out``; return
    ``(out, config.json's fields, notes)``.

    Raises:
        FileExistsError: ``out`` exists (checked first).
        FileNotFoundError, ValueError: an unusable checkpoint, or a model the target
            cannot express; nothing is written then.
    """
    if to not in TARGETS:
        raise ValueError(f"--to: expected one of {TARGETS}, got {to!r}")
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise FileExistsError(f"{out} already exists (nothing was written; choose a new name)")
    state, config, _ = load_checkpoint(run)
    tokenizer = load_tokenizer(config, run, "numpy")
    hf_config, hf_state, notes = hf_export(config["model"], state)
    files, eos = hf_tokenizer_files(
        tokenizer, hf_config.get("n_positions", hf_config.get("max_position_embeddings"))
    )
    if eos is not None:  # GPT-2's convention: <|endoftext|> begins and ends a document
        hf_config.update(bos_token_id=eos, eos_token_id=eos)
    try:
        write_hf_directory(out, hf_config, hf_state, files)
    except OSError as e:  # a full disk, say: the destination is the problem, not the run
        raise OSError(e.errno, f"cannot write {out}: {e.strerror or e} (nothing left there)") from e
    return out, hf_config, notes
