"""The decoder side beyond the registry's parity properties: the encoder-decoder Transformer.

Cross-attention, the decoder block, the decoder and the whole model, NumPy twin vs
torch twin (outputs and every gradient, both torch attention implementations) and
the NumPy backward against central differences, are the registry's entries
(registry.py, run by test_components.py). Here: the decoder is causal (later target
tokens change no earlier logit), source padding changes nothing, greedy decoding
gives identical tokens in both backends and agrees with teacher forcing on its own
output, and stops at the end-of-sequence token.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from parity_tests import hints as H
from parity_tests.harness import twins
from parity_tests.strategies import SeededRng, batch_sizes, padding_mask, rngs
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch16

IMPLS = ["explicit", "sdpa"]

SMALL = {"block_size": 12, "n_heads": 2, "d_model": 8, "d_ff": 16}


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@given(rng=rngs, S=st.integers(1, 6), T_=st.integers(2, 7), extra=st.integers(1, 3))
def test_decoder_is_causal_and_source_padding_changes_nothing(backend, rng, S, T_, extra):
    """Logits at target positions 0..t do not move when later target tokens change; a
    source padded with `extra` junk tokens, masked, gives the logits of the bare source."""
    numpy_mod, torch_mod = twins(N.Seq2SeqTransformer, T.Seq2SeqTransformer, 7, 9, rng=rng, **SMALL)

    def run(src, tgt, src_mask=None):
        if backend == "numpy":
            return numpy_mod(src, tgt, src_mask)
        to_t = (None if a is None else torch.from_numpy(a) for a in (src, tgt, src_mask))
        return torch_mod(*to_t).detach().numpy()

    src, tgt = rng.ids(7, (1, S)), rng.ids(9, (1, T_))
    t = int(rng.gen.integers(0, T_ - 1))
    tgt2 = tgt.copy()
    tgt2[:, t + 1 :] = (tgt2[:, t + 1 :] + 1) % 9
    a, b = run(src, tgt), run(src, tgt2)
    assert_close(
        f"{backend}: logits 0..{t} with later targets changed",
        b[:, : t + 1],
        a[:, : t + 1],
        hints={H.DECODER_NOT_CAUSAL: b[:, : t + 1]},  # any change at all: the symptom
    )
    assert not np.allclose(a[:, t + 1 :], b[:, t + 1 :]), "later targets had no effect"
    padded = np.concatenate([src, rng.ids(7, (1, extra))], axis=1)
    mask = np.arange(S + extra)[None, :] < S
    assert_close(f"{backend}: padded source vs bare source", run(padded, tgt, mask), a)


@given(rng=rngs, B=batch_sizes, S=st.integers(1, 8), n=st.integers(1, 8))
def test_greedy_decoding_identical_and_teacher_forcing_consistent(rng, B, S, n):
    """Same weights: NumPy and torch (both impls) decode the same tokens; and feeding the
    decoded tokens back teacher-forced gives them as the argmax at every position."""
    numpy_mod, torch_mod = twins(N.Seq2SeqTransformer, T.Seq2SeqTransformer, 7, 9, rng=rng, **SMALL)
    # larger weights than randomize_'s, so the argmax is not decided by rounding
    for p in numpy_mod.parameters():
        p.data *= 3.0
    with torch.no_grad():
        for p in torch_mod.parameters():
            p.mul_(3.0)
    src = rng.ids(7, (B, S))
    src_mask = padding_mask(rng, B, S, "suffix")
    out = numpy_mod.generate(src, n, bos_id=0, src_mask=src_mask)
    assert out.shape == (B, n) and out.dtype == np.int64
    for impl in IMPLS:
        for m in torch_mod.modules():
            if hasattr(m, "attn_impl"):
                m.attn_impl = impl
        out_t = torch_mod.generate(torch.from_numpy(src), n, 0, torch.from_numpy(src_mask))
        same = n > 1 and (out == out[:, :1]).all() and not (out_t.numpy() == out[:, :1]).all()
        assert np.array_equal(out, out_t.numpy()), (
            f"greedy tokens, torch {impl}: NumPy {out.tolist()}, torch {out_t.tolist()}"
            + (f"; hint: {H.GREEDY_WRONG_POSITION}" if same else "")
        )
    tgt_in = np.concatenate([np.zeros((B, 1), np.int64), out[:, :-1]], axis=1)
    logits = numpy_mod(src, tgt_in, src_mask)
    np.testing.assert_array_equal(logits.argmax(-1), out)
    assert numpy_mod.training, "generate must restore training mode"


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_greedy_decoding_stops_at_eos(backend):
    """Rows that emitted eos_id count as done; generation stops once all are done."""
    rng = SeededRng(3)
    numpy_mod, torch_mod = twins(N.Seq2SeqTransformer, T.Seq2SeqTransformer, 7, 9, rng=rng, **SMALL)
    src = rng.ids(7, (2, 4))
    full = numpy_mod.generate(src, 10, bos_id=0)
    eos = int(full[0, 2])  # whatever row 0 emits third: with it as EOS, row 0 ends there
    if backend == "numpy":
        out = numpy_mod.generate(src, 10, bos_id=0, eos_id=eos)
    else:
        out = torch_mod.generate(torch.from_numpy(src), 10, 0, eos_id=eos).numpy()
    hits = [np.flatnonzero(row == eos) for row in out]
    assert all(len(h) for h in hits), f"a row never emitted {eos}: {out}"
    assert out.shape[1] == max(h[0] for h in hits) + 1
    np.testing.assert_array_equal(out, full[:, : out.shape[1]])
