"""Who says this speech? The speaker classification task, built from the corpus itself:
the N most frequent speakers are the classes, their speeches split into a training and
a held-out set (:func:`speaker_dataset`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

#: A speech header: a name of capitals (spaces, apostrophes, dots, hyphens allowed)
#: and a colon, alone on its line: "ROMEO:", "KING RICHARD III:", "First Citizen:".
SPEAKER_LINE = re.compile(r"^([A-Z][A-Za-z' .\-]*):$")


def parse_speeches(text: str) -> list[tuple[str, str]]:
    """``[(speaker, speech), ...]`` in the order of the text: each block of lines (blank
    lines between) whose first line is ``NAME:`` gives the lines after it; others are skipped."""
    speeches = []
    for block in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        lines = block.strip("\n").split("\n")
        m = SPEAKER_LINE.match(lines[0].strip())
        body = "\n".join(lines[1:]).strip("\n")
        if m and body:
            speeches.append((m.group(1), body))
    return speeches


@dataclass
class SpeakerData:
    """The speeches of each split and their speakers (class i: ``speakers[i]``, the most
    frequent first)."""

    speakers: list[str]
    train_texts: list[str]
    train_labels: np.ndarray
    val_texts: list[str]
    val_labels: np.ndarray

    def majority_baseline(self) -> tuple[int, float]:
        """The most frequent class of the training split and its accuracy on the held-out one."""
        counts = np.bincount(self.train_labels, minlength=len(self.speakers))
        best = int(np.argmax(counts))
        return best, float(np.mean(self.val_labels == best))


class WordTokenizer:
    """Lower-cased words (``o'er`` whole) and punctuation marks: ``<pad>``, ``<unk>`` (every
    other token), then ``words`` (``from_texts``: the most frequent, ties by first seen)."""

    PATTERN = re.compile(r"\w+(?:'\w+)?|[^\w\s]")

    def __init__(self, words: list[str]):
        self.words = ["<pad>", "<unk>", *words]
        self.vocab_size = len(self.words)
        self._ids = {w: i for i, w in enumerate(self.words)}

    @classmethod
    def from_texts(cls, texts: list[str], max_vocab: int = 2000) -> WordTokenizer:
        counts = Counter(t for text in texts for t in cls.PATTERN.findall(text.lower()))
        return cls([w for w, _ in counts.most_common(max_vocab)])

    def encode_array(self, text: str) -> np.ndarray:
        tokens = self.PATTERN.findall(text.lower())
        return np.array([self._ids.get(t, 1) for t in tokens], dtype=np.int64)


def encode_padded(
    tokenizer, texts: list[str], block_size: int, rng: np.random.Generator | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, mask)``, both ``(len(texts), block_size)``: each text's first ``block_size``
    tokens (with ``rng``: a random window of a longer one), then padding (id 0, False)."""
    ids = np.zeros((len(texts), block_size), dtype=np.int64)
    mask = np.zeros((len(texts), block_size), dtype=bool)
    for i, text in enumerate(texts):
        row = tokenizer.encode_array(text)
        extra = len(row) - block_size
        start = int(rng.integers(0, extra + 1)) if rng is not None and extra > 0 else 0
        row = row[start : start + block_size]
        ids[i, : len(row)] = row
        mask[i, : len(row)] = True
    return ids, mask


def random_crops(tokenizer, texts: list[str], block_size: int, rng: np.random.Generator):
    """:func:`encode_padded` with random windows: more distinct training examples from the
    same speeches (held-out speeches are always read from their start)."""
    return encode_padded(tokenizer, texts, block_size, rng)


def speaker_dataset(text: str, n_speakers: int, val_fraction: float, seed: int) -> SpeakerData:
    """The speeches of the ``n_speakers`` most frequent speakers, split at random (seeded)
    into training and held-out sets, stratified per speaker (ValueError: fewer speakers,
    ``n_speakers < 2``, ``val_fraction`` outside ``(0, 1)``)."""
    if n_speakers < 2:
        raise ValueError(f"n_speakers: need at least 2 classes, got {n_speakers}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction: must lie in (0, 1), got {val_fraction}")
    speeches = parse_speeches(text)
    counts = Counter(name for name, _ in speeches)
    if len(counts) < n_speakers:
        raise ValueError(f"n_speakers: the text has only {len(counts)} speakers")
    # most frequent first; ties broken by name so the classes never depend on dict order
    speakers = [name for name, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    speakers = speakers[:n_speakers]
    label = {name: i for i, name in enumerate(speakers)}
    rng = np.random.default_rng(seed)
    train, val = [], []
    for name in speakers:  # stratified: each speaker keeps the same share in both splits
        own = [s for n, s in speeches if n == name]
        order = rng.permutation(len(own))
        n_val = max(1, round(val_fraction * len(own)))
        val += [(own[i], label[name]) for i in order[:n_val]]
        train += [(own[i], label[name]) for i in order[n_val:]]
    train = [train[i] for i in rng.permutation(len(train))]
    return SpeakerData(
        speakers=speakers,
        train_texts=[s for s, _ in train],
        train_labels=np.array([y for _, y in train], dtype=np.int64),
        val_texts=[s for s, _ in val],
        val_labels=np.array([y for _, y in val], dtype=np.int64),
    )
