"""Tokenizers, from scratch: characters (chapter 01) and byte-level BPE (chapter 11).

``CharTokenizer``: one token per Unicode character. The vocabulary is the sorted
set of characters of the training corpus (65 for Tiny Shakespeare), so token ``i``
is ``chars[i]``: the tokenizer of nanoGPT's ``shakespeare_char`` and of Karpathy's
char-rnn. Both backends share it (it has no twin in ``torch_impl/``): the ids it
produces are plain NumPy arrays that either model consumes.

``BPETokenizer``: GPT-2's byte-level byte-pair encoding (Sennrich et al. 2016;
Radford et al. 2019, sec. 2.2) in pure Python, NumPy and the ``regex`` package:
GPT-2's pre-tokenization, a trainer that reproduces HF ``BpeTrainer``'s merges
(:func:`train_bpe`; seed 003's slow version is :func:`train_bpe_plain`), encoding
by merge rank, decoding that joins bytes before UTF-8, a :class:`DecodeStream`,
special tokens, and HF's ``tokenizer.json``. Its twin, ``torch_impl/tokenizer.py``,
is the same interface over HF ``tokenizers``.

    >>> tok = CharTokenizer.from_text("hello")
    >>> tok.chars, tok.encode("hell"), tok.decode([3, 1])
    ('ehlo', [1, 0, 2, 2], 'oh')
    >>> bpe = BPETokenizer.train("hello hello hello", vocab_size=262)
    >>> bpe.pre_tokenize("hello hello"), [bpe.id_to_token(i) for i in bpe.encode(" hello")]
    (['hello', ' hello'], ['Ġhello'])
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

    Args:
        chars: the vocabulary, one character per token; it is sorted, so the
            ids do not depend on the order given.

    Attributes:
        chars: the sorted vocabulary, ``chars[i]`` is the character of id ``i``.
        vocab_size: ``len(chars)``.

    Raises:
        TypeError: ``chars`` is not a ``str``.
        ValueError: ``chars`` is empty or repeats a character.
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
        # Lookup table indexed by code point: _table[ord(c)] is c's id, -1 when
        # c is not in the vocabulary. It turns encoding a 1 MB corpus into one
        # NumPy gather instead of a million dictionary look-ups.
        codepoints = np.array([ord(c) for c in self.chars], dtype=np.int64)
        self._table = np.full(int(codepoints.max()) + 1, -1, dtype=np.int64)
        self._table[codepoints] = np.arange(self.vocab_size)

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """Build the tokenizer whose vocabulary is every character of ``text``.

        Raises:
            ValueError: ``text`` is empty.
        """
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
        """Ids of the characters of ``text``, one per character.

        Raises:
            TypeError: ``text`` is not a ``str``.
            ValueError: ``text`` contains characters outside the vocabulary;
                the message lists them with their code points.
        """
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
        """Vectorised :meth:`encode` for a whole corpus.

        Returns:
            ``(N,)`` array of ids, ``N = len(text)``, of ``dtype`` (int64 by
            default; ``np.uint16`` takes a quarter of the memory, as nanoGPT's
            ``train.bin`` does, for vocabularies of at most 65536 tokens).

        Raises:
            TypeError: ``text`` is not a ``str``.
            ValueError: characters outside the vocabulary (listed), or a
                ``dtype`` too small to hold every id.
        """
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        dtype = np.dtype(dtype)
        if dtype.kind not in "iu" or np.iinfo(dtype).max < self.vocab_size - 1:
            raise ValueError(f"dtype: {dtype} cannot hold ids up to {self.vocab_size - 1}")
        # UTF-32 stores each character as one 4-byte code point: a free view.
        codepoints = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
        in_table = codepoints < len(self._table)
        ids = np.full(codepoints.shape, -1, dtype=np.int64)
        ids[in_table] = self._table[codepoints[in_table]]
        if (ids < 0).any():
            raise self._unknown_error(text)
        return ids.astype(dtype, copy=False)

    # -- decoding ------------------------------------------------------------
    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        """The text of a sequence of ids (a list, or a 1-D integer array).

        Raises:
            TypeError: an id is not an integer.
            ValueError: an id is outside ``[0, vocab_size)``, or ``ids`` is an
                array that is not 1-D.
        """
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
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: ``d`` is not a char tokenizer's dict.
        """
        if not isinstance(d, dict) or d.get("type") != "char" or "chars" not in d:
            raise ValueError(f'tokenizer: expected {{"type": "char", "chars": ...}}, got {d!r}')
        return cls(d["chars"])

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


# =====================================================================================
# Byte-level BPE (chapter 11): Sennrich et al. 2016, as GPT-2 uses it (Radford et al.
# 2019, sec. 2.2). Pure Python + NumPy + the `regex` package (for \p{L} and \p{N}).
# =====================================================================================

#: GPT-2's pre-tokenization (openai/gpt-2 ``encoder.py``): contractions, an optional
#: space + letters, an optional space + digits, an optional space + other symbols,
#: whitespace not followed by a non-space, other whitespace. Merges never cross the
#: boundaries it draws, so " the" and "the," cannot share a token across the comma.
GPT2_SPLIT_PATTERN = (
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
#: GPT-2's end-of-document token.
ENDOFTEXT = "<|endoftext|>"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in character for each of the 256 byte values.

    Printable Latin-1 bytes (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``) stand for
    themselves; the other 68 (controls, space, ...) are shifted to U+0100 and up in
    byte order, so the space 0x20 becomes ``Ġ`` (U+0120) and the newline ``Ċ``.
    This is how a byte-level token is written in a ``tokenizer.json`` (a JSON
    string cannot hold a bare byte). Source: openai/gpt-2 ``encoder.py``.

    Returns:
        ``{byte value: one-character str}``, a bijection.
    """
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    bs += range(ord("®"), ord("ÿ") + 1)
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


BYTE_TO_UNICODE = bytes_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in BYTE_TO_UNICODE.items()}
#: The base vocabulary: id ``i`` is the byte ``BASE_BYTES[i]``. The order is the one
#: of the bytes' stand-ins' code points: GPT-2's ``encoder.json`` order, and the
#: order in which HF's BpeTrainer numbers its (sorted) alphabet. Matching it is what
#: makes our trainer's tie-break, which compares ids, pick HF's merges.
BASE_BYTES: tuple[int, ...] = tuple(sorted(range(256), key=lambda b: BYTE_TO_UNICODE[b]))
_BYTE_TO_ID = bytes(BASE_BYTES.index(b) for b in range(256))  # a bytes.translate table

_SHIFT = 32  # a pair of ids (a, b) is the int a << 32 | b: hashes faster than a tuple
_LOW = (1 << _SHIFT) - 1
_CACHE_LIMIT = 1 << 17  # pre-tokens kept in the encoding cache before it is cleared
_LONG_PIECE = 64  # pieces longer than this (in bytes) merge with a heap, not a rescan
_LONG_WORD = 4096  # training words longer than this keep an index of their pairs


def token_to_str(token: bytes) -> str:
    """``b" the"`` -> ``"Ġthe"``: a token's bytes as tokenizer.json writes them."""
    return "".join(BYTE_TO_UNICODE[b] for b in token)


def str_to_token(s: str) -> bytes:
    """Inverse of :func:`token_to_str`.

    Raises:
        ValueError: a character that stands for no byte.
    """
    try:
        return bytes(UNICODE_TO_BYTE[c] for c in s)
    except KeyError as e:
        raise ValueError(f"token {s!r}: {e.args[0]!r} is not a byte-level character") from None


def _compile(pattern: str | None):
    if pattern is None:
        return None
    if pattern != GPT2_SPLIT_PATTERN:
        raise ValueError(
            "pattern: expected GPT2_SPLIT_PATTERN or None (no pre-tokenization), the two "
            f"that a ByteLevel tokenizer.json can express; got {pattern!r}"
        )
    import regex  # \p{L}, \p{N}: the standard library's re has no Unicode properties

    return regex.compile(pattern)


def _check_text(text, name: str = "text") -> None:
    """A ``str`` that has UTF-8 bytes: lone surrogates (``"\\ud800"``, which Python
    strings may hold) are not Unicode text, and no byte-level tokenizer can take them."""
    if not isinstance(text, str):
        raise TypeError(f"{name}: expected a str, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{name}: {text[e.start]!r} at position {e.start} is a lone surrogate, not "
            "Unicode text (it has no UTF-8 encoding)"
        ) from None


def pre_tokenize(text: str, pattern: str | None = GPT2_SPLIT_PATTERN) -> list[str]:
    """Split ``text`` where merges may not cross: GPT-2's regex, or not at all.

    ``"y is ?"`` -> ``["y", " is", " ?"]``; ``"HE'S here"`` -> ``["HE", "'", "S",
    " here"]`` (the contractions are lower-case only, as in GPT-2).

    Raises:
        TypeError: ``text`` is not a ``str``.
        ValueError: ``pattern`` is neither :data:`GPT2_SPLIT_PATTERN` nor None.
    """
    _check_text(text)
    compiled = _compile(pattern)
    if compiled is None:
        return [text] if text else []
    return compiled.findall(text)


# -- seed 003's BPE: the whole text, no pre-tokenization, a rescan per merge -----------
def get_pair_counts(seq: list[int]) -> Counter:
    """How often each adjacent pair of ids occurs: ``[1, 2, 1, 2]`` ->
    ``{(1, 2): 2, (2, 1): 1}``. Overlapping pairs all count (``[5, 5, 5]`` has
    ``(5, 5)`` twice)."""
    return Counter(zip(seq, seq[1:], strict=False))


def merge(seq: list[int], pair: tuple[int, int], new_token: int) -> list[int]:
    """Replace each occurrence of ``pair`` in ``seq`` by ``new_token``, scanning left
    to right without overlaps: ``merge([5, 5, 5], (5, 5), 9) == [9, 5]``.

    Args:
        seq: token ids.
        pair: ``(left id, right id)``.
        new_token: the id of the merged token.

    Returns:
        a new list; ``seq`` is not modified.
    """
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


def _check_vocab_size(vocab_size, n_special: int = 0) -> None:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(f"vocab_size: expected an int, got {type(vocab_size).__name__}")
    if vocab_size < 256 + n_special:
        raise ValueError(
            f"vocab_size: expected at least 256 (the bytes) + {n_special} special tokens "
            f"= {256 + n_special}, got {vocab_size}"
        )


def _base_vocab() -> list[bytes]:
    return [bytes([b]) for b in BASE_BYTES]


def _as_bytes_pairs(vocab: list[bytes], merges: list[tuple[int, int]]):
    return {t: i for i, t in enumerate(vocab)}, [(vocab[a], vocab[b]) for a, b in merges]


def train_bpe_plain(
    text: str, vocab_size: int
) -> tuple[list[int], dict[bytes, int], list[tuple[bytes, bytes]]]:
    """Seed 003's byte-pair encoding, for reading: the whole text is one sequence, and
    every merge recounts every pair (O(merges x bytes): seconds per merge on Tiny
    Shakespeare).

    Start from the text's UTF-8 bytes; repeatedly replace the most frequent adjacent
    pair by a new token, until the vocabulary has ``vocab_size`` tokens or no pair is
    left. Ties go to the pair with the smallest ids, ``(left, right)`` compared as a
    tuple: HF BpeTrainer's rule. A merge whose bytes are already a token reuses that
    token's id (the vocabulary does not grow; HF does the same).

    Equal to :func:`train_bpe` with ``pattern=None`` (tested), which is much faster.

    Args:
        text: the training text.
        vocab_size: 256 byte tokens plus the merges wanted.

    Returns:
        ``(ids, vocab, merges)``: the text's ids after the last merge (its length over
        the text's bytes is the compression), ``{token bytes: id}``, and the merges
        in order, as pairs of token bytes.

    Raises:
        TypeError: ``text`` is not a ``str``, ``vocab_size`` not an int.
        ValueError: ``vocab_size < 256``.
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


# -- the fast trainer: unique pre-tokens, incremental pair counts ---------------------
def _merge_word(w, a, b, new, c, i, pair_counts, new_where):
    """Merge ``(a, b)`` into ``new`` in word ``w`` (id list), left to right; apply the
    count changes (``c`` = the word's frequency) and note where new pairs appeared.

    Around each merge site ``p a b q`` the pairs ``(p, a)`` and ``(b, q)`` lose ``c``,
    ``(p, new)`` and ``(new, q)`` gain ``c`` (``p`` may itself be a ``new`` just made:
    ``a a a a`` -> ``new new``). The count of ``(a, b)`` itself is left alone, as in
    HF's ``Word::merge``: it is never looked at again unless the pair re-forms.
    """
    out = []
    j, n = 0, len(w)
    while j < n:
        x = w[j]
        if x == a and j + 1 < n and w[j + 1] == b:
            if out:
                p = out[-1] << _SHIFT
                pair_counts[p | a] -= c
                key = p | new
                pair_counts[key] = pair_counts.get(key, 0) + c
                new_where.setdefault(key, set()).add(i)
            out.append(new)
            j += 2
            if j < n:
                q = w[j]
                pair_counts[b << _SHIFT | q] -= c
                key = new << _SHIFT | q
                pair_counts[key] = pair_counts.get(key, 0) + c
                new_where.setdefault(key, set()).add(i)
        else:
            out.append(x)
            j += 1
    return out


class _LongWord:
    """A word too long to rescan at every merge (with ``pattern=None`` the whole corpus
    is one word): a linked list of symbols, and for each pair the positions where it
    started at some point. A merge then visits only its occurrences, left to right,
    skipping those gone stale, and makes the same changes as :func:`_merge_word`."""

    __slots__ = ("sym", "prev", "next", "alive", "at")

    def __init__(self, w: list[int]):
        n = len(w)
        self.sym = list(w)
        self.prev, self.next = list(range(-1, n - 1)), list(range(1, n + 1))
        self.next[-1] = -1
        self.alive = bytearray(b"\x01") * n
        self.at: dict[int, list[int]] = {}
        for j in range(n - 1):
            self.at.setdefault(w[j] << _SHIFT | w[j + 1], []).append(j)

    def merge(self, a, b, new, c, i, pair_counts, new_where) -> _LongWord:
        sym, prev, nxt, alive, at = self.sym, self.prev, self.next, self.alive, self.at
        for p in sorted(set(at.pop(a << _SHIFT | b, ()))):
            q = nxt[p]
            if not alive[p] or sym[p] != a or q == -1 or sym[q] != b:
                continue  # merged away, or no longer this pair
            if (o := prev[p]) != -1:
                left = sym[o] << _SHIFT
                pair_counts[left | a] -= c
                key = left | new
                pair_counts[key] = pair_counts.get(key, 0) + c
                new_where.setdefault(key, set()).add(i)
                at.setdefault(key, []).append(o)
            r = nxt[q]
            sym[p], alive[q], nxt[p] = new, 0, r
            if r != -1:
                prev[r] = p
                pair_counts[b << _SHIFT | sym[r]] -= c
                key = new << _SHIFT | sym[r]
                pair_counts[key] = pair_counts.get(key, 0) + c
                new_where.setdefault(key, set()).add(i)
                at.setdefault(key, []).append(p)
        return self


def train_bpe(
    text: str, vocab_size: int, pattern: str | None = GPT2_SPLIT_PATTERN
) -> tuple[dict[bytes, int], list[tuple[bytes, bytes]]]:
    """Byte-level BPE training, fast: HF ``BpeTrainer``'s algorithm in Python.

    1. Pre-tokenize and count each distinct piece once (Tiny Shakespeare: 297,833
       pieces, 15,057 distinct): a merge then costs the distinct words that contain
       the pair, not a pass over the corpus.
    2. Count every adjacent pair, weighted by word frequency, and remember which
       words hold it; put ``(count, pair, words)`` in a max-heap.
    3. Pop the top pair. Counts only ever go down for existing pairs, so a popped
       entry whose count is stale is pushed back with its current count (lazy
       invalidation) and the next one is tried. Merge it in its words only,
       updating the neighbours' counts incrementally (:func:`_merge_word`), and push
       the pairs the merge created.

    Tie-break (deterministic, documented): the highest count wins; among equal
    counts, the smallest ``(left id, right id)``. Ids are those of HF (base bytes in
    :data:`BASE_BYTES` order, then merges in creation order), so the merges and the
    vocabulary are HF's, in order (tested; 744/744 and 9,744/9,744 on Tiny
    Shakespeare at vocab 1,000 and 10,000). HF's quirks are kept: a merged pair's
    count is never reset, and a merge whose bytes are already a token reuses its id.

    Args:
        text: the training text (one document: pre-tokenized as a whole).
        vocab_size: 256 byte tokens plus the merges wanted (fewer if the pairs run out).
        pattern: :data:`GPT2_SPLIT_PATTERN`, or None for no pre-tokenization (then
            equal to seed 003's :func:`train_bpe_plain`).

    Returns:
        ``(vocab, merges)``: ``{token bytes: id}`` and the merges in order.

    Raises:
        TypeError: ``text`` is not a ``str``, ``vocab_size`` not an int.
        ValueError: ``vocab_size < 256``, or an unsupported ``pattern``.
    """
    import heapq

    _check_text(text)
    _check_vocab_size(vocab_size)
    counter = Counter(pre_tokenize(text, pattern))
    words = [list(w.encode("utf-8").translate(_BYTE_TO_ID)) for w in counter]
    counts = list(counter.values())
    vocab = _base_vocab()
    token_ids = {t: i for i, t in enumerate(vocab)}

    pair_counts: dict[int, int] = {}
    where: dict[int, set[int]] = {}
    for i, w in enumerate(words):
        c = counts[i]
        for j in range(len(w) - 1):
            key = w[j] << _SHIFT | w[j + 1]
            pair_counts[key] = pair_counts.get(key, 0) + c
            where.setdefault(key, set()).add(i)
        if len(w) > _LONG_WORD:
            words[i] = _LongWord(w)
    # Max-heap by count, then min-heap by pair: heapq is a min-heap of (-count, pair).
    # ``tick`` orders two entries of the same pair and count (possible after a
    # repeated token) without ever comparing their sets.
    heap = [(-pair_counts[k], k, tick, pos) for tick, (k, pos) in enumerate(where.items())]
    heapq.heapify(heap)
    tick = len(heap)
    merges: list[tuple[int, int]] = []
    while len(vocab) < vocab_size and heap:
        neg_count, key, _, pos = heap[0]
        count = pair_counts[key]
        if -neg_count != count:  # stale: requeue with the current count
            heapq.heapreplace(heap, (-count, key, tick, pos))
            tick += 1
            continue
        if count < 1:
            break
        heapq.heappop(heap)
        a, b = key >> _SHIFT, key & _LOW
        new_bytes = vocab[a] + vocab[b]
        new = token_ids.get(new_bytes)
        if new is None:
            new = token_ids[new_bytes] = len(vocab)
            vocab.append(new_bytes)
        merges.append((a, b))
        new_where: dict[int, set[int]] = {}
        for i in pos:
            w = words[i]
            if type(w) is list:
                words[i] = _merge_word(w, a, b, new, counts[i], i, pair_counts, new_where)
            else:
                w.merge(a, b, new, counts[i], i, pair_counts, new_where)
        for k, s in new_where.items():
            if (c := pair_counts[k]) > 0:
                heapq.heappush(heap, (-c, k, tick, s))
                tick += 1
    return _as_bytes_pairs(vocab, merges)


# -- the tokenizer ----------------------------------------------------------------------
def _check_special_tokens(special_tokens) -> list[str]:
    if isinstance(special_tokens, str) or not isinstance(special_tokens, Iterable):
        raise TypeError(
            f"special_tokens: expected a list of str, got {type(special_tokens).__name__}"
        )
    specials = list(special_tokens)
    for s in specials:
        if not isinstance(s, str):
            raise TypeError(f"special_tokens: expected str items, got {type(s).__name__}")
        if not s:
            raise ValueError("special_tokens: the empty string cannot be a token")
    if len(set(specials)) != len(specials):
        raise ValueError(f"special_tokens: repeated tokens in {specials!r}")
    return specials


class BPETokenizer:
    """Byte-level BPE, from scratch: GPT-2's tokenizer scheme (Radford et al. 2019,
    sec. 2.2), and HF tokenizers' ``tokenizer.json`` to store it.

    Every text is UTF-8 bytes first, and the 256 bytes are all tokens, so any string
    encodes (no ``[UNK]``) and ``decode(encode(s)) == s``. ``encode`` splits the text
    with :data:`GPT2_SPLIT_PATTERN`, then inside each piece applies the merges by
    rank: always the adjacent pair that was merged earliest in training. Special
    tokens (``<|endoftext|>``) are whole, never split, and come out of ``encode`` only
    where allowed: by default their text is encoded as ordinary text.

    Args:
        vocab: ``{token bytes: id}``; holds the 256 single bytes.
        merges: ``[(left bytes, right bytes), ...]``, earliest first; both sides and
            their concatenation are tokens of ``vocab``.
        special_tokens: ``{text: id}``. An id may repeat a vocab id only for a token
            with the same bytes (GPT-2's file has ``<|endoftext|>`` in both).
        pattern: :data:`GPT2_SPLIT_PATTERN`, or None: no pre-tokenization (merges
            may then cross word boundaries: seed 003's BPE).

    Attributes:
        vocab, merges, special_tokens, pattern: as given (copied).
        vocab_size: ids run over ``[0, vocab_size)``, specials included.

    Raises:
        TypeError: arguments of the wrong types.
        ValueError: a byte missing from ``vocab``, repeated ids, ids that do not
            cover ``[0, vocab_size)``, a merge of unknown tokens, a bad ``pattern``.

    The ids of :meth:`train` are HF's: bytes in :data:`BASE_BYTES` order (ids 0-255),
    merges in creation order, specials last; :meth:`save` writes a tokenizer.json
    that HF ``tokenizers.Tokenizer.from_file`` loads, and :meth:`from_file` reads
    HF's byte-level BPE files (GPT-2's included).
    """

    def __init__(
        self,
        vocab: dict[bytes, int],
        merges: list[tuple[bytes, bytes]],
        special_tokens: dict[str, int] | None = None,
        pattern: str | None = GPT2_SPLIT_PATTERN,
    ):
        self._pat = _compile(pattern)
        if not isinstance(vocab, dict):
            raise TypeError(f"vocab: expected a dict of bytes -> id, got {type(vocab).__name__}")
        special_tokens = {} if special_tokens is None else special_tokens
        if not isinstance(special_tokens, dict):
            raise TypeError(
                f"special_tokens: expected a dict of str -> id, got {type(special_tokens).__name__}"
            )
        for what, table, key_type in (
            ("vocab", vocab, bytes),
            ("special_tokens", special_tokens, str),
        ):
            for k, i in table.items():
                if not isinstance(k, key_type):
                    raise TypeError(f"{what}: expected {key_type.__name__} keys, got {k!r}")
                if not k:
                    raise ValueError(f"{what}: the empty {key_type.__name__} cannot be a token")
                if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0:
                    raise ValueError(f"{what}: the id of {k!r} is {i!r}, not an int >= 0")
        if len(set(vocab.values())) != len(vocab):
            raise ValueError("vocab: two tokens share an id")
        missing = [b for b in range(256) if bytes([b]) not in vocab]
        if missing:
            raise ValueError(
                f"vocab: byte-level BPE needs all 256 bytes as tokens; {len(missing)} are "
                f"missing (first: 0x{missing[0]:02X})"
            )
        id_bytes: dict[int, bytes] = {int(i): t for t, i in vocab.items()}
        for s, i in special_tokens.items():
            if int(i) in id_bytes and id_bytes[int(i)] != s.encode("utf-8"):
                raise ValueError(
                    f"special_tokens: {s!r} has id {i}, which is the token {id_bytes[int(i)]!r}"
                )
            id_bytes[int(i)] = s.encode("utf-8")
        if len(set(special_tokens.values())) != len(special_tokens):
            raise ValueError("special_tokens: two special tokens share an id")
        n = len(id_bytes)
        if set(id_bytes) != set(range(n)):
            raise ValueError(f"vocab, special_tokens: the ids are not exactly 0 .. {n - 1}")
        self.vocab = dict(vocab)
        self.special_tokens = {s: int(i) for s, i in special_tokens.items()}
        self.pattern = pattern
        self.vocab_size = n
        self._id_bytes: list[bytes] = [id_bytes[i] for i in range(n)]
        self._byte_ids: list[int] = [vocab[bytes([b])] for b in range(256)]
        # (left id, right id) -> (rank, id of the merged token); a pair listed twice
        # keeps its last rank, as HF's BPE model does.
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
        """Learn ``vocab_size - len(special_tokens)`` tokens from ``text`` with
        :func:`train_bpe` (HF BpeTrainer's algorithm and tie-break), then append the
        special tokens.

        Raises:
            TypeError: ``text`` not a ``str``, ``special_tokens`` not strings.
            ValueError: ``vocab_size`` below 256 + the specials, empty or repeated
                special tokens, a bad ``pattern``.
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

    def _allowed(self, allowed_special) -> frozenset:
        if isinstance(allowed_special, str):
            if allowed_special != "all":
                raise TypeError(
                    f"allowed_special: expected 'all' or a set of special tokens, got "
                    f"the str {allowed_special!r}"
                )
            return frozenset(self.special_tokens)
        if not isinstance(allowed_special, Iterable):
            raise TypeError(
                "allowed_special: expected 'all' or a set of special tokens, got "
                f"{type(allowed_special).__name__}"
            )
        allowed = frozenset(allowed_special)
        if unknown := sorted(map(repr, allowed - set(self.special_tokens))):
            raise ValueError(
                f"allowed_special: not special tokens of this tokenizer: {', '.join(unknown)} "
                f"(it has {sorted(self.special_tokens)})"
            )
        return allowed

    def encode(self, text: str, allowed_special: Iterable[str] | str = frozenset()) -> list[int]:
        """The ids of ``text``.

        Args:
            text: any ``str`` (every string encodes: there are no unknown bytes).
            allowed_special: special tokens that may come out of this text (their
                exact text becomes their id, never split), or ``"all"``. Others are
                ordinary text: ``"<|endoftext|>"`` in a user's prompt is bytes, not
                the end of the document (tiktoken's convention).

        Returns:
            ``list[int]``, each id in ``[0, vocab_size)``.

        Raises:
            TypeError: ``text`` is not a ``str``; ``allowed_special`` is not ``"all"``
                or an iterable of str.
            ValueError: ``allowed_special`` names a token that is not special here.
        """
        _check_text(text)
        allowed = self._allowed(allowed_special)
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
        """:meth:`encode` as a ``(N,)`` array of ``dtype`` (``np.uint16`` holds ids up
        to 65535, as nanoGPT's ``train.bin``).

        Raises:
            as :meth:`encode`; ValueError: ``dtype`` cannot hold every id.
        """
        dtype = np.dtype(dtype)
        if dtype.kind not in "iu" or np.iinfo(dtype).max < self.vocab_size - 1:
            raise ValueError(f"dtype: {dtype} cannot hold ids up to {self.vocab_size - 1}")
        return np.array(self.encode(text, allowed_special), dtype=dtype)

    # -- decoding ----------------------------------------------------------------------
    def _check_ids(self, ids) -> list[int]:
        V = self.vocab_size
        if isinstance(ids, np.ndarray):
            if ids.ndim != 1:
                raise ValueError(f"ids: expected a 1-D array, got shape {ids.shape}")
            if ids.size and ids.dtype.kind not in "iu":
                raise TypeError(f"ids: expected integer ids, got dtype {ids.dtype}")
            if ids.size and (ids.min() < 0 or ids.max() >= V):
                bad = int(ids[(ids < 0) | (ids >= V)][0])
                raise ValueError(f"ids: id {bad} is outside [0, {V})")
            return ids.tolist()
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
            raise TypeError(f"ids: expected a sequence of ints, got {type(ids).__name__}")
        ids = list(ids)
        for i in ids:
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
                raise TypeError(f"ids: expected integers, got {i!r} ({type(i).__name__})")
            if not 0 <= i < V:
                raise ValueError(f"ids: id {int(i)} is outside [0, {V})")
        return ids

    def decode_bytes(self, ids: Iterable[int] | np.ndarray) -> bytes:
        """The bytes of ``ids``, joined (special tokens as their UTF-8 text).

        Raises:
            TypeError: an id that is not an integer.
            ValueError: an id outside ``[0, vocab_size)``; an array that is not 1-D.
        """
        return b"".join(map(self._id_bytes.__getitem__, self._check_ids(ids)))

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        """The text of ``ids``: all their bytes joined, then decoded from UTF-8 once.

        Decoding token by token would break a character whose bytes two tokens share
        (an emoji is 4 bytes; a tokenizer may well split it). Bytes that are not valid
        UTF-8 (ids a model sampled in a bad order) become U+FFFD, as in HF's decoder.

        Raises:
            TypeError, ValueError: as :meth:`decode_bytes`.
        """
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_stream(self) -> DecodeStream:
        """A :class:`DecodeStream` over this tokenizer: text as ids arrive."""
        return DecodeStream(self)

    def id_to_token(self, token_id: int) -> str:
        """The token's tokenizer.json spelling: ``"Ġthe"`` for ``b" the"``; a special
        token's own text.

        Raises:
            TypeError, ValueError: as :meth:`decode_bytes`.
        """
        (i,) = self._check_ids([token_id])
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

    # -- tokenizer.json (HF tokenizers' format) -----------------------------------------
    def to_json(self) -> str:
        """This tokenizer as HF ``tokenizer.json`` text (byte-level BPE, GPT-2 style):
        ``model.vocab`` maps each token's :func:`token_to_str` spelling to its id,
        ``model.merges`` lists ``[left, right]`` pairs earliest first, and the special
        tokens are ``added_tokens``."""
        import json

        added = [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for s, i in sorted(self.special_tokens.items(), key=lambda kv: kv[1])
        ]  # fmt: skip
        byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}
        document = {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {**byte_level, "use_regex": self.pattern is not None},
            "post_processor": None,
            "decoder": {**byte_level, "add_prefix_space": True, "use_regex": True},
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": False,
                "vocab": {
                    token_to_str(t): i for t, i in sorted(self.vocab.items(), key=lambda kv: kv[1])
                },
                "merges": [[token_to_str(a), token_to_str(b)] for a, b in self.merges],
            },
        }
        return json.dumps(document, ensure_ascii=False, indent=2) + "\n"

    def save(self, path) -> None:
        """Write :meth:`to_json` to ``path`` atomically (temporary file + rename)."""
        import os
        from pathlib import Path

        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(self.to_json(), encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def from_json(cls, text: str) -> BPETokenizer:
        """Read a byte-level BPE ``tokenizer.json`` (ours, or HF's: GPT-2's loads).

        Supported: no normalizer; a ``ByteLevel`` pre-tokenizer without prefix space
        (``use_regex`` true: GPT-2's pattern, false: none); a ``ByteLevel`` decoder
        or none; a ``BPE`` model without dropout, subword prefix/suffix, byte
        fallback or ``ignore_merges``; merges as ``"a b"`` strings or ``[a, b]``
        pairs. ``added_tokens`` become special tokens.

        Raises:
            ValueError: not JSON, or a field this tokenizer does not support (named).
        """
        import json

        try:
            doc = json.loads(text)
        except (json.JSONDecodeError, TypeError) as e:
            raise ValueError(f"tokenizer.json: not valid JSON: {e}") from e
        if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
            raise ValueError("tokenizer.json: no 'model' section")
        model = doc["model"]

        def unsupported(field: str, value) -> ValueError:
            return ValueError(
                f"tokenizer.json: {field} = {value!r} is not supported (byte-level BPE only)"
            )

        if model.get("type", "BPE") != "BPE":
            raise unsupported("model.type", model.get("type"))
        for field, ok in (
            ("dropout", (None, 0, 0.0)),
            ("continuing_subword_prefix", (None, "")),
            ("end_of_word_suffix", (None, "")),
            ("byte_fallback", (None, False)),
            ("ignore_merges", (None, False)),
        ):
            if model.get(field) not in ok:
                raise unsupported(f"model.{field}", model.get(field))
        if doc.get("normalizer") is not None:
            raise unsupported("normalizer", doc["normalizer"])
        pre = doc.get("pre_tokenizer") or {}
        if (
            not isinstance(pre, dict)
            or pre.get("type") != "ByteLevel"
            or pre.get("add_prefix_space", True)
        ):
            raise unsupported("pre_tokenizer", doc.get("pre_tokenizer"))
        dec = doc.get("decoder")
        if dec is not None and (not isinstance(dec, dict) or dec.get("type") != "ByteLevel"):
            raise unsupported("decoder", dec)
        pattern = GPT2_SPLIT_PATTERN if pre.get("use_regex", True) else None
        # A hand-edited file can hold anything: a wrong structure is a ValueError naming
        # the field (as the torch twin's, where HF's parser rejects it), not a KeyError.
        field = "model.vocab"
        try:
            vocab = {str_to_token(s): int(i) for s, i in model.get("vocab", {}).items()}
            field, merges = "model.merges", []
            for m in model.get("merges", []):
                pair = m.split(" ") if isinstance(m, str) else m
                if not isinstance(pair, list) or len(pair) != 2:
                    raise ValueError(f"tokenizer.json: model.merges: bad merge {m!r}")
                merges.append((str_to_token(pair[0]), str_to_token(pair[1])))
            field = "added_tokens"
            specials = {t["content"]: int(t["id"]) for t in doc.get("added_tokens") or []}
        except (TypeError, KeyError, AttributeError, ValueError) as e:
            if str(e).startswith("tokenizer.json:"):
                raise
            raise ValueError(f"tokenizer.json: {field}: malformed ({type(e).__name__}: {e})") from e
        return cls(vocab, merges, specials, pattern)

    @classmethod
    def from_file(cls, path) -> BPETokenizer:
        """:meth:`from_json` of a file.

        Raises:
            FileNotFoundError: no such file. ValueError: as :meth:`from_json`.
        """
        from pathlib import Path

        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def __repr__(self) -> str:
        pre = "gpt2" if self.pattern is not None else "none"
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special_tokens={sorted(self.special_tokens)}, pre_tokenizer={pre})"
        )


class DecodeStream:
    """Text from ids that arrive one at a time (a model generating), never printing
    half a character.

    A token may end in the middle of a UTF-8 sequence (the first two of an emoji's
    four bytes). :meth:`step` returns the text completed so far and holds back an
    incomplete trailing sequence until its last byte arrives; invalid bytes become
    U+FFFD at once. ``"".join(steps) + flush()`` equals ``decode(all ids)``.

    Args:
        tokenizer: the :class:`BPETokenizer` whose ids these are.
    """

    def __init__(self, tokenizer: BPETokenizer):
        import codecs

        self.tokenizer = tokenizer
        # The standard library's incremental UTF-8 decoder is exactly "hold back an
        # incomplete tail": it buffers at most 3 bytes between calls.
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def step(self, token_id: int) -> str:
        """Feed one id; return the newly completed text ("" if none).

        Raises:
            TypeError, ValueError: as :meth:`BPETokenizer.decode_bytes`.
        """
        return self._utf8.decode(self.tokenizer.decode_bytes([token_id]))

    def flush(self) -> str:
        """End of stream: an incomplete tail still held back becomes U+FFFD."""
        return self._utf8.decode(b"", final=True)
