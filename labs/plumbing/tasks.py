"""The data and the training adapters of the two non-GPT tasks, shared by both backends.

* :func:`parse_speeches` / :func:`speaker_dataset`: who says this speech? Tiny
  Shakespeare is a sequence of speeches, each a ``NAME:`` line followed by the
  lines spoken; the N most frequent speakers become the classes, and the
  speeches are split (not the lines, and not the characters) into a training
  and a held-out set.
* :class:`SequenceTask`: an algorithmic sequence-to-sequence task with a
  known answer (reverse or sort a string of digits), with a fixed held-out set
  that training never draws from.
* :class:`TaskModel`: one model, its loss and its AdamW, for either backend:
  ``train_step(inputs, targets)`` and ``predict`` / ``generate``, NumPy arrays
  in and out, so the training loops in ``labs/commands/classify.py`` and
  ``labs/commands/seq2seq.py`` do not care which backend runs.

Everything here is NumPy; a given seed yields the same data for both backends.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

#: A speech header: a name of capitals (spaces, apostrophes, dots, hyphens allowed)
#: and a colon, alone on its line: "ROMEO:", "KING RICHARD III:", "First Citizen:".
SPEAKER_LINE = re.compile(r"^([A-Z][A-Za-z' .\-]*):$")
IGNORE_INDEX = -100  # targets that count for nothing (padding), as in CrossEntropyLoss


# -- the speaker classification task ------------------------------------------------------------
def parse_speeches(text: str) -> list[tuple[str, str]]:
    """``[(speaker, speech), ...]`` in the order of the text.

    A speech is a block of lines separated from the next by a blank line, whose
    first line is ``NAME:``; the speech is the lines after it, newlines kept.
    Blocks without such a header (stage directions, the odd ``Senators, &C:``) or
    without any line after it are skipped.
    """
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
    """The speeches of each split and their speakers.

    Attributes:
        speakers: the class names, most frequent first (class i = ``speakers[i]``).
        train_texts, val_texts: the speeches of each split (strings, whole).
        train_labels, val_labels: int64 class ids.
    """

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
    """Lower-cased words and punctuation marks, a small closed vocabulary.

    A token is ``\\w+('\\w+)?`` (a word, "o'er" and "'tis" kept whole) or one
    punctuation mark. The vocabulary is the ``max_vocab`` most frequent tokens of
    the texts it is built from (ties by first appearance); id 0 is ``<pad>``,
    id 1 ``<unk>`` for every other token.

    Args:
        words: the vocabulary, ids 2, 3, ... in this order.
    """

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


def encode_padded(tokenizer, texts: list[str], block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, mask)``, both ``(len(texts), block_size)``: each text's first ``block_size``
    tokens, then padding (id 0, mask False)."""
    ids = np.zeros((len(texts), block_size), dtype=np.int64)
    mask = np.zeros((len(texts), block_size), dtype=bool)
    for i, text in enumerate(texts):
        row = tokenizer.encode_array(text)[:block_size]
        ids[i, : len(row)] = row
        mask[i, : len(row)] = True
    return ids, mask


def speaker_dataset(text: str, n_speakers: int, val_fraction: float, seed: int) -> SpeakerData:
    """The speeches of the ``n_speakers`` most frequent speakers, split at random (seeded)
    by speech into training and held-out sets, stratified per speaker.

    Raises:
        ValueError: fewer than ``n_speakers`` speakers, ``n_speakers < 2``, or a
            ``val_fraction`` outside ``(0, 1)``.
    """
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


def random_crops(
    tokenizer, texts: list[str], block_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`encode_padded`, but a speech longer than ``block_size`` tokens
    contributes a window starting at a random token: more distinct training examples
    from the same speeches (held-out speeches are always read from their start)."""
    ids = np.zeros((len(texts), block_size), dtype=np.int64)
    mask = np.zeros((len(texts), block_size), dtype=bool)
    for i, text in enumerate(texts):
        row = tokenizer.encode_array(text)
        start = int(rng.integers(0, len(row) - block_size + 1)) if len(row) > block_size else 0
        row = row[start : start + block_size]
        ids[i, : len(row)] = row
        mask[i, : len(row)] = True
    return ids, mask


# -- the sequence-to-sequence task -------------------------------------------------------------
PAD, BOS, EOS = 0, 1, 2  # special target ids; digit d is id 3 + d in both vocabularies
SPECIALS = ("<pad>", "<bos>", "<eos>")


class SequenceTask:
    """Reverse (or sort) a string of digits: ``"3141" -> "1413"`` (``"1134"`` sorted).

    Source and target share one vocabulary: ``PAD, BOS, EOS`` then the digits 0-9
    (13 ids). A batch is padded to the longest sequence of the task (``max_len``):
    the source ``(B, max_len)``, the decoder input ``[BOS] + target`` and the
    teacher-forcing targets ``target + [EOS]``, both ``(B, max_len + 1)``, with
    ``IGNORE_INDEX`` at padded target positions.

    The held-out set (``n_val`` distinct sequences drawn first, from its own seed) is
    excluded from training: a training draw that lands in it is redrawn. Lengths are
    drawn uniformly, so the shortest lengths have few distinct sequences (10 of
    length 1, 100 of length 2): a held-out set of 1000 would hold most of them and
    leave training without them, hence ``min_len=3`` by default.

    Args:
        task: ``"reverse"`` or ``"sort"``.
        min_len, max_len: sequence lengths, uniform in ``[min_len, max_len]``.
        n_val: held-out sequences.
        seed: seeds the held-out set (``seed``) and the training stream (``seed + 1``).

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
        """``n`` fresh training sequences, none of them in the held-out set."""
        out = []
        while len(out) < n:
            s = self._draw(self._rng)
            if tuple(s) not in self._held_out:
                out.append(s)
        return out

    def batch(self, sequences: list[np.ndarray]) -> dict[str, np.ndarray]:
        """``src``, ``src_mask`` ``(B, max_len)``; ``tgt_in``, ``tgt_mask``, ``tgt_out``
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
        """Bool per sequence: the greedy output, up to its first EOS, is exactly the answer
        followed by EOS (a missing EOS, or an extra digit, is a miss)."""
        hits = np.zeros(len(sequences), dtype=bool)
        for i, s in enumerate(sequences):
            want = np.append(3 + self.answer(s), EOS)
            got = generated[i, : len(want)]
            hits[i] = len(got) == len(want) and np.array_equal(got, want)
        return hits


# -- one model, its loss and its optimizer, either backend ---------------------------------------
def add_model_and_optimizer_arguments(
    p,
    *,
    n_layers: tuple[int, str],
    batch_size: tuple[int, str],
    dropout: float,
    lr: float,
    warmup_iters: int,
    weight_decay: float,
    eval_interval: int,
):
    """The "model" and "optimization" option groups ``labs classify`` and ``labs seq2seq``
    share, with each command's defaults (``n_layers`` and ``batch_size``: default and
    help text). Returns the model group, for a command's own model options."""
    g = p.add_argument_group("model")
    g.add_argument("--n-layers", type=int, default=n_layers[0], help=n_layers[1])
    g.add_argument("--n-heads", type=int, default=4, help="attention heads per block")
    g.add_argument("--d-model", type=int, default=64, help="width of the residual stream")
    g.add_argument("--d-ff", type=int, default=None, help="FFN width (default: 4 d_model)")
    g.add_argument("--dropout", type=float, default=dropout, help="dropout probability")
    g.add_argument(
        "--dtype", choices=("float32", "float64"), default="float32", help="parameter dtype"
    )
    g.add_argument("--attn-impl", choices=("sdpa", "explicit"), default="sdpa", help="torch only")
    o = p.add_argument_group("optimization")
    o.add_argument("--batch-size", type=int, default=batch_size[0], help=batch_size[1])
    o.add_argument("--lr", type=float, default=lr, help="peak learning rate")
    o.add_argument("--min-lr", type=float, default=1e-4, help="final learning rate")
    o.add_argument("--warmup-iters", type=int, default=warmup_iters, help="linear warmup steps")
    o.add_argument(
        "--weight-decay", type=float, default=weight_decay, help="AdamW decay of the matrices"
    )
    o.add_argument(
        "--eval-interval", type=int, default=eval_interval, help="steps between evaluations"
    )
    return g


def training_options(args) -> dict:
    """The optimizer and runtime keyword arguments of :class:`TaskModel`, from the
    options ``labs classify`` and ``labs seq2seq`` share (the schedule decays over
    ``--max-iters``)."""
    return {
        "seed": args.seed,
        "lr": args.lr,
        "min_lr": args.min_lr,
        "warmup_iters": args.warmup_iters,
        "lr_decay_iters": args.max_iters,
        "weight_decay": args.weight_decay,
        "dtype": args.dtype,
        "attn_impl": args.attn_impl,
    }


class TaskModel:
    """A ``numpy_impl`` or ``torch_impl`` model with a cross-entropy loss, AdamW (no decay on
    1-D parameters), a warmup + cosine learning rate and gradient clipping: the recipe of
    ``python -m labs train``, for any model whose ``forward(**inputs)`` gives logits.

    NumPy arrays in and out. The two backends get the same batches; their weights
    start from different generators (each backend's own initialisation, same scheme).

    Args:
        backend: ``"numpy"`` or ``"torch"``.
        kind: ``"classifier"`` (:class:`TransformerClassifier`) or ``"seq2seq"``
            (:class:`Seq2SeqTransformer`).
        model_kwargs: the model's constructor arguments.
        seed: initial weights.
        lr, min_lr, warmup_iters, lr_decay_iters, weight_decay, grad_clip: the optimizer.
        dtype: ``"float32"`` or ``"float64"``.
        attn_impl: torch only: ``"sdpa"`` or ``"explicit"``.

    Raises:
        ValueError: unknown backend or kind, bad model arguments.
    """

    def __init__(
        self,
        backend: str,
        kind: str,
        model_kwargs: dict,
        seed: int = 0,
        lr: float = 1e-3,
        min_lr: float = 1e-4,
        warmup_iters: int = 100,
        lr_decay_iters: int = 1000,
        weight_decay: float = 0.01,
        grad_clip: float = 1.0,
        dtype: str = "float32",
        attn_impl: str = "sdpa",
    ):
        if kind not in ("classifier", "seq2seq"):
            raise ValueError(f"kind: expected 'classifier' or 'seq2seq', got {kind!r}")
        if dtype not in ("float32", "float64"):
            raise ValueError(f"dtype: expected 'float32' or 'float64', got {dtype!r}")
        self.backend, self.kind = backend, kind
        self.schedule = (lr, min_lr, warmup_iters, max(lr_decay_iters, warmup_iters + 1))
        self.grad_clip = grad_clip
        self.step = 0
        betas = (0.9, 0.99)
        if backend == "numpy":
            import numpy_impl as N
            from numpy_impl.optim import AdamW, configure_param_groups

            cls = N.TransformerClassifier if kind == "classifier" else N.Seq2SeqTransformer
            self.model = cls(**model_kwargs, seed=seed, dtype=np.dtype(dtype))
            self.loss_fn = N.CrossEntropyLoss(ignore_index=IGNORE_INDEX)
            self.optimizer = AdamW(
                configure_param_groups(self.model, weight_decay),
                lr=lr,
                betas=betas,
                weight_decay=weight_decay,
            )
            self._params = self.model.parameters()
        elif backend == "torch":
            import torch

            import torch_impl as T
            from torch_impl.optim import make_lr_scheduler, make_optimizer

            self.torch = torch
            torch.manual_seed(seed)
            cls = T.TransformerClassifier if kind == "classifier" else T.Seq2SeqTransformer
            self.model = cls(**model_kwargs, attn_impl=attn_impl, dtype=getattr(torch, dtype))
            self.loss_fn = T.CrossEntropyLoss(ignore_index=IGNORE_INDEX)
            self.optimizer = make_optimizer(
                self.model, lr=lr, betas=betas, weight_decay=weight_decay
            )
            W, D = self.schedule[2], self.schedule[3]
            self.scheduler = make_lr_scheduler(self.optimizer, W, D, min_lr)
        else:
            raise ValueError(f"backend: expected 'numpy' or 'torch', got {backend!r}")

    def num_parameters(self) -> int:
        if self.backend == "numpy":
            return self.model.num_parameters()
        return sum(p.numel() for p in self.model.parameters())

    def train_step(self, inputs: dict[str, np.ndarray], targets: np.ndarray) -> float:
        """One AdamW step on ``loss(model(**inputs), targets)``; returns the loss before it."""
        if self.backend == "numpy":
            from numpy_impl.optim import clip_grad_norm_, cosine_lr

            lr = cosine_lr(self.step, *self.schedule)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.model.train()
            self.optimizer.zero_grad()
            loss = self.loss_fn(self.model(**inputs), targets)
            self.model.backward(self.loss_fn.backward())
            if self.grad_clip > 0:
                clip_grad_norm_(self._params, self.grad_clip)
            self.optimizer.step()
        else:
            from torch_impl.optim import clip_grad_norm_

            torch = self.torch
            self.model.train()
            self.optimizer.zero_grad(set_to_none=True)
            t_inputs = {k: torch.from_numpy(v) for k, v in inputs.items()}
            loss_t = self.loss_fn(self.model(**t_inputs), torch.from_numpy(targets))
            loss_t.backward()
            if self.grad_clip > 0:
                clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.optimizer.step()
            self.scheduler.step()
            loss = loss_t.item()
        self.step += 1
        return float(loss)

    def predict(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """Logits in eval mode (no dropout), as a NumPy array."""
        if self.backend == "numpy":
            self.model.eval()
            try:
                return self.model(**inputs)
            finally:
                self.model.train()
        torch = self.torch
        self.model.eval()
        try:
            with torch.inference_mode():
                return self.model(**{k: torch.from_numpy(v) for k, v in inputs.items()}).numpy()
        finally:
            self.model.train()

    def generate(self, src, src_mask, max_new_tokens: int, bos_id: int, eos_id: int) -> np.ndarray:
        """Greedy decoding (seq2seq models): ``(B, n)`` int64, BOS excluded."""
        if self.backend == "numpy":
            return self.model.generate(src, max_new_tokens, bos_id, src_mask, eos_id)
        torch = self.torch
        out = self.model.generate(
            torch.from_numpy(src), max_new_tokens, bos_id, torch.from_numpy(src_mask), eos_id
        )
        return out.numpy()


def batches(n: int, batch_size: int):
    """Slices ``[i, i + batch_size)`` covering ``range(n)``."""
    for i in range(0, n, batch_size):
        yield slice(i, min(i + batch_size, n))


def fmt_seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def check_positive(args, names: tuple[str, ...]) -> None:
    """Raise ``UserError`` naming the first option in ``names`` that is < 1."""
    from .. import UserError

    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def mean_or_nan(values) -> float:
    values = list(values)
    return float(np.mean(values)) if values else math.nan
