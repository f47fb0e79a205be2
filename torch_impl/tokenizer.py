"""Byte-level BPE, the library path: Hugging Face ``tokenizers`` behind the interface of
``numpy_impl/tokenizer.py``'s from-scratch ``BPETokenizer``.

The pieces are HF's: a ``ByteLevel`` pre-tokenizer (GPT-2's regex, no prefix space), a
``BPE`` model, a ``BpeTrainer`` seeded with all 256 bytes (``ByteLevel.alphabet()``), a
``ByteLevel`` decoder and ``DecodeStream``. What this file adds is the contract both
sides keep: the same constructor (``vocab`` and ``merges`` as bytes), the same
special-token rule (not produced from plain text unless allowed), the same errors
raised before HF is called (HF silently skips an unknown id when decoding), and the
same ``tokenizer.json``. Nothing here imports ``numpy_impl``.

    >>> tok = BPETokenizer.train(text, vocab_size=1000)       # HF BpeTrainer (Rust)
    >>> tok.encode("To be, or not to be")                      # HF's encode
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

#: GPT-2's pre-tokenization regex: what ``ByteLevel(use_regex=True)`` splits with.
GPT2_SPLIT_PATTERN = (
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
ENDOFTEXT = "<|endoftext|>"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte (openai/gpt-2 ``encoder.py``): how HF
    spells byte-level tokens (``b" the"`` is ``"Ġthe"``). HF keeps this table inside
    its Rust ``ByteLevel``; only the unordered ``ByteLevel.alphabet()`` is exposed, so
    the 10 lines are written here too."""
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


def token_to_str(token: bytes) -> str:
    """``b" the"`` -> ``"Ġthe"``."""
    return "".join(BYTE_TO_UNICODE[b] for b in token)


def str_to_token(s: str) -> bytes:
    """``"Ġthe"`` -> ``b" the"``.

    Raises:
        ValueError: a character that stands for no byte.
    """
    try:
        return bytes(UNICODE_TO_BYTE[c] for c in s)
    except KeyError as e:
        raise ValueError(f"token {s!r}: {e.args[0]!r} is not a byte-level character") from None


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


def _check_pattern(pattern: str | None) -> bool:
    """``use_regex`` of HF's ByteLevel for ``pattern``."""
    if pattern is not None and pattern != GPT2_SPLIT_PATTERN:
        raise ValueError(
            "pattern: expected GPT2_SPLIT_PATTERN or None (no pre-tokenization), the two "
            f"that a ByteLevel tokenizer.json can express; got {pattern!r}"
        )
    return pattern is not None


def _check_vocab_size(vocab_size, n_special: int = 0) -> None:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)):
        raise TypeError(f"vocab_size: expected an int, got {type(vocab_size).__name__}")
    if vocab_size < 256 + n_special:
        raise ValueError(
            f"vocab_size: expected at least 256 (the bytes) + {n_special} special tokens "
            f"= {256 + n_special}, got {vocab_size}"
        )


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


def _byte_level(use_regex: bool) -> pre_tokenizers.ByteLevel:
    # add_prefix_space=False: "Hello" stays "Hello", not " Hello" (GPT-2's choice)
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)


def _hf_tokenizer(vocab_str: dict[str, int], merges_str: list, use_regex: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE(vocab=vocab_str, merges=merges_str))
    tok.pre_tokenizer = _byte_level(use_regex)
    tok.decoder = decoders.ByteLevel()
    return tok


class BPETokenizer:
    """Byte-level BPE through HF ``tokenizers``; the twin of ``numpy_impl``'s.

    Args:
        vocab: ``{token bytes: id}``; holds the 256 single bytes.
        merges: ``[(left bytes, right bytes), ...]``, earliest first.
        special_tokens: ``{text: id}``.
        pattern: ``GPT2_SPLIT_PATTERN`` (HF ``ByteLevel(use_regex=True)``) or None.

    Attributes:
        vocab, merges, special_tokens, pattern, vocab_size: as the NumPy twin's.
        hf_tokenizer: the ``tokenizers.Tokenizer`` doing the work (special tokens
            registered as added tokens, which HF always extracts from the text).

    Raises:
        TypeError, ValueError: as the NumPy twin (checked here, before HF sees them).
    """

    def __init__(
        self,
        vocab: dict[bytes, int],
        merges: list[tuple[bytes, bytes]],
        special_tokens: dict[str, int] | None = None,
        pattern: str | None = GPT2_SPLIT_PATTERN,
    ):
        use_regex = _check_pattern(pattern)
        special_tokens = {} if special_tokens is None else special_tokens
        if not isinstance(vocab, dict):
            raise TypeError(f"vocab: expected a dict of bytes -> id, got {type(vocab).__name__}")
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
        id_bytes = {int(i): t for t, i in vocab.items()}
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
        self.vocab_size = n
        self._id_bytes = [id_bytes[i] for i in range(n)]
        vocab_str = {token_to_str(t): int(i) for t, i in vocab.items()}
        merges_str = [(token_to_str(a), token_to_str(b)) for a, b in self.merges]
        self.hf_tokenizer = _hf_tokenizer(vocab_str, merges_str, use_regex)
        self._add_specials(self.hf_tokenizer)
        # A second Tokenizer, same model, no added tokens: HF extracts every added token
        # from any text, so the text of a special token that is not allowed is encoded
        # through this one, as ordinary bytes.
        self._hf_plain = _hf_tokenizer(vocab_str, merges_str, use_regex)

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
        """HF ``BpeTrainer`` learns ``vocab_size - len(special_tokens)`` tokens from
        ``text`` (one document, pre-tokenized whole), then the special tokens are
        added (ids after the learned ones).

        ``initial_alphabet=ByteLevel.alphabet()`` puts all 256 bytes in the
        vocabulary, seen in the text or not: that is what spares byte-level BPE an
        ``[UNK]``. HF's Rust trainer uses its thread pool (``RAYON_NUM_THREADS``).

        Raises:
            TypeError, ValueError: as the NumPy twin's ``train``.
        """
        _check_text(text)
        specials = _check_special_tokens(special_tokens)
        _check_vocab_size(vocab_size, len(specials))
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = _byte_level(_check_pattern(pattern))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size - len(specials),
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train_from_iterator([text], trainer)
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        return cls.from_json(tok.to_str())

    # -- encoding ----------------------------------------------------------------------
    def pre_tokenize(self, text: str) -> list[str]:
        """HF ``ByteLevel``'s pieces, turned back from byte-level spelling into text."""
        _check_text(text)
        pieces = self.hf_tokenizer.pre_tokenizer.pre_tokenize_str(text)
        return [str_to_token(p).decode("utf-8") for p, _ in pieces]

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
        """HF's ids of ``text``; special tokens only where allowed (see the twin).

        Raises:
            TypeError, ValueError: as the NumPy twin.
        """
        _check_text(text)
        allowed = self._allowed(allowed_special)
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
        """:meth:`encode` (one HF call for the whole text) as a ``(N,)`` array.

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
            if not 0 <= i < V:  # HF would skip it silently
                raise ValueError(f"ids: id {int(i)} is outside [0, {V})")
        return [int(i) for i in ids]

    def decode_bytes(self, ids: Iterable[int] | np.ndarray) -> bytes:
        """The bytes of ``ids``, joined. (HF decodes to ``str`` only; this reads the
        tokens' byte-level spelling.)

        Raises:
            TypeError, ValueError: as the NumPy twin.
        """
        return b"".join(self._id_bytes[i] for i in self._check_ids(ids))

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        """HF's ``decode`` (ByteLevel decoder: bytes joined, invalid UTF-8 -> U+FFFD),
        special tokens kept.

        Raises:
            TypeError, ValueError: as the NumPy twin.
        """
        return self.hf_tokenizer.decode(self._check_ids(ids), skip_special_tokens=False)

    def decode_stream(self) -> DecodeStream:
        """A :class:`DecodeStream` over this tokenizer."""
        return DecodeStream(self)

    def id_to_token(self, token_id: int) -> str:
        """HF's spelling of the token (``"Ġthe"``).

        Raises:
            TypeError, ValueError: as :meth:`decode_bytes`.
        """
        (i,) = self._check_ids([token_id])
        return self.hf_tokenizer.id_to_token(i)

    def token_to_id(self, token: str) -> int | None:
        """Inverse of :meth:`id_to_token`; None for an unknown token."""
        return self.hf_tokenizer.token_to_id(token)

    # -- tokenizer.json ------------------------------------------------------------------
    def to_json(self) -> str:
        """HF's own serialisation (``Tokenizer.to_str``)."""
        return (
            json.dumps(json.loads(self.hf_tokenizer.to_str()), ensure_ascii=False, indent=2) + "\n"
        )

    def save(self, path) -> None:
        """Write :meth:`to_json` to ``path`` atomically (temporary file + rename)."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(self.to_json(), encoding="utf-8")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def from_json(cls, text: str) -> BPETokenizer:
        """HF ``Tokenizer.from_str``, then the same checks as the twin's.

        Raises:
            ValueError: not a tokenizer.json HF reads, or not a plain byte-level BPE.
        """
        try:
            doc = json.loads(text)
            Tokenizer.from_str(text)  # HF's own parser must accept it
        except Exception as e:  # json's error, or HF's Exception with serde's message
            raise ValueError(f"tokenizer.json: HF cannot read it: {e}") from e
        model = doc.get("model") or {}
        pre = doc.get("pre_tokenizer") or {}
        decoder = (doc.get("decoder") or {"type": "ByteLevel"})["type"]
        subword = "continuing_subword_prefix"
        problems = [
            f"{field} = {value!r}"
            for field, value, ok in (
                ("model.type", model.get("type", "BPE"), ("BPE",)),
                ("model.dropout", model.get("dropout"), (None, 0, 0.0)),
                (f"model.{subword}", model.get(subword), (None, "")),
                ("model.end_of_word_suffix", model.get("end_of_word_suffix"), (None, "")),
                ("model.byte_fallback", model.get("byte_fallback"), (None, False)),
                ("model.ignore_merges", model.get("ignore_merges"), (None, False)),
                ("normalizer", doc.get("normalizer"), (None,)),
                ("pre_tokenizer.type", pre.get("type"), ("ByteLevel",)),
                ("pre_tokenizer.add_prefix_space", pre.get("add_prefix_space", True), (False,)),
                ("decoder.type", decoder, ("ByteLevel",)),
            )
            if value not in ok
        ]  # fmt: skip
        if problems:
            raise ValueError(
                f"tokenizer.json: {problems[0]} is not supported (byte-level BPE only)"
            )
        pattern = GPT2_SPLIT_PATTERN if pre.get("use_regex", True) else None
        vocab = {str_to_token(s): int(i) for s, i in model.get("vocab", {}).items()}
        merges = [
            tuple(str_to_token(t) for t in (m.split(" ") if isinstance(m, str) else m))
            for m in model.get("merges", [])
        ]
        specials = {t["content"]: int(t["id"]) for t in doc.get("added_tokens") or []}
        return cls(vocab, merges, specials, pattern)

    @classmethod
    def from_file(cls, path) -> BPETokenizer:
        """:meth:`from_json` of a file.

        Raises:
            FileNotFoundError: no such file. ValueError: as :meth:`from_json`.
        """
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def __repr__(self) -> str:
        pre = "gpt2" if self.pattern is not None else "none"
        return (
            f"BPETokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)}, "
            f"special_tokens={sorted(self.special_tokens)}, pre_tokenizer={pre})"
        )


class DecodeStream:
    """HF's ``tokenizers.decoders.DecodeStream`` behind the twin's interface.

    HF's stream returns nothing (None) while the text decoded since its last output
    ends in U+FFFD, so it holds back a whole token, not only the incomplete bytes;
    the concatenation of the steps is the same text.

    Args:
        tokenizer: the :class:`BPETokenizer` whose ids these are.
    """

    def __init__(self, tokenizer: BPETokenizer):
        self.tokenizer = tokenizer
        self._stream = decoders.DecodeStream(skip_special_tokens=False)
        self._pending: list[int] = []  # ids fed since the last text came out

    def step(self, token_id: int) -> str:
        """Feed one id; return the newly completed text ("" if none).

        Raises:
            TypeError, ValueError: as :meth:`BPETokenizer.decode_bytes`.
        """
        (i,) = self.tokenizer._check_ids([token_id])
        text = self._stream.step(self.tokenizer.hf_tokenizer, i)
        if text is None:
            self._pending.append(i)
            return ""
        self._pending.clear()
        return text

    def flush(self) -> str:
        """End of stream: what HF still holds, decoded with U+FFFD for broken bytes."""
        pending, self._pending = self._pending, []
        return self.tokenizer.hf_tokenizer.decode(pending, skip_special_tokens=False)
