"""Fused forms: the one place where a formula is rewritten for speed.

Every layer in ``numpy_impl`` reads as its equation, one NumPy call per step.
Each step allocates a new array and walks over it once, and every NumPy call
has a fixed cost (argument checks, a short loop per row where an operand
broadcasts): GELU's backward written as its formula is some fifteen passes and
fourteen temporaries over a ``(B T, 4C)`` array, LayerNorm's a dozen calls over
``(B T, C)``, the attention's scores, mask and softmax six new ``(B, H, T, T)``
arrays, AdamW's update a dozen temporaries per parameter, and ``np.add.at``
(the embedding's backward) adds one row at a time. PyTorch runs each of these
as one fused kernel.

This module holds the same computations written for speed instead of for
reading: LayerNorm's forward and backward (``norm.layer_norm``,
``norm.layer_norm_backward``), GELU's tanh form and its backward
(``activations.gelu_tanh``, ``activations.gelu_tanh_backward``), the explicit
attention's arithmetic and its backward (``attention.scaled_dot_product_attention``
and ``scaled_dot_product_attention_backward``: the ``(T_q, T_k)`` scores scaled,
masked and made probabilities in one array), AdamW's update
of one parameter (``optim.AdamW.step``; ``flat_buffers.py`` runs it over a whole
param group in one call) and the embedding's scatter-add (``embedding.Embedding.backward``).
Each computes its formula (its docstring gives the identity it uses) with these
tricks and no others:

* **in place**: a step writes into a temporary the function owns (``out=``,
  ``*=``), never into an argument, so fewer arrays are allocated and fewer
  cache lines go cold (AdamW's update keeps the formula's operations in the
  formula's order: the same bits);
* **row sums by ``np.einsum``**: ``np.einsum("...c->...", x)`` and
  ``np.einsum("...c,...c->...", a, b)`` sum each row in one vectorised loop,
  two to three times faster than ``x.sum(axis=-1)`` on rows of 128 to a few hundred
  numbers (NumPy's pairwise summation sets up a short loop per row), the second
  without the product's temporary. Each row is summed the same way however the
  rows are cut into blocks (``parallel.map_rows``), so results stay the same
  bits on any thread count (a BLAS ``x @ ones`` is as fast, but BLAS may share
  one product's rows among its own threads). That holds for contiguous rows of
  at most ``np.getbufsize()`` (8192) numbers: so rows of another layout are
  copied contiguous first, and longer rows are summed by ``.sum(axis=-1)``
  (einsum sums a lone long row in buffer-sized pieces, several rows whole);
* **algebra that saves a pass**: GELU's ``sqrt(2/pi) (x + a x^3)`` is computed
  as ``x (c + a c x^2)``;
* **a sort instead of a scatter**: the embedding's backward sorts the ids,
  sums each id's rows with one ``np.add.reduceat`` and adds each sum once.

They are not what a learner reads or writes: the chapters' exercises are the
formulas, and ``parity_tests/test_fused.py`` proves each fused form equal (to rounding) to its
formula (float64 and float32, drawn shapes, the overflowing and non-finite
inputs the formulas' docstrings name; AdamW bit for bit), and a whole GPT's
forward and backward with them equal to the formulas'. The layers, the attention and AdamW use
them only while :func:`active` is true, which :func:`kernels` switches for a
``with`` block, in the calling thread (as :func:`module.no_grad`; the blocks
and shards ``parallel.py`` hands to its pool run under their caller's setting,
so two threads that train with different settings never see each other's, and
each gets its own back when its block ends): the NumPy training backend
(``labs/plumbing/backends_numpy.py``) runs its steps and evaluations under
``kernels(True)`` unless built with ``fused=False`` (``labs train --no-fused``);
everything else (the labs' scripts, the parity tests of each layer, sampling)
runs the formulas unless it asks.

No twin: PyTorch's own kernels (``torch.nn.functional.layer_norm``,
``torch.nn.functional.gelu``, ``torch.nn.functional.scaled_dot_product_attention``,
the embedding's ``index_add_``) are already fused;
the torch backend's AdamW runs one tensor at a time (``foreach=False``), as
the NumPy loop does, fused here or not.
"""

from __future__ import annotations

import contextlib
import math
import threading

import numpy as np


class _Setting(threading.local):
    on = False  # this thread's setting (parallel.py's pool gets its caller's)


_state = _Setting()

#: GELU's constants (Hendrycks & Gimpel 2016, sec. 2): u = SQRT_2_OVER_PI (x + GELU_A x^3)
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
GELU_A = 0.044715


def active() -> bool:
    """True inside :func:`kernels` ``(True)``: the layers run this module's fused forms.

    Shapes: none. Raises nothing.
    """
    return _state.on


@contextlib.contextmanager
def kernels(on: bool = True):
    """Run this module's forms (``on``) or the formulas they replace, in this block.

    For the calling thread while the block runs, and for the blocks and shards
    ``parallel.py`` runs for it on other threads; the previous setting comes back
    when it ends, also on an exception. ``on`` must be a bool (``TypeError``
    otherwise).

    Shapes: none. Raises:
        TypeError: ``on`` is not a bool (``np.True_`` included), before anything changes.
    """
    if not isinstance(on, bool):
        raise TypeError(f"on: expected True or False, got {on!r}")
    before, _state.on = active(), on
    try:
        yield
    finally:
        _state.on = before


def _row_sums(x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """sum over the last axis of x (..., C), or of x * y without its temporary: (...).

    A row's sum depends on its numbers alone, not on the rows beside it nor on
    the layout (see the module's docstring): einsum on contiguous rows of at
    most ``np.getbufsize()`` numbers, NumPy's pairwise ``sum`` on longer ones.
    """
    x = x if x.flags.c_contiguous else np.ascontiguousarray(x)  # a copy only when it is not
    if x.shape[-1] > np.getbufsize():
        return x.sum(axis=-1) if y is None else np.multiply(x, y, order="C").sum(axis=-1)
    if y is None:
        return np.einsum("...c->...", x)
    y = y if y.flags.c_contiguous else np.ascontiguousarray(y)
    return np.einsum("...c,...c->...", x, y)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float):
    """``norm.layer_norm`` fused: y (..., C), xhat (..., C), rstd (..., 1) from x (..., C).

    Same formula (Ba et al. 2016, eqs. 3-4): xhat = (x - mean) rstd,
    rstd = 1 / sqrt(mean((x - mean)^2) + eps), y = xhat weight + bias; the two
    row means by einsum (the second with no temporary), xhat built in place.

    Shapes: x ``(..., C)``, weight and bias ``(C,)`` (bias may be None) -> y and xhat
    ``(..., C)``, rstd ``(..., 1)``, x's dtype. Raises nothing (``LayerNorm`` checks x).
    """
    C = x.shape[-1]
    mean = _row_sums(x) / C  # (...)
    xhat = x - mean[..., None]  # (..., C): the centred rows, scaled in place below
    var = _row_sums(xhat, xhat) / C  # (...), biased
    rstd = 1.0 / np.sqrt(var + eps)  # (...)
    rstd = rstd[..., None]  # (..., 1)
    xhat *= rstd
    y = xhat * weight
    if bias is not None:
        y += bias
    return y, xhat, rstd


def layer_norm_backward(
    dout: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, weight: np.ndarray
) -> np.ndarray:
    """``norm.layer_norm_backward`` fused: dx (..., C) from dout, xhat (..., C), rstd (..., 1).

    dx = rstd / C (C dxhat - sum(dxhat) - xhat sum(dxhat xhat)), dxhat = dout weight,
    built in one array; the row sums by einsum.
    Neither dout nor xhat is written.

    Shapes: dout, xhat ``(..., C)``, rstd ``(..., 1)``, weight ``(C,)`` -> dx ``(..., C)``.
    Source: Ba et al. 2016; the derivation is chapter 07's. Raises nothing.
    """
    C = xhat.shape[-1]
    dx = dout * weight  # (..., C): dxhat, turned into dx in place
    sum_dxhat = _row_sums(dx)[..., None]  # (..., 1)
    sum_dxhat_xhat = _row_sums(dx, xhat)[..., None]  # (..., 1)
    dx *= C
    dx -= sum_dxhat
    dx -= xhat * sum_dxhat_xhat
    dx *= rstd / C
    return dx


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """``activations.gelu_tanh`` fused: y = 0.5 x (1 + tanh(u)), u = x (c + a c x^2),

    with c = sqrt(2/pi), a = 0.044715: the formula's u = c (x + a x^3), one
    pass shorter, in one temporary. Past |x| ~ 1e19 (float32) x^2 overflows to
    inf and tanh gives +-1, as in the formula (no warning either).

    Shapes: any, 0-d included -> x's shape and dtype. Source: Hendrycks & Gimpel 2016,
    sec. 2. Raises nothing.
    """
    if np.ndim(x) == 0:  # x * x would be a scalar, which out= cannot take: a scalar, as the formula
        return gelu_tanh(np.reshape(x, 1))[0]
    with np.errstate(over="ignore"):
        y = x * x  # x^2, then u, then y, in this one array
        y *= GELU_A * SQRT_2_OVER_PI
        y += SQRT_2_OVER_PI
        y *= x  # u
    np.tanh(y, out=y)
    y += 1.0
    y *= 0.5  # before x: (1 + t) x overflows past half the largest float, 0.5 x does not
    y *= x
    return y


def gelu_tanh_backward(dout: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``activations.gelu_tanh_backward`` fused: dx = dout dy/dx, from x alone:

    dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx,  t = tanh(x (c + a c x^2)),
    du/dx = c + 3 a c x^2, in three temporaries; neither dout nor x is written.

    Shapes: dout and x of one shape -> dx of that shape. Source: Hendrycks & Gimpel
    2016, sec. 2. Raises nothing.
    """
    if np.ndim(x) == 0 and np.ndim(dout) == 0:  # see gelu_tanh
        return gelu_tanh_backward(np.reshape(dout, 1), np.reshape(x, 1))[0]
    with np.errstate(over="ignore"):
        x2 = x * x
        t = x2 * (GELU_A * SQRT_2_OVER_PI)
        t += SQRT_2_OVER_PI
        t *= x  # u
        x2 *= 3 * GELU_A * SQRT_2_OVER_PI
        x2 += SQRT_2_OVER_PI  # du/dx
    np.tanh(t, out=t)
    s = t * t
    np.subtract(1.0, s, out=s)  # 1 - t^2
    s *= x
    s *= x2  # x (1 - t^2) du/dx
    t += 1.0
    t += s
    t *= 0.5  # dy/dx
    t *= dout
    return t


def attention(q, k, v, mask, scale: float, keep):
    """``attention.scaled_dot_product_attention``'s arithmetic fused: (out, probs).

    Same formula (Vaswani et al. 2017, eq. 1): scores = q k^T scale, -inf where a
    bool ``mask`` is False (a float one is added), probs = softmax(scores) row by
    row, out = (probs keep) v. The scores are scaled, masked, shifted by their
    row maximum, exponentiated and normalised in their own array, one pass each
    (the formula makes a new array at every step); the row sums by einsum. A row
    that is all ``-inf`` gives zeros, as the formula's softmax.

    Shapes: q ``(B, H, T_q, d_k)``, k ``(B, H, T_k, d_k)``, v ``(B, H, T_k, d_v)``;
    mask None, bool or float, broadcastable to ``(B, H, T_q, T_k)``; keep None or
    ``(B, H, T_q, T_k)`` -> out ``(B, H, T_q, d_v)``, probs ``(B, H, T_q, T_k)``.
    Raises nothing: ``scaled_dot_product_attention`` checks its arguments first.
    """
    probs = q @ k.swapaxes(-1, -2)  # (B, H, T_q, T_k): the scores, made probs in place below
    probs *= scale
    if mask is not None and mask.dtype == np.bool_:
        np.copyto(probs, -np.inf, where=~mask)  # a masked key gets probability 0
    elif mask is not None:
        probs += mask
    row_max = probs.max(axis=-1, keepdims=True)  # (..., 1)
    row_max[~np.isfinite(row_max)] = 0.0  # a row all -inf: exp(-inf - 0) = 0
    probs -= row_max
    np.exp(probs, out=probs)
    total = _row_sums(probs)[..., None]  # (..., 1)
    total[~(total > 0.0)] = 1.0  # a row of zeros stays zeros (NaN too, as the formula)
    probs /= total
    out = (probs if keep is None else probs * keep) @ v  # (B, H, T_q, d_v)
    return out, probs


def attention_backward(dout: np.ndarray, cache) -> tuple:
    """``attention.scaled_dot_product_attention_backward`` fused: (dq, dk, dv).

    Same formulas, the softmax's Jacobian-vector product dS = P (dP - rowsum(dP P))
    built in dP's own array, its row sums by einsum (no ``dP * P`` temporary), and
    the scale applied to dq and dk in place. ``cache`` is the forward's
    ``AttentionCache`` (q, k, v, probs, keep, scale); nothing in it is written.

    Shapes: dout ``(B, H, T_q, d_v)`` -> dq ``(B, H, T_q, d_k)``, dk ``(B, H, T_k, d_k)``,
    dv ``(B, H, T_k, d_v)``. Source: Vaswani et al. 2017, eq. 1; the derivation is
    chapter 03's. Raises nothing.
    """
    q, k, v, probs, keep, scale = cache
    dropped = probs if keep is None else probs * keep
    dv = dropped.swapaxes(-1, -2) @ dout  # (B, H, T_k, d_v)
    dS = dout @ v.swapaxes(-1, -2)  # (B, H, T_q, T_k): dP, made dS in place below
    if keep is not None:
        dS *= keep
    dS -= _row_sums(dS, probs)[..., None]  # dP - rowsum(dP P)
    dS *= probs
    dq = dS @ k  # (B, H, T_q, d_k)
    dq *= scale
    dk = dS.swapaxes(-1, -2) @ q  # (B, H, T_k, d_k)
    dk *= scale
    return dq, dk, dv


def adamw_update(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay) -> None:
    """``optim.AdamW.step``'s update of one parameter, in place (Loshchilov & Hutter 2019):

    m = beta1 m + (1 - beta1) g,  v = beta2 v + (1 - beta2) g^2,
    p -= lr (m / (1 - beta1^t) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay p).

    The formula's operations in the formula's order, so the same bits (tested),
    with four temporaries (two alive at a time) instead of a dozen, provided every
    operation stays in p's dtype, as the in-place steps round to it: AdamW asks
    :func:`adamw_exact` first. p, m, v: arrays of g's shape, written; g is not.
    t: the step, from 1.
    """
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    g2 = g * g
    g2 *= 1 - beta2
    v += g2
    step = np.divide(v, 1 - beta2**t, out=g2)  # v_hat, then the update, in g2's memory
    np.sqrt(step, out=step)
    step += eps
    np.divide(m / (1 - beta1**t), step, out=step)  # m_hat / (sqrt(v_hat) + eps)
    step += weight_decay * p  # also at 0: 0 * p is NaN where p is not finite, as in the formula
    step *= lr
    p -= step


def adamw_exact(p, g, m, v, lr, beta1, beta2, eps, weight_decay, t=1) -> bool:
    """True when :func:`adamw_update` gives the formula's bits: no operand widens p's dtype.

    Python numbers never widen an array (NEP 50), nor does a NumPy scalar of p's
    dtype or a narrower one; a wider NumPy scalar (an ``np.float64`` learning rate
    with float32 weights, or a NumPy integer step count ``t``, which makes the bias
    corrections ``beta ** t`` NumPy float64 scalars) makes the formula compute in
    float64 and round once at the end, where the in-place form would round after
    every step.

    Shapes: p, g, m, v of one shape; the rest scalars. Source: NEP 50 (NumPy's
    promotion of Python and NumPy scalars). Raises nothing.
    """
    corrections = beta1**t, beta2**t  # as the update computes them
    return np.result_type(p, g, m, v, lr, beta1, beta2, eps, weight_decay, *corrections) == p.dtype


def embedding_backward(grad: np.ndarray, idx: np.ndarray, dout: np.ndarray) -> None:
    """``embedding.Embedding.backward``'s scatter-add: ``grad[idx[i]] += dout[i]`` for every
    position i, an id that occurs n times receiving the sum of its n rows.

    ``np.add.at(grad, idx, dout)`` adds row by row; here the ids are sorted (stable), each
    id's rows summed by one ``np.add.reduceat`` and each sum added to its row once: the
    same sums, grouped differently (equal to rounding; tested). grad ``(V, C)``, written;
    idx ``(...)`` ints in ``[0, V)`` (checked by the forward); dout ``(..., C)``.

    Shapes: as above; returns None (grad is written). Source: the scatter-add of
    ``torch.nn.functional.embedding``'s backward. Raises nothing.
    """
    ids = idx.reshape(-1)  # (N,)
    if ids.size == 0:
        return
    rows = dout.reshape(ids.size, -1)  # (N, C)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_ids[1:] != sorted_ids[:-1])))
    grad[sorted_ids[starts]] += np.add.reduceat(rows[order], starts, axis=0)  # (distinct, C)
