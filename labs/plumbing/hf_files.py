"""Hugging Face model directories, read and written with safetensors and JSON only.

A directory in Hugging Face's layout, as ``save_pretrained`` writes it and the
hub serves it::

    DIR/config.json                   the architecture: model_type ("gpt2", "llama") and its fields
    DIR/model.safetensors             the weights by HF's names (or shards listed in
                                      model.safetensors.index.json)
    DIR/tokenizer.json                HF tokenizers' file (byte-level BPE here) ...
    DIR/vocab.json, DIR/merges.txt    ... or GPT-2's original pair of files
    DIR/tokenizer_config.json         which tokenizer class loads it, the special tokens

Reading needs no ``transformers``: :func:`read_hf_config` (JSON),
:func:`read_hf_weights` (safetensors: a JSON header and raw arrays, no pickle,
so a downloaded model cannot run code when it is read) and
:func:`read_hf_tokenizer` (``numpy_impl``'s byte-level BPE reads both
tokenizer formats). :func:`write_hf_directory` writes one the same way, all at
once (``checkpoint_files.new_directory``), for ``transformers``'
``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILE = "tokenizer.json"
VOCAB_FILE, MERGES_FILE = "vocab.json", "merges.txt"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
ENDOFTEXT = "<|endoftext|>"  # GPT-2's end-of-document token
#: Spelling of the placeholder tokens that pad a tokenizer to a model's larger vocabulary,
#: and the most of them a model may need (nanoGPT rounds 50257 up to 50304: 47).
RESERVED = "<|reserved_{}|>"
MAX_RESERVED = 1024
MAX_JSON_BYTES = 256 << 20  # Llama 3's tokenizer.json is 9 MB; a bigger file is not a config


def own_file(path: Path) -> Path:
    """``path`` resolved, proven to be a file inside its directory (a Hugging Face cache
    snapshot may link it to its repository's ``blobs/``, as the hub's cache does).

    Raises:
        FileNotFoundError: no such file. ValueError: a link that leads elsewhere.
    """
    directory = Path(path).parent.resolve()
    real = Path(path).resolve()
    blobs = directory.parent.parent / "blobs"
    if not (real.is_relative_to(directory) or real.parent == blobs):
        raise ValueError(f"{path}: a link to {real}, outside {directory}")
    if not real.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return real


class _RepeatedKey(Exception):
    """A JSON object that gives one key twice (its name in ``args[0]``)."""


def _no_repeats(pairs: list[tuple[str, object]]) -> dict:
    """``object_pairs_hook``: the object, refusing a key given twice."""
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise _RepeatedKey(key)
        seen[key] = value
    return seen


def read_json(path: Path) -> dict:
    """A JSON object from ``path``.

    Raises:
        FileNotFoundError: no such file (named). ValueError: not a JSON object, or
            an object that gives a key twice (JSON would keep the last silently).
    """
    real = own_file(path)
    if real.stat().st_size > MAX_JSON_BYTES:
        raise ValueError(f"{path}: {real.stat().st_size >> 20} MiB, too large for a JSON config")
    try:
        document = json.loads(real.read_text(encoding="utf-8"), object_pairs_hook=_no_repeats)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    except _RepeatedKey as e:  # JSON keeps the last silently: which one was meant?
        raise ValueError(f"{path}: the key {e.args[0]!r} is given twice; keep one") from None
    if not isinstance(document, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(document).__name__}")
    return document


def read_hf_config(directory: Path) -> dict:
    """``DIR/config.json``, a Hugging Face model config (it names its ``model_type``).

    Raises:
        FileNotFoundError: DIR or its config.json missing.
        ValueError: not JSON, a twinformer checkpoint's config, or no ``model_type``.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory")
    config = read_json(directory / CONFIG_FILE)
    if config.get("format") == "twinformer":
        raise ValueError(
            f"{directory} is a twinformer checkpoint already: sample, inspect or train "
            "--init-from it as it is"
        )
    if not isinstance(config.get("model_type"), str):
        raise ValueError(
            f"{directory / CONFIG_FILE}: no 'model_type': not a Hugging Face model config"
        )
    return config


def _read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of one safetensors file, as float32 (integers as they are)."""
    from safetensors import SafetensorError, safe_open

    arrays: dict[str, np.ndarray] = {}
    path = own_file(path)
    try:
        with safe_open(str(path), framework="numpy") as f:
            names = list(f.keys())
            dtypes = {k: f.get_slice(k).get_dtype() for k in names}
            for k in names:
                if dtypes[k] != "BF16":  # NumPy has no bfloat16: see below
                    arrays[k] = f.get_tensor(k)
        if "BF16" in dtypes.values():
            # bfloat16 is the top half of a float32: torch (a dependency anyway) widens it
            with safe_open(str(path), framework="pt") as f:
                for k in names:
                    if dtypes[k] == "BF16":
                        arrays[k] = f.get_tensor(k).float().numpy()
    except (SafetensorError, OSError, ValueError, AttributeError, TypeError) as e:
        raise ValueError(f"{path}: not a readable safetensors file ({e})") from e
    return {
        k: a.astype(np.float32) if a.dtype.kind == "f" and a.dtype != np.float32 else a
        for k, a in arrays.items()
    }


def read_hf_weights(directory: Path) -> dict[str, np.ndarray]:
    """The weights of ``DIR``: ``model.safetensors``, or the shards its
    ``model.safetensors.index.json`` lists; floating point arrays as float32.

    Raises:
        FileNotFoundError: neither file (a ``pytorch_model.bin`` is named: this reader
            takes safetensors only, never a pickle).
        ValueError: an unreadable file, or a tensor in two shards.
    """
    directory = Path(directory)
    single, index = directory / WEIGHTS_FILE, directory / INDEX_FILE
    if single.is_file():
        return _read_safetensors(single)
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise ValueError(f"{index}: no 'weight_map' of tensor -> shard file")
        arrays: dict[str, np.ndarray] = {}
        for shard in sorted(set(map(str, weight_map.values()))):
            if Path(shard).name != shard:
                raise ValueError(f"{index}: shard {shard!r} is not a file name in {directory}")
            for k, a in _read_safetensors(directory / shard).items():
                if k in arrays:
                    raise ValueError(f"{index}: {k} is in two shards")
                arrays[k] = a
        return arrays
    pickled = [p.name for p in directory.glob("*.bin")]
    hint = (
        f" (it has {', '.join(sorted(pickled))}: PyTorch pickles, which this reader does not "
        "open; transformers' save_pretrained(DIR, safe_serialization=True) converts them)"
        if pickled
        else ""
    )
    raise FileNotFoundError(f"{directory}: no {WEIGHTS_FILE} and no {INDEX_FILE}{hint}")


def _special_tokens(directory: Path, vocab: dict[bytes, int]) -> dict[str, int]:
    """The special tokens of a vocab.json + merges.txt pair: those tokenizer_config.json's
    ``added_tokens_decoder`` lists, else GPT-2's ``<|endoftext|>`` if the vocabulary has it."""
    specials: dict[str, int] = {}
    config_path = directory / TOKENIZER_CONFIG_FILE
    if config_path.is_file():
        decoder = read_json(config_path).get("added_tokens_decoder") or {}
        if not isinstance(decoder, dict):
            raise ValueError(f"{config_path}: 'added_tokens_decoder' must map ids to tokens")
        for i, entry in decoder.items():
            if isinstance(entry, dict) and isinstance(entry.get("content"), str):
                specials[entry["content"]] = int(i)
    if not specials and ENDOFTEXT.encode() in vocab:
        specials[ENDOFTEXT] = vocab[ENDOFTEXT.encode()]
    return specials


def read_hf_tokenizer(directory: Path):
    """DIR's tokenizer as ``numpy_impl``'s byte-level :class:`BPETokenizer`:
    from ``tokenizer.json``, else from GPT-2's ``vocab.json`` + ``merges.txt``;
    None when DIR has neither.

    Raises:
        ValueError: a tokenizer that is not a plain byte-level BPE (the field named,
            e.g. a Llama 2 tokenizer's ``model.byte_fallback``), or malformed files.
    """
    from numpy_impl.byte_level import GPT2_SPLIT_PATTERN, str_to_token
    from numpy_impl.tokenizer import BPETokenizer

    directory = Path(directory)
    path = directory / TOKENIZER_FILE
    if path.is_file():
        if _is_char_tokenizer(read_json(path)):
            raise ValueError(
                f"{path}: a character vocabulary (one token per character, no merges, as "
                "`python -m labs export` writes a char model's): this reader takes byte-level "
                "BPE only; sample, inspect or train --init-from the twinformer checkpoint it "
                "was exported from instead"
            )
        try:
            return BPETokenizer.from_file(own_file(path))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: {e}") from e
    vocab_path, merges_path = directory / VOCAB_FILE, directory / MERGES_FILE
    if not (vocab_path.is_file() and merges_path.is_file()):
        return None
    try:
        vocab = {str_to_token(s): int(i) for s, i in read_json(vocab_path).items()}
        merges = []
        lines = own_file(merges_path).read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            if not line.strip() or (n == 1 and line.startswith("#version")):
                continue
            parts = line.split(" ")
            if len(parts) != 2:
                raise ValueError(f"{merges_path}:{n}: expected 'left right', got {line!r}")
            merges.append((str_to_token(parts[0]), str_to_token(parts[1])))
        return BPETokenizer(vocab, merges, _special_tokens(directory, vocab), GPT2_SPLIT_PATTERN)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{vocab_path}, {merges_path}: {e}") from e


def fit_vocabulary(tokenizer, vocab_size: int):
    """``tokenizer`` with as many ids as the model has embedding rows.

    A model's vocabulary may be larger than its tokenizer's: nanoGPT rounds GPT-2's
    50257 up to 50304 (a multiple of 64, for speed). The rows past the tokenizer's
    ids are never produced by encoding; here they become special tokens
    ``<|reserved_N|>``, so that every id the model can sample decodes to something.

    Returns:
        ``(tokenizer, number of reserved tokens added)``.

    Raises:
        ValueError: the tokenizer has more ids than the model has rows, or more than
            :data:`MAX_RESERVED` fewer (then it is not the model's tokenizer).
    """
    n = tokenizer.vocab_size
    if n > vocab_size:
        raise ValueError(
            f"vocab_size: the model has {vocab_size} token rows, but its tokenizer "
            f"{n} ids; the ids past {vocab_size - 1} would have no embedding"
        )
    if vocab_size - n > MAX_RESERVED:
        raise ValueError(
            f"vocab_size: the model has {vocab_size} token rows, its tokenizer only {n} ids: "
            f"a rounded-up vocabulary adds a few dozen rows, not {vocab_size - n}; is this "
            "the tokenizer the model was trained with?"
        )
    if n == vocab_size:
        return tokenizer, 0
    specials = dict(tokenizer.special_tokens)
    for i in range(n, vocab_size):
        name = RESERVED.format(i)
        if name in specials:
            raise ValueError(f"tokenizer: already has a token named {name!r}")
        specials[name] = i
    padded = type(tokenizer)(tokenizer.vocab, tokenizer.merges, specials, tokenizer.pattern)
    return padded, vocab_size - n


def _is_char_tokenizer(document: dict) -> bool:
    """Whether ``tokenizer.json``'s ``document`` is :func:`char_tokenizer_json`'s layout."""
    model, decoder = document.get("model"), document.get("decoder")
    return (
        document.get("pre_tokenizer") is None
        and isinstance(model, dict)
        and model.get("type") == "BPE"
        and model.get("merges") == []
        and isinstance(decoder, dict)
        and decoder.get("type") == "Fuse"
    )


# -- writing -----------------------------------------------------------------------------
def char_tokenizer_json(chars: str) -> str:
    """A character tokenizer (``chars[i]`` is id ``i``) as HF ``tokenizer.json``: a BPE
    model with one token per character and no merges, no pre-tokenizer (the text is one
    piece, split into characters), and the ``Fuse`` decoder (tokens joined as they are)."""
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Fuse"},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {c: i for i, c in enumerate(chars)},
            "merges": [],
        },
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def hf_tokenizer_files(tokenizer, block_size: int) -> tuple[dict[str, bytes], int | None]:
    """``tokenizer.json`` and ``tokenizer_config.json`` for ``AutoTokenizer``, and the id
    of ``<|endoftext|>`` (GPT-2's bos and eos) when the tokenizer has it.

    ``tokenizer_class`` is ``PreTrainedTokenizerFast``: the tokenizer is loaded from
    tokenizer.json as written (transformers 4 and 5), whatever the model's architecture.
    """
    if hasattr(tokenizer, "to_json"):  # byte-level BPE
        text = tokenizer.to_json()
        eos = tokenizer.special_tokens.get(ENDOFTEXT)
    else:  # characters
        text = char_tokenizer_json(tokenizer.chars)
        eos = None
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,  # " ," would otherwise become ","
        "model_max_length": block_size,
    }
    if eos is not None:
        config.update(bos_token=ENDOFTEXT, eos_token=ENDOFTEXT)
    files = {
        TOKENIZER_FILE: text.encode("utf-8"),
        TOKENIZER_CONFIG_FILE: (json.dumps(config, indent=2) + "\n").encode("utf-8"),
    }
    return files, eos


def write_hf_directory(
    out: str | os.PathLike, config: dict, hf_state: dict[str, np.ndarray], files: dict[str, bytes]
) -> Path:
    """Write a new HF directory: ``config.json``, ``model.safetensors`` (``hf_state``, with
    the ``{"format": "pt"}`` metadata transformers requires) and ``files``.

    All at once (:func:`checkpoint_files.new_directory`): ``out`` must not exist, and
    is either absent or complete afterwards.

    Raises:
        FileExistsError: ``out`` exists. ValueError: ``config`` is not strict JSON.
    """
    from safetensors.numpy import save

    from .checkpoint_files import _contiguous, _write_file, new_directory

    # serialised before anything is written: a bad value fails here, not half-way
    blobs = {
        CONFIG_FILE: (json.dumps(config, indent=2, allow_nan=False) + "\n").encode("utf-8"),
        WEIGHTS_FILE: save(_contiguous(hf_state), metadata={"format": "pt"}),
        **files,
    }
    with new_directory(out) as tmp:
        for name, blob in blobs.items():
            _write_file(tmp / name, blob)
    return Path(out)
