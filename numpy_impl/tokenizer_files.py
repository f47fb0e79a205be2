"""A byte-level BPE tokenizer's file, and a stream of ids decoded (chapter 11).

:func:`tokenizer_to_json` writes HF's ``tokenizer.json``; :func:`parse_tokenizer_json`
reads one (ours or HF's, GPT-2's included) into ``BPETokenizer``'s tables. :class:`DecodeStream`
turns ids arriving one at a time into text. The torch twin hands the same jobs to HF.
"""

from __future__ import annotations

import codecs
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .byte_level import DIGITS_SPLIT_PATTERN, GPT2_SPLIT_PATTERN, str_to_token, token_to_str

#: the pre-tokenizer before ByteLevel that :data:`DIGITS_SPLIT_PATTERN` stands for (SmolLM2's)
DIGITS = {"type": "Digits", "individual_digits": True}

if TYPE_CHECKING:
    from .tokenizer import BPETokenizer


def tokenizer_to_json(tokenizer: BPETokenizer) -> str:
    """``tokenizer`` as HF ``tokenizer.json`` text (byte-level BPE, GPT-2 style):
    ``model.vocab`` maps each token's :func:`token_to_str` spelling to its id,
    ``model.merges`` lists ``[left, right]`` pairs earliest first, and the special
    tokens are ``added_tokens``."""
    added = [
        {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for s, i in sorted(tokenizer.special_tokens.items(), key=lambda kv: kv[1])
    ]  # fmt: skip
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}
    pre = {**byte_level, "use_regex": tokenizer.pattern is not None}
    if tokenizer.pattern == DIGITS_SPLIT_PATTERN:
        pre = {"type": "Sequence", "pretokenizers": [DIGITS, pre]}
    document = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre,
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
                token_to_str(t): i for t, i in sorted(tokenizer.vocab.items(), key=lambda kv: kv[1])
            },
            "merges": [[token_to_str(a), token_to_str(b)] for a, b in tokenizer.merges],
        },
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def write_atomically(path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file + rename): a crash
    leaves the old file or the new one, never half of one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _keeps_ids(post) -> bool:
    """Whether a ``post_processor`` leaves the ids of one text as they are: none, a
    ``ByteLevel`` one (offsets only), a ``TemplateProcessing`` of the text alone (no BOS),
    or a ``Sequence`` of these."""
    kind = post.get("type") if isinstance(post, dict) else post
    if kind == "Sequence":
        return all(_keeps_ids(p) for p in post.get("processors") or [])
    if kind == "TemplateProcessing":  # "$A" alone: [{"Sequence": {"id": "A", ...}}]
        single = post.get("single")
        return isinstance(single, list) and [list(p) for p in single] == [["Sequence"]]
    return kind in (None, "ByteLevel")


def parse_tokenizer_json(
    text: str,
) -> tuple[dict[bytes, int], list[tuple[bytes, bytes]], dict[str, int], str | None]:
    """The tables of a byte-level BPE ``tokenizer.json`` (ours, or HF's: GPT-2's loads).

    Supported: no normalizer; a ``ByteLevel`` pre-tokenizer without prefix space
    (``use_regex`` true: GPT-2's pattern, false: none), alone or after SmolLM2's
    ``Digits(individual_digits=True)`` (with the regex); a ``ByteLevel`` decoder
    or none; a ``BPE`` model without dropout, subword prefix/suffix, byte
    fallback or ``ignore_merges``; merges as ``"a b"`` strings or ``[a, b]``
    pairs; no truncation; a post-processor that adds no token (:func:`_keeps_ids`).
    ``added_tokens`` become special tokens: each must be special, without
    ``lstrip``, ``rstrip`` or ``single_word``.

    Returns:
        ``(vocab, merges, special_tokens, pattern)``: the arguments of
        ``BPETokenizer``.

    Raises:
        ValueError: not JSON, or a field this tokenizer does not support (named).
    """
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
    steps = (
        pre.get("pretokenizers") if isinstance(pre, dict) and pre.get("type") == "Sequence" else 0
    )
    if digits := isinstance(steps, list) and len(steps) == 2 and steps[0] == DIGITS:
        pre = steps[1]
    if (
        not isinstance(pre, dict)
        or pre.get("type") != "ByteLevel"
        or pre.get("add_prefix_space", True)
        or (digits and not pre.get("use_regex", True))
    ):
        raise unsupported("pre_tokenizer", doc.get("pre_tokenizer"))
    dec = doc.get("decoder")
    if dec is not None and (not isinstance(dec, dict) or dec.get("type") != "ByteLevel"):
        raise unsupported("decoder", dec)
    post = doc.get("post_processor")
    if not _keeps_ids(post):
        raise unsupported("post_processor", post)  # a TemplateProcessing adds BOS, say
    if doc.get("truncation") is not None:
        raise unsupported("truncation", doc["truncation"])
    for t in doc.get("added_tokens") or []:
        if (
            not isinstance(t, dict)
            or not t.get("special")
            or any(t.get(flag) for flag in ("lstrip", "rstrip", "single_word"))
        ):
            raise unsupported("added_tokens", t)  # HF matches these otherwise than specials
    pattern = GPT2_SPLIT_PATTERN if pre.get("use_regex", True) else None
    pattern = DIGITS_SPLIT_PATTERN if digits else pattern
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
    return vocab, merges, specials, pattern


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
        self.tokenizer = tokenizer
        # the standard incremental UTF-8 decoder holds back an incomplete tail (<= 3 bytes)
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
