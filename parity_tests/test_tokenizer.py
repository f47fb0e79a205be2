"""CharTokenizer (chapter 01): characters to ids and back.

The tokenizer has no PyTorch twin, so the oracle is its definition: the id of a
character is its position in the sorted vocabulary. Hypothesis draws the
vocabulary and the text from all of Unicode (accents, emoji, control
characters), then the errors: unknown characters named with their code points,
ids out of range (a negative id must not wrap round), ids that are not integers.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from numpy_impl.char_tokenizer import CharTokenizer

pytestmark = pytest.mark.ch01

vocabularies = st.text(min_size=1, max_size=30).map(lambda s: "".join(set(s)))  # unsorted


@given(data=st.data(), chars=vocabularies)
def test_ids_are_positions_in_the_sorted_vocabulary(data, chars):
    tok = CharTokenizer(chars)
    text = data.draw(st.text(alphabet=chars, max_size=40), label="text")
    ids = tok.encode(text)
    assert ids == [sorted(chars).index(c) for c in text]
    assert all(type(i) is int for i in ids), "encode must return a list of Python ints"
    assert tok.decode(ids) == text
    np.testing.assert_array_equal(tok.encode_array(text), ids)


@given(data=st.data(), chars=vocabularies)
def test_decode_takes_lists_and_arrays_of_any_integer_type(data, chars):
    tok = CharTokenizer(chars)
    ids = data.draw(st.lists(st.integers(0, tok.vocab_size - 1), max_size=20), label="ids")
    expected = "".join(sorted(chars)[i] for i in ids)
    assert tok.decode(ids) == expected
    assert tok.decode(np.array(ids, dtype=np.int64)) == expected
    assert tok.decode([np.int32(i) for i in ids]) == expected
    if tok.vocab_size <= 256:
        assert tok.decode(np.array(ids, dtype=np.uint8)) == expected


def test_unknown_characters_are_named_with_their_code_points():
    tok = CharTokenizer("abc")
    assert tok.encode("") == [] and tok.decode([]) == ""
    try:
        with pytest.raises(ValueError, match=r"'x' \(U\+0078\)") as info:
            tok.encode("abxa\t")
    except KeyError as e:
        raise AssertionError(
            f"KeyError {e} escaped encode: an unknown character raises "
            "self._unknown_error(text), a ValueError that lists every unknown character"
        ) from None
    assert "U+0009" in str(info.value), "every unknown character is listed"


@pytest.mark.parametrize(
    ("ids", "error", "why"),
    [
        ([0, 3], ValueError, "an id equal to vocab_size is out of range"),
        ([-1], ValueError, "a negative id wrapped round to the end of chars: ids are in [0, V)"),
        ([0, 1.0], TypeError, "a float accepted as an id"),
        ([True], TypeError, "True accepted as an id: check bool before int"),
        (["a"], TypeError, "a str accepted as an id"),
    ],
    ids=["too-large", "negative", "float", "bool", "str"],
)
def test_decode_rejects_bad_ids_naming_the_argument(ids, error, why):
    try:
        out = CharTokenizer("abc").decode(ids)
    except error as e:
        assert re.match(r"ids\b", str(e)), f"the message must start with 'ids: ...', got {e}"
    except Exception as e:
        raise AssertionError(
            f"decode({ids}) raised {type(e).__name__} ({e}), not {error.__name__}: {why}"
        ) from None
    else:
        raise AssertionError(f"decode({ids}) returned {out!r}: {why}")
