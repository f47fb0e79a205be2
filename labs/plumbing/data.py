"""The corpus and the batches: Tiny Shakespeare, split, sampled, in NumPy for both backends
(a seed gives the same batches whatever the backend).

Where the corpus comes from (:func:`resolve_corpus`), first match wins: ``--data PATH``;
``$TWINFORMER_DATA``; the cache, ``$XDG_CACHE_HOME/twinformer/tinyshakespeare.txt``
(``~/.cache/...``); a download of Karpathy's char-rnn copy into the cache, its SHA-256
checked.
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
    """Where the downloaded corpus is kept."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "twinformer" / CORPUS_FILENAME


def download_corpus(
    dest: Path,
    url: str = CORPUS_URL,
    sha256: str | None = CORPUS_SHA256,
    timeout: float = DOWNLOAD_TIMEOUT_S,
) -> Path:
    """Download ``url`` (``file://`` too) to ``dest`` atomically, its SHA-256 checked unless
    ``sha256`` is None; return ``dest``. ``timeout``: seconds before a stalled connection
    is abandoned. CorpusUnavailableError: the download failed or the digest differs."""
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
    """The corpus file, found in the module's order.

    Raises:
        FileNotFoundError: ``path`` (or ``$TWINFORMER_DATA``) names no file (named).
        CorpusUnavailableError: nothing local and the download failed.
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
    """The whole file as text (FileNotFoundError; ValueError: empty, or not UTF-8)."""
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
    """``(train, val)``: the first ``frac`` of the ``(N,)`` ids and the rest, contiguous as
    nanoGPT's (ValueError: ``ids`` not 1-D, ``frac`` outside ``(0, 1)``)."""
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids: expected a 1-D array, got shape {ids.shape}")
    if not 0.0 < frac < 1.0:
        raise ValueError(f"frac: expected a value in (0, 1), got {frac}")
    n = int(frac * len(ids))
    return ids[:n], ids[n:]


class BatchSampler:
    """``batch_size`` (B) random windows of ``block_size + 1`` (T + 1) tokens of a ``(N,)``
    stream, offsets drawn by its own ``default_rng(seed)``; the target is the input shifted.

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
        """The next batch ``(x, y)``, both ``(B, T)`` int64, ``y[:, t] == x[:, t + 1]``."""
        # One offset per row; N - T is the largest start that leaves room for y.
        offsets = self.rng.integers(0, len(self.data) - self.block_size, size=self.batch_size)
        idx = offsets[:, None] + self._arange  # (B, 1) + (T,) -> (B, T)
        x = self.data[idx].astype(np.int64)
        y = self.data[idx + 1].astype(np.int64)
        return x, y

    def get_state(self) -> dict:
        """The RNG state (``bit_generator.state``): a JSON-serialisable dict."""
        return self.rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        """Resume from :meth:`get_state`'s dict (ValueError: not such a state)."""
        try:
            self.rng.bit_generator.state = state
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(f"state: not a valid sampler state ({e})") from e


def fixed_eval_batches(
    data: np.ndarray, block_size: int, batch_size: int, n_batches: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_batches`` batches ``(x, y)`` drawn once, so every evaluation sees the same tokens
    (ValueError: as :class:`BatchSampler`, or ``n_batches < 1``)."""
    if n_batches < 1:
        raise ValueError(f"n_batches: expected >= 1, got {n_batches}")
    sampler = BatchSampler(data, block_size, batch_size, seed)
    return [sampler.next() for _ in range(n_batches)]
