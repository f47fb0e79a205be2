"""The corpus and the batches: Tiny Shakespeare, split, sampled.

Everything here is NumPy, shared by both backends: the NumPy model eats the
arrays directly, the PyTorch model wraps them with ``torch.from_numpy``. So a
given seed yields the same batches whatever the backend, and two training runs
differ only by their models.

Where the corpus comes from (:func:`resolve_corpus`), first match wins:

1. an explicit path (``--data PATH``);
2. the environment variable ``TWINFORMER_DATA``;
3. the cache, ``$XDG_CACHE_HOME/twinformer/tinyshakespeare.txt``
   (``~/.cache/twinformer/...`` when ``XDG_CACHE_HOME`` is unset);
4. a download of Karpathy's char-rnn copy into that cache, checked against its
   SHA-256.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from .checkpoint_files import _sha256

CORPUS_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
CORPUS_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
CORPUS_FILENAME = "tinyshakespeare.txt"
DATA_ENV_VAR = "TWINFORMER_DATA"
DOWNLOAD_TIMEOUT_S = 20.0


class CorpusUnavailableError(RuntimeError):
    """No local copy of the corpus and the download failed (offline, say)."""


# -- finding the corpus --------------------------------------------------------
def cache_path() -> Path:
    """Where the downloaded corpus is kept: ``$XDG_CACHE_HOME/twinformer/``
    (default ``~/.cache/twinformer/``) ``tinyshakespeare.txt``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "twinformer" / CORPUS_FILENAME


def download_corpus(
    dest: Path,
    url: str = CORPUS_URL,
    sha256: str | None = CORPUS_SHA256,
    timeout: float = DOWNLOAD_TIMEOUT_S,
) -> Path:
    """Download ``url`` (``file://`` too: the tests run offline) to ``dest`` atomically:
    a temporary file beside it, its SHA-256 checked (unless ``sha256`` is None), fsynced,
    renamed. ``timeout``: seconds before a stalled connection is abandoned. Returns ``dest``.

    Raises:
        CorpusUnavailableError: the download failed or the digest differs (the
            temporary file is removed).
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        try:
            with open(tmp, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
                while chunk := resp.read(1 << 16):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise CorpusUnavailableError(f"could not download the corpus from {url}: {e}") from e
        if sha256 is not None and (got := _sha256(tmp)) != sha256:
            raise CorpusUnavailableError(
                f"the corpus downloaded from {url} has SHA-256 {got}, expected {sha256}; "
                "it was discarded"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def resolve_corpus(path: str | os.PathLike | None = None, url: str = CORPUS_URL) -> Path:
    """The corpus file, found in the module's order (downloaded into the cache last).

    Raises:
        FileNotFoundError: ``path`` (or ``$TWINFORMER_DATA``) names no file (named).
        CorpusUnavailableError: nothing local and the download failed (says how to
            pass a path).
    """
    if path is not None:
        return _existing_file(Path(path).expanduser(), "")
    if env := os.environ.get(DATA_ENV_VAR):
        return _existing_file(Path(env).expanduser(), f" (from ${DATA_ENV_VAR})")
    cached = cache_path()
    if cached.is_file():
        return cached
    try:
        return download_corpus(cached, url=url)
    except CorpusUnavailableError as e:
        raise CorpusUnavailableError(
            f"{e}. Point twinformer at a copy of Tiny Shakespeare with --data PATH or "
            f"{DATA_ENV_VAR}=PATH (any UTF-8 text file works), or put one at {cached}"
        ) from e


def _existing_file(p: Path, source: str) -> Path:
    if p.is_dir():
        raise IsADirectoryError(f"corpus {p}{source} is a directory: give the text file's path")
    if p.exists() and not p.is_file():
        raise FileNotFoundError(f"corpus {p}{source} is not a regular file: give a text file")
    if not p.is_file():
        raise FileNotFoundError(f"corpus file not found: {p}{source}")
    return p


def load_corpus(path: str | os.PathLike) -> str:
    """The whole file as text.

    Raises:
        FileNotFoundError: no such file (named).
        ValueError: the file is empty or is not UTF-8 (named, with the byte
            offset of the first bad byte).
    """
    path = Path(path)
    data = path.read_bytes()
    if not data:
        raise ValueError(f"corpus file is empty: {path}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"corpus file is not UTF-8 text: {path} (byte {e.start}: {e.reason})"
        ) from e


# -- splitting and batching ----------------------------------------------------
def train_val_split(ids: np.ndarray, frac: float = 0.9) -> tuple[np.ndarray, np.ndarray]:
    """``(train, val)``: the first ``frac`` of the ``(N,)`` ids and the rest, views split at
    ``int(frac * N)``. Contiguous, as nanoGPT's: validation is text the model never saw.

    Raises:
        ValueError: ``ids`` is not 1-D, or ``frac`` is outside ``(0, 1)``.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids: expected a 1-D array, got shape {ids.shape}")
    if not 0.0 < frac < 1.0:
        raise ValueError(f"frac: expected a value in (0, 1), got {frac}")
    n = int(frac * len(ids))
    return ids[:n], ids[n:]


class BatchSampler:
    """Random (input, target) windows of a ``(N,)`` token stream, reproducibly: ``batch_size``
    (B) windows of ``block_size + 1`` (T + 1) tokens at random offsets drawn by its own
    ``np.random.default_rng(seed)``; the target is the input shifted by one.

    Raises:
        ValueError: ``data`` not 1-D or not longer than ``block_size``, non-positive sizes.
        TypeError: ``data`` is not an integer array.
    """

    def __init__(self, data: np.ndarray, block_size: int, batch_size: int, seed: int = 0):
        data = np.asarray(data)
        if data.ndim != 1:
            raise ValueError(f"data: expected a 1-D array of token ids, got shape {data.shape}")
        if data.dtype.kind not in "iu":
            raise TypeError(f"data: expected integer token ids, got dtype {data.dtype}")
        if block_size < 1 or batch_size < 1:
            raise ValueError(
                f"block_size and batch_size must be >= 1, got {block_size} and {batch_size}"
            )
        if len(data) <= block_size:
            raise ValueError(
                f"data: {len(data)} tokens is too short for block_size {block_size} "
                f"(needs at least {block_size + 1})"
            )
        self.data = data
        self.block_size = block_size
        self.batch_size = batch_size
        self.rng = np.random.default_rng(seed)
        self._arange = np.arange(block_size)

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """The next batch.

        Returns:
            ``(x, y)``, both ``(B, T)`` int64, ``y[:, t] == x[:, t + 1]`` for
            ``t < T - 1`` and ``y[:, -1]`` the token after the window.
        """
        # One offset per row; N - T is the largest start that leaves room for y.
        offsets = self.rng.integers(0, len(self.data) - self.block_size, size=self.batch_size)
        idx = offsets[:, None] + self._arange  # (B, 1) + (T,) -> (B, T)
        x = self.data[idx].astype(np.int64)
        y = self.data[idx + 1].astype(np.int64)
        return x, y

    __next__ = next

    def __iter__(self):
        return self

    def get_state(self) -> dict:
        """The RNG state (``bit_generator.state``): a JSON-serialisable dict."""
        return self.rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        """Resume from :meth:`get_state`'s dict: the next batches are the ones
        the saved sampler would have produced.

        Raises:
            ValueError: ``state`` is not a state of this sampler's generator.
        """
        try:
            self.rng.bit_generator.state = state
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(f"state: not a valid sampler state ({e})") from e


def fixed_eval_batches(
    data: np.ndarray, block_size: int, batch_size: int, n_batches: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_batches`` batches ``(x, y)``, each ``(batch_size, block_size)`` int64, drawn once:
    every evaluation sees the same tokens, so successive losses differ by the model alone.

    Raises:
        ValueError: as :class:`BatchSampler`, or ``n_batches < 1``.
    """
    if n_batches < 1:
        raise ValueError(f"n_batches: expected >= 1, got {n_batches}")
    sampler = BatchSampler(data, block_size, batch_size, seed)
    return [sampler.next() for _ in range(n_batches)]
