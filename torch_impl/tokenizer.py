"""Byte-level BPE by Hugging Face ``tokenizers``, behind the interface of
``numpy_impl/tokenizer.py``'s from-scratch ``BPETokenizer``.

This file adds what both twins share: the constructor (``vocab`` and ``merges`` as bytes),
the special-token rule (not from plain text unless allowed), the errors (raised before HF,
which skips an unknown id silently) and the ``tokenizer.json``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models

from .bpe_trainer import train_bpe
from .byte_level import (
    DIGITS_SPLIT_PATTERN,
    ENDOFTEXT,
    GPT2_SPLIT_PATTERN,
    _byte_level,
    _check_allowed_special,
    _check_ids,
    _check_pattern,
    _check_special_tokens,
    _check_text,
    _check_vocab_and_specials,
    _check_vocab_size,
    str_to_token,
    token_to_str,
)
from .tokenizer_files import DecodeStream, parse_tokenizer_json, tokenizer_to_json, write_atomically


def _hf_tokenizer(vocab_str: dict[str, int], merges_str: list, pattern: str | None) -> Tokenizer:
    tok = Tokenizer(models.BPE(vocab=vocab_str, merges=merges_str))
    tok.pre_tokenizer = _byte_level(pattern)
    tok.decoder = decoders.ByteLevel()
    return tok


class BPETokenizer:
    """Byte-level BPE through HF ``tokenizers``: the NumPy twin's arguments, attributes and
    errors, plus ``hf_tokenizer`` (the ``tokenizers.Tokenizer`` doing the work)."""

    def __init__(
        self,
        vocab: dict[bytes, int],
        merges: list[tuple[bytes, bytes]],
        special_tokens: dict[str, int] | None = None,
        pattern: str | None = GPT2_SPLIT_PATTERN,
    ):
        _check_pattern(pattern)
        special_tokens = {} if special_tokens is None else special_tokens
        id_bytes = _check_vocab_and_specials(vocab, special_tokens)
        for rank, pair in enumerate(merges):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(f"merges[{rank}]: expected a pair of bytes, got {pair!r}")
            left, right = pair
            if left not in vocab or right not in vocab or left + right not in vocab:
                raise ValueError(
                    f"merges[{rank}]: {left!r} + {right!r}: both sides and the merged token "
                    "must be in vocab"
                )
        self.vocab = dict(vocab)
        self.merges = [tuple(m) for m in merges]
        self.special_tokens = {s: int(i) for s, i in special_tokens.items()}
        self.pattern = pattern
        self.vocab_size = len(id_bytes)
        self._id_bytes = id_bytes
        vocab_str = {token_to_str(t): int(i) for t, i in vocab.items()}
        merges_str = [(token_to_str(a), token_to_str(b)) for a, b in self.merges]
        self.hf_tokenizer = _hf_tokenizer(vocab_str, merges_str, pattern)
        self._add_specials(self.hf_tokenizer)
        # HF extracts every added token from any text: a special token that is not allowed
        # is encoded as ordinary bytes by this second Tokenizer, which has none
        self._hf_plain = _hf_tokenizer(vocab_str, merges_str, pattern)

    def _add_specials(self, tok: Tokenizer) -> None:
        # HF numbers added tokens itself; add them in id order and check it agrees
        for s, i in sorted(self.special_tokens.items(), key=lambda kv: kv[1]):
            tok.add_special_tokens([AddedToken(s, special=True, normalized=False)])
            if tok.token_to_id(s) != i:
                raise ValueError(
                    f"special_tokens: HF gives {s!r} the id {tok.token_to_id(s)}, not {i}"
                )

    # -- training ----------------------------------------------------------------------
    @classmethod
    def train(
        cls,
        text: str,
        vocab_size: int,
        special_tokens: Iterable[str] = (ENDOFTEXT,),
        pattern: str | None = GPT2_SPLIT_PATTERN,
    ) -> BPETokenizer:
        """:func:`train_bpe` learns ``vocab_size - len(special_tokens)`` tokens, then the
        special tokens take the next ids. Raises as the NumPy twin's ``train``."""
        _check_text(text)
        specials = _check_special_tokens(special_tokens)
        _check_vocab_size(vocab_size, len(specials))
        vocab, merges = train_bpe(text, vocab_size - len(specials), pattern)
        # HF numbers the special tokens it adds (a token it already has keeps its id)
        hf = cls(vocab, merges, pattern=pattern).hf_tokenizer
        hf.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        return cls(vocab, merges, {s: hf.token_to_id(s) for s in specials}, pattern)

    # -- encoding ----------------------------------------------------------------------
    def pre_tokenize(self, text: str) -> list[str]:
        """HF ``ByteLevel``'s pieces, turned back from byte-level spelling into text."""
        _check_text(text)
        pieces = self.hf_tokenizer.pre_tokenizer.pre_tokenize_str(text)
        return [str_to_token(p).decode("utf-8") for p, _ in pieces]

    def encode(self, text: str, allowed_special: Iterable[str] | str = frozenset()) -> list[int]:
        """HF's ids of ``text``; special tokens only where allowed (raises as the twin)."""
        _check_text(text)
        allowed = _check_allowed_special(allowed_special, self.special_tokens)
        if allowed == set(self.special_tokens):  # HF's own behaviour: extract them all
            return self.hf_tokenizer.encode(text, add_special_tokens=False).ids
        if not allowed:
            return self._hf_plain.encode(text, add_special_tokens=False).ids
        alternatives = sorted(allowed, key=lambda s: (-len(s), s))
        out, start = [], 0
        for m in re.finditer("|".join(map(re.escape, alternatives)), text):
            out += self._hf_plain.encode(text[start : m.start()], add_special_tokens=False).ids
            out.append(self.special_tokens[m.group()])
            start = m.end()
        return out + self._hf_plain.encode(text[start:], add_special_tokens=False).ids

    def encode_array(
        self, text: str, dtype=np.int64, allowed_special: Iterable[str] | str = frozenset()
    ) -> np.ndarray:
        """:meth:`encode` as a ``(N,)`` array; ``ValueError`` if ``dtype`` cannot hold every id."""
        dtype = np.dtype(dtype)
        if dtype.kind not in "iu" or np.iinfo(dtype).max < self.vocab_size - 1:
            raise ValueError(f"dtype: {dtype} cannot hold ids up to {self.vocab_size - 1}")
        return np.array(self.encode(text, allowed_special), dtype=dtype)

    # -- decoding ----------------------------------------------------------------------
    def decode_bytes(self, ids: Iterable[int] | np.ndarray) -> bytes:
        """The bytes of ``ids``, joined (HF decodes to ``str`` only); raises as the twin."""
        return b"".join(self._id_bytes[i] for i in _check_ids(ids, self.vocab_size))

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        """HF's ``decode``: bytes joined, invalid UTF-8 -> U+FFFD, special tokens kept."""
        return self.hf_tokenizer.decode(_check_ids(ids, self.vocab_size), skip_special_tokens=False)

    def decode_stream(self) -> DecodeStream:
        """A :class:`DecodeStream` over this tokenizer."""
        return DecodeStream(self)

    def id_to_token(self, token_id: int) -> str:
        """HF's spelling of the token (``"Ġthe"``); raises as :meth:`decode_bytes`."""
        (i,) = _check_ids([token_id], self.vocab_size)
        return self.hf_tokenizer.id_to_token(i)

    def token_to_id(self, token: str) -> int | None:
        """Inverse of :meth:`id_to_token`; None for an unknown token."""
        return self.hf_tokenizer.token_to_id(token)

    # -- tokenizer.json: the code is in tokenizer_files.py -----------------------------
    def to_json(self) -> str:
        """HF's own serialisation (``Tokenizer.to_str``): see :func:`tokenizer_to_json`."""
        return tokenizer_to_json(self)

    def save(self, path) -> None:
        """Write :meth:`to_json` to ``path`` atomically (temporary file + rename)."""
        write_atomically(path, self.to_json())

    @classmethod
    def from_json(cls, text: str) -> BPETokenizer:
        """HF ``Tokenizer.from_str``, then the twin's checks (:func:`parse_tokenizer_json`);
        ``ValueError`` for a file that is not a plain byte-level BPE."""
        return cls(*parse_tokenizer_json(text))

    @classmethod
    def from_file(cls, path) -> BPETokenizer:
        """:meth:`from_json` of a file (``FileNotFoundError`` if there is none)."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def __repr__(self) -> str:
        pre = {None: "none", DIGITS_SPLIT_PATTERN: "digits"}.get(self.pattern, "gpt2")
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special_tokens={sorted(self.special_tokens)}, pre_tokenizer={pre})"
        )
