"""An algorithmic sequence-to-sequence task with a known answer (:class:`SequenceTask`)."""

from __future__ import annotations

import numpy as np

from .tasks import IGNORE_INDEX

PAD, BOS, EOS = 0, 1, 2  # special target ids; digit d is id 3 + d in both vocabularies
SPECIALS = ("<pad>", "<bos>", "<eos>")


class SequenceTask:
    """Reverse (or sort) a string of digits: ``"3141" -> "1413"`` (``"1134"`` sorted).

    One vocabulary: ``PAD, BOS, EOS`` then the digits 0-9. Lengths are uniform in
    ``[min_len, max_len]``. The held-out set (``n_val`` distinct sequences, drawn with
    ``seed``) is never trained on (training draws with ``seed + 1``, redrawing those).

    Raises:
        ValueError: unknown task, lengths outside ``1 <= min_len <= max_len``, ``n_val``
            not in ``[1, half the number of possible sequences]``.
    """

    TASKS = ("reverse", "sort")
    n_digits = 10
    vocab_size = 3 + n_digits

    def __init__(self, task="reverse", min_len=3, max_len=12, n_val=1000, seed=0):
        if task not in self.TASKS:
            raise ValueError(f"task: expected one of {self.TASKS}, got {task!r}")
        if not 1 <= min_len <= max_len:
            raise ValueError(
                f"min_len, max_len: need 1 <= min_len <= max_len, got {min_len}, {max_len}"
            )
        self.task, self.min_len, self.max_len = task, min_len, max_len
        n_possible = sum(self.n_digits**n for n in range(min_len, max_len + 1))
        if not 1 <= n_val <= n_possible // 2:
            raise ValueError(
                f"n_val: must lie in [1, {n_possible // 2}] (half of the {n_possible} "
                f"sequences of these lengths), got {n_val}"
            )
        val_rng = np.random.default_rng(seed)
        self.val, self._held_out = [], set()
        while len(self.val) < n_val:  # distinct sequences
            s = self._draw(val_rng)
            if tuple(s) not in self._held_out:
                self.val.append(s)
                self._held_out.add(tuple(s))
        self._rng = np.random.default_rng(seed + 1)

    def _draw(self, rng: np.random.Generator) -> np.ndarray:
        n = int(rng.integers(self.min_len, self.max_len + 1))
        return rng.integers(0, self.n_digits, n)

    def answer(self, digits: np.ndarray) -> np.ndarray:
        """The target digits of a source digit string."""
        return digits[::-1] if self.task == "reverse" else np.sort(digits)

    def train_sequences(self, n: int) -> list[np.ndarray]:
        """``n`` fresh training sequences, none in the held-out set."""
        out = []
        while len(out) < n:
            s = self._draw(self._rng)
            if tuple(s) not in self._held_out:
                out.append(s)
        return out

    def batch(self, sequences: list[np.ndarray]) -> dict[str, np.ndarray]:
        """``src``, ``src_mask`` ``(B, max_len)``; ``tgt_in`` (``[BOS] + target``),
        ``tgt_mask``, ``tgt_out`` (``target + [EOS]``, IGNORE_INDEX at padding)
        ``(B, max_len + 1)``."""
        B, L = len(sequences), self.max_len
        src = np.full((B, L), PAD, dtype=np.int64)
        tgt_in = np.full((B, L + 1), PAD, dtype=np.int64)
        tgt_out = np.full((B, L + 1), IGNORE_INDEX, dtype=np.int64)
        for i, s in enumerate(sequences):
            n = len(s)
            src[i, :n] = 3 + s
            y = 3 + self.answer(s)
            tgt_in[i, 0], tgt_in[i, 1 : n + 1] = BOS, y
            tgt_out[i, :n], tgt_out[i, n] = y, EOS
        return {
            "src": src,
            "src_mask": src != PAD,
            "tgt_in": tgt_in,
            "tgt_mask": tgt_in != PAD,  # BOS and the digits
            "tgt_out": tgt_out,
        }

    def decode(self, ids: np.ndarray) -> str:
        """Token ids -> text, digits as digits and specials by name; stops after EOS."""
        out = []
        for i in ids:
            out.append(SPECIALS[i] if i < 3 else str(int(i) - 3))
            if i == EOS:
                break
        return "".join(out)

    def exact_match(self, generated: np.ndarray, sequences: list[np.ndarray]) -> np.ndarray:
        """Bool per sequence: the output begins with exactly the answer and EOS."""
        hits = np.zeros(len(sequences), dtype=bool)
        for i, s in enumerate(sequences):
            want = np.append(3 + self.answer(s), EOS)
            got = generated[i, : len(want)]
            hits[i] = len(got) == len(want) and np.array_equal(got, want)
        return hits
