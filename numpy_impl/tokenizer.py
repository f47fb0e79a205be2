"""Byte-level BPE from scratch (chapter 11): GPT-2's tokenizer scheme (Sennrich et al.
2016; Radford et al. 2019, sec. 2.2) in pure Python and NumPy.

The source material's plain BPE (:func:`get_pair_counts`, :func:`merge`, :func:`train_bpe_plain`)
and :class:`BPETokenizer`. Beside it, each with a twin: ``byte_level.py`` (bytes and
pre-tokenization), ``bpe_trainer.py`` (the fast :func:`train_bpe`) and ``tokenizer_files.py``.
This file's twin, ``torch_impl/tokenizer.py``, is the same interface over HF ``tokenizers``.

    >>> bpe = BPETokenizer.train("hello hello hello", vocab_size=262)
    >>> bpe.pre_tokenize("hello hello"), [bpe.id_to_token(i) for i in bpe.encode(" hello")]
    (['hello', ' hello'], ['Ġhello'])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from .bpe_trainer import train_bpe
from .byte_level import (
    _BYTE_TO_ID,
    DIGITS_SPLIT_PATTERN,
    ENDOFTEXT,
    GPT2_SPLIT_PATTERN,
    _as_bytes_pairs,
    _base_vocab,
    _check_allowed_special,
    _check_ids,
    _check_special_tokens,
    _check_text,
    _check_vocab_and_specials,
    _check_vocab_size,
    _compile,
    pre_tokenize,
    str_to_token,
    token_to_str,
)
from .tokenizer_files import DecodeStream, parse_tokenizer_json, tokenizer_to_json, write_atomically

_CACHE_LIMIT = 1 << 17  # pre-tokens kept in the encoding cache before it is cleared
_LONG_PIECE = 64  # pieces longer than this (in bytes) merge with a heap, not a rescan


# -- the source material's BPE: the whole text, no pre-tokenization, a rescan per merge --
def get_pair_counts(seq: list[int]) -> Counter:
    """How often each adjacent pair of ids occurs, overlaps included: ``[1, 2, 1, 2]`` ->
    ``{(1, 2): 2, (2, 1): 1}``; ``[5, 5, 5]`` has ``(5, 5)`` twice."""
    return Counter(zip(seq, seq[1:], strict=False))


def merge(seq: list[int], pair: tuple[int, int], new_token: int) -> list[int]:
    """A new list: each ``pair`` in ``seq`` replaced by ``new_token``, left to right without
    overlaps: ``merge([5, 5, 5], (5, 5), 9) == [9, 5]``."""
    ### BEGIN SOLUTION ch11
    ### TODO: walk seq with an index i; where seq[i], seq[i + 1] is the pair, append
    ###   new_token and step 2, else append seq[i] and step 1 (so [5, 5, 5] -> [9, 5])
    out, i, n = [], 0, len(seq)
    while i < n:
        if i < n - 1 and seq[i] == pair[0] and seq[i + 1] == pair[1]:
            out.append(new_token)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out
    ### END SOLUTION


def train_bpe_plain(
    text: str, vocab_size: int
) -> tuple[list[int], dict[bytes, int], list[tuple[bytes, bytes]]]:
    """The source material's byte-pair encoding, for reading: the whole text is one sequence,
    and every merge recounts every pair (O(merges x bytes)).

    From the text's UTF-8 bytes, repeatedly replace the most frequent adjacent pair by a new
    token until ``vocab_size`` tokens or no pair is left. Ties: the smallest ``(left, right)``
    ids, HF BpeTrainer's rule; a merge whose bytes are already a token reuses its id (as HF).
    Equals :func:`train_bpe` with ``pattern=None``, which is much faster.
    Returns ``(ids, vocab, merges)``: the text's final ids, ``{token bytes: id}``, and the
    merges in order as pairs of token bytes.
    Raises TypeError: ``text`` not a ``str``, ``vocab_size`` not an int; ValueError:
    ``vocab_size < 256``.
    """
    _check_text(text)
    _check_vocab_size(vocab_size)
    seq = list(text.encode("utf-8").translate(_BYTE_TO_ID))  # start from bytes
    vocab = _base_vocab()
    token_ids = {t: i for i, t in enumerate(vocab)}
    merges: list[tuple[int, int]] = []
    while len(vocab) < vocab_size:
        pairs = get_pair_counts(seq)
        if not pairs:
            break
        # most frequent adjacent pair; on a tie, the smallest (left, right) ids
        best = min(pairs, key=lambda p: (-pairs[p], p))
        new_bytes = vocab[best[0]] + vocab[best[1]]
        if new_bytes not in token_ids:
            token_ids[new_bytes] = len(vocab)
            vocab.append(new_bytes)
        seq = merge(seq, best, token_ids[new_bytes])
        merges.append(best)
    return (seq, *_as_bytes_pairs(vocab, merges))


class BPETokenizer:
    """Byte-level BPE, from scratch: GPT-2's tokenizer scheme (Radford et al. 2019, sec. 2.2).

    Text is UTF-8 bytes first and all 256 bytes are tokens, so any string encodes (no ``[UNK]``)
    and ``decode(encode(s)) == s``. ``encode`` splits the text with ``pattern``
    (:data:`GPT2_SPLIT_PATTERN`; None: no split, the source material's BPE), then merges inside
    each piece by rank: the earliest-learned adjacent pair first. Special tokens
    (``<|endoftext|>``) are never split and come out of ``encode`` only where allowed.
    vocab: ``{token bytes: id}`` holding the 256 bytes; merges: ``[(left, right) bytes]``,
    earliest first; special_tokens: ``{text: id}``. :meth:`train` gives HF's ids (bytes,
    merges, specials last); :meth:`save` / :meth:`from_file` write and read HF's tokenizer.json.
    Raises TypeError: wrong argument types; ValueError: a byte missing from ``vocab``, repeated
    ids, ids not covering ``[0, vocab_size)``, a merge of unknown tokens, a bad ``pattern``.
    """

    def __init__(
        self,
        vocab: dict[bytes, int],
        merges: list[tuple[bytes, bytes]],
        special_tokens: dict[str, int] | None = None,
        pattern: str | None = GPT2_SPLIT_PATTERN,
    ):
        self._pat = _compile(pattern)
        special_tokens = {} if special_tokens is None else special_tokens
        self._id_bytes: list[bytes] = _check_vocab_and_specials(vocab, special_tokens)
        self.vocab = dict(vocab)
        self.special_tokens = {s: int(i) for s, i in special_tokens.items()}
        self.pattern = pattern
        self.vocab_size = len(self._id_bytes)
        self._byte_ids: list[int] = [vocab[bytes([b])] for b in range(256)]
        # (left id, right id) -> (rank, merged id); a repeated pair keeps its last rank, as in HF
        self._ranks: dict[tuple[int, int], tuple[int, int]] = {}
        self.merges: list[tuple[bytes, bytes]] = []
        for rank, pair in enumerate(merges):
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
                raise TypeError(f"merges[{rank}]: expected a pair of bytes, got {pair!r}")
            left, right = pair
            if left not in vocab or right not in vocab or left + right not in vocab:
                raise ValueError(
                    f"merges[{rank}]: {left!r} + {right!r}: both sides and the merged token "
                    "must be in vocab"
                )
            self._ranks[(vocab[left], vocab[right])] = (rank, vocab[left + right])
            self.merges.append((left, right))
        self._cache: dict[str, tuple[int, ...]] = {}
        self._special_res: dict[frozenset, object] = {}

    # -- training ----------------------------------------------------------------------
    @classmethod
    def train(
        cls,
        text: str,
        vocab_size: int,
        special_tokens: Iterable[str] = (ENDOFTEXT,),
        pattern: str | None = GPT2_SPLIT_PATTERN,
    ) -> BPETokenizer:
        """Learn ``vocab_size - len(special_tokens)`` tokens with :func:`train_bpe` (HF
        BpeTrainer's algorithm), then append the special tokens.

        Raises TypeError: ``text`` not a ``str``, specials not strings; ValueError:
        ``vocab_size`` below 256 + the specials, empty or repeated specials, a bad ``pattern``.
        """
        _check_text(text)
        specials = _check_special_tokens(special_tokens)
        _check_vocab_size(vocab_size, len(specials))
        vocab, merges = train_bpe(text, vocab_size - len(specials), pattern)
        ids: dict[str, int] = {}
        for s in specials:  # a special whose bytes were learned keeps that id (HF does)
            ids[s] = vocab.get(s.encode("utf-8"), len(vocab) + len(ids))
        return cls(vocab, merges, ids, pattern)

    # -- encoding ----------------------------------------------------------------------
    def pre_tokenize(self, text: str) -> list[str]:
        """The pieces merges stay inside (see :func:`pre_tokenize`)."""
        return pre_tokenize(text, self.pattern)

    def _bpe(self, ids: list[int]) -> list[int]:
        """Apply the merges to one piece's byte ids, by rank: ``[h, e, l, l, o]`` ->
        ``[hello]`` if the merges say so."""
        ranks = self._ranks
        ### BEGIN SOLUTION ch11
        ### TODO: while some adjacent pair (ids[j], ids[j + 1]) is in ranks (-> (rank,
        ###   new id)), replace the one with the lowest rank (the leftmost on a tie) by
        ###   its new id; return ids when no pair is left to merge
        while len(ids) > 1:
            best = None  # (rank, position, new id) of the earliest-learned merge here
            for j in range(len(ids) - 1):
                m = ranks.get((ids[j], ids[j + 1]))
                if m is not None and (best is None or m[0] < best[0]):
                    best = (m[0], j, m[1])
            if best is None:
                break
            _, j, new = best
            ids[j : j + 2] = [new]
        return ids
        ### END SOLUTION

    def _bpe_long(self, ids: list[int]) -> list[int]:
        """:meth:`_bpe` for long pieces, in O(n log n): HF's ``Word::merge_all``. A heap
        of (rank, position) over a linked list of symbols; an entry is skipped when
        its position was merged away or now holds another pair."""
        import heapq

        ranks = self._ranks
        n = len(ids)
        if n < 2:
            return list(ids)
        sym = list(ids)
        prev, nxt = list(range(-1, n - 1)), list(range(1, n + 1))
        nxt[-1] = -1
        alive = [True] * n
        heap = [
            (m[0], j, m[1])
            for j in range(n - 1)
            if (m := ranks.get((sym[j], sym[j + 1]))) is not None
        ]
        heapq.heapify(heap)
        while heap:
            _, j, new = heapq.heappop(heap)
            k = nxt[j]
            if not alive[j] or k == -1:
                continue
            m = ranks.get((sym[j], sym[k]))
            if m is None or m[1] != new:
                continue  # stale: this position holds another pair now
            sym[j], alive[k] = new, False
            nxt[j] = nxt[k]
            if nxt[j] != -1:
                prev[nxt[j]] = j
            if prev[j] != -1 and (m := ranks.get((sym[prev[j]], new))) is not None:
                heapq.heappush(heap, (m[0], prev[j], m[1]))
            if nxt[j] != -1 and (m := ranks.get((new, sym[nxt[j]]))) is not None:
                heapq.heappush(heap, (m[0], j, m[1]))
        return [s for s, keep in zip(sym, alive, strict=True) if keep]

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        ids = [self._byte_ids[b] for b in piece.encode("utf-8")]
        ids = tuple(self._bpe_long(ids) if len(ids) > _LONG_PIECE else self._bpe(ids))
        if len(piece) <= _LONG_PIECE:  # a cache of the common pieces, not of everything
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[piece] = ids
        return ids

    def _encode_ordinary(self, text: str) -> list[int]:
        if not text:
            return []
        pieces = self._pat.findall(text) if self._pat is not None else [text]
        cache, out = self._cache, []
        for piece in pieces:
            ids = cache.get(piece)
            out += self._encode_piece(piece) if ids is None else ids
        return out

    def encode(self, text: str, allowed_special: Iterable[str] | str = frozenset()) -> list[int]:
        """The ids of ``text`` (any ``str``), each in ``[0, vocab_size)``.

        ``allowed_special``: special tokens whose exact text becomes their id, or ``"all"``;
        others are ordinary text (tiktoken's convention: a user's ``"<|endoftext|>"`` is bytes).
        Raises TypeError: ``text`` not a ``str``, ``allowed_special`` not ``"all"`` or
        strings; ValueError: ``allowed_special`` names a token that is not special here.
        """
        _check_text(text)
        allowed = _check_allowed_special(allowed_special, self.special_tokens)
        if not allowed:
            return self._encode_ordinary(text)
        if (special_re := self._special_res.get(allowed)) is None:
            import re

            # longest first: at one position the longest special token wins (as in HF)
            alternatives = sorted(allowed, key=lambda s: (-len(s), s))
            special_re = re.compile("|".join(map(re.escape, alternatives)))
            self._special_res[allowed] = special_re
        out, start = [], 0
        for m in special_re.finditer(text):
            out += self._encode_ordinary(text[start : m.start()])
            out.append(self.special_tokens[m.group()])
            start = m.end()
        return out + self._encode_ordinary(text[start:])

    def encode_array(
        self, text: str, dtype=np.int64, allowed_special: Iterable[str] | str = frozenset()
    ) -> np.ndarray:
        """:meth:`encode` as a ``(N,)`` array of ``dtype`` (``np.uint16``: nanoGPT's train.bin).

        Raises as :meth:`encode`, and ValueError: ``dtype`` cannot hold every id.
        """
        dtype = np.dtype(dtype)
        if dtype.kind not in "iu" or np.iinfo(dtype).max < self.vocab_size - 1:
            raise ValueError(f"dtype: {dtype} cannot hold ids up to {self.vocab_size - 1}")
        return np.array(self.encode(text, allowed_special), dtype=dtype)

    # -- decoding ----------------------------------------------------------------------
    def decode_bytes(self, ids: Iterable[int] | np.ndarray) -> bytes:
        """The bytes of ``ids``, joined (special tokens as their UTF-8 text).

        Raises TypeError: a non-integer id; ValueError: an id outside ``[0, vocab_size)``, not 1-D.
        """
        return b"".join(map(self._id_bytes.__getitem__, _check_ids(ids, self.vocab_size)))

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        """The text of ``ids``: all their bytes joined, then decoded from UTF-8 once.

        Token by token would break a character two tokens share (an emoji's 4 bytes). Invalid
        UTF-8 becomes U+FFFD, as in HF. Raises as :meth:`decode_bytes`.
        """
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_stream(self) -> DecodeStream:
        """A :class:`DecodeStream` over this tokenizer: text as ids arrive."""
        return DecodeStream(self)

    def id_to_token(self, token_id: int) -> str:
        """The token's tokenizer.json spelling (``"Ġthe"`` for ``b" the"``; a special's own text).

        Raises as :meth:`decode_bytes`.
        """
        (i,) = _check_ids([token_id], self.vocab_size)
        t = self._id_bytes[i]
        if i in self.special_tokens.values() and t.decode("utf-8") in self.special_tokens:
            return t.decode("utf-8")
        return token_to_str(t)

    def token_to_id(self, token: str) -> int | None:
        """Inverse of :meth:`id_to_token`; None when ``token`` is not in the vocabulary."""
        if token in self.special_tokens:
            return self.special_tokens[token]
        try:
            return self.vocab.get(str_to_token(token))
        except ValueError:
            return None

    # -- tokenizer.json (HF tokenizers' format): the code is in tokenizer_files.py -------
    def to_json(self) -> str:
        """This tokenizer as HF ``tokenizer.json`` text (byte-level BPE, GPT-2 style):
        see :func:`tokenizer_to_json`."""
        return tokenizer_to_json(self)

    def save(self, path) -> None:
        """Write :meth:`to_json` to ``path`` atomically (temporary file + rename)."""
        write_atomically(path, self.to_json())

    @classmethod
    def from_json(cls, text: str) -> BPETokenizer:
        """Read a byte-level BPE ``tokenizer.json`` (ours, or HF's: GPT-2's loads).

        Raises ValueError: not JSON, or a field :func:`parse_tokenizer_json` does not support.
        """
        return cls(*parse_tokenizer_json(text))

    @classmethod
    def from_file(cls, path) -> BPETokenizer:
        """:meth:`from_json` of a file. Raises FileNotFoundError, or as :meth:`from_json`."""
        from pathlib import Path

        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def __repr__(self) -> str:
        pre = {None: "none", DIGITS_SPLIT_PATTERN: "digits"}.get(self.pattern, "gpt2")
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special_tokens={sorted(self.special_tokens)}, pre_tokenizer={pre})"
        )
