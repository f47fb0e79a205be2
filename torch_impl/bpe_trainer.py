"""Byte-level BPE training, the library path (chapter 11): HF ``BpeTrainer``.

The twin of ``numpy_impl/bpe_trainer.py``: :func:`train_bpe` takes the same arguments
and returns the same tables, the vocabulary and the merges, learned by HF's Rust
trainer (the NumPy twin's are the same, merge for merge). ``BPETokenizer.train``
calls it. Nothing here imports ``numpy_impl``.

    >>> vocab, merges = train_bpe(text, 1000)       # HF BpeTrainer (Rust)
"""

from __future__ import annotations

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from .byte_level import (
    GPT2_SPLIT_PATTERN,
    _byte_level,
    _check_pattern,
    _check_text,
    _check_vocab_size,
)
from .tokenizer_files import parse_tokenizer_json


def train_bpe(
    text: str, vocab_size: int, pattern: str | None = GPT2_SPLIT_PATTERN
) -> tuple[dict[bytes, int], list[tuple[bytes, bytes]]]:
    """HF ``BpeTrainer`` learns ``vocab_size`` tokens from ``text`` (one document,
    pre-tokenized whole).

    ``initial_alphabet=ByteLevel.alphabet()`` puts all 256 bytes in the vocabulary,
    seen in the text or not: that is what spares byte-level BPE an ``[UNK]``. HF's
    Rust trainer uses its thread pool (``RAYON_NUM_THREADS``).

    Returns:
        ``(vocab, merges)``: ``{token bytes: id}`` and the merges in order, read back
        from HF's ``tokenizer.json``.

    Raises:
        TypeError, ValueError: as the NumPy twin's ``train_bpe``.
    """
    _check_text(text)
    _check_vocab_size(vocab_size)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = _byte_level(_check_pattern(pattern))
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([text], trainer)
    vocab, merges, _, _ = parse_tokenizer_json(tok.to_str())
    return vocab, merges
