"""The character tokenizer (chapter 01): one token per Unicode character.

The vocabulary is the sorted set of the corpus's characters (65 for Tiny Shakespeare), as in
nanoGPT's ``shakespeare_char``. No twin: both backends take its NumPy ids. Chapter 11's
byte-level BPE is in ``tokenizer.py``.

    >>> tok = CharTokenizer.from_text("hello")
    >>> tok.chars, tok.encode("hell"), tok.decode([3, 1])
    ('ehlo', [1, 0, 2, 2], 'oh')
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np


def _describe(chars: Iterable[str]) -> str:
    """``'é' (U+00E9), '\\t' (U+0009)``: readable even for invisible characters."""
    return ", ".join(f"{c!r} (U+{ord(c):04X})" for c in chars)


class CharTokenizer:
    """Maps each character of a fixed vocabulary to an integer id and back.

    ``chars``: the vocabulary, sorted on entry, so ``chars[i]`` is the character of id ``i``.
    Raises TypeError if ``chars`` is not a ``str``; ValueError if it is empty or repeats one.
    """

    def __init__(self, chars: str):
        if not isinstance(chars, str):
            raise TypeError(f"chars: expected a str, got {type(chars).__name__}")
        if not chars:
            raise ValueError("chars: the vocabulary is empty")
        if len(set(chars)) != len(chars):
            dups = sorted(c for c, n in Counter(chars).items() if n > 1)
            raise ValueError(f"chars: repeated characters in the vocabulary: {_describe(dups)}")
        self.chars = "".join(sorted(chars))
        self.vocab_size = len(self.chars)
        self._stoi = {c: i for i, c in enumerate(self.chars)}
        # _table[ord(c)] is c's id (-1 if none): encoding a corpus is one NumPy gather
        codepoints = np.array([ord(c) for c in self.chars], dtype=np.int64)
        self._table = np.full(int(codepoints.max()) + 1, -1, dtype=np.int64)
        self._table[codepoints] = np.arange(self.vocab_size)

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer of every character of ``text``; ValueError if ``text`` is empty."""
        if not text:
            raise ValueError("text: cannot build a vocabulary from an empty text")
        return cls("".join(sorted(set(text))))

    # -- encoding ------------------------------------------------------------
    def _unknown_error(self, text: str) -> ValueError:
        unknown = sorted(set(text) - set(self.chars))
        shown, more = unknown[:10], len(unknown) - 10
        suffix = f" and {more} more" if more > 0 else ""
        return ValueError(
            f"text: characters not in the vocabulary: {_describe(shown)}{suffix} "
            f"(the vocabulary has {self.vocab_size} characters: {self.chars!r})"
        )

    def encode(self, text: str) -> list[int]:
        """Ids of the characters of ``text``. Raises TypeError if it is not a ``str``;
        ValueError listing the characters outside the vocabulary, with their code points."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        ### BEGIN SOLUTION ch01
        ### TODO: the id of each character, looked up in self._stoi; a character outside the
        ###   vocabulary raises self._unknown_error(text), a ValueError that lists them
        try:
            return [self._stoi[c] for c in text]
        except KeyError:
            raise self._unknown_error(text) from None
        ### END SOLUTION

    def encode_array(self, text: str, dtype=np.int64) -> np.ndarray:
        """Vectorised :meth:`encode`: ``(len(text),)`` ids of ``dtype`` (``np.uint16`` is
        nanoGPT's ``train.bin``). Raises as :meth:`encode`, and ValueError if ``dtype`` cannot
        hold every id."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        dtype = np.dtype(dtype)
        if dtype.kind not in "iu" or np.iinfo(dtype).max < self.vocab_size - 1:
            raise ValueError(f"dtype: {dtype} cannot hold ids up to {self.vocab_size - 1}")
        # UTF-32: one 4-byte code point per character, a free view
        codepoints = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
        in_table = codepoints < len(self._table)
        ids = np.full(codepoints.shape, -1, dtype=np.int64)
        ids[in_table] = self._table[codepoints[in_table]]
        if (ids < 0).any():
            raise self._unknown_error(text)
        return ids.astype(dtype, copy=False)

    # -- decoding ------------------------------------------------------------
    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        """The text of ids (a list or a 1-D integer array). Raises TypeError for a non-integer
        id; ValueError for an id outside ``[0, vocab_size)`` or an array that is not 1-D."""
        if isinstance(ids, np.ndarray):
            if ids.ndim != 1:
                raise ValueError(f"ids: expected a 1-D array, got shape {ids.shape}")
            if ids.size and ids.dtype.kind not in "iu":
                raise TypeError(f"ids: expected integer ids, got dtype {ids.dtype}")
            ids = ids.tolist()
        ### BEGIN SOLUTION ch01
        ### TODO: the character self.chars[i] of each id i, joined into one str; an id that is
        ###   not an int (a bool is not an id) raises TypeError("ids: ..."), an id outside
        ###   [0, vocab_size) raises ValueError("ids: ...")
        out = []
        for i in ids:
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"ids: expected integers, got {i!r} ({type(i).__name__})")
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"ids: id {int(i)} is outside [0, {self.vocab_size})")
            out.append(self.chars[i])
        return "".join(out)
        ### END SOLUTION

    # -- serialisation (stored in a checkpoint's config.json) -----------------
    def to_dict(self) -> dict:
        """``{"type": "char", "chars": ...}``: JSON-serialisable."""
        return {"type": "char", "chars": self.chars}

    @classmethod
    def from_dict(cls, d: dict) -> CharTokenizer:
        """Inverse of :meth:`to_dict`; ValueError if ``d`` is not a char tokenizer's dict."""
        if not isinstance(d, dict) or d.get("type") != "char" or "chars" not in d:
            raise ValueError(f'tokenizer: expected {{"type": "char", "chars": ...}}, got {d!r}')
        return cls(d["chars"])

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"
