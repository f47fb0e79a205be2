"""The fast byte-level BPE trainer (chapter 11): HF ``BpeTrainer``'s algorithm in Python.

``tokenizer.py`` teaches training with the plain loop (:func:`train_bpe_plain`: the
whole text, every pair recounted at every merge). :func:`train_bpe` learns the same
merges in seconds: each distinct pre-token counted once, a heap of pair counts with
stale entries re-pushed lazily, and only the words that hold a pair touched when it
merges. ``BPETokenizer.train`` calls it. Its twin, ``torch_impl/bpe_trainer.py``, runs
HF's Rust trainer behind the same function.

    >>> vocab, merges = train_bpe("hello hello hello", 262)
    >>> [a + b for a, b in merges]
    [b'el', b'hel', b'lo', b'hello', b' hello']
"""

from __future__ import annotations

from collections import Counter

from .byte_level import (
    _BYTE_TO_ID,
    GPT2_SPLIT_PATTERN,
    _as_bytes_pairs,
    _base_vocab,
    _check_text,
    _check_vocab_size,
    pre_tokenize,
)

_SHIFT = 32  # a pair of ids (a, b) is the int a << 32 | b: hashes faster than a tuple
_LOW = (1 << _SHIFT) - 1
_LONG_WORD = 4096  # training words longer than this keep an index of their pairs


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

    1. Pre-tokenize and count each distinct piece once: a merge then costs the distinct
       words that hold the pair, not a pass over the corpus.
    2. Count every adjacent pair, weighted by word frequency, and remember which
       words hold it; put ``(count, pair, words)`` in a max-heap.
    3. Pop the top pair. Counts of existing pairs only go down, so an entry whose count
       is stale is pushed back with its current count (lazy invalidation). Merge the
       pair in its words only, updating the neighbours' counts (:func:`_merge_word`).

    Tie-break: the highest count, then the smallest ``(left id, right id)``. Ids are HF's
    (:data:`BASE_BYTES` order, then merges in creation order), so merges and vocabulary
    are HF's, in order. HF's quirks are kept: a merged pair's count is never reset, and a
    merge whose bytes are already a token reuses its id.

    Args:
        text: the training text (one document: pre-tokenized as a whole).
        vocab_size: 256 byte tokens plus the merges wanted (fewer if the pairs run out).
        pattern: :data:`GPT2_SPLIT_PATTERN`, or None for no pre-tokenization (then
            equal to the plain :func:`~numpy_impl.tokenizer.train_bpe_plain`).

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
    # heapq is a min-heap: (-count, pair) pops the top count, then the smallest pair;
    # ``tick`` orders equal entries without comparing their sets.
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
