"""A byte-level BPE tokenizer's file, and a stream of ids decoded, the library path
(chapter 11): HF ``tokenizers`` behind the functions of ``numpy_impl/tokenizer_files.py``.

:func:`tokenizer_to_json` is HF's own serialisation; :func:`parse_tokenizer_json` lets
HF's parser read the file, then checks it is the plain byte-level BPE both twins
support; ``BPETokenizer.to_json``, ``save``, ``from_json`` and ``from_file`` call them.
:class:`DecodeStream` wraps HF's ``decoders.DecodeStream``. Nothing here imports
``numpy_impl``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders

from .byte_level import DIGITS_SPLIT_PATTERN, GPT2_SPLIT_PATTERN, _check_ids, str_to_token

#: the pre-tokenizer before ByteLevel that :data:`DIGITS_SPLIT_PATTERN` stands for (SmolLM2's)
DIGITS = {"type": "Digits", "individual_digits": True}

if TYPE_CHECKING:
    from .tokenizer import BPETokenizer


def tokenizer_to_json(tokenizer: BPETokenizer) -> str:
    """``tokenizer`` as ``tokenizer.json`` text: HF's own serialisation
    (``Tokenizer.to_str``), indented as the twin's."""
    return (
        json.dumps(json.loads(tokenizer.hf_tokenizer.to_str()), ensure_ascii=False, indent=2) + "\n"
    )


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
    """The tables of a ``tokenizer.json``: HF ``Tokenizer.from_str``, then the same checks
    as the twin's.

    Returns:
        ``(vocab, merges, special_tokens, pattern)``: the arguments of
        ``BPETokenizer``.

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
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else 0
    if digits := isinstance(steps, list) and len(steps) == 2 and steps[0] == DIGITS:
        pre = steps[1]
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
            ("pre_tokenizer.use_regex after Digits", digits and pre.get("use_regex", True),
             (digits,)),
            ("decoder.type", decoder, ("ByteLevel",)),
            ("truncation", doc.get("truncation"), (None,)),
        )
        if value not in ok
    ]  # fmt: skip
    if not _keeps_ids(doc.get("post_processor")):  # a TemplateProcessing adds BOS, say
        problems.append(f"post_processor = {doc['post_processor']!r}")
    problems += [  # HF matches these otherwise than special tokens
        f"added_tokens = {t!r}"
        for t in doc.get("added_tokens") or []
        if not t.get("special") or any(t.get(f) for f in ("lstrip", "rstrip", "single_word"))
    ]
    if problems:
        raise ValueError(f"tokenizer.json: {problems[0]} is not supported (byte-level BPE only)")
    pattern = GPT2_SPLIT_PATTERN if pre.get("use_regex", True) else None
    pattern = DIGITS_SPLIT_PATTERN if digits else pattern
    vocab = {str_to_token(s): int(i) for s, i in model.get("vocab", {}).items()}
    merges = [
        tuple(str_to_token(t) for t in (m.split(" ") if isinstance(m, str) else m))
        for m in model.get("merges", [])
    ]
    specials = {t["content"]: int(t["id"]) for t in doc.get("added_tokens") or []}
    return vocab, merges, specials, pattern


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
        (i,) = _check_ids([token_id], self.tokenizer.vocab_size)
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
