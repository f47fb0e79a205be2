"""Byte-level BPE training by HF's Rust ``BpeTrainer`` (chapter 11).

Twin of ``numpy_impl/bpe_trainer.py``: same arguments, same vocabulary and merges.
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
    """Learn ``vocab_size`` tokens from ``text``; return ``({token bytes: id}, merges in order)``.

    All 256 bytes enter the vocabulary (``initial_alphabet``), so no ``[UNK]`` token
    is needed. Raises as the NumPy twin's ``train_bpe``.
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
