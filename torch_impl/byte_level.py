"""The byte level of byte-level BPE, the library path (chapter 11): GPT-2's pattern,
the bytes' printable spelling, HF's ``ByteLevel`` pre-tokenizer, and the argument
checks that the tokenizer (``tokenizer.py``) and the trainer share.

The twin of ``numpy_impl/byte_level.py``. HF ``tokenizers`` does the byte-level work
in Rust; what is written here is what HF does not expose (the spelling table) and
the checks that make both twins raise the same errors before HF is called.
Nothing here imports ``numpy_impl``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from tokenizers import pre_tokenizers

#: GPT-2's pre-tokenization regex: what ``ByteLevel(use_regex=True)`` splits with.
GPT2_SPLIT_PATTERN = (
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
#: SmolLM2's and StarCoder's: HF ``Digits(individual_digits=True)``, then GPT-2's regex on
#: each stretch between digits. As one regex: each digit alone, and whitespace before a
#: digit ends there, as at the end of a stretch.
DIGITS_SPLIT_PATTERN = GPT2_SPLIT_PATTERN.replace(r" ?\p{N}+", r"\p{N}").replace(
    r"(?!\S)", r"(?![^\s\p{N}])"
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


def _check_pattern(pattern: str | None) -> str | None:
    if pattern not in (None, GPT2_SPLIT_PATTERN, DIGITS_SPLIT_PATTERN):
        raise ValueError(
            "pattern: expected GPT2_SPLIT_PATTERN, DIGITS_SPLIT_PATTERN or None (no "
            f"pre-tokenization), those a tokenizer.json can express; got {pattern!r}"
        )
    return pattern


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


def _byte_level(pattern: str | None) -> pre_tokenizers.PreTokenizer:
    """HF's pre-tokenizer of ``pattern``: ``ByteLevel`` (with GPT-2's regex or none),
    after ``Digits`` for :data:`DIGITS_SPLIT_PATTERN`."""
    # add_prefix_space=False: "Hello" stays "Hello", not " Hello" (GPT-2's choice)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=pattern is not None)
    if pattern != DIGITS_SPLIT_PATTERN:
        return byte_level
    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])


def _check_vocab_and_specials(vocab, special_tokens) -> list[bytes]:
    """The checks of ``BPETokenizer(vocab, merges, special_tokens)`` on ``vocab`` and
    ``special_tokens`` (``{}`` for None); returns the bytes of each id, in id order."""
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
    return [id_bytes[i] for i in range(n)]


def _check_allowed_special(allowed_special, special_tokens) -> frozenset:
    """``allowed_special`` of ``BPETokenizer.encode`` as a set of ``special_tokens``."""
    if isinstance(allowed_special, str):
        if allowed_special != "all":
            raise TypeError(
                f"allowed_special: expected 'all' or a set of special tokens, got "
                f"the str {allowed_special!r}"
            )
        return frozenset(special_tokens)
    if not isinstance(allowed_special, Iterable):
        raise TypeError(
            "allowed_special: expected 'all' or a set of special tokens, got "
            f"{type(allowed_special).__name__}"
        )
    allowed = frozenset(allowed_special)
    if unknown := sorted(map(repr, allowed - set(special_tokens))):
        raise ValueError(
            f"allowed_special: not special tokens of this tokenizer: {', '.join(unknown)} "
            f"(it has {sorted(special_tokens)})"
        )
    return allowed


def _check_ids(ids, vocab_size: int) -> list[int]:
    """``ids`` to decode (a sequence of ints or a 1-D integer array), each checked to
    be in ``[0, vocab_size)``, as a list."""
    V = vocab_size
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
