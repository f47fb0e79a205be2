"""Which tokenizer a run uses, where it comes from, and how it travels with a checkpoint.

* ``--tokenizer char``: ``numpy_impl.CharTokenizer`` for both backends (chapter 01).
* ``--tokenizer bpe --vocab-size N``: byte-level BPE (chapter 11), trained by the
  backend's own implementation: the NumPy backend uses the from-scratch
  ``numpy_impl.BPETokenizer``, the PyTorch backend HF ``tokenizers`` through
  ``torch_impl.BPETokenizer``. Both learn the same merges (tested), so either
  checkpoint loads in either backend.

A BPE tokenizer is trained once per (implementation, corpus, vocab size) and cached
as ``$XDG_CACHE_HOME/twinformer/tokenizers/bpe-<impl>-<corpus sha256>-<N>.json``;
the checkpoint carries its own copy, ``tokenizer.json`` (HF's format), whose sha256
config.json records next to the weights'.

Loss per token is not comparable across tokenizers (a BPE token is ~3.5 bytes, a
character 1), so runs also report bits per byte:
``bits/byte = loss (nats/token) x tokens / bytes / ln 2`` over the validation split.
"""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path

from .data import cache_path

TOKENIZER_FILE = "tokenizer.json"
KINDS = ("char", "bpe")


def bpe_class(backend: str):
    """The BPE implementation a backend uses: from scratch (numpy) or HF (torch)."""
    if backend == "numpy":
        from numpy_impl.tokenizer import BPETokenizer
    elif backend == "torch":
        from torch_impl.tokenizer import BPETokenizer
    else:
        raise ValueError(f"backend: expected 'numpy' or 'torch', got {backend!r}")
    return BPETokenizer


def _impl(backend: str) -> str:
    return "numpy" if backend == "numpy" else "hf"


def cache_file(backend: str, text: str, vocab_size: int) -> Path:
    """Where the BPE tokenizer of this corpus and vocabulary size is cached."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return cache_path().parent / "tokenizers" / f"bpe-{_impl(backend)}-{digest}-{vocab_size}.json"


def build_tokenizer(kind: str, backend: str, text: str, vocab_size: int, log=print):
    """The run's tokenizer: characters of ``text``, or a cached / freshly trained BPE.

    Raises:
        ValueError: an unknown ``kind``, or a ``vocab_size`` the trainer rejects.
    """
    if kind == "char":
        from numpy_impl.char_tokenizer import CharTokenizer

        return CharTokenizer.from_text(text)
    if kind != "bpe":
        raise ValueError(f"tokenizer: expected one of {KINDS}, got {kind!r}")
    cls = bpe_class(backend)
    path = cache_file(backend, text, vocab_size)
    if path.is_file():
        try:
            tokenizer = cls.from_file(path)
            log(f"BPE tokenizer ({_impl(backend)}, vocab {vocab_size}) from the cache: {path}")
            return tokenizer
        except (OSError, ValueError) as e:  # a damaged cache entry: train again
            log(f"ignoring the cached tokenizer {path}: {e}")
    t0 = time.perf_counter()
    tokenizer = cls.train(text, vocab_size)
    try:  # the cache saves time, nothing more: a full disk or a read-only home costs nothing
        path.parent.mkdir(parents=True, exist_ok=True)
        tokenizer.save(path)
        cached = f"cached at {path}"
    except OSError as e:
        cached = f"not cached ({path}: {e.strerror or e})"
    stopped = "" if tokenizer.vocab_size == vocab_size else f" (asked for {vocab_size})"
    log(
        f"trained a BPE tokenizer ({_impl(backend)}, vocab {tokenizer.vocab_size}{stopped}) in "
        f"{time.perf_counter() - t0:.1f} s; {cached}"
    )
    return tokenizer


def tokenizer_config(tokenizer) -> tuple[dict, dict[str, bytes]]:
    """``config.json``'s ``"tokenizer"`` section, and the files to store next to it.

    A char tokenizer fits in the section; a BPE one is ``tokenizer.json``, named
    there with its sha256 (so a mismatched file is caught on loading).
    """
    if not hasattr(tokenizer, "to_json"):
        return tokenizer.to_dict(), {}
    blob = tokenizer.to_json().encode("utf-8")
    section = {
        "type": "bpe",
        "file": TOKENIZER_FILE,
        "vocab_size": tokenizer.vocab_size,
        "sha256": hashlib.sha256(blob).hexdigest(),
    }
    return section, {TOKENIZER_FILE: blob}


def load_tokenizer(config: dict, directory, backend: str):
    """The tokenizer of the checkpoint in ``directory`` whose config.json is ``config``,
    loaded by ``backend``'s implementation.

    Raises:
        FileNotFoundError: ``tokenizer.json`` is missing.
        ValueError: an unknown tokenizer type, a file whose sha256 differs from the
            one recorded, or a file the implementation cannot read.
    """
    section = config["tokenizer"]
    kind = section.get("type")
    if kind == "char":
        from numpy_impl.char_tokenizer import CharTokenizer

        return CharTokenizer.from_dict(section)
    if kind != "bpe":
        raise ValueError(f"tokenizer: unknown type {kind!r} (expected one of {KINDS})")
    path = Path(directory) / section.get("file", TOKENIZER_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {path}")
    blob = path.read_bytes()
    if hashlib.sha256(blob).hexdigest() != section.get("sha256"):
        raise ValueError(f"{path} is not the tokenizer config.json was saved with (sha256)")
    tokenizer = bpe_class(backend).from_json(blob.decode("utf-8"))
    if tokenizer.vocab_size != section.get("vocab_size"):
        raise ValueError(f"{path}: vocab_size {tokenizer.vocab_size}, config says otherwise")
    return tokenizer


def bytes_per_token(tokenizer, ids) -> float:
    """UTF-8 bytes per token of ``ids`` (a split of the corpus): what turns a loss per
    token into a loss per byte."""
    if len(ids) == 0:
        raise ValueError("ids: empty")
    if hasattr(tokenizer, "decode_bytes"):
        n_bytes = len(tokenizer.decode_bytes(ids))
    else:
        n_bytes = len(tokenizer.decode(ids).encode("utf-8"))
    return n_bytes / len(ids)


def bits_per_byte(loss_nats_per_token: float, bytes_per_tok: float) -> float:
    """``loss x tokens / bytes / ln 2``: the loss in bits per UTF-8 byte of text."""
    return loss_nats_per_token / bytes_per_tok / math.log(2)
